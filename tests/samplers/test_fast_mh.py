"""Tests of DP-Fast MH (Zhang and Zhang (2023), Algorithm 2) and its full-batch variant (stan_dp/samplers/fast_mh.py).

All tests use fixed seeds and NumPy likelihoods (no compiler). The privacy plan is a stand-in
``SimpleNamespace(epsilon_iteration=..., delta_iteration=...)``; some tests use a large per-iteration delta
(unrealistic for privacy) only so that the noisy branches accept often enough to be checked statistically.
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest
from scipy.stats import norm

from stan_dp.samplers.base import ChainState, StepInfo
from stan_dp.samplers.fast_mh import (
    DPFastMH,
    DPFastMHFull,
    default_batch_limit,
    gaussian_mechanism_delta,
    minibatch_privacy_parameters,
    sigma_1,
    sigma_2,
    subsampled_minibatch_guarantee,
)


def plan(eps: float, delta: float) -> types.SimpleNamespace:
    return types.SimpleNamespace(epsilon_iteration=eps, delta_iteration=delta)


class Recording:
    """Wraps a row likelihood; records every point and row set it is asked about (test instrumentation)."""

    def __init__(self, inner):
        self.inner = inner
        self.n_rows, self.dim = inner.n_rows, inner.dim
        self.prior_points: list[np.ndarray] = []
        self.lik_calls: list[tuple[np.ndarray, int | None]] = []  # (theta, number of rows or None = all)

    def log_prior(self, theta):
        self.prior_points.append(np.array(theta, dtype=float))
        return self.inner.log_prior(theta)

    def row_log_lik(self, theta, rows=None):
        self.lik_calls.append((np.array(theta, dtype=float), None if rows is None else len(rows)))
        return self.inner.row_log_lik(theta, rows)


class ZeroLikelihood:
    """Every row log-likelihood and the log prior are 0: the acceptance test reduces to the noise term."""

    def __init__(self, n_rows: int, dim: int):
        self.n_rows, self.dim = n_rows, dim

    def log_prior(self, theta):
        return 0.0

    def row_log_lik(self, theta, rows=None):
        return np.zeros(self.n_rows if rows is None else len(rows))


def gaussian_model(n=1000, seed=1):
    """2-d conjugate Gaussian mean model with a proper, informative prior.

    obs sd 100 with data spread 1 keeps the per-row Lipschitz constants small (||x_i - theta|| / 100^2),
    so that c = 0.003 never binds while the posterior sd is ~3: the regime in which TunaMH batches are
    small (C M ~ 6 << N).
    """
    from stan_dp.models.reference_models import GaussianMeanModel

    rng = np.random.default_rng(seed)
    x = rng.normal([0.5, -0.3], 1.0, size=(n, 2))
    return GaussianMeanModel(x, obs_cov=100.0**2, prior_mean=[1.0, -1.0], prior_cov=10.0**2)


def run_chain(kernel, n_iter, n_warmup, step_size, seed, dim=2):
    rng = np.random.default_rng(seed)
    state = kernel.init_state(np.zeros(dim))
    draws, infos = [], []
    for i in range(n_warmup + n_iter):
        state, info = kernel.step(rng, state, step_size, np.ones(dim))
        if i >= n_warmup:
            draws.append(state.theta.copy())
            infos.append(info)
    return np.array(draws), infos


def check_moments(draws, model):
    """Means within 4 MCSE (ESS-based, arviz) and sds within 10 % of the analytic posterior."""
    import arviz as az

    mean, sd = model.posterior_mean(), np.sqrt(np.diag(model.posterior_cov()))
    for j in range(draws.shape[1]):
        chain = draws[None, :, j]
        mcse = float(az.mcse(chain, method="mean"))
        ess = float(az.ess(chain, method="bulk"))
        assert ess > 300, f"ESS too small to test coordinate {j}: {ess}"
        assert abs(draws[:, j].mean() - mean[j]) < 4 * mcse, (j, draws[:, j].mean(), mean[j], mcse)
        assert abs(draws[:, j].std() / sd[j] - 1) < 0.10, (j, draws[:, j].std(), sd[j])


def max_gradient_norm(model, points):
    """max over visited points and rows of ||grad l_i|| = ||obs_prec (x_i - theta)||. The norm is convex in
    theta, so its maximum over a segment [theta, theta'] is at an end point: if this is <= c, clipping at
    c ||theta' - theta|| never bound."""
    prec = np.linalg.inv(model.obs_cov)
    pts = np.unique(np.round(np.array(points), 12), axis=0)
    worst = 0.0
    for chunk in np.array_split(pts, max(1, len(pts) // 2000)):
        diff = model.x[None, :, :] - chunk[:, None, :]
        worst = max(worst, float(np.linalg.norm(diff @ prec, axis=2).max()))
    return worst


# ------------------------------------------------------------------------------------------------------
# Exactness (Theorem 3)
# ------------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_minibatch_exactness_gaussian():
    """DP-Fast MH (default: noise in every iteration) with the minibatch branch in most iterations (and some
    full-batch iterations) targets the exact conjugate posterior: means within 4 MCSE, sds within 10 %,
    clipping never binding."""
    model = gaussian_model()
    rec = Recording(model)
    c = 0.003
    kernel = DPFastMH(rec, plan(0.13, 0.05), row_bound=c, lam=50.0, batch_limit=70)
    draws, infos = run_chain(kernel, n_iter=20000, n_warmup=2000, step_size=2.0, seed=11)

    full = np.array([i.extra["full_batch"] for i in infos])
    free = np.array([i.extra["noise_free"] for i in infos])
    assert full.mean() < 0.2, "the minibatch branch must run in most iterations"
    assert full.sum() > 100, "some full-batch iterations should occur too"
    assert not free.any(), "by default every iteration is noisy (no privacy-for-free branch)"
    assert (~full).sum() > 500, "the noisy minibatch branch should be exercised"
    assert 0.2 < np.mean([i.accepted for i in infos]) < 0.95
    worst = max_gradient_norm(model, [t for t, _ in rec.lik_calls])
    assert worst <= c, f"the clip bound must never bind (max row gradient norm {worst} > c)"
    check_moments(draws, model)


@pytest.mark.slow
def test_full_batch_variant_exactness_with_noise():
    """DP-Fast MH (full batch, default: noise in every iteration) targets the exact conjugate posterior:
    means within 4 MCSE, sds within 10 %."""
    model = gaussian_model()
    rec = Recording(model)
    c = 0.003
    kernel = DPFastMHFull(rec, plan(0.015, 0.2), row_bound=c)
    draws, infos = run_chain(kernel, n_iter=30000, n_warmup=2000, step_size=2.0, seed=12)

    assert all(i.extra["full_batch"] and i.extra["batch_size"] == model.n_rows for i in infos)
    noisy = np.array([not i.extra["noise_free"] for i in infos])
    assert noisy.all(), "by default noise is on in every iteration"
    worst = max_gradient_norm(model, [t for t, _ in rec.lik_calls])
    assert worst <= c, f"the clip bound must never bind (max row gradient norm {worst} > c)"
    check_moments(draws, model)


class FixedProposalRng:
    """A Generator whose vector ``standard_normal`` always returns ``z`` (the kernel draws its random-walk
    proposal with one such call per step); every other draw (B, Batch(), scalar noise, uniform) is random."""

    def __init__(self, z, seed):
        self._z = np.asarray(z, dtype=float)
        self._gen = np.random.default_rng(seed)
        self.proposal_draws = 0

    def standard_normal(self, size=None):
        if size is None:  # a scalar draw: the Gaussian mechanism's noise, genuinely random
            return self._gen.standard_normal()
        assert size == self._z.shape[0]
        self.proposal_draws += 1
        return self._z.copy()

    def __getattr__(self, name):
        return getattr(self._gen, name)


def acceptance_probability(kernel, theta, move, n, seed):
    """Monte Carlo estimate of a(theta, theta + move) over all of the kernel's internal randomness."""
    rng = FixedProposalRng(move, seed)
    state = kernel.init_state(theta)
    accepted, branches = 0, set()
    for _ in range(n):
        _, info = kernel.step(rng, state, 1.0, np.ones(len(theta)))
        accepted += info.accepted
        branches.add((info.extra["full_batch"], info.extra["noise_free"]))
    assert rng.proposal_draws == n
    return accepted / n, branches


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, offset, move, expected_branches",
    [
        ("minibatch-free", [3.0, 0.0], [1.5, 0.0], {(False, True), (True, True)}),
        ("minibatch-noisy", [0.0, 0.0], [1.5, -1.0], {(False, False), (True, True)}),
        ("full-variant-noisy", [0.0, 0.0], [3.0, -2.0], {(True, False)}),
    ],
)
def test_detailed_balance_on_a_pair(case, offset, move, expected_branches):
    """Theorem 3 on one pair (theta, theta'), with the proposal held fixed and everything else random
    (Poisson B, the branch, Batch() and its thinning, the noise): pi(theta) a(theta, theta') =
    pi(theta') a(theta', theta) within 4 Monte Carlo sds. This pins Batch()'s keep probability, the artanh
    statistic, the penalty correction and the prior ratio (each of these, when broken, fails here)."""
    model = gaussian_model()
    if case == "full-variant-noisy":
        kernel = DPFastMHFull(model, plan(0.015, 0.2), row_bound=0.003)
    else:
        # the paper's free branches are exercised here too (opt-in): detailed balance holds either way
        kernel = DPFastMH(model, plan(0.15, 0.003), row_bound=0.003, lam=5.0, batch_limit=18,
                          privacy_for_free=True)
    theta = model.posterior_mean() + np.array(offset)
    move = np.array(move)
    theta_prop = theta + move
    assert max_gradient_norm(model, [theta, theta_prop]) <= 0.003  # no clipping on this segment
    n = 8000
    a_fwd, br_fwd = acceptance_probability(kernel, theta, move, n, seed=21)
    a_bwd, br_bwd = acceptance_probability(kernel, theta_prop, -move, n, seed=22)
    assert br_fwd == br_bwd == expected_branches  # the branch law is symmetric in (theta, theta')
    log_pi = lambda t: float(model.row_log_lik(t).sum() + model.log_prior(t))  # noqa: E731
    ratio = math.exp(log_pi(theta_prop) - log_pi(theta))
    sd = math.sqrt(a_fwd * (1 - a_fwd) / n + ratio**2 * a_bwd * (1 - a_bwd) / n)
    assert 0.05 < a_fwd < 0.95 or 0.05 < a_bwd < 0.95
    assert abs(a_fwd - ratio * a_bwd) < 4 * sd, (a_fwd, a_bwd, ratio, sd)


# ------------------------------------------------------------------------------------------------------
# Branches, thresholds and noise scales
# ------------------------------------------------------------------------------------------------------

def test_sigma_formulas_match_paper():
    """sigma_2 = sqrt(2 log(1.25/delta))/eps; sigma_1 equals Algorithm 2's expression and the classic
    Gaussian multiplier at (eps_m, delta_m) = (eps C/(6 K c), delta C/(2 K c)) (proof of Theorem 2)."""
    eps, delta, n, k, c = 0.05, 1e-5, 50_000, 420, 0.7  # eps_m = 0.992 < 1: Algorithm 2's own calibration
    assert sigma_2(eps, delta) == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) / eps, rel=1e-14)
    big_c = n * c
    paper = 6 * k * c * math.sqrt(2 * math.log(2.5 * k * c / (delta * big_c))) / (eps * big_c)
    assert sigma_1(eps, delta, k, c, big_c) == pytest.approx(paper, rel=1e-12)
    eps_m, delta_m = minibatch_privacy_parameters(eps, delta, k, c, big_c)
    assert eps_m == pytest.approx(eps * n / (6 * k)) and delta_m == pytest.approx(delta * n / (2 * k))
    assert sigma_1(eps, delta, k, c, big_c) == pytest.approx(math.sqrt(2 * math.log(1.25 / delta_m)) / eps_m)
    # the kernel uses exactly these
    kern = DPFastMH(ZeroLikelihood(n, 2), plan(eps, delta), row_bound=c, batch_limit=k, lam=10.0)
    assert kern.sigma_2 == sigma_2(eps, delta)
    assert kern.sigma_1 == sigma_1(eps, delta, k, c, big_c)
    assert kern.minibatch_threshold == pytest.approx(eps * big_c / (6 * k * c))
    assert kern.full_batch_threshold == eps


def test_calibration_delivers_claimed_guarantee():
    """The exact Gaussian privacy profile confirms (eps, delta) for sigma_2 and (eps_m, delta_m) for sigma_1,
    and the subsampling bound of Theorem 2's proof gives at most (eps, delta) at the default K."""
    for eps, delta, n in [(0.05, 1e-5, 50_000), (0.005, 1e-9, 10_000), (0.9, 1e-6, 2_000)]:
        assert gaussian_mechanism_delta(eps, sigma_2(eps, delta)) <= delta
        k = default_batch_limit(eps, n)
        eps_m, delta_m = minibatch_privacy_parameters(eps, delta, k, 1.0, float(n))
        assert eps_m <= 1.0 + 1e-12
        assert gaussian_mechanism_delta(eps_m, sigma_1(eps, delta, k, 1.0, float(n))) <= delta_m
        e_sub, d_sub = subsampled_minibatch_guarantee(eps_m, delta_m, 1.0 / n, k)
        assert e_sub <= eps and d_sub <= delta
    # sanity of the exact profile: the classic bound fails for very large epsilon
    assert gaussian_mechanism_delta(20.0, sigma_2(20.0, 1e-5)) > 1e-5


@pytest.mark.parametrize("kernel_cls", [DPFastMH, DPFastMHFull])
def test_free_branch_iff_sensitivity_below_threshold(kernel_cls):
    """noise_free is True exactly when the branch's Lemma 1 sensitivity is <= its threshold (epsilon C /
    (6 K c) for the minibatch branch, epsilon for the full batch), recomputed from the proposals the kernel
    made; both outcomes occur; batch_size / full_batch are consistent with B < K."""
    n, c, eps = 2000, 0.05, 0.2
    rec = Recording(ZeroLikelihood(n, 2))
    opts = {"row_bound": c} if kernel_cls is DPFastMHFull else {"row_bound": c, "lam": 100.0, "batch_limit": 150}
    kernel = kernel_cls(rec, plan(eps, 1e-3), privacy_for_free=True, **opts)
    rng = np.random.default_rng(3)
    state = kernel.init_state(np.zeros(2))
    seen = set()
    for i in range(3000):
        step = 10 ** rng.uniform(-3.5, 0.0)  # sensitivities on both sides of the thresholds
        before = state.theta.copy()
        n_prior = len(rec.prior_points)
        state, info = kernel.step(rng, state, step, np.ones(2))
        proposal = rec.prior_points[n_prior]  # log p0(theta') is evaluated once per step
        m = float(np.linalg.norm(proposal - before))
        full = info.extra["full_batch"]
        if full:
            sens, thr = 2 * c * m, eps
            assert info.extra["batch_size"] == n
        else:
            sens, thr = 2 * math.log1p(n * c * m / kernel.lam), eps * n * c / (6 * kernel.batch_limit * c)
            assert info.extra["batch_size"] < kernel.batch_limit
        assert info.extra["noise_free"] == (sens <= thr), (i, sens, thr)
        seen.add((full, info.extra["noise_free"]))
    expected = {(True, True), (True, False)} if kernel_cls is DPFastMHFull else {
        (True, True), (True, False), (False, True), (False, False)}
    assert seen == expected


@pytest.mark.slow
@pytest.mark.parametrize("kernel_cls", [DPFastMH, DPFastMHFull])
def test_noise_scale_and_penalty_correction(kernel_cls):
    """With l = 0 and a flat prior the accept probability is E min(1, exp(xi - s^2/2)) = 2 Phi(-s/2) with
    s = sigma * Delta in the noisy branch (sigma_1 or sigma_2 per branch) and 1 in the free branch: the
    observed acceptance count matches its expectation within 4 binomial sds, which pins the noise sd and the
    -variance/2 correction."""
    n, c = 2000, 0.05
    rec = Recording(ZeroLikelihood(n, 1))
    opts = {"row_bound": c} if kernel_cls is DPFastMHFull else {"row_bound": c, "lam": 100.0, "batch_limit": 150}
    kernel = kernel_cls(rec, plan(0.2, 0.1), **opts)
    # log10 step range putting M on both sides of the thresholds (and of K for the minibatch kernel)
    low, high = (-0.5, 1.0) if kernel_cls is DPFastMHFull else (-1.5, 0.5)
    rng = np.random.default_rng(4)
    state = kernel.init_state(np.zeros(1))
    probs, accepts, branches = [], [], []
    for _ in range(6000):
        before = state.theta.copy()
        k0 = len(rec.prior_points)
        state, info = kernel.step(rng, state, 10 ** rng.uniform(low, high), np.ones(1))
        m = float(np.linalg.norm(rec.prior_points[k0] - before))
        if info.extra["noise_free"]:
            p = 1.0
        elif info.extra["full_batch"]:
            p = 2 * norm.cdf(-kernel.sigma_2 * 2 * c * m / 2)
        else:
            p = 2 * norm.cdf(-kernel.sigma_1 * 2 * math.log1p(n * c * m / kernel.lam) / 2)
        probs.append(p)
        accepts.append(info.accepted)
        branches.append((info.extra["full_batch"], info.extra["noise_free"]))
        assert info.accept_stat == float(info.accepted)
    probs, accepts = np.array(probs), np.array(accepts)
    assert accepts[probs == 1.0].all(), "the free branch with l = 0 must always accept"
    noisy_branches = [(True, False)] if kernel_cls is DPFastMHFull else [(True, False), (False, False)]
    for branch in noisy_branches:  # full batch (sigma_2) and minibatch (sigma_1) checked separately
        sel = np.array([b == branch for b in branches])
        assert sel.sum() > 300, (branch, sel.sum())
        expected, sd = probs[sel].sum(), math.sqrt(np.sum(probs[sel] * (1 - probs[sel])))
        assert abs(accepts[sel].sum() - expected) < 4 * sd, (branch, accepts[sel].sum(), expected, sd)


def test_privacy_for_free_option_off_always_adds_noise():
    """privacy_for_free=False: every iteration with M > 0 runs the noisy test (noise_free is never True)."""
    kernel = DPFastMH(ZeroLikelihood(500, 2), plan(0.5, 1e-3), row_bound=0.01, privacy_for_free=False)
    rng = np.random.default_rng(5)
    state = kernel.init_state(np.zeros(2))
    for _ in range(300):
        state, info = kernel.step(rng, state, 1e-4, np.ones(2))
        assert info.extra["noise_free"] is False


def test_released_flags_depend_only_on_public_quantities():
    """From the same state and generator seed, two datasets that differ completely give identical released
    batch_size, full_batch and noise_free: they are drawn before any row is read."""
    from stan_dp.models.reference_models import GaussianMeanModel

    rng = np.random.default_rng(6)
    x1 = rng.normal(0.0, 1.0, size=(300, 2))
    x2 = rng.normal(5.0, 3.0, size=(300, 2))
    m1 = GaussianMeanModel(x1, obs_cov=1.0, prior_mean=0.0, prior_cov=4.0)
    m2 = GaussianMeanModel(x2, obs_cov=1.0, prior_mean=0.0, prior_cov=4.0)
    for kernel_cls in (DPFastMH, DPFastMHFull):
        opts = {"row_bound": 3.0} if kernel_cls is DPFastMHFull else {"row_bound": 3.0, "lam": 20.0, "batch_limit": 40}
        k1, k2 = kernel_cls(m1, plan(0.3, 1e-4), **opts), kernel_cls(m2, plan(0.3, 1e-4), **opts)
        for trial in range(200):
            theta = rng.normal(size=2)
            step = 10 ** rng.uniform(-3, -1)
            _, i1 = k1.step(np.random.default_rng(trial), k1.init_state(theta), step, np.ones(2))
            _, i2 = k2.step(np.random.default_rng(trial), k2.init_state(theta), step, np.ones(2))
            assert i1.extra == i2.extra


# ------------------------------------------------------------------------------------------------------
# Release schema and cost
# ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kernel_cls", [DPFastMH, DPFastMHFull])
def test_stepinfo_contains_only_allowed_keys(kernel_cls):
    """StepInfo holds the accept flag, accept_stat = float(accepted) (never an acceptance probability) and
    exactly the extras batch_size (int), full_batch (bool), noise_free (bool)."""
    model = gaussian_model(n=200)
    opts = {"row_bound": 0.01} if kernel_cls is DPFastMHFull else {"row_bound": 0.01, "lam": 20.0, "batch_limit": 40}
    kernel = kernel_cls(model, plan(0.2, 1e-3), **opts)
    rng = np.random.default_rng(7)
    state = kernel.init_state(np.zeros(2))
    for _ in range(200):
        state, info = kernel.step(rng, state, 0.5, np.ones(2))
        assert isinstance(info, StepInfo) and isinstance(state, ChainState)
        assert set(info.extra) == {"batch_size", "full_batch", "noise_free"}
        assert type(info.extra["batch_size"]) is int
        assert type(info.extra["full_batch"]) is bool and type(info.extra["noise_free"]) is bool
        assert type(info.accepted) is bool and info.accept_stat == float(info.accepted)


def test_cost_rows_evaluated_and_cache():
    """Minibatch iterations evaluate only the sampled rows (at most B at theta' and B at theta, one call
    each); full-batch iterations evaluate all rows at theta' and at theta only when no full-batch values
    are cached for the current state; the full-batch variant makes one all-row call per iteration after the
    first."""
    n = 5000
    rec = Recording(ZeroLikelihood(n, 2))
    kernel = DPFastMH(rec, plan(0.05, 1e-4), row_bound=0.001, lam=30.0, batch_limit=45)
    rng = np.random.default_rng(8)
    state = kernel.init_state(np.zeros(2))
    n_full = n_mini = 0
    for _ in range(2000):
        cached = "row_log_lik" in state.cache
        k0 = len(rec.lik_calls)
        state, info = kernel.step(rng, state, 1.0, np.ones(2))
        calls = rec.lik_calls[k0:]
        if info.extra["full_batch"]:
            n_full += 1
            assert all(size is None for _, size in calls)
            assert len(calls) == (1 if cached else 2)
        else:
            n_mini += 1
            b = info.extra["batch_size"]
            assert len(calls) <= (1 if cached else 2) and (b > 0 or not calls)
            assert all(size is not None and size <= b for _, size in calls)
    assert n_full > 50 and n_mini > 1000

    rec_full = Recording(ZeroLikelihood(n, 2))
    full = DPFastMHFull(rec_full, plan(0.3, 1e-4), row_bound=0.001)
    state = full.init_state(np.zeros(2))
    for i in range(50):
        k0 = len(rec_full.lik_calls)
        state, _ = full.step(rng, state, 1.0, np.ones(2))
        assert len(rec_full.lik_calls) - k0 == (2 if i == 0 else 1)


# ------------------------------------------------------------------------------------------------------
# Options
# ------------------------------------------------------------------------------------------------------

def test_defaults():
    """Default K = ceil(eps N / 6) (at least 1), lambda = K / 2; accounting_shape carries only delta_split; names."""
    lik = ZeroLikelihood(10_000, 3)
    kern = DPFastMH(lik, plan(0.05, 1e-6), row_bound=1.0)
    assert kern.batch_limit == math.ceil(0.05 * 10_000 / 6) == 84
    assert kern.lam == 42.0
    assert DPFastMH(ZeroLikelihood(100, 1), plan(0.01, 1e-6), row_bound=1.0).batch_limit == 1
    assert DPFastMH.accounting_shape({}) == {"delta_split": 0.25}
    assert DPFastMHFull.accounting_shape({"row_bound": 1, "delta_split": 0.5}) == {"delta_split": 0.5}
    assert DPFastMH.accounting_name == "dp-fast-mh" and DPFastMHFull.accounting_name == "dp-fast-mh-full"
    assert set(DPFastMH.option_defaults) == {"row_bound", "diff_clip", "lam", "batch_limit", "privacy_for_free",
                                              "delta_split"}
    assert set(DPFastMHFull.option_defaults) == {"row_bound", "diff_clip", "privacy_for_free", "delta_split"}


@pytest.mark.parametrize(
    "kernel_cls, options, match",
    [
        (DPFastMH, {}, "row_bound.*required"),
        (DPFastMHFull, {}, "row_bound.*required"),
        (DPFastMH, {"row_bound": 0.0}, "row_bound"),
        (DPFastMH, {"row_bound": float("inf")}, "row_bound"),
        (DPFastMH, {"row_bound": True}, "row_bound"),
        (DPFastMH, {"row_bound": 1.0, "lam": -1.0}, "lam"),
        (DPFastMH, {"row_bound": 1.0, "batch_limit": 0}, "batch_limit"),
        (DPFastMH, {"row_bound": 1.0, "batch_limit": 2.5}, "batch_limit"),
        (DPFastMH, {"row_bound": 1.0, "privacy_for_free": "yes"}, "privacy_for_free"),
        (DPFastMH, {"row_bound": 1.0, "step_size": 0.1}, "unknown option.*'step_size'.*valid options"),
        (DPFastMHFull, {"row_bound": 1.0, "batch_limit": 10}, "unknown option.*'batch_limit'"),
        (DPFastMHFull, {"row_bound": 1.0, "lam": 10.0}, "unknown option.*'lam'"),
    ],
)
def test_option_validation(kernel_cls, options, match):
    """Bad options raise ValueError naming the option (and listing the valid ones for unknown options)."""
    with pytest.raises(ValueError, match=match):
        kernel_cls(ZeroLikelihood(1000, 2), plan(0.1, 1e-5), **options)


def test_plan_validation_and_uncalibratable_budgets():
    """A plan without per-iteration values, a non-positive epsilon or delta outside (0, 1) is refused, and
    so is a user-set K for which no representable minibatch delta satisfies the subsampling bound."""
    lik = ZeroLikelihood(1000, 2)
    with pytest.raises(ValueError, match="epsilon_iteration"):
        DPFastMH(lik, types.SimpleNamespace(tau_l=1.0), row_bound=1.0)
    with pytest.raises(ValueError, match="epsilon_iteration"):
        DPFastMH(lik, plan(0.0, 1e-5), row_bound=1.0)
    with pytest.raises(ValueError, match="delta_iteration"):
        DPFastMHFull(lik, plan(0.1, 1.0), row_bound=1.0)
    with pytest.raises(ValueError, match="batch_limit"):  # delta_m would underflow
        DPFastMH(lik, plan(1000.0, 1e-10), row_bound=1.0, batch_limit=1000)


def test_step_argument_validation():
    """A negative or non-finite step size, or a metric of the wrong shape, is refused."""
    kern = DPFastMHFull(ZeroLikelihood(10, 2), plan(0.1, 1e-5), row_bound=1.0)
    state = kern.init_state(np.zeros(2))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="step_size"):
        kern.step(rng, state, -1.0, np.ones(2))
    with pytest.raises(ValueError, match="metric"):
        kern.step(rng, state, 0.1, np.ones(3))


def test_privacy_for_free_is_opt_in_and_voids_the_guarantee():
    """The paper's privacy-for-free branches bound only accept probabilities, not reject probabilities, so
    they are off by default; opting in marks the kernel's guarantee as not holding."""
    for cls in (DPFastMH, DPFastMHFull):
        assert cls.option_defaults["privacy_for_free"] is False
        assert cls(ZeroLikelihood(100, 2), plan(0.1, 1e-6), row_bound=0.01).guarantee_holds
        assert not cls(ZeroLikelihood(100, 2), plan(0.1, 1e-6), row_bound=0.01, privacy_for_free=True).guarantee_holds


def test_privacy_for_free_run_is_marked_not_private():
    """A whole run with privacy_for_free=True warns and its InferenceData says it is not private."""
    from stan_dp.models.reference_models import GaussianMeanModel
    from stan_dp.run.pipeline import sample_private

    model = GaussianMeanModel.simulate(200, 2, seed=5)
    common = dict(algorithm="dp-fast-mh-full", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=20,
                  iter_sampling=20, seed=1, show_progress=False, row_bound=0.01)
    with pytest.warns(RuntimeWarning, match="does not hold"):
        fit = sample_private(model, privacy_for_free=True, **common)
    assert fit.attrs["private"] == 0 and "NOT PRIVATE" in fit.attrs["privacy_warning"]
    assert sample_private(model, **common).attrs["private"] == 1
