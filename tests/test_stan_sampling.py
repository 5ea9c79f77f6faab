"""Private sampling of compiled Stan programs, end to end (DPStanModel.sample).

At a very large budget the noise is negligible, so both samplers must agree with the non-private reference
within Monte Carlo error; the output must be valid ArviZ with nothing non-private in any group.
"""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from stan_dp.output.arviz_compat import group_names
from stan_dp.tools.demo import simulate_logistic

pytestmark = pytest.mark.stan

FORBIDDEN = re.compile(r"(^|_)(lp|log_?lik|log_?density|loglik|energy|clip)", re.IGNORECASE)


@pytest.fixture(scope="module")
def logistic_data():
    return simulate_logistic(3000, -0.5, (1.0, -1.0, 0.5), 2.5, seed=11)


@pytest.fixture(scope="module")
def reference(stan_model, logistic_data):
    return stan_model("logistic").reference(logistic_data, chains=2, iter_warmup=500, iter_sampling=1000,
                                            seed=5, show_progress=False)


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, options", [
    ("penalty", {"ratio_clip": 4.0}),
    ("dp-hmc", {"ratio_clip": 4.0, "grad_clip": 4.0, "leapfrog_steps": 5, "anchor": "none"}),
])
def test_large_budget_agrees_with_reference(stan_model, logistic_data, reference, algorithm, options, tmp_path):
    """At epsilon = 1e6 (noise negligible, clip bounds above any per-row change) the private posterior means
    match the reference within 4 combined Monte Carlo standard errors and sds within 25 %; az.summary works;
    no forbidden variable in any group; attrs survive netCDF."""
    import arviz as az

    from stan_dp import compare

    model = stan_model("logistic")
    fit = model.sample(logistic_data, algorithm=algorithm, epsilon=1e6, delta=1e-6, chains=2, iter_warmup=500,
                       iter_sampling=1000, seed=7, show_progress=False, inits=np.zeros(4), **options)
    summary = az.summary(fit)
    assert list(summary.index) == ["alpha", "beta[0]", "beta[1]", "beta[2]"]
    table = compare(fit, reference)
    ref_summary = az.summary(reference)
    for name, row in table.iterrows():
        mcse = np.hypot(summary.loc[name, "mcse_mean"], ref_summary.loc[name, "mcse_mean"])
        assert abs(row.mean_private - row.mean_reference) < 4 * mcse + 1e-12, name
        assert 0.75 < row.sd_ratio < 1.25, name
    for group in group_names(fit):
        for var in getattr(fit, group).data_vars:
            assert not FORBIDDEN.search(var), f"{group}/{var} must not be released"
    assert fit.attrs["private"] == 1 and fit.attrs["N"] == 3000
    path = tmp_path / "fit.nc"
    fit.to_netcdf(path)
    back = az.from_netcdf(path)
    assert dict(back.attrs) == dict(fit.attrs)
    assert json.loads(back.attrs["privacy_report"])["epsilon"] <= 1e6


def test_constrained_parameters_keep_stan_names_and_shapes(stan_model):
    """Simplex, Cholesky-factor and covariance parameters are released with Stan's shapes and constraints."""
    rng = np.random.default_rng(2)
    data = {"N": 40, "K": 3, "z": rng.normal(size=(40, 3))}
    fit = stan_model("constrained").sample(data, algorithm="penalty", ratio_clip=1.0, epsilon=1e3, delta=1e-6, chains=1,
                                           iter_warmup=30, iter_sampling=20, seed=1, show_progress=False)
    post = fit.posterior
    assert post["weights"].shape == (1, 20, 3) and post["L"].shape == (1, 20, 3, 3)
    assert post["Sigma"].shape == (1, 20, 2, 2)
    np.testing.assert_allclose(post["weights"].sum("weights_dim_0"), 1.0, rtol=1e-12)
    assert np.all(np.triu(post["L"].values[0, 0], 1) == 0)


def test_generated_quantities_are_released_from_the_prior_instance(stan_model):
    """include_tp / include_gq release transformed parameters and generated quantities evaluated without rows:
    transformed parameters are functions of the parameters, generated quantities vary with the RNG."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=50)
    data = {"N": 50, "x": x, "y": 1 + 2 * x + rng.normal(size=50)}
    model = stan_model("regression_gq")
    plain = model.sample(data, algorithm="penalty", ratio_clip=1.0, epsilon=100.0, delta=1e-6, chains=1, iter_warmup=20,
                         iter_sampling=20, seed=1, show_progress=False)
    assert set(plain.posterior.data_vars) == {"alpha", "beta", "sigma"}
    fit = model.sample(data, algorithm="penalty", ratio_clip=1.0, epsilon=100.0, delta=1e-6, chains=1, iter_warmup=20,
                       iter_sampling=20, seed=1, show_progress=False, include_tp=True, include_gq=True)
    post = fit.posterior
    np.testing.assert_allclose(post["log_sigma"], np.log(post["sigma"]))
    assert post["coef"].shape == (1, 20, 2) and "y_new" in post
    assert json.loads(fit.attrs["released_variables"]) == ["alpha", "beta", "sigma", "log_sigma", "coef", "y_new", "above"]


@pytest.mark.parametrize("kwargs, message", [
    ({"algorithm": "gibbs"}, "valid algorithms"),
    ({"algorithm": "penalty", "grad_clip": 1.0}, "ratio_clip"),
    ({"algorithm": "penalty", "ratio_clip": -1.0}, "ratio_clip"),
    ({"algorithm": "dp-hmc", "grad_clip": 0.0}, "grad_clip"),
    ({"algorithm": "penalty", "ratio_clip": 1.0, "epsilon": 0.0}, "epsilon"),
    ({"algorithm": "penalty", "ratio_clip": 1.0, "delta": 1.5}, "delta"),
    ({"algorithm": "penalty"}, "'ratio_clip' of algorithm 'penalty' is required"),  # no silent default
])
def test_bad_sampling_requests_name_the_problem(stan_model, logistic_data, kwargs, message):
    """Unknown algorithms or options, non-positive clip bounds and impossible budgets raise ValueError naming
    what to change."""
    args = {"epsilon": 1.0, "delta": 1e-6, "chains": 1, "iter_warmup": 5, "iter_sampling": 5,
            "show_progress": False, **kwargs}
    with pytest.raises(ValueError, match=message):
        stan_model("logistic").sample(logistic_data, **args)


def test_data_problems_surface_from_the_row_engine(stan_model, logistic_data):
    """A row variable of the wrong length is reported before any privacy budget is spent."""
    from stan_dp.stan.data import DataError

    bad = dict(logistic_data, y=logistic_data["y"][:-1])
    with pytest.raises(DataError, match="'y' has leading dimension 2999"):
        stan_model("logistic").sample(bad, algorithm="penalty", ratio_clip=1.0, epsilon=1.0, delta=1e-6,
                   show_progress=False)
