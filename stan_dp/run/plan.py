"""The plan of a private run: everything decided from public inputs, before any row is read.

``plan_run(n_rows, dim, algorithm=..., epsilon=..., delta=..., ...)`` looks the method up in the registry
(``stan_dp.methods.registry``) and asks it for its plan; ``algorithm="auto"`` first asks the chooser
(``stan_dp.run.auto_release`` for a release-once method, else ``stan_dp.run.auto`` for a kernel). Its inputs are
the row count N and the dimension (both public), the budget and the options; it never sees the likelihood. The plan
it returns prints as "what will this run do, and at what noise?"; ``stan_dp.run.pipeline`` executes and publishes
it. :func:`check_request` needs neither N nor the dimension: the CLI checks a request with it before the Stan
program is compiled.

How a kernel is planned, and the run-level options' per-kernel defaults: ``stan_dp.methods.kernels.kernel_plan``.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..privacy.checks import check_delta_for_rows
from ..run_options import RUN_LEVEL_OPTIONS
from ..stan.glm_program import RowBounds
from ..user_warnings import warn
from ..methods import registry
from ..methods.dp_glm import glm_release
from ..methods.dp_laplace import laplace  # noqa: F401  (the release methods register themselves)
from ..methods.dp_ssp import ssp
from . import auto
from .auto_release import release_once_choice
from ..methods.kernels.kernel_plan import RUN_DEFAULTS, ResolvedAlgorithm, kernel_names, resolve_algorithm, run_defaults
from ..methods.kernels.kernel_run import RunPlan
from ..methods.method import check_lengths
from ..methods.registry import PlanInputs

__all__ = ["RUN_DEFAULTS", "RUN_OPTIONS", "PublicFacts", "ResolvedAlgorithm", "RunPlan", "algorithm_names",
           "check_request", "kernel_names", "plan_run", "resolve_algorithm", "run_defaults"]

RUN_OPTIONS = RUN_LEVEL_OPTIONS  # the one list lives in stan_dp.run_options (this name kept for imports)


def algorithm_names() -> list[str]:
    """Every name ``sample_private`` takes as ``algorithm`` except "auto": the registered methods."""
    return registry.names()


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
    if registry.is_auto(algorithm):
        if not ssp_ready:
            auto.check_auto_options(options, row_bounds)
        return
    registry.get(algorithm).check(options, row_bounds=row_bounds)


@dataclasses.dataclass(frozen=True)
class PublicFacts:
    """What a likelihood declares about its rows from its program text and the caller's public settings, never
    from the rows; ``plan_run`` reads them (no noise depends on them except through the choices they allow).

    linear: the normal linear regression the program is (a ``LinearSpec``, the input of dp-ssp), or None;
    linear_refusal: why the program is not one (said in auto's reason), or None;
    glm: the logistic or Poisson regression the program is (a ``GLMSpec``, the input of dp-glm), or None;
    glm_refusal: why the program is not one, or None;
    row_bounds: the per-row bounds the program text gives (``stan_dp.stan.glm_program``), which ``auto`` uses
        when no clip bound is given, or None;
    rows_per_unit: with a privacy unit, its public cap k on the rows of one unit (``max_rows_per_unit``;
        ``n_rows`` is then the number of units), which sets the default curvature bound and posterior-scale guess
        of the anchor (``stan_dp.phases.public_scale``); None for a row-level run or a unit without a cap.
    """

    linear: Any = None
    linear_refusal: str | None = None
    glm: Any = None
    glm_refusal: str | None = None
    row_bounds: RowBounds | None = None
    rows_per_unit: int | None = None



def plan_run(n_rows: int, dim: int, *, algorithm: str, epsilon: float, delta: float, chains: int = 4,
             iter_warmup: int | None = None, iter_sampling: int | None = None, quiet: bool = False,
             facts: PublicFacts | None = None, **options: Any) -> Any:
    """The plan of a private run (a ``stan_dp.methods.method.MethodPlan``: a :class:`RunPlan` for a kernel, a
    ``LaplacePlan``, ``SSPPlan`` or ``GLMPlan`` for the release methods), from public inputs alone: the row count
    ``n_rows`` (N) and the unconstrained dimension ``dim`` of the model, and the arguments of ``sample_private``
    that shape the run (same names, same meaning; see its docstring): the run-level options
    (``RUN_LEVEL_OPTIONS``: step_size, target_accept, metric, adapt_engaged, pool_metric) and the algorithm's
    options are keywords in ``options``. ``quiet``: False prints the ``auto`` choice and the chosen run lengths on
    stderr. ``facts``: what the likelihood declares about its rows (:class:`PublicFacts`; None: nothing). Raises
    ``ValueError`` for an unknown algorithm or option, a bad value, or a budget too small for the requested run,
    or a delta of at least 1/N; a delta above 1/(10 N) is warned about
    (``stan_dp.privacy.checks.check_delta_for_rows``).
    """
    moved = sorted(set(options) & {f.name for f in dataclasses.fields(PublicFacts)})
    if moved:  # keywords of plan_run before PublicFacts: say where they go instead of failing further down
        raise TypeError(f"plan_run takes {', '.join(moved)} in facts=PublicFacts(...), not as keywords")
    run_level = {k: options.pop(k) for k in RUN_LEVEL_OPTIONS if k in options}
    delta_warning = check_delta_for_rows(delta, n_rows)  # N is known here, before any row meets a mechanism
    if delta_warning:
        warn(delta_warning, UserWarning)
    inputs = PlanInputs(algorithm, n_rows, dim, epsilon, delta, chains, iter_warmup, iter_sampling, quiet,
                        facts or PublicFacts(), run_level, options)
    if registry.is_auto(algorithm):
        chosen = _chosen(inputs)
        if not isinstance(chosen, PlanInputs):  # a release-once method's plan, made to forecast it
            return chosen
        inputs = chosen
    return registry.get(inputs.algorithm).plan(inputs)


def _chosen(inputs: PlanInputs) -> Any:
    """``auto``'s choice from public inputs: a release-once method's plan when the program qualifies for one and
    an iterative kernel's forecast falls short (``stan_dp.run.auto_release``), else the request for the kernel
    ``stan_dp.run.auto`` picks (its reason says why no release-once method was taken)."""
    facts, options = inputs.facts, inputs.options
    linear_refusal = facts.linear_refusal
    if facts.linear is not None or facts.glm is not None:  # a release-once method, by forecast
        check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
        released, refusal = release_once_choice(
            inputs.n_rows, inputs.dim, facts, epsilon=inputs.epsilon, delta=inputs.delta, chains=inputs.chains,
            iter_warmup=inputs.iter_warmup, iter_sampling=inputs.iter_sampling, options=options, quiet=inputs.quiet)
        if released is not None:
            return released
        release_options = (*ssp.SSP_OPTIONS, *glm_release.GLM_SPEC.names, *glm_release.BOUND_OPTIONS)
        options = {k: v for k, v in options.items() if k not in release_options}
        linear_refusal = refusal or linear_refusal
    choice = auto.resolve_auto(n_rows=inputs.n_rows, dim=inputs.dim, epsilon=inputs.epsilon, delta=inputs.delta,
                               chains=inputs.chains, options=options, quiet=inputs.quiet,
                               rows_per_unit=facts.rows_per_unit, row_bounds=facts.row_bounds)
    if linear_refusal and (facts.linear is not None or facts.glm is not None):
        choice = dataclasses.replace(choice, reason=f"{choice.reason}; {linear_refusal}")
    return dataclasses.replace(inputs, algorithm=choice.algorithm, options=dict(choice.options), choice=choice,
                               facts=dataclasses.replace(facts, linear_refusal=linear_refusal))
