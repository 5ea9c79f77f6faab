"""The kernels as methods: how a request for a kernel (or the hybrid) becomes a :class:`RunPlan`.

Every kernel of ``stan_dp.samplers.ALL_ALGORITHMS`` is registered here as a :class:`KernelMethod`, and the hybrid
(OPS starts, then an SG-MCMC kernel: ``stan_dp.phases.warm_start``) as a :class:`HybridMethod`. Planning a kernel run
(:func:`plan_kernel`): map the request to its kernel and split off the warm start and the anchor
(:func:`resolve_algorithm`), check the kernel's options against its option spec, choose the run lengths left
unset (``stan_dp.methods.kernels.run_lengths``), set the run options and calibrate the noise of the whole run
(``stan_dp.phases.calibration``), then lengthen an anchored accept-test run while its forecast draws grow. All from
public inputs: N, the dimension, the budget and the options; never the likelihood.

Run-level options (shared by all algorithms) and their per-algorithm defaults:

=============  ==================  ==============  ===============================================================
algorithm      step_size (start)   target_accept   why
=============  ==================  ==============  ===============================================================
penalty        0.1                 0.30            Gaussian random walk: the efficient acceptance rate lies between
                                                   0.234 (many dimensions) and 0.44 (one dimension); the penalty's
                                                   noise grows with the step length, which favours the lower end
                                                   only mildly, so 0.3 is a robust middle for the small dims typical
                                                   of private models.
dp-fast-mh     0.1                 0.30            random-walk proposal as above (also dp-fast-mh-full); it releases
                                                   only accept flags, which dual averaging uses directly.
dp-hmc         0.1                 0.65            fixed-length HMC: 0.651 is the optimal acceptance of HMC
                                                   (Beskos et al. 2013), and noisy gradients favour short steps.
dp-sgld,       kernel rule         (unused)        no accept test: the step is fixed (in metric units) by the
dp-sghmc,                                          kernel's public rule (``default_step_size``, see
dp-sgnht                                           ``stan_dp.samplers.sgmcmc``) and only the diagonal metric is
                                                   adapted from released warmup draws (metric "diag" default).
other          0.1                 0.50            neutral default for kernels registered later.
=============  ==================  ==============  ===============================================================

A kernel class may override these with a class attribute ``run_defaults = {"step_size": ..., "target_accept":
...}``. The start value of the step size matters little: dual averaging moves it by orders of magnitude within
tens of warmup iterations. 0.1 rather than Stan's 1 because the posteriors of row-wise models shrink like
1/sqrt(N) on the unconstrained scale, and a smaller start wastes fewer early (paid-for) iterations on proposals
far outside the posterior.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

from ...privacy.events import Phase
from ...run_options import RUN_LEVEL_OPTIONS, RunSettings, run_level_listing
from ...samplers import ALL_ALGORITHMS
from ...samplers.base import KernelBase
from ...samplers.options import spec_of
from ...stan.glm_program import RowBounds
from ...phases import calibration
from .. import registry
from ...phases.anchor import ANCHOR_SPEC, DEFAULT_ANCHORED, DefaultAnchor, default_anchor, plan_anchor, split_anchor
from .forecast import forecast_plan
from .kernel_run import RunPlan
from ..method import check_lengths
from ..registry import PlanInputs
from .run_lengths import fill_run_lengths
from ...phases.warm_start import DEFAULT_HYBRID_THEN, HYBRID_THEN, WARM_START_SPEC, hybrid_arguments, split_warm_start

__all__ = ["HybridMethod", "KernelMethod", "kernel_names", "RUN_DEFAULTS", "ResolvedAlgorithm", "plan_kernel", "resolve_algorithm",
           "run_defaults"]

GENERIC_RUN_DEFAULTS = {"step_size": 0.1, "target_accept": 0.5}
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    "penalty": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh-full": {"step_size": 0.1, "target_accept": 0.3},
    "dp-hmc": {"step_size": 0.1, "target_accept": 0.65},
}

#: a calibration function: (accounting name, epsilon=, delta=, chains=, iterations=, n_rows=, shape...) -> plan
Calibrate = Callable[..., Any]


def _calibrate(algorithm: str, **kwargs: Any) -> Any:
    """The calibration of a kernel plan, by the kernel's accounting name (the audit wraps it to memoise)."""
    return calibration.calibrate(algorithm, **kwargs)


@dataclasses.dataclass(frozen=True)
class ResolvedAlgorithm:
    """An algorithm request with "hybrid" mapped to its kernel and the warm-start options split off."""

    label: str  # the name the caller gave (recorded in the metadata)
    label_options: dict[str, Any]  # the hybrid's own options (then, ops_share), else empty
    algorithm: str  # the kernel's registry name
    kernel_cls: type[KernelBase]
    spec: Any  # the kernel's OptionSpec
    options: dict[str, Any]  # options left for the kernel (unknown names included: the caller reports them)
    warm: Any  # stan_dp.phases.warm_start.WarmStart or None
    anchor: dict[str, Any] | None = None  # the validated anchor options (stan_dp.phases.anchor), or None
    anchor_default: DefaultAnchor | None = None  # what the default anchor did (a kernel chosen by name), or None

    @property
    def unknown(self) -> list[str]:
        """The options that neither the kernel's spec nor the warm start takes (each caller words the error)."""
        return [k for k in self.options if k not in self.spec.names]

    def validate(self, *, require: bool) -> dict[str, Any]:
        """The kernel's options checked by its spec and merged with its defaults (``require``: required options
        must be present; the kernel's constructor checks them anyway)."""
        return self.spec.validate(self.options, require=require)


def resolve_algorithm(algorithm: str, options: dict[str, Any], *, by_name: bool = True,
                      row_bounds: RowBounds | None = None) -> ResolvedAlgorithm:
    """Map ``algorithm`` and its options to a kernel without touching any data: the first stage of
    :func:`plan_kernel`, which ``check_request`` also runs before compiling. Raises ``ValueError`` for an unknown algorithm or
    bad hybrid / warm-start options. ``by_name``: the caller named the algorithm (not ``auto``'s pick), so the
    default anchor applies (``stan_dp.phases.anchor.default_anchor``: penalty, DP-HMC and DP-Fast MH run anchored
    when a public per-row gradient bound is given, ``anchor`` is not, and the per-row curvature bound is known:
    ``curvature_clip`` given, or ``row_bounds``, the program's public per-row bounds, says it is a logistic
    regression with declared covariate bounds)."""
    method = registry.get(algorithm)
    if not isinstance(method, KernelMethod):
        raise ValueError(f"algorithm {algorithm!r} is not a kernel; kernels: {', '.join(kernel_names())}")
    label = algorithm
    algorithm, options, label_options = method.split(options)
    kernel_cls = method.kernel_of(algorithm)
    spec = spec_of(kernel_cls, algorithm)
    kernel_options, warm = split_warm_start(options, spec, algorithm)
    default = None
    if by_name and method.default_anchor:
        kernel_options, default = default_anchor(kernel_options, spec, algorithm, warm_start=warm is not None,
                                                  row_bounds=row_bounds)
    kernel_options, anchor = split_anchor(kernel_options, spec, algorithm)
    if anchor is not None and warm is not None:
        raise ValueError(f"anchor='dp-gd' and warm_start={warm.kind!r} both set the chains' starts (the anchored "
                         f"chains start at the anchor); give one of them (algorithm {algorithm!r})")
    return ResolvedAlgorithm(label, label_options, algorithm, kernel_cls, spec, kernel_options, warm, anchor, default)


def run_defaults(algorithm: str, kernel_cls: type[KernelBase] | None = None) -> dict[str, Any]:
    """Start step size and target acceptance used when the caller gives none."""
    defaults = dict(GENERIC_RUN_DEFAULTS)
    defaults.update(RUN_DEFAULTS.get(algorithm, {}))
    if kernel_cls is not None:
        defaults.update(kernel_cls.run_defaults or {})
    return defaults



def plan_kernel(inputs: PlanInputs, *, calibrate: Calibrate | None = None) -> RunPlan:
    """The :class:`RunPlan` of a kernel (or hybrid) request from public inputs alone (``inputs``: see
    ``stan_dp.methods.registry.PlanInputs``); ``calibrate``: the calibration function (default: the package's, by the
    kernel's accounting name). Raises ``ValueError`` for an unknown option, a bad value, a missing bound or a
    budget too small for the run."""
    calibrate = calibrate or _calibrate
    facts, quiet = inputs.facts, inputs.quiet
    request = resolve_algorithm(inputs.algorithm, dict(inputs.options),
                                by_name=inputs.by_name, row_bounds=facts.row_bounds)
    if request.anchor_default is not None and not quiet:  # the default's decision, anchored or not, and why
        print(f"anchor: {request.anchor_default.short}", file=sys.stderr)
    anchor = (plan_anchor(request.anchor, epsilon=inputs.epsilon, delta=inputs.delta, n_rows=int(inputs.n_rows),
                          rows_per_unit=facts.rows_per_unit, dim=int(inputs.dim))
              if request.anchor is not None else None)
    if request.unknown:
        raise ValueError(
            f"{request.spec.unknown_error(request.unknown)}. Run-level options for every algorithm: "
            f"{run_level_listing()}, inits, seed, save_warmup, debug, show_progress; warm start: warm_start, "
            "warm_start_share and the warm_start_* options (stan_dp.phases.warm_start)."
        )
    full_options = request.validate(require=True)  # a missing bound is refused here, before any row is read
    check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
    lengths = _chosen_lengths(inputs, request, anchor)
    iter_warmup = lengths.iter_warmup if lengths is not None else int(inputs.iter_warmup)
    iter_sampling = lengths.iter_sampling if lengths is not None else int(inputs.iter_sampling)
    kernel_cls, algorithm, warm = request.kernel_cls, request.algorithm, request.warm
    shape = kernel_cls.accounting_shape(full_options)
    # OPS warms up inside its mechanism: those iterations release nothing and are not accounted
    internal_warmup = bool(kernel_cls.internal_warmup)
    run_warmup = 0 if internal_warmup else int(iter_warmup)
    chains, n_rows, epsilon, delta = int(inputs.chains), int(inputs.n_rows), inputs.epsilon, inputs.delta
    prefix: tuple[Phase, ...] = ()
    if warm is not None:
        prefix = (warm.prefix_phase(epsilon=epsilon, delta=delta, chains=chains, n_rows=n_rows),)
    if anchor is not None:
        prefix = tuple(anchor.phases())
    privacy = calibrate(kernel_cls.accounting_name or algorithm, epsilon=epsilon, delta=delta, chains=chains,
                        iterations=run_warmup + int(iter_sampling), n_rows=n_rows, **shape,
                        **({"prefix_phases": prefix} if prefix else {}))
    conditional = kernel_cls.conditional_guarantee or (
        warm.conditional_guarantee if warm is not None else None)
    described = {**request.label_options, **full_options, **(warm.describe() if warm is not None else {}),
                 **(anchor.describe() if anchor is not None else {})}
    plan = RunPlan(
        label=request.label, algorithm=algorithm, kernel_cls=kernel_cls, options=request.options,
        described_options=described, warm=warm, anchor=anchor, n_rows=n_rows, dim=int(inputs.dim), epsilon=epsilon,
        delta=delta, iter_warmup=int(iter_warmup), internal_warmup=internal_warmup,
        settings=_run_settings(run_defaults(algorithm, kernel_cls), inputs.run_level, anchored=anchor is not None,
                               chains=chains, iter_warmup=run_warmup, iter_sampling=int(iter_sampling)),
        privacy=privacy, conditional_guarantee=conditional, auto=inputs.choice, lengths=lengths,
        anchor_default=request.anchor_default,
    )
    plan = _lengthened(plan, shape, prefix, calibrate)
    forecast = forecast_plan(plan, linear=facts.linear is not None)
    if forecast is not None and forecast.few and not quiet:  # said before any row is read
        print(f"forecast: {forecast.sentence()}", file=sys.stderr)
    return dataclasses.replace(plan, forecast=forecast)


def _chosen_lengths(inputs: PlanInputs, request: ResolvedAlgorithm, anchor: Any) -> Any:
    """The run lengths the package chooses for the lengths left unset (``stan_dp.methods.kernels.run_lengths``, public
    quantities only; a given length is kept), or None when both were given."""
    if inputs.iter_warmup is not None and inputs.iter_sampling is not None:
        return None
    epsilon, warm = inputs.epsilon, request.warm
    kernel_epsilon = epsilon * (1.0 - warm.share) if warm is not None else epsilon  # the kernel's share
    if anchor is not None:  # the kernel keeps 1 - shares of the rho budget; epsilon scales about as sqrt(rho)
        kernel_epsilon = epsilon * (1.0 - anchor.shares) ** 0.5
    clip_ratio = 1.0
    if anchor is not None:
        clip_ratio = max((anchor.grad_clip / anchor.public_diff_clip(inputs.n_rows, inputs.dim)) ** 2, 1.0)
    return fill_run_lengths(request.algorithm, inputs.iter_warmup, inputs.iter_sampling, n_rows=inputs.n_rows,
                            dim=inputs.dim, epsilon=kernel_epsilon, delta=inputs.delta, chains=int(inputs.chains),
                            options=request.options, quiet=inputs.quiet, clip_ratio=clip_ratio)


#: the factors by which an anchored accept-test run's chosen lengths may grow, and the forecast draws that suffice
#: (1,000 at the public scale guess, which is optimistic: on AER Fertility its forecast was 2-3 times the one at
#: the real posterior's sds)
LENGTH_FACTORS = (2, 4)
ENOUGH_DRAWS = 1000
#: ... and the least gain in forecast draws a doubling must bring to be taken
LENGTH_GAIN = 1.5


def _lengthened(plan: RunPlan, shape: dict[str, Any], prefix: tuple[Phase, ...], calibrate: Calibrate
                ) -> RunPlan:
    """An anchored penalty / DP-HMC / DP-Fast MH plan whose run lengths the package chose, made up to four times
    longer while the forecast effective draws (``stan_dp.methods.kernels.forecast``, public inputs) are below ``ENOUGH_DRAWS``
    and each doubling brings at least ``LENGTH_GAIN`` times more; otherwise the plan as it is. Public: the forecast
    reads the plan only.

    Why. At a fixed budget these kernels' draws stop growing with the length only once the accept test's noise
    limits the step; anchored on many rows the noise is small and a random walk's own efficiency limits them first,
    and there a longer run still pays (forecast on 100,000 rows of AER Fertility at epsilon 10, penalty MH: 205
    draws at 1,000 + 1,000 iterations, 373 at 2,000 + 2,000, 633 at 4,000 + 4,000; DP-HMC about 220 at every
    length, so it keeps its length). The noise is calibrated again for each length (the same budget)."""
    if plan.lengths is None or plan.anchor is None or plan.algorithm not in DEFAULT_ANCHORED:
        return plan
    best, drawn = plan, forecast_plan(plan)
    for factor in LENGTH_FACTORS:
        if drawn is None or drawn.ess >= ENOUGH_DRAWS:
            break
        warmup, sampling = plan.iter_warmup * factor, plan.iter_sampling * factor
        privacy = calibrate(plan.kernel_cls.accounting_name or plan.algorithm, epsilon=plan.epsilon,
                             delta=plan.delta, chains=plan.chains, iterations=warmup + sampling,
                             n_rows=plan.n_rows, **shape, prefix_phases=prefix)
        lengths = dataclasses.replace(plan.lengths, iter_warmup=warmup, iter_sampling=sampling, reason=(
            f"{plan.lengths.reason}; then {factor} x longer, {warmup} + {sampling}, because the forecast effective "
            f"draws grow with the length here (anchored: the random walk, not the noise, limits them)"))
        candidate = dataclasses.replace(plan, iter_warmup=warmup, privacy=privacy, lengths=lengths,
                                        settings=plan.settings.replace(iter_warmup=warmup, iter_sampling=sampling))
        more = forecast_plan(candidate)
        if more is None or more.ess < LENGTH_GAIN * drawn.ess:  # each factor doubles the one before
            break
        best, drawn = candidate, more
    return best


def _run_settings(defaults: dict[str, Any], run_level: dict[str, Any], *, anchored: bool, chains: int,
                  iter_warmup: int, iter_sampling: int) -> RunSettings:
    """The chain loop's settings: the caller's run-level options over the algorithm's ``run_defaults``; with no
    metric given, anchored chains (which start near the posterior) adapt a diagonal metric from the anchor's
    scale."""
    step_size, target_accept = run_level.get("step_size"), run_level.get("target_accept")
    metric = run_level.get("metric")
    if metric is None:
        metric = "diag" if anchored else defaults.get("metric", "unit")
    return RunSettings(chains=chains, iter_warmup=iter_warmup, iter_sampling=iter_sampling,
                       step_size=defaults["step_size"] if step_size is None else step_size,
                       step_size_given=step_size is not None,
                       target_accept=defaults["target_accept"] if target_accept is None else target_accept,
                       metric=metric, metric_given=run_level.get("metric") is not None,
                       adapt_engaged=run_level.get("adapt_engaged", True),
                       pool_metric=run_level.get("pool_metric", True))


@dataclasses.dataclass(frozen=True)
class KernelMethod:
    """A kernel as a registered method: its name, its class and (for a toy kernel in a test) its calibration.

    The run-level chain options apply to it; it reads no program structure beyond the row likelihood (its bounds
    are options). ``default_anchor``: a kernel named by the caller runs anchored by default where the anchor
    applies (``stan_dp.phases.anchor.default_anchor``)."""

    name: str
    kernel_cls: type[KernelBase]
    calibrate: Calibrate | None = None
    reads: frozenset[str] = frozenset()
    tunes_chains: bool = True
    unit_needs_cap: bool = False
    warms_up: bool = True
    default_anchor: bool = True

    @property
    def option_names(self) -> frozenset[str]:
        """The kernel's options, the anchor's (a kernel with ``diff_clip`` runs anchored), the warm start's and the
        run-level ones."""
        own = set(spec_of(self.kernel_cls, self.name).names)
        if "diff_clip" in own:
            own.update(ANCHOR_SPEC.names)
        return frozenset({*own, *WARM_START_SPEC.names, *RUN_LEVEL_OPTIONS})

    def split(self, options: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(the kernel's name, the options for it, the method's own options recorded in the metadata)."""
        return self.name, options, {}

    def kernel_of(self, name: str) -> type[KernelBase]:
        """The kernel class that runs the request (``name``: what :meth:`split` returned)."""
        return self.kernel_cls

    def check(self, options: dict[str, Any], *, row_bounds: Any = None) -> None:
        """Refuse an unknown option or a bad value from the options alone (before any compile or row)."""
        request = resolve_algorithm(self.name, dict(options))
        if request.unknown:
            raise request.spec.unknown_error(request.unknown)
        request.validate(require=True)

    def plan(self, inputs: PlanInputs) -> RunPlan:
        """:func:`plan_kernel` of the request."""
        return plan_kernel(inputs, calibrate=self.calibrate)


@dataclasses.dataclass(frozen=True)
class HybridMethod(KernelMethod):
    """``algorithm="hybrid"``: OPS starts (``ops_share`` of the budget), then an SG-MCMC kernel (``then``);
    ``stan_dp.phases.warm_start.hybrid_arguments``. Never anchored by default: its starts are the OPS draws."""

    default_anchor: bool = False

    @property
    def option_names(self) -> frozenset[str]:
        """The hybrid's own options (``then``, ``ops_share``), the OPS starts' and those of every kernel it may
        run after them."""
        names = {"then", "ops_share", *WARM_START_SPEC.names, *RUN_LEVEL_OPTIONS}
        for then in HYBRID_THEN:
            names.update(spec_of(ALL_ALGORITHMS[then], then).names)
        return frozenset(names)

    def split(self, options: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
        """(the SG-MCMC kernel, its options plus the OPS warm start, the hybrid's own options)."""
        return hybrid_arguments(options)

    def kernel_of(self, name: str) -> type[KernelBase]:
        """The SG-MCMC kernel ``then`` names."""
        return ALL_ALGORITHMS[name]


def kernel_names() -> list[str]:
    """The registered methods that run private chains (the kernels and the hybrid)."""
    return [name for name in registry.names() if isinstance(registry.get(name), KernelMethod)]


for _name, _kernel in ALL_ALGORITHMS.items():
    registry.register(KernelMethod(_name, _kernel))
registry.register(HybridMethod("hybrid", ALL_ALGORITHMS[DEFAULT_HYBRID_THEN]))
