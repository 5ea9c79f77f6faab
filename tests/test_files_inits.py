"""Nothing lost (output checked before any row is read; a fallback file when writing fails after the run) and
inits the Stan way (dicts of constrained values, lists of them, JSON files) on a compiled program."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from stan_dp.cli import main
from stan_dp.output.files import OutputPathError, check_output_path, write_or_fallback
from stan_dp.stan.inits import InitsError, resolve_inits

ROOT = Path(__file__).resolve().parent.parent
REGRESSION = ROOT / "stan_models" / "regression_gq.stan"


def _regression_data(n: int = 40) -> dict:
    rng = np.random.default_rng(7)
    x = rng.normal(size=n)
    return {"N": n, "x": x.tolist(), "y": (1.0 + 0.5 * x + rng.normal(size=n)).tolist()}


# ------------------------------------------------------------------------------------------------ files
def test_check_output_path_accepts_writable_and_refuses_the_rest(tmp_path):
    """A writable .nc path passes (and no probe file stays behind); wrong suffix, a directory, a missing parent
    and a parent that is a file are refused with a message naming the fix."""
    assert check_output_path(tmp_path / "fit.nc") == tmp_path / "fit.nc"
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "d.nc").mkdir()
    (tmp_path / "file").write_text("x")
    for path, fragment in [(tmp_path / "fit.csv", "does not end in .nc"), (tmp_path / "d.nc", "is a directory"),
                           (tmp_path / "no" / "fit.nc", "mkdir -p"), (tmp_path / "file" / "fit.nc", "not a directory")]:
        with pytest.raises(OutputPathError, match=fragment):
            check_output_path(path)


def test_write_or_fallback_saves_elsewhere_and_says_where(tmp_path, monkeypatch, capsys):
    """When the target cannot be written, the same content goes to a fresh file in the current directory and
    stderr names it."""
    monkeypatch.chdir(tmp_path)
    written = write_or_fallback(lambda p: Path(p).write_text("draws"), tmp_path / "gone" / "fit.nc")
    assert written.parent == tmp_path and written.suffix == ".nc" and written.read_text() == "draws"
    assert str(written) in capsys.readouterr().err


@pytest.mark.stan
def test_cli_refuses_a_bad_output_before_reading_any_row(tmp_path, monkeypatch, capsys):
    """A bad --output exits 2 before the data file is opened and before the program is compiled."""
    import stan_dp.stan.data
    import stan_dp.model

    def no(*args, **kwargs):
        raise AssertionError("the data were read or the program built before the output was checked")

    monkeypatch.setattr(stan_dp.stan.data, "load_data", no)
    monkeypatch.setattr(stan_dp.model.DPStanModel, "__init__", no)
    data = tmp_path / "d.json"
    data.write_text(json.dumps(_regression_data()))
    status = main(["sample", str(REGRESSION), "--data", str(data), "--epsilon", "1", "--delta", "1e-5",
                   "--output", str(tmp_path / "missing" / "fit.nc"), "--quiet"])
    assert status == 2 and "does not exist" in capsys.readouterr().err


@pytest.mark.stan
def test_cli_saves_the_draws_when_the_output_disappears_during_the_run(tmp_path, monkeypatch, capsys,
                                                                       stan_model):
    """The output directory is removed while the run is going on: the draws land in a fallback file in the
    current directory, stderr says where, and the command still succeeds."""
    import stan_dp.model
    from stan_dp.output.arviz_compat import from_netcdf

    stan_model("regression_gq")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    original = stan_dp.model.DPStanModel.sample

    def sample_then_lose_the_directory(self, *args, **kwargs):
        fit = original(self, *args, **kwargs)
        shutil.rmtree(out_dir)
        return fit

    monkeypatch.setattr(stan_dp.model.DPStanModel, "sample", sample_then_lose_the_directory)
    data = tmp_path / "d.json"
    data.write_text(json.dumps(_regression_data()))
    status = main(["sample", str(REGRESSION), "--data", str(data), "--epsilon", "1", "--delta", "1e-5",
                   "--chains", "1", "--iter-warmup", "20", "--iter-sampling", "20", "--seed", "1",
                   "--option", "ratio_clip=1", "--output", str(out_dir / "fit.nc"), "--quiet"])
    captured = capsys.readouterr()
    saved = list(work.glob("fit-saved-*.nc"))
    assert status == 0 and len(saved) == 1 and str(saved[0]) in captured.err
    assert from_netcdf(saved[0]).posterior["alpha"].shape == (1, 20)


# ------------------------------------------------------------------------------------------------ inits
@pytest.mark.stan
def test_dict_inits_are_unconstrained_with_the_data_free_instance(stan_model):
    """{"alpha": a, "beta": b, "sigma": s} becomes (a, b, log s) (sigma has lower=0); a list gives one row per
    chain; missing, unknown and out-of-support values are refused by name."""
    prior = stan_model("regression_gq").bridgestan({"N": 0, "x": [], "y": []})
    one = resolve_inits({"alpha": 1.0, "beta": -2.0, "sigma": 3.0}, prior, chains=2)
    assert np.allclose(one, [1.0, -2.0, np.log(3.0)])
    two = resolve_inits([{"alpha": 0, "beta": 0, "sigma": 1}, {"alpha": 1, "beta": 1, "sigma": np.e}], prior, 2)
    assert two.shape == (2, 3) and np.allclose(two[1], [1, 1, 1])
    # values of transformed parameters / generated quantities (e.g. copied from a previous fit) are ignored
    assert np.allclose(resolve_inits({"alpha": 1, "beta": -2, "sigma": 3, "log_sigma": 9, "y_new": 0}, prior, 2),
                       one)
    with pytest.raises(InitsError, match=r"no value for parameter\(s\) sigma"):
        resolve_inits({"alpha": 0, "beta": 0}, prior, 2)
    with pytest.raises(InitsError, match="gamma"):
        resolve_inits({"alpha": 0, "beta": 0, "sigma": 1, "gamma": 1}, prior, 2)
    with pytest.raises(InitsError, match="greater than or equal to 0"):
        resolve_inits({"alpha": 0, "beta": 0, "sigma": -1}, prior, 2)
    with pytest.raises(InitsError, match="boundary"):
        resolve_inits({"alpha": 0, "beta": 0, "sigma": 0}, prior, 2)
    with pytest.raises(InitsError, match="list of 1 dicts but the run has 2 chains"):
        resolve_inits([{"alpha": 0, "beta": 0, "sigma": 1}], prior, 2)


@pytest.mark.stan
def test_dict_inits_and_json_file_give_the_same_run_as_unconstrained_inits(stan_model, tmp_path):
    """Same seed: a dict of constrained values, the same dict in a JSON file, and the equivalent unconstrained
    array start the chains at the same point, so the released draws are identical."""
    model = stan_model("regression_gq")
    data = _regression_data()
    common = dict(algorithm="penalty", ratio_clip=1.0, epsilon=2.0, delta=1e-5, chains=2, iter_warmup=10,
                  iter_sampling=10,
                  seed=11, show_progress=False)
    values = {"alpha": 0.5, "beta": 0.2, "sigma": 2.0}
    path = tmp_path / "inits.json"
    path.write_text(json.dumps(values))
    a = model.sample(data, inits=values, **common).posterior["alpha"].values
    b = model.sample(data, inits=str(path), **common).posterior["alpha"].values
    c = model.sample(data, inits=np.array([0.5, 0.2, np.log(2.0)]), **common).posterior["alpha"].values
    assert np.array_equal(a, b) and np.array_equal(a, c)
