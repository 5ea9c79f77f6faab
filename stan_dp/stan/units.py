"""The privacy unit of a Stan program's data: which data variable labels the rows of one unit, checked against the
program before any row meets a mechanism (``stan_dp.privacy.units`` does the grouping).

A unit variable is an int array with one entry per row (``array[N] int person;`` in the data block, or a data
entry the program does not declare). It may only LABEL rows: a variable the program itself uses (in any block
after the data block) is refused, because then the labels are modelled data and the "substitute all rows of one
unit" relation would have to cover them as well. Error messages name the variable, never its values.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

import numpy as np

from .data import DataError, Declaration, did_you_mean

__all__ = ["resolve_privacy_unit", "program_uses"]

#: the name recorded for a unit given as an array rather than by a data variable's name
ARRAY_UNIT_NAME = "unit"


def _without_data_block(program: str) -> str:
    """The program text without its ``data { ... }`` block (the canonical printing puts it at column 0)."""
    match = re.search(r"(?m)^data\s*\{", program)
    if match is None:
        return program
    depth, pos = 0, match.end() - 1
    for pos in range(match.end() - 1, len(program)):
        if program[pos] == "{":
            depth += 1
        elif program[pos] == "}":
            depth -= 1
            if depth == 0:
                break
    return program[:match.start()] + program[pos + 1:]


def program_uses(program: str, name: str) -> bool:
    """Whether the (canonically printed, comment-free) ``program`` refers to ``name`` outside its data block
    (string literals of print / reject statements are not references)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', _without_data_block(program))
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def _labels(values: Any, what: str, n_rows: int | None) -> np.ndarray:
    """``values`` as a 1-d int array of length ``n_rows`` (when known), else DataError naming ``what``."""
    try:
        array = np.asarray(values)
    except Exception:  # ragged lists and the like
        raise DataError(f"{what} must be an int array with one entry per row.") from None
    if array.ndim != 1:
        raise DataError(f"{what} must be a one-dimensional int array with one entry per row, got "
                        f"{array.ndim} dimensions.")
    if array.dtype == bool or not np.issubdtype(array.dtype, np.integer):
        kind = "reals" if array.dtype.kind == "f" else f"values of type {array.dtype}"
        raise DataError(f"{what} must hold integers (one unit label per row), not {kind}.")
    if n_rows is not None and array.size != n_rows:
        raise DataError(f"{what} has {array.size} entries but there are {n_rows} rows; it needs one label per row.")
    return array.astype(np.int64)


def resolve_privacy_unit(unit: Any, data: Mapping[str, Any], declarations: list[Declaration], program: str, *,
                         rows: str = "N") -> tuple[np.ndarray, str]:
    """``(labels, name)`` of the privacy unit ``unit``: the name of a data variable in ``data`` (checked against
    its declaration in ``declarations`` and its uses in the canonical ``program``) or an int array with one entry
    per row (recorded as ``"unit"``). ``rows``: the row-count variable.

    Raises DataError naming the variable: unknown, not an int array of length N, or used by the program.
    """
    raw_n = data.get(rows)
    n_rows = int(raw_n) if isinstance(raw_n, (int, np.integer)) and not isinstance(raw_n, bool) else None
    if not isinstance(unit, str):
        return _labels(unit, "privacy_unit", n_rows), ARRAY_UNIT_NAME
    declared = {d.name: d for d in declarations}
    if unit not in data:
        candidates = [d.name for d in declarations if d.n_dims == 1 and (d.first_size or "").strip() == rows
                      and "int" in d.type_text] + [str(k) for k in data if k not in declared]
        raise DataError(f"privacy_unit '{unit}' is not a variable of the data{did_you_mean(unit, candidates)}. Name "
                        f"an int array with one label per row (e.g. 'array[{rows}] int<lower=0> {unit};' in the "
                        "data block and in the data).")
    if unit == rows:
        raise DataError(f"privacy_unit '{unit}' is the row count; name the int array that labels each row's unit.")
    decl = declared.get(unit)
    if decl is not None:
        base_type = re.sub(r"^array\[.*\]\s*", "", decl.type_text)
        if decl.n_dims != 1 or not base_type.startswith("int") or (decl.first_size or "").strip() != rows:
            raise DataError(f"privacy_unit '{unit}' is declared '{decl.type_text} {unit}'; a privacy unit must be "
                            f"declared 'array[{rows}] int {unit};' (one integer label per row).")
        if program_uses(program, unit):
            raise DataError(f"privacy_unit '{unit}' is used by the program beyond its declaration (it is a "
                            "modelled variable); a privacy unit may only label rows. Give the program's variable "
                            "another name, or pass a separate label array that the program does not use.")
    return _labels(data[unit], f"privacy_unit '{unit}'", n_rows), unit
