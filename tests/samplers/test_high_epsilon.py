"""Failure modes of the private samplers when the noise is small, on fast NumPy models."""
import threading
import types

import numpy as np
import pytest

from stan_dp.models.reference_models import LinearRegressionModel
from stan_dp.phases.chains import run_chains
from stan_dp.samplers.adaptation import MetricPool, regularized_variance
from stan_dp.samplers import DPHMC, PenaltyMH


def _plan(tau_l, tau_g=None, leapfrog_steps=None):
    return types.SimpleNamespace(tau_l=tau_l, tau_g=tau_g, leapfrog_steps=leapfrog_steps)


@pytest.fixture(scope="module")
def linreg():
    return LinearRegressionModel.simulate(2000, 3, seed=1)


def _mean_accept(kernel, start, eta, n=40, seed=0):
    rng = np.random.default_rng(seed)
    state = kernel.init_state(start)
    stats = []
    for _ in range(n):
        state, info = kernel.step(rng, state, eta, np.ones(kernel.dim))
        stats.append(info.accept_stat)
    return float(np.mean(stats))


def test_dp_hmc_gradient_clip_matches_ratio_clip(linreg):
    """With grad_clip 40 > ratio_clip 25 and no noise, at a start where a third of the rows have gradients above
    25, leapfrog gradients clipped only at 40 make the accept test reject nearly every move of step 1e-3 (the
    test credits each row at most 25 per unit move). Clipping the leapfrog at min(grad_clip, ratio_clip), as the
    kernel now does, accepts nearly all of them. Deterministic given the seed; the margins are wide (measured
    0.03 vs 1.00)."""
    start = linreg.true_theta.copy()
    start[0] += 1.0
    start[-1] = -1.0
    _, grads = linreg.row_log_lik_grad(start)
    assert np.mean(np.linalg.norm(grads, axis=1) > 25) > 0.2  # the situation the test is about
    fixed = DPHMC(linreg, _plan(0.0, 0.0, 5), grad_clip=40.0, ratio_clip=25.0, leapfrog_steps=5)
    assert fixed.grad_clip == 25.0
    legacy = DPHMC(linreg, _plan(0.0, 0.0, 5), grad_clip=40.0, ratio_clip=25.0, leapfrog_steps=5)
    legacy.grad_clip = 40.0  # the former behaviour, reproduced to show the failure mode
    assert _mean_accept(legacy, start, 1e-3) < 0.2
    assert _mean_accept(fixed, start, 1e-3) > 0.9


class _Flat:
    """Rows with zero log-likelihood and a flat prior: the trajectory is q = theta + eta L p exactly."""

    n_rows, dim = 10, 5

    def row_log_lik_grad(self, theta, rows=None):
        return np.zeros(self.n_rows), np.zeros((self.n_rows, self.dim))

    def log_prior_grad(self, theta):
        return 0.0, np.zeros(self.dim)


def test_dp_hmc_overflowing_trajectory_is_divergent_not_an_error():
    """A huge step sends the trajectory to finite but enormous positions (up to 1e300) whose distance from the
    start overflows; the kernel reports a divergent, rejected transition instead of failing in the ratio
    mechanism (this crashed DP-HMC runs at epsilon = 100 on the linear regression)."""
    kernel = DPHMC(_Flat(), _plan(0.0, 0.0, 1), grad_clip=1.0, ratio_clip=1.0, leapfrog_steps=1)
    state = kernel.init_state(np.zeros(5))
    rng = np.random.default_rng(1)
    for _ in range(3):
        new, info = kernel.step(rng, state, 1e300, np.ones(5))
        assert info.extra["diverging"] and not info.accepted
        np.testing.assert_array_equal(new.theta, state.theta)


def test_metric_pool_gives_every_chain_the_pooled_variance():
    """Each chain gets the regularised variance of all chains' window draws, in chain order."""
    stop = threading.Event()
    pool = MetricPool(3, stop)
    rng = np.random.default_rng(0)
    draws = [rng.normal(loc=c, size=(10, 2)) for c in range(3)]
    out = [None] * 3

    def deposit(c):
        out[c] = pool.variance(7, c, draws[c])

    threads = [threading.Thread(target=deposit, args=(c,)) for c in (2, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    expected = regularized_variance(np.concatenate(draws))
    for value in out:
        np.testing.assert_array_equal(value, expected)


def test_metric_pool_falls_back_when_stopped():
    """A stopped run never blocks at a window end: the waiting chain uses its own draws."""
    stop = threading.Event()
    stop.set()
    own = np.random.default_rng(1).normal(size=(10, 2))
    np.testing.assert_array_equal(MetricPool(2, stop).variance(0, 0, own), regularized_variance(own))


def test_pooled_metric_is_reproducible_and_shared(linreg):
    """Seeded multi-chain runs with the pooled diag metric are reproducible, and all chains end warmup with the
    same metric (the pooled estimate of the last window)."""
    kernel = PenaltyMH(linreg, _plan(0.0), ratio_clip=25.0)

    def run():
        return run_chains(linreg, kernel, chains=3, iter_warmup=200, iter_sampling=20, seed=5, step_size=0.05,
                          target_accept=0.3, metric="diag", show_progress=False)

    a, b = run(), run()
    np.testing.assert_array_equal(a.draws_array(), b.draws_array())
    metrics = a.metrics
    assert np.all(metrics == metrics[0])
    unpooled = run_chains(linreg, kernel, chains=3, iter_warmup=200, iter_sampling=20, seed=5, step_size=0.05,
                          target_accept=0.3, metric="diag", show_progress=False, pool_metric=False).metrics
    assert not np.all(unpooled == unpooled[0])
