"""``sample_private``: the algorithm-agnostic entry point of every private run, as plan -> execute -> publish.

1. ``plan_run`` (``stan_dp.run.plan``) decides everything from public inputs, before any row is read: the
   algorithm (after ``auto``), its options, the run lengths, the warm start and the noise of the whole run,
   calibrated to the (epsilon, delta) budget (``stan_dp.phases.calibration``). The ``RunPlan`` prints what will run.
2. :func:`execute` runs the plan on the likelihood (each plan runs itself, ``stan_dp.methods.method``: a kernel plan
   builds the kernel, runs the anchor, the warm start and the chains, ``stan_dp.methods.kernels.kernel_run``) and returns the
   released result.
3. :func:`publish` has the plan turn it into ArviZ data (InferenceData or DataTree, per the installed ArviZ) with the
   privacy metadata (``stan_dp.output.inference_data``) and the convergence verdict of the released draws.

The run-level options and their per-algorithm defaults are documented in ``stan_dp.run.plan``.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import threading
from typing import Any

import numpy as np

from ..likelihood import RowLikelihood
from ..privacy import mechanisms
from ..privacy.units import UnitLikelihood, stamp_privacy_unit
from ..stan.backend_error import BackendError
from ..stan.glm_program import unit_row_bounds
from ..phases.checkpoint import (Checkpoint, CheckpointError, Checkpointer, encode, load_checkpoint, parse_cadence,
                         row_digests, rows_refusal, shapes_hash)
from ..methods.kernels.kernel_run import ExecutedRun, RunPlan
from ..methods.method import MethodPlan
from .plan import PublicFacts, plan_run
from .request import RunRequest, make_request

__all__ = ["ExecutedRun", "execute", "plan_run", "publish", "resume_private", "sample_private"]


def sample_private(
    likelihood: RowLikelihood, *, algorithm: str = "auto", epsilon: float, delta: float, chains: int = 4,
    iter_warmup: int | None = None, iter_sampling: int | None = None, seed: int | None = None, inits: Any = None,
    show_progress: bool = True, save_warmup: bool = False, debug: bool = False, step_size: float | None = None,
    target_accept: float | None = None, metric: str | np.ndarray | None = None, adapt_engaged: bool = True,
    pool_metric: bool = True, model_name: str | None = None, source_hash: str | None = None,
    stop_event: threading.Event | None = None, checkpoint: str | os.PathLike | None = None,
    checkpoint_every: int | float | str | None = None, privacy_unit: Any = None,
    max_rows_per_unit: int | None = None, **options: Any,
) -> Any:
    """Differentially private posterior draws of ``likelihood`` (a ``RowLikelihood``) as ArviZ data.

    algorithm: "auto" (default) to choose one from public quantities and the clip bounds given
        (``stan_dp.run.auto``; recorded in attrs ``auto_choice``; it refuses to run without a bound, naming the
        option to give), or a name in ``stan_dp.samplers.ALGORITHMS`` ("penalty", "dp-hmc", ...). Penalty MH,
        DP-HMC and DP-Fast MH named here run anchored (``anchor="dp-gd"``) when a public per-row gradient bound
        (``anchor_grad_clip``, or DP-HMC's ``grad_clip``) is given and ``anchor`` is not; ``anchor="none"`` runs
        the plain kernel (``stan_dp.phases.anchor.default_anchor``; attrs ``anchor_default``, ``anchor_reason``).
    epsilon, delta: the budget of the WHOLE run (all chains, warmup and sampling, every mechanism). The noise is
        calibrated from it before the run; a budget too small for the requested run raises ``ValueError``.
    chains, iter_warmup, iter_sampling: as in CmdStanPy. Warmup iterations are paid for like sampling ones.
        None (default) chooses them per algorithm from public quantities (``stan_dp.methods.kernels.run_lengths``: the SG
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
        checkpoints (``stan_dp.phases.checkpoint``): the run's arguments, what the phases before the chains released,
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
        posterior-scale guess per unit (``stan_dp.phases.public_scale``).
    **options: the algorithm's options (see the kernel class docstring and its ``option_defaults``), plus the
        warm-start options of ``stan_dp.phases.warm_start`` (``warm_start="ops"|"dp-gd"``, ``warm_start_share``, ...).
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
    request = make_request(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                           iter_sampling=iter_sampling, seed=seed, save_warmup=save_warmup, debug=debug,
                           model_name=model_name, source_hash=source_hash, step_size=step_size,
                           target_accept=target_accept, metric=metric, adapt_engaged=adapt_engaged,
                           pool_metric=pool_metric, **options)
    plan = plan_run(likelihood.n_rows, likelihood.dim, quiet=not show_progress, facts=public_facts(likelihood),
                    **request.plan_arguments())
    if debug and plan.debug_refusal is not None:  # refused before any row is read
        raise ValueError(plan.debug_refusal)
    checkpointer = None
    if checkpoint is not None:  # refused before any row is read
        checkpointer = _open_checkpoint(checkpoint, checkpoint_every, plan, likelihood, request)
    executed = execute(plan, likelihood, seed=seed, inits=inits, show_progress=show_progress,
                       save_warmup=save_warmup, stop_event=stop_event, checkpoint=checkpointer)
    return _finish(executed, plan, likelihood, checkpointer, debug=debug, model_name=model_name,
                   source_hash=source_hash)


def _finish(executed: Any, plan: MethodPlan, likelihood: RowLikelihood, checkpointer: Checkpointer | None, *, debug: bool,
            model_name: str | None, source_hash: str | None, resumed: bool = False) -> Any:
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
    and dimension). The values are bound separately, by private digests (``stan_dp.phases.checkpoint.row_digests``)."""
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


def _open_checkpoint(directory: Any, every: Any, plan: MethodPlan, likelihood: RowLikelihood,
                     request: RunRequest) -> Checkpointer:
    """The checkpoint writer of a new run: its refusals come before any row is read; then it is bound to the
    rows' private digests (the values the run may be resumed on)."""
    context = declared_attribute(likelihood, "checkpoint_context") or {}
    if isinstance(likelihood, UnitLikelihood) and context.get("privacy_unit") != likelihood.privacy_unit:
        raise CheckpointError("checkpoints with a privacy unit need a Stan program whose data hold the labels under "
                              "a name (DPStanModel.sample(..., privacy_unit='person', checkpoint=...)): resume reads "
                              "them again from the data, and a label array is never stored. Run without "
                              "checkpoint=, or name the unit's data variable.")
    if plan.checkpoint_refusal is not None:
        raise CheckpointError(f"checkpoint= is not available for algorithm {plan.label!r}: checkpoints continue a "
                              f"kernel's chains ({plan.checkpoint_refusal}); run without checkpoint=")
    assert isinstance(plan, RunPlan), "only a kernel plan has chains to checkpoint"
    seed = request.seed
    if seed is not None and (isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer))):
        raise CheckpointError(f"checkpoint= needs an int seed or None, got {seed!r}")
    cadence = parse_cadence(every)
    program, shapes = checkpoint_identity(likelihood, request.source_hash)
    header = {"program_sha256": program, "data_shapes_sha256": shapes, "n_rows": int(likelihood.n_rows),
              "dim": int(likelihood.dim), "plan": plan_fingerprint(plan),
              "run": encode({**request.record(), "seed": None if seed is None else int(seed)}),
              "context": encode(context)}
    checkpointer = Checkpointer(directory, cadence, header)
    checkpointer.bind_rows(row_digests(likelihood))  # private: the values it may be resumed on
    return checkpointer


def resume_private(directory: str | os.PathLike, likelihood: RowLikelihood, *, show_progress: bool = True,
                   source_hash: str | None = None, stop_event: threading.Event | None = None) -> Any:
    """Continue the run whose checkpoint is in ``directory`` on ``likelihood`` (the same rows, given again) and
    publish what the uninterrupted run would have published: the same draws (bit for bit when the run was
    seeded), the same privacy report (the planned budget: nothing is spent beyond the plan), with
    ``attrs["resumed"] == 1``. The phases before the chains are not run again: what they released is read from the
    checkpoint (no new noise is drawn for them). The checkpoint keeps being written at its cadence; once the result
    is published it is marked finished.

    source_hash: the SHA-256 of the Stan program (``DPStanModel`` passes it); None for a likelihood without one
        (its class then identifies the program).
    stop_event: as in :func:`sample_private` (an interrupted resumed run can be resumed again).

    Raises ``stan_dp.phases.checkpoint.CheckpointError`` (a ``ValueError``), before anything runs, for a finished
    run, a checkpoint of another program, of data of other shapes (names, dimensions, row count) or of other
    values (a private digest of the data's values, or of the rows' evaluations, stored in the checkpoint: the
    message names the variables that differ, or "the row values", never a value), a corrupted or truncated
    checkpoint, or a plan that no longer rebuilds the same (another package version).
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
    refusal = rows_refusal(directory, header.get("row_digests") or {}, row_digests(likelihood))
    if refusal is not None:  # names what differs, never a value or a digest
        raise CheckpointError(refusal)
    request = RunRequest.from_record(found.run)
    seed, save_warmup, debug = request.seed, request.save_warmup, request.debug
    model_name, stored_hash = request.model_name, request.source_hash
    plan = plan_run(likelihood.n_rows, likelihood.dim, quiet=not show_progress, facts=public_facts(likelihood),
                    **request.plan_arguments())
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
    ``stan_dp.phases.public_scale``), None for rows or a unit without a cap. Never the actual rows of any unit."""
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
    if isinstance(likelihood, UnitLikelihood):  # one unit's bounds: k times its rows' (stan_dp.stan.glm_program)
        bounds = unit_row_bounds(declared_attribute(likelihood.base, "row_bounds"), likelihood.privacy_unit,
                                 likelihood.max_rows_per_unit)
    else:
        bounds = declared_attribute(likelihood, "row_bounds")
    return PublicFacts(linear=declared_attribute(likelihood, "linear_spec"),
                       linear_refusal=declared_attribute(likelihood, "linear_refusal"),
                       glm=declared_attribute(likelihood, "glm_spec"),
                       glm_refusal=declared_attribute(likelihood, "glm_refusal"),
                       row_bounds=bounds,
                       rows_per_unit=public_rows_per_unit(likelihood))


def declared_attribute(likelihood: RowLikelihood, name: str) -> Any:
    """A public attribute the likelihood itself declares (class or instance), else None; never a wrapper's
    ``__getattr__`` fallback, which may stand for the rows."""
    if inspect.getattr_static(likelihood, name, None) is None:
        return None
    return getattr(likelihood, name)


def execute(plan: MethodPlan, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
            show_progress: bool = True, save_warmup: bool = False, stop_event: threading.Event | None = None,
            checkpoint: Checkpointer | None = None, restored: Checkpoint | None = None) -> Any:
    """Run ``plan`` on ``likelihood`` (``plan.execute``, the only step that reads rows): for a kernel plan the
    anchor phase, the warm start (each chain's start is a mechanism output) and the chains, one per thread, under
    the BLAS thread limit (``stan_dp.methods.kernels.kernel_run``); for dp-laplace and dp-ssp their releases and draws.
    ``seed``, ``inits``, ``show_progress``, ``save_warmup`` and ``stop_event`` as in ``sample_private``. A kernel
    whose options void the guarantee is warned about before the run (a ``RuntimeWarning`` attributed to the user's
    line).

    ``checkpoint`` writes the run's checkpoints (``stan_dp.phases.checkpoint``); ``restored``, a loaded checkpoint
    of this plan, continues the run from it: the anchor's release and the warm start's count are read from it (not
    drawn again), and every chain continues from its snapshot.

    Runs under ``mechanisms.private_arithmetic`` (the chains' threads enter it too): no floating-point warning of
    the per-row arithmetic (anchor, warm start, dp-laplace's releases, the kernels) can reach the caller, so the
    warnings a caller sees do not depend on the rows."""
    with mechanisms.private_arithmetic():
        return plan.execute(likelihood, seed=seed, inits=inits, show_progress=show_progress,
                            save_warmup=save_warmup, stop_event=stop_event, checkpoint=checkpoint,
                            restored=restored)


def publish(executed: Any, plan: MethodPlan, likelihood: RowLikelihood, *, debug: bool = False,
            model_name: str | None = None, source_hash: str | None = None) -> Any:
    """ArviZ data of an executed plan: the released draws constrained with the data-free ``likelihood.constrain``,
    the privacy report of the budget actually spent (all of it unless the run was interrupted), the attrs (the
    privacy unit's among them), and the convergence verdict of the released draws (a ``ConvergenceWarning``
    attributed to the user's line when it fails). ``debug``, ``model_name`` and ``source_hash`` as in
    ``sample_private``."""
    fit = plan.publish(executed, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)
    stamp_privacy_unit(fit.attrs, likelihood.privacy_unit if isinstance(likelihood, UnitLikelihood) else None,
                       int(likelihood.n_rows))
    return fit
