"""Tests for stan_dp.privacy.accounting: closed forms against dp-accounting, calibration round trips,
monotonicity, and the error cases.  Pure Python; the whole file runs in a few seconds."""
from __future__ import annotations

import json
import math
import time

import numpy as np
import pytest
from scipy import special

import dp_accounting
from dp_accounting import NeighboringRelation
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.pld import privacy_loss_mechanism
from dp_accounting.rdp import RdpAccountant

from stan_dp.privacy import (
    NEIGHBOURING_RELATION,
    PrivacyPlan,
    PrivacyReport,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    gaussian_rho,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_report,
)
from stan_dp.phases.calibration import account, calibrate

ALGORITHMS = ("penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full")

RHOS = [1e-4, 1e-3, 0.0359, 0.3, 1.0, 4.0]
DELTAS = [1e-3, 1e-5, 1e-9]


def theorem_2_4_delta(rho: float, eps: float) -> float:
    """Räisä, Koskela and Honkela (2021) Theorem 2.4, written exactly as in the paper (erfc form)."""
    r = 2.0 * math.sqrt(rho)
    return 0.5 * (special.erfc((eps - rho) / r) - math.exp(eps) * special.erfc((eps + rho) / r))


def tau_for_rho(rho: float) -> float:
    """Noise multiplier sigma/Delta of one Gaussian mechanism with the given rho = Delta^2 / (2 sigma^2)."""
    return 1.0 / math.sqrt(2.0 * rho)


def pld_accountant_epsilon(taus_counts, delta, interval=1e-4):
    """dp-accounting's public PLDAccountant under the replace-one relation.

    In dp-accounting, REPLACE_ONE with noise multiplier z means sigma = z * C where each row's term has
    norm <= C, so the substitution sensitivity is 2C: our tau = sigma / (2C) corresponds to z = 2 tau.
    """
    acc = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE, value_discretization_interval=interval)
    for tau, count in taus_counts:
        acc.compose(dp_accounting.GaussianDpEvent(2.0 * tau), count)
    return acc.get_epsilon(delta)


def rdp_accountant_epsilon(taus_counts, delta):
    acc = RdpAccountant()
    for tau, count in taus_counts:
        acc.compose(dp_accounting.GaussianDpEvent(tau), count)
    return acc.get_epsilon(delta)


# ------------------------------------------------------------------ closed form (Theorem 2.4)

@pytest.mark.parametrize("rho", RHOS)
def test_closed_form_delta_matches_paper_and_dp_accounting(rho):
    for eps in [0.0, 0.1, 0.5, 1.0, 3.0]:
        ours = gaussian_delta(rho, eps)
        paper = theorem_2_4_delta(rho, eps)
        # dp-accounting's analytic (not discretised) hockey-stick divergence of one Gaussian mechanism
        # with sensitivity 1 and sigma = 1 / sqrt(2 rho): its PLD is N(rho, 2 rho) too.
        exact = privacy_loss_mechanism.GaussianPrivacyLoss(tau_for_rho(rho)).get_delta_for_epsilon(eps)
        assert ours == pytest.approx(paper, rel=1e-6, abs=1e-300)
        assert ours == pytest.approx(exact, rel=1e-6, abs=1e-300)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_closed_form_epsilon_matches_pld_accountant(rho, delta):
    eps = gaussian_epsilon(rho, delta)
    # safe side of the root, and a root: delta(eps) is delta to 1e-9
    assert gaussian_delta(rho, eps) <= delta
    assert gaussian_delta(rho, eps) == pytest.approx(delta, rel=1e-9)
    # rho split over 1000 identical Gaussian mechanisms, composed by dp-accounting's PLD accountant.
    # Connect-the-dots PLDs are accurate to ~1e-12 relative here (interval 1e-4 x epsilon), so 1e-6
    # relative is a real check; the optimistic PLD must not exceed the closed form.
    count = 1000
    tau = tau_for_rho(rho / count)
    interval = max(eps, 1e-3) * 1e-4
    pld_eps = pld_accountant_epsilon([(tau, count)], delta, interval)
    assert pld_eps == pytest.approx(eps, rel=1e-6)
    optimistic = pld_lib.from_gaussian_mechanism(
        tau_for_rho(rho), pessimistic_estimate=False, use_connect_dots=False,
        value_discretization_interval=interval).get_epsilon_for_delta(delta)
    assert optimistic <= eps * (1 + 1e-12)


def test_closed_form_for_mixed_gaussians_matches_pld_composition():
    # DP-HMC-like mixture: 500 acceptance tests with tau_l = 40, 500 * 6 gradients with tau_g = 90.
    rho = 500 / (2 * 40.0 ** 2) + 3000 / (2 * 90.0 ** 2)
    for delta in (1e-5, 1e-8):
        eps = gaussian_epsilon(rho, delta)
        pld_eps = pld_accountant_epsilon([(40.0, 500), (90.0, 3000)], delta, interval=eps * 1e-4)
        assert pld_eps == pytest.approx(eps, rel=1e-6)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_rdp_never_tighter_than_closed_form(rho, delta):
    eps = gaussian_epsilon(rho, delta)
    for count in (1, 100):
        assert rdp_accountant_epsilon([(tau_for_rho(rho / count), count)], delta) >= eps


def test_gaussian_rho_inverts_closed_form_and_gaussian_mu_is_its_gaussian_dp_mu():
    """gaussian_rho inverts the closed form (the DP-HMC paper's mu, a zCDP rho); gaussian_mu is the Gaussian-DP
    mu = sqrt(2 rho), so k Gaussian releases with noise multiplier tau (mu 1/tau each, composing to
    sqrt(k) / tau) fit the budget exactly when sqrt(k) / tau equals it."""
    for eps in (0.01, 0.3, 1.0, 8.0):
        for delta in DELTAS:
            rho = gaussian_rho(eps, delta)
            assert gaussian_delta(rho, eps) <= delta
            assert gaussian_delta(rho, eps) == pytest.approx(delta, rel=1e-9)
            assert gaussian_epsilon(rho, delta) == pytest.approx(eps, rel=1e-9)
            mu = gaussian_mu(eps, delta)
            assert mu == pytest.approx(math.sqrt(2 * rho), rel=1e-15)
            k = 400
            tau = math.sqrt(k) / mu
            assert gaussian_delta(k / (2 * tau ** 2), eps) == pytest.approx(delta, rel=1e-9)


def test_closed_form_edge_values():
    assert gaussian_epsilon(0.0, 1e-5) == 0.0
    assert gaussian_delta(0.0, 0.5) == 0.0
    # delta(0) is the total variation distance 2 Phi(sqrt(rho/2)) - 1; below it epsilon is 0
    rho = 1e-12
    assert gaussian_epsilon(rho, 0.5) == 0.0
    assert gaussian_delta(1.0, 0.0) == pytest.approx(2 * special.ndtr(math.sqrt(0.5)) - 1, rel=1e-12)
    # no overflow at large epsilon
    assert gaussian_delta(1.0, 800.0) == 0.0


# ------------------------------------------------------------------ calibration round trips

def assert_spends_budget(report: PrivacyReport, epsilon: float, delta: float):
    assert report.delta == delta
    assert 0.99 * epsilon <= report.epsilon <= epsilon
    if report.closed_form_epsilon is not None:
        assert 0.99 * epsilon <= report.closed_form_epsilon <= epsilon


@pytest.mark.parametrize("epsilon,delta,chains,iterations", [
    (1.0, 1e-5, 4, 2000), (0.1, 1e-6, 2, 500), (3.0, 1e-3, 1, 50), (0.02, 1e-8, 4, 1000),
])
def test_penalty_round_trip(epsilon, delta, chains, iterations):
    plan = calibrate("penalty", epsilon=epsilon, delta=delta, chains=chains, iterations=iterations)
    assert isinstance(plan, PrivacyPlan)
    assert plan.total_iterations == chains * iterations
    assert plan.tau_g is None and plan.epsilon_iteration is None
    report = plan.report()
    assert_spends_budget(report, epsilon, delta)
    # independent checks: Theorem 2.4 with rho = T / (2 tau_l^2), dp-accounting's PLD accountant at its
    # default interval, and RDP (looser)
    T = chains * iterations
    rho = T / (2 * plan.tau_l ** 2)
    assert gaussian_delta(rho, epsilon) <= delta
    assert pld_accountant_epsilon([(plan.tau_l, T)], delta) <= epsilon
    assert pld_accountant_epsilon([(plan.tau_l, T)], delta) >= 0.99 * epsilon
    assert report.rdp_epsilon >= report.closed_form_epsilon


@pytest.mark.parametrize("steps,share", [(10, None), (1, 0.2), (25, 0.9), (5, "equal")])
def test_dp_hmc_round_trip(steps, share):
    epsilon, delta, chains, iterations = 1.0, 1e-5, 4, 1000
    shape = {"leapfrog_steps": steps}
    if share is not None:
        shape["gradient_share"] = share
    plan = calibrate("dp-hmc", epsilon=epsilon, delta=delta, chains=chains, iterations=iterations, **shape)
    report = plan.report()
    assert_spends_budget(report, epsilon, delta)
    expected_share = 0.5 if share in (None, "equal") else share
    assert plan.gradient_share == expected_share
    assert plan.leapfrog_steps == steps
    # Räisä, Koskela and Honkela (2021) Theorem 3.5: rho = k / (2 tau_l^2) + k (L + 1) / (2 tau_g^2)
    k = chains * iterations
    rho_l, rho_g = k / (2 * plan.tau_l ** 2), k * (steps + 1) / (2 * plan.tau_g ** 2)
    assert rho_g / (rho_l + rho_g) == pytest.approx(expected_share, rel=1e-12)
    assert gaussian_delta(rho_l + rho_g, epsilon) <= delta
    counts = {m["name"]: m["count"] for m in report.mechanisms}
    assert sorted(counts.values()) == [k, k * (steps + 1)]
    assert pld_accountant_epsilon([(plan.tau_l, k), (plan.tau_g, k * (steps + 1))], delta) <= epsilon


def optimal_composition_delta(eps_total, eps_i, delta_i, T):
    """Exact delta of the T-fold composition of (eps_i, delta_i)-DP mechanisms (Kairouz, Oh and
    Viswanath's optimal composition), written independently of dp-accounting: the privacy loss is
    (T - 2j) eps_i with probability C(T, j) p^(T-j) (1-p)^j (1 - delta_i)^T, p = e^eps_i / (1 + e^eps_i),
    and +inf with probability 1 - (1 - delta_i)^T."""
    j = np.arange(T + 1)
    log_p, log_q = -np.log1p(np.exp(-eps_i)), -np.log1p(np.exp(eps_i))
    log_w = (special.gammaln(T + 1) - special.gammaln(j + 1) - special.gammaln(T - j + 1)
             + (T - j) * log_p + j * log_q + T * math.log1p(-delta_i))
    loss = (T - 2 * j) * eps_i
    keep = loss > eps_total
    body = np.sum(np.exp(log_w[keep]) * -np.expm1(eps_total - loss[keep]))
    return -math.expm1(T * math.log1p(-delta_i)) + body


@pytest.mark.parametrize("algorithm", ["dp-fast-mh", "dp-fast-mh-full"])
@pytest.mark.parametrize("epsilon,delta,chains,iterations", [
    (1.0, 1e-5, 4, 2000), (0.5, 1e-6, 2, 300), (3.0, 1e-4, 1, 40),
])
def test_fast_mh_round_trip(algorithm, epsilon, delta, chains, iterations):
    plan = calibrate(algorithm, epsilon=epsilon, delta=delta, chains=chains, iterations=iterations)
    T = chains * iterations
    assert plan.delta_iteration == pytest.approx(0.25 * delta / T, rel=1e-15)
    assert plan.tau_l is None and plan.tau_g is None
    report = plan.report()
    assert_spends_budget(report, epsilon, delta)
    # independent exact optimal composition: delta at the budget is within delta, at 0.99 of it not
    assert optimal_composition_delta(epsilon, plan.epsilon_iteration, plan.delta_iteration, T) <= delta * (1 + 1e-9)
    assert optimal_composition_delta(0.99 * epsilon, plan.epsilon_iteration, plan.delta_iteration, T) > delta


def test_fast_mh_composition_equals_optimal_composition():
    # noise-first: the reported epsilon solves the exact optimal-composition equation delta(eps) = delta
    report = account("dp-fast-mh", delta=1e-6, chains=2, iterations=150, epsilon_iteration=0.02,
                     delta_iteration=1e-9)
    assert optimal_composition_delta(report.epsilon, 0.02, 1e-9, 300) == pytest.approx(1e-6, rel=1e-6)
    assert report.rdp_epsilon is None and report.closed_form_epsilon is None


def test_fast_mh_large_epsilon_iteration_is_calibrated_without_warning():
    """epsilon_iteration >= 1 is a valid plan: the kernel calibrates its tests with the exact (analytic)
    Gaussian multiplier there (stan_dp.samplers.fast_mh.gaussian_noise_multiplier), so no warning is due."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = calibrate("dp-fast-mh", epsilon=5.0, delta=1e-5, chains=1, iterations=2)
    assert plan.epsilon_iteration >= 1.0
    assert_spends_budget(plan.report(), 5.0, 1e-5)


@pytest.mark.parametrize("algorithm, shape", [("penalty", {}), ("dp-hmc", {"leapfrog_steps": 3}),
                                              ("dp-fast-mh", {}), ("dp-fast-mh-full", {})])
@pytest.mark.parametrize("epsilon", [1e3, 1e6, 1e9])
def test_huge_budgets_calibrate_within_the_budget(algorithm, shape, epsilon):
    """A huge epsilon is a valid request: calibration neither overflows nor gives up, and the plan spends at
    most the budget (PLD where dp-accounting can build it, the exact closed form or basic composition where
    its PLD would overflow double precision)."""
    plan = calibrate(algorithm, epsilon=epsilon, delta=1e-5, chains=2, iterations=100, **shape)
    report = plan.report()
    assert 0.99 * epsilon <= report.epsilon <= epsilon
    assert math.isfinite(report.epsilon)


def test_fast_mh_delta_split_option():
    a = calibrate("dp-fast-mh", epsilon=1.0, delta=1e-5, chains=2, iterations=100, delta_split=0.5)
    assert a.delta_iteration == pytest.approx(0.5 * 1e-5 / 200)
    assert_spends_budget(a.report(), 1.0, 1e-5)


def test_noise_first_and_budget_first_are_inverse():
    plan = calibrate("dp-hmc", epsilon=0.7, delta=1e-6, chains=3, iterations=700, leapfrog_steps=7,
                     gradient_share=0.3)
    report = account("dp-hmc", delta=1e-6, chains=3, iterations=700, tau_l=plan.tau_l, tau_g=plan.tau_g,
                     leapfrog_steps=7)
    assert report.epsilon == pytest.approx(plan.report().epsilon, rel=1e-12)
    # noise given -> budget reported -> calibrate to that budget gives the noise back
    spent = account("penalty", delta=1e-5, chains=2, iterations=300, tau_l=25.0)
    again = calibrate("penalty", epsilon=spent.epsilon, delta=1e-5, chains=2, iterations=300)
    assert again.tau_l == pytest.approx(25.0, rel=1e-5)
    assert again.tau_l >= 25.0 * (1 - 1e-9)
    fm = calibrate("dp-fast-mh", epsilon=0.8, delta=1e-5, chains=2, iterations=400)
    back = account("dp-fast-mh", delta=1e-5, chains=2, iterations=400, epsilon_iteration=fm.epsilon_iteration,
                   delta_iteration=fm.delta_iteration)
    assert back.epsilon == pytest.approx(fm.report().epsilon, rel=1e-12)


def test_interrupted_run_reports_less():
    plan = calibrate("penalty", epsilon=1.0, delta=1e-5, chains=4, iterations=2000)
    full = plan.report().epsilon
    half = plan.report(completed_iterations=4000)
    assert half.epsilon < full
    assert half.total_iterations == 4000 and half.mechanisms[0]["count"] == 4000
    assert half.closed_form_epsilon == pytest.approx(gaussian_epsilon(4000 / (2 * plan.tau_l ** 2), 1e-5), rel=1e-12)
    assert plan.report(completed_iterations=0).epsilon == 0.0
    assert plan.report(completed_iterations=8000).epsilon == pytest.approx(full, rel=1e-12)
    fm = calibrate("dp-fast-mh", epsilon=1.0, delta=1e-5, chains=2, iterations=100)
    assert fm.report(completed_iterations=50).epsilon < fm.report().epsilon
    with pytest.raises(ValueError, match="completed_iterations"):
        plan.report(completed_iterations=8001)
    with pytest.raises(ValueError, match="completed_iterations"):
        plan.report(completed_iterations=-1)


# ------------------------------------------------------------------ monotonicity

def test_more_chains_or_iterations_never_less_noise():
    prev = None
    for chains in (1, 2, 3, 8):
        p = calibrate("penalty", epsilon=1.0, delta=1e-5, chains=chains, iterations=500)
        h = calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=chains, iterations=500, leapfrog_steps=5)
        f = calibrate("dp-fast-mh", epsilon=1.0, delta=1e-5, chains=chains, iterations=500)
        if prev is not None:
            assert p.tau_l > prev[0].tau_l
            assert h.tau_l > prev[1].tau_l and h.tau_g > prev[1].tau_g
            assert f.epsilon_iteration < prev[2].epsilon_iteration
            assert f.delta_iteration < prev[2].delta_iteration
        prev = (p, h, f)
    prev = None
    for iterations in (1, 2, 10, 11, 1000, 1001):
        p = calibrate("penalty", epsilon=0.5, delta=1e-6, chains=4, iterations=iterations)
        f = calibrate("dp-fast-mh-full", epsilon=0.5, delta=1e-6, chains=4, iterations=iterations)
        if prev is not None:
            assert p.tau_l > prev[0].tau_l
            assert f.epsilon_iteration < prev[1].epsilon_iteration
        prev = (p, f)


def test_more_leapfrog_steps_never_less_gradient_noise():
    taus = [calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=2, iterations=200, leapfrog_steps=L).tau_g
            for L in (1, 2, 5, 20)]
    assert all(b > a for a, b in zip(taus, taus[1:]))


# ------------------------------------------------------------------ report

def test_report_json_round_trip_and_text():
    plan = calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=4, iterations=2000, leapfrog_steps=10)
    report = plan.report()
    s = report.to_json()
    assert isinstance(s, str)
    data = json.loads(s)  # strict JSON
    assert data["neighbouring_relation"] == NEIGHBOURING_RELATION == "substitute one row; N public"
    assert data["accountant"] == "PLD (dp-accounting)"
    for m in data["mechanisms"]:
        assert {"name", "kind", "noise_multiplier", "mu", "rho", "count"} <= set(m)
        # Gaussian-DP mu = Delta / sigma = 1 / noise multiplier; zCDP rho = mu^2 / 2
        assert m["noise_multiplier"] > 0 and m["mu"] == pytest.approx(1.0 / m["noise_multiplier"], rel=1e-15)
        assert m["rho"] == pytest.approx(0.5 / m["noise_multiplier"] ** 2, rel=1e-15)
    assert PrivacyReport.from_json(s) == report
    text = str(report)
    assert "substitute one row" in text and "PLD (dp-accounting)" in text
    assert f"{report.epsilon:.6g}" in text and "1e-05" in text and "88000" in text
    fm = calibrate("dp-fast-mh", epsilon=1.0, delta=1e-5, chains=2, iterations=100).report()
    assert PrivacyReport.from_json(fm.to_json()) == fm
    m = fm.mechanisms[0]
    assert m["kind"] == "epsilon-delta" and m["count"] == 200 and m["epsilon"] > 0 and m["delta"] > 0
    with pytest.raises(ValueError, match="s has fields"):
        PrivacyReport.from_json(json.dumps({**data, "bogus": 1}))


# ------------------------------------------------------------------ subsampled Gaussian

def test_poisson_subsampled_matches_pld_accountant_and_closed_form():
    # q = 1 reduces to the plain Gaussian composition (closed form)
    tau, count, delta = 30.0, 500, 1e-5
    full = subsampled_gaussian_epsilon(tau, 1.0, count, delta)
    assert full == pytest.approx(gaussian_epsilon(count / (2 * tau ** 2), delta), rel=1e-6)
    # q < 1: same number as dp-accounting's PLDAccountant with a Poisson-sampled event (replace-one,
    # noise multiplier relative to the per-row bound C = Delta / 2, hence 2 * noise_multiplier)
    nm, q, count = 1.0, 0.02, 200
    ours = subsampled_gaussian_epsilon(nm, q, count, delta)
    acc = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(2 * nm)), count)
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=1e-9)
    # amplification: a smaller sampling probability or fewer steps never cost more
    assert ours < subsampled_gaussian_epsilon(nm, 2 * q, count, delta)
    assert subsampled_gaussian_epsilon(nm, q, 2 * count, delta) > ours
    # and the full-batch limit is the closed form
    assert subsampled_gaussian_epsilon(nm, 1.0, count, delta) == pytest.approx(
        gaussian_epsilon(count / (2 * nm ** 2), delta), rel=1e-6)
    report = subsampled_gaussian_report(nm, q, count, delta)
    assert report.accountant == "PLD (dp-accounting)" and report.mechanisms[0]["count"] == count


def test_uniform_subsampled_uses_rdp():
    tau, count, delta = 30.0, 500, 1e-5
    # q = 1: RDP of the plain Gaussian, never tighter than the closed form
    full = subsampled_gaussian_epsilon(tau, 1.0, count, delta, sampling="uniform")
    assert full == pytest.approx(rdp_accountant_epsilon([(tau, count)], delta), rel=1e-9)
    assert full >= gaussian_epsilon(count / (2 * tau ** 2), delta)
    small = subsampled_gaussian_epsilon(1.0, 0.01, 200, delta, sampling="uniform")
    assert small < subsampled_gaussian_epsilon(1.0, 0.05, 200, delta, sampling="uniform")
    report = subsampled_gaussian_report(1.0, 0.01, 200, delta, sampling="uniform")
    assert report.accountant == "RDP (dp-accounting)"
    with pytest.raises(ValueError, match="sampling"):
        subsampled_gaussian_epsilon(1.0, 0.01, 200, delta, sampling="shuffle")
    with pytest.raises(ValueError, match="sampling_probability"):
        subsampled_gaussian_epsilon(1.0, 0.0, 200, delta)


# ------------------------------------------------------------------ errors

BASE = dict(epsilon=1.0, delta=1e-5, chains=4, iterations=100)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("field,value", [
    ("epsilon", 0.0), ("epsilon", -1.0), ("epsilon", float("nan")), ("epsilon", float("inf")),
    ("delta", 0.0), ("delta", 1.0), ("delta", -1e-5), ("delta", 2.0),
    ("chains", 0), ("chains", -2), ("chains", 1.5), ("iterations", 0), ("iterations", True),
])
def test_bad_budget_or_run_names_the_input(algorithm, field, value):
    shape = {"leapfrog_steps": 5} if algorithm == "dp-hmc" else {}
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        calibrate(algorithm, **{**BASE, field: value}, **shape)


def test_unknown_algorithm_lists_valid_ones():
    with pytest.raises(ValueError) as info:
        calibrate("nuts", **BASE)
    for name in ALGORITHMS:
        assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match="'penalty'"):
        account("sgld", delta=1e-5, chains=1, iterations=1, tau_l=1.0)


def test_bad_shape_options():
    """Shape options go through the kernel's option spec: defaults fill in, bad values and options that do
    not apply name the option."""
    assert calibrate("dp-hmc", **BASE).leapfrog_steps == 10  # the option spec's default
    with pytest.raises(ValueError, match="leapfrog_steps"):
        calibrate("dp-hmc", **BASE, leapfrog_steps=0)
    for share in (0.0, 1.0, -0.5, "half"):
        with pytest.raises(ValueError, match="gradient_share"):
            calibrate("dp-hmc", **BASE, leapfrog_steps=3, gradient_share=share)
    with pytest.raises(ValueError, match="leapfrog_steps"):
        calibrate("penalty", **BASE, leapfrog_steps=3)
    with pytest.raises(ValueError, match="delta_split"):
        calibrate("dp-fast-mh", **BASE, delta_split=1.0)


def test_budget_no_finite_noise_can_meet():
    # rho = epsilon-scale^2 underflows: the noise needed is beyond double precision
    with pytest.raises(ValueError, match=r"epsilon.*delta"):
        calibrate("penalty", epsilon=1e-300, delta=1e-300, chains=4, iterations=1000)
    with pytest.raises(ValueError, match=r"epsilon.*delta"):
        calibrate("dp-hmc", epsilon=1e-300, delta=1e-300, chains=4, iterations=1000, leapfrog_steps=3)
    # noise-first DP-Fast MH: T * delta_iteration >= delta leaves no finite epsilon
    with pytest.raises(ValueError, match="delta_iteration"):
        account("dp-fast-mh", delta=1e-5, chains=4, iterations=1000, epsilon_iteration=0.01,
                delta_iteration=1e-8)


def test_account_errors_name_the_input():
    with pytest.raises(ValueError, match="tau_l"):
        account("penalty", delta=1e-5, chains=1, iterations=10)
    with pytest.raises(ValueError, match="tau_l"):
        account("penalty", delta=1e-5, chains=1, iterations=10, tau_l=0.0)
    with pytest.raises(ValueError, match="tau_g"):
        account("penalty", delta=1e-5, chains=1, iterations=10, tau_l=1.0, tau_g=1.0)
    with pytest.raises(ValueError, match="tau_g"):
        account("dp-hmc", delta=1e-5, chains=1, iterations=10, tau_l=1.0, leapfrog_steps=2)
    with pytest.raises(ValueError, match="epsilon_iteration"):
        account("dp-fast-mh", delta=1e-5, chains=1, iterations=10, epsilon_iteration=-1.0, delta_iteration=0.0)
    with pytest.raises(ValueError, match=r"\bdelta\b"):
        account("penalty", delta=0.0, chains=1, iterations=10, tau_l=1.0)
    with pytest.raises(ValueError, match="iterations"):
        account("penalty", delta=1e-5, chains=1, iterations=0, tau_l=1.0)
    with pytest.raises(ValueError, match="rho"):
        gaussian_epsilon(-1.0, 1e-5)
    with pytest.raises(ValueError, match="delta"):
        gaussian_epsilon(1.0, 1.0)


# ------------------------------------------------------------------ package wiring and performance

def test_package_exports_calibrate():
    import stan_dp
    assert stan_dp.calibrate is calibrate


def test_calibration_is_fast():
    """Calibrating penalty MH and DP-Fast MH for 4 x 2000 iterations takes under 3 s of CPU time each. CPU time
    of this process, not wall time: other work on a shared machine does not count against the calibration."""
    t0 = time.process_time()
    calibrate("penalty", epsilon=1.0, delta=1e-5, chains=4, iterations=2000)
    t1 = time.process_time()
    calibrate("dp-fast-mh", epsilon=1.0, delta=1e-5, chains=4, iterations=2000)
    t2 = time.process_time()
    # measured ~0.1 s and ~0.3 s; the bounds leave room for slower machines
    assert t1 - t0 < 3.0
    assert t2 - t1 < 3.0


def test_tiny_budgets_use_the_exact_closed_form_quickly():
    """Budgets below 1e-3 are accounted with the exact closed form (PLD there needs minutes and gigabytes):
    calibration is fast, spends within [0.99, 1] of the budget and names the closed-form accountant."""
    import time

    from stan_dp.privacy import gaussian_epsilon as _ge
    from stan_dp.phases.calibration import calibrate as _calibrate

    start = time.process_time()  # CPU time: a loaded machine does not count against it
    plan = _calibrate("penalty", epsilon=1e-7, delta=1e-5, chains=2, iterations=100)
    report = plan.report()
    assert time.process_time() - start < 5
    assert "closed form" in report.accountant
    assert 0.99e-7 <= report.epsilon <= 1e-7
    assert report.epsilon == pytest.approx(_ge(200 / (2 * plan.tau_l**2), 1e-5), rel=1e-9)


@pytest.mark.parametrize("mu, epsilon_0, delta_0, count", [(1.0, 0.1, 1e-9, 50), (3.0, 0.05, 1e-10, 400),
                                                            (0.5, 0.3, 1e-8, 20)])
def test_gaussian_with_epsilon_delta_closed_form_matches_the_pld(mu, epsilon_0, delta_0, count):
    """The exact epsilon of a Gaussian mechanism composed with count (epsilon_0, delta_0) mechanisms (the anchored
    DP-Fast MH composition, stan_dp.privacy.mixed_composition) agrees with dp-accounting's pessimistic PLD on the
    exact grid to 1e-7 relative and never exceeds it (the PLD is an upper bound; measured 1e-10 to 1e-9), and
    evaluate_mechanisms names the closed form as the accountant."""
    from stan_dp.privacy.evaluation import (MIXED_ACCOUNTANT, _exact_grid_interval, _pld_epsilon,
                                            evaluate_mechanisms)
    from stan_dp.privacy.mixed_composition import gaussian_and_epsilon_delta_epsilon

    exact = gaussian_and_epsilon_delta_epsilon(1e-5, mu, epsilon_0, delta_0, count)
    # the Gaussian part as two records (tau 2/mu twice = one with mu): they merge into one Gaussian mechanism
    records = [{"kind": "gaussian", "noise_multiplier": 2.0 ** 0.5 / mu, "count": 1},
               {"kind": "gaussian", "noise_multiplier": 2.0 ** 0.5 / mu, "count": 1},
               {"kind": "epsilon-delta", "epsilon": epsilon_0, "delta": delta_0, "count": count}]
    pld = _pld_epsilon(records, 1e-5, _exact_grid_interval(epsilon_0, 1e-4))
    assert exact <= pld and (pld - exact) / exact < 1e-7
    acc = evaluate_mechanisms(records, 1e-5)
    assert acc.accountant == MIXED_ACCOUNTANT and acc.epsilon == pytest.approx(exact, rel=1e-10)


def test_anchored_dp_fast_mh_plans_in_seconds():
    """Planning anchored DP-Fast MH on 100,000 rows at epsilon 10 (4 chains x 2,000 iterations after the anchor's
    Gaussian releases) took about 3 minutes when the anchor's Gaussian PLD was rebuilt at every step of the budget
    inversion (13 minutes on wells at epsilon 100); with the closed form it takes well under a second. The bound
    here (20 s) leaves room for a loaded machine; the plan spends at least 99 % of the budget."""
    import time

    from stan_dp.run.plan import plan_run

    started = time.perf_counter()
    plan = plan_run(100_000, 6, algorithm="dp-fast-mh", epsilon=10.0, delta=1e-6, chains=4, iter_warmup=1000,
                    iter_sampling=1000, quiet=True, row_bound=2.45, anchor="dp-gd", anchor_grad_clip=2.45)
    assert time.perf_counter() - started < 20.0
    spent = plan.privacy.report().epsilon
    assert 0.99 * 10.0 <= spent <= 10.0
