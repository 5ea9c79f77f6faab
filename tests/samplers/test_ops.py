"""OPS (one posterior sample) and the hybrid sampler: exactness, accounting, attrs and errors."""
from __future__ import annotations

import json
import math
import types
import warnings

import numpy as np
import pytest
from scipy import stats

from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from stan_dp.phases.calibration import account, calibrate
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run.pipeline import sample_private
from stan_dp.samplers import ALGORITHMS, ALL_ALGORITHMS
from stan_dp.samplers.ops import OPS, ops_temperature


def _gaussian(n=50, seed=0):
    x = np.random.default_rng(seed).normal(1.0, 1.0, size=(n, 1))
    return GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=100.0), x


def _ops_draws(model, eps_draw, bounds, temper_prior, chains=4, draws=400, seed=11):
    kernel = OPS(model, types.SimpleNamespace(epsilon_draw=eps_draw), loglik_bounds=bounds,
                 temper_prior=temper_prior, thin=10)
    kernel.set_internal_warmup(300)
    rng = np.random.default_rng(seed)
    out = []
    for _chain in range(chains):
        state = kernel.init_state(rng.uniform(-2, 2, size=1))
        for _ in range(draws):
            state, info = kernel.step(rng, state, 0.1, np.ones(1))
            assert info.extra == {}  # nothing from the internal run is released
            out.append(state.theta[0])
    return np.asarray(out)


@pytest.mark.slow
@pytest.mark.parametrize("temper_prior", [True, False])
def test_ops_draws_match_tempered_posterior(temper_prior):
    """With clipping inactive, OPS draws follow the tempered posterior exactly: p0^k * lik^rho is Gaussian with
    precision k / 100 + rho N (k = rho when the prior is tempered, else 1). KS test on 1600 draws (4 chains x
    400, thinned by 10 so close to independent); the critical value 1.95 / sqrt(n) is the 0.1 % level."""
    model, x = _gaussian()
    bounds = (-60.0, 0.0)  # l_i = -0.92 - (x_i - theta)^2 / 2: inactive for |x_i - theta| < 10.9
    eps_draw = 20.0
    rho = ops_temperature(eps_draw, bounds)
    assert rho == pytest.approx(20.0 / 120.0)
    k = rho if temper_prior else 1.0
    precision = k / 100.0 + rho * len(x)
    mean = rho * x.sum() / precision
    draws = _ops_draws(model, eps_draw, bounds, temper_prior)
    d = stats.kstest(draws, stats.norm(mean, 1.0 / math.sqrt(precision)).cdf).statistic
    assert d < 1.95 / math.sqrt(draws.size)
    # and the untempered posterior (sd sqrt(6) times smaller) is rejected: the test can fail
    post_prec = 1.0 / 100.0 + len(x)
    d_wrong = stats.kstest(draws, stats.norm(x.sum() / post_prec, 1.0 / math.sqrt(post_prec)).cdf).statistic
    assert d_wrong > 1.95 / math.sqrt(draws.size)


def test_ops_temperature_rule():
    """rho = min(1, epsilon_draw / (2 (b - a))): capped at 1 when the budget exceeds the clipped range."""
    assert ops_temperature(1.0, (-5.0, 0.0)) == pytest.approx(0.1)
    assert ops_temperature(100.0, (-5.0, 0.0)) == 1.0


def _pure_pld_epsilon(eps_draw, count, delta):
    params = pld_common.DifferentialPrivacyParameters(eps_draw, 0.0)
    pld = pld_lib.from_privacy_parameters(params, value_discretization_interval=eps_draw / 50)
    return pld.self_compose(count).get_epsilon_for_delta(delta)


@pytest.mark.parametrize("epsilon,chains,draws", [(1.0, 2, 50), (4.0, 4, 10)])
def test_ops_accounting_composes_pure_draws(epsilon, chains, draws):
    """k = chains x draws pure epsilon_draw mechanisms compose to the reported epsilon: checked against an
    independent dp-accounting PLD of (epsilon_draw, 0)-DP mechanisms (finer grid) and against basic composition,
    which must be looser (k epsilon_draw >= reported) and a pure upper bound."""
    delta = 1e-5
    plan = calibrate("ops", epsilon=epsilon, delta=delta, chains=chains, iterations=draws)
    k = chains * draws
    report = plan.report()
    assert 0.99 * epsilon <= report.epsilon <= epsilon
    [mech] = report.mechanisms
    assert mech["count"] == k and mech["delta"] == 0.0
    eps_draw = plan.epsilon_draw
    assert mech["epsilon"] == pytest.approx(eps_draw)
    assert _pure_pld_epsilon(eps_draw, k, delta) == pytest.approx(report.epsilon, rel=2e-2)
    assert k * eps_draw >= report.epsilon
    # noise-first: the same epsilon_draw accounts to the same epsilon
    assert account("ops", delta=delta, chains=chains, iterations=draws,
                   epsilon_draw=eps_draw).epsilon == pytest.approx(report.epsilon, rel=1e-9)


def test_ops_run_attrs_and_release():
    """A run releases iter_sampling draws per chain, only constant sample_stats, an options record with the
    bounds, and says in words that the guarantee is conditional on exact sampling; the internal warmup is
    neither released nor accounted (the report counts chains x iter_sampling draws)."""
    model, _ = _gaussian()
    fit = sample_private(model, algorithm="ops", epsilon=2.0, delta=1e-5, chains=2, iter_warmup=100,
                         iter_sampling=20, seed=3, show_progress=False, loglik_bounds=(-60, 0))
    assert fit.posterior["theta"].shape[:2] == (2, 20)
    assert "CONDITIONAL ON EXACT SAMPLING" in fit.attrs["privacy_guarantee"]
    assert "CONDITIONAL" in fit.attrs["guarantee_type"]
    from stan_dp.privacy.statement import privacy_text

    assert privacy_text(fit).startswith("CONDITIONAL GUARANTEE:")  # the first words a user reads say so
    mechs = json.loads(fit.attrs["privacy_mechanisms"])
    assert [m["count"] for m in mechs] == [40]
    assert json.loads(fit.attrs["algorithm_options"])["loglik_bounds"] == [-60.0, 0.0]
    for name in fit.sample_stats.data_vars:
        values = fit.sample_stats[name].values
        assert np.all(values == values.flat[0]), name  # constants only: nothing from the internal NUTS
    assert 0.99 * 2.0 <= fit.attrs["epsilon_spent"] <= 2.0


def test_a_row_that_fails_cannot_remove_support():
    """A row whose log-likelihood is NaN (the engine's value for a row that throws) counts as the lower bound a,
    +-inf are clipped to [a, b], and such rows (or rows with a non-finite gradient) contribute no gradient: the
    tempered density stays finite wherever the data-free prior is, and equals that of a row at the bound."""
    from stan_dp.samplers.ops import ClippedTemperedPosterior

    class Rows:
        dim, n_rows = 1, 4

        def __init__(self, values, grads):
            self.values, self.grads = np.array(values, float), np.array(grads, float).reshape(-1, 1)

        def log_prior_grad(self, theta):
            return -0.5 * float(theta[0] ** 2), np.array([-float(theta[0])])

        def row_log_lik_grad(self, theta, rows=None):
            return self.values, self.grads

    bounds = (-5.0, 0.0)
    failing = Rows([-1.0, np.nan, -np.inf, -2.0], [0.5, np.nan, 1.0, np.inf])
    at_bound = Rows([-1.0, -5.0, -5.0, -2.0], [0.5, 0.0, 0.0, 0.0])
    for rho in (0.1, 1.0):
        v_fail, g_fail = ClippedTemperedPosterior(failing, bounds, rho).value_and_grad(np.array([0.3]))
        v_bound, g_bound = ClippedTemperedPosterior(at_bound, bounds, rho).value_and_grad(np.array([0.3]))
        assert math.isfinite(v_fail) and v_fail == pytest.approx(v_bound)
        np.testing.assert_allclose(g_fail, g_bound)
    prior_only = Rows([np.nan] * 4, [np.nan] * 4)
    prior_only.log_prior_grad = lambda theta: (-math.inf, np.zeros(1))  # outside the prior's support
    assert ClippedTemperedPosterior(prior_only, bounds, 0.5).value_and_grad(np.array([0.3]))[0] == -math.inf


def test_ops_kept_out_of_kernel_registry():
    """OPS is not a per-iteration kernel (the audit iterates ALGORITHMS), but sample_private accepts it."""
    assert "ops" not in ALGORITHMS and ALL_ALGORITHMS["ops"] is OPS


def test_ops_requires_loglik_bounds():
    model, _ = _gaussian()
    with pytest.raises(ValueError, match=r"loglik_bounds.*required.*\(a, 0\)"):
        sample_private(model, algorithm="ops", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=10,
                       iter_sampling=2, seed=1, show_progress=False)
    for bad in [(0.0, -1.0), (1.0,), "(-5, 0)", (-math.inf, 0.0)]:
        with pytest.raises(ValueError, match="loglik_bounds.*pair"):
            sample_private(model, algorithm="ops", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=10,
                           iter_sampling=2, seed=1, show_progress=False, loglik_bounds=bad)


def _hybrid_fit(**extra):
    model, _ = _gaussian(n=200)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_private(model, algorithm="hybrid", epsilon=1.0, delta=1e-5, chains=2, iter_warmup=40,
                              iter_sampling=40, seed=5, show_progress=False, loglik_bounds=(-60, 0),
                              grad_clip=20.0, warm_start_warmup=100, **extra)


def test_hybrid_report_equals_independent_composition():
    """The hybrid's single report equals an independent dp-accounting composition of its parts: the PLD of
    `chains` pure OPS draws at ops_share * epsilon / chains each, composed with the PLD of the SG kernel's
    Poisson-subsampled Gaussian releases (dp-accounting's REPLACE_ONE convention: noise sd 2 tau against a
    sensitivity 1)."""
    fit = _hybrid_fit(then="dp-sgld", ops_share=0.4, sampling_rate=0.5)
    assert fit.attrs["algorithm"] == "hybrid"
    opts = json.loads(fit.attrs["algorithm_options"])
    assert opts["then"] == "dp-sgld" and opts["ops_share"] == 0.4 and opts["warm_start"] == "ops"
    assert "CONDITIONAL ON EXACT SAMPLING" in fit.attrs["privacy_guarantee"]
    from stan_dp.privacy.statement import privacy_text

    assert privacy_text(fit).startswith("CONDITIONAL GUARANTEE:")
    ops_m, sg_m = json.loads(fit.attrs["privacy_mechanisms"])
    assert ops_m["count"] == 2 and ops_m["epsilon"] == pytest.approx(0.4 * 1.0 / 2)
    assert sg_m["count"] == 2 * 80
    interval = 1e-4
    pure = pld_lib.from_privacy_parameters(pld_common.DifferentialPrivacyParameters(0.2, 0.0),
                                           value_discretization_interval=interval).self_compose(2)
    sg = pld_lib.from_gaussian_mechanism(
        standard_deviation=2.0 * sg_m["noise_multiplier"], sensitivity=1.0,
        sampling_prob=sg_m["sampling_probability"], value_discretization_interval=interval,
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE).self_compose(sg_m["count"])
    independent = pure.compose(sg).get_epsilon_for_delta(1e-5)
    assert fit.attrs["epsilon_spent"] == pytest.approx(independent, rel=1e-2)
    assert fit.attrs["epsilon_spent"] <= 1.0
    # tight composition leaves the SG part more than (1 - share) epsilon: its own epsilon exceeds 0.6
    sg_alone = sg.get_epsilon_for_delta(1e-5)
    assert sg_alone > 0.6


@pytest.mark.parametrize("bad, match", [
    ({"then": "penalty"}, "'then' of algorithm 'hybrid'"),
    ({"ops_share": 1.0}, "ops_share"),
    ({"ops_share": 0}, "ops_share"),
    ({"warm_start": "dp-gd"}, "sets warm_start itself"),
])
def test_hybrid_errors(bad, match):
    with pytest.raises(ValueError, match=match):
        _hybrid_fit(**bad)


def test_hybrid_requires_loglik_bounds():
    model, _ = _gaussian()
    with pytest.raises(ValueError, match=r"loglik_bounds.*\(a, 0\)"):
        sample_private(model, algorithm="hybrid", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=10,
                       iter_sampling=2, seed=1, show_progress=False, grad_clip=1.0)
