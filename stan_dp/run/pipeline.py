"""``sample_private``: the algorithm-agnostic entry point of every private run, as plan -> execute -> publish.

1. ``plan_run`` (``stan_dp.run.plan``) decides everything from public inputs, before any row is read: the
   algorithm (after ``auto``), its options, the run lengths, the warm start and the noise of the whole run,
   calibrated to the (epsilon, delta) budget (``stan_dp.run.calibration``). The ``RunPlan`` prints what will run.
2. :func:`execute` builds the kernel on the likelihood, runs the warm start (if any) and the chains
   (``stan_dp.run.chains.run_chains``) under the BLAS thread limit, and returns the released result.
3. :func:`publish` turns it into ArviZ data (InferenceData or DataTree, per the installed ArviZ) with the
   privacy metadata (``stan_dp.output.inference_data``) and the convergence verdict of the released draws.

The run-level options and their per-algorithm defaults are documented in ``stan_dp.run.plan``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import threading
from typing import Any, cast

import numpy as np

from ..likelihood import LinearRowLikelihood, RowLikelihood
from ..output.diagnostics import ConvergenceWarning, attach_convergence
from ..output.drift import near_start_chains
from ..output.inference_data import RunRecord, build_inference_data
from ..output.plausible import Screen, attach_screen, screen_chains
from ..output.progress import progress_bar
from ..output.run_result import RunResult
from ..privacy import mechanisms
from ..privacy.noise_source import stream
from ..privacy.units import UnitLikelihood, stamp_privacy_unit, unit_noun
from ..stan.backend_error import BackendError
from ..user_warnings import warn
from .anchor import (AnchoredLikelihood, AnchorRelease, anchor_row_gradients, chain_starts, clipped_rows_message,
                     noise_aware_shifts, posterior_target, run_anchor)
from .checkpoint import (Checkpoint, CheckpointError, Checkpointer, encode, load_checkpoint, parse_cadence,
                         shapes_hash)
from .chains import initial_points, run_chains
from .laplace import ExecutedLaplace, LaplacePlan, execute_laplace, publish_laplace
from .plan import PublicFacts, RunPlan, plan_run
from .ssp import ExecutedSSP, SSPPlan, execute_ssp, publish_ssp
from .threads import limited_blas_threads

__all__ = ["ExecutedRun", "execute", "plan_run", "publish", "resume_private", "sample_private"]


@dataclasses.dataclass(frozen=True)
class ExecutedRun:
    """What :func:`execute` returns: the chains' released result and the run settings the kernel fixed."""

    result: RunResult  # the released draws and statistics of every chain
    step_size: float  # the start step size used (the kernel's public rule where it has one and none was given)
    warm_iterations: int  # accounted iterations before the chains (warm start or anchor), summed over chains
    void_reason: str | None  # why the stated budget is not a guarantee (a non-private mechanism option), else None
    anchor: AnchorRelease | None = None  # what the anchor phase released, or None
    noise_aware_shift: np.ndarray | None = None  # per-draw noise-aware shifts (chains, draws, dim), or None
    screen: Screen | None = None  # which chains and draws are released (``stan_dp.output.plausible``)
    noise_aware_share: float = 1.0  # share of the noise-aware widening applied (below 1 when capped)


def sample_private(
    likelihood: RowLikelihood,
    *,
    algorithm: str = "auto",
    epsilon: float,
    delta: float,
    chains: int = 4,
    iter_warmup: int | None = None,
    iter_sampling: int | None = None,
    seed: int | None = None,
    inits: Any = None,
    show_progress: bool = True,
    save_warmup: bool = False,
    debug: bool = False,
    step_size: float | None = None,
    target_accept: float | None = None,
    metric: str | np.ndarray | None = None,
    adapt_engaged: bool = True,
    pool_metric: bool = True,
    model_name: str | None = None,
    source_hash: str | None = None,
    stop_event: threading.Event | None = None,
    checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | float | str | None = None,
    privacy_unit: Any = None,
    max_rows_per_unit: int | None = None,
    **options: Any,
):
    """Differentially private posterior draws of ``likelihood`` (a ``RowLikelihood``) as ArviZ data.

    algorithm: "auto" (default) to choose one from public quantities and the clip bounds given
        (``stan_dp.run.auto``; recorded in attrs ``auto_choice``; it refuses to run without a bound, naming the
        option to give), or a name in ``stan_dp.samplers.ALGORITHMS`` ("penalty", "dp-hmc", ...). Penalty MH,
        DP-HMC and DP-Fast MH named here run anchored (``anchor="dp-gd"``) when a public per-row gradient bound
        (``anchor_grad_clip``, or DP-HMC's ``grad_clip``) is given and ``anchor`` is not; ``anchor="none"`` runs
        the plain kernel (``stan_dp.run.anchor.default_anchor``; attrs ``anchor_default``, ``anchor_reason``).
    epsilon, delta: the budget of the WHOLE run (all chains, warmup and sampling, every mechanism). The noise is
        calibrated from it before the run; a budget too small for the requested run raises ``ValueError``.
    chains, iter_warmup, iter_sampling: as in CmdStanPy. Warmup iterations are paid for like sampling ones.
        None (default) chooses them per algorithm from public quantities (``stan_dp.run.run_lengths``: the SG
        kernels run up to their privacy-free break-even length, 200 + 200 to 5000 + 5000; penalty MH and DP-HMC
        4000 + 4000 up to N = 10,000, down to 1000 + 1000 from N = 40,000 (8e7 / N iterations); DP-Fast MH
        1000 + 1000; OPS 1000 internal warmup and one released draw per chain unless more stay untempered);
        recorded in ``attrs["run_lengths_reason"]`` and printed on stderr. Explicit values are always used.
    seed: None (the private default: ChaCha20 noise keyed from the OS cryptographic source, see
        ``stan_dp.privacy.noise_source``) or an int (PCG64, reproducible). A seeded run's noise is reproducible
        by anyone who knows the seed; the seed is never stored in the output.
    inits: None (uniform(-2, 2) on the unconstrained scale), a radius, or public unconstrained values of shape
        (dim,) or (chains, dim).
    step_size, target_accept: start step size and dual-averaging target (defaults per algorithm: ``stan_dp.run.plan``).
    metric: "unit", "diag" (estimated from the released warmup draws) or a fixed inverse-metric vector; None takes
        the algorithm's default ("diag" for the SG-MCMC kernels, starting from their public initial metric;
        "unit" otherwise: at epsilon = 100 a diag default measured no better for penalty MH and DP-Fast MH and
        worse for DP-HMC).
    adapt_engaged: False keeps ``step_size`` (and the metric) fixed during warmup.
    pool_metric: with metric "diag", estimate it from the released warmup-window draws of all chains pooled
        (default; see ``stan_dp.samplers.adaptation.MetricPool``); False estimates it per chain.
    save_warmup: also return ``warmup_posterior`` / ``warmup_sample_stats``.
    debug: add a ``debug_diagnostics`` group (log prior, log-likelihood and lp of every draw, computed from the
        private rows). The result is then marked NOT private (``attrs["private"] == 0``).
    model_name, source_hash: recorded in the attrs (the Stan model passes its name and source hash).
    stop_event: setting this ``threading.Event`` stops the run early, like Ctrl-C; the result then holds the
        completed iterations and the budget actually spent.
    checkpoint: a directory (created if needed; it must not hold a checkpoint yet) where the run writes
        checkpoints (``stan_dp.run.checkpoint``): the run's arguments, what the phases before the chains released,
        every chain's state, generator states, draws and statistics so far. A run killed after a checkpoint
        continues with :func:`resume_private` (``stan_dp.resume``) under its planned budget. The checkpoint is
        PRIVATE (it predicts the noise still to come): keep it with the data. Kernel runs only (not "ops",
        "dp-laplace" or "dp-ssp"), and not with a ``privacy_unit`` given here (``DPStanModel.sample`` with the unit
        named as a data variable can: its checkpoint stores the name, and resume reads the labels again).
    checkpoint_every: the cadence: an int K (every K iterations of every chain), seconds as a float or a string
        "30s", or None (every 60 s). A checkpoint is also written before the chains' first iteration.
    privacy_unit: None (the default: the privacy unit is one row) or an int array with one label per row: the
        guarantee then covers all rows of one unit (``stan_dp.privacy.units``): per-unit sums are clipped, minibatches
        sample units, and the number of units is public (it is the N of the accounting and of ``attrs["N"]``). The
        clip bounds then bound one unit's total contribution. A ``likelihood`` that is already a
        ``stan_dp.privacy.units.UnitLikelihood`` (as ``DPStanModel.sample`` passes it) is taken as it is.
    max_rows_per_unit: with ``privacy_unit``, a public cap: each unit keeps its first that many rows (data order);
        how many rows were dropped is never released. It also makes the anchor's default curvature bound and
        posterior-scale guess per unit (``stan_dp.run.public_scale``).
    **options: the algorithm's options (see the kernel class docstring and its ``option_defaults``), plus the
        warm-start options of ``stan_dp.run.warm_start`` (``warm_start="ops"|"dp-gd"``, ``warm_start_share``, ...).
        ``algorithm="hybrid"`` takes ``then``, ``ops_share``, ``loglik_bounds`` and the ``then`` kernel's options.
        For ``algorithm="ops"`` the ``iter_warmup`` iterations run inside the mechanism (released and accounted:
        nothing); ``iter_sampling`` draws per chain are released and accounted.

    After the run, R-hat and bulk / tail ESS of the released draws are stored in ``attrs["convergence"]`` and a
    ``stan_dp.ConvergenceWarning`` is emitted when they fail the usual thresholds (``stan_dp.output.diagnostics``).

    Raises ``stan_dp.stan.backend_error.BackendError`` when the rows' backend fails mid-run (a Ray actor or node
    lost); its ``partial_fit`` holds the draws made before the failure, with the privacy report of the budget they
    spent (a rerun spends a new budget).

    This is :func:`plan_run` (public inputs only: ``likelihood.n_rows`` and ``likelihood.dim``), then
    :func:`execute` and :func:`publish`.
    """
    likelihood = as_unit_likelihood(likelihood, privacy_unit, max_rows_per_unit)
    plan = plan_run(likelihood.n_rows, likelihood.dim, algorithm=algorithm, epsilon=epsilon, delta=delta,
                    chains=chains, iter_warmup=iter_warmup, iter_sampling=iter_sampling, step_size=step_size,
                    target_accept=target_accept, metric=metric, adapt_engaged=adapt_engaged,
                    pool_metric=pool_metric, quiet=not show_progress, facts=public_facts(likelihood), **options)
    if debug and isinstance(plan, (LaplacePlan, SSPPlan)):  # refused before any row is read
        raise ValueError(f"algorithm {plan.algorithm!r} has no debug diagnostics (it evaluates no log density)")
    checkpointer = None
    if checkpoint is not None:  # refused before any row is read
        run = dict(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                   iter_sampling=iter_sampling, step_size=step_size, target_accept=target_accept, metric=metric,
                   adapt_engaged=adapt_engaged, pool_metric=pool_metric, **options)
        publishing = dict(seed=seed, save_warmup=save_warmup, debug=debug, model_name=model_name,
                          source_hash=source_hash)
        checkpointer = _open_checkpoint(checkpoint, checkpoint_every, plan, likelihood, run, publishing)
    executed = execute(plan, likelihood, seed=seed, inits=inits, show_progress=show_progress,
                       save_warmup=save_warmup, stop_event=stop_event, checkpoint=checkpointer)
    return _finish(executed, plan, likelihood, checkpointer, debug=debug, model_name=model_name,
                   source_hash=source_hash)


def _finish(executed: Any, plan: Any, likelihood: RowLikelihood, checkpointer: Checkpointer | None, *, debug: bool,
            model_name: str | None, source_hash: str | None, resumed: bool = False):
    """Publish an executed plan; mark its checkpoint finished once a complete run is published."""
    fit = publish(executed, plan, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)
    if resumed:
        fit.attrs["resumed"] = 1
        fit.attrs["resumed_note"] = RESUMED_NOTE
    failure = getattr(getattr(executed, "result", None), "failure", None)
    if failure is not None:  # the rows' backend failed mid-run: stop with the error, carrying the partial fit
        hint = "" if checkpointer is None else (
            f" The run's checkpoint in {checkpointer.directory} holds its state at its last checkpoint: "
            f"stan_dp.resume({str(checkpointer.directory)!r}, ...) or `stan-dp resume {checkpointer.directory}` "
            "continues the planned run (on a new cluster if need be) under its planned budget, with no new spend.")
        raise BackendError(f"{failure}{hint}", partial_fit=fit) from None
    if checkpointer is not None and not getattr(getattr(executed, "result", None), "interrupted", True):
        checkpointer.finish()  # published whole: resuming it again would re-run the same noise
    return fit


#: the attrs' words for a resumed run (``attrs["resumed_note"]``)
RESUMED_NOTE = ("This run was resumed from a checkpoint after an interruption. It continued the planned run with "
                "the planned noise: the privacy report is that of the planned run (no new budget was spent), and "
                "the draws are those the uninterrupted run would have made (bit for bit when seeded).")


def checkpoint_identity(likelihood: RowLikelihood, source_hash: str | None) -> tuple[str, str]:
    """(program hash, data-shapes hash) a checkpoint is bound to: the Stan source hash (else the likelihood's
    class), and the SHA-256 of the likelihood's declared ``data_shapes`` (names and dimensions; else its row count
    and dimension). Never a hash of data values."""
    kind = type(likelihood)
    program = source_hash or hashlib.sha256(f"{kind.__module__}.{kind.__qualname__}".encode()).hexdigest()
    shapes = declared_attribute(likelihood, "data_shapes")
    if shapes is None:
        shapes = {"n_rows": int(likelihood.n_rows), "dim": int(likelihood.dim)}
    return program, shapes_hash(dict(shapes))


def plan_fingerprint(plan: RunPlan) -> str:
    """The calibrated noise and lengths of a plan (public), to check that a resumed run rebuilt the same plan."""
    privacy = plan.privacy
    return json.dumps({"algorithm": plan.label, "epsilon": privacy.epsilon, "delta": privacy.delta,
                       "chains": privacy.chains, "iterations": privacy.iterations,
                       "parameters": privacy.parameters, "noise_scale": privacy.noise_scale,
                       "other_iterations": privacy.other_iterations, "phase_runs": privacy.phase_runs,
                       "run_warmup": plan.run_warmup, "iter_sampling": plan.iter_sampling}, sort_keys=True,
                      default=repr)


def _open_checkpoint(directory: Any, every: Any, plan: Any, likelihood: RowLikelihood, run: dict[str, Any],
                     publishing: dict[str, Any]) -> Checkpointer:
    """The checkpoint writer of a new run (its refusals come before any row is read)."""
    context = declared_attribute(likelihood, "checkpoint_context") or {}
    if isinstance(likelihood, UnitLikelihood) and context.get("privacy_unit") != likelihood.privacy_unit:
        raise CheckpointError("checkpoints with a privacy unit need a Stan program whose data hold the labels under "
                              "a name (DPStanModel.sample(..., privacy_unit='person', checkpoint=...)): resume reads "
                              "them again from the data, and a label array is never stored. Run without "
                              "checkpoint=, or name the unit's data variable.")
    if isinstance(plan, (LaplacePlan, SSPPlan)) or plan.algorithm == "ops":
        raise CheckpointError(
            f"checkpoint= is not available for algorithm {plan.label!r}: checkpoints continue a kernel's chains "
            f"({'dp-laplace and dp-ssp make one release and no chain run' if plan.algorithm != 'ops' else 'ops draws with an internal sampler whose state is not stored'}); "
            "run without checkpoint=")
    seed = publishing["seed"]
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise CheckpointError(f"checkpoint= needs an int seed or None, got {seed!r}")
    cadence = parse_cadence(every)
    program, shapes = checkpoint_identity(likelihood, publishing["source_hash"])
    header = {"program_sha256": program, "data_shapes_sha256": shapes, "n_rows": int(likelihood.n_rows),
              "dim": int(likelihood.dim), "plan": plan_fingerprint(plan),
              "run": encode({**run, **publishing, "seed": None if seed is None else int(seed)}),
              "context": encode(context)}
    return Checkpointer(directory, cadence, header)


def resume_private(directory: str | os.PathLike, likelihood: RowLikelihood, *, show_progress: bool = True,
                   source_hash: str | None = None, stop_event: threading.Event | None = None):
    """Continue the run whose checkpoint is in ``directory`` on ``likelihood`` (the same rows, given again) and
    publish what the uninterrupted run would have published: the same draws (bit for bit when the run was
    seeded), the same privacy report (the planned budget: nothing is spent beyond the plan), with
    ``attrs["resumed"] == 1``. The phases before the chains are not run again: what they released is read from the
    checkpoint (no new noise is drawn for them). The checkpoint keeps being written at its cadence; once the result
    is published it is marked finished.

    source_hash: the SHA-256 of the Stan program (``DPStanModel`` passes it); None for a likelihood without one
        (its class then identifies the program).
    stop_event: as in :func:`sample_private` (an interrupted resumed run can be resumed again).

    Raises ``stan_dp.run.checkpoint.CheckpointError`` (a ``ValueError``), before any row is read, for a finished
    run, a checkpoint of another program or of data of other shapes (names, dimensions, row count), a corrupted or
    truncated checkpoint, or a plan that no longer rebuilds the same (another package version).
    """
    found = load_checkpoint(directory)
    program, shapes = checkpoint_identity(likelihood, source_hash)
    header = found.header
    if program != header["program_sha256"]:
        raise CheckpointError(f"the checkpoint in {directory} belongs to another program (its program hash "
                              "differs); resume it with the program it was started with")
    # the unit (its name and public cap) and the number of units must be the run's: checked first, so that the
    # message speaks of units (a unit run's shapes hash covers the number of units and the dimension only: the
    # data's row count is private then)
    unit = ((likelihood.privacy_unit, likelihood.max_rows_per_unit) if isinstance(likelihood, UnitLikelihood)
            else (None, None))
    stored = (found.context.get("privacy_unit"), found.context.get("max_rows_per_unit"))
    if unit != stored or (unit[0] is not None and int(likelihood.n_rows) != int(header["n_rows"])):
        raise CheckpointError(
            f"the checkpoint in {directory} was written for another privacy unit or number of units (privacy unit "
            f"{stored[0] or 'row'!r}, max_rows_per_unit {stored[1]}, N = {header['n_rows']}); the likelihood given "
            f"now has privacy unit {unit[0] or 'row'!r}, max_rows_per_unit {unit[1]}, N = {likelihood.n_rows}. "
            "Resume it with the data and unit it was started with")
    if shapes != header["data_shapes_sha256"]:
        raise CheckpointError(
            f"the checkpoint in {directory} belongs to data of other shapes (it was written for {header['n_rows']} "
            f"rows and dimension {header['dim']}; the data given now have {likelihood.n_rows} rows, dimension "
            f"{likelihood.dim}, or other variable names or sizes); resume it with the data it was started with")
    run = found.run
    seed, save_warmup, debug = run.pop("seed"), bool(run.pop("save_warmup")), bool(run.pop("debug"))
    model_name, stored_hash = run.pop("model_name"), run.pop("source_hash")
    plan = plan_run(likelihood.n_rows, likelihood.dim, quiet=not show_progress, facts=public_facts(likelihood),
                    **run)
    if not isinstance(plan, RunPlan) or plan_fingerprint(plan) != header["plan"]:
        raise CheckpointError(f"the run in {directory} no longer plans the same noise (another stan-dp version?); "
                              "it cannot be resumed under its budget")
    checkpointer = Checkpointer(directory, _stored_cadence(header), {}, existing=found)
    executed = execute(plan, likelihood, seed=seed, show_progress=show_progress, save_warmup=save_warmup,
                       stop_event=stop_event, checkpoint=checkpointer, restored=found)
    return _finish(executed, plan, likelihood, checkpointer, debug=debug, model_name=model_name,
                   source_hash=stored_hash, resumed=True)


def _stored_cadence(header: dict[str, Any]) -> Any:
    stored = header.get("cadence") or {}
    return parse_cadence(stored.get("iterations") or stored.get("seconds"))


def public_rows_per_unit(likelihood: RowLikelihood) -> int | None:
    """k: the public cap ``max_rows_per_unit`` of a unit likelihood (the public scale rules use it, see
    ``stan_dp.run.public_scale``), None for rows or a unit without a cap. Never the actual rows of any unit."""
    return likelihood.max_rows_per_unit if isinstance(likelihood, UnitLikelihood) else None


def as_unit_likelihood(likelihood: RowLikelihood, privacy_unit: Any = None, max_rows_per_unit: int | None = None) -> Any:
    """``likelihood`` seen unit by unit when ``privacy_unit`` (one int label per row) is given, else as it is;
    ``max_rows_per_unit`` without a unit is a ValueError (it caps the rows of a unit)."""
    if privacy_unit is None:
        if max_rows_per_unit is not None and not isinstance(likelihood, UnitLikelihood):
            raise ValueError("max_rows_per_unit caps the rows of one privacy unit: give privacy_unit as well.")
        return likelihood
    if isinstance(likelihood, UnitLikelihood):
        raise ValueError("the likelihood already has a privacy unit; give privacy_unit once.")
    return UnitLikelihood(likelihood, privacy_unit, name=ARRAY_UNIT_NAME, max_rows_per_unit=max_rows_per_unit)


#: the unit's name in the guarantee when ``sample_private`` is given the labels as an array
ARRAY_UNIT_NAME = "unit"


def public_facts(likelihood: RowLikelihood) -> PublicFacts:
    """What ``likelihood`` declares about its rows (its program's linear form or why not, the per-row bounds its
    program text gives, a privacy unit's public cap): public, read before any row."""
    return PublicFacts(linear=declared_attribute(likelihood, "linear_spec"),
                       linear_refusal=declared_attribute(likelihood, "linear_refusal"),
                       row_bounds=declared_attribute(likelihood, "row_bounds"),
                       rows_per_unit=public_rows_per_unit(likelihood))


def declared_attribute(likelihood: RowLikelihood, name: str) -> Any:
    """A public attribute the likelihood itself declares (class or instance), else None; never a wrapper's
    ``__getattr__`` fallback, which may stand for the rows."""
    if inspect.getattr_static(likelihood, name, None) is None:
        return None
    return getattr(likelihood, name)


def execute(plan: RunPlan | LaplacePlan | SSPPlan, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
            show_progress: bool = True, save_warmup: bool = False,
            stop_event: threading.Event | None = None, checkpoint: Checkpointer | None = None,
            restored: Checkpoint | None = None) -> ExecutedRun | ExecutedLaplace | ExecutedSSP:
    """Run ``plan`` on ``likelihood``: build the kernel, run the warm start (each chain's start is a mechanism
    output) and the chains, one per thread, under the BLAS thread limit. ``seed``, ``inits``, ``show_progress``,
    ``save_warmup`` and ``stop_event`` as in ``sample_private``. A kernel whose options void the guarantee is
    warned about before the run (a ``RuntimeWarning`` attributed to the user's line).

    ``checkpoint`` writes the run's checkpoints (``stan_dp.run.checkpoint``); ``restored``, a loaded checkpoint
    of this plan, continues the run from it: the anchor's release and the warm start's count are read from it (not
    drawn again), and every chain continues from its snapshot.

    Runs under ``mechanisms.private_arithmetic`` (the chains' threads enter it too): no floating-point warning of
    the per-row arithmetic (anchor, warm start, dp-laplace's releases, the kernels) can reach the caller, so the
    warnings a caller sees do not depend on the rows."""
    with mechanisms.private_arithmetic():
        return _execute(plan, likelihood, seed=seed, inits=inits, show_progress=show_progress,
                        save_warmup=save_warmup, stop_event=stop_event, checkpoint=checkpoint, restored=restored)


def _execute(plan: RunPlan | LaplacePlan | SSPPlan, likelihood: RowLikelihood, *, seed: int | None, inits: Any,
             show_progress: bool, save_warmup: bool, stop_event: threading.Event | None,
             checkpoint: Checkpointer | None = None, restored: Checkpoint | None = None
             ) -> ExecutedRun | ExecutedLaplace | ExecutedSSP:
    """``execute``'s body (in the caller's floating-point context)."""
    if isinstance(plan, LaplacePlan):  # no kernel, no chains: releases then closed-form draws
        return execute_laplace(plan, likelihood, seed=seed, inits=inits)
    if isinstance(plan, SSPPlan):  # one release, then chains on the noise-aware posterior (post-processing)
        # an SSPPlan is made only for a likelihood that declares its linear form (public_facts(...).linear)
        return execute_ssp(plan, cast(LinearRowLikelihood, likelihood), seed=seed, inits=inits)
    chains = int(plan.chains)
    anchor, run_likelihood, kernel_options = None, likelihood, dict(plan.options)
    if plan.anchor is not None and restored is not None:  # the anchor's release as it was: no new noise
        anchor = restored.anchor
        if anchor is None:
            raise CheckpointError("the checkpoint of an anchored run holds no anchor release; it cannot be resumed")
        _, grads = likelihood.row_log_lik_grad(anchor.theta_hat)
        anchor_grads = anchor_row_gradients(np.asarray(grads, dtype=float).reshape(int(likelihood.n_rows), -1))
    elif plan.anchor is not None:  # the anchor phase: theta_hat, G~ (mechanism outputs), then anchored rows
        # one stream per purpose (stan_dp.privacy.noise_source): the anchor's mechanism noise never shares a
        # generator with the public randomness whose results are released (starts, probe points, shifts)
        start, _ = initial_points(inits, 1, int(likelihood.dim), [stream(seed, "chain starts", "anchor")])
        steps = int(plan.anchor.options["anchor_steps"])
        with limited_blas_threads(chains), progress_bar(total=steps, desc=f"{plan.label} anchor (DP-GD)", unit="it",
                                                        show=show_progress) as bar:
            anchor, anchor_grads = run_anchor(likelihood, plan.anchor, stream(seed, "mechanism noise", "anchor"),
                                              start[0], on_step=bar.update,
                                              probe_rng=stream(seed, "probe points", "anchor"))
    if anchor is not None:
        # the anchor evaluated all rows at once: give its freed (N,)-sized blocks back before the chains start
        release_memory = getattr(likelihood, "release_memory", None)
        if callable(release_memory):
            release_memory()
        run_likelihood = AnchoredLikelihood(likelihood, anchor_grads, anchor.gradient, theta_hat=anchor.theta_hat)
        kernel_options["diff_clip"] = anchor.diff_clip
        # the kernel keeps the user's grad_clip even with clip='adaptive': an anchored kernel clips at C, and an
        # SG kernel's metric floor 1 / (N L^2) needs a true bound (a quantile L_f would floor the metric too high;
        # measured on wells: 94 sd error, sd ratio 49)
        if restored is None:
            inits = chain_starts(anchor, chains, stream(seed, "chain starts", "chains"))
    kernel = plan.kernel_cls(run_likelihood, plan.privacy, **kernel_options)
    if plan.internal_warmup:
        kernel.set_internal_warmup(int(plan.iter_warmup))
    step_size = plan.settings.step_size
    if not plan.settings.step_size_given and kernel.default_step_size is not None:
        step_size = float(kernel.default_step_size)  # computed from public quantities by the kernel
    initial_metric = kernel.initial_metric()
    if anchor is not None:
        initial_metric = anchor.metric
    settings = plan.settings.replace(step_size=float(step_size), initial_metric=initial_metric,
                                     adapt_step_size=bool(kernel.adapts_step_size),
                                     save_warmup=bool(save_warmup), show_progress=bool(show_progress))
    void_reason = None
    if not kernel.guarantee_holds:
        void_reason = (
            f"the options of {plan.algorithm!r} ({', '.join(f'{k}={v!r}' for k, v in plan.options.items())}) use a "
            "mechanism whose (epsilon, delta) guarantee does not hold (see the algorithm's docstring); the stated "
            "budget is not a guarantee for this object."
        )
        warn(void_reason, RuntimeWarning)

    warm, warm_iterations = plan.warm, (plan.anchor.iterations() if plan.anchor is not None else 0)
    with limited_blas_threads(chains):  # one chain per thread: keep BLAS from oversubscribing the cores
        if restored is not None:  # the starts are in the chains' snapshots; the phases before ran already
            warm_iterations = restored.warm_iterations
        elif warm is not None:  # each chain's start is a mechanism output (releasable)
            inits = warm.run(likelihood, chains=chains, seed=seed, inits=inits, show_progress=show_progress,
                             desc=f"{plan.label} {warm.kind} warm start ({chains} chains)")
            warm_iterations = warm.iterations(chains)
        if checkpoint is not None and restored is None:
            checkpoint.set_phases(anchor, warm_iterations)
        result = run_chains(run_likelihood, kernel, settings, seed=seed, inits=inits, stop_event=stop_event,
                            progress_desc=f"{plan.label} ({chains} chains)", checkpoints=checkpoint,
                            resume=None if restored is None else restored.resume_state())
    noise_aware = anchor is not None and plan.anchor is not None and bool(plan.anchor.options["noise_aware"])
    screen, shift, share = released_draws(result.draws_array(), likelihood,
                                          anchor.gradient_noise_sd if noise_aware and anchor else None,
                                          stream(seed, "noise-aware shifts", "anchor"))
    return ExecutedRun(result, float(step_size), warm_iterations, void_reason, anchor, shift, screen, share)


def released_draws(chain_draws: np.ndarray, likelihood: RowLikelihood, gradient_noise_sd: float | None,
                   rng: np.random.Generator | None = None) -> tuple[Screen, np.ndarray | None, float]:
    """Which chains are released (``stan_dp.output.plausible.screen_chains`` on the chains' draws), the noise-aware
    shifts of the chains kept (``noise_aware_shifts``; (chains, draws, dim), NaN where a chain or draw is not
    released) or None, and the share of the noise-aware widening applied (1 unless the full widening put a draw
    beyond what the screen allows, see ``NOISE_AWARE_CAP_STEPS``). Post-processing of released draws, the public
    sigma_G and the data-free prior."""
    chain_draws = np.asarray(chain_draws, dtype=float)
    screen = screen_chains([chain_draws], likelihood)
    if gradient_noise_sd is None:
        return screen, None, 1.0
    kept = screen.select(chain_draws)
    shift = noise_aware_shifts(kept, gradient_noise_sd, rng) if kept.size else None
    if shift is None:
        return screen, None, 1.0
    share = 1.0

    def plausible(a: float) -> bool:
        return screen_chains([kept + a * shift], likelihood, reference=screen.reference).everything_kept

    if not plausible(1.0):  # the widening is no longer a small correction: the largest share that stays plausible
        low, high = 0.0, 1.0  # the chains' own draws (share 0) passed the screen
        for _ in range(NOISE_AWARE_CAP_STEPS):
            mid = 0.5 * (low + high)
            low, high = (mid, high) if plausible(mid) else (low, mid)
        share = low
    full = np.full(chain_draws.shape, np.nan)
    full[np.asarray(screen.kept, dtype=np.intp), :screen.draws] = share * shift
    return screen, full, share


#: bisection steps for the share of the noise-aware widening that keeps every released draw plausible
NOISE_AWARE_CAP_STEPS = 12


def publish(executed: ExecutedRun | ExecutedLaplace | ExecutedSSP, plan: RunPlan | LaplacePlan | SSPPlan,
            likelihood: RowLikelihood, *,
            debug: bool = False, model_name: str | None = None, source_hash: str | None = None):
    """ArviZ data of an executed plan: the released draws constrained with the data-free ``likelihood.constrain``,
    the privacy report of the budget actually spent (all of it unless the run was interrupted), the attrs (the
    privacy unit's among them), and the convergence verdict of the released draws (a ``ConvergenceWarning``
    attributed to the user's line when it fails). ``debug``, ``model_name`` and ``source_hash`` as in
    ``sample_private``."""
    fit = _publish_by_method(executed, plan, likelihood, debug=debug, model_name=model_name,
                             source_hash=source_hash)
    stamp_privacy_unit(fit.attrs, likelihood.privacy_unit if isinstance(likelihood, UnitLikelihood) else None,
                       int(likelihood.n_rows))
    return fit


def _publish_by_method(executed: Any, plan: Any, likelihood: RowLikelihood, *, debug: bool, model_name: str | None,
                       source_hash: str | None):
    """``publish`` for each kind of plan (dp-ssp, dp-laplace, a kernel run)."""
    if isinstance(plan, SSPPlan):
        assert isinstance(executed, ExecutedSSP), "a dp-ssp plan is published from its own execution"
        return publish_ssp(executed, plan, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)
    if isinstance(plan, LaplacePlan):
        assert isinstance(executed, ExecutedLaplace), "a dp-laplace plan is published from its own execution"
        return publish_laplace(executed, plan, likelihood, debug=debug, model_name=model_name,
                               source_hash=source_hash)
    assert isinstance(executed, ExecutedRun), "a kernel plan is published from its own execution"
    result = executed.result
    report = (plan.privacy.report(completed_iterations=executed.warm_iterations + result.completed_iterations)
              if result.interrupted else plan.privacy.report())
    if plan.conditional_guarantee:
        report = dataclasses.replace(report, guarantee=plan.conditional_guarantee)

    diagnostics = {"debug_diagnostics": _debug_diagnostics(likelihood, result)} if debug else None
    run_options = plan.settings.replace(step_size=executed.step_size).run_options()
    noise_aware = executed.noise_aware_shift is not None
    screen = executed.screen
    record = RunRecord(plan.label, plan.described_options, report, plan=plan.privacy, model_name=model_name,
                       source_hash=source_hash, run_options=run_options, void_reason=executed.void_reason)
    fit = build_inference_data(
        result, likelihood, record, debug=debug, diagnostics=diagnostics,
        noise_aware_draws=result.draws_array() + executed.noise_aware_shift if noise_aware else None, screen=screen)
    if plan.anchor is not None:
        _annotate_anchor(fit, plan, executed, unit_noun(likelihood.privacy_unit, plural=True)
                         if isinstance(likelihood, UnitLikelihood) else "rows")
    near = near_start_chains(result)
    if screen is not None:
        attach_screen(fit, screen)
        near = [screen.kept.index(c - 1) + 1 for c in near if c - 1 in screen.kept]  # numbered as released
    # R-hat / ESS of the released chains (before any noise-aware shift), and whether they stay near their public
    # starts: post-processing, no privacy cost
    attach_convergence(fit, group="chain_posterior" if noise_aware else "posterior", near_start=near,
                       start="anchor" if plan.anchor is not None else "inits")
    if plan.lengths is not None:
        fit.attrs["run_lengths_reason"] = plan.lengths.reason
    if plan.anchor_default is not None:  # a kernel chosen by name: did the default anchor it, and why (public)
        fit.attrs["anchor_default"] = int(plan.anchor_default.by_default)
        fit.attrs["anchor_reason"] = plan.anchor_default.reason
    return plan.auto.annotate(fit) if plan.auto is not None else fit


def noise_aware_cap_message(share: float) -> str:
    """The words for a noise-aware widening capped at ``share`` of its first-order size."""
    return (f"The noise-aware widening was applied at {100.0 * share:.3g} % of its first-order size: the full "
            "widening would have put released draws beyond what the prior allows (the privacy noise of the anchor "
            "gradient is not small against these chains' spread, so the first-order correction does not hold). The "
            "released intervals do NOT include all of the privacy noise; the run cannot locate the posterior at this "
            "budget.")


def _annotate_anchor(fit: Any, plan: RunPlan, executed: ExecutedRun, noun: str = "rows") -> None:
    """The anchor phase's releases and rules in the attrs (mechanism outputs and public values only)."""
    anchor, anchor_plan = executed.anchor, plan.anchor
    assert anchor is not None and anchor_plan is not None  # called for anchored runs only
    fit.attrs["anchor_theta"] = json.dumps(anchor.theta_hat.tolist())
    fit.attrs["anchor_gradient"] = json.dumps(anchor.gradient.tolist())
    if anchor.fisher is not None:
        fit.attrs["anchor_fisher"] = json.dumps(anchor.fisher.tolist())
    fit.attrs["diff_clip"] = float(anchor.diff_clip)
    fit.attrs["diff_clip_reason"] = anchor.diff_clip_reason
    if anchor_plan.clip is not None and anchor.grad_clip is not None:  # the frozen adaptive bound (released counts)
        fit.attrs["clip_bound"] = float(anchor.grad_clip)
        fit.attrs["clip_bound_reason"] = anchor.grad_clip_reason
    fit.attrs["posterior_target"] = posterior_target(anchor_plan, executed.noise_aware_shift is not None,
                                                     anchor.gradient_noise_sd)
    if executed.noise_aware_shift is not None and executed.noise_aware_share < 1.0:
        text = noise_aware_cap_message(executed.noise_aware_share)
        fit.attrs["noise_aware_share"] = float(executed.noise_aware_share)
        fit.attrs["posterior_target"] += " " + text
        warn(f"Released draws: {text}", ConvergenceWarning)
    if anchor.clipped_rows is not None and anchor.clipped_rows_sd is not None:  # a released noisy count
        fit.attrs["anchor_clipped_rows"] = float(anchor.clipped_rows)  # (accounted), and the warning it may call for
        fit.attrs["anchor_clipped_rows_sd"] = float(anchor.clipped_rows_sd)
        rows_text = clipped_rows_message(anchor, int(fit.attrs["N"]), adaptive=anchor_plan.clip is not None,
                                         noun=noun)
        if rows_text:
            warn(rows_text, UserWarning)


def _debug_diagnostics(likelihood: RowLikelihood, result: Any) -> dict[str, np.ndarray]:
    """NON-PRIVATE per-draw log prior, log-likelihood (sum over rows) and lp = their sum, for debugging only."""
    draws = result.draws_array()
    chains, n, _ = draws.shape
    log_prior = np.empty((chains, n))
    log_lik = np.empty((chains, n))
    for c in range(chains):
        for i in range(n):
            log_prior[c, i] = likelihood.log_prior(draws[c, i])
            log_lik[c, i] = float(np.sum(likelihood.row_log_lik(draws[c, i])))
    return {"log_prior": log_prior, "log_likelihood": log_lik, "lp": log_prior + log_lik}
