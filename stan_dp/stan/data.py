"""Model data: loading (dict, Stan JSON text or path), the declared data block, and the row split.

Data are a set of rows (individuals). The row count is an int data variable (default ``N``); every data
variable whose first declared size is that variable is a *row variable* (one entry per row); all other data
are public. The split is read from the program's declared data block (stanc's canonical printing) and may be
overridden. Neighbouring data sets differ by substituting one row; N is public.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import stanio

from ..suggest import closest, did_you_mean

DataInput = "Mapping[str, Any] | str | os.PathLike"


class DataError(ValueError):
    """The data do not fit the Stan program or the row contract; the message names the variable and fix."""


@dataclass(frozen=True)
class Declaration:
    """One declared data variable: name, Stan type text and the first size expression (or None); ``sizes``
    holds every size expression, array sizes first (``array[N] vector[K]`` gives ``("N", "K")``)."""

    name: str
    type_text: str
    first_size: str | None
    n_dims: int
    sizes: tuple[str, ...] = ()


def load_data(data: Any) -> dict[str, Any]:
    """Read data given as a dict, a Stan JSON string or the path of a JSON file into a dict of arrays."""
    if data is None:
        return {}
    if isinstance(data, Mapping):
        return dict(data)
    if isinstance(data, (str, os.PathLike)):
        text = os.fspath(data)
        if text.lstrip().startswith("{"):
            try:
                return dict(json.loads(text))
            except json.JSONDecodeError as exc:
                raise DataError(f"The data string is not valid JSON: {exc}") from exc
        path = Path(text)
        if not path.is_file():
            raise DataError(f"Data file not found: {path}. Pass a dict, a JSON string or an existing JSON file.")
        try:
            return dict(json.loads(path.read_text()))
        except json.JSONDecodeError as exc:
            raise DataError(f"The data file {path} is not valid JSON: {exc}") from exc
    raise DataError(f"Data must be a dict, a Stan JSON string or a path, not {type(data).__name__}.")


def to_json(data: Mapping[str, Any]) -> str:
    """Stan JSON text for a dict of data (via stanio)."""
    return stanio.dump_stan_json(dict(data))


_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def _block(program: str, name: str) -> str | None:
    """Text inside ``name { ... }`` at the top level of a (canonical) program, braces balanced."""
    text = _COMMENT.sub("", program)
    match = re.search(rf"(?m)^\s*{re.escape(name)}\s*\{{", text)
    if not match:
        return None
    depth, start = 1, match.end()
    for pos in range(start, len(text)):
        if text[pos] == "{":
            depth += 1
        elif text[pos] == "}":
            depth -= 1
            if depth == 0:
                return text[start:pos]
    return None


def bracket_args(text: str, open_pos: int) -> tuple[list[str], int]:
    """Split the bracketed list opened at ``text[open_pos]`` (``[`` or ``<``) at its top-level commas; returns the
    parts and the position after the closing bracket. Nested ``[]``, ``()`` and ``<>`` are kept whole."""
    opener = text[open_pos]
    closer = {"[": "]", "<": ">"}[opener]
    depth, parts, current = 0, [], []
    for pos in range(open_pos, len(text)):
        ch = text[pos]
        if ch in "[(<":
            depth += 1
            if depth == 1 and ch == opener:
                continue
        elif ch in "])>":
            depth -= 1
            if depth == 0 and ch == closer:
                parts.append("".join(current).strip())
                return parts, pos + 1
        if depth == 1 and ch == ",":
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    raise ValueError("unbalanced brackets")


def declared_constraint(type_text: str) -> tuple[str, dict[str, str]]:
    """The element keyword of a declared type and its declared ``lower`` / ``upper`` bounds as expression texts:
    ``array[N] int<lower=0>`` gives ("int", {"lower": "0"}), ``matrix<lower=-2, upper=2>[N, K]`` gives
    ("matrix", {"lower": "-2", "upper": "2"}); other constraint keys (offset, multiplier) are left out. The one
    reader of declared bounds: callers turn the texts into numbers as they need."""
    text = type_text.strip()
    if text.startswith("array"):
        text = text[bracket_args(text, text.index("["))[1]:].strip()
    kind = re.match(r"[A-Za-z_]+", text)
    keyword = kind.group(0) if kind else ""
    rest = text[len(keyword):].lstrip()
    bounds: dict[str, str] = {}
    if rest.startswith("<"):
        for part in bracket_args(rest, 0)[0]:
            key, sep, value = part.partition("=")
            if sep and key.strip() in ("lower", "upper"):
                bounds[key.strip()] = value.strip()
    return keyword, bounds


def _skip_angle(text: str, pos: int) -> int:
    """Skip a balanced ``<...>`` constraint starting at ``pos`` (if any)."""
    while pos < len(text) and text[pos].isspace():
        pos += 1
    if pos < len(text) and text[pos] == "<":
        depth = 0
        for end in range(pos, len(text)):
            if text[end] == "<":
                depth += 1
            elif text[end] == ">":
                depth -= 1
                if depth == 0:
                    return end + 1
    return pos


def parse_declarations(program: str, block: str = "data") -> list[Declaration]:
    """Declarations of a program block: name, type and the first size expression of each variable."""
    body = _block(program, block)
    if body is None:
        return []
    out = []
    for statement in body.split(";"):
        statement = " ".join(statement.split())
        if not statement:
            continue
        name = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", statement)[-1]
        type_text = statement[: statement.rfind(name)].strip()
        sizes: list[str] = []
        pos = 0
        if type_text.startswith("array"):
            parts, pos = bracket_args(type_text, type_text.index("["))
            sizes.extend(parts)
        rest = type_text[pos:].strip()
        kind = re.match(r"[A-Za-z_]+", rest)
        if kind:
            after = _skip_angle(rest, kind.end())
            while after < len(rest) and rest[after].isspace():
                after += 1
            if after < len(rest) and rest[after] == "[":
                parts, _ = bracket_args(rest, after)
                sizes.extend(parts)
        out.append(Declaration(name, type_text, sizes[0] if sizes else None, len(sizes), tuple(sizes)))
    return out


@dataclass(frozen=True)
class RowSplit:
    """The row count variable, the row variables and the public variables of a data set."""

    count_name: str
    n_rows: int
    row_variables: tuple[str, ...]
    public_variables: tuple[str, ...]


def split_rows(
    declarations: list[Declaration],
    data: Mapping[str, Any],
    *,
    rows: str = "N",
    row_variables: list[str] | None = None,
) -> tuple[RowSplit, dict[str, Any]]:
    """Check the data against the declarations and split them into rows and public data.

    Returns the split and the data restricted to declared variables (undeclared ones are ignored).
    """
    declared = {d.name: d for d in declarations}
    if rows not in declared:
        ints = [d.name for d in declarations if d.type_text.startswith("int") and not d.n_dims]
        raise DataError(
            f"The program declares no data variable '{rows}' for the row count{did_you_mean(rows, ints)}. Declare "
            f"'int<lower=0> {rows};' in the data block, or name the row-count variable with rows=<name> (--rows on "
            "the command line)."
        )
    decl = declared[rows]
    if not decl.type_text.startswith("int") or decl.n_dims:
        raise DataError(f"The row count '{rows}' must be declared as a scalar int ('int<lower=0> {rows};').")
    missing = [name for name in declared if name not in data]
    if missing:
        undeclared = [str(key) for key in data if key not in declared]
        typos = [f"'{key}' (did you mean {name}?)" for name in missing
                 if (key := closest(name, undeclared)) is not None]
        instead = f"; the data have {', '.join(typos)}, which the program does not declare" if typos else ""
        raise DataError(f"Data variable(s) {', '.join(missing)} declared by the program are missing from the "
                        f"data{instead}.\nAdd them to the data, or correct the names in the data file.")
    kept = {name: data[name] for name in declared}
    n_value = np.asarray(kept[rows])
    if n_value.shape != () or not np.issubdtype(n_value.dtype, np.integer):
        raise DataError(f"The row count '{rows}' must be a single integer, got {kept[rows]!r}.")
    n_rows = int(n_value)
    if n_rows < 1:
        raise DataError(f"The row count '{rows}' is {n_rows}; a private run needs at least one row.")
    if row_variables is None:
        row_vars = default_row_variables(declarations, rows)
    else:
        unknown = [v for v in row_variables if v not in declared]
        if unknown:
            raise DataError("row_variables names undeclared data: "
                            f"{', '.join(v + did_you_mean(v, declared) for v in unknown)}.")
        if rows in row_variables:
            raise DataError(f"row_variables lists the row count '{rows}' itself; list only the per-row data.")
        # A row instance has rows = 1, so a variable declared with leading size `rows` must be split by row.
        left_out = [d.name for d in declarations
                    if d.first_size is not None and d.first_size.strip() == rows and d.name not in row_variables]
        if left_out:
            raise DataError(
                f"row_variables leaves out {', '.join(left_out)}, declared with leading size {rows}: every row "
                f"instance has {rows} = 1, so each variable sized by {rows} must be a row variable. Add it to "
                "row_variables (--row-variables on the command line), or omit it to use the split read from the data block."
            )
        row_vars = list(row_variables)
    for name in row_vars:
        shape = np.shape(kept[name])
        if not shape or shape[0] != n_rows:
            lead = shape[0] if shape else "none (a scalar)"
            raise DataError(
                f"Row variable '{name}' has leading dimension {lead}, but {rows} = {n_rows}: every row variable "
                f"needs one entry per row.\nFix the data so that '{name}' has {n_rows} entries (one per row), or set "
                f"{rows} to the number of rows it holds."
            )
    public = tuple(name for name in declared if name not in row_vars and name != rows)
    return RowSplit(rows, n_rows, tuple(row_vars), public), kept


def default_row_variables(declarations: list[Declaration], rows: str = "N") -> list[str]:
    """The row variables read from the data block: every variable whose first declared size is ``rows``."""
    return [d.name for d in declarations if d.first_size is not None and d.first_size.strip() == rows]


def row_range_data(split: RowSplit, data: Mapping[str, Any], first: int, count: int) -> dict[str, Any]:
    """The data restricted to rows [first, first + count): N = count and every row variable sliced (public data
    unchanged)."""
    out = dict(data)
    out[split.count_name] = int(count)
    for name in split.row_variables:
        out[name] = data[name][first:first + count]
    return out


def prior_data(split: RowSplit, data: Mapping[str, Any]) -> dict[str, Any]:
    """The data of the prior instance: N = 0 and every row variable empty (public data unchanged)."""
    out = dict(data)
    out[split.count_name] = 0
    for name in split.row_variables:
        out[name] = np.zeros((0,) + np.shape(data[name])[1:])
    return out
