"""Stan CSV out (stan_dp.to_stan_csv) and back in (our reader, cmdstanpy's when installed).

Private fits come from the NumPy Gaussian reference model (no compiler needed); the compiled-program round trip
is in test_stan_programs.py. Every check is exact: the writer uses 17 significant digits.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import stan_dp.run.pipeline as sampling
from stan_dp import compare, to_stan_csv
from stan_dp.output.arviz_compat import fit_from_dict, from_netcdf, group_names
from stan_dp.output.stan_csv import read_stan_csv, stan_csv_paths

RUN = dict(epsilon=2.0, delta=1e-5, chains=2, iter_warmup=40, iter_sampling=30, show_progress=False, seed=5)


@pytest.fixture(scope="module")
def private_fit():
    from stan_dp.models.reference_models import GaussianMeanModel

    model = GaussianMeanModel.simulate(n=500, dim=3, seed=2)
    return sampling.sample_private(model, algorithm="dp-hmc", ratio_clip=3.0, grad_clip=3.0, leapfrog_steps=2,
                                   anchor="none",
                                   **RUN)


def _split(path):
    """(comment lines, header columns, data rows as strings) of one written file."""
    comments, header, rows = [], None, []
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            comments.append(line)
        elif header is None:
            header = line.split(",")
        else:
            rows.append(line.split(","))
    return comments, header, rows


def test_round_trip_keeps_draws_exactly_and_writes_one_file_per_chain(private_fit, tmp_path):
    """fit -> to_stan_csv -> read_stan_csv gives the posterior draws bit for bit (chains pooled in order), one
    file per chain named <stem>_<chain>.csv, and compare() of the fit with its own CSV files shows no
    difference."""
    paths = to_stan_csv(private_fit, tmp_path / "fit.csv")
    assert paths == stan_csv_paths(tmp_path / "fit.csv", 2) == [tmp_path / "fit_1.csv", tmp_path / "fit_2.csv"]
    back = read_stan_csv(paths)
    theta = private_fit.posterior["theta"].values
    np.testing.assert_array_equal(back["theta"], theta.reshape(-1, 3))
    np.testing.assert_array_equal(read_stan_csv(paths[1])["theta"], theta[1])
    table = compare(private_fit, paths)
    assert np.all(table["ks"] == 0) and np.all(table["mean_diff_sd"] == 0) and table.attrs["mmd"] == 0


def test_header_carries_the_privacy_metadata_and_lp_is_nan(private_fit, tmp_path):
    """The comment header states epsilon, delta and the guarantee text exactly as the fit's attrs, says why
    lp__ is empty; lp__ is nan in every draw; the sample statistics follow as Stan-named sampler columns and
    the parameters with Stan's dotted names."""
    path = to_stan_csv(private_fit, tmp_path / "fit.csv")[0]
    comments, header, rows = _split(path)
    text = "\n".join(comments)
    pairs = dict(line.lstrip("# ").split(" = ", 1) for line in comments if " = " in line)
    attrs = private_fit.attrs
    assert float(pairs["stan_dp_epsilon"]) == attrs["epsilon"] and float(pairs["stan_dp_delta"]) == attrs["delta"]
    assert pairs["stan_dp_privacy_guarantee"] == attrs["privacy_guarantee"]
    assert pairs["stan_dp_private"] == "1" and "lp__ is nan in every draw" in text
    assert header[0] == "lp__" and all(row[0] == "nan" for row in rows)
    assert header[1:3] == ["accept_stat__", "stepsize__"]
    assert {"accepted__", "noise_sd__", "n_leapfrog__"} <= set(header)
    assert header[-3:] == ["theta.1", "theta.2", "theta.3"]
    assert len(rows) == 30 and all(len(row) == len(header) for row in rows)
    assert not any(name.startswith(("energy", "treedepth")) for name in header)
    np.testing.assert_array_equal(
        [float(row[header.index("stepsize__")]) for row in rows], private_fit.sample_stats["step_size"].values[0]
    )


def test_matrices_use_stans_column_major_flat_order(tmp_path):
    """A (2, 3) matrix is written as L.1.1, L.2.1, L.1.2, ... (first index fastest, as Stan writes it) and read
    back into the same array; a scalar and a vector keep their names."""
    rng = np.random.default_rng(1)
    post = {"mu": rng.normal(size=(1, 7)), "v": rng.normal(size=(1, 7, 2)), "L": rng.normal(size=(1, 7, 2, 3))}
    fit = fit_from_dict({"posterior": post})
    path = to_stan_csv(fit, tmp_path / "m")[0]
    _, header, _ = _split(path)
    assert header[0] == "lp__" and len(header) == 10 and {"mu", "v.1", "v.2"} <= set(header)
    assert [c for c in header if c.startswith("L.")] == ["L.1.1", "L.2.1", "L.1.2", "L.2.2", "L.1.3", "L.2.3"]
    back = read_stan_csv(path)
    for name, value in post.items():
        np.testing.assert_array_equal(back[name], value[0])


def test_netcdf_round_trip_then_csv(private_fit, tmp_path):
    """A fit read back from netCDF (the installed ArviZ line's type) writes the same CSV as the original."""
    private_fit.to_netcdf(tmp_path / "fit.nc")
    back = from_netcdf(tmp_path / "fit.nc")
    assert set(group_names(back)) == {"posterior", "sample_stats"}
    a = to_stan_csv(private_fit, tmp_path / "a.csv")
    b = to_stan_csv(back, tmp_path / "b.csv")
    for pa, pb in zip(a, b):
        assert _split(pa)[1:] == _split(pb)[1:]


def test_bad_input_names_the_problem(private_fit, tmp_path):
    """Not ArviZ data, a missing folder, and a 'private' object holding a log density are refused."""
    with pytest.raises(TypeError, match="InferenceData or DataTree"):
        to_stan_csv({"theta": np.zeros(3)}, tmp_path / "x.csv")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        to_stan_csv(private_fit, tmp_path / "no" / "x.csv")
    leaky = fit_from_dict({"posterior": {"mu": np.zeros((1, 4))}, "sample_stats": {"lp": np.zeros((1, 4))}},
                          attrs={"private": 1})
    with pytest.raises(ValueError, match="refusing to release"):
        to_stan_csv(leaky, tmp_path / "x.csv")


def test_cmdstanpy_reads_the_files(private_fit, tmp_path):
    """cmdstanpy.from_csv reads the files as a CmdStanMCMC: same draws per variable, the privacy metadata in its
    config, lp__ nan, and ArviZ's from_cmdstanpy on the installed line converts it."""
    cmdstanpy = pytest.importorskip("cmdstanpy")
    from stan_dp.output.arviz_compat import from_cmdstanpy, get_group

    paths = to_stan_csv(private_fit, tmp_path / "fit.csv")
    mcmc = cmdstanpy.from_csv([str(p) for p in paths])
    theta = private_fit.posterior["theta"].values
    np.testing.assert_array_equal(mcmc.stan_variable("theta"), theta.reshape(-1, 3))
    config = mcmc.metadata.cmdstan_config
    assert config["stan_dp_epsilon"] == private_fit.attrs["epsilon"]
    assert config["stan_dp_delta"] == private_fit.attrs["delta"]
    assert config["stan_dp_privacy_guarantee"] == private_fit.attrs["privacy_guarantee"]
    assert all(math.isnan(v) for v in mcmc.method_variables()["lp__"].ravel())
    converted = from_cmdstanpy(mcmc)
    np.testing.assert_array_equal(get_group(converted, "posterior")["theta"].values, theta)
