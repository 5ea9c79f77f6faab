"""Rows from data frames, Arrow tables, dicts of NumPy arrays and Parquet / CSV files (``stan_dp.stan.row_tables``).

The converter tests read the declarations from the program text (no compiler); one run and the command line use
the bundled logistic program (compiled once per session, as in test_cli.py).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from stan_dp.stan.data import DataError, load_data, parse_declarations, split_rows
from stan_dp.stan.row_tables import RowTableError, read_row_data

from checkpoint_crash import crash_after_writes

ROOT = Path(__file__).resolve().parents[2]
LOGISTIC = ROOT / "stan_models" / "logistic.stan"
DECLARATIONS = parse_declarations(LOGISTIC.read_text())
#: a vector per row, an int bounded by a size the public data may omit, a real with a lower bound
GROUPS = parse_declarations("""
data {
  int<lower=0> N;
  int<lower=1> G;
  int<lower=1> P;
  array[N] vector[P] z;
  array[N] int<lower=1, upper=G> group;
  vector<lower=0>[N] w;
}
""")
PUBLIC = {"prior_sd": 2.5}
#: private values chosen so that their digits are easy to look for in a message
ODD = 98765.4321


def _quotes_no_value(message: str, values: np.ndarray) -> bool:
    """No run of three or more digits of any of ``values`` (printed to six decimals) is in ``message``."""
    private = {d for v in values for d in re.findall(r"\d{3,}", f"{abs(v):.6f}")}
    return not set(re.findall(r"\d{3,}", message)) & private and "98765" not in message


def _rows(n: int = 9, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.integers(0, 2, size=n)


def _columns(x: np.ndarray, y: np.ndarray) -> dict[str, np.ndarray]:
    return {**{f"x.{j + 1}": x[:, j] for j in range(x.shape[1])}, "y": y}


def _json_inputs(x: np.ndarray, y: np.ndarray) -> dict:
    """What the Stan JSON path gives the fit: the data read from JSON text and split into rows."""
    text = json.dumps({"N": len(y), "K": x.shape[1], "x": x.tolist(), "y": y.tolist(), **PUBLIC})
    return split_rows(DECLARATIONS, load_data(text))[1]


def _kinds(x: np.ndarray, y: np.ndarray, tmp_path: Path) -> dict:
    """Every accepted input kind holding the same rows (optional libraries only when installed)."""
    columns = _columns(x, y)
    kinds = {"dict of arrays": columns, "dict with a 2-d column": {"x": x, "y": y},
             "pandas": pd.DataFrame(columns), "pandas list column": pd.DataFrame({"x": list(x), "y": y})}
    pd.DataFrame(columns).to_csv(tmp_path / "rows.csv", index=False)
    kinds["csv"] = tmp_path / "rows.csv"
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        pass
    else:
        kinds["arrow"] = pa.table(columns)
        kinds["arrow list column"] = pa.table({"x": x.tolist(), "y": y})
        pq.write_table(pa.table(columns), tmp_path / "rows.parquet", row_group_size=4)  # several row groups
        kinds["parquet"] = str(tmp_path / "rows.parquet")
    try:
        import polars as pl
    except ImportError:
        pass
    else:
        kinds["polars"] = pl.DataFrame(columns)
        kinds["polars list column"] = pl.DataFrame({"x": x.tolist(), "y": y})
    return kinds


def test_every_input_kind_gives_the_json_paths_fit_inputs(tmp_path):
    """Each input kind (dicts, pandas, CSV, and Arrow / Parquet / polars when installed), merged with the public
    data, gives the same dict of arrays as the Stan JSON path, with N and K set from the rows; the rows are int64 /
    float64 C-contiguous arrays (what the shard engine reads without a copy), and Parquet is read in row groups."""
    x, y = _rows()
    expected = _json_inputs(x, y)
    for kind, rows in _kinds(x, y, tmp_path).items():
        merged = {**PUBLIC, **read_row_data(rows, DECLARATIONS, PUBLIC)}
        got = split_rows(DECLARATIONS, merged)[1]
        assert sorted(got) == sorted(expected), kind
        for name, value in expected.items():
            assert np.array_equal(np.asarray(got[name]), np.asarray(value)), (kind, name)
        assert got["x"].dtype == np.float64 and got["y"].dtype == np.int64 and got["x"].flags.c_contiguous, kind


def test_a_row_range_and_rows_left_in_their_file(tmp_path):
    """``row_range`` returns rows first..stop-1 of every input kind (across Parquet row groups of 4 rows) with
    ``rows`` = their count; ``keep=False`` checks every row of a Parquet file but keeps none: the row variables are
    zero-memory ``RowsInFile`` of the right shape and type whose picklable ``RowFile`` reads any range, a bad value
    anywhere in the file is still caught (naming the column), other inputs are refused, and ``with_rows_read``
    reads the rows back in full."""
    import pickle

    from stan_dp.stan.row_tables import RowsInFile, rows_left_in_file, with_rows_read

    x, y = _rows(n=11)
    kinds = _kinds(x, y, tmp_path)
    for kind, rows in kinds.items():
        for first, stop in ((0, 11), (3, 9), (5, 6), (8, 11)):
            got = read_row_data(rows, DECLARATIONS, PUBLIC, row_range=(first, stop))
            assert got["N"] == stop - first, kind
            np.testing.assert_array_equal(got["x"], x[first:stop])
            np.testing.assert_array_equal(got["y"], y[first:stop])
    with pytest.raises(ValueError, match="row_range"):
        read_row_data(kinds["dict of arrays"], DECLARATIONS, PUBLIC, row_range=(4, 12))
    with pytest.raises(ValueError, match="Parquet"):
        read_row_data(kinds["csv"], DECLARATIONS, PUBLIC, keep=False)
    if "parquet" not in kinds:
        pytest.skip("Parquet needs the optional pyarrow (the tables extra)")
    left = read_row_data(kinds["parquet"], DECLARATIONS, PUBLIC, keep=False)
    assert left["N"] == 11 and left["K"] == 3
    for name, shape, dtype in (("x", (11, 3), np.float64), ("y", (11,), np.int64)):
        assert isinstance(left[name], RowsInFile) and left[name].shape == shape and left[name].dtype == dtype
        assert left[name].strides == (0,) * len(shape)  # one value behind the whole array: no row is held
    row_file = rows_left_in_file(left, ["x", "y"])
    assert row_file is not None and rows_left_in_file({"x": x, "y": y}, ["x", "y"]) is None
    again = pickle.loads(pickle.dumps(row_file))  # what the Ray backend sends an actor
    np.testing.assert_array_equal(again.read(2, 7)["x"], x[2:7])
    np.testing.assert_array_equal(again.read(2, 7)["y"], y[2:7])
    full = with_rows_read({**PUBLIC, **left})
    np.testing.assert_array_equal(full["x"], x)
    assert not isinstance(full["y"], RowsInFile)
    with pytest.raises(ValueError, match="partly"):
        rows_left_in_file({"x": left["x"], "y": y}, ["x", "y"])
    import pyarrow as pa
    import pyarrow.parquet as pq

    bad = _columns(x, y)
    bad["x.2"] = bad["x.2"].copy()
    bad["x.2"][9] = np.inf  # in the last row group
    pq.write_table(pa.table(bad), tmp_path / "bad.parquet", row_group_size=4)
    with pytest.raises(RowTableError, match="Column 'x.2' has missing or non-finite values") as info:
        read_row_data(tmp_path / "bad.parquet", DECLARATIONS, PUBLIC, keep=False)
    assert _quotes_no_value(str(info.value), x.ravel())


def test_the_values_digest_is_the_same_for_every_input_kind_and_sees_one_value(tmp_path):
    """The private digests that bind a checkpoint to its rows (``stan_dp.stan.digests.value_digests``) are the same
    whether the rows come as JSON, as any accepted table or from a Parquet file read one row group at a time and
    left there (``keep=False``: the digest is taken while the rows are checked); one value changed in one row
    changes the digest of that variable only."""
    from stan_dp.stan.digests import value_digests

    x, y = _rows(n=10)
    expected = value_digests(_json_inputs(x, y), DECLARATIONS)
    assert sorted(expected) == ["K", "N", "prior_sd", "x", "y"]
    for name, rows in _kinds(x, y, tmp_path).items():
        merged = split_rows(DECLARATIONS, {**PUBLIC, **read_row_data(rows, DECLARATIONS, PUBLIC)})[1]
        assert value_digests(merged, DECLARATIONS) == expected, name
    if "parquet" in _kinds(x, y, tmp_path):
        left = {**PUBLIC, **read_row_data(str(tmp_path / "rows.parquet"), DECLARATIONS, PUBLIC, keep=False)}
        assert value_digests(left, DECLARATIONS) == expected
        assert left["x"][:3].values_digest is None  # a slice of rows left in the file carries no digest
    x2 = x.copy()
    x2[6, 2] = np.nextafter(x2[6, 2], np.inf)
    changed = value_digests(_json_inputs(x2, y), DECLARATIONS)
    assert [k for k in expected if changed[k] != expected[k]] == ["x"]


def test_sizes_come_from_the_rows_and_are_checked_against_the_public_data():
    """A vector row variable takes its size from the columns when the public data omit it, and an int bound that
    names that size is checked with it; a size or N that the public data give differently is an error naming it."""
    rng = np.random.default_rng(2)
    rows = {"z.1": rng.normal(size=5), "z.2": rng.normal(size=5), "group": np.array([1, 2, 2, 1, 2]),
            "w": rng.random(5)}
    out = read_row_data(rows, GROUPS, {"G": 2})
    assert out["N"] == 5 and out["P"] == 2 and out["z"].shape == (5, 2)
    with pytest.raises(RowTableError, match="row size P"):
        read_row_data(rows, GROUPS, {"G": 2, "P": 3})
    with pytest.raises(RowTableError, match="N = 4"):
        read_row_data(rows, GROUPS, {"G": 2, "N": 4})
    with pytest.raises(RowTableError, match="upper bound of 'group'"):
        read_row_data({**rows, "group": np.array([1, 2, 3, 1, 2])}, GROUPS, {"G": 2})


@pytest.mark.parametrize("case, column, pattern", [
    ("missing", "y", r"'y' has no column"),
    ("extra", "extra_col", r"'extra_col'.*not row variables"),
    ("public", "prior_sd", r"'prior_sd'.*public data"),
    ("not numbers", "y", r"'y' does not hold numbers"),
    ("not integers", "y", r"'y' holds non-integer values"),
    ("non-finite", "x.2", r"'x.2' has missing or non-finite values"),
    ("null", "y", r"'y' has missing or non-finite values"),
    ("out of bounds", "y", r"'y' has values above the declared upper bound"),
])
def test_bad_rows_give_a_named_error_without_values(case, column, pattern):
    """Missing / extra column, a public variable among the rows, the wrong type, non-finite or null values and
    values outside the declared bounds each raise RowTableError (a DataError) naming the column; the message quotes
    no value from the rows and no row index."""
    x, y = _rows()
    frame = pd.DataFrame(_columns(x, y))
    bad_row = 6
    if case == "missing":
        frame = frame.drop(columns="y")
    elif case in ("extra", "public"):
        frame[column] = ODD
    elif case == "not numbers":
        frame["y"] = [f"v{ODD}"] * len(frame)
    elif case == "not integers":
        frame["y"] = frame["y"].astype(float)
        frame.loc[bad_row, "y"] = ODD
    elif case == "non-finite":
        frame.loc[bad_row, "x.2"] = np.inf
    elif case == "null":
        frame["y"] = pd.array(frame["y"], dtype="Int64")
        frame.loc[bad_row, "y"] = pd.NA
    else:
        frame.loc[bad_row, "y"] = int(ODD)
    with pytest.raises(RowTableError, match=pattern) as info:
        read_row_data(frame, DECLARATIONS, PUBLIC)
    assert isinstance(info.value, DataError)
    message = str(info.value)
    assert _quotes_no_value(message, np.concatenate([x.ravel(), [ODD]]))
    assert not re.search(rf"\b{bad_row}\b", message)  # nor the row index


def test_files_and_objects_that_cannot_be_read(tmp_path):
    """A missing file, a file of another kind, an unreadable Parquet file and an unsupported object each give
    RowTableError with the fix."""
    with pytest.raises(RowTableError, match="not found"):
        read_row_data(tmp_path / "nope.parquet", DECLARATIONS, PUBLIC)
    (tmp_path / "rows.json").write_text("{}")
    with pytest.raises(RowTableError, match="neither .parquet nor .csv"):
        read_row_data(tmp_path / "rows.json", DECLARATIONS, PUBLIC)
    with pytest.raises(RowTableError, match="must be a pandas or polars"):
        read_row_data([1, 2, 3], DECLARATIONS, PUBLIC)
    with pytest.raises(RowTableError, match="both in the public data and in row_data"):
        x, y = _rows()
        read_row_data(_columns(x, y), DECLARATIONS, {**PUBLIC, "y": y.tolist()})
    pytest.importorskip("pyarrow", reason="Parquet needs the optional pyarrow (the tables extra)")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(RowTableError, match="cannot be read as Parquet"):
        read_row_data(tmp_path / "broken.parquet", DECLARATIONS, PUBLIC)


RUN = dict(algorithm="penalty", ratio_clip=2.0, epsilon=2.0, delta=1e-5, chains=2, iter_warmup=20,
           iter_sampling=20, seed=5, show_progress=False)


@pytest.mark.stan
@pytest.mark.filterwarnings("ignore:Convergence")  # a 20-iteration run is not converged; the verdict says so
def test_a_data_frame_run_gives_the_json_runs_draws(stan_model):
    """The same seeded run on the same rows, from a pandas DataFrame (N and K from the rows) and from a Stan JSON
    dict, gives identical draws."""
    model = stan_model("logistic")
    x, y = _rows(120, seed=3)
    from_json = model.sample({"N": 120, "K": 3, "x": x.tolist(), "y": y.tolist(), **PUBLIC}, **RUN)
    from_frame = model.sample(PUBLIC, row_data=pd.DataFrame(_columns(x, y)), **RUN)
    for name in ("alpha", "beta"):
        assert np.array_equal(from_json.posterior[name].values, from_frame.posterior[name].values)


@pytest.mark.stan
def test_cli_row_data_parquet_and_a_bad_file_exit_2(stan_model, tmp_path, capsys):
    """`stan-dp sample --row-data rows.parquet` with the public data in --data writes the draws; a Parquet file
    whose int column holds a non-integer exits 2 with one short message naming the column and no private value."""
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the optional pyarrow (the tables extra)")
    import pyarrow.parquet as pq

    from stan_dp.cli import main

    stan_model("logistic")  # compiled once per session
    x, y = _rows(120, seed=4)
    (tmp_path / "public.json").write_text(json.dumps(PUBLIC))
    pq.write_table(pa.table(_columns(x, y)), tmp_path / "rows.parquet")
    fit = tmp_path / "fit.nc"
    argv = ["sample", str(LOGISTIC), "--data", str(tmp_path / "public.json"), "--algorithm", "penalty",
            "--epsilon", "2", "--delta", "1e-5", "--chains", "2", "--iter-warmup", "20", "--iter-sampling", "20",
            "--seed", "3", "--option", "ratio_clip=2.0", "--output", str(fit), "--quiet"]
    assert main([*argv, "--row-data", str(tmp_path / "rows.parquet")]) == 0
    assert fit.exists() and "beta[2]" in capsys.readouterr().out
    bad = _columns(x, y.astype(float))
    bad["y"][7] = ODD
    pq.write_table(pa.table(bad), tmp_path / "bad.parquet")
    assert main([*argv, "--row-data", str(tmp_path / "bad.parquet")]) == 2
    err = capsys.readouterr().err
    assert "'y'" in err and "non-integer" in err and "Traceback" not in err
    assert _quotes_no_value(err, np.concatenate([x.ravel(), [ODD]])) and not re.search(r"\b7\b", err)


@pytest.mark.stan
@pytest.mark.filterwarnings("ignore")  # short runs: the convergence verdict warns
def test_a_checkpointed_row_data_run_resumes_from_its_files(stan_model, tmp_path, monkeypatch):
    """A checkpointed run whose public data and rows are files (JSON + CSV) and that crashes after its first
    checkpoint is resumed by ``stan_dp.resume(DIR)`` alone (both files found through the checkpoint) and gives the
    uninterrupted run's draws; with the rows in a data frame, resume without data asks for them."""
    import stan_dp
    from stan_dp.phases.checkpoint import CheckpointError

    model = stan_model("logistic")
    x, y = _rows(150, seed=5)
    (tmp_path / "public.json").write_text(json.dumps(PUBLIC))
    pd.DataFrame(_columns(x, y)).to_csv(tmp_path / "rows.csv", index=False)
    run = dict(algorithm="dp-sghmc", grad_clip=3.0, epsilon=2.0, delta=1e-5, chains=2, iter_warmup=30,
               iter_sampling=30, seed=3, show_progress=False)
    full = model.sample(str(tmp_path / "public.json"), row_data=str(tmp_path / "rows.csv"), **run)
    with crash_after_writes(monkeypatch):
        model.sample(str(tmp_path / "public.json"), row_data=str(tmp_path / "rows.csv"),
                     checkpoint=tmp_path / "ck", checkpoint_every=20, **run)
    with crash_after_writes(monkeypatch):
        model.sample(PUBLIC, row_data=pd.DataFrame(_columns(x, y)), checkpoint=tmp_path / "ck2",
                     checkpoint_every=20, **run)
    resumed = stan_dp.resume(tmp_path / "ck", show_progress=False)
    for name in ("alpha", "beta"):
        assert np.array_equal(full.posterior[name].values, resumed.posterior[name].values)
    with pytest.raises(CheckpointError, match="row_data"):
        stan_dp.resume(tmp_path / "ck2", show_progress=False)
