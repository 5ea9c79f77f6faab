"""The plan of a private run: everything decided from public inputs, before any row is read.

``plan_run(n_rows, dim, algorithm=..., epsilon=..., delta=..., ...)`` resolves ``algorithm="auto"``
(``stan_dp.run.auto``), "hybrid" and the warm start (``stan_dp.run.warm_start``), checks the algorithm's options
against its option spec, chooses the run lengths left unset (``stan_dp.run.run_lengths``), sets the run options
and calibrates the noise of the whole run (``stan_dp.run.calibration``). Its inputs are the row count N and the
dimension (both public), the budget and the options; it never sees the likelihood. The frozen :class:`RunPlan` it
returns prints as "what will this run do, and at what noise?"; ``stan_dp.run.pipeline`` executes and publishes it.
Its first stage, :func:`resolve_algorithm`, needs neither N nor the dimension: the CLI checks a request with it
before the Stan program is compiled.

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

import numpy as np

from ..privacy.checks import check_delta_for_rows
from ..privacy.events import Phase
from ..run_options import RUN_LEVEL_OPTIONS, RunSettings, run_level_listing
from ..samplers import ALL_ALGORITHMS
from ..samplers.base import KernelBase
from ..samplers.options import spec_of
from ..stan.glm_program import RowBounds
from ..user_warnings import warn
from . import auto, calibration
from .anchor import DefaultAnchor, default_anchor, plan_anchor, split_anchor
from .auto import AutoChoice, short_line
from .kernel_run import RunPlan
from .laplace import LAPLACE, LaplacePlan, plan_laplace, validate_laplace_options
from .run_lengths import fill_run_lengths
from .ssp import SSP, SSP_OPTIONS, SSPPlan, check_ssp_options, auto_ssp_reason, plan_ssp, resolve_bounds
from .warm_start import hybrid_arguments, split_warm_start

__all__ = ["RUN_DEFAULTS", "RUN_OPTIONS", "ResolvedAlgorithm", "RunPlan", "algorithm_names", "check_request",
           "plan_run", "resolve_algorithm", "run_defaults"]

RUN_OPTIONS = RUN_LEVEL_OPTIONS  # the one list lives in stan_dp.run_options (this name kept for imports)
GENERIC_RUN_DEFAULTS = {"step_size": 0.1, "target_accept": 0.5}
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    "penalty": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh-full": {"step_size": 0.1, "target_accept": 0.3},
    "dp-hmc": {"step_size": 0.1, "target_accept": 0.65},
}


def _registry() -> dict[str, type]:
    """The kernels ``plan_run`` takes by name (a hook: tests register toy kernels here)."""
    return ALL_ALGORITHMS


def _calibrate(algorithm: str, **kwargs: Any) -> Any:
    """The calibration of a plan, by the kernel's accounting name (a hook: tests and the audit wrap it)."""
    return calibration.calibrate(algorithm, **kwargs)


def algorithm_names() -> list[str]:
    """Every name ``sample_private`` takes as ``algorithm`` except "auto": the kernels and "hybrid"."""
    return sorted([*_registry(), "hybrid", LAPLACE, SSP])


@dataclasses.dataclass(frozen=True)
class ResolvedAlgorithm:
    """An algorithm request with "hybrid" mapped to its kernel and the warm-start options split off."""

    label: str  # the name the caller gave (recorded in the metadata)
    label_options: dict[str, Any]  # the hybrid's own options (then, ops_share), else empty
    algorithm: str  # the kernel's registry name
    kernel_cls: type[KernelBase]
    spec: Any  # the kernel's OptionSpec
    options: dict[str, Any]  # options left for the kernel (unknown names included: the caller reports them)
    warm: Any  # stan_dp.run.warm_start.WarmStart or None
    anchor: dict[str, Any] | None = None  # the validated anchor options (stan_dp.run.anchor), or None
    anchor_default: DefaultAnchor | None = None  # what the default anchor did (a kernel chosen by name), or None

    @property
    def unknown(self) -> list[str]:
        """The options that neither the kernel's spec nor the warm start takes (each caller words the error)."""
        return [k for k in self.options if k not in self.spec.names]

    def validate(self, *, require: bool) -> dict[str, Any]:
        """The kernel's options checked by its spec and merged with its defaults (``require``: required options
        must be present; the kernel's constructor checks them anyway)."""
        return self.spec.validate(self.options, require=require)


def resolve_algorithm(algorithm: str, options: dict[str, Any], *, by_name: bool = True) -> ResolvedAlgorithm:
    """Map ``algorithm`` and its options to a kernel without touching any data: the first stage of
    :func:`plan_run`, which the CLI also runs before compiling. Raises ``ValueError`` for an unknown algorithm or
    bad hybrid / warm-start options. ``by_name``: the caller named the algorithm (not ``auto``'s pick), so the
    default anchor applies (``stan_dp.run.anchor.default_anchor``: penalty, DP-HMC and DP-Fast MH run anchored
    when a public per-row gradient bound is given and ``anchor`` is not)."""
    label_options: dict[str, Any]
    label, label_options = algorithm, {}
    if algorithm == "hybrid":  # OPS starts (ops_share of the budget), then an SG-MCMC kernel: run/warm_start.py
        algorithm, options, label_options = hybrid_arguments(options)
    registry = _registry()
    if algorithm not in registry:
        raise ValueError(f"Unknown algorithm {algorithm!r}; valid algorithms: {', '.join(algorithm_names())}.")
    kernel_cls = registry[algorithm]
    spec = spec_of(kernel_cls, algorithm)
    kernel_options, warm = split_warm_start(options, spec, algorithm)
    default = None
    if by_name and label != "hybrid":
        kernel_options, default = default_anchor(kernel_options, spec, algorithm, warm_start=warm is not None)
    kernel_options, anchor = split_anchor(kernel_options, spec, algorithm)
    if anchor is not None and warm is not None:
        raise ValueError(f"anchor='dp-gd' and warm_start={warm.kind!r} both set the chains' starts (the anchored "
                         f"chains start at the anchor); give one of them (algorithm {algorithm!r})")
    return ResolvedAlgorithm(label, label_options, algorithm, kernel_cls, spec, kernel_options, warm, anchor, default)


def check_request(algorithm: str, options: dict[str, Any], *, ssp_ready: bool = False,
                  row_bounds: RowBounds | None = None) -> None:
    """Refuse a request that can never run, from the algorithm's name and options alone (no N, no dimension, no
    row, no compiled program): an unknown algorithm or option, a bad option value, or a required bound that is
    missing (the error names the option and how to choose it). ``algorithm="auto"`` checks what ``auto`` needs
    (``stan_dp.run.auto.check_auto_options``). The CLI runs it before compiling, ``DPStanModel.sample`` before
    reading the data; ``options`` are the algorithm's (and warm-start / anchor) options, without the run-level
    ones. ``ssp_ready``: the program is a normal linear regression with public bounds
    (``stan_dp.stan.linear_program.has_public_bounds``), so ``auto`` takes dp-ssp and needs no gradient bound.
    ``row_bounds``: what the program text says about its per-row bounds (``stan_dp.stan.glm_program.row_bounds``):
    ``auto`` needs no gradient bound when they are derived exactly, and says what to give otherwise."""
    if algorithm == "auto":
        if not ssp_ready:
            auto.check_auto_options(options, row_bounds)
        return
    if algorithm == SSP:  # its bounds are checked against the program (stan_dp.run.ssp)
        check_ssp_options(options)
        return
    if algorithm == LAPLACE:
        validate_laplace_options(options)
        return
    request = resolve_algorithm(algorithm, options)
    if request.unknown:
        raise request.spec.unknown_error(request.unknown)
    request.validate(require=True)


def run_defaults(algorithm: str, kernel_cls: type[KernelBase] | None = None) -> dict[str, Any]:
    """Start step size and target acceptance used when the caller gives none."""
    defaults = dict(GENERIC_RUN_DEFAULTS)
    defaults.update(RUN_DEFAULTS.get(algorithm, {}))
    if kernel_cls is not None:
        defaults.update(kernel_cls.run_defaults or {})
    return defaults


def _auto_ssp(n_rows: int, dim: int, linear: Any, *, epsilon: float, delta: float, chains: int,
              iter_warmup: int | None, iter_sampling: int | None, options: dict[str, Any],
              quiet: bool) -> "SSPPlan | str":
    """auto on a normal linear program: the dp-ssp plan when the bounds are public (declared or given), else the
    reason in words why not (auto then falls back to the kernels)."""
    try:
        resolve_bounds(linear, options)
    except ValueError as exc:
        return str(exc)
    ssp_options = {k: v for k, v in options.items() if k in SSP_OPTIONS}
    dropped = sorted(k for k in options if k not in SSP_OPTIONS and options[k] is not None)
    _check_lengths(chains, iter_warmup, iter_sampling)
    plan = plan_ssp(n_rows, dim, linear=linear, epsilon=epsilon, delta=delta, chains=chains,
                    iter_warmup=iter_warmup, iter_sampling=iter_sampling, **ssp_options)
    reason = auto_ssp_reason(plan.floor, plan.bounds_source) + (f"; unused: {', '.join(dropped)}" if dropped else "")
    choice = AutoChoice(SSP, ssp_options, reason, dropped,
                        short=short_line("dp-ssp, one release of the moments of the rows", f"bounds: {plan.bounds_source}"))
    if not quiet:
        print(choice.short, file=sys.stderr)
    return dataclasses.replace(plan, auto=choice)


def _check_lengths(chains: Any, iter_warmup: Any, iter_sampling: Any) -> None:
    for name, value, minimum in (("chains", chains, 1), ("iter_warmup", iter_warmup, 0),
                                 ("iter_sampling", iter_sampling, 1)):
        if value is None and name != "chains":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


@dataclasses.dataclass(frozen=True)
class PublicFacts:
    """What a likelihood declares about its rows from its program text and the caller's public settings, never
    from the rows; ``plan_run`` reads them (no noise depends on them except through the choices they allow).

    linear: the normal linear regression the program is (a ``LinearSpec``, the input of dp-ssp), or None;
    linear_refusal: why the program is not one (said in auto's reason), or None;
    row_bounds: the per-row bounds the program text gives (``stan_dp.stan.glm_program``), which ``auto`` uses
        when no clip bound is given, or None;
    rows_per_unit: with a privacy unit, its public cap k on the rows of one unit (``max_rows_per_unit``;
        ``n_rows`` is then the number of units), which sets the default curvature bound and posterior-scale guess
        of the anchor (``stan_dp.run.public_scale``); None for a row-level run or a unit without a cap.
    """

    linear: Any = None
    linear_refusal: str | None = None
    row_bounds: RowBounds | None = None
    rows_per_unit: int | None = None


def plan_run(n_rows: int, dim: int, *, algorithm: str, epsilon: float, delta: float, chains: int = 4,
             iter_warmup: int | None = None, iter_sampling: int | None = None, quiet: bool = False,
             facts: PublicFacts | None = None, **options: Any) -> RunPlan | LaplacePlan | SSPPlan:
    """The :class:`RunPlan` of a private run (a :class:`stan_dp.run.laplace.LaplacePlan` for "dp-laplace", a
    :class:`stan_dp.run.ssp.SSPPlan` for "dp-ssp"), from public inputs alone: the row count ``n_rows`` (N) and the
    unconstrained dimension ``dim`` of the model, and the arguments of ``sample_private`` that shape the run (same
    names, same meaning; see its docstring): the run-level options (``RUN_LEVEL_OPTIONS``: step_size,
    target_accept, metric, adapt_engaged, pool_metric) and the algorithm's options are keywords in ``options``.
    ``quiet``: False prints the ``auto`` choice and the chosen run lengths on stderr. ``facts``: what the
    likelihood declares about its rows (:class:`PublicFacts`; None: nothing). Raises ``ValueError`` for an unknown
    algorithm or option, a bad value, or a budget too small for the requested run, or a delta of at least 1/N; a
    delta above 1/(10 N) is warned about (``stan_dp.privacy.checks.check_delta_for_rows``).
    """
    moved = sorted(set(options) & {f.name for f in dataclasses.fields(PublicFacts)})
    if moved:  # keywords of plan_run before PublicFacts: say where they go instead of failing further down
        raise TypeError(f"plan_run takes {', '.join(moved)} in facts=PublicFacts(...), not as keywords")
    facts = facts or PublicFacts()
    run_level = {k: options.pop(k) for k in RUN_LEVEL_OPTIONS if k in options}
    linear, linear_refusal = facts.linear, facts.linear_refusal
    delta_warning = check_delta_for_rows(delta, n_rows)  # N is known here, before any row meets a mechanism
    if delta_warning:
        warn(delta_warning, UserWarning)
    choice = None
    if algorithm == "auto" and linear is not None:  # a linear program with public bounds: dp-ssp (stan_dp.run.ssp)
        ssp = _auto_ssp(n_rows, dim, linear, epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                        iter_sampling=iter_sampling, options=options, quiet=quiet)
        if isinstance(ssp, SSPPlan):
            return ssp
        options = {k: v for k, v in options.items() if k not in SSP_OPTIONS}
        linear_refusal = ssp
    if algorithm == "auto":  # choose from public quantities only (stan_dp.run.auto)
        choice = auto.resolve_auto(n_rows=n_rows, dim=dim, epsilon=epsilon, delta=delta, chains=chains,
                                   options=options, quiet=quiet, rows_per_unit=facts.rows_per_unit,
                                   row_bounds=facts.row_bounds)
        algorithm, options = choice.algorithm, dict(choice.options)
        if linear_refusal and linear is not None:
            choice = dataclasses.replace(choice, reason=f"{choice.reason}; dp-ssp not used: {linear_refusal}")
    planner = CHAIN_FREE_PLANNERS.get(algorithm)
    if planner is not None:  # a method whose chains (if any) run on released statistics only
        _check_lengths(chains, iter_warmup, iter_sampling)
        return planner(n_rows, dim, epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                       iter_sampling=iter_sampling, run_options=_chain_free_options(run_level),
                       facts=dataclasses.replace(facts, linear_refusal=linear_refusal), **options)
    request = resolve_algorithm(algorithm, options, by_name=choice is None)
    kernel_cls, algorithm, options, warm = request.kernel_cls, request.algorithm, request.options, request.warm
    if request.anchor_default is not None and request.anchor_default.by_default and not quiet:
        print(f"anchor: {request.anchor_default.reason}", file=sys.stderr)
    anchor = (plan_anchor(request.anchor, epsilon=epsilon, delta=delta, n_rows=int(n_rows),
                          rows_per_unit=facts.rows_per_unit, dim=int(dim))
              if request.anchor is not None else None)
    if request.unknown:
        raise ValueError(
            f"{request.spec.unknown_error(request.unknown)}. Run-level options for every algorithm: "
            f"{run_level_listing()}, inits, seed, save_warmup, debug, show_progress; warm start: warm_start, "
            "warm_start_share and the warm_start_* options (stan_dp.run.warm_start)."
        )
    full_options = request.validate(require=True)  # a missing bound is refused here, before any row is read
    _check_lengths(chains, iter_warmup, iter_sampling)

    lengths = None
    if iter_warmup is None or iter_sampling is None:  # from public quantities only (stan_dp.run.run_lengths)
        kernel_epsilon = epsilon * (1.0 - warm.share) if warm is not None else epsilon  # the kernel's share
        if anchor is not None:  # the kernel keeps 1 - shares of the rho budget; epsilon scales about as sqrt(rho)
            kernel_epsilon = epsilon * (1.0 - anchor.shares) ** 0.5
        clip_ratio = 1.0
        if anchor is not None:
            clip_ratio = max((anchor.grad_clip / anchor.public_diff_clip(n_rows, dim)) ** 2, 1.0)
        lengths = fill_run_lengths(algorithm, iter_warmup, iter_sampling, n_rows=n_rows, dim=dim,
                                   epsilon=kernel_epsilon, delta=delta, chains=int(chains), options=options,
                                   quiet=quiet, clip_ratio=clip_ratio)
        iter_warmup, iter_sampling = lengths.iter_warmup, lengths.iter_sampling

    accounting_name = kernel_cls.accounting_name or algorithm
    shape = kernel_cls.accounting_shape(full_options)
    # OPS warms up inside its mechanism: those iterations release nothing and are not accounted
    internal_warmup = bool(kernel_cls.internal_warmup)
    run_warmup = 0 if internal_warmup else int(iter_warmup)
    prefix: tuple[Phase, ...] = ()
    if warm is not None:
        prefix = (warm.prefix_phase(epsilon=epsilon, delta=delta, chains=int(chains), n_rows=int(n_rows)),)
    if anchor is not None:
        prefix = tuple(anchor.phases())
    privacy = _calibrate(
        accounting_name,
        epsilon=epsilon,
        delta=delta,
        chains=int(chains),
        iterations=run_warmup + int(iter_sampling),
        n_rows=int(n_rows),
        **shape,
        **({"prefix_phases": prefix} if prefix else {}),
    )
    conditional = kernel_cls.conditional_guarantee or (
        warm.conditional_guarantee if warm is not None else None)
    described = {**request.label_options, **full_options, **(warm.describe() if warm is not None else {}),
                 **(anchor.describe() if anchor is not None else {})}
    return RunPlan(
        label=request.label, algorithm=algorithm, kernel_cls=kernel_cls, options=options,
        described_options=described, warm=warm, anchor=anchor, n_rows=int(n_rows), dim=int(dim), epsilon=epsilon, delta=delta,
        iter_warmup=int(iter_warmup), internal_warmup=internal_warmup,
        settings=_run_settings(run_defaults(algorithm, kernel_cls), run_level, anchored=anchor is not None,
                               chains=int(chains), iter_warmup=run_warmup, iter_sampling=int(iter_sampling)),
        privacy=privacy, conditional_guarantee=conditional, auto=choice, lengths=lengths,
        anchor_default=request.anchor_default,
    )


def _plan_ssp(n_rows: int, dim: int, *, facts: PublicFacts, **arguments: Any) -> SSPPlan:
    """dp-ssp's planner (``stan_dp.run.ssp``: one release of the moment matrix, then noise-aware chains)."""
    return plan_ssp(n_rows, dim, linear=facts.linear, linear_refusal=facts.linear_refusal, **arguments)


def _plan_laplace(n_rows: int, dim: int, *, facts: PublicFacts, **arguments: Any) -> LaplacePlan:
    """dp-laplace's planner (``stan_dp.run.laplace``: a few releases, then closed-form draws)."""
    return plan_laplace(n_rows, dim, **arguments)


#: the methods planned without a kernel: name -> planner (N, dim, budget, run lengths, the chain-free run
#: options, the likelihood's public facts, the method's options); every other name is a kernel (``RunPlan``)
CHAIN_FREE_PLANNERS: dict[str, Callable[..., LaplacePlan | SSPPlan]] = {SSP: _plan_ssp, LAPLACE: _plan_laplace}


def _chain_free_options(run_level: dict[str, Any]) -> dict[str, Any]:
    """The run-level options a plan without a private chain (dp-ssp, dp-laplace) checks and records."""
    return {k: run_level.get(k) for k in ("step_size", "target_accept", "metric")}


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
                       metric=metric, adapt_engaged=run_level.get("adapt_engaged", True),
                       pool_metric=run_level.get("pool_metric", True))
