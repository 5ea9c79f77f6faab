"""What the audit runs: mechanisms, one kernel iteration, whole short runs.

A ``Target`` holds the claim (epsilon, delta) and one or more ``Variant``s (canary pair, step size). Each
variant can draw n independent runs on D0 or on D1 and returns their released outputs as a feature matrix
(one row per run). Everything a target releases into the features is what the package releases: mechanism
outputs, kernel ``StepInfo`` and draws, the posterior and sample_stats groups of a fit.

The kernel side is generic: any class in ``stan_dp.samplers.ALGORITHMS`` that follows the kernel protocol
(``accounting_name``, ``option_defaults``, ``accounting_shape``, ``init_state``, ``step``) is audited without
registration. A kernel with a required option (e.g. DP-Fast MH's ``row_bound``) needs a public value for the audit:
``AUDIT_OPTIONS`` below, a class attribute ``audit_options`` on the kernel, or the caller's options (the
kernel's own constructor names a missing one).
"""
from __future__ import annotations

import json
import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import numpy as np

from ..methods import registry
from ..privacy import mechanisms
from ..samplers.base import KernelBase
from .neighbours import SubstitutedRows

__all__ = ["Target", "Variant", "AUDIT_OPTIONS", "AUDIT_STEP_SIZES", "NAN_RUN_TARGETS", "WHOLE_RUN_TARGETS",
           "mechanism_targets", "KernelSetup", "iteration_target", "anchored_iteration_target", "anchored_trajectory_target",
           "anchored_bound_target", "subsampled_iteration_target", "unit_iteration_target", "run_target", "nan_run_target",
           "whole_run_target", "public_start", "public_momentum_kernel", "kernel_options"]

#: public option values the audit uses for kernels whose options have no default. The SG kernels run with
#: ``free_steps=False`` so that the privacy noise, not the dynamics noise, sets the injected variance: with the
#: free-step cap the released step carries more noise than privacy needs and a factor-2 sensitivity error in
#: the privacy noise is masked (measured: bounds 0.5-0.8 against a claim of 1 with the fault planted).
AUDIT_OPTIONS: dict[str, dict[str, Any]] = {
    "penalty": {"ratio_clip": 1.0},
    "dp-hmc": {"ratio_clip": 1.0, "grad_clip": 1.0},
    "dp-fast-mh": {"row_bound": 1.0},
    "dp-fast-mh-full": {"row_bound": 1.0},
    "dp-sgld": {"grad_clip": 1.0, "free_steps": False},
    "dp-sghmc": {"grad_clip": 1.0, "free_steps": False},
    "dp-sgnht": {"grad_clip": 1.0, "free_steps": False},
}

#: step sizes (metric units) the one-iteration audit tries per kernel instead of the caller's: the SG kernels'
#: privacy noise exceeds their dynamics noise only at large steps (the privacy variance grows like step^2, the
#: dynamics variance like step), which is where a sensitivity error becomes visible
AUDIT_STEP_SIZES: dict[str, tuple[float, ...]] = {
    "dp-sgld": (1.0, 4.0),
    "dp-sghmc": (1.0, 4.0),
    "dp-sgnht": (1.0, 4.0),
}

#: rows and Poisson sampling rate of the subsampled iteration targets (every row at the clip bound)
SUBSAMPLED_ROWS = 20
SUBSAMPLED_RATE = 0.3

#: whole-run targets of the samplers that clip log-likelihoods (OPS and what builds on it), audited with a
#: NaN canary: name -> (algorithm given to sample_private, its options, (iter_warmup, iter_sampling)). OPS runs
#: 30 internal warmup iterations and releases 2 draws; the OPS starts (30 internal warmup iterations) are
#: followed by ONE released SG iteration, so that the start is still visible in the released draw (after tens
#: of SG steps the chain forgets its start and a faulty OPS draw would go unseen).
OPS_BOUNDS = (-5.0, 0.0)
NAN_RUN_TARGETS: dict[str, tuple[str, dict[str, Any], tuple[int, int]]] = {
    "ops": ("ops", {"loglik_bounds": OPS_BOUNDS}, (30, 2)),
    "hybrid": ("hybrid", {"loglik_bounds": OPS_BOUNDS, "grad_clip": 1.0, "then": "dp-sgld",
                          "warm_start_warmup": 30}, (0, 1)),
    "dp-sgld warm_start=ops": ("dp-sgld", {"warm_start": "ops", "loglik_bounds": OPS_BOUNDS, "grad_clip": 1.0,
                                           "warm_start_warmup": 30}, (0, 1)),
}

Sampler = Callable[[int, int, np.random.Generator, Callable[[int], None]], np.ndarray]


@dataclass
class Variant:
    """One concrete neighbouring pair and public setting: ``sample(side, n, rng, tick)`` -> (n, p) features."""

    description: str
    sample: Sampler


@dataclass
class Target:
    """An audited release with its claimed guarantee."""

    name: str
    kind: str  # "mechanism" | "iteration" | "run"
    claimed_epsilon: float
    claimed_delta: float
    feature_names: list[str]
    variants: list[Variant]
    guarantee_holds: bool = True
    #: rough cost of one run relative to a mechanism call (for the progress bar and run-count defaults)
    cost: float = 1.0
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------- mechanisms
_BIG = 1e6


def _tau_for(epsilon: float, delta: float, releases: int) -> float:
    """Noise multiplier per release such that ``releases`` Gaussian releases compose to (epsilon, delta)."""
    from ..privacy import gaussian_mu

    return math.sqrt(releases) / gaussian_mu(epsilon, delta)  # per-release mu 1/tau composes to sqrt(k) / tau


def _ratio_sampler(row_values: list[tuple[float, float]], n_rows: int, tau: float) -> Sampler:
    """Releases R_k + xi_k = sum_i clip_c(r_i) + noise, k = 1..K; row 0 takes row_values[k][side]."""
    c = 1.0

    def sample(side, n, rng, tick):
        inputs = []
        for pair in row_values:
            r = np.zeros(n_rows)
            r[0] = pair[side]
            inputs.append(r)
        out = np.empty((n, len(inputs)))
        for i in range(n):
            for k, r in enumerate(inputs):
                out[i, k] = mechanisms.noisy_clipped_ratio_sum(rng, r, c, tau)[0]
            tick(1)
        return out

    return sample


def _gradient_sampler(row_signs: list[tuple[float, float]], n_rows: int, dim: int, tau: float) -> Sampler:
    """Releases G_k + noise with G_k = sum_i clip_b(grad_i); row 0 is sign * big * e_1 in release k."""
    b = 1.0
    prior_grad = np.zeros(dim)

    def sample(side, n, rng, tick):
        inputs = []
        for pair in row_signs:
            g = np.zeros((n_rows, dim))
            g[0, 0] = pair[side] * _BIG
            inputs.append(g)
        out = np.empty((n, dim * len(inputs)))
        for i in range(n):
            for k, g in enumerate(inputs):
                out[i, k * dim:(k + 1) * dim] = mechanisms.noisy_clipped_gradient(rng, g, prior_grad, b, tau)[0]
            tick(1)
        return out

    return sample


def mechanism_targets(epsilon: float, delta: float, *, n_rows: int = 10, dim: int = 2) -> list[Target]:
    """The mechanisms of ``stan_dp.privacy.mechanisms``, each calibrated to (epsilon, delta) for its releases.

    ``ratio`` / ``gradient``: one release of the clipped log-likelihood-ratio sum / clipped gradient sum, the
    substituted row at the opposite clip bounds in D0 and D1; ``ratio non-finite``: the row's ratio is NaN
    in D0 and +inf in D1 (what a row that fails to evaluate gives), which the clip maps to the bounds. ``... x2``: two releases whose substituted row flips sign between them, as the canary's ratio does
    between two proposals; with independent noise they compose to (epsilon, delta), with shared noise their
    difference is noise-free.
    """
    targets = []
    tau1, tau2 = _tau_for(epsilon, delta, 1), _tau_for(epsilon, delta, 2)
    targets.append(Target(
        "mechanism:ratio", "mechanism", epsilon, delta, ["R + xi"],
        [Variant("row 0: ratio -1e6 vs +1e6", _ratio_sampler([(-_BIG, _BIG)], n_rows, tau1))]))
    targets.append(Target(
        "mechanism:ratio non-finite", "mechanism", epsilon, delta, ["R + xi"],
        [Variant("row 0: ratio NaN vs +inf", _ratio_sampler([(math.nan, math.inf)], n_rows, tau1))]))
    targets.append(Target(
        "mechanism:ratio x2", "mechanism", epsilon, delta, ["R1 + xi1", "R2 + xi2"],
        [Variant("row 0: ratios (-1e6, +1e6) vs (+1e6, -1e6)",
                 _ratio_sampler([(-_BIG, _BIG), (_BIG, -_BIG)], n_rows, tau2))]))
    names = [f"G[{j}] + xi[{j}]" for j in range(dim)]
    targets.append(Target(
        "mechanism:gradient", "mechanism", epsilon, delta, names,
        [Variant("row 0: gradient -1e6 e_1 vs +1e6 e_1", _gradient_sampler([(-1.0, 1.0)], n_rows, dim, tau1))]))
    targets.append(Target(
        "mechanism:gradient x2", "mechanism", epsilon, delta,
        [f"release {k + 1}: {nm}" for k in range(2) for nm in names],
        [Variant("row 0: gradients (-e_1, +e_1) vs (+e_1, -e_1) x 1e6",
                 _gradient_sampler([(-1.0, 1.0), (1.0, -1.0)], n_rows, dim, tau2))]))
    return targets


# ------------------------------------------------------------------------------------------------- kernels
def kernel_options(algorithm: str, kernel_cls: type[KernelBase], options: dict[str, Any] | None) -> dict[str, Any]:
    """The options used for the audit: AUDIT_OPTIONS / ``audit_options``, then the caller's."""
    merged = dict(AUDIT_OPTIONS.get(algorithm, {}))
    merged.update(kernel_cls.audit_options or {})
    merged.update(options or {})
    return merged


def _plan(kernel_cls: type[KernelBase], algorithm: str, options: dict[str, Any], epsilon: float, delta: float, n_rows: int):
    from ..privacy import calibrate

    defaults = dict(kernel_cls.option_defaults or {})
    full = {**defaults, **options}
    shape = kernel_cls.accounting_shape(full)
    accounting = kernel_cls.accounting_name or algorithm
    return calibrate(kernel_cls, algorithm=accounting, epsilon=epsilon, delta=delta, chains=1, iterations=1,
                     n_rows=n_rows, **shape)


def _neighbours(base: Any, index: int, pair: tuple[Any, Any]) -> tuple[Any, Any]:
    d0 = base if pair[0] is None else SubstitutedRows(base, index, pair[0])
    d1 = base if pair[1] is None else SubstitutedRows(base, index, pair[1])
    return d0, d1


def _numeric_extras(info) -> list[str]:
    return [k for k, v in info.extra.items() if isinstance(v, (bool, int, float, np.bool_, np.integer, np.floating))]


def public_start(kernel: KernelBase, theta0: np.ndarray):
    """The public state an audited iteration starts from: ``theta0`` and, for kernels that carry a momentum,
    the public momentum 0 (``kernel.public_state``). A fresh private momentum drawn at the audited iteration
    would add noise the mechanism does not own and mask a sensitivity error at small steps."""
    return kernel.public_state(np.asarray(theta0, dtype=float).copy())


@dataclass(frozen=True)
class KernelSetup:
    """How an audited iteration's kernel is built when it is not ``ALGORITHMS[algorithm]`` on the data as given.

    wrap: turns each neighbouring data set into the likelihood the kernel runs on (an anchored run's rows, for
        example); None: the data set itself.
    kernel_cls: the kernel class to run instead of ``ALGORITHMS[algorithm]`` (a subclass that fixes its data-free
        randomness, ``public_momentum_kernel``); it is planned like ``algorithm``.
    plan_rows: the public N the plan is made for when ``wrap`` changes it (the number of units of a unit target);
        None: ``base.n_rows``.
    """

    wrap: Callable[[Any], Any] | None = None
    kernel_cls: type[KernelBase] | None = None
    plan_rows: int | None = None


def iteration_target(algorithm: str, base: Any, *, epsilon: float, delta: float, options: dict | None,
                     canary_pairs: list[tuple[Any, Any]], index: int, theta0: np.ndarray,
                     step_sizes: tuple[float, ...], name: str | None = None,
                     setup: KernelSetup = KernelSetup()) -> Target:
    """One kernel iteration from the public state ``theta0`` (``public_start``): the released ``StepInfo``
    and the new draw.

    The claim is the accountant's (epsilon, delta) for one iteration planned at the requested budget.
    Variants: every canary pair x every step size (the selection half keeps the best). ``setup``: how the kernel
    is built (``KernelSetup``: the likelihood wrapper, the kernel class, the planned N).
    """
    wrap = setup.wrap or (lambda d: d)
    from ..samplers import ALGORITHMS

    kernel_cls = setup.kernel_cls or ALGORITHMS[algorithm]
    opts = kernel_options(algorithm, kernel_cls, options)
    plan_rows = base.n_rows if setup.plan_rows is None else setup.plan_rows
    plan = _plan(kernel_cls, algorithm, opts, epsilon, delta, int(plan_rows))
    report = plan.report()
    theta0 = np.asarray(theta0, dtype=float)
    metric = np.ones(base.dim)

    probe_kernel = kernel_cls(wrap(base), plan, **opts)
    guarantee = bool(probe_kernel.guarantee_holds)
    _, info = probe_kernel.step(np.random.default_rng(0), public_start(probe_kernel, theta0),
                                step_sizes[0], metric)
    extras = _numeric_extras(info)
    names = ["accepted", "acceptance_rate"] + [f"theta[{j}] - theta0[{j}]" for j in range(base.dim)] + extras

    def make(pair, step):
        kernels = [kernel_cls(wrap(d), plan, **opts) for d in _neighbours(base, index, pair)]

        def sample(side, n, rng, tick):
            kernel = kernels[side]
            out = np.empty((n, len(names)))
            for i in range(n):
                state, info = kernel.step(rng, public_start(kernel, theta0), step, metric)
                out[i, 0] = float(info.accepted)
                out[i, 1] = float(info.accept_stat)
                out[i, 2:2 + base.dim] = np.asarray(state.theta, dtype=float) - theta0
                for j, key in enumerate(extras):
                    out[i, 2 + base.dim + j] = float(info.extra.get(key, math.nan))
                tick(1)
            return out

        return sample

    variants = [Variant(f"{_pair_text(pair)}; step size {step:g}", make(pair, step))
                for pair in canary_pairs for step in step_sizes]
    return Target(name or f"iteration:{algorithm}", "iteration", float(report.epsilon), float(report.delta),
                  names, variants, guarantee_holds=guarantee, cost=5.0)


#: the public anchor, C and G~ of the anchored iteration targets (a real run releases them)
ANCHOR_OFFSET = 0.1
ANCHOR_DIFF_CLIP = 1.0


def anchored_iteration_target(algorithm: str, *, epsilon: float, delta: float, options: dict | None, dim: int,
                              step_sizes: tuple[float, ...], n_rows: int = 10) -> Target:
    """One iteration of a kernel on anchored rows (``stan_dp.phases.anchor``): every row is l_i(theta) - g_i(theta_hat)
    . theta for a public anchor theta_hat, the data-free part gains a public G~ . theta, and the kernel clips at
    ``diff_clip`` C. The substituted row is a radial canary around the public state (huge slope, opposite signs),
    whose gradient DIFFERENCES and ratio remainders r - g(theta_hat) . (theta' - theta) hit the clip whatever
    the proposal: the difference-clipped minibatch sum (SG kernels, DP-HMC's gradients) and the control-variate
    ratio test (penalty MH, DP-HMC, DP-Fast MH) at their worst case. G~ itself is the gradient mechanism
    (``mechanism:gradient``)."""
    from ..models.reference_models import GaussianMeanModel
    from ..phases.anchor import AnchoredLikelihood
    from .neighbours import CANARY_SLOPE, RadialCanary

    theta0, theta_hat = np.zeros(dim), np.full(dim, ANCHOR_OFFSET)
    base = GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    gradient = np.zeros(dim)

    def anchored(data: Any) -> Any:
        _, grads = data.row_log_lik_grad(theta_hat)
        return AnchoredLikelihood(data, grads, gradient)

    pair = (RadialCanary(theta0, -CANARY_SLOPE), RadialCanary(theta0, CANARY_SLOPE))
    opts = {**(options or {}), "diff_clip": ANCHOR_DIFF_CLIP}
    target = iteration_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=[pair],
                              index=0, theta0=theta0, step_sizes=step_sizes, name=f"iteration:{algorithm} anchored",
                              setup=KernelSetup(wrap=anchored))
    target.notes.append(f"anchor {ANCHOR_OFFSET:g} x ones, diff_clip {ANCHOR_DIFF_CLIP:g}, {n_rows} rows")
    return target


def public_momentum_kernel(kernel_cls: type) -> type:
    """``kernel_cls`` (DP-HMC) with its data-free per-transition randomness fixed at public values: momentum 0 and
    the step-size jitter multiplier 1. The guarantee holds for every value of that randomness (the transition is
    a post-processing of its releases for each fixed momentum), so an audit may condition on one; a fresh
    momentum would add noise the mechanisms do not own and hide the gradient releases in the released draw."""
    class PublicMomentum(kernel_cls):
        def draw_momentum(self, rng, metric):
            return np.zeros(self.dim)

        @staticmethod
        def _jitter(rng, cache):
            return 1.0

    PublicMomentum.__name__ = PublicMomentum.__qualname__ = f"{kernel_cls.__name__}PublicMomentum"
    return PublicMomentum


#: DP-HMC on the anchored trajectory target: leapfrog steps, the budget share of the gradients (nearly all: the
#: released draw shows the gradient releases, not the ratio test) and the (tiny) steps that keep every proposal
#: accepted with momentum 0
TRAJECTORY_OPTIONS = {"leapfrog_steps": 5, "gradient_share": 0.99}
TRAJECTORY_STEP_SIZES = (0.005, 0.01)


def anchored_trajectory_target(algorithm: str = "dp-hmc", *, epsilon: float, delta: float,
                               options: dict | None = None, dim: int = 2, n_rows: int = 10,
                               step_sizes: tuple[float, ...] = TRAJECTORY_STEP_SIZES) -> Target:
    """One anchored DP-HMC iteration where the clip of the gradient differences shows in the released draw.

    On the generic anchored target the fresh momentum masks the gradient releases and the ratio test gets half
    the budget, so a kernel that clipped at twice its bound was not caught (lower bounds 0.1-0.2 against a claim
    of 2). Here: the momentum is a public 0 and the step jitter a public 1 (``public_momentum_kernel``), the
    substituted row is a ``KinkCanary`` whose gradient difference to the anchor clips to the same vector +-C w
    at every leapfrog point, nearly all of the budget goes to the L + 1 gradient releases
    (``TRAJECTORY_OPTIONS``), and the steps are small enough that the proposal is accepted (the ratio test's
    noise and the kinetic energy vanish with the step). The released draw is then theta + eta^2 M times a fixed
    positive combination of L of the L + 1 noisy gradient releases (the last one moves the momentum only), whose
    canary part adds up in one direction: about 0.85 of the gradient releases' Gaussian-DP mu is visible."""
    from ..models.reference_models import GaussianMeanModel
    from ..phases.anchor import AnchoredLikelihood
    from ..samplers import ALGORITHMS
    from .neighbours import CANARY_SLOPE, KinkCanary

    theta0, theta_hat = np.zeros(dim), np.full(dim, ANCHOR_OFFSET)
    w = (theta_hat - theta0) / np.linalg.norm(theta_hat - theta0)
    kink = 0.5 * (theta0 + theta_hat)  # the anchor on the + side, the audited state on the - side
    base = GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)

    def anchored(data: Any) -> Any:
        _, grads = data.row_log_lik_grad(theta_hat)
        return AnchoredLikelihood(data, grads, np.zeros(dim))

    pair = (KinkCanary(w, kink, -CANARY_SLOPE), KinkCanary(w, kink, CANARY_SLOPE))
    opts = {**TRAJECTORY_OPTIONS, **(options or {}), "diff_clip": ANCHOR_DIFF_CLIP}
    target = iteration_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=[pair],
                              index=0, theta0=theta0, step_sizes=tuple(step_sizes),
                              name=f"iteration:{algorithm} anchored trajectory", setup=KernelSetup(
                                  wrap=anchored, kernel_cls=public_momentum_kernel(ALGORITHMS[algorithm])))
    target.notes.append(f"anchor {ANCHOR_OFFSET:g} x ones, diff_clip {ANCHOR_DIFF_CLIP:g}, {n_rows} rows, kink "
                        f"canary, momentum 0, {', '.join(f'{k}={v}' for k, v in TRAJECTORY_OPTIONS.items())}")
    return target


#: DP-Fast MH on the anchored rows-at-bound target: rows, dimension (the proposal's length ||theta' - theta||
#: then varies little, and with it the sensitivity 2 C ||theta' - theta||) and steps (2 C ||theta' - theta|| of
#: about 0.45, 0.9 and 1.8)
BOUND_ROWS = 6
BOUND_DIM = 20
BOUND_STEP_SIZES = (0.05, 0.1, 0.2)


def anchored_bound_target(algorithm: str = "dp-fast-mh-full", *, epsilon: float, delta: float,
                          options: dict | None = None, dim: int = BOUND_DIM, n_rows: int = BOUND_ROWS,
                          step_sizes: tuple[float, ...] = BOUND_STEP_SIZES) -> Target:
    """One anchored DP-Fast MH iteration whose accept / reject decision shows its clipped energy differences.

    DP-Fast MH releases one bit per iteration. A bit carries the mechanism's privacy loss only in a tail: here
    every row is a radial canary around the public state at the + bound (``RowsAtBound``), so that the clipped
    statistic is n C M (M = ||theta' - theta||) and almost every proposal is accepted, and the substituted row
    sits at the - bound; the rare rejections then separate the neighbours (their probabilities differ by up to
    the Gaussian mechanism's tail ratio). In ``dim`` = 20 dimensions M varies little between proposals, so the
    sensitivity 2 C M stays near the step's value instead of mixing many (which blurs the tail). On the generic
    anchored target (rows at 0, two dimensions) a kernel that clipped at twice its bound gave 0.95 against a
    claim of 2."""
    from ..models.reference_models import GaussianMeanModel
    from ..phases.anchor import AnchoredLikelihood
    from .neighbours import CANARY_SLOPE, RadialCanary, RowsAtBound

    theta0, theta_hat = np.zeros(dim), np.full(dim, ANCHOR_OFFSET)
    prior = GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    base = RowsAtBound(prior, RadialCanary(theta0, CANARY_SLOPE, name="row at +bound"))

    def anchored(data: Any) -> Any:
        _, grads = data.row_log_lik_grad(theta_hat)
        return AnchoredLikelihood(data, grads, np.zeros(dim))

    pair = (RadialCanary(theta0, -CANARY_SLOPE, name="row at -bound"), None)
    opts = {**AUDIT_OPTIONS.get(algorithm, {}), **(options or {}), "diff_clip": ANCHOR_DIFF_CLIP}
    target = iteration_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=[pair],
                              index=0, theta0=theta0, step_sizes=tuple(step_sizes),
                              name=f"iteration:{algorithm} anchored at bound",
                              setup=KernelSetup(wrap=anchored))
    target.notes.append(f"anchor {ANCHOR_OFFSET:g} x ones, diff_clip {ANCHOR_DIFF_CLIP:g}, {n_rows} rows all at "
                        f"the + bound, dim {dim}")
    return target


def subsampled_iteration_target(algorithm: str, *, epsilon: float, delta: float, options: dict | None,
                                dim: int, step_sizes: tuple[float, ...], n_rows: int = SUBSAMPLED_ROWS,
                                sampling_rate: float = SUBSAMPLED_RATE) -> Target:
    """One iteration of a minibatch kernel with Poisson rate ``sampling_rate`` on ``n_rows`` rows that ALL sit
    at the clip bound (``RowsAtBound``: every row a linear canary with a huge positive slope along the first
    coordinate), the substituted row flipped to the opposite bound. On this base the realised minibatch size
    counts the rows drawn, so a kernel that released it would be caught (the default base, rows at 0, hides
    that defect)."""
    from ..models.reference_models import GaussianMeanModel
    from .neighbours import CANARY_SLOPE, LinearCanary, RowsAtBound

    w = np.eye(dim)[0]
    prior = GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    base = RowsAtBound(prior, LinearCanary(w, CANARY_SLOPE, name="row at +bound"))
    pair = (None, LinearCanary(w, -CANARY_SLOPE, name="row at -bound"))
    opts = {**(options or {}), "sampling_rate": float(sampling_rate)}
    target = iteration_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=[pair],
                              index=0, theta0=np.zeros(dim), step_sizes=step_sizes,
                              name=f"iteration:{algorithm} subsampled")
    target.notes.append(f"{n_rows} rows all at the clip bound, Poisson sampling rate {sampling_rate:g}")
    return target


#: the unit targets: units of UNIT_ROWS rows each, UNIT_COUNT units; the kernels audited per unit (a ratio test and
#: a gradient mechanism: every other kernel clips through the same two functions of privacy/mechanisms.py)
UNIT_ROWS = 3
UNIT_COUNT = 5
UNIT_TARGET_ALGORITHMS = ("penalty", "dp-sgld")
#: kernels audited also on an anchored trajectory (where DP-HMC's gradient clip shows in the draw)
TRAJECTORY_TARGET_ALGORITHMS = ("dp-hmc",)
#: kernels audited also anchored at the clip bound (where DP-Fast MH's clip shows in the accept bit)
AT_BOUND_TARGET_ALGORITHMS = ("dp-fast-mh", "dp-fast-mh-full")


def unit_iteration_target(algorithm: str, *, epsilon: float, delta: float, options: dict | None, dim: int,
                          step_sizes: tuple[float, ...], unit_rows: int = UNIT_ROWS,
                          n_units: int = UNIT_COUNT) -> Target:
    """One kernel iteration with a privacy unit (``stan_dp.privacy.units.UnitLikelihood``): ``n_units`` units of
    ``unit_rows`` rows each, planned for N = ``n_units``; the substituted unit is a canary UNIT, all of whose rows
    are the same canary (huge slope, opposite signs on the two sides: radial around the public state, where every
    ratio hits its clip, or linear along the first coordinate, where every gradient does), so that every row of it
    sits at the clip bound. A unit-level clip bounds the unit's total by the clip bound and the
    lower bound stays below the claim; clipping rows instead of units (the ``"unit-row-clip"`` fault) lets the
    unit move the release by ``unit_rows`` times the bound."""
    from ..models.reference_models import GaussianMeanModel
    from ..privacy.units import UnitLikelihood
    from .neighbours import CANARY_SLOPE, LinearCanary, RadialCanary

    theta0 = np.zeros(dim)
    base = GaussianMeanModel(np.zeros((unit_rows * n_units, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    labels = np.repeat(np.arange(n_units), unit_rows)

    def per_unit(data: Any) -> Any:
        if isinstance(data, SubstitutedRows):  # the canary unit: every one of its rows is the canary
            for row in range(1, unit_rows):
                data = SubstitutedRows(data, row, data.canary)
        return UnitLikelihood(data, labels, name="canary unit")

    w = np.eye(dim)[0]
    pairs = [(RadialCanary(theta0, -CANARY_SLOPE), RadialCanary(theta0, CANARY_SLOPE)),  # ratios at the bound
             (LinearCanary(w, -CANARY_SLOPE), LinearCanary(w, CANARY_SLOPE))]  # gradients at the bound
    target = iteration_target(algorithm, base, epsilon=epsilon, delta=delta, options=options, canary_pairs=pairs,
                              index=0, theta0=theta0, step_sizes=step_sizes, name=f"iteration:{algorithm} unit",
                              setup=KernelSetup(wrap=per_unit, plan_rows=n_units))
    target.notes.append(f"{n_units} units of {unit_rows} rows; the canary unit's rows all at the clip bound")
    return target


def _pair_text(pair: tuple[Any, Any]) -> str:
    def one(c):
        return "the data's own row" if c is None else getattr(c, "name", "a canary row")

    return f"D0: {one(pair[0])}; D1: {one(pair[1])}"


# ---------------------------------------------------------------------------------------------- whole runs
class _MemoPlan:
    """A privacy plan whose ``report`` is computed once per argument (the audit repeats identical runs)."""

    def __init__(self, plan: Any):
        self._plan = plan
        self._reports: dict[Any, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plan, name)

    def report(self, completed_iterations: int | None = None):
        if completed_iterations not in self._reports:
            self._reports[completed_iterations] = self._plan.report(completed_iterations=completed_iterations)
        return self._reports[completed_iterations]


def _calibration_key(value: Any) -> str:
    """A key for one argument of the calibration: its repr, except that fixed prefix phases (an anchor's, a warm
    start's: their declarations hold functions, whose repr changes from run to run) are keyed by the releases of
    one iteration at their fixed noise, their chains and iterations."""
    if isinstance(value, tuple) and value and all(hasattr(v, "declaration") for v in value):
        parts = []
        for phase in value:
            decl = phase.declaration
            if decl.noise_names and decl.parameters(1.0) != decl.parameters(2.0):  # not fixed: no stable key
                return repr(value)
            parts.append((repr(list(decl.releases(decl.parameters(1.0)))), int(phase.chains), int(phase.iterations)))
        return repr(parts)
    return repr(value)


@contextmanager
def memoized_calibration(cache: dict[Any, Any] | None = None) -> Iterator[None]:
    """Within the block, ``sample_private`` calibrates each distinct budget once (the PLD accountant dominates
    the cost of a short run); the noise levels and reports are exactly those of an unmemoized run. A ``cache``
    passed in is shared between blocks (a target's probe, selection and evaluation runs)."""
    from ..methods.kernels import kernel_plan

    original = kernel_plan._calibrate
    cache = {} if cache is None else cache

    def cached(algorithm: str, **kwargs: Any):
        key = (algorithm, tuple(sorted((k, _calibration_key(v)) for k, v in kwargs.items())))
        if key not in cache:
            cache[key] = _MemoPlan(original(algorithm, **kwargs))
        return cache[key]

    kernel_plan._calibrate = cached
    try:
        yield
    finally:
        kernel_plan._calibrate = original


#: numeric attrs a fit releases besides its groups (the anchor's and dp-laplace's statistics, the clip bounds)
RELEASED_ATTRS = ("anchor_theta", "anchor_gradient", "anchor_fisher", "diff_clip", "clip_bound", "laplace_theta_hat",
                  "laplace_gradient", "laplace_curvature", "laplace_newton_path")


def _fit_features(fit, draws: int) -> tuple[list[str], np.ndarray]:
    """Everything numeric a fit releases: the posterior, sample_stats and chain_posterior groups and the released
    statistics in the attrs (``RELEASED_ATTRS``), with the same features for every run of a target.

    A run may release fewer than the ``draws`` it planned for its one chain (a chain is cut at a draw the public
    prior all but rules out, and an anchored run with no draws left has no chain_posterior group): the chain and
    draw axes are padded with NaN to (1, ``draws``), a missing chain_posterior is all NaN in the posterior's
    shape, and the number of draws each group released is a feature of its own (the cut is part of the release).
    """
    names, values = [], []
    for group in ("posterior", "sample_stats", "chain_posterior"):
        present = group != "chain_posterior" or _has_group(fit, group)
        ds = getattr(fit, group if present else "posterior", None)
        if ds is None:
            continue
        names.append(f"{group}.draws")
        values.append(np.array([float(ds.sizes.get("draw", 0)) if present else 0.0]))
        for var in ds.data_vars:
            arr = _padded(ds[var], draws)
            names.extend(f"{group}.{var}[{k}]" for k in range(arr.size))
            values.append(arr if present else np.full(arr.size, np.nan))
    for key in RELEASED_ATTRS:
        if key in fit.attrs:
            raw = fit.attrs[key]
            arr = np.asarray(json.loads(raw) if isinstance(raw, str) else raw, dtype=float).reshape(-1)
            names.extend(f"attrs.{key}[{k}]" for k in range(arr.size))
            values.append(arr)
    return names, np.concatenate(values)


def _padded(var: Any, draws: int) -> np.ndarray:
    """``var``'s values flattened, its ``chain`` and ``draw`` axes padded with NaN to 1 and ``draws``."""
    arr = np.asarray(var.values, dtype=float)
    pad = [(0, 0)] * arr.ndim
    for dim, size in (("chain", 1), ("draw", draws)):
        if dim in var.dims:
            axis = var.dims.index(dim)
            pad[axis] = (0, max(0, size - arr.shape[axis]))
    return np.pad(arr, pad, constant_values=np.nan).reshape(-1)


def _has_group(fit, group: str) -> bool:
    groups = fit.groups() if callable(getattr(fit, "groups", None)) else list(getattr(fit, "children", {}))
    return any(str(g).strip("/") == group for g in groups)


def _run(likelihood, algorithm, epsilon, delta, opts, seed, theta0, iter_warmup, iter_sampling, step_size):
    from ..run.pipeline import sample_private

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        extra = {} if step_size is None else {"step_size": step_size}  # None: an algorithm with no step (dp-laplace)
        return sample_private(likelihood, algorithm=algorithm, epsilon=epsilon, delta=delta, chains=1,
                              iter_warmup=iter_warmup, iter_sampling=iter_sampling, seed=seed,
                              inits=theta0, show_progress=False, **extra, **opts)


def run_target(algorithm: str, base: Any, *, epsilon: float, delta: float, options: dict | None,
               canary_pairs: list[tuple[Any, Any]], index: int, theta0: np.ndarray, iter_warmup: int,
               iter_sampling: int, step_size: float | None, name: str | None = None) -> Target:
    """Whole short runs through ``sample_private`` (one chain from the public init ``theta0``): the released
    posterior and sample_stats groups. The claim is what the fit's attrs state (``epsilon_spent``,
    ``delta_spent``); a run marked not private claims nothing, and its requested budget is audited.
    ``options`` are used as given (the runner applies the audit's defaults of a registry kernel,
    ``kernel_options``, before)."""
    opts = dict(options or {})
    theta0 = np.asarray(theta0, dtype=float)
    calibrations: dict[Any, Any] = {}
    with memoized_calibration(calibrations):
        probe = _run(base, algorithm, epsilon, delta, opts, 0, theta0, iter_warmup, iter_sampling, step_size)
    names, _ = _fit_features(probe, iter_sampling)
    attrs = probe.attrs
    if int(attrs.get("private", 0)) == 1:
        claim, claim_delta, holds = float(attrs["epsilon_spent"]), float(attrs["delta_spent"]), True
    else:
        claim = float(attrs.get("epsilon_requested", attrs.get("epsilon", epsilon)))
        claim_delta = float(attrs.get("delta_requested", attrs.get("delta", delta)))
        holds = False

    def make(pair):
        sides = _neighbours(base, index, pair)

        def sample(side, n, rng, tick):
            out = np.empty((n, len(names)))
            with memoized_calibration(calibrations):
                for i in range(n):
                    seed = np.random.SeedSequence(int(rng.integers(0, 2**63)))
                    fit = _run(sides[side], algorithm, epsilon, delta, opts, seed, theta0, iter_warmup,
                               iter_sampling, step_size)
                    out[i] = _fit_features(fit, iter_sampling)[1]
                    tick(1)
            return out

        return sample

    variants = [Variant(_pair_text(pair), make(pair)) for pair in canary_pairs]
    return Target(name or f"run:{algorithm}", "run", claim, claim_delta, names, variants, guarantee_holds=holds,
                  cost=50.0, notes=[f"1 chain, {iter_warmup} warmup + {iter_sampling} sampling iterations, "
                                    f"step size {'none' if step_size is None else f'{step_size:g}'}, init "
                                    f"{np.round(theta0, 3).tolist()}"])


def nan_run_target(key: str, *, epsilon: float, delta: float, dim: int, step_size: float,
                   options: dict | None = None, n_rows: int = 10) -> Target:
    """Whole short runs of an OPS-based sampler (``NAN_RUN_TARGETS[key]``) with a NaN canary: row 0 of D0 fails
    to evaluate wherever theta_1 > 0 (``NaNCanary``), D1 is the base as it is. A mechanism that let the NaN
    through would never draw theta_1 > 0 on D0.

    The base is public and synthetic (``n_rows`` Gaussian-mean rows at 0, prior N(0, I)), whatever model the
    audit was given: the target tests the package's clipping of failed rows, and a unit prior keeps the
    internal NUTS of each run short (with the default audit model's N(0, 100 I) prior, tempered, a run took
    about a second)."""
    from ..models.reference_models import GaussianMeanModel
    from .neighbours import NaNCanary

    algorithm, opts, iterations = NAN_RUN_TARGETS[key]
    opts = {**opts, **(options or {})}
    base = GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=1.0)
    pair = (NaNCanary(np.eye(dim)[0], value=opts["loglik_bounds"][0]), None)
    return run_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=[pair],
                      index=0, theta0=np.zeros(dim), iter_warmup=int(iterations[0]),
                      iter_sampling=int(iterations[1]), step_size=step_size, name=f"run:{key}")


#: whole-run targets of the phases before the chains: an anchored run (DP-GD anchor, G~, then DP-SGLD on the
#: anchored rows) and dp-laplace (DP-GD anchor, G~ and F~ at the anchor, then draws): name -> (algorithm given
#: to sample_private, its options, (iter_warmup, iter_sampling)). Short: a few DP-GD steps and two draws.
WHOLE_RUN_TARGETS: dict[str, tuple[str, dict[str, Any], tuple[int, int]]] = {
    "dp-sgld anchor=dp-gd": ("dp-sgld", {"grad_clip": 1.0, "anchor": "dp-gd", "anchor_steps": 3,
                                         "anchor_curvature_share": 0.1}, (0, 2)),
    "dp-laplace": ("dp-laplace", {"grad_clip": 1.0, "anchor_steps": 3}, (0, 2)),
}


def whole_run_target(key: str, base: Any, *, epsilon: float, delta: float, dim: int, step_size: float,
                     options: dict | None = None, canary_pairs: list[tuple[Any, Any]] | None = None,
                     index: int = 0, theta0: np.ndarray | None = None) -> Target:
    """Whole short runs of ``WHOLE_RUN_TARGETS[key]`` on ``base``: the released draws (the noise-aware ones and the
    chains' own) and the released statistics of the anchor or of dp-laplace (theta_hat, G~, F~), against the
    budget the fit's attrs state. Default canaries: opposite linear canaries along the first coordinate, whose
    clipped gradient is +-L e_1 at every DP-GD step and at the anchor (the phases these targets add)."""
    from .neighbours import CANARY_SLOPE, LinearCanary

    algorithm, opts, iterations = WHOLE_RUN_TARGETS[key]
    opts = {**opts, **(options or {})}
    e1 = np.eye(dim)[0]
    pairs = canary_pairs or [(LinearCanary(e1, -CANARY_SLOPE), LinearCanary(e1, CANARY_SLOPE))]
    return run_target(algorithm, base, epsilon=epsilon, delta=delta, options=opts, canary_pairs=pairs, index=index,
                      theta0=np.zeros(dim) if theta0 is None else theta0, iter_warmup=int(iterations[0]),
                      iter_sampling=int(iterations[1]), step_size=step_size if registry.get(algorithm).tunes_chains else None,
                      name=f"run:{key}")
