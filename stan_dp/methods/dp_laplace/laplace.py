"""``algorithm="dp-laplace"``: a noise-aware private Laplace-type posterior.

The whole budget is spent once, on a few low-dimensional statistics, and the draws are post-processing:

1. the anchor: ``anchor_steps`` full-batch DP-GD steps (``run.dp_gd.noisy_gradient_ascent``, as the anchor phase
   of ``run.anchor``), one Gaussian mechanism per step on sum_i clip_L(g_i), noise sd 2 tau_a L;
2. G~ = sum_i clip_L(g_i(theta_hat)) + N(0, sigma_G^2 I), sigma_G = 2 tau_G L;
   (``newton_steps`` > 1: steps 2 and 3 repeat at the noisy Newton step from the last point, the gradient and
   curvature shares split equally; measured no better than one point on wells and logistic-10k, default 1);
3. F~ = sum_i c_i c_i^T + E, c_i = clip_L(g_i(theta_hat)), E symmetric with independent N(0, sigma_F^2) upper
   triangle, sigma_F = sqrt(2) tau_F L^2 (``mechanisms.clipped_outer_product_sum``: replacing one row moves it by
   at most sqrt(2) L^2, ``mechanisms.curvature_sensitivity``); for dim > ``full_curvature_max_dim`` its diagonal
   only (``mechanisms.clipped_squared_gradient_sum``, same sensitivity).

The curvature is the empirical Fisher of the clipped per-row GRADIENTS, not a sum of per-row Hessians: it needs
nothing of a model but its per-row gradients (any Stan program), and at the mode of a well-specified model it
estimates the observed information. It is biased where the model is misspecified or rows' gradients clip.

Budget: the three releases share one noise scale s found by the package's generic calibration
(``privacy.calibrate_phases``, one PLD): release k gets tau_k = s sqrt(count_k / share_k), so that its share of
rho = mu_GDP^2 / 2 is ``laplace_*_share`` (public, summing to 1) and the composition spends the whole budget.

Draws (``run.laplace_posterior``): N(m, P^-1) with P = floor(F~) + H0 (H0 minus the prior Hessian at theta_hat, by
finite differences of the data-free prior gradient) and m = theta_hat + P^-1 (G~ + grad log p0(theta_hat)); with
``noise_aware=True`` (default) the noise of G~ and F~ is redrawn for every draw from its public distribution.
Any number of draws costs the same budget. The released attrs hold theta_hat, G~ and F~ (mechanism outputs).

``clip="adaptive"`` (``stan_dp.phases.adaptive_clip``): each DP-GD step of 1. also releases a noisy count that moves
L towards a private quantile of the per-row gradient norms; the bound is frozen at L_f for 2. and 3. (noise sds
2 tau_G L_f and sqrt(2) tau_F L_f^2, the eigen floor from them) and released (attrs ``clip_bound``). ``clip_share`` of
the budget pays for the counts; the three shares above then divide the rest (each is scaled by 1 - clip_share).
A quantile bound clips some rows at theta_hat by design, which biases G~ and hence the mean (that module).
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping

import numpy as np

from ...likelihood import RowLikelihood
from ...output.diagnostics import ConvergenceWarning
from ...output.inference_data import RunRecord, build_inference_data
from ...output.plausible import attach_screen, screen_chains
from ...output.run_result import ChainResult, RunResult
from ...privacy import PrivacyPlan, calibrate_phases, mechanisms
from ...privacy.events import NoiseDeclaration, Phase, gaussian_release
from ...privacy.noise_source import stream
from ...samplers.options import Option, OptionSpec
from ...user_warnings import warn
from ...phases.adaptive_clip import CLIP_OPTIONS, CLIP_RELEASE, ClipPlan, check_clip_request, clip_plan, clip_reason
from ...phases.chains import initial_points
from ...phases.dp_gd import noisy_gradient_ascent
from .laplace_posterior import floored_directions, laplace_draws, laplace_mean, prior_gradient_hessian
from ..method import CHAIN_TUNING_OPTIONS, chain_free_option_names, chain_free_options, check_lengths, refuse_chain_tuning
from ..registry import PlanInputs, PlannedMethod, register
from ...phases.public_scale import public_curvature_bound

__all__ = ["LAPLACE", "LAPLACE_SPEC", "LaplacePlan", "LaplaceRelease", "plan_laplace", "release_statistics",
           "execute_laplace", "publish_laplace", "draws_from_release"]

LAPLACE = "dp-laplace"
STEP_RELEASE = "dp-laplace: DP-GD clipped gradient sum (anchor)"
GRADIENT_RELEASE = "dp-laplace: clipped gradient sum G~ (one per Newton point)"
CURVATURE_RELEASE = "dp-laplace: clipped gradient outer-product sum F~ (one per Newton point)"
DEFAULT_DRAWS = 1000
SHARES = ("laplace_anchor_share", "laplace_gradient_share", "laplace_curvature_share")

LAPLACE_SPEC = OptionSpec(LAPLACE, [
    Option("grad_clip", "real", None, low=0.0, low_open=True, required=True,
           doc="L: public per-row gradient L2 clip bound (unconstrained scale) of every release"),
    Option("laplace_anchor_share", "real", 0.3, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget (Gaussian-DP rho terms) spent on the DP-GD steps that find theta_hat"),
    Option("laplace_gradient_share", "real", 0.35, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget spent on G~, the noisy clipped gradient sum at theta_hat"),
    Option("laplace_curvature_share", "real", 0.35, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget spent on F~, the noisy empirical Fisher of clipped gradients at theta_hat"),
    Option("anchor_steps", "int", 100, low=2, doc="full-batch DP-GD steps that find theta_hat"),
    Option("anchor_step", "real", 1.0, low=0.0, low_open=True,
           doc="DP-GD step in units of 1 / (N K), K the public curvature bound"),
    Option("anchor_momentum", "real", 0.9, low=0.0, high=1.0, high_open=True, doc="heavy-ball momentum of DP-GD"),
    Option("curvature_clip", "real", None, low=0.0, low_open=True, none_means="L^2 / 4",
           doc="K: public bound on a row's curvature; sets the DP-GD step only"),
    Option("newton_steps", "int", 1, low=1,
           doc="Newton points: G~ and F~ are released at the DP-GD anchor and, for each further point, at the "
               "noisy Newton step from the previous one; the last point's releases form the posterior "
               "(the gradient and curvature shares are split equally among the points)"),
    Option("full_curvature_max_dim", "int", 30, low=0,
           doc="release the full d x d curvature up to this dimension, its diagonal above"),
    Option("eigen_floor", "real", None, low=0.0, low_open=True,
           none_means="2 sqrt(d) sigma_F (full matrix) or 2 sigma_F (diagonal): the scale of the released noise",
           doc="eigenvalue floor of the released curvature (projection onto the PSD cone, post-processing)"),
    Option("noise_aware", "bool", True,
           doc="redraw the noise of G~ and F~ from its public distribution for every draw, so that intervals "
               "include the privacy noise (False: plain N(m, P^-1) at the released values)"),
    *CLIP_OPTIONS,
])

#: run-level options that have no meaning for closed-form draws (refused when given)
NO_CHAIN_OPTIONS = CHAIN_TUNING_OPTIONS


@dataclasses.dataclass(frozen=True)
class LaplacePlan:
    """A dp-laplace run decided from public inputs alone (N, dim, budget, options): its noise and draw count."""

    options: Mapping[str, Any]
    n_rows: int
    dim: int
    epsilon: float
    delta: float
    chains: int
    iter_sampling: int
    privacy: PrivacyPlan

    label = LAPLACE
    algorithm = LAPLACE
    auto = None
    lengths = None
    debug_refusal = "algorithm 'dp-laplace' has no debug diagnostics (it evaluates no log density)"
    checkpoint_refusal = "dp-laplace makes its releases and closed-form draws, no chain run"

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
                **_: Any) -> ExecutedLaplace:
        """:func:`execute_laplace` of this plan (the run's other arguments do not apply)."""
        return execute_laplace(self, likelihood, seed=seed, inits=inits)

    def publish(self, executed: ExecutedLaplace, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """:func:`publish_laplace` of this plan."""
        return publish_laplace(executed, self, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)

    @property
    def grad_clip(self) -> float:
        return float(self.options["grad_clip"])

    @property
    def curvature_clip(self) -> float:
        k = self.options["curvature_clip"]
        return float(k) if k is not None else public_curvature_bound(self.grad_clip)

    @property
    def full_curvature(self) -> bool:
        """True: the full d x d curvature is released; False: its diagonal."""
        return self.dim <= int(self.options["full_curvature_max_dim"])

    @property
    def clip(self) -> ClipPlan | None:
        """The adaptive clip bound's public plan (clip='adaptive'), else None."""
        return clip_plan(self.options, start=self.grad_clip, steps=int(self.options["anchor_steps"]),
                         count_sd=float(self.privacy.parameters.get("tau_clip", float("nan"))), n_rows=self.n_rows)

    def gradient_noise_sd_at(self, grad_clip: float) -> float:
        """sigma_G = 2 tau_G L for a bound L (public)."""
        return mechanisms.gradient_noise_sd(self.privacy.parameters["tau_gradient"], grad_clip)

    def curvature_noise_sd_at(self, grad_clip: float) -> float:
        """sigma_F = sqrt(2) tau_F L^2 per free entry for a bound L (public; sensitivity sqrt(2) L^2)."""
        return mechanisms.curvature_noise_sd(self.privacy.parameters["tau_curvature"], float(grad_clip))

    def eigen_floor_at(self, grad_clip: float) -> float:
        """The eigenvalue floor of the curvature (given, else the released noise's scale at L; public)."""
        if self.options["eigen_floor"] is not None:
            return float(self.options["eigen_floor"])
        return 2.0 * self.curvature_noise_sd_at(grad_clip) * (math.sqrt(self.dim) if self.full_curvature else 1.0)

    @property
    def gradient_noise_sd(self) -> float:
        """sigma_G = 2 tau_G L (public; at the given L, the start of an adaptive bound)."""
        return self.gradient_noise_sd_at(self.grad_clip)

    @property
    def curvature_noise_sd(self) -> float:
        """sigma_F = sqrt(2) tau_F L^2 per free entry (public; at the given L)."""
        return self.curvature_noise_sd_at(self.grad_clip)

    @property
    def eigen_floor(self) -> float:
        """The eigenvalue floor of the curvature (given, else the released noise's scale; public; at the given L)."""
        return self.eigen_floor_at(self.grad_clip)

    def describe(self) -> dict[str, Any]:
        """Public description for the attrs (options and noise, no data-dependent value)."""
        p = self.privacy.parameters
        clip = self.clip
        given = {k: v for k, v in self.options.items() if v is not None}
        if clip is None:
            for key in ("clip_quantile", "clip_share", "clip_rate"):
                given.pop(key, None)
        return {**given, **(clip.describe() if clip is not None else {}),
                "tau_anchor": p["tau_anchor"], "tau_gradient": p["tau_gradient"], "tau_curvature": p["tau_curvature"],
                "gradient_noise_sd": self.gradient_noise_sd, "curvature_noise_sd": self.curvature_noise_sd,
                "curvature_form": "full" if self.full_curvature else "diagonal", "eigen_floor": self.eigen_floor}

    def __str__(self) -> str:
        return (f"Run plan: dp-laplace, {self.chains} x {self.iter_sampling} closed-form draws, N = {self.n_rows} "
                f"rows, dimension {self.dim}; budget epsilon = {self.epsilon:g}, delta = {self.delta:g} spent on "
                f"{int(self.options['anchor_steps'])} DP-GD steps, G~ (noise sd {self.gradient_noise_sd:.4g}) and "
                f"{'F~' if self.full_curvature else 'diag F~'} (noise sd {self.curvature_noise_sd:.4g})")


def _phases(options: Mapping[str, Any], full: bool) -> list[Phase]:
    """The three releases as phases of one accounting, all scaled by one noise scale s."""
    steps, points = int(options["anchor_steps"]), int(options["newton_steps"])
    adaptive = options.get("clip", "fixed") == "adaptive"
    clip_share = float(options["clip_share"]) if adaptive else 0.0
    shares = {k: float(options[k]) * (1.0 - clip_share) for k in SHARES}  # the counts' share comes off the top
    names = ("tau_anchor", "tau_gradient", "tau_curvature") + (("tau_clip",) if adaptive else ())

    def taus(s: float) -> dict[str, float]:
        out = {"tau_anchor": s * math.sqrt(steps / shares["laplace_anchor_share"]),
               "tau_gradient": s * math.sqrt(points / shares["laplace_gradient_share"]),
               "tau_curvature": s * math.sqrt(points / shares["laplace_curvature_share"])}
        if adaptive:  # a count has sensitivity 1: tau_clip is the count's noise sd
            out["tau_clip"] = s * math.sqrt(steps / clip_share)
        return out

    def phase(name: str, key: str, note: str, count: int) -> Phase:
        decl = NoiseDeclaration(parameters=taus, releases=lambda p: [gaussian_release(name, p[key], note=note)],
                                noise_names=names)
        return Phase(decl, 1, count)

    what = "its upper triangle" if full else "its diagonal"
    counts = [phase(CLIP_RELEASE, "tau_clip", "sensitivity 1 (a count); one per DP-GD step", steps)] if adaptive else []
    return [phase(STEP_RELEASE, "tau_anchor", "sigma = 2 tau L_t; one release per DP-GD step", steps), *counts,
            phase(GRADIENT_RELEASE, "tau_gradient", "sigma = 2 tau L; one release per Newton point", points),
            phase(CURVATURE_RELEASE, "tau_curvature",
                  f"sigma = sqrt(2) tau L^2 on {what} (sensitivity sqrt(2) L^2); one release per Newton point",
                  points)]


def validate_laplace_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The dp-laplace options checked and merged with the defaults (``ValueError`` names the option and fix)."""
    if options.get("grad_clip") is None:
        raise ValueError("algorithm 'dp-laplace' needs a public per-row gradient bound: give grad_clip=L (the L2 "
                         "norm every row's log-likelihood gradient is clipped to, on the unconstrained scale)")
    check_clip_request(options, LAPLACE)
    cfg = LAPLACE_SPEC.validate(options)
    total = math.fsum(cfg[k] for k in SHARES)
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"laplace_anchor_share + laplace_gradient_share + laplace_curvature_share must sum to 1 "
                         f"(the whole budget), got {total:.6g}; give all three")
    return cfg


def plan_laplace(n_rows: int, dim: int, *, epsilon: float, delta: float, chains: int = 4,
                 iter_warmup: int | None = None, iter_sampling: int | None = None,
                 run_options: Mapping[str, Any] | None = None, **options: Any) -> LaplacePlan:
    """The :class:`LaplacePlan` from public inputs only (N, dim, budget, options); calibrates the three releases
    in one PLD so that they spend the whole budget. ``run_options``: chain options given by the caller (refused:
    closed-form draws have no step size or metric)."""
    refuse_chain_tuning(LAPLACE, run_options, "draws in closed form")
    if iter_warmup not in (None, 0):
        raise ValueError(f"algorithm 'dp-laplace' has no warmup (its draws are exact draws of its Gaussian); give "
                         f"iter_warmup=0 or None, got {iter_warmup!r}")
    cfg = validate_laplace_options(options)
    if int(n_rows) < 1 or int(dim) < 1:
        raise ValueError(f"dp-laplace needs N >= 1 rows and dimension >= 1, got N = {n_rows}, dim = {dim}")
    full = int(dim) <= int(cfg["full_curvature_max_dim"])
    privacy = calibrate_phases(_phases(cfg, full), epsilon=epsilon, delta=delta, algorithm=LAPLACE)
    return LaplacePlan(options=cfg, n_rows=int(n_rows), dim=int(dim), epsilon=float(epsilon), delta=float(delta),
                       chains=int(chains), iter_sampling=int(iter_sampling or DEFAULT_DRAWS), privacy=privacy)


@dataclasses.dataclass(frozen=True)
class LaplaceRelease:
    """The mechanism outputs of a dp-laplace run (publishable): the last Newton point theta_hat, G~ and F~ there
    (matrix or diagonal), and ``path``: the (point, G~, F~) of the earlier Newton points (theta_hat is the noisy
    Newton step from the last of them, post-processing)."""

    theta_hat: np.ndarray
    gradient: np.ndarray
    curvature: np.ndarray
    path: tuple = ()
    grad_clip: float | None = None  # L of G~ and F~ (L_f when adaptive; None: the plan's): public
    grad_clip_reason: str = "given"


def release_statistics(likelihood: RowLikelihood, plan: LaplacePlan, rng: np.random.Generator,
                       theta0: np.ndarray) -> LaplaceRelease:
    """Run the three mechanisms (the only place dp-laplace reads rows); nothing else is kept."""
    n, d, L = int(likelihood.n_rows), int(likelihood.dim), plan.grad_clip
    p = plan.privacy.parameters
    clip = plan.clip
    tracker = clip.tracker(n) if clip is not None else None
    theta_hat = noisy_gradient_ascent(
        likelihood, rng, theta0, clip=L, sampling_rate=1.0, tau=p["tau_anchor"],
        steps=int(plan.options["anchor_steps"]),
        learning_rate=float(plan.options["anchor_step"]) / (n * plan.curvature_clip),
        momentum=float(plan.options["anchor_momentum"]), clip_tracker=tracker,
        failure="the dp-laplace anchor (DP-GD) left the finite numbers; use a smaller anchor_step or a larger "
                "curvature_clip")
    reason = "given"
    if tracker is not None and clip is not None:  # frozen at L_f (a function of released counts) for the releases below
        L = float(tracker.bound)
        reason = clip_reason(clip, L)
    sd_gradient, sd_curvature = plan.gradient_noise_sd_at(L), plan.curvature_noise_sd_at(L)
    point, path = np.asarray(theta_hat, dtype=float), []
    gradient = curvature = np.empty(0)  # G~ and F~ at the current point: released by every pass (newton_steps >= 1)
    for k in range(int(plan.options["newton_steps"])):
        if k:  # the noisy Newton step from the previous point (post-processing of its releases)
            path.append((point, gradient, curvature))
            point = newton_point(point, gradient, curvature, likelihood, plan, grad_clip=L)
        _, grads = likelihood.row_log_lik_grad(point)
        grads = np.asarray(grads, dtype=float).reshape(n, d)
        gradient = mechanisms.clipped_gradient_sum(grads, L) + mechanisms.gaussian_noise(rng, sd_gradient, size=d)
        if plan.full_curvature:
            curvature = mechanisms.clipped_outer_product_sum(grads, L) + mechanisms.symmetric_gaussian_noise(
                rng, sd_curvature, d)
        else:
            curvature = mechanisms.clipped_squared_gradient_sum(grads, L) + mechanisms.gaussian_noise(
                rng, sd_curvature, size=d)
    return LaplaceRelease(theta_hat=point, gradient=gradient, curvature=curvature, path=tuple(path),
                          grad_clip=L, grad_clip_reason=reason)


def newton_point(point: np.ndarray, gradient: np.ndarray, curvature: np.ndarray, prior: Any,
                 plan: LaplacePlan, grad_clip: float | None = None) -> np.ndarray:
    """m = point + P^-1 (G~ + grad log p0(point)), P = floor(F~) + H0: the next Newton point (post-processing of
    released values and the data-free prior); ``grad_clip``: the (released) L of the releases, default the plan's."""
    g0, h0 = prior_gradient_hessian(prior.log_prior_grad, point)
    out = laplace_mean(theta_hat=point, gradient=gradient, curvature=curvature, prior_grad=g0, prior_hessian=h0,
                       floor=plan.eigen_floor_at(plan.grad_clip if grad_clip is None else grad_clip))
    if not np.all(np.isfinite(out)):
        raise FloatingPointError("a dp-laplace Newton step left the finite numbers; give a larger eigen_floor")
    return out


def draws_from_release(release: LaplaceRelease, plan: LaplacePlan, prior: Any, rng: np.random.Generator
                       ) -> np.ndarray:
    """Unconstrained draws (chains, iter_sampling, dim): post-processing of ``release`` with the data-free
    ``prior`` (anything with ``log_prior_grad``) and public randomness ``rng``."""
    g0, h0 = prior_gradient_hessian(prior.log_prior_grad, release.theta_hat)
    L = plan.grad_clip if release.grad_clip is None else float(release.grad_clip)
    flat = laplace_draws(theta_hat=release.theta_hat, gradient=release.gradient, curvature=release.curvature,
                         prior_grad=g0, prior_hessian=h0, gradient_noise_sd=plan.gradient_noise_sd_at(L),
                         curvature_noise_sd=plan.curvature_noise_sd_at(L), floor=plan.eigen_floor_at(L),
                         n_draws=plan.chains * plan.iter_sampling, rng=rng,
                         noise_aware=bool(plan.options["noise_aware"]))
    if not np.all(np.isfinite(flat)):
        raise FloatingPointError("dp-laplace draws are not finite; give a larger eigen_floor")
    return flat.reshape(plan.chains, plan.iter_sampling, plan.dim)


@dataclasses.dataclass(frozen=True)
class ExecutedLaplace:
    """What :func:`execute_laplace` returns: the release, the draws and their run record."""

    release: LaplaceRelease
    result: RunResult


def execute_laplace(plan: LaplacePlan, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
                    **_: Any) -> ExecutedLaplace:
    """Release the statistics (mechanism noise from its own generator) and draw (public randomness from
    another), both from ``seed`` (None: the OS cryptographic source); the random DP-GD start, when ``inits`` does
    not give it, comes from a third (``stan_dp.privacy.noise_source.stream``: one stream per purpose)."""
    rng = stream(seed, "mechanism noise", "dp-laplace")
    start, init_text = initial_points(inits, 1, plan.dim, [stream(seed, "chain starts", "dp-laplace")])
    release = release_statistics(likelihood, plan, rng, start[0])
    draws = draws_from_release(release, plan, likelihood, stream(seed, "posterior draws", "dp-laplace"))
    chains = [ChainResult(draws=draws[c], stats={}, warmup_draws=None, warmup_stats={}, n_warmup=0,
                          n_sampling=plan.iter_sampling, step_size=float("nan"), metric=np.ones(plan.dim),
                          init=release.theta_hat) for c in range(plan.chains)]
    result = RunResult(chains=chains, dim=plan.dim, iter_warmup=0, iter_sampling=plan.iter_sampling,
                       save_warmup=False, interrupted=False, seeded=seed is not None, metric_kind="none",
                       target_accept=float("nan"), initial_step_size=float("nan"), adapt_engaged=False,
                       init_description=f"DP-GD from {init_text}")
    return ExecutedLaplace(release, result)


def posterior_target(plan: LaplacePlan) -> str:
    """What the released draws target, in words (attrs ``posterior_target``)."""
    aware = ("noise-aware: the noise of G~ and F~ is redrawn for every draw from its public distribution, so "
             "intervals include the privacy noise" if plan.options["noise_aware"] else
             "NOT noise-aware (noise_aware=False): N(m, P^-1) at the released values; intervals do not include "
             "the privacy noise")
    return ("a Laplace-type (Gaussian) approximation of the posterior on the unconstrained scale, built from "
            "private statistics at a private anchor theta_hat: precision P = F~ (the empirical Fisher of clipped "
            "per-row gradients, projected to eigenvalues >= eigen_floor) plus minus the prior Hessian, mean "
            f"theta_hat + P^-1 (G~ + prior gradient); {aware}. It can mislead where the posterior is far from "
            "Gaussian on the unconstrained scale: skewed, multimodal or boundary posteriors at small N, where "
            "the clip bound binds for many rows, or where the model is misspecified (the Fisher of gradients "
            "then differs from the curvature).")


def publish_laplace(executed: ExecutedLaplace, plan: LaplacePlan, likelihood: RowLikelihood, *, model_name: str | None = None,
                    source_hash: str | None = None, debug: bool = False, **_: Any) -> Any:
    """ArviZ data of a dp-laplace run: constrained draws, the privacy report and attrs with the released
    statistics (mechanism outputs) and the target in words. No lp, no log-likelihoods (``debug`` is refused)."""
    if debug:
        raise ValueError(plan.debug_refusal)
    screen = screen_chains([executed.result.draws_array()], likelihood)
    record = RunRecord(LAPLACE, plan.describe(), plan.privacy.report(), plan=plan.privacy, model_name=model_name,
                       source_hash=source_hash, run_options={})
    fit = build_inference_data(executed.result, likelihood, record, screen=screen)
    attach_screen(fit, screen)
    release = executed.release
    report = plan.privacy.report()
    fit.attrs["privacy_guarantee"] = (
        f"The posterior group is ({float(report.epsilon):.6g}, {float(report.delta):.6g})-differentially private "
        f"with respect to {report.neighbouring_relation}: it is post-processing of {int(plan.options['anchor_steps'])} "
        "DP-GD releases, G~ and F~ (listed in privacy_mechanisms), composed in one PLD; any number of draws.")
    fit.attrs["laplace_theta_hat"] = json.dumps(release.theta_hat.tolist())
    fit.attrs["laplace_gradient"] = json.dumps(release.gradient.tolist())
    fit.attrs["laplace_curvature"] = json.dumps(np.asarray(release.curvature).tolist())
    fit.attrs["laplace_newton_path"] = json.dumps([[np.asarray(v).tolist() for v in step] for step in release.path])
    if plan.clip is not None and release.grad_clip is not None:  # the frozen adaptive bound (a function of
        L = float(release.grad_clip)  # released counts) and its noise sds
        fit.attrs["clip_bound"] = L
        fit.attrs["clip_bound_reason"] = release.grad_clip_reason
        fit.attrs["laplace_noise_sds_at_clip_bound"] = json.dumps(
            {"gradient": plan.gradient_noise_sd_at(L), "curvature": plan.curvature_noise_sd_at(L),
             "eigen_floor": plan.eigen_floor_at(L)})
    fit.attrs["posterior_target"] = posterior_target(plan)
    L = plan.grad_clip if release.grad_clip is None else float(release.grad_clip)
    floored = floored_directions(release.curvature, plan.eigen_floor_at(L))
    fit.attrs["laplace_floored_directions"] = floored
    if floored:
        warn(floored_curvature_message(floored, plan.dim, plan.eigen_floor_at(L)), ConvergenceWarning)
    # no convergence verdict: the draws are independent draws of the approximation (no chains to converge)
    fit.attrs["draw_dependence"] = INDEPENDENT_DRAWS
    return fit


def floored_curvature_message(floored: int, dim: int, floor: float) -> str:
    """The warning when the eigen floor replaces the released curvature in ``floored`` of ``dim`` directions."""
    return (f"dp-laplace: in {floored} of {dim} directions the released curvature is below its noise level (the "
            f"eigen floor {floor:.3g}): the curvature there is not known at this budget and the floor replaced "
            "it, so the released intervals along those directions are narrower than the privacy noise allows "
            "and stay near the private starting point: they may not cover. For honest (wider) intervals give a "
            "smaller eigen_floor; or put the parameters on comparable scales (e.g. centre covariates at a public "
            "value), spend a larger epsilon, or use algorithm='auto'.")


#: what R-hat and ESS mean for dp-laplace draws (attrs ``draw_dependence``; printed by ``stan-dp summary``)
INDEPENDENT_DRAWS = (
    "independent: dp-laplace draws are independent draws from a Gaussian built from the released statistics, "
    "split into 'chains' only for the layout. R-hat is near 1 and ESS near the number of draws by construction: "
    "they say nothing about convergence or accuracy (there are no chains to converge); the privacy noise and "
    "the Gaussian approximation are the sources of error (see posterior_target).")


def _plan_request(inputs: PlanInputs) -> LaplacePlan:
    """dp-laplace's plan of a request (the registry's entry point)."""
    check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
    return plan_laplace(inputs.n_rows, inputs.dim, epsilon=inputs.epsilon, delta=inputs.delta, chains=inputs.chains,
                        iter_warmup=inputs.iter_warmup, iter_sampling=inputs.iter_sampling,
                        run_options=chain_free_options(inputs.run_level), **inputs.options)


#: dp-laplace in the registry: closed-form draws from a few releases; its bound is an option
register(PlannedMethod(LAPLACE, validate_laplace_options, _plan_request, chain_free_option_names(LAPLACE_SPEC.names),
                       warms_up=False))
