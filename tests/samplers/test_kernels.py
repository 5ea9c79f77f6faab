"""Tests of the private kernels (PenaltyMH, DPHMC) and the privacy mechanisms, on the NumPy reference models.

Chains are run by calling ``kernel.step`` in a plain loop with a fixed step size and metric (no adaptation)
and fixed seeds. Monte Carlo standard errors come from the effective sample size (Geyer's initial monotone
sequence estimator on the post-burn-in draws).
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

from stan_dp.privacy import mechanisms
from stan_dp.models.reference_models import (
    BananaModel,
    GaussianMeanModel,
    LogisticRegressionModel,
    TruncatedGaussianMixtureModel,
)
from stan_dp.samplers import ALGORITHMS, DPHMC, PenaltyMH
from stan_dp.samplers.base import ChainState, StepInfo
from stan_dp.samplers.hmc import scrambled_van_der_corput


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
def plan(tau_l, tau_g=None, leapfrog_steps=None):
    """A stand-in for the accountant's PrivacyPlan (only the attributes the kernels read)."""
    return types.SimpleNamespace(tau_l=tau_l, tau_g=tau_g, leapfrog_steps=leapfrog_steps)


def ess(x: np.ndarray) -> float:
    """Effective sample size of a 1-d chain (autocorrelations by FFT, Geyer's initial monotone sequence)."""
    n = x.size
    x = x - x.mean()
    f = np.fft.rfft(x, 2 * n)
    acov = np.fft.irfft(f * np.conj(f))[:n] / n
    rho = acov / acov[0]
    pairs = rho[: n - n % 2].reshape(-1, 2).sum(axis=1)
    negative = np.nonzero(pairs <= 0.0)[0]
    k = negative[0] if negative.size else pairs.size
    tau = -1.0 + 2.0 * np.minimum.accumulate(pairs[:k]).sum()
    return n / max(tau, 1e-3)


def run_chain(kernel, theta0, n_iter, step_size, metric, seed, burn=0.1):
    """Plain loop over kernel.step; returns (post-burn-in draws, infos of all iterations)."""
    rng = np.random.default_rng(seed)
    state = kernel.init_state(np.asarray(theta0, dtype=float))
    draws = np.empty((n_iter, kernel.dim))
    infos = []
    for i in range(n_iter):
        state, info = kernel.step(rng, state, step_size, metric)
        draws[i] = state.theta
        infos.append(info)
    return draws[int(burn * n_iter):], infos


def mean_z_scores(draws, target_mean):
    """(mean - target) / MCSE per coordinate, with MCSE = sd / sqrt(ESS)."""
    ess_values = np.array([ess(draws[:, j]) for j in range(draws.shape[1])])
    mcse = draws.std(axis=0) / np.sqrt(ess_values)
    return (draws.mean(axis=0) - target_mean) / mcse, ess_values


class ClipMonitor:
    """Records how far the per-row ratios / gradients were from their clip bounds (test-only introspection)."""

    def __init__(self, monkeypatch):
        self.ratio = 0.0  # max_i |r_i| / c over all ratio releases
        self.grad = 0.0  # max_i ||grad l_i|| / b_g over all gradient evaluations
        self.clipped_ratio_releases = 0
        self.ratio_releases = 0
        orig_ratio, orig_grad = mechanisms.clip_ratios, mechanisms.clipped_gradient_sum

        def clip_ratios(r, c):
            r = np.asarray(r, dtype=float)
            if c > 0:
                worst = float(np.max(np.abs(r))) / c
                self.ratio = max(self.ratio, worst)
                self.clipped_ratio_releases += worst > 1.0
            self.ratio_releases += 1
            return orig_ratio(r, c)

        def clipped_gradient_sum(grads, b_g):
            self.grad = max(self.grad, float(np.linalg.norm(grads, axis=1).max()) / b_g)
            return orig_grad(grads, b_g)

        monkeypatch.setattr(mechanisms, "clip_ratios", clip_ratios)
        monkeypatch.setattr(mechanisms, "clipped_gradient_sum", clipped_gradient_sum)


@pytest.fixture(scope="module")
def gauss():
    """3-d conjugate Gaussian (Räisä et al.'s recipe, small n) with moderately correlated posterior."""
    model = GaussianMeanModel.simulate(200, 3, seed=33)
    mean, cov = model.posterior_mean(), model.posterior_cov()
    # per-row Lipschitz constant of l_i near the posterior: ||obs_prec (x_i - theta)||; bounds at twice the
    # largest value never bind (checked by ClipMonitor in the tests)
    lipschitz = np.linalg.norm((model.x - mean) @ np.linalg.inv(model.obs_cov), axis=1).max()
    return types.SimpleNamespace(model=model, mean=mean, sd=np.sqrt(np.diag(cov)), bound=2.0 * lipschitz)


@pytest.fixture(scope="module")
def banana():
    """Räisä et al.'s banana model (a = 20, sigma0 = 1000) with n = 500, sigma1^2 = 4, sigma2^2 = 12.5.

    The curvature term a^2 Var(y_1^2) is twice the Gaussian part of theta_2's posterior variance: a clear
    banana, but milder than the paper's n = 100,000 setting, whose arms need far longer chains than a unit test
    can afford (the paper itself reports chains stuck in the tail there).
    """
    model = BananaModel.simulate(500, seed=4, sigma1_sq=4.0, sigma2_sq=12.5)
    cov = model.posterior_cov()
    return types.SimpleNamespace(model=model, mean=model.posterior_mean(), sd=np.sqrt(np.diag(cov)))


# ----------------------------------------------------------------------------------------------------------
# construction, options, registry
# ----------------------------------------------------------------------------------------------------------
def test_registry_and_accounting_names():
    """ALGORITHMS maps the user-facing names to the kernels, whose accounting names match."""
    assert ALGORITHMS["penalty"] is PenaltyMH and ALGORITHMS["dp-hmc"] is DPHMC
    assert PenaltyMH.accounting_name == "penalty" and DPHMC.accounting_name == "dp-hmc"
    assert set(PenaltyMH.option_defaults) == {"ratio_clip", "diff_clip"}
    assert set(DPHMC.option_defaults) == {"ratio_clip", "diff_clip", "grad_clip", "leapfrog_steps", "gradient_share"}


def test_accounting_shape():
    """accounting_shape: nothing for penalty, L and the gradient share (defaults filled in) for DP-HMC."""
    assert PenaltyMH.accounting_shape({"ratio_clip": 2.0}) == {}
    assert DPHMC.accounting_shape({"leapfrog_steps": 7}) == {"leapfrog_steps": 7, "gradient_share": 0.5}
    assert DPHMC.accounting_shape({}) == {"leapfrog_steps": DPHMC.option_defaults["leapfrog_steps"],
                                          "gradient_share": 0.5}
    with pytest.raises(ValueError, match="leapfrog_steps"):
        DPHMC.accounting_shape({"leapfrog_steps": 0})


@pytest.mark.parametrize(
    "cls, options, match",
    [
        (PenaltyMH, {"grad_clip": 1.0}, "unknown option 'grad_clip'.*valid options: ratio_clip, diff_clip"),
        (PenaltyMH, {"step_size": 0.1}, "run-level option"),
        (DPHMC, {"metric": [1.0]}, "run-level option.*valid options: ratio_clip, diff_clip, grad_clip, leapfrog_steps"),
        (DPHMC, {"target_accept": 0.6}, "run-level option"),
        (PenaltyMH, {"ratio_clip": 0.0}, "'ratio_clip' of algorithm 'penalty' must be a finite number > 0"),
        (PenaltyMH, {"ratio_clip": -1.0}, "'ratio_clip'"),
        (PenaltyMH, {"ratio_clip": math.inf}, "'ratio_clip'"),
        (PenaltyMH, {"ratio_clip": "big"}, "'ratio_clip' of algorithm 'penalty' must be a finite number"),
        (DPHMC, {"grad_clip": 0}, "'grad_clip'"),
        (DPHMC, {"grad_clip": True}, "'grad_clip'"),
        (DPHMC, {"leapfrog_steps": 2.5}, "'leapfrog_steps' of algorithm 'dp-hmc' must be an integer"),
        (DPHMC, {"leapfrog_steps": 0}, "'leapfrog_steps'"),
    ],
)
def test_bad_options_are_rejected(gauss, cls, options, match):
    """Bad option names and values raise ValueError naming the option and listing the valid ones."""
    with pytest.raises(ValueError, match=match):
        cls(gauss.model, plan(0.1, 0.1, 10), **options)


@pytest.mark.parametrize("cls", [PenaltyMH, DPHMC])
def test_ratio_clip_has_no_silent_default(gauss, cls):
    """penalty MH and DP-HMC refuse to run without ratio_clip (it used to default to 1.0 silently): the error names
    the option, how to give it and how to choose it."""
    with pytest.raises(ValueError, match=r"'ratio_clip' of algorithm '.*' is required and has no default.*"
                                         r"ratio_clip=VALUE.*--option ratio_clip=VALUE.*never from the private rows"):
        cls(gauss.model, plan(0.1, 0.1, 10))


def test_dp_hmc_gradient_bound_defaults_to_the_ratio_bound(gauss):
    """Without grad_clip DP-HMC clips gradients at ratio_clip (a ratio bound per unit move bounds the gradient)."""
    kernel = DPHMC(gauss.model, plan(0.3, 0.2, 10), ratio_clip=2.0)
    assert kernel.grad_clip == 2.0 and kernel.grad_noise_sd == pytest.approx(2 * 0.2 * 2.0)


def test_plan_is_checked(gauss):
    """The kernels read tau_l / tau_g / leapfrog_steps from the plan and refuse a plan for another L."""
    with pytest.raises(ValueError, match="does not match the privacy plan"):
        DPHMC(gauss.model, plan(0.1, 0.1, 5), ratio_clip=1.0, leapfrog_steps=6)
    with pytest.raises(ValueError, match="tau_g"):
        DPHMC(gauss.model, plan(0.1, None, 10), ratio_clip=1.0)
    with pytest.raises(ValueError, match="tau_l"):
        PenaltyMH(gauss.model, plan(-1.0), ratio_clip=1.0)
    kernel = DPHMC(gauss.model, plan(0.3, 0.2, 4), ratio_clip=2.0, grad_clip=3.0, leapfrog_steps=4)
    assert (kernel.tau_l, kernel.tau_g, kernel.leapfrog_steps) == (0.3, 0.2, 4)
    # the leapfrog clips at min(grad_clip, ratio_clip) = 2.0, and the gradient noise is scaled to that bound
    assert kernel.grad_noise_sd == pytest.approx(2 * 0.2 * 2.0)


def test_init_state_touches_no_rows(gauss):
    """init_state builds the state without evaluating any private row; step validates its run-level inputs."""

    class NoRows:
        n_rows, dim = gauss.model.n_rows, gauss.model.dim

        def __getattr__(self, name):
            raise AssertionError(f"init_state touched the likelihood ({name})")

    for kernel in (PenaltyMH(NoRows(), plan(0.1), ratio_clip=1.0), DPHMC(NoRows(), plan(0.1, 0.1, 10), ratio_clip=1.0)):
        state = kernel.init_state(np.zeros(3))
        assert isinstance(state, ChainState) and state.theta.shape == (3,)
    kernel = PenaltyMH(gauss.model, plan(0.1), ratio_clip=1.0)
    state = kernel.init_state(gauss.mean)
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="step_size"):
        kernel.step(rng, state, 0.0, np.ones(3))
    with pytest.raises(ValueError, match="metric"):
        kernel.step(rng, state, 0.1, np.ones(2))
    with pytest.raises(ValueError, match="theta"):
        kernel.init_state(np.zeros(4))


# ----------------------------------------------------------------------------------------------------------
# what is released, and how often the gradient mechanism runs
# ----------------------------------------------------------------------------------------------------------
def test_dp_hmc_releases_exactly_L_plus_1_gradients_per_iteration(gauss, monkeypatch):
    """Each DP-HMC iteration makes L + 1 noisy gradient releases and 1 ratio release, with fresh noise each."""
    L = 5
    counts = {"grad": 0, "ratio": 0, "row_grad_evals": 0}
    orig_grad, orig_ratio = mechanisms.noisy_gradient, mechanisms.noisy_clipped_ratio_sum

    def noisy_gradient(*args, **kwargs):
        counts["grad"] += 1
        return orig_grad(*args, **kwargs)

    def noisy_ratio(*args, **kwargs):
        counts["ratio"] += 1
        return orig_ratio(*args, **kwargs)

    monkeypatch.setattr(mechanisms, "noisy_gradient", noisy_gradient)
    monkeypatch.setattr(mechanisms, "noisy_clipped_ratio_sum", noisy_ratio)

    class Counting:
        def __init__(self, inner):
            self.inner, self.n_rows, self.dim = inner, inner.n_rows, inner.dim

        def row_log_lik_grad(self, theta, rows=None):
            counts["row_grad_evals"] += 1
            return self.inner.row_log_lik_grad(theta, rows)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    kernel = DPHMC(Counting(gauss.model), plan(0.5, 0.5, L), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                   leapfrog_steps=L)
    rng = np.random.default_rng(4)
    state = kernel.init_state(gauss.mean)
    for i in range(20):
        before = dict(counts)
        state, info = kernel.step(rng, state, 0.5, gauss.sd**2)
        assert not info.extra["diverging"]
        assert counts["grad"] - before["grad"] == L + 1
        assert counts["ratio"] - before["ratio"] == 1
        # computation: L new positions per iteration (the start point's clipped sum is cached, noise is not)
        assert counts["row_grad_evals"] - before["row_grad_evals"] == L + (1 if i == 0 else 0)


def test_dp_hmc_start_gradient_gets_fresh_noise(gauss, monkeypatch):
    """The first gradient of an iteration reuses only the noise-free clipped sum: its noise is freshly drawn."""
    seen = []
    orig = mechanisms.noisy_gradient

    def spy(rng, clipped_sum, prior_grad, b_g, tau_g):
        out = orig(rng, clipped_sum, prior_grad, b_g, tau_g)
        seen.append((np.array(clipped_sum), out[0]))
        return out

    monkeypatch.setattr(mechanisms, "noisy_gradient", spy)
    L = 3
    kernel = DPHMC(gauss.model, plan(0.5, 0.5, L), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                   leapfrog_steps=L)
    rng = np.random.default_rng(1)
    state = kernel.init_state(gauss.mean)
    for _ in range(10):
        state, info = kernel.step(rng, state, 0.4, gauss.sd**2)
    starts = seen[:: L + 1]
    ends = seen[L :: L + 1]
    for k in range(1, len(starts)):
        # same cached clipped sum as the previous iteration's start (rejected) or end (accepted) ...
        assert any(np.array_equal(starts[k][0], prev[0]) for prev in (starts[k - 1], ends[k - 1]))
        # ... but never the same released value
        assert not np.array_equal(starts[k][1], starts[k - 1][1])
        assert not np.array_equal(starts[k][1], ends[k - 1][1])


def test_step_info_holds_only_releasable_scalars(gauss):
    """StepInfo: accept flag, accept_stat in [0, 1] and the documented public extras with their exact values."""
    tau_l, tau_g, L = 0.4, 0.3, 4
    pen = PenaltyMH(gauss.model, plan(tau_l), ratio_clip=gauss.bound)
    hmc = DPHMC(gauss.model, plan(tau_l, tau_g, L), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                leapfrog_steps=L)
    for kernel, step_size, keys in (
        (pen, 1.0, {"noise_sd"}),
        (hmc, 0.5, {"n_steps", "step_size", "noise_sd", "grad_noise_sd", "diverging"}),
    ):
        rng = np.random.default_rng(7)
        state = kernel.init_state(gauss.mean)
        n_accepted = 0
        for _ in range(200):
            old = state.theta.copy()
            state, info = kernel.step(rng, state, step_size, gauss.sd**2)
            assert isinstance(info, StepInfo) and isinstance(info.accepted, bool)
            assert 0.0 <= info.accept_stat <= 1.0
            assert set(info.extra) == keys
            assert all(isinstance(v, (bool, int, float)) for v in info.extra.values())
            if info.accepted:
                n_accepted += 1
                # noise sd = 2 tau_l b_l ||theta' - theta||: public constants and the released move
                expected = 2 * tau_l * gauss.bound * np.linalg.norm(state.theta - old)
                assert info.extra["noise_sd"] == pytest.approx(expected, rel=1e-10)
            else:
                assert np.array_equal(state.theta, old)
            if kernel is hmc:
                assert info.extra["n_steps"] == L
                assert info.extra["grad_noise_sd"] == pytest.approx(2 * tau_g * gauss.bound)
                assert 0.0 < info.extra["step_size"] < step_size
        assert 0 < n_accepted < 200


def test_halton_jitter_is_a_randomised_stratified_sequence():
    """The step-size multipliers are a digit-scrambled van der Corput sequence: in (0, 1), one per 1/2^k bin."""
    flips = 0b1011_0110_1110_0001
    h = np.array([scrambled_van_der_corput(i, flips) for i in range(1024)])
    assert ((h > 0) & (h < 1)).all()
    for k in (1, 4, 10):
        bins = np.floor(h[: 2**k] * 2**k).astype(int)
        assert sorted(bins) == list(range(2**k))
    assert abs(h.mean() - 0.5) < 1e-3
    plain = np.array([scrambled_van_der_corput(i, 0) for i in range(1, 8)])
    np.testing.assert_allclose(plain, [0.5, 0.25, 0.75, 0.125, 0.625, 0.375, 0.875])


def test_dp_hmc_divergence_is_rejected_and_flagged(gauss):
    """A trajectory that overflows is rejected, flagged as diverging, and leaves the state unchanged."""
    kernel = DPHMC(gauss.model, plan(0.1, 0.1, 3), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                   leapfrog_steps=3)
    rng = np.random.default_rng(0)
    state = kernel.init_state(gauss.mean)
    new, info = kernel.step(rng, state, 1e305, np.full(3, 1e5))
    assert info.extra["diverging"] is True and info.accepted is False and info.accept_stat == 0.0
    np.testing.assert_array_equal(new.theta, gauss.mean)
    new, info = kernel.step(rng, new, 0.3, gauss.sd**2)
    assert info.extra["diverging"] is False


# ----------------------------------------------------------------------------------------------------------
# mechanisms
# ----------------------------------------------------------------------------------------------------------
def test_mechanisms_bound_every_rows_contribution():
    """Clipping keeps each row inside the clip ball even for NaN/inf values, so sensitivity stays 2c / 2 b_g."""
    r = np.array([0.5, -3.0, 7.0, np.nan, np.inf, -np.inf])
    np.testing.assert_array_equal(mechanisms.clip_ratios(r, 2.0), [0.5, -2.0, 2.0, -2.0, 2.0, -2.0])
    assert mechanisms.clipped_ratio_sum(r, 2.0) == pytest.approx(-1.5)
    rng = np.random.default_rng(0)
    g = rng.normal(0, 3, size=(40, 3))
    g[3] = np.inf
    g[5, 1] = np.nan
    g[7] = 1e200
    clipped = mechanisms.clip_gradients(g, 2.0)
    norms = np.linalg.norm(clipped, axis=1)
    assert (norms <= 2.0 + 1e-12).all() and norms[3] == 0 and norms[5] == 0
    assert norms[7] == pytest.approx(2.0)
    with np.errstate(over="ignore"):
        small = np.linalg.norm(g, axis=1) < 2.0
    np.testing.assert_array_equal(clipped[small], g[small])
    np.testing.assert_allclose(mechanisms.clipped_gradient_sum(g, 2.0), clipped.sum(axis=0))
    # noise scales and the penalty term
    assert mechanisms.ratio_noise_sd(0.5, 3.0) == 3.0
    assert mechanisms.gradient_noise_sd(0.25, 4.0) == 2.0
    assert mechanisms.penalty_log_accept_term(3.0) == -4.5
    assert mechanisms.ratio_clip_bound(2.0, np.zeros(2), np.array([3.0, 4.0])) == 10.0
    # tau = 0 runs the same code path with exactly zero noise
    value, sigma = mechanisms.noisy_clipped_ratio_sum(rng, r, 2.0, 0.0)
    assert sigma == 0.0 and value == pytest.approx(-1.5)
    with pytest.raises(ValueError):
        mechanisms.clip_gradients(g, 0.0)


def test_row_blocks_do_not_change_per_row_results(monkeypatch):
    """Norms, clipping, the clipped sums and the anchor's non-finite rule are row-local: computed in blocks of 7
    rows they equal, bit for bit, the one-block computation (the rows' count is below the default block), for rows
    with inf, NaN, huge, tiny and zero entries; the clipped gradient sum is the scaled-rows product it always was,
    and all rows as None is np.arange(N)."""
    from stan_dp.phases.adaptive_clip import difference_norms
    from stan_dp.phases.anchor import anchor_row_gradients

    rng = np.random.default_rng(4)
    g = rng.normal(0, 3, size=(1000, 4))
    g[3], g[5, 1], g[7], g[11], g[13] = np.inf, np.nan, 1e200, 1e-300, 0.0
    finite = np.where(np.isfinite(g).all(axis=1)[:, None], g, 0.0)
    finite[7] = 1.0

    def results():
        return [mechanisms.clip_gradients(g, 2.0), mechanisms.row_norms(g), mechanisms.clipped_gradient_sum(g, 2.0),
                mechanisms.clipped_gradient_sum(finite, 2.0), mechanisms.clipped_squared_gradient_sum(g, 2.0),
                mechanisms.clipped_outer_product_sum(g, 2.0), anchor_row_gradients(g.copy()),
                difference_norms(g, finite[::-1])]

    whole = results()
    monkeypatch.setattr(mechanisms, "ROW_BLOCK", 7)
    for blocked, one in zip(results(), whole):
        np.testing.assert_array_equal(blocked, one)
    norms = np.sqrt(np.einsum("ij,ij->i", finite, finite))
    assert np.array_equal(mechanisms.clipped_gradient_sum(finite, 2.0),
                          np.where(norms > 2.0, 2.0 / np.where(norms > 2.0, norms, 1.0), 1.0) @ finite)
    # in place for an array the caller owns, a copy of a read-only one
    owned = g.copy()
    assert anchor_row_gradients(owned) is owned and not owned[3].any() and not owned[5].any()
    frozen = g.copy()
    frozen.flags.writeable = False
    assert np.array_equal(anchor_row_gradients(frozen), owned) and np.isinf(frozen[3]).all()
    model = LogisticRegressionModel(rng.normal(size=(50, 2)), rng.integers(0, 2, 50).astype(float))
    theta = rng.normal(size=model.dim)
    assert np.array_equal(mechanisms.rows_clipped_gradient_sum(model, theta, None, 0.5),
                          mechanisms.rows_clipped_gradient_sum(model, theta, np.arange(50), 0.5))


def test_penalty_correction_satisfies_detailed_balance():
    """E[min(1, exp(D + xi - s^2/2))] = alpha(D) with alpha(D) = e^D alpha(-D), by formula and by simulation."""
    rng = np.random.default_rng(3)
    n = 400_000
    for delta, sigma in ((0.7, 1.5), (-1.2, 0.6), (2.5, 3.0), (0.0, 2.0)):
        a_fwd = mechanisms.penalty_accept_probability(delta, sigma)
        a_bwd = mechanisms.penalty_accept_probability(-delta, sigma)
        assert a_fwd == pytest.approx(math.exp(delta) * a_bwd, rel=1e-12)
        for d, exact in ((delta, a_fwd), (-delta, a_bwd)):
            log_alpha = d + sigma * rng.standard_normal(n) + mechanisms.penalty_log_accept_term(sigma)
            stats = np.minimum(1.0, np.exp(log_alpha))
            accepted = -rng.standard_exponential(n) < log_alpha
            se = math.sqrt(exact * (1 - exact) / n)
            assert abs(accepted.mean() - exact) < 4.5 * se
            assert abs(stats.mean() - exact) < 4.5 * se
    assert mechanisms.penalty_accept_probability(-1.0, 0.0) == pytest.approx(math.exp(-1.0))


# ----------------------------------------------------------------------------------------------------------
# statistical tests against analytic posteriors
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_penalty_matches_gaussian_posterior_with_noise(gauss, monkeypatch):
    """Penalty MH, noise on and clip bounds that never bind, matches the conjugate Gaussian posterior."""
    monitor = ClipMonitor(monkeypatch)
    kernel = PenaltyMH(gauss.model, plan(0.2), ratio_clip=gauss.bound)
    draws, infos = run_chain(kernel, gauss.mean, 30_000, 1.0, gauss.sd**2, seed=1)
    assert monitor.ratio < 1.0  # clipping never bound
    noise = np.array([i.extra["noise_sd"] for i in infos])
    assert np.median(noise) > 0.3  # the noise is really on
    z, ess_values = mean_z_scores(draws, gauss.mean)
    assert (ess_values > 400).all()
    assert (np.abs(z) < 4).all(), z
    np.testing.assert_allclose(draws.std(axis=0), gauss.sd, rtol=0.10)
    accepted = np.array([i.accepted for i in infos])
    stat = np.array([i.accept_stat for i in infos])
    # the released statistic's mean is the acceptance probability
    assert abs(accepted.mean() - stat.mean()) < 0.02


@pytest.mark.slow
def test_dp_hmc_matches_gaussian_posterior_with_noise(gauss, monkeypatch):
    """DP-HMC, noisy gradients and noisy ratio test, no clipping, matches the conjugate Gaussian posterior."""
    monitor = ClipMonitor(monkeypatch)
    L = 4
    kernel = DPHMC(gauss.model, plan(0.2, 0.5, L), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                   leapfrog_steps=L)
    draws, infos = run_chain(kernel, gauss.mean, 4000, 0.6, gauss.sd**2, seed=1)
    assert monitor.ratio < 1.0 and monitor.grad < 1.0
    noise = np.array([i.extra["noise_sd"] for i in infos])
    assert np.median(noise) > 0.3 and infos[0].extra["grad_noise_sd"] > 5.0
    z, ess_values = mean_z_scores(draws, gauss.mean)
    assert (ess_values > 400).all()
    assert (np.abs(z) < 4).all(), z
    np.testing.assert_allclose(draws.std(axis=0), gauss.sd, rtol=0.10)


@pytest.mark.slow
def test_penalty_chain_is_exact_under_heavy_noise_and_biased_without_correction(monkeypatch):
    """Räisä, Koskela and Honkela (2021) Thm 3.3: with sigma ~ 2 and no clipping the penalty chain is exact; dropping -sigma^2/2 is not."""
    model = GaussianMeanModel.simulate(50, 1, seed=0)
    mean, sd = model.posterior_mean(), np.sqrt(np.diag(model.posterior_cov()))
    bound = 3.0 * np.abs((model.x - mean) / model.obs_cov[0, 0]).max()
    kernel = PenaltyMH(model, plan(1.0), ratio_clip=bound)

    monitor = ClipMonitor(monkeypatch)
    draws, infos = run_chain(kernel, mean, 20_000, 1.5, sd**2, seed=2)
    assert monitor.ratio < 1.0
    assert np.median([i.extra["noise_sd"] for i in infos]) > 1.5
    z, _ = mean_z_scores(draws, mean)
    assert abs(z[0]) < 4
    assert draws.std() == pytest.approx(sd[0], rel=0.10)

    # negative control: the same chain without the penalty correction over-disperses badly
    monkeypatch.setattr(mechanisms, "penalty_log_accept_term", lambda sigma: 0.0)
    biased, _ = run_chain(kernel, mean, 20_000, 1.5, sd**2, seed=2)
    assert biased.std() > 1.3 * sd[0]


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["penalty", "dp-hmc"])
def test_banana_posterior_mean_at_large_epsilon(banana, monkeypatch, algorithm):
    """At a large epsilon (small tau) both samplers recover the closed-form banana posterior mean."""
    monitor = ClipMonitor(monkeypatch)
    if algorithm == "penalty":
        kernel = PenaltyMH(banana.model, plan(0.02), ratio_clip=40.0)
        draws, infos = run_chain(kernel, banana.mean, 20_000, 0.8, banana.sd**2, seed=1)
    else:
        kernel = DPHMC(banana.model, plan(0.02, 0.01, 10), ratio_clip=40.0, grad_clip=40.0, leapfrog_steps=10)
        draws, infos = run_chain(kernel, banana.mean, 3000, 0.4, banana.sd**2, seed=1)
    # clipping at most very rare (far-off trajectory ends only), far under the paper's 20 % guideline
    assert monitor.clipped_ratio_releases <= 0.005 * monitor.ratio_releases
    assert np.median([i.extra["noise_sd"] for i in infos]) > 0.1  # noise on
    z, ess_values = mean_z_scores(draws, banana.mean)
    assert (ess_values > 150).all()
    assert (np.abs(z) < 4).all(), z
    # the chain explored the curved arms: theta_2 spread is of the posterior's order
    assert 0.7 < draws[:, 1].std() / banana.sd[1] < 1.3


@pytest.mark.parametrize("algorithm", ["penalty", "dp-hmc"])
def test_small_epsilon_lowers_acceptance_without_failing(gauss, algorithm):
    """With much more noise (small epsilon) the acceptance rate falls, and every step still returns cleanly."""
    rates = []
    for tau in (0.05, 5.0):
        if algorithm == "penalty":
            kernel = PenaltyMH(gauss.model, plan(tau), ratio_clip=gauss.bound)
            draws, infos = run_chain(kernel, gauss.mean, 1500, 1.0, gauss.sd**2, seed=5, burn=0)
        else:
            kernel = DPHMC(gauss.model, plan(tau, 10 * tau, 4), ratio_clip=gauss.bound, grad_clip=gauss.bound,
                           leapfrog_steps=4)
            draws, infos = run_chain(kernel, gauss.mean, 500, 0.6, gauss.sd**2, seed=5, burn=0)
        assert np.isfinite(draws).all()
        stats = np.array([i.accept_stat for i in infos])
        assert ((stats >= 0) & (stats <= 1)).all()
        rates.append(np.mean([i.accepted for i in infos]))
    assert rates[1] < 0.5 * rates[0], rates
    assert rates[0] > 0.3


@pytest.mark.parametrize(
    "model",
    [
        LogisticRegressionModel.simulate(300, 2, seed=1),
        TruncatedGaussianMixtureModel.simulate(2000, seed=1),
    ],
    ids=["logistic", "mixture"],
)
def test_kernels_run_on_other_reference_models(model):
    """Both kernels step cleanly on the logistic and truncated-mixture models (constrained parameters too)."""
    bound = 5.0 if isinstance(model, LogisticRegressionModel) else model.row_bound()
    for kernel, step_size in ((PenaltyMH(model, plan(0.5), ratio_clip=bound), 0.1),
                              (DPHMC(model, plan(0.5, 0.5, 3), ratio_clip=bound, grad_clip=bound,
                                     leapfrog_steps=3), 0.05)):
        draws, infos = run_chain(kernel, np.zeros(model.dim), 200, step_size, np.ones(model.dim), seed=0, burn=0)
        assert np.isfinite(draws).all()
        assert any(i.accepted for i in infos)
        released = model.constrain(draws[-1])
        assert {k: np.shape(v) for k, v in released.items()} == model.param_shapes()


def test_gradient_share_moves_budget_between_gradients_and_test():
    """DP-HMC's gradient_share option reaches the accountant: a larger share gives less gradient noise and
    more acceptance-test noise; a share outside (0, 1) is rejected."""
    from stan_dp.phases.calibration import calibrate
    from stan_dp.samplers.hmc import DPHMC

    def plan(share):
        shape = DPHMC.accounting_shape({"leapfrog_steps": 4, "gradient_share": share})
        return calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=2, iterations=100, **shape)

    low, high = plan(0.2), plan(0.8)
    assert high.tau_g < low.tau_g and high.tau_l > low.tau_l
    with pytest.raises(ValueError, match="gradient_share"):
        DPHMC.accounting_shape({"gradient_share": 1.5})
