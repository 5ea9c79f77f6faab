"""A forecast of the effective draws a named kernel can reach, from public inputs alone, before the budget is spent.

At a fixed whole-run budget the accept-test kernels (penalty MH, DP-HMC, DP-Fast MH) do not get more effective draws
from longer runs: the noise of each iteration grows like the square root of the number of iterations, the step that
keeps the noisy test's acceptance at its target shrinks in proportion, and a random walk's effective draws per
iteration fall like the square of the step. The forecast makes that arithmetic explicit for one planned run.

The model (per coordinate, in units of the posterior sd ``sd``; an isotropic Gaussian posterior that the chains
have reached, i.e. after the transient; a metric that matches the posterior's scale):

* a random-walk kernel (penalty MH, DP-Fast MH) proposes a move of u / sqrt(d) posterior sds per coordinate,
  norm sd u on the unconstrained scale. Its log acceptance ratio is the target's, N(-u^2 / 2, u^2) at
  stationarity, plus the mechanism's noise of sd s(sd u) and the penalty -s^2 / 2: the acceptance is
  A(u) = 2 Phi(-sqrt(u^2 + s^2) / 2). Penalty MH: s(m) = 2 tau_l c m, c the clip per unit move (``ratio_clip``,
  or the anchor-relative C). DP-Fast MH: the full-batch branch's sigma_2 2 c m, or the minibatch branch's
  sigma_1 2 log(1 + N c m / lambda) when the expected batch lambda + N c m stays below its limit K;
* DP-HMC moves ballistically, L leapfrog steps of eta u-units each with momentum p ~ N(0, I): a displacement of
  L eta per coordinate, and a log acceptance noise of variance d eta^2 [(L + 1) sd^2 sigma_g^2 + L^2 (2 tau_l c
  sd)^2], from the L + 1 noisy gradient kicks (noise sd sigma_g per coordinate) and the noisy ratio; eta is
  jittered uniformly below the adapted step (the kernel's Halton jitter);
* the metric: an adapted diagonal one (anchored runs, ``metric="diag"``) whitens the moves; the unit metric (the
  plain kernels' default) moves isotropically on the unconstrained scale, so the narrowest coordinate sets the
  acceptance and the widest mixes slowest (its draws are the forecast);
* the step is the one dual averaging settles on: the mean acceptance equals the run's ``target_accept``;
* the expected squared jump J per coordinate (in posterior variances) gives the lag-one autocorrelation
  rho = 1 - J / 2 of a Gaussian AR(1) chain and its effective draws per iteration (1 - rho) / (1 + rho);
  the forecast is that times chains x iter_sampling, at most chains x iter_sampling.

``sd`` from public inputs is the package's public scale guess sqrt(k d / (N L^2)) (``public_scale``), the posterior
sd when the rows' gradients fill the bound L evenly over the d coordinates. Real rows usually pull less than L, so
the real posterior is wider than the guess. Because the forecast falls with the posterior's width (like 1 / sd^2
for a plain kernel at a fixed clip, 1 / sd^4 for an anchored one, whose clip C grows with the scale), the figure
from public inputs alone is an upper bound in that sense; ``posterior_sd`` (from public data shaped like the
private rows, as ``stan_dp.advise`` uses) gives a realistic one, and a covariance matrix also the slowdown its
correlations bring to a diagonal metric (``_geometry``). ``benchmarks/bench_forecast.py`` checks both
against the bulk ESS the runs measure (``benchmarks/results/forecast_agreement.md``).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import numpy as np
from scipy import optimize, special

from ...privacy.fast_mh_bounds import (gaussian_noise_multiplier, minibatch_test_parameters,
                                      recommended_batch_limit)
from ...privacy.gaussian import gaussian_mu
from ...phases.public_scale import public_curvature_bound, public_metric

__all__ = ["FORECAST_KERNELS", "Forecast", "FEW_DRAWS", "forecast_ess", "forecast_plan", "kernel_ess_bound",
           "KERNEL_DRAWS_WANTED"]

#: the kernels the forecast covers (the accept-test kernels chosen by name)
FORECAST_KERNELS = ("penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full")
#: below this many forecast effective draws the run says so before it starts
FEW_DRAWS = 100
#: jitter quadrature: the DP-HMC step is uniform in (0, eta_max)
_JITTER = (np.arange(16) + 0.5) / 16.0


@dataclasses.dataclass(frozen=True)
class Forecast:
    """The forecast effective draws of a planned run (all chains, one coordinate) and what it rests on."""

    ess: float
    per_iteration: float
    posterior_sd: float
    scale_source: str  # "public guess" or "given"
    noise_per_unit_move: float  # the accept test's noise sd per unit move at the posterior's scale, in words' terms
    release_once: str  # where a release-once method qualifies, the words that point to it, else ""

    @property
    def few(self) -> bool:
        """Fewer than ``FEW_DRAWS`` effective draws forecast."""
        return self.ess < FEW_DRAWS

    def sentence(self) -> str:
        """The forecast in one line (stderr and ``attrs["forecast_reason"]``)."""
        scale = ("the public posterior-scale guess sqrt(k d / (N L^2)); rows that pull less than L give fewer"
                 if self.scale_source == "public guess" else "the given posterior sd")
        text = (f"about {self.ess:.3g} effective draws forecast over all chains ({self.per_iteration:.2g} per "
                f"sampling iteration, at {scale})")
        if self.few:
            text += (f": fewer than {FEW_DRAWS}, too few to report; at a fixed budget a longer run does not help. "
                     + (self.release_once or "More rows or a larger epsilon do"))
        return text


def _acceptance(total_sd: Any) -> Any:
    """2 Phi(-v / 2): the mean acceptance of a log ratio N(-v^2 / 2, v^2) (target and penalty-corrected noise)."""
    return 2.0 * special.ndtr(-0.5 * total_sd)


def _settle(mean_accept: Callable[[float], float], target: float, high: float = 1e3) -> float:
    """The step at which the mean acceptance equals ``target`` (dual averaging's fixed point); decreasing in it."""
    if mean_accept(high) >= target:
        return high
    return float(optimize.brentq(lambda x: mean_accept(x) - target, 1e-12, high, xtol=1e-14, rtol=1e-10))


def _per_iteration(jump: float) -> float:
    """Effective draws per iteration of a Gaussian AR(1) chain whose expected squared jump is ``jump`` variances."""
    jump = min(max(jump, 0.0), 2.0)
    return jump / (4.0 - jump)


def _random_walk(noise: Callable[[float], float], dim: int, scale: float, weight: float, target: float) -> float:
    """J of a random walk whose accept test carries noise of sd ``noise(m)`` at a move of norm m = scale u, u the
    move in posterior sds (the target's log ratio has variance u^2); ``weight`` converts u^2 / d into the slowest
    coordinate's squared jump (1 when the metric matches the posterior's scale)."""
    def accept(u: float) -> float:
        return float(_acceptance(math.sqrt(u * u + noise(scale * u) ** 2)))

    u = _settle(accept, target)
    return weight * u * u / dim * accept(u)


def _hmc(steps: int, grad_noise: float, ratio_noise: float, dim: int, scale: float, weight: float,
         target: float) -> float:
    """J of DP-HMC (module doc), eta uniform below the settled step; ``scale``: the rms posterior sd in the
    metric's units (the gradient noise and the move are measured in them), ``weight`` as for a random walk."""
    slope = math.sqrt(dim) * scale * math.sqrt((steps + 1) * grad_noise ** 2 + (steps * ratio_noise) ** 2)

    def accept(eta: float) -> float:
        return float(np.mean(_acceptance(_JITTER * eta * slope)))

    eta = _settle(accept, target, high=10.0)
    h = _JITTER * eta
    return weight * float(np.mean((steps * h) ** 2 * _acceptance(h * slope)))


def _geometry(posterior: Any, metric: str) -> tuple[np.ndarray, float, float, float, float]:
    """(sd per coordinate, the random walk's scale and weight, DP-HMC's scale and weight) for a posterior given by
    its sds (one or one per coordinate) or its covariance matrix Sigma, under the run's metric W^2 (the posterior's
    variances for an adapted "diag" metric, 1 for the unit metric).

    Moves are isotropic in the coordinates x / W, where the posterior's covariance is S = W^-1 Sigma W^-1. A
    random walk's log target ratio then has variance h^2 tr(S^-1) at a step h per coordinate, and its slowest
    direction (the largest eigenvalue of S) gets h^2 A / lambda_max of its variance per iteration: scale
    sqrt(sum W^2 / tr(S^-1)) turns u into the move's norm and weight d / (tr(S^-1) lambda_max) turns u^2 / d into
    that direction's jump. DP-HMC's noise grows with the move's norm Lh sqrt(sum W^2) and its slowest direction
    gets (L h)^2 A / lambda_max. A diagonal Sigma with the diag metric gives S = I (scale the rms sd, weight 1)."""
    given = np.asarray(posterior, dtype=float)
    cov = given if given.ndim == 2 else np.diag(np.atleast_1d(given) ** 2)
    sd = np.sqrt(np.diag(cov))
    w = np.ones_like(sd) if metric == "unit" else sd
    s = cov / np.outer(w, w)
    eig = np.linalg.eigvalsh(0.5 * (s + s.T))
    trace_inv = float(np.sum(1.0 / eig))
    widest = float(eig[-1])
    return (sd, math.sqrt(float(np.sum(w * w)) / trace_inv), sd.size / (trace_inv * widest),
            float(np.sqrt(np.mean(w * w))), 1.0 / widest)


def _fast_mh_noise(n_rows: int, clip: float, epsilon_iteration: float, delta_iteration: float,
                   full_batch_only: bool, options: dict[str, Any]) -> Callable[[float], float]:
    """s(m) of DP-Fast MH's noisy test at a move of norm m (the branch its expected batch size picks)."""
    sigma_2 = gaussian_noise_multiplier(epsilon_iteration, delta_iteration)
    if full_batch_only:
        return lambda m: sigma_2 * 2.0 * clip * m
    k = options.get("batch_limit") or recommended_batch_limit(epsilon_iteration, delta_iteration, n_rows)
    lam = options.get("lam") or k / 2.0
    total = n_rows * clip
    eps_m, delta_m = minibatch_test_parameters(epsilon_iteration, delta_iteration, k, clip, total)
    sigma_1 = gaussian_noise_multiplier(eps_m, delta_m) if delta_m > 0.0 else math.inf

    def noise(m: float) -> float:
        if lam + total * m < k:
            return sigma_1 * 2.0 * math.log1p(total * m / lam)
        return sigma_2 * 2.0 * clip * m

    return noise


def forecast_ess(algorithm: str, *, n_rows: int, dim: int, chains: int, iter_sampling: int, noise: dict[str, Any],
                 clip: float, posterior_sd: Any, target_accept: float, metric: str = "diag",
                 options: dict[str, Any] | None = None) -> Forecast:
    """The forecast (module doc) for ``algorithm`` from public inputs: N, d, the run lengths, the calibrated noise
    (``noise``: the privacy plan's parameters: tau_l, tau_g, leapfrog_steps, epsilon_iteration, delta_iteration),
    the clip per unit move ``clip`` the accept test applies (c: ``ratio_clip``, ``row_bound`` or the anchor-relative
    C), the posterior sd (one number, or one per coordinate) or covariance matrix, the run's target acceptance and
    metric ("unit" or an
    adapted "diag"; the slowest coordinate's draws are forecast). ``options``: the kernel's options (DP-HMC's
    ``grad_clip``, DP-Fast MH's ``batch_limit`` and ``lam``)."""
    options = dict(options or {})
    jumps = _JUMPS.get(algorithm)
    if jumps is None:
        raise ValueError(f"no forecast for {algorithm!r}; it covers {', '.join(FORECAST_KERNELS)}")
    geometry = _geometry(posterior_sd, metric)
    jump, per_unit = jumps(algorithm, geometry, n_rows=n_rows, dim=dim, noise=noise, clip=clip,
                           target_accept=target_accept, options=options)
    sd = geometry[0]
    rate = _per_iteration(jump)
    draws = chains * iter_sampling
    return Forecast(ess=min(rate * draws, float(draws)), per_iteration=rate, posterior_sd=float(np.max(sd)),
                    scale_source="given", noise_per_unit_move=per_unit, release_once="")


def _penalty_jump(algorithm: str, geometry: tuple, *, dim: int, noise: dict[str, Any], clip: float,
                  target_accept: float, **_: Any) -> tuple[Any, float]:
    """Penalty MH: a random walk whose accept test's noise grows with the move (2 tau_l c per unit)."""
    _, scale, weight, _, _ = geometry
    tau_l = float(noise["tau_l"])
    jump = _random_walk(lambda m: 2.0 * tau_l * clip * m, dim, scale, weight, target_accept)
    return jump, 2.0 * tau_l * clip


def _hmc_jump(algorithm: str, geometry: tuple, *, dim: int, noise: dict[str, Any], clip: float,
              target_accept: float, options: dict[str, Any], **_: Any) -> tuple[Any, float]:
    """DP-HMC: leapfrog moves with noisy gradients and a noisy accept test."""
    _, _, _, hmc_scale, hmc_weight = geometry
    grad_clip = options.get("grad_clip")
    g_clip = clip if grad_clip is None or options.get("diff_clip") else min(float(grad_clip), clip)
    grad_noise = 2.0 * float(noise["tau_g"]) * g_clip
    per_unit = 2.0 * float(noise["tau_l"]) * clip
    jump = _hmc(int(noise["leapfrog_steps"]), grad_noise, per_unit, dim, hmc_scale, hmc_weight, target_accept)
    return jump, per_unit


def _fast_mh_jump(algorithm: str, geometry: tuple, *, n_rows: int, dim: int, noise: dict[str, Any], clip: float,
                  target_accept: float, options: dict[str, Any]) -> tuple[Any, float]:
    """DP-Fast MH (minibatch or full batch): a random walk whose accept bit's noise the mechanism sets."""
    _, scale, weight, _, _ = geometry
    fmh = _fast_mh_noise(n_rows, clip, float(noise["epsilon_iteration"]), float(noise["delta_iteration"]),
                         _FULL_BATCH[algorithm], options)
    return _random_walk(fmh, dim, scale, weight, target_accept), fmh(scale) / scale


#: a kernel's jump model: (expected squared jump in variances, accept-test noise per unit move)
JumpModel = Callable[..., tuple[Any, float]]
#: each forecast kernel's jump model; DP-Fast MH's full-batch variant by name
_JUMPS: dict[str, JumpModel] = {"penalty": _penalty_jump, "dp-hmc": _hmc_jump, "dp-fast-mh": _fast_mh_jump,
          "dp-fast-mh-full": _fast_mh_jump}
_FULL_BATCH = {"dp-fast-mh": False, "dp-fast-mh-full": True}


def release_once_words(linear: bool) -> str:
    """Where to go when a kernel cannot reach enough draws: a method that releases its statistics once."""
    if linear:
        return ("This is a normal linear program: algorithm='dp-ssp' releases its sufficient statistics once and "
                "samples their noise-aware posterior as long as it takes (algorithm='auto' picks it).")
    return ("A method that releases its statistics once and then samples as long as it takes does better here: "
            "algorithm='auto' chooses among them and the kernels from public inputs.")


def _gradient_bound(plan: Any) -> float | None:
    options = plan.options
    for key in ("grad_clip", "ratio_clip", "row_bound"):
        if options.get(key) is not None:
            return float(options[key])
    return None


def forecast_plan(plan: Any, posterior_sd: Any = None, *, linear: bool = False) -> Forecast | None:
    # posterior_sd: None, one sd, one per coordinate, or a (d, d) covariance matrix (its correlations slow a
    # diagonal metric's slowest direction; ``_geometry``)
    """The forecast of a kernel plan (``stan_dp.methods.kernels.kernel_run.RunPlan``) of a ``FORECAST_KERNELS`` algorithm, else
    None. ``posterior_sd``: a public posterior sd per coordinate (e.g. from public data); None takes the public
    guess sqrt(k d / (N L^2)) with L the anchor's bound, else the kernel's gradient or ratio bound. ``linear``: the
    program is a normal linear regression (the pointer names dp-ssp). Public inputs only: the plan is."""
    if plan.algorithm not in FORECAST_KERNELS:
        return None
    n, d = int(plan.n_rows), int(plan.dim)
    anchor = plan.anchor
    bound = anchor.grad_clip if anchor is not None else _gradient_bound(plan)
    if bound is None:
        return None
    k = getattr(anchor, "rows_per_unit", None)
    guess = float(np.sqrt(public_metric(n, d, bound, k)[0]))
    given = None if posterior_sd is None else np.asarray(posterior_sd, dtype=float)
    if given is None:
        sd = np.full(d, guess)
    elif given.ndim == 2:
        sd = given
    else:
        sd = np.broadcast_to(given, (d,))
    rms_sd = float(np.sqrt(np.mean(np.diag(sd) if sd.ndim == 2 else sd * sd)))
    options = dict(plan.options)
    if anchor is not None:
        clip = anchor.public_diff_clip(n, d)
        if posterior_sd is not None and anchor.options["diff_clip"] is None and anchor.tau_curvature is not None:
            clip = clip * rms_sd / guess  # the released Fisher sets C's scale
        options["diff_clip"] = clip
    else:
        clip = float(options.get("ratio_clip") or options.get("row_bound") or bound)
    forecast = forecast_ess(plan.algorithm, n_rows=n, dim=d, chains=plan.chains, iter_sampling=plan.iter_sampling,
                        noise=dict(plan.privacy.parameters), clip=clip, posterior_sd=sd,
                        target_accept=float(plan.settings.target_accept), options=options,
                        metric="unit" if isinstance(plan.settings.metric, str) and plan.settings.metric == "unit"
                        else "diag")
    return dataclasses.replace(forecast, scale_source="public guess" if posterior_sd is None else "given",
                               release_once=release_once_words(linear))


#: below this many effective draws forecast for an iterative kernel, auto prefers a release-once method that
#: qualifies (400: the bulk and tail ESS az.summary asks of 4 chains)
KERNEL_DRAWS_WANTED = 400


def kernel_ess_bound(*, epsilon: float, delta: float, posterior_sd: np.ndarray, grad_clip: float,
                     kernel_share: float = 0.56, anchor_radius: float = 1.5,
                     rows_per_unit: int | None = None) -> float:
    """About the most effective draws (all chains together) an anchored iterative kernel can reach with the whole
    budget, from public inputs: ESS ~ mu_k^2 / (C^2 sd^2).

    Why: a kernel's mechanism adds noise of sd proportional to its clip C per unit of move, and the whole run's
    Gaussian-DP budget mu_k (its share of the budget) pays for the sum of squared moves it can make without the
    noise taking over: for Langevin-type moves that is about mu_k^2 / C^2 of Langevin time in the program's
    coordinates, whatever the step or the length, and one effective draw needs about the posterior's variance
    sd^2 of it (its slowest coordinate). An anchored run clips the change of a row's gradient since the anchor,
    C = K r sqrt(sum sd^2) with K = L^2 / (4 k) the per-row curvature bound and r the anchor's radius; so the
    bound grows like N^2 as the posterior narrows. ``posterior_sd``: the posterior sds from a public design
    assumption (the one the release-once price uses, so that both forecasts rest on one assumption)."""
    sd = np.asarray(posterior_sd, dtype=float).ravel()
    mu2 = (gaussian_mu(float(epsilon), float(delta)) ** 2) * float(kernel_share)
    clip = public_curvature_bound(float(grad_clip), rows_per_unit) * float(anchor_radius) * float(
        np.sqrt(np.sum(sd * sd)))
    return float(mu2 / (clip * float(np.max(sd))) ** 2)
