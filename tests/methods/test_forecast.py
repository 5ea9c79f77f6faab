"""The forecast of effective draws (``stan_dp.methods.kernels.forecast``): a function of the plan alone, with the scaling the
accept-test kernels have at a fixed budget, stated in the plan, on stderr below 100 draws and in the attrs; and
(slow) within a factor of 3 of the bulk ESS a seeded penalty run measures on a Gaussian model."""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from stan_dp.models.reference_models import GaussianMeanModel, LinearRegressionModel
from stan_dp.methods.kernels.forecast import FEW_DRAWS, forecast_ess, forecast_plan
from stan_dp.run.pipeline import sample_private
from stan_dp.run.plan import PublicFacts, plan_run


def _plan(algorithm="penalty", epsilon=50.0, warmup=1000, sampling=1000, n=5000, **options):
    options = options or {"ratio_clip": 5.0}
    return plan_run(n, 3, algorithm=algorithm, epsilon=epsilon, delta=1e-6, chains=4, iter_warmup=warmup,
                    iter_sampling=sampling, quiet=True, **options)


def test_forecast_follows_the_budget_not_the_run_length():
    """In the noise-limited regime (epsilon 2 on 5,000 rows) the forecast barely moves when the run is four times
    longer (within 5 %: each iteration's noise grows with the length), it is about proportional to 1 / tau_l^2 (ESS
    ~ mu^2 / (c^2 sd^2)) across two budgets, falls about fourfold with twice the clip at a given posterior sd, and
    never exceeds chains x iter_sampling."""
    plan = _plan(epsilon=2.0)
    base = forecast_plan(plan).ess
    assert abs(forecast_plan(_plan(epsilon=2.0, warmup=4000, sampling=4000)).ess / base - 1.0) < 0.05
    richer = _plan(epsilon=4.0)
    expected = (plan.privacy.parameters["tau_l"] / richer.privacy.parameters["tau_l"]) ** 2
    assert forecast_plan(richer).ess / base == pytest.approx(expected, rel=0.15)
    sd = 0.01
    assert forecast_plan(_plan(epsilon=2.0, ratio_clip=10.0), posterior_sd=sd).ess == pytest.approx(
        forecast_plan(plan, posterior_sd=sd).ess / 4.0, rel=0.1)
    assert forecast_plan(_plan(epsilon=1e5)).ess <= 4 * 1000


@pytest.mark.parametrize("algorithm, options", [
    ("penalty", {"ratio_clip": 5.0}),
    ("dp-hmc", {"ratio_clip": 5.0, "grad_clip": 5.0, "leapfrog_steps": 3}),
    ("dp-fast-mh", {"row_bound": 5.0}),
    ("dp-fast-mh-full", {"row_bound": 5.0}),
])
def test_every_named_kernel_has_a_forecast_that_grows_with_the_budget(algorithm, options):
    """Each accept-test kernel gets a finite positive forecast at two budgets, larger at the larger one; a wider
    public posterior sd gives fewer draws (the forecast falls with the posterior's width at a fixed clip)."""
    small = forecast_plan(_plan(algorithm, epsilon=10.0, **options))
    large = forecast_plan(_plan(algorithm, epsilon=200.0, **options))
    assert 0.0 < small.ess < large.ess
    wide = forecast_plan(_plan(algorithm, epsilon=200.0, **options), posterior_sd=10 * large.posterior_sd)
    assert wide.ess < large.ess and wide.scale_source == "given"


def test_other_algorithms_have_no_forecast_and_unknown_names_are_refused():
    """The SG kernels get no forecast (None); forecast_ess refuses a name it does not cover. forecast_plan answers
    None from the plan's algorithm alone, so a small dp-sgld plan (100 rows, 20 iterations) is enough: the default
    plan's 5,000 rows and 2,000 iterations only made the plan's calibration of the subsampled noise take tens of
    seconds."""
    sg = _plan("dp-sgld", warmup=10, sampling=10, n=100, grad_clip=5.0)
    assert sg.algorithm == "dp-sgld" and forecast_plan(sg) is None
    with pytest.raises(ValueError, match="no forecast"):
        forecast_ess("ops", n_rows=10, dim=1, chains=1, iter_sampling=1, noise={}, clip=1.0, posterior_sd=1.0,
                     target_accept=0.3)


def test_few_draws_are_said_before_the_run_with_the_right_pointer(capsys):
    """A plan forecasting fewer than 100 draws prints one 'forecast:' line on stderr (not with quiet=True); the
    pointer names dp-ssp for a normal linear program and algorithm='auto' otherwise; the printed plan carries the
    forecast."""
    plan = plan_run(300, 3, algorithm="penalty", epsilon=1.0, delta=1e-5, chains=4, iter_warmup=500,
                    iter_sampling=500, ratio_clip=5.0)
    assert plan.forecast.ess < FEW_DRAWS and plan.forecast.few
    err = capsys.readouterr().err
    assert f"forecast: {plan.forecast.sentence()}" in err.splitlines() and "algorithm='auto'" in err
    assert "forecast:" in str(plan)
    model = LinearRegressionModel.simulate(300, 1, seed=1)
    linear = plan_run(300, 3, algorithm="penalty", epsilon=1.0, delta=1e-5, chains=4, iter_warmup=500,
                      iter_sampling=500, quiet=True, facts=PublicFacts(linear=model.linear_spec), ratio_clip=5.0)
    assert "dp-ssp" in linear.forecast.sentence()
    assert capsys.readouterr().err == ""


def test_run_records_the_forecast_in_the_attrs():
    """A named kernel's fit carries forecast_ess (the plan's figure, a float) and forecast_reason; both are
    computed from the plan alone, so two seeds give the same figure."""
    model = LinearRegressionModel.simulate(400, 1, seed=3)
    fits = []
    for seed in (1, 2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(sample_private(model, algorithm="penalty", epsilon=5.0, delta=1e-5, chains=2,
                                       iter_warmup=30, iter_sampling=30, seed=seed, show_progress=False,
                                       ratio_clip=5.0))
    assert isinstance(fits[0].attrs["forecast_ess"], float)
    assert fits[0].attrs["forecast_ess"] == fits[1].attrs["forecast_ess"]
    assert "effective draws forecast" in fits[0].attrs["forecast_reason"]


@pytest.mark.slow
def test_penalty_forecast_agrees_with_measured_bulk_ess():
    """Penalty MH on a 3-d Gaussian mean model (N = 10,000, unit observation noise, so the posterior sd is 0.01 per
    coordinate) at a budget where its draws are noise-limited: the forecast at the true posterior sd is within a
    factor of 3 of the chains' smallest bulk ESS (seeded; measured ratio about 1; a factor of 3 is far beyond the
    run-to-run spread of an ESS of this size, about 20 %)."""
    rng = np.random.default_rng(7)
    model = GaussianMeanModel(rng.standard_normal((10_000, 3)) + 0.3, obs_cov=1.0, prior_mean=0.0,
                              prior_cov=100.0)
    options = dict(epsilon=200.0, delta=1e-6, chains=4, iter_warmup=1000, iter_sampling=1000, ratio_clip=4.0)
    plan = plan_run(model.n_rows, model.dim, algorithm="penalty", quiet=True, **options)
    forecast = forecast_plan(plan, posterior_sd=np.sqrt(np.diag(model.posterior_cov())))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="penalty", seed=11, show_progress=False,
                             inits=model.posterior_mean(), **options)
    measured = json.loads(fit.attrs["convergence"])["min_ess_bulk"]
    assert 20.0 < forecast.ess < 2000.0  # a noise-limited cell, away from the estimator's floor and the cap
    assert 1.0 / 3.0 <= measured / forecast.ess <= 3.0


def test_anchored_accept_test_runs_grow_their_chosen_lengths_while_the_forecast_gains():
    """On 100,000 rows of a declared-bounds logistic program at epsilon 10 the anchored penalty plan, whose lengths the
    package chose, runs 4 x longer than the rule's 1,000 + 1,000 because its forecast draws keep growing (the reason
    says so) and its noise is calibrated for the longer run (the whole budget, no more); DP-HMC, whose forecast
    does not grow with the length there, keeps the rule's lengths; lengths the caller gives are never changed."""
    from stan_dp.stan.glm_program import RowBounds

    bounds = RowBounds(family="logistic", derivable=True, grad_clip=2.449, curvature_clip=1.5, coefficients=6,
                       source="the declared bounds of x", note="exact")
    facts = PublicFacts(row_bounds=bounds)
    run = dict(epsilon=10.0, delta=1e-6, chains=4, quiet=True, facts=facts)
    penalty = plan_run(100_000, 6, algorithm="penalty", ratio_clip=2.449, anchor_grad_clip=2.449, **run)
    assert (penalty.iter_warmup, penalty.iter_sampling) == (4000, 4000) and "4 x longer" in penalty.lengths.reason
    assert penalty.privacy.iterations == 8000 and 0.99 * 10.0 <= penalty.privacy.report().epsilon <= 10.0
    hmc = plan_run(100_000, 6, algorithm="dp-hmc", ratio_clip=2.449, grad_clip=2.449, **run)
    assert (hmc.iter_warmup, hmc.iter_sampling) == (1000, 1000)
    given = plan_run(100_000, 6, algorithm="penalty", ratio_clip=2.449, anchor_grad_clip=2.449, iter_warmup=500,
                     iter_sampling=500, **run)
    assert (given.iter_warmup, given.iter_sampling) == (500, 500)


def test_correlations_slow_the_forecast_and_a_diagonal_covariance_equals_its_sds():
    """Given a covariance matrix, the forecast of a diagonal-metric run falls with the correlations (the slowest
    direction mixes last: with two coordinates correlated 0.9 the whitened covariance's largest eigenvalue is 1.9,
    and where the noise limits the step the draws fall by about that factor), while a diagonal covariance gives
    exactly the forecast of its sds."""
    plan = _plan(epsilon=5.0, ratio_clip=5.0, metric="diag")
    sd = np.array([0.01, 0.02, 0.01])
    diagonal = forecast_plan(plan, posterior_sd=np.diag(sd ** 2)).ess
    assert diagonal == pytest.approx(forecast_plan(plan, posterior_sd=sd).ess, rel=1e-9)
    corr = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    correlated = forecast_plan(plan, posterior_sd=corr * np.outer(sd, sd)).ess
    assert diagonal / 2.5 < correlated < diagonal / 1.5
