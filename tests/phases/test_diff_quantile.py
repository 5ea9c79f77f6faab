"""The private quantile of the anchor differences (``diff_clip_steps`` with ``clip='adaptive'``):
the counts' sensitivity, their exact accounting, the frozen C used by the kernel, public planning, option errors."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from stan_dp import sample_private
from stan_dp.models.reference_models import GaussianMeanModel, LogisticRegressionModel
from stan_dp.privacy import gaussian_rho, mechanisms
from stan_dp.privacy.evaluation import evaluate_mechanisms, phase_mechanisms
from stan_dp.privacy.events import gaussian_release
from stan_dp.methods.kernels import kernel_run
from stan_dp.phases.adaptive_clip import (DIFF_CLIP_RELEASE, diff_clip_cap, diff_clip_probes, difference_norms)
from stan_dp.phases.anchor import _diff_quantile, plan_anchor, split_anchor
from stan_dp.run.plan import plan_run
from stan_dp.samplers import DPSGLD

from row_guards import RowsForbidden
from test_adaptive_clip import _independent_epsilon

DELTA = 1e-5
ANCHORED = {"anchor": "dp-gd", "clip": "adaptive"}


def _norms_at_probes(model, theta_hat: np.ndarray, radius: float, probes: int, seed: int) -> list[np.ndarray]:
    _, anchor = model.row_log_lik_grad(theta_hat)
    out = []
    for theta in diff_clip_probes(np.random.default_rng(seed), theta_hat, radius, probes):
        _, g = model.row_log_lik_grad(theta)
        out.append(difference_norms(np.asarray(g), np.asarray(anchor)))
    return out


# ------------------------------------------------------------------------------------------ sensitivity
def test_difference_counts_have_sensitivity_one_and_failed_rows_are_outside():
    """Neighbouring logistic data sets (row i substituted by an extreme row, and by a row whose gradient is NaN):
    at every bound of a real QuantileClip path over probe points, every count #{i : ||g_i(theta_m) -
    g_i(theta_hat)|| <= C_t} moves by at most 1 (and by exactly 1 for some substitution: the test can fail). A
    row with a non-finite gradient at either point has a NaN norm and is outside every bound."""
    base = LogisticRegressionModel.simulate(n=600, dim=3, seed=3)
    theta_hat, radius = np.linspace(-0.5, 0.4, base.dim), 0.3
    width = base.X.shape[1]
    norms = _norms_at_probes(base, theta_hat, radius, 4, seed=5)
    tracker = mechanisms.QuantileClip(bound=0.01, target=0.9, rate=0.5, count_sd=2.0, n_rows=600, cap=10.0)
    rng = np.random.default_rng(6)
    for t in range(40):
        tracker.release_norms(rng, norms[t % 4])
    bounds = np.asarray(tracker.path)
    assert bounds.max() > 5 * bounds.min()  # the bound moved: sensitivity is checked at many bounds

    def counts(v: list[np.ndarray]) -> np.ndarray:
        return np.array([np.count_nonzero(v[t % 4] <= c) for t, c in enumerate(bounds)])

    reference = counts(norms)
    moved = 0
    for i in range(0, 600, 37):
        for x_row, y_row in ((np.full(width, 40.0), 0), (np.full(width, np.nan), 1)):
            X, y = base.X.copy(), base.y.copy()
            X[i], y[i] = x_row, y_row
            with np.errstate(invalid="ignore"):
                other = _norms_at_probes(LogisticRegressionModel(X, y, prior_sd=base.prior_sd), theta_hat, radius,
                                         4, seed=5)
            if not np.isfinite(X[i]).all():
                assert all(np.isnan(v[i]) for v in other)  # outside every bound
            change = np.abs(counts(other) - reference)
            assert change.max() <= 1
            moved += int(change.max() == 1)
    assert moved > 0
    with np.errstate(invalid="ignore"):
        assert mechanisms.noisy_count_within(np.random.default_rng(0), np.array([np.nan, 0.5, 2.0]), 1.0, 0.0) == 1.0


# ------------------------------------------------------------------------------------------ accounting
@pytest.mark.slow
def test_difference_counts_compose_to_their_exact_gaussian_privacy_loss():
    """T = diff_clip_steps counts of sd s (sensitivity 1) compose to Gaussian-DP mu = sqrt(T) / s exactly; the
    plan's s is sqrt(T / (2 share rho)) (its share of the rho budget), the report lists the phase, and the
    package's accountant on that phase gives an epsilon that is valid and within 0.5 % of the exact one."""
    T, share, eps = 30, 0.02, 3.0
    plan = plan_run(3000, 4, algorithm="dp-sgnht", epsilon=eps, delta=DELTA, chains=2, quiet=True, iter_warmup=200,
                    iter_sampling=200, grad_clip=8.0, diff_clip_steps=T, diff_clip_share=share, **ANCHORED)
    s = plan.anchor.diff.count_sd
    assert s == pytest.approx(math.sqrt(T / (2.0 * share * gaussian_rho(eps, DELTA))), rel=1e-12)
    mechs = [m for m in plan.privacy.mechanisms() if m["name"] == DIFF_CLIP_RELEASE]
    assert len(mechs) == 1 and mechs[0]["count"] == T and mechs[0]["noise_multiplier"] == pytest.approx(s)
    mu = math.sqrt(T) / s
    delta_of = lambda e: norm.cdf(-e / mu + mu / 2) - math.exp(e) * norm.cdf(-e / mu - mu / 2)  # noqa: E731
    eps_exact = brentq(lambda e: delta_of(e) - DELTA, 1e-9, 100.0)
    eps_acc = evaluate_mechanisms(phase_mechanisms([([gaussian_release(DIFF_CLIP_RELEASE, s)], T)]), DELTA).epsilon
    assert delta_of(eps_acc) <= DELTA * (1 + 1e-4)
    assert eps_exact <= eps_acc * (1 + 1e-9) and eps_acc <= 1.005 * eps_exact


def test_the_whole_run_with_difference_counts_spends_the_budget_once():
    """The counts are a phase of the run's one PLD: an independent dp-accounting composition of every mechanism
    of the plan (both count phases as sensitivity-1 Gaussians) is within [0.99, 1.001] of the budget, and the
    anchor's total share includes diff_clip_share."""
    eps = 1.0
    plan = plan_run(10_000, 4, algorithm="dp-sgld", epsilon=eps, delta=DELTA, chains=2, quiet=True, iter_warmup=300,
                    iter_sampling=300, grad_clip=2.5, diff_clip_steps=20, **ANCHORED)
    assert plan.anchor.shares == pytest.approx(0.2 + 0.6 + 0.05 + 0.02 + 0.02)  # ... + clipped_count_share
    mechs = json.loads(json.dumps(plan.privacy.mechanisms()))
    assert [m["count"] for m in mechs if m["name"] == DIFF_CLIP_RELEASE] == [20]
    independent = _independent_epsilon(mechs, DELTA)
    assert 0.99 * eps <= independent <= 1.001 * eps, independent


# ------------------------------------------------------------------------------------------ the bound
def test_the_bound_grows_from_a_too_small_rule_to_the_quantile_and_stops_at_its_cap():
    """Gaussian rows with observation variance 0.01 have curvature 100, far above the rule's K = L^2 / 4: every
    row's difference at distance r is exactly r / 0.01. From a rule C 20 times too small the counts (low noise) take
    C to that value (within the update's last step: [e^-0.05, e^0.45] of it); with 2 L below it, C stops at the
    cap 2 L."""
    x = np.random.default_rng(1).normal(size=(500, 2))
    model = GaussianMeanModel(x, obs_cov=0.01, prior_mean=0.0, prior_cov=100.0)
    radius = 0.05
    target = radius / 0.01
    cfg = split_anchor({"grad_clip": 20.0, "diff_clip_steps": 40, "diff_clip_share": 0.5, "anchor_share": 0.1,
                        "anchor_gradient_share": 0.1, "clip_share": 0.1, **ANCHORED}, DPSGLD.option_spec,
                       "dp-sgld")[1]
    diff = plan_anchor(cfg, epsilon=50.0, delta=DELTA, n_rows=500).diff
    assert diff.count_sd < 5.0
    theta_hat = x.mean(axis=0)
    _, grads = model.row_log_lik_grad(theta_hat)
    final, reason = _diff_quantile(model, diff, np.random.default_rng(2), theta_hat, np.asarray(grads), radius,
                                   target / 20.0, grad_clip=20.0)
    assert target * math.exp(-0.05) * 0.99 <= final <= target * math.exp(0.45) * 1.01, (final, target)
    assert "private quantile" in reason and "C_f" in reason
    capped, _ = _diff_quantile(model, diff, np.random.default_rng(2), theta_hat, np.asarray(grads), radius,
                               target / 20.0, grad_clip=1.0)
    assert capped == diff_clip_cap(target / 20.0, 1.0) == 2.0


@pytest.mark.slow
def test_the_frozen_bound_is_the_kernels_diff_clip(monkeypatch):
    """sample_private with diff_clip_steps: the kernel is built with diff_clip = C_f, the attrs record C_f with a
    reason naming the private quantile, the report lists the counts, and the budget is spent once."""
    seen = []
    original = DPSGLD.__init__

    def recording(self, likelihood, privacy, **options):
        seen.append(options.get("diff_clip"))
        original(self, likelihood, privacy, **options)

    monkeypatch.setattr(DPSGLD, "__init__", recording)
    model = LogisticRegressionModel.simulate(n=2000, dim=2, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="dp-sgld", epsilon=3.0, delta=DELTA, chains=2, iter_warmup=100,
                             iter_sampling=100, seed=4, show_progress=False, grad_clip=3.0, diff_clip_steps=20,
                             **ANCHORED)
    assert seen == [fit.attrs["diff_clip"]] and fit.attrs["diff_clip"] > 0
    assert fit.attrs["diff_clip_reason"].startswith("private quantile: 20 noisy counts")
    names = [m["name"] for m in json.loads(fit.attrs["privacy_mechanisms"])]
    assert DIFF_CLIP_RELEASE in names
    assert 0.99 * 3.0 <= fit.attrs["epsilon_spent"] <= 3.0
    assert json.loads(fit.attrs["algorithm_options"])["diff_clip_steps"] == 20


# ------------------------------------------------------------------------------------------ public planning
@pytest.mark.slow
def test_planning_reads_no_row():
    """A plan with the difference quantile is built on a likelihood whose rows raise; it carries the counts'
    public noise and options, and without diff_clip_steps there is no difference phase."""
    lik = RowsForbidden(LogisticRegressionModel.simulate(n=2000, dim=2, seed=1))
    plan = plan_run(lik.n_rows, lik.dim, algorithm="dp-sgnht", epsilon=1.0, delta=DELTA, quiet=True, chains=2,
                    iter_warmup=100, iter_sampling=100, grad_clip=4.0, diff_clip_steps=10, **ANCHORED)
    assert plan.anchor.diff is not None and plan.described_options["diff_clip_steps"] == 10
    assert plan.described_options["diff_clip_count_noise_sd"] == pytest.approx(plan.anchor.diff.count_sd)
    plain = plan_run(lik.n_rows, lik.dim, algorithm="dp-sgnht", epsilon=1.0, delta=DELTA, quiet=True, chains=2,
                     iter_warmup=100, iter_sampling=100, grad_clip=4.0, **ANCHORED)
    assert plain.anchor.diff is None and "diff_clip_steps" not in plain.described_options
    assert DIFF_CLIP_RELEASE not in [m["name"] for m in plain.privacy.mechanisms()]


# ------------------------------------------------------------------------------------------ bad options
@pytest.mark.parametrize("kwargs, match", [
    ({"anchor": "dp-gd", "diff_clip_steps": 10}, "clip='adaptive'"),
    ({**ANCHORED, "diff_clip_steps": 10, "diff_clip": 0.5}, "one or the other"),
    ({**ANCHORED, "diff_clip_steps": 10, "diff_clip_quantile": 1.5}, "diff_clip_quantile"),
    ({**ANCHORED, "diff_clip_steps": -1}, "diff_clip_steps"),
    ({**ANCHORED, "diff_clip_steps": 10, "diff_clip_probes": 0}, "diff_clip_probes"),
    ({**ANCHORED, "diff_clip_steps": 10, "diff_clip_share": 0.11}, "0.95"),
    ({"diff_clip_steps": 10}, "clip='adaptive'"),
])
def test_bad_options_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        plan_run(1000, 2, algorithm="dp-sgld", epsilon=1.0, delta=DELTA, quiet=True, grad_clip=3.0, iter_warmup=10,
                 iter_sampling=10, **kwargs)
    with pytest.raises(ValueError, match="diff_clip_steps"):
        plan_run(1000, 2, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, quiet=True, grad_clip=3.0,
                 clip="adaptive", diff_clip_steps=10)


def test_run_anchor_is_untouched_without_the_option(monkeypatch):
    """Without diff_clip_steps the anchor phase reads no probe point: the difference machinery is never called."""
    from stan_dp.phases import anchor as anchor_mod

    def forbidden(*args, **kwargs):
        raise AssertionError("difference quantile used without diff_clip_steps")

    monkeypatch.setattr(anchor_mod, "_diff_quantile", forbidden)
    monkeypatch.setattr(kernel_run, "run_anchor", anchor_mod.run_anchor)
    model = LogisticRegressionModel.simulate(n=500, dim=2, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="dp-sgld", epsilon=3.0, delta=DELTA, chains=1, iter_warmup=50,
                             iter_sampling=50, seed=4, show_progress=False, grad_clip=3.0, **ANCHORED)
    assert "K r" in fit.attrs["diff_clip_reason"]


def test_battery_suffix_asks_for_the_difference_quantile():
    """The battery's "+diffq" suffix adds diff_clip_steps to an anchored adaptive variant."""
    from stan_dp.tools.utility import DIFF_QUANTILE_STEPS, split_variant

    assert split_variant("dp-sgnht+anchor+adaptive+diffq") == (
        "dp-sgnht", {"diff_clip_steps": DIFF_QUANTILE_STEPS, "clip": "adaptive", "anchor": "dp-gd"})
    assert split_variant("dp-sgnht+anchor+adaptive") == ("dp-sgnht", {"clip": "adaptive", "anchor": "dp-gd"})
