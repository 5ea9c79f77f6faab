"""Digests of the data's values that bind a checkpoint to the rows it was started with (PRIVATE material).

A checkpoint continues a run with the noise it planned. Resumed on data whose values differ, it would add the
same noise to other sums, and two published results would then show the difference of the data without noise.
So a checkpoint stores a SHA-256 of every data variable's values (:func:`value_digests`) and a resume on data
whose digests differ is refused, naming the variable, never a value or a digest. The digests are functions of
every row: they live inside the checkpoint, which is private like the rows, and never in a release, a message or
an attr.

The digest of a variable is that of its declared element type (int as int64, real as float64), its full shape and
its values in row-major order, so rows given as JSON, as arrays or read from a Parquet file one row group at a time
(:class:`ValueDigest` fed piece by piece, ``stan_dp.stan.row_tables.read_row_data(..., keep=False)``) give the same
digest.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

import numpy as np

from .data import Declaration, declared_constraint

__all__ = ["ValueDigest", "value_digests"]


class ValueDigest:
    """The SHA-256 of one data variable's values, fed in row order: the whole array at once or its rows in
    consecutive pieces give the same digest. ``name``, ``is_int`` (the declared element type) and the FULL
    ``shape`` are part of it. PRIVATE."""

    def __init__(self, name: str, is_int: bool, shape: tuple[int, ...]):
        self.dtype = np.int64 if is_int else np.float64
        header = [str(name), "int" if is_int else "real", [int(n) for n in shape]]
        self._hash = hashlib.sha256(json.dumps(header).encode())

    def update(self, values: Any) -> None:
        """Add the next rows (or all of them) in row-major order."""
        self._hash.update(np.ascontiguousarray(values, dtype=self.dtype).tobytes())

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def value_digests(data: Mapping[str, Any], declarations: list[Declaration]) -> dict[str, str]:
    """Variable name -> SHA-256 of its values (``ValueDigest``), for every declared variable present in ``data``.
    Rows left in their file (``stan_dp.stan.row_tables.RowsInFile``, which has a ``row_file``) carry the digest
    computed while they were read and checked. A value
    that is not an array of numbers is digested as its Stan JSON text. PRIVATE: never released."""
    out: dict[str, str] = {}
    for decl in declarations:
        if decl.name not in data:
            continue
        value = data[decl.name]
        if getattr(value, "row_file", None) is not None:  # rows left in their file: no values here
            if getattr(value, "values_digest", None) is None:
                raise ValueError(f"the rows of '{decl.name}' were left in their file without a digest")
            out[decl.name] = value.values_digest
            continue
        is_int = declared_constraint(decl.type_text)[0] == "int"
        try:
            array = np.asarray(value, dtype=np.int64 if is_int else np.float64)
        except (TypeError, ValueError, OverflowError):  # not numbers (e.g. a complex or a tuple type)
            text = json.dumps(value, sort_keys=True, default=str)
            out[decl.name] = hashlib.sha256(f"{decl.name}:{text}".encode()).hexdigest()
            continue
        digest = ValueDigest(decl.name, is_int, array.shape)
        digest.update(array)
        out[decl.name] = digest.hexdigest()
    return out
