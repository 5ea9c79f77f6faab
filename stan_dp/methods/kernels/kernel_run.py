"""A kernel run (penalty MH, DP-HMC, DP-Fast MH, the SG-MCMC kernels, OPS, the hybrid; anchored or not): its
plan, its execution and its publication.

:class:`RunPlan` is what ``stan_dp.run.plan.plan_run`` decides for a kernel from public inputs alone.
:func:`execute_kernel_run` runs it: the anchor phase (DP-GD steps and the anchor gradient G~, ``stan_dp.phases.anchor``)
when the plan has one, the warm start (``stan_dp.phases.warm_start``), then the chains (``stan_dp.phases.chains``);
:func:`released_draws` screens the chains' draws and adds the noise-aware shifts of an anchored run, and
:func:`publish_kernel_run` makes the ArviZ data. dp-laplace and dp-ssp have their own modules with the same three
parts (``stan_dp.methods.method`` names the interface).
"""
from __future__ import annotations

import dataclasses
import json
import threading
from typing import Any, cast

import numpy as np

from ...likelihood import ReleasesMemory, RowLikelihood, offers
from ...output.diagnostics import ConvergenceWarning, attach_convergence
from ...output.drift import near_start_chains
from ...output.inference_data import RunRecord, build_inference_data
from ...output.plausible import Screen, attach_screen, screen_chains
from ...output.progress import progress_bar
from ...output.run_result import RunResult
from ...privacy.accounting import PrivacyPlan
from ...privacy.noise_source import stream
from ...privacy.report import mechanism_text
from ...privacy.units import UnitLikelihood, unit_noun
from ...run_options import RunSettings
from ...samplers.base import KernelBase
from ...user_warnings import warn
from ...phases.anchor import (DEFAULT_ANCHORED, AnchoredLikelihood, AnchorPlan, AnchorRelease, DefaultAnchor,
                     chain_starts, clipped_rows_message, posterior_target, run_anchor)
from ..method import AutoChoice
from ...phases.chains import Starts, initial_points, run_chains
from .forecast import Forecast
from ...phases.checkpoint import Checkpoint, CheckpointError, Checkpointer
from ...phases.noise_aware import noise_aware_shifts
from .run_lengths import RunLengths
from ...phases.threads import limited_blas_threads
from ...phases.warm_start import WarmStart

__all__ = ["RunPlan", "ExecutedRun", "execute_kernel_run", "publish_kernel_run", "released_draws",
           "noise_aware_cap_message", "NOISE_AWARE_CAP_STEPS"]

#: the inits' description of an anchored run (``attrs["inits"]``): where its chains started
ANCHOR_STARTS = ("the private anchor (DP-GD) plus uniform(-2, 2) per coordinate in units of the anchor metric's "
                 "sd, one point per chain")


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """A private run decided from public inputs alone: the algorithm (after ``auto`` and "hybrid"), its options,
    the run lengths, the phases (warm start, then the kernel), the run options and the calibrated noise of the
    whole run. Built by ``stan_dp.run.plan.plan_run`` before any row is read; ``print(plan)`` says what will run
    and at what noise. ``stan_dp.run.pipeline.execute`` runs it (:meth:`execute`).
    """

    label: str  # the algorithm as the metadata records it ("hybrid", or the kernel's name)
    algorithm: str  # the kernel's registry name
    kernel_cls: type[KernelBase]
    options: dict[str, Any]  # the kernel's options as given (its constructor's keywords)
    described_options: dict[str, Any]  # hybrid's own, the kernel's with defaults and the warm start's (attrs)
    warm: WarmStart | None  # the warm-start phase (noise fixed from its share), or None
    anchor: AnchorPlan | None  # the anchor phase (noise fixed from its shares), or None
    n_rows: int
    dim: int
    epsilon: float
    delta: float
    iter_warmup: int  # per chain (a kernel with internal warmup runs them inside its mechanism)
    internal_warmup: bool
    settings: RunSettings  # chains, the chain loop's lengths and the run-level options (public)
    privacy: PrivacyPlan  # the calibrated noise of the whole run (every phase, every chain)
    conditional_guarantee: str | None  # the guarantee in words when it is conditional (OPS), else None
    auto: AutoChoice | None  # the choice when the caller asked for "auto"
    lengths: RunLengths | None  # the chosen run lengths when the caller left them unset
    anchor_default: DefaultAnchor | None = None  # what the default anchor did (a kernel chosen by name), or None
    forecast: Forecast | None = None  # the effective draws forecast from public inputs (stan_dp.methods.kernels.forecast), or None

    @property
    def chains(self) -> int:
        return self.settings.chains

    @property
    def iter_sampling(self) -> int:
        return self.settings.iter_sampling

    @property
    def run_warmup(self) -> int:
        """Warmup iterations the chain loop runs and the accountant counts (0 with internal warmup)."""
        return self.settings.iter_warmup

    debug_refusal = None  # a kernel evaluates the log density: debug=True reports it per draw

    @property
    def checkpoint_refusal(self) -> str | None:
        """Why this run cannot be checkpointed (the kernel's ``checkpoint_refusal``: OPS keeps an internal
        sampler's state), else None."""
        return self.kernel_cls.checkpoint_refusal

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
                show_progress: bool = True, save_warmup: bool = False, stop_event: threading.Event | None = None,
                checkpoint: Checkpointer | None = None, restored: Checkpoint | None = None) -> ExecutedRun:
        """:func:`execute_kernel_run` of this plan."""
        return execute_kernel_run(self, likelihood, seed=seed, inits=inits, show_progress=show_progress,
                                  save_warmup=save_warmup, stop_event=stop_event, checkpoint=checkpoint,
                                  restored=restored)

    def publish(self, executed: ExecutedRun, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """:func:`publish_kernel_run` of this plan."""
        return publish_kernel_run(executed, self, likelihood, debug=debug, model_name=model_name,
                                  source_hash=source_hash)

    @property
    def reasons(self) -> tuple[str, ...]:
        """Why the plan is what it is, where a choice was made: the ``auto`` choice, the default anchor and the run
        lengths."""
        return tuple(f"{what}: {reason}" for what, reason in (
            ("auto", self.auto.reason if self.auto is not None else None),
            ("anchor", self.anchor_default.reason if self.anchor_default is not None else None),
            ("run lengths", self.lengths.reason if self.lengths is not None else None)) if reason)

    def __str__(self) -> str:
        warmup = (f"{self.iter_warmup} internal warmup (inside the mechanism, nothing released)"
                  if self.internal_warmup else f"{self.iter_warmup} warmup")
        options = ", ".join(f"{k}={v!r}" for k, v in self.described_options.items()) or "(defaults)"
        lines = [
            f"Run plan: {self.label}"
            + (f" ({self.algorithm} kernel)" if self.label != self.algorithm else "")
            + f", {self.chains} chains x ({warmup} + {self.iter_sampling} sampling) iterations, "
              f"N = {self.n_rows} rows, dimension {self.dim}",
            f"  budget:      epsilon = {self.epsilon:g}, delta = {self.delta:g} for the whole run (all chains, "
            "warmup included, every phase)",
            f"  options:     {options}",
            f"  run options: {self.settings.describe()}",
        ]
        noise = ", ".join(f"{k} = {v:.6g}" if isinstance(v, float) else f"{k} = {v!r}"
                          for k, v in self.privacy.parameters.items())
        lines.append(f"  noise plan:  {noise or '(none)'}")
        if self.warm is not None:
            lines.append(f"  warm start:  {self.warm.kind}, {self.warm.share:g} of epsilon (each chain's start is "
                         "a mechanism output)")
        if self.anchor is not None:
            a = self.anchor
            lines.append(f"  anchor:      {a.kind}, {a.shares:.3g} of the budget (rho terms): DP-GD steps, G~ "
                         f"(noise sd {a.gradient_noise_sd:.4g}) at the anchor; the kernel runs on anchor-relative "
                         f"rows clipped at diff_clip ({'given' if a.options['diff_clip'] else 'rule: K r, K = '}"
                         f"{a.options['diff_clip'] or f'{a.curvature_clip:.4g}'})"
                         f"{', noise-aware' if a.options['noise_aware'] else ''}")
            if a.clip is not None:
                lines.append(f"  clip:        adaptive: L follows a private {a.clip.target:g} quantile of the gradient "
                             f"norms during the DP-GD steps ({a.clip.share:g} of the budget, count noise sd "
                             f"{a.clip.count_sd:.4g}), from and at most L_0 = {a.clip.start:g}; noise sds above at L_0")
        lines.append("  releases over the whole run (noise multiplier: noise sd over the sensitivity):")
        lines.extend(f"    - {mechanism_text(m)}" for m in self.privacy.mechanisms())
        if self.conditional_guarantee:
            lines.append(f"  guarantee:   {self.conditional_guarantee}")
        lines.extend(f"  why:         {reason}" for reason in self.reasons)
        if self.forecast is not None:
            lines.append(f"  forecast:    {self.forecast.sentence()}")
        return "\n".join(lines)


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


def execute_kernel_run(plan: RunPlan, likelihood: RowLikelihood, *, seed: int | None = None,
                       inits: Any = None, show_progress: bool = True, save_warmup: bool = False,
                       stop_event: threading.Event | None = None, checkpoint: Checkpointer | None = None,
                       restored: Checkpoint | None = None) -> ExecutedRun:
    """Run a kernel plan on ``likelihood``: the anchor phase (if any), the kernel on the (anchored) rows, the
    warm start (each chain's start is a mechanism output) and the chains, one per thread, under the BLAS thread
    limit; then the released draws' screen and noise-aware shifts. Arguments as in
    ``stan_dp.run.pipeline.execute`` (which calls it in its floating-point context)."""
    chains = int(plan.chains)
    anchor, run_likelihood, kernel_options = None, likelihood, dict(plan.options)
    if plan.anchor is not None and restored is not None:  # the anchor's release as it was: no new noise
        anchor = restored.anchor
        if anchor is None:
            raise CheckpointError("the checkpoint of an anchored run holds no anchor release; it cannot be resumed")
        anchor_grads = None  # recomputed from the stored (released) theta_hat where they are needed: no new noise
    elif plan.anchor is not None:  # the anchor phase: theta_hat, G~ (mechanism outputs), then anchored rows
        # one stream per purpose (stan_dp.privacy.noise_source): the anchor's mechanism noise never shares a
        # generator with the public randomness whose results are released (starts, probe points, shifts)
        start, anchor_start = initial_points(inits, 1, int(likelihood.dim), [stream(seed, "chain starts", "anchor")])
        steps = int(plan.anchor.options["anchor_steps"])
        with limited_blas_threads(chains), progress_bar(total=steps, desc=f"{plan.label} anchor (DP-GD)", unit="it",
                                                        show=show_progress) as bar:
            anchor, anchor_grads = run_anchor(likelihood, plan.anchor, stream(seed, "mechanism noise", "anchor"),
                                              start[0], on_step=bar.update,
                                              probe_rng=stream(seed, "probe points", "anchor"))
    if anchor is not None:
        # the anchor evaluated all rows at once: give its freed (N,)-sized blocks back before the chains start
        if offers(likelihood, ReleasesMemory):
            cast(ReleasesMemory, likelihood).release_memory()
        run_likelihood = AnchoredLikelihood(likelihood, anchor_grads, anchor.gradient, theta_hat=anchor.theta_hat)
        kernel_options["diff_clip"] = anchor.diff_clip
        # the kernel keeps the user's grad_clip even with clip='adaptive': an anchored kernel clips at C, and an
        # SG kernel's metric floor 1 / (N L^2) needs a true bound (a quantile L_f would floor the metric too high;
        # measured on wells: 94 sd error, sd ratio 49)
        if restored is None:
            inits = Starts(chain_starts(anchor, chains, stream(seed, "chain starts", "chains")),
                           f"{ANCHOR_STARTS}; the anchor's DP-GD started from {anchor_start}")
    kernel = plan.kernel_cls(run_likelihood, plan.privacy, **kernel_options)
    if plan.internal_warmup:
        kernel.set_internal_warmup(int(plan.iter_warmup))
    step_size = plan.settings.step_size
    if not plan.settings.step_size_given and kernel.default_step_size is not None:
        step_size = float(kernel.default_step_size)  # computed from public quantities by the kernel
    initial_metric = kernel.initial_metric()
    fixed = {}
    if anchor is not None:
        initial_metric = anchor.metric
        if fixed_anchor_metric(plan, anchor):  # the released Fisher's scale, kept: post-processing of F~
            fixed = {"metric": np.asarray(anchor.metric, dtype=float)}
    settings = plan.settings.replace(**fixed, step_size=float(step_size), initial_metric=initial_metric,
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
            inits = Starts(warm.run(likelihood, chains=chains, seed=seed, inits=inits, show_progress=show_progress,
                                    desc=f"{plan.label} {warm.kind} warm start ({chains} chains)"),
                           f"the {warm.kind} warm start's released points, one per chain")
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


def fixed_anchor_metric(plan: RunPlan, anchor: AnchorRelease) -> bool:
    """Whether the chains keep the anchor's metric fixed: an anchored accept-test kernel (penalty MH, DP-HMC,
    DP-Fast MH) whose anchor released a diagonal Fisher, when the caller gave no ``metric``.

    Why. These kernels' effective draws at a fixed budget are few (``stan_dp.methods.kernels.forecast``), so the variances of
    their warmup windows, which "diag" adaptation would take as the metric, come from a handful of effective draws
    and are biased low where a coordinate has barely moved. The released Fisher's inverse is a public estimate of
    the posterior's scale from all the rows at once. Measured on 100,000 rows of AER Fertility at epsilon 10
    (penalty MH, seed 1, benchmarks/bench_large_named.py): with the adapted metric the chains' sampling
    acceptance was 0.11-0.33 against the target 0.3 and the smallest bulk ESS 20; with the Fisher's metric kept
    0.26-0.30 and 32 (the betas 60-100)."""
    return (anchor.fisher is not None and not plan.settings.metric_given
            and plan.algorithm in DEFAULT_ANCHORED)


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


def publish_kernel_run(executed: ExecutedRun, plan: RunPlan, likelihood: RowLikelihood, *, debug: bool = False,
                       model_name: str | None = None, source_hash: str | None = None) -> Any:
    """ArviZ data of a kernel run: the released draws (and the noise-aware ones), the privacy report of the budget
    spent, the anchor's releases, the convergence verdict of the released chains and the run's reasons."""
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
    if plan.forecast is not None:  # stated before the run, from public inputs (stan_dp.methods.kernels.forecast)
        fit.attrs["forecast_ess"] = float(plan.forecast.ess)
        fit.attrs["forecast_reason"] = plan.forecast.sentence()
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
