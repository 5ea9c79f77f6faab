"""What one SG-MCMC iteration releases is exactly the pair the accountant composed.

The accountant composes ``PoissonSampledDpEvent(q, GaussianDpEvent(tau))`` under REPLACE_ONE: in units of the
clipped sum S = sum_{i in B} clip_L(g_i), the pair q N(-L, s^2) + (1 - q) N(0, s^2) vs q N(+L, s^2) + (1 - q)
N(0, s^2), s = 2 tau L. These tests compute hockey-stick divergences of the ACTUAL release by quadrature (no
sampling error) and tie them to the kernel: the draw is an affine function of S + noise whose noise sd the kernel
reports, its distribution matches the quadrature's (a Kolmogorov-Smirnov test on fixed seeds), the other released
fields do not depend on the data, and the realised batch size, whose joint release with the draw the accountant
does not cover, is not released.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from stan_dp.audit.neighbours import CANARY_SLOPE, LinearCanary, RowsAtBound, SubstitutedRows
from stan_dp import calibrate
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.samplers import DPSGLD

N_ROWS, RATE, CLIP, EPSILON, DELTA = 100, 0.3, 1.0, 1.0, 1e-5


def _hockey_sticks(p_means, p_weights, q_means, q_weights, sd, epsilon) -> tuple[float, float]:
    """int max(0, p - e^eps q) and int max(0, q - e^eps p) for two mixtures of N(m, sd^2) (a fine grid; the
    integrand is smooth apart from its kink, so the trapezoid rule is accurate to far below the deltas here)."""
    lo = min(np.min(p_means), np.min(q_means)) - 14 * sd
    hi = max(np.max(p_means), np.max(q_means)) + 14 * sd
    x = np.linspace(lo, hi, 400_001)

    def density(means, weights):
        return np.sum([w * stats.norm.pdf(x, m, sd) for m, w in zip(means, weights)], axis=0)

    p, q = density(p_means, p_weights), density(q_means, q_weights)
    one = np.trapezoid(np.maximum(p - math.exp(epsilon) * q, 0.0), x)
    two = np.trapezoid(np.maximum(q - math.exp(epsilon) * p, 0.0), x)
    return float(one), float(two)


def _kernel(likelihood, plan):
    return DPSGLD(likelihood, plan, grad_clip=CLIP, sampling_rate=RATE, free_steps=False)


@pytest.fixture(scope="module")
def setting():
    plan = calibrate("dp-sgld", epsilon=EPSILON, delta=DELTA, chains=1, iterations=1, n_rows=N_ROWS,
                     batch_sampling="poisson", sampling_rate=RATE, batch_size=None)
    report = plan.report()
    prior = GaussianMeanModel(np.zeros((N_ROWS, 1)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    return plan, report, prior


def _release_scale(kernel, info, step):
    """theta' = theta + drift (g0 + S / q) + e, e ~ N(0, v): the noise sd in units of S is q sqrt(v) / drift."""
    drift = kernel.langevin_drift * step * 1.0  # metric 1
    return RATE * info.extra["noise_sd"] / drift, drift


def test_released_fields_do_not_depend_on_the_data_and_hold_no_batch_size(setting):
    """With the same noise stream, every released field except the draw is identical on neighbouring data sets
    whose rows sit at the clip bound, and none of them is the realised minibatch size."""
    plan, _, prior = setting
    w = np.ones(1)
    d0 = RowsAtBound(prior, LinearCanary(w, CANARY_SLOPE))
    d1 = SubstitutedRows(d0, 0, LinearCanary(w, -CANARY_SLOPE))
    k0, k1 = _kernel(d0, plan), _kernel(d1, plan)
    differed = 0
    for seed in range(200):
        s0, i0 = k0.step(np.random.default_rng(seed), k0.init_state(np.zeros(1)), 2.0, np.ones(1))
        s1, i1 = k1.step(np.random.default_rng(seed), k1.init_state(np.zeros(1)), 2.0, np.ones(1))
        assert set(i0.extra) == {"step_size", "noise_sd", "temperature"}
        assert i0.extra == i1.extra and i0.accept_stat == i1.accept_stat
        differed += int(s0.theta[0] != s1.theta[0])
    assert differed > 0  # the substituted row was drawn in some minibatches: only the draw moved


@pytest.mark.slow
def test_one_release_is_the_accounted_pair(setting):
    """On a base whose other rows contribute nothing (gradients 0: the worst case of the replace-one pair), the
    released draw of one DP-SGLD iteration, mapped to units of S, is q N(+-L) + (1 - q) N(0) with the kernel's
    noise: its quadrature delta at the accounted epsilon is within the accountant's delta (PLD is pessimistic) and
    above half of it (the accounting is not loose either), and 40,000 draws of the kernel follow that law."""
    plan, report, prior = setting
    w = np.ones(1)
    # D0, the row with slope +L, enters only through its law: the +CLIP component of the hockey sticks below
    d1 = SubstitutedRows(prior, 0, LinearCanary(w, -CANARY_SLOPE))
    step = 2.0
    k1 = _kernel(d1, plan)
    _, info = k1.step(np.random.default_rng(0), k1.init_state(np.zeros(1)), step, np.ones(1))
    sd, drift = _release_scale(k1, info, step)
    assert sd >= 2.0 * plan.tau_g * CLIP * (1 - 1e-12)  # the privacy noise the accountant assumed is there
    exact = max(_hockey_sticks([-CLIP, 0.0], [RATE, 1 - RATE], [CLIP, 0.0], [RATE, 1 - RATE], sd, report.epsilon))
    assert 0.5 * report.delta <= exact <= report.delta * (1 + 1e-6), (exact, report.delta)

    # the kernel's draws on D1 (substituted row at -L) follow theta0 + drift (g0 + (S + e) / q) with that law
    rng = np.random.default_rng(7)
    draws = np.array([k1.step(rng, k1.init_state(np.zeros(1)), step, np.ones(1))[0].theta[0]
                      for _ in range(40_000)])
    prior_grad = float(prior.log_prior_grad(np.zeros(1))[1][0])
    z = (draws / drift - prior_grad) * RATE  # = S + e' in units of the clipped sum

    def mixture_cdf(x):
        return RATE * stats.norm.cdf(x, -CLIP, sd) + (1 - RATE) * stats.norm.cdf(x, 0.0, sd)

    assert stats.kstest(z, mixture_cdf).pvalue > 1e-3


def test_releasing_the_batch_size_would_break_the_accounting(setting):
    """Jointly with the realised Poisson batch size k, the same release is (given k) an add/remove pair at the
    full substitution sensitivity 2 L: on a base whose rows all sit at the bound, its quadrature delta at the
    accounted epsilon is more than 10 times the accountant's. This is why the kernels do not release k."""
    _, report, _ = setting
    sd = 2.0 * setting[0].tau_g * CLIP
    ks = np.arange(N_ROWS + 1)
    pk = stats.binom.pmf(ks, N_ROWS, RATE)
    joint = np.zeros(2)
    for k, p in zip(ks, pk):
        if p < 1e-12 or k == 0:
            continue
        r = k / N_ROWS  # given k, the substituted row is in the batch with probability k / N
        joint += p * np.array(_hockey_sticks([0.0], [1.0], [0.0, -2.0 * CLIP], [1 - r, r], sd, report.epsilon))
    assert joint.max() > 10.0 * report.delta, (joint, report.delta)
