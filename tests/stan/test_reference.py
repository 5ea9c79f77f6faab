"""The non-private reference run (Stan's NUTS service built into the model library).

Checks the built-in reference against posteriordb reference posteriors (draws nobody on this project made):
means within 0.1 reference sd, sds within 10 %, R-hat below 1.01, and the output schema and attrs.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.stan

CASES = [
    ("sblri_blr", "sblri.json", "sblri-blr.reference.json"),
    ("kidiq_momiq", "kidiq.json", "kidiq-kidscore_momiq.reference.json"),
    ("earnings_logearn_height", "earnings.json", "earnings-logearn_height.reference.json"),
]


def _reference_moments(path):
    """{name: (mean, sd)} of a posteriordb reference posterior (summary of its 10 x 1,000 draws)."""
    summary = json.loads(path.read_text())["summary"]
    return {name: (s["mean"], s["sd"]) for name, s in summary.items()}


def _flat(idata):
    """Posterior as {'beta[1]': draws, ...} with Stan's 1-based names."""
    out = {}
    for name, var in idata.posterior.data_vars.items():
        values = var.values.reshape(-1, *var.shape[2:])
        if values.ndim == 1:
            out[name] = values
        else:
            for idx in np.ndindex(values.shape[1:]):
                out[f"{name}[{','.join(str(i + 1) for i in idx)}]"] = values[(slice(None),) + idx]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("program, data_file, draws_file", CASES)
def test_builtin_reference_matches_posteriordb(stan_model, posteriordb, program, data_file, draws_file):
    """Built-in NUTS reproduces posteriordb means (0.1 ref sd), sds (10 %) with R-hat < 1.01."""
    import arviz as az

    model = stan_model(program)
    ref = model.reference(posteriordb / data_file, chains=4, iter_warmup=1000, iter_sampling=2000,
                          seed=20261121, show_progress=False)
    expected = _reference_moments(posteriordb / draws_file)
    got = _flat(ref)
    assert set(got) == set(expected)
    rhat = az.rhat(ref)
    for name, (mean, sd) in expected.items():
        assert abs(got[name].mean() - mean) < 0.1 * sd, name
        assert abs(got[name].std(ddof=1) / sd - 1) < 0.10, name
    assert float(max(rhat[v].max() for v in rhat.data_vars)) < 1.01


def test_reference_schema_and_attrs(stan_model, posteriordb, tmp_path):
    """Names/shapes follow Stan, sample_stats use az.from_cmdstanpy names, attrs say not private."""
    import arviz as az

    model = stan_model("sblri_blr")
    ref = model.reference(posteriordb / "sblri.json", chains=2, iter_warmup=200, iter_sampling=100,
                          seed=3, show_progress=False)
    assert ref.posterior["beta"].shape == (2, 100, 5)
    assert ref.posterior["sigma"].shape == (2, 100)
    assert set(ref.sample_stats.data_vars) == {
        "lp", "acceptance_rate", "step_size", "tree_depth", "n_steps", "diverging", "energy"}
    assert ref.attrs["private"] == 0 and "NOT PRIVATE" in ref.attrs["privacy_warning"]
    path = tmp_path / "ref.nc"
    ref.to_netcdf(path)
    back = az.from_netcdf(path)
    assert back.attrs["private"] == 0
    az.summary(back)


def test_reference_is_reproducible_with_seed(stan_model, posteriordb):
    """The same seed gives identical draws; a different seed different ones."""
    model = stan_model("kidiq_momiq")
    data = posteriordb / "kidiq.json"
    kw = dict(chains=2, iter_warmup=100, iter_sampling=50, show_progress=False)
    a = model.reference(data, seed=11, **kw).posterior["beta"].values
    b = model.reference(data, seed=11, **kw).posterior["beta"].values
    c = model.reference(data, seed=12, **kw).posterior["beta"].values
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_reference_backend_errors(stan_model, posteriordb, monkeypatch):
    """Asking for CmdStan without one says how to install it; an unknown backend lists the valid ones."""
    from stan_dp.stan import reference

    monkeypatch.setattr(reference, "cmdstan_available", lambda: False)
    model = stan_model("sblri_blr")
    with pytest.raises(reference.ReferenceError, match="cmdstanpy"):
        model.reference(posteriordb / "sblri.json", backend="cmdstan")
    with pytest.raises(ValueError, match="builtin"):
        model.reference(posteriordb / "sblri.json", backend="nope")


def test_reference_with_tp_and_gq(stan_model):
    """Transformed parameters and generated quantities appear when asked, with Stan shapes."""
    model = stan_model("regression_gq")
    rng = np.random.default_rng(0)
    x = rng.normal(size=30)
    data = {"N": 30, "x": x, "y": 1 + 2 * x + rng.normal(size=30)}
    ref = model.reference(data, chains=2, iter_warmup=200, iter_sampling=100, seed=1, show_progress=False,
                          include_tp=True, include_gq=True)
    assert ref.posterior["coef"].shape == (2, 100, 2)
    np.testing.assert_allclose(ref.posterior["coef"].values[..., 0], ref.posterior["alpha"].values)
    np.testing.assert_allclose(ref.posterior["log_sigma"].values, np.log(ref.posterior["sigma"].values))
    assert set(np.unique(ref.posterior["above"].values)) <= {0.0, 1.0}
