"""clip="adaptive": a private quantile of the per-row gradient norms sets the clip bound.

NumPy reference models only (no Stan compilation), fixed seeds; every tolerance is derived in its test from the
noise of the released counts or from the discretisation of the accountant.
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy import integrate
from scipy.stats import norm

from stan_dp import sample_private
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.privacy import mechanisms
from stan_dp.privacy.evaluation import evaluate_mechanisms, phase_mechanisms
from stan_dp.privacy.events import gaussian_release
from stan_dp.run import pipeline
from stan_dp.phases.adaptive_clip import CLIP_RELEASE, DIFF_CLIP_RELEASE
from stan_dp.phases.dp_gd import noisy_gradient_ascent
from stan_dp.run.plan import plan_run
from row_guards import RowsForbidden

DELTA = 1e-5


def norms_as_gradients(norms: np.ndarray, dim: int = 2) -> np.ndarray:
    """Per-row gradients with the given norms (along a fixed random direction per row)."""
    u = np.random.default_rng(0).standard_normal((norms.size, dim))
    return u / np.linalg.norm(u, axis=1, keepdims=True) * norms[:, None]


# ------------------------------------------------------------------------------------------ the mechanism
@pytest.mark.parametrize("target", [0.5, 0.9])
def test_quantile_mechanism_converges_to_the_target_quantile(target):
    """Known norms (Exp(1), N = 20,000), count noise sd 0.005 N (a large budget), rate 0.2, 400 rounds from a
    bound 20 times the quantile: the fraction of rows within the final bound is ``target`` up to the noise.

    Tolerance: near the fixed point x = log L follows x' = x - eta (F(x) - gamma + e), e ~ N(0, s^2), s = sd / N;
    linearised with a = eta dF/dx (dF/dx = L f(L) = L e^-L for Exp(1)), the stationary sd of F(x) is
    dF/dx sd(x) = dF/dx eta s / sqrt(a (2 - a)). The test allows 5 such sds plus one row (the count's grain)."""
    n, eta, sd = 20_000, 0.2, 0.005 * 20_000
    norms = np.random.default_rng(1).exponential(size=n)
    grads = norms_as_gradients(norms)
    q = -math.log(1.0 - target)  # the exact quantile of Exp(1)
    clip = mechanisms.QuantileClip(bound=20.0 * q, target=target, rate=eta, count_sd=sd, n_rows=n, cap=20.0 * q)
    rng = np.random.default_rng(2)
    for _ in range(400):
        clip.release(rng, grads)
    fraction = np.mean(norms <= clip.bound)
    slope = q * math.exp(-q)
    a = eta * slope
    tolerance = 5.0 * slope * eta * (sd / n) / math.sqrt(a * (2.0 - a)) + 1.0 / n
    assert abs(fraction - target) < tolerance, (fraction, tolerance)
    assert len(clip.path) == 400 and clip.path[0] == 20.0 * q  # every bound used is recorded (publishable)


def test_quantile_bound_never_exceeds_its_cap_and_nonfinite_rows_count_as_zero():
    """A target quantile above the cap keeps the bound at the cap (the user's L is an upper bound); a row with a
    non-finite gradient counts as norm 0 (its clipped contribution is the zero vector)."""
    grads = norms_as_gradients(np.full(1000, 10.0))
    clip = mechanisms.QuantileClip(bound=2.0, target=0.9, rate=0.5, count_sd=1.0, n_rows=1000, cap=2.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        clip.release(rng, grads)
    assert clip.bound == 2.0
    bad = np.array([[np.nan, 1.0], [np.inf, 0.0], [3.0, 4.0]])
    assert np.array_equal(mechanisms.row_norms(bad), [0.0, 0.0, 5.0])


def test_one_count_release_has_the_exact_privacy_loss_of_the_declared_event():
    """The count moves by at most 1 when one row is substituted (checked on neighbours); its output pair is then
    N(c, s^2) vs N(c + 1, s^2). The hockey-stick divergence of that pair, integrated numerically from the two
    densities, equals the delta the package's accountant gives the declared release (GaussianDpEvent(s)) at the
    epsilon it reports, within the PLD grid's pessimism (the reported epsilon may be up to 1 % high)."""
    norms = np.random.default_rng(3).exponential(size=500)
    for i in range(0, 500, 50):  # substitute row i by a row on the other side of the bound
        other = norms.copy()
        other[i] = 0.0 if norms[i] > 1.0 else 5.0
        counts = [mechanisms.noisy_count_within(np.random.default_rng(4), v, 1.0, 0.0) for v in (norms, other)]
        assert abs(counts[0] - counts[1]) <= 1.0
    s = 2.0
    release = gaussian_release(CLIP_RELEASE, s)
    eps = evaluate_mechanisms(phase_mechanisms([([release], 1)]), DELTA).epsilon

    def hockey_stick(e: float) -> float:
        f = lambda x: max(norm.pdf(x, 1.0, s) - math.exp(e) * norm.pdf(x, 0.0, s), 0.0)  # noqa: E731
        return integrate.quad(f, -20 * s, 20 * s, points=[0.5 + e * s * s], limit=200)[0]

    closed = lambda e: norm.cdf(0.5 / s - e * s) - math.exp(e) * norm.cdf(-0.5 / s - e * s)  # noqa: E731
    assert hockey_stick(eps) == pytest.approx(closed(eps), rel=1e-6, abs=1e-12)
    assert hockey_stick(eps) <= DELTA * 1.0001  # the reported epsilon is valid
    assert hockey_stick(eps / 1.01) >= DELTA  # and at most 1 % pessimistic


# ------------------------------------------------------------------------------------------ accounting
def _independent_epsilon(mechs: list[dict], delta: float) -> float:
    """dp-accounting's own PLD composition: gradient-type releases as noise sd 2 tau against sensitivity 1 under
    REPLACE_ONE (dp-accounting's convention, as in test_anchor); the counts rebuilt from their own pair N(0, s^2)
    vs N(1, s^2) (a shift of 1: ADD_OR_REMOVE_ONE with sensitivity 1 is exactly that pair for a Gaussian)."""
    total = None
    for m in mechs:
        if m["name"] in (CLIP_RELEASE, DIFF_CLIP_RELEASE):  # counts: sensitivity 1
            one = pld_lib.from_gaussian_mechanism(standard_deviation=m["noise_multiplier"], sensitivity=1.0,
                                                  value_discretization_interval=1e-4,
                                                  neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE)
        else:
            one = pld_lib.from_gaussian_mechanism(standard_deviation=2.0 * m["noise_multiplier"], sensitivity=1.0,
                                                  sampling_prob=m.get("sampling_probability", 1.0),
                                                  value_discretization_interval=1e-4,
                                                  neighboring_relation=NeighboringRelation.REPLACE_ONE)
        one = one.self_compose(m["count"])
        total = one if total is None else total.compose(one)
    return total.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("algorithm", ["dp-sgld", "dp-laplace"])
def test_composed_phases_with_the_counts_match_an_independent_composition(algorithm):
    """The counts are one phase of the run's single PLD: the package's composition of an adaptive-clip run (anchor
    or dp-laplace) equals an independent dp-accounting composition within [0.99, 1.0] of the budget (1.001: the
    grid), and the counts carry clip_share of the rho budget."""
    eps = 1.0
    extra = {"anchor": "dp-gd", "iter_warmup": 300, "iter_sampling": 300} if algorithm == "dp-sgld" else {}
    plan = plan_run(10_000, 4, algorithm=algorithm, epsilon=eps, delta=DELTA, chains=2, quiet=True, grad_clip=2.5,
                    clip="adaptive", clip_share=0.1, **extra)
    mechs = json.loads(json.dumps(plan.privacy.mechanisms()))
    counts = [m for m in mechs if m["name"] == CLIP_RELEASE]
    assert len(counts) == 1 and counts[0]["count"] == 100
    clip = plan.anchor.clip if algorithm == "dp-sgld" else plan.clip
    assert counts[0]["noise_multiplier"] == pytest.approx(clip.count_sd, rel=1e-12)
    rho = lambda m: m["count"] / (2.0 * m["noise_multiplier"] ** 2)  # noqa: E731  (full-data Gaussians)
    full = [m for m in mechs if m.get("sampling_probability", 1.0) == 1.0]
    if algorithm == "dp-laplace":  # everything is full-data Gaussian: shares are exact rho fractions
        assert rho(counts[0]) / sum(rho(m) for m in full) == pytest.approx(0.1, rel=1e-9)
    independent = _independent_epsilon(mechs, DELTA)
    assert 0.99 * eps <= independent <= 1.001 * eps, independent


def test_planning_reads_no_row(monkeypatch):
    """Plans with clip='adaptive' (anchored kernel and dp-laplace) are built on a likelihood whose rows raise; the
    plan prints the adaptive bound; rows open only when execution starts."""
    lik = RowsForbidden(LogisticRegressionModel.simulate(n=2000, dim=2, seed=1))
    plan = plan_run(lik.n_rows, lik.dim, algorithm="penalty", epsilon=1.0, delta=DELTA, quiet=True, chains=2,
                    iter_warmup=100, iter_sampling=100, ratio_clip=4.0, anchor="dp-gd", clip="adaptive")
    assert "clip:        adaptive" in str(plan)
    plan_run(lik.n_rows, lik.dim, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, quiet=True, grad_clip=4.0,
             clip="adaptive")
    original = pipeline.execute

    def opening(plan, likelihood, **kwargs):
        likelihood.open_rows = True
        return original(plan, likelihood, **kwargs)

    monkeypatch.setattr(pipeline, "execute", opening)
    fit = pipeline.sample_private(lik, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, chains=1,
                                  iter_sampling=20, seed=1, show_progress=False, grad_clip=4.0, clip="adaptive")
    assert 0.0 < fit.attrs["clip_bound"] <= 4.0


# ------------------------------------------------------------------------------------------ what is released
def _neighbours() -> tuple[LogisticRegressionModel, LogisticRegressionModel]:
    base = LogisticRegressionModel.simulate(n=3000, dim=2, seed=5)
    X, y = base.X.copy(), base.y.copy()
    X[17], y[17] = [30.0, -30.0], 1.0  # misfit near the mode (predictor about -70): a gradient norm above the cap
    return base, LogisticRegressionModel(X, y, prior_sd=base.prior_sd)


@pytest.mark.parametrize("algorithm", ["dp-laplace", "penalty"])
def test_only_mechanism_outputs_differ_between_neighbours(algorithm):
    """Neighbouring data sets, noise seeded identically: the final bound is in the attrs with its reason, and the
    attrs that differ are the mechanism outputs (the anchor's / dp-laplace's releases, the bound and what is
    computed from them) and the post-processing of the draws (convergence); the bound is below the cap."""
    extra = {"anchor": "dp-gd", "iter_warmup": 50, "iter_sampling": 50, "anchor_steps": 40, "ratio_clip": 8.0} \
        if algorithm == "penalty" else {"iter_sampling": 100, "grad_clip": 8.0}
    fits = []
    for model in _neighbours():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fits.append(sample_private(model, algorithm=algorithm, epsilon=3.0, delta=DELTA, chains=2, seed=9,
                                       show_progress=False, clip="adaptive", **extra))
    a, b = fits[0].attrs, fits[1].attrs
    assert set(a) == set(b)
    assert 0.0 < a["clip_bound"] < 8.0 and "private quantile" in a["clip_bound_reason"]
    differing = {k for k in a if str(a[k]) != str(b[k])}
    if algorithm == "dp-laplace":
        released = {"laplace_theta_hat", "laplace_gradient", "laplace_curvature", "clip_bound",
                    "clip_bound_reason", "laplace_noise_sds_at_clip_bound"}
        derived = {"created_at", "released_draws"}
    else:
        released = {"anchor_theta", "anchor_gradient", "clip_bound", "clip_bound_reason", "diff_clip",
                    "diff_clip_reason", "posterior_target", "anchor_clipped_rows"}
        # post-processing of the released draws: convergence verdict, the metric adapted from warmup draws, the
        # released-draws screen
        derived = {"created_at", "convergence", "convergence_warning", "near_start", "inv_metric", "step_size",
                   "adapted_step_size", "released_draws"}
    assert {"clip_bound", "clip_bound_reason"} <= differing <= released | derived, differing - released - derived
    assert a["clip_bound"] != b["clip_bound"]  # the row moved a released count


def test_quantile_clip_bias_is_measured():
    """The bias of clipping at a quantile, measured without noise: at the exact posterior mode of a logistic model
    the clipped gradient sum is not -grad log p0; the one-step Newton mean built from it (true curvature) moves
    off the mode by an amount that falls as the quantile rises (0.5 > 0.9 > 0.99), and vanishes without clipping."""
    model = LogisticRegressionModel.simulate(n=5000, dim=3, seed=2)
    from scipy.optimize import minimize

    def neg(theta):
        v, g = model.row_log_lik_grad(theta)
        lp, gp = model.log_prior_grad(theta)
        return -(np.sum(v) + lp), -(np.sum(g, axis=0) + gp)

    mode = minimize(neg, np.zeros(model.dim), jac=True, method="BFGS", options={"gtol": 1e-10}).x
    _, grads = model.row_log_lik_grad(mode)
    grads = np.asarray(grads)
    _, prior_grad = model.log_prior_grad(mode)
    p = np.asarray(grads).T @ np.asarray(grads) + np.eye(model.dim) / model.prior_sd ** 2
    sd = np.sqrt(np.diag(np.linalg.inv(p)))
    norms = mechanisms.row_norms(grads)
    shift = {}
    for q in (0.5, 0.9, 0.99, 1.0):
        bound = float(np.quantile(norms, q)) * (1.0 + 1e-12)
        g = mechanisms.clipped_gradient_sum(grads, bound) + prior_grad
        shift[q] = float(np.max(np.abs(np.linalg.solve(p, g)) / sd))
    assert shift[0.5] > shift[0.9] > shift[0.99] and shift[1.0] < 1e-5, shift


# ------------------------------------------------------------------------------------------ bad inputs
@pytest.mark.parametrize("kwargs, match", [
    ({"algorithm": "dp-laplace", "clip": "sometimes"}, "clip"),
    ({"algorithm": "dp-laplace", "clip": "adaptive", "clip_quantile": 1.5}, "clip_quantile"),
    ({"algorithm": "dp-laplace", "clip_share": 0.1}, "clip='adaptive'"),
    ({"algorithm": "dp-sgld", "clip": "adaptive"}, "anchor"),
    ({"algorithm": "dp-sgld", "anchor": "dp-gd", "clip_rate": 0.1}, "clip='adaptive'"),
    ({"algorithm": "dp-sgld", "anchor": "dp-gd", "clip": "adaptive", "clip_share": 0.2}, "0.95"),
    ({"algorithm": "dp-laplace", "clip": "adaptive", "clip_rate": -1.0}, "clip_rate"),
])
def test_bad_options_are_refused_with_clear_errors(kwargs, match):
    lengths = {"iter_sampling": 10, "iter_warmup": None if kwargs["algorithm"] == "dp-laplace" else 10}
    with pytest.raises(ValueError, match=match):
        plan_run(1000, 2, epsilon=1.0, delta=DELTA, quiet=True, grad_clip=3.0, **lengths, **kwargs)


def test_bad_mechanism_inputs_are_refused():
    with pytest.raises(ValueError, match="target quantile"):
        mechanisms.QuantileClip(bound=1.0, target=1.0, rate=0.2, count_sd=1.0, n_rows=10)
    with pytest.raises(ValueError, match="count noise sd"):
        mechanisms.QuantileClip(bound=1.0, target=0.5, rate=0.2, count_sd=0.0, n_rows=10)
    model = LogisticRegressionModel.simulate(n=100, dim=2, seed=1)
    clip = mechanisms.QuantileClip(bound=1.0, target=0.5, rate=0.2, count_sd=1.0, n_rows=100)
    with pytest.raises(ValueError, match="full batches"):
        noisy_gradient_ascent(model, np.random.default_rng(0), np.zeros(2), clip=1.0, sampling_rate=0.5, tau=1.0,
                              steps=2, learning_rate=0.01, clip_tracker=clip)


def test_default_quantile_is_a_public_rule_of_n():
    """clip_quantile unset: 1 - 5.5 / sqrt(N) within [0.75, 0.99], fixed at planning from N alone and recorded."""
    from stan_dp.phases.adaptive_clip import default_quantile

    assert default_quantile(3025) == pytest.approx(0.9)
    assert default_quantile(10_000) == pytest.approx(0.945)
    assert default_quantile(100) == 0.75 and default_quantile(10**7) == 0.99
    plan = plan_run(10_000, 3, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, quiet=True, grad_clip=4.0,
                    clip="adaptive")
    assert plan.clip.target == pytest.approx(0.945) and plan.describe()["clip_quantile"] == pytest.approx(0.945)
    plan = plan_run(10_000, 3, algorithm="penalty", epsilon=1.0, delta=DELTA, quiet=True, iter_warmup=10,
                    iter_sampling=10, ratio_clip=4.0, anchor="dp-gd", clip="adaptive", clip_quantile=0.8)
    assert plan.anchor.clip.target == 0.8 and plan.described_options["clip_quantile"] == 0.8


def test_the_count_phase_composes_to_its_exact_gaussian_privacy_loss():
    """The T = anchor_steps counts of an adaptive-clip dp-laplace run, checked against their exact privacy loss.

    Sensitivity, under adaptive composition: given the bounds L_1..L_T the run used (each a function of earlier
    releases), substituting any one row moves every count #{i : ||g_i|| <= L_t} by at most 1 (checked on the
    bounds of a real QuantileClip path, for every row substituted by a row inside and one outside each bound).
    Exact loss: T Gaussian counts of sd s and sensitivity 1 compose to one Gaussian mechanism with Gaussian-DP
    mu = sqrt(T) / s (Dong, Roth & Su 2022), whose delta(eps) = Phi(-eps / mu + mu / 2) - e^eps Phi(-eps / mu -
    mu / 2) is exact. The package's accountant, given only that phase (the plan's own count noise sd and T),
    reports an epsilon at delta = 1e-5 which must be valid (exact delta there <= 1e-5 (1 + 1e-4)) and tight
    (within 0.5 % of the exact epsilon, the PLD grid's pessimism)."""
    from scipy.optimize import brentq

    plan = plan_run(3000, 5, algorithm="dp-laplace", epsilon=3.0, delta=DELTA, chains=4, quiet=True,
                    grad_clip=12.0, clip="adaptive")
    clip = plan.clip
    steps, s = clip.steps, clip.count_sd
    assert steps == 100

    norms = np.random.default_rng(7).exponential(2.0, size=3000)
    tracker = mechanisms.QuantileClip(bound=clip.start, target=clip.target, rate=clip.rate, count_sd=s,
                                      n_rows=3000, cap=clip.start)
    rng = np.random.default_rng(8)
    grads = norms_as_gradients(norms)
    for _ in range(steps):
        tracker.release(rng, grads)
    bounds = np.asarray(tracker.path)
    assert bounds.min() < 0.5 * clip.start  # the bound moved: the sensitivity is checked at many bounds
    exact = lambda v: np.count_nonzero(v[None, :] <= bounds[:, None], axis=1)  # noqa: E731  counts, no noise
    base = exact(norms)
    for i in range(0, 3000, 97):
        for replacement in (0.0, 1e6, float(np.median(bounds))):
            other = norms.copy()
            other[i] = replacement
            assert np.max(np.abs(exact(other) - base)) <= 1

    mu = math.sqrt(steps) / s
    delta_of = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)  # noqa: E731
    eps_exact = brentq(lambda e: delta_of(e) - DELTA, 1e-9, 100.0)
    eps_acc = evaluate_mechanisms(phase_mechanisms([([gaussian_release(CLIP_RELEASE, s)], steps)]), DELTA).epsilon
    mechs = [m for m in plan.privacy.mechanisms() if m["name"] == CLIP_RELEASE]
    assert len(mechs) == 1 and mechs[0]["count"] == steps and mechs[0]["noise_multiplier"] == pytest.approx(s)
    print(f"count phase: T = {steps}, sd = {s:.4g}, mu = {mu:.4g}; epsilon exact {eps_exact:.6f}, "
          f"accounted {eps_acc:.6f}")
    assert delta_of(eps_acc) <= DELTA * (1 + 1e-4)
    assert eps_exact <= eps_acc * (1 + 1e-9) and eps_acc <= 1.005 * eps_exact
