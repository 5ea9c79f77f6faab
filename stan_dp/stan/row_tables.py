"""Rows as users hold them: a data frame, an Arrow table, a dict of NumPy arrays, or a Parquet / CSV file, turned
into the NumPy arrays of the program's row variables.

One job: :func:`read_row_data` takes the rows in one of those forms and gives a dict with the row count, each row
variable as a C-contiguous float64 / int64 array shaped as the declaration wants (leading dimension the row
count) and any row size the public data left out. The rest of the pipeline receives that dict exactly as it
receives a Stan JSON dict, and the shard engine reads the arrays without JSON or Python lists.

Columns are named like the row variables. A row variable with one value per row (``vector[N] y``,
``array[N] int y``) is the column ``y``; one with a vector per row (``matrix[N, K] x``, ``array[N] vector[K] x``)
is the columns ``x.1 ... x.K`` (Stan's CSV naming) or one list-typed column ``x``; deeper shapes follow the same
rule (``z.1.1``, ``z.2.1``, ...). The row count (``N``) and the sizes of the rows (``K``) are taken from the
rows when the public data omit them and checked against them when given.

Every value read is checked against its declaration (int columns hold integers, values are finite, declared
bounds hold). The errors name the column and the fix and never quote a value or a row index: both are private.

Parquet files are read one row group at a time into the output arrays (``pyarrow``, the ``tables`` extra), so
the peak memory of a read is the arrays plus one row group. CSV files are read with pandas.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import pandas as pd

from ..suggest import did_you_mean
from .data import DataError, Declaration, declared_constraint, default_row_variables
from .digests import ValueDigest

#: the optional extra that brings pyarrow (Parquet files)
TABLES_EXTRA = "pip install 'stan-dp[tables]'"
#: Stan's int is 32 bits
_INT_LIMIT = 2 ** 31 - 1


class RowTableError(DataError):
    """The row data (data frame, table, dict of arrays or file) do not fit the program's row variables. The
    message names the column and the fix; it quotes no value and no row index."""


def require_pyarrow() -> Any:
    """The ``pyarrow.parquet`` module, or an ImportError that says how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError(f"Reading Parquet files needs pyarrow, which is not installed: {TABLES_EXTRA}") from exc
    return pq


def _release_arrow_memory() -> None:
    """Hand the memory Arrow's pool kept from the row groups back to the system (the rows are in NumPy now)."""
    import pyarrow

    pyarrow.default_memory_pool().release_unused()


# ------------------------------------------------------------------------------------------------ declarations
@dataclass
class _Target:
    """One row variable: its element kind, the size expressions of a row and its declared bounds."""

    name: str
    is_int: bool
    size_exprs: tuple[str, ...]
    bounds: dict[str, str]
    shape: tuple[int, ...] = ()
    #: column name -> index into a row (() for a one-value column; None for a list-typed column)
    columns: dict[str, tuple[int, ...] | None] = field(default_factory=dict)
    array: np.ndarray | None = None


def _element(type_text: str) -> tuple[bool, dict[str, str]]:
    """(int element?, declared bounds as expression texts) of a declared type such as ``array[N] int<lower=0>``
    or ``matrix<lower=-2, upper=2>[N, K]``."""
    keyword, bounds = declared_constraint(type_text)
    return keyword == "int", bounds


def _number(expr: str, public: Mapping[str, Any]) -> float | None:
    """The value of a size or bound expression when it is a literal or the name of a public scalar, else None."""
    expr = expr.strip()
    try:
        return float(expr)
    except ValueError:
        pass
    if expr in public:
        value = np.asarray(public[expr])
        if value.shape == () and value.dtype.kind in "biuf":
            return float(value)
    return None


# ------------------------------------------------------------------------------------------------ sources
@dataclass
class _Source:
    """A table of columns: their names, the number of rows, and the rows in chunks of columns as NumPy arrays
    (``chunks(names, span)`` yields (first row, {name: array}); with a span (first, stop) it may leave out chunks
    that hold none of those rows)."""

    names: list[str]
    n_rows: int | None
    chunks: Callable[..., Iterator[tuple[int, dict[str, np.ndarray]]]]
    what: str


def _module_of(obj: Any) -> str:
    return type(obj).__module__.split(".")[0]


def _pandas_column(frame: Any, name: str) -> np.ndarray:
    series = frame[name]
    if series.isna().any():
        _missing(name)
    return series.to_numpy()


def _polars_column(frame: Any, name: str) -> np.ndarray:
    series = frame.get_column(name)
    if series.null_count():
        _missing(name)
    return series.to_numpy()


def _arrow_column(column: Any, name: str) -> np.ndarray:
    """A pyarrow (chunked) array as NumPy: numbers as they are, a list-typed column as a 2-D array (equal
    lengths checked) or, nested deeper, an object array the shaping step stacks."""
    if column.null_count:
        _missing(name)
    kind = str(column.type)
    if kind.startswith(("list<", "large_list<", "fixed_size_list<")):
        combined = column.combine_chunks() if hasattr(column, "combine_chunks") else column
        if hasattr(combined.type, "list_size"):
            width = int(combined.type.list_size)
        else:
            lengths = np.diff(combined.offsets.to_numpy(zero_copy_only=False))
            if len(lengths) and (lengths != lengths[0]).any():
                raise RowTableError(f"The list-typed column '{name}' has lists of different lengths in some rows; "
                                    "every row needs the same number of entries (the declared row size).")
            width = int(lengths[0]) if len(lengths) else 0
        values = _arrow_column(combined.flatten(), name)
        return values.reshape((len(combined), width) + values.shape[1:])
    return column.to_numpy(zero_copy_only=False)


def _frame_source(obj: Any) -> _Source | None:
    """A source over an in-memory pandas / polars data frame, pyarrow table or dict of arrays (None otherwise)."""
    module = _module_of(obj)
    if module == "pandas" and hasattr(obj, "columns") and hasattr(obj, "iloc"):
        names, n, column = [str(c) for c in obj.columns], len(obj), lambda name: _pandas_column(obj, name)
        if len(set(names)) != len(names) or any(not isinstance(c, str) for c in obj.columns):
            raise RowTableError("The data frame's column names must be distinct strings (the names of the row "
                                "variables, e.g. 'y', 'x.1', 'x.2').")
        what = "the pandas data frame"
    elif module == "polars" and hasattr(obj, "get_column"):
        names, n, column = list(obj.columns), obj.height, lambda name: _polars_column(obj, name)
        what = "the polars data frame"
    elif module == "pyarrow" and hasattr(obj, "column_names"):
        names, n, column = list(obj.column_names), obj.num_rows, lambda name: _arrow_column(obj.column(name), name)
        what = "the Arrow table"
    elif isinstance(obj, Mapping):
        names, n = [str(k) for k in obj], None
        column = lambda name: np.asarray(obj[name])  # noqa: E731
        what = "the dict of arrays"
    else:
        return None

    def chunks(wanted: list[str], span: tuple[int, int] | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        yield 0, {name: column(name) for name in wanted}

    return _Source(names, n, chunks, what)


def _parquet_source(path: Path) -> _Source:
    """A source over a Parquet file, read one row group at a time (only the columns asked for)."""
    pq = require_pyarrow()
    try:
        handle = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises its own error types for unreadable files
        raise RowTableError(f"The row data file {path} cannot be read as Parquet ({type(exc).__name__}). Check that "
                            "it is a Parquet file, or give a .csv file.") from None
    names = list(handle.schema_arrow.names)

    def chunks(wanted: list[str], span: tuple[int, int] | None = None) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        first = 0
        for group in range(handle.num_row_groups):
            count = int(handle.metadata.row_group(group).num_rows)
            if span is not None and (first + count <= span[0] or first >= span[1]):
                first += count  # a row group outside the rows asked for is not read
                continue
            table = handle.read_row_group(group, columns=wanted)
            yield first, {name: _arrow_column(table.column(name), name) for name in wanted}
            first += table.num_rows
            del table
        _release_arrow_memory()

    return _Source(names, int(handle.metadata.num_rows), chunks, f"the Parquet file {path.name}")


def _csv_source(path: Path) -> _Source:
    """A source over a CSV file (header row of column names), read with pandas."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise RowTableError(f"The row data file {path} cannot be read as CSV ({type(exc).__name__}). Check that it is "
                            "a CSV file with a header row of column names.") from None
    source = _frame_source(frame)
    assert source is not None
    source.what = f"the CSV file {path.name}"
    return source


def _open(row_data: Any) -> _Source:
    if isinstance(row_data, (str, os.PathLike)):
        path = Path(os.fspath(row_data))
        if not path.is_file():
            hint = "It is a directory; give a file inside it." if path.is_dir() else "Check the path."
            raise RowTableError(f"Row data file not found: {path}. {hint}")
        suffix = path.suffix.lower()
        if suffix in (".parquet", ".pq"):
            return _parquet_source(path)
        if suffix == ".csv":
            return _csv_source(path)
        raise RowTableError(f"The row data file {path.name} is neither .parquet nor .csv. Give a Parquet or CSV file "
                            "(a Stan JSON file goes in data=, --data on the command line).")
    source = _frame_source(row_data)
    if source is None:
        raise RowTableError(f"row_data must be a pandas or polars data frame, a pyarrow table, a dict of NumPy arrays "
                            f"or the path of a .parquet / .csv file, not {type(row_data).__name__}.")
    return source


# ------------------------------------------------------------------------------------------------ shaping
def _missing(name: str) -> None:
    raise RowTableError(f"Column '{name}' has missing or non-finite values (null, NaN or infinite) in some rows. "
                        "Remove or complete those rows before the run, by a rule that does not look at the other "
                        "rows' values.")


def _match_columns(targets: list[_Target], names: list[str], public: Mapping[str, Any], what: str) -> None:
    """Assign every column to a row variable (``x`` or ``x.1.2``), naming a missing or extra column."""
    by_name = {t.name: t for t in targets}
    extra = []
    for name in names:
        if name in by_name:
            by_name[name].columns[name] = None
            continue
        base, _, tail = name.partition(".")
        if base in by_name and tail and all(p.isdigit() and int(p) >= 1 for p in tail.split(".")):
            by_name[base].columns[name] = tuple(int(p) - 1 for p in tail.split("."))
        else:
            extra.append(name)
    if extra:
        public_ones = [n for n in extra if n in public or n.split(".")[0] in public]
        hint = (f" ({', '.join(public_ones)} {'is' if len(public_ones) == 1 else 'are'} public data: give "
                f"{'it' if len(public_ones) == 1 else 'them'} in data=, not among the rows)") if public_ones else ""
        raise RowTableError(
            f"Column(s) {', '.join(repr(n) for n in extra)} of {what} are not row variables of the program"
            f"{hint}{did_you_mean(extra[0].split('.')[0], list(by_name))}. Drop them from the rows, or rename them "
            f"after the row variables ({', '.join(by_name)}; 'x.1', 'x.2', ... for a vector per row).")
    for target in targets:
        rank = len(target.size_exprs)
        if not target.columns:
            form = f"'{target.name}'" if rank == 0 else \
                f"'{target.name}.1', '{target.name}.2', ... or one list-typed column '{target.name}'"
            raise RowTableError(f"Row variable '{target.name}' has no column in {what}: expected {form}. Add the "
                                f"column(s), or rename the existing ones after the row variable.")
        plain = [c for c, idx in target.columns.items() if idx is None]
        if plain and len(target.columns) > 1:
            raise RowTableError(f"Row variable '{target.name}' is given twice in {what}: as the column "
                                f"'{target.name}' and as indexed columns '{target.name}.1', ... Keep one form.")
        if not plain and any(len(idx or ()) != rank for idx in target.columns.values()):
            raise RowTableError(f"The columns of row variable '{target.name}' need {rank} index(es) each "
                                f"('{target.name}" + ".1" * rank + "'), as its declaration has "
                                f"{rank} size(s) after the row count.")
        if rank == 0 and not plain:
            raise RowTableError(f"Row variable '{target.name}' holds one value per row: name its column "
                                f"'{target.name}', without an index.")


def _set_sizes(targets: list[_Target], public: Mapping[str, Any], sizes: dict[str, int],
               list_width: Callable[[_Target], tuple[int, ...]]) -> None:
    """Fix each row variable's row shape: from public sizes, else from its columns; record the sizes set here."""
    for target in targets:
        from_columns: tuple[int, ...]
        if target.size_exprs and None in target.columns.values():
            from_columns = list_width(target)
        elif target.size_exprs:
            idx = np.array(list(target.columns.values()))
            from_columns = tuple(int(v) for v in idx.max(axis=0) + 1)
            if len(target.columns) != int(np.prod(from_columns)):
                raise RowTableError(f"The indexed columns of row variable '{target.name}' leave gaps: give every "
                                    f"index from '{target.name}" + ".1" * len(from_columns) + "' to '"
                                    f"{target.name}." + ".".join(map(str, from_columns)) + "'.")
        else:
            from_columns = ()
        shape = []
        for expr, found in zip(target.size_exprs, from_columns):
            known = _number(expr, {**public, **sizes})
            if known is None:
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", expr.strip()):
                    raise RowTableError(f"Row variable '{target.name}' has a row size '{expr}' that stan-dp cannot "
                                        "work out from the columns; give the sizes it uses in the public data.")
                sizes[expr.strip()] = found
                known = found
            if int(known) != found:
                raise RowTableError(f"Row variable '{target.name}' has {found} entries per row in the row data, but "
                                    f"its declared row size {expr} is {int(known)} in the public data. Make them agree "
                                    f"(or leave {expr} out of the public data to take it from the columns).")
            shape.append(found)
        target.shape = tuple(shape)


def _check_values(target: _Target, column: str, values: np.ndarray, public: Mapping[str, Any]) -> np.ndarray:
    """``values`` checked against the declaration of ``target`` and cast to int64 / float64; errors name
    ``column`` and quote no value."""
    kind = values.dtype.kind
    if kind not in "biuf":
        raise RowTableError(f"Column '{column}' does not hold numbers (its type is {values.dtype}); row variable "
                            f"'{target.name}' needs {'integers' if target.is_int else 'real numbers'}. Convert the "
                            "column to a numeric type.")
    if kind == "f" and not np.isfinite(values).all():
        _missing(column)
    if target.is_int:
        if kind == "f" and (values != np.floor(values)).any():
            raise RowTableError(f"Column '{column}' holds non-integer values in some rows, but the program declares "
                                f"'{target.name}' as int. Give the column integer values (an integer type).")
        if kind in "iuf" and values.size and (np.abs(values) > _INT_LIMIT).any():
            raise RowTableError(f"Column '{column}' holds values outside Stan's int range in some rows; the program "
                                f"declares '{target.name}' as int.")
        values = values.astype(np.int64, copy=False)
    else:
        values = values.astype(np.float64, copy=False)
    for key, side in (("lower", "below"), ("upper", "above")):
        if key not in target.bounds:
            continue
        bound = _number(target.bounds[key], public)
        if bound is None:
            continue  # an expression stan-dp does not evaluate: Stan checks it when the instances are built
        outside = (values < bound) if key == "lower" else (values > bound)
        if outside.any():
            raise RowTableError(f"Column '{column}' has values {side} the declared {key} bound of '{target.name}' "
                                f"({key}={target.bounds[key]}) in some rows. Fix or remove those rows before the "
                                "run (by a rule that does not look at the other rows), or change the declared bound.")
    return values


def _fill(target: _Target, first: int, columns: dict[str, np.ndarray], public: Mapping[str, Any]) -> None:
    """Write one chunk of ``target``'s columns into its output array, checking the values."""
    assert target.array is not None
    for column, idx in target.columns.items():
        values = columns[column]
        count = values.shape[0]
        if idx is None and target.shape:
            if values.dtype == object:
                try:
                    values = np.stack([np.asarray(v) for v in values]) if count else values
                except ValueError:
                    values = None  # type: ignore[assignment]
            if values is None or values.shape[1:] != target.shape:
                raise RowTableError(f"The list-typed column '{column}' does not hold {target.shape} entries in every "
                                    f"row (the declared row size of '{target.name}'). Give every row the same, "
                                    "declared number of entries.")
            target.array[first:first + count] = _check_values(target, column, values, public)
        else:
            if values.ndim != 1:
                raise RowTableError(f"Column '{column}' must hold one number per row (row variable "
                                    f"'{target.name}').")
            target.array[(slice(first, first + count),) + (idx or ())] = _check_values(target, column, values, public)


def read_row_data(
    row_data: Any,
    declarations: list[Declaration],
    public: Mapping[str, Any] | None = None,
    *,
    rows: str = "N",
    row_variables: list[str] | None = None,
    row_range: tuple[int, int] | None = None,
    keep: bool = True,
) -> dict[str, Any]:
    """The program's row variables from a data frame, an Arrow table, a dict of arrays or a Parquet / CSV file.

    Args:
        row_data: a pandas or polars DataFrame, a pyarrow Table, a dict of NumPy arrays (one entry per column), or
            the path of a ``.parquet`` or ``.csv`` file. Columns are named like the row variables (``x.1 ... x.K``
            or one list-typed column ``x`` for a vector per row).
        declarations: the program's data declarations (``stan_dp.stan.data.parse_declarations``).
        public: the public data (sizes, hyper-parameters). They must not hold the row variables.
        rows: the name of the row-count variable.
        row_variables: the row variables (default: those whose first declared size is ``rows``).
        row_range: (first, stop): read, check and return only rows first..stop-1 (``rows`` is then stop - first);
            a Parquet file's row groups outside them are not read.
        keep: False: read and check every row (one row group at a time) but keep none: each row variable is then a
            ``RowsInFile`` of the right shape and type that costs no memory and holds NO row values, only the
            ``RowFile`` an engine reads its rows from (a Parquet file only; ``ValueError`` otherwise).

    Returns:
        ``{rows: N, <row variable>: array, ..., <size>: value}``: every row variable as a C-contiguous int64 /
        float64 array of shape (N, *row shape), N, and the row sizes the public data omitted (read from the column
        names or the list lengths). Merge it with the public data to get the program's data.

    Raises:
        RowTableError: a file that does not exist or cannot be read, a missing or extra column, a column of the
            wrong type, missing or non-finite values, values outside declared bounds, or a row count / size that
            disagrees with the public data. The message names the column and quotes no value from the rows.
        ImportError: a Parquet file without pyarrow installed (``pip install 'stan-dp[tables]'``).
    """
    public = dict(public or {})
    if not keep and not is_parquet_path(row_data):
        raise ValueError("keep=False leaves the rows in their file: row_data must be the path of a Parquet file")
    names, targets = _row_targets(declarations, public, rows, row_variables)
    source = _open(row_data)
    _match_columns(targets, source.names, public, source.what)
    wanted = [c for t in targets for c in t.columns]
    n_rows = source.n_rows
    chunks = source.chunks(wanted, None if row_range is None else (int(row_range[0]), int(row_range[1])))
    first_chunk = None
    if n_rows is None:  # a dict of arrays: the row count is the columns' common length
        first_chunk = next(chunks)
        n_rows = _dict_row_count(first_chunk[1])

    def list_width(target: _Target) -> tuple[int, ...]:
        nonlocal first_chunk
        if first_chunk is None:
            first_chunk = next(chunks)
        values = first_chunk[1][target.name]
        if values.dtype == object:
            return np.shape(np.asarray(values[0])) if len(values) else tuple(0 for _ in target.size_exprs)
        return values.shape[1:]

    if n_rows < 1:
        raise RowTableError(f"{source.what} holds no rows; a private run needs at least one row.")
    sizes: dict[str, int] = {}
    _set_sizes(targets, public, sizes, list_width)
    _check_public_row_count(public, rows, n_rows)
    known = {**public, **sizes}  # for bounds such as upper=K with K set from the columns
    lo, hi = (0, int(n_rows)) if row_range is None else (int(row_range[0]), int(row_range[1]))
    if not 0 <= lo < hi <= n_rows:
        raise ValueError(f"row_range {row_range!r} is not a non-empty range of the {n_rows} rows")
    for target in targets:
        target.array = np.empty(((hi - lo) if keep else 0,) + target.shape,
                                dtype=np.int64 if target.is_int else np.float64)

    # rows left in their file: each variable's digest (stan_dp.stan.digests) is taken as its rows are checked,
    # since no array of them is kept to take it from later
    digests = {} if keep else {t.name: ValueDigest(t.name, t.is_int, (hi - lo,) + t.shape) for t in targets}
    if first_chunk is not None:
        _take(targets, *first_chunk, lo, hi, keep, known, digests)
        first_chunk = None
    for first, columns in chunks:
        _take(targets, first, columns, lo, hi, keep, known, digests)
        del columns
    out: dict[str, Any] = {rows: hi - lo, **sizes}
    if keep:
        out.update({t.name: t.array for t in targets})
    else:
        row_file = RowFile(os.path.abspath(os.fspath(row_data)), tuple(declarations), public, rows, tuple(names))
        out.update({t.name: RowsInFile.of(t.array.dtype, (hi - lo,) + t.shape, row_file,
                                          digests[t.name].hexdigest()) for t in targets})
    return out


def _row_targets(declarations: list[Declaration], public: Mapping[str, Any], rows: str,
                 row_variables: list[str] | None) -> tuple[list[str], list[_Target]]:
    """The row variables to read (``row_variables``, default: those whose first declared size is ``rows``) and
    their targets, from the declarations alone (no row is read): RowTableError for none, an undeclared name or a
    variable the public data give too."""
    declared = {d.name: d for d in declarations}
    names = list(row_variables) if row_variables is not None else default_row_variables(declarations, rows)
    if not names:
        raise RowTableError(f"The program declares no row variable (no data variable whose first size is {rows}); "
                            "there is nothing to read from row_data. Pass the data in data= instead.")
    unknown = [n for n in names if n not in declared]
    if unknown:
        raise RowTableError(f"row_variables names undeclared data: {', '.join(unknown)}.")
    twice = [n for n in names if n in public]
    if twice:
        raise RowTableError(f"Row variable(s) {', '.join(twice)} are given both in the public data and in row_data. "
                            "Give the rows only in row_data.")
    targets = []
    for name in names:
        is_int, bounds = _element(declared[name].type_text)
        targets.append(_Target(name, is_int, declared[name].sizes[1:], bounds))
    return names, targets


def _dict_row_count(columns: dict[str, np.ndarray]) -> int:
    """The row count of a dict of arrays: its columns' common length (RowTableError for a scalar column or for
    columns of different lengths)."""
    lengths = {c: np.shape(v)[0] if np.ndim(v) else None for c, v in columns.items()}
    for column, length in lengths.items():
        if length is None:
            raise RowTableError(f"Column '{column}' of the dict of arrays is a scalar; give one entry per row.")
    if len(set(lengths.values())) > 1:
        raise RowTableError(f"The columns of the dict of arrays have different lengths ({', '.join(lengths)}); "
                            "every column needs one entry per row.")
    n_rows = next(iter(lengths.values()))
    assert n_rows is not None
    return n_rows


def _check_public_row_count(public: Mapping[str, Any], rows: str, n_rows: int) -> None:
    """RowTableError when the public data give the row count ``rows`` and it is not the rows' count."""
    if rows in public:
        given = np.asarray(public[rows])
        if given.shape != () or given.dtype.kind not in "iu" or int(given) != n_rows:
            raise RowTableError(f"The public data give {rows} = {public[rows]!r}, but the row data hold {n_rows} rows. "
                                f"Leave {rows} out of the public data (it is set from the rows), or make them agree.")


def _take(targets: list[_Target], first: int, columns: dict[str, np.ndarray], lo: int, hi: int, keep: bool,
          known: Mapping[str, Any], digests: dict[str, ValueDigest]) -> None:
    """Check one chunk (its first row ``first``) and write its rows in [lo, hi) into every target's array; with
    ``keep`` False they are checked in a scratch array of this chunk's rows, added to the variable's digest and
    dropped."""
    count = len(next(iter(columns.values())))
    a, b = max(first, lo), min(first + count, hi)
    if a >= b:
        return
    part = columns if (a, b) == (first, first + count) else {c: v[a - first:b - first] for c, v in columns.items()}
    for target in targets:
        if not keep:  # checked in a scratch array of this chunk's rows, then dropped
            target.array = np.empty((b - a,) + target.shape, dtype=target.array.dtype)
        _fill(target, a - lo if keep else 0, part, known)
        if not keep:
            digests[target.name].update(target.array)


def is_parquet_path(row_data: Any) -> bool:
    """Whether ``row_data`` names a Parquet file (by its suffix, as ``read_row_data`` reads it)."""
    return isinstance(row_data, (str, os.PathLike)) and Path(os.fspath(row_data)).suffix.lower() in (".parquet", ".pq")


@dataclass(frozen=True)
class RowFile:
    """Rows left in their Parquet file (``read_row_data(..., keep=False)``): its absolute path, the program's declarations
    and the public data, so that an engine can read and check a range of the rows itself (the Ray backend's
    actors each read their shard). Holds no row value."""

    path: str
    declarations: tuple[Declaration, ...]
    public: dict[str, Any]
    rows: str
    row_variables: tuple[str, ...]

    def read(self, first: int, stop: int) -> dict[str, np.ndarray]:
        """The row variables of rows first..stop-1, read and checked as ``read_row_data`` does."""
        out = read_row_data(self.path, list(self.declarations), self.public, rows=self.rows,
                            row_variables=list(self.row_variables), row_range=(first, stop))
        return {name: out[name] for name in self.row_variables}


class RowsInFile(np.ndarray):
    """A row variable whose rows were checked but left in their file: an array of the variable's shape and type
    backed by a single zero (a broadcast view, no memory per row), with ``row_file`` to read the rows from. Its
    values are NOT the rows; only code that reads ``row_file`` may use it (``rows_left_in_file``).
    ``values_digest``: the digest of the rows' values taken as they were read (``stan_dp.stan.digests``; PRIVATE),
    on the whole variable only (None on a slice of it)."""

    row_file: RowFile | None = None
    values_digest: str | None = None

    @classmethod
    def of(cls, dtype: Any, shape: tuple[int, ...], row_file: RowFile, values_digest: str | None = None
           ) -> "RowsInFile":
        view = np.broadcast_to(np.zeros((), dtype=dtype), shape).view(cls)
        view.row_file = row_file
        view.values_digest = values_digest
        return view

    def __array_finalize__(self, obj: Any) -> None:
        self.row_file = getattr(obj, "row_file", None)
        self.values_digest = None


def rows_left_in_file(data: Mapping[str, Any], names: Any) -> RowFile | None:
    """The ``RowFile`` the row variables ``names`` of ``data`` were left in (``read_row_data(..., keep=False)``),
    or None when they hold their rows."""
    files = {id(v.row_file): v.row_file for n in names if isinstance(v := data.get(n), RowsInFile)}
    if not files:
        return None
    if len(files) > 1 or any(not isinstance(data.get(n), RowsInFile) for n in names):
        raise ValueError("the row variables are partly left in a file: read them all, or leave them all there")
    return next(iter(files.values()))


def with_rows_read(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the row variables left in their file (``RowsInFile`` values) read in full, for code that
    needs their values on this side (e.g. dp-ssp's sums); ``data`` as it is when it holds its rows."""
    left = [name for name, value in data.items() if isinstance(value, RowsInFile)]
    row_file = rows_left_in_file(data, left)
    if row_file is None:
        return dict(data)
    return {**data, **row_file.read(0, int(np.shape(data[left[0]])[0]))}
