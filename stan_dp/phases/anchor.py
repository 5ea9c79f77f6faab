"""Anchored sampling: a private anchor, then sensitivity relative to it.

Why. With a fixed per-row bound L every kernel pays, at every step, for the worst-case change of one row's
gradient (or log-likelihood ratio), near the posterior as much as far from it; the whole budget then buys only
about mu^2 / (2 L^2) of Langevin time. Near the posterior rows barely differ in how their gradients CHANGE:
g_i(theta) - g_i(theta_hat) is bounded by a curvature bound K times ||theta - theta_hat||. An anchored run
spends part of the budget once on where the posterior is, then runs the kernel on the small differences.

Penalty MH, DP-HMC and DP-Fast MH chosen by name run anchored by default when the caller gives a public per-row
gradient bound and no ``anchor``, and the per-row curvature bound the anchor rests on is known (given as
``curvature_clip``, or exact for a logistic program with declared covariate bounds); otherwise they run plain and
say why (``default_anchor``, which also says why a ratio clip alone does not anchor). ``anchor="none"`` keeps the
plain kernel.

The anchor phase (``anchor="dp-gd"``), released and accounted before the main run, in the run's one PLD:

1. ``theta_hat``: ``anchor_steps`` full-batch noisy clipped-gradient ascent steps from the public init
   (``noisy_gradient_ascent``, heavy-ball momentum, step 1 / (N K) from the public curvature bound K), the
   average of the second half of the iterates; one Gaussian mechanism per step on sum_i clip_L(g_i(theta_t)),
   noise sd 2 tau_a L.
2. ``G~ = sum_i clip_L(g_i(theta_hat)) + N(0, (2 tau_G L)^2 I)``: one Gaussian mechanism.
3. optionally (``anchor_curvature_share > 0``) a diagonal Fisher ``F~ = sum_i clip_L(g_i(theta_hat))^2 +
   N(0, (sqrt(2) tau_F L^2)^2 I)`` (replacing one row moves the sum of squared clipped gradients by at most
   sqrt(2) L^2, ``mechanisms.curvature_sensitivity``), which sets the initial metric and the posterior scale of
   the clip rule.
4. (``clipped_count_share > 0``, default 0.02) the number of rows whose gradient L clips at the anchor, N minus a
   noisy count of the rows with ||g_i(theta_hat)|| <= L (sensitivity 1, noise sd tau_c): released in the attrs
   (``anchor_clipped_rows``), and a warning with that figure when it exceeds 5 % of the rows (and two noise sds)
   under a fixed bound. A bound that binds for many rows biases G~ and the draws, and nothing else says so.

The noise multipliers of the phase come from public shares of the budget in Gaussian-DP terms (the share of
rho = mu_GDP^2 / 2, which adds up over Gaussian mechanisms): ``anchor_share`` for step 1 (default 0.2),
``anchor_gradient_share`` for step 2 (0.6), ``anchor_curvature_share`` for step 3 (0), ``clipped_count_share`` for
step 4 (0.02); the main run's noise is then calibrated so that the composition of everything spends exactly the
budget.

The main run: any clipped kernel on ``AnchoredLikelihood``, whose rows are
    l~_i(theta) = l_i(theta) - g_i(theta_hat) . theta        (gradient g_i(theta) - g_i(theta_hat))
and whose data-free part is log p0(theta) + (G~ - t) . theta (a released vector t-tilted, see below), with the
kernel's clip bound replaced by C (``diff_clip``). Every mechanism then clips the anchor-relative per-row terms:
gradient differences to norm C, ratio remainders l_i(theta') - l_i(theta) - g_i(theta_hat) . (theta' - theta) to
+-C ||theta' - theta||. Substituting one row moves each clipped sum by at most 2 C (2 C ||theta' - theta||), for
any model: a C that binds costs accuracy, never privacy. The per-row anchor gradients g_i(theta_hat) are a
private cache (N x dim), never released.

What the released posterior targets. When nothing clips, sum_i l~_i(theta) + G~ . theta = sum_i l_i(theta) +
xi . theta + const with xi ~ N(0, sigma_G^2 I) the noise of G~ (sigma_G = 2 tau_G L): the chains target the
posterior tilted by xi . theta, whose centre is shifted by about Sigma xi (Sigma the posterior covariance). The
distribution of xi is public, so the noise-aware posterior of theta is that of a chain draw minus Sigma xi: to first
order in the tilt, mean m (the chains' mean) and covariance Sigma + sigma_G^2 Sigma^2. ``noise_aware=True``
(default) releases y = m + D (x - m) for every chain draw x, D diagonal with D_jj^2 = 1 + sigma_G^2 (Sigma^2)_jj /
Sigma_jj, m and Sigma the mean and covariance of the chains' draws pooled over chains (``noise_aware_shifts``, in
``stan_dp.phases.noise_aware``, which also widens that variance by its Monte Carlo uncertainty when the chains'
effective sample size is small): each coordinate gets the noise-aware mean and variance, so that credible intervals reflect
the privacy noise; the chains' own draws are released too (group ``chain_posterior``) and convergence is judged on them.
``noise_aware=False`` releases the chains' draws as they are.

Why a per-coordinate scaling. The released ``posterior`` group is what ``az.summary`` reads, and its R-hat and ESS
must be no better than the chains' own. Each released coordinate is an increasing affine function of the same
coordinate of the chains' draws, common to all chains: every chain keeps its autocorrelation and its offset from
the others (scaled like its spread), so R-hat and ESS, ranked or not, are exactly the chains' on the
unconstrained scale, and on the constrained scale for every scalar whose constraint acts elementwise (bounds,
offsets and multipliers). Two alternatives were measured on AR(1) chains with one coordinate that does not mix
(R-hat 1.215) and a 1.6x noise-aware sd inflation: (a) an independent shift Sigma t, t ~ N(0, sigma_G^2 I) drawn
afresh per draw (the first version) adds white noise, which reads as mixing: R-hat 1.077, and R-hat 1.00-1.06 on
real runs whose chains had 1.3-2.8; any random shift independent of the chains, per draw or per chain, dilutes
their disagreement the same way; (b) the full affine map B = (I + sigma_G^2 Sigma)^(1/2) matches the whole noise-aware
covariance but mixes coordinates, and the stuck coordinate borrows the mixing of the others: R-hat 1.118. The price
of the diagonal map: the released correlations are the chains' (the released covariance is D Sigma D, not
Sigma + sigma_G^2 Sigma^2 off the diagonal), so the spread of a combination of parameters is noise-aware only to
the extent that the two agree (exactly when sigma_G^2 Sigma is a multiple of the identity on the coordinates
involved; closely when the posterior correlations are weak, e.g. with centred covariates).

Released draws are screened first (``stan_dp.output.plausible``): a chain whose draws are not finite or absurd
under the prior is left out of every released group, and m and Sigma come from the chains kept. When sigma_G^2
Sigma is large (chains that have not found the posterior) the widening D can carry draws beyond what the prior
allows; the run then applies the largest share of D - I that keeps every released draw plausible and says so
(``stan_dp.methods.kernels.kernel_run.released_draws``): the first-order correction does not hold there.

C without looking at the data (``diff_clip`` unless given): C = K r, K the public per-row curvature bound
(``curvature_clip``, default L^2 / 4, exact for a logistic row with ||(1, x_i)|| <= L; an assumption for other
models that costs accuracy, never privacy, when wrong) and r = ``anchor_radius`` (default 3) times the posterior
scale sqrt(sum_j m_j), with m_j the released diagonal Fisher's inverse when there is one, else the public
d / (N L^2) of the SG kernels. With a privacy unit of at most k rows (``max_rows_per_unit = k``, public) a "row"
is a unit and L its bound: the defaults become K = L^2 / (4 k) and k d / (N L^2), N the number of units, since a
unit's curvature and Fisher are sums of k rows' (``stan_dp.phases.public_scale``; the DP-GD step 1 / (N K) follows).

``clip="adaptive"`` (``stan_dp.phases.adaptive_clip``): the DP-GD steps of step 1 also release noisy counts that move
L towards a private quantile of the per-row gradient norms (``clip_share`` of the budget); the bound is then
frozen at L_f and steps 2 and 3 clip at L_f (G~'s noise sd is 2 tau_G L_f, F~'s sqrt(2) tau_F L_f^2). The public scale
rules keep the given L: the C rule, the public metric d / (N L^2) and the kernel's ``grad_clip`` (they need a true
bound, which a quantile is not: with L_f in them, wells at epsilon 3 went from 6 to 94 sd error). L_f is released. A
quantile bound clips some rows at the anchor by design: G~ is then biased (see that module). With
``diff_clip_steps`` > 0 (and no ``diff_clip``) C itself also follows a private quantile: noisy counts of the rows
whose anchor difference at public probe points at the rule's radius is within C_t, from the rule's C, capped at
max(C, 2 L), their own phase (``diff_clip_share``); the frozen C_f is the kernel's ``diff_clip`` (that module's doc,
with measurements: off by default).
"""
from __future__ import annotations

import dataclasses
import math
import threading
from typing import Any, Callable, Mapping, cast

import numpy as np

from ..likelihood import DataFreeFromBase, KeepsAnchor, PartialAnchorSums, RowLikelihood, offers
from ..privacy import gaussian_rho, mechanisms
from ..privacy.events import NoiseDeclaration, Phase, gaussian_release
from ..samplers.options import Option, OptionSpec
from .adaptive_clip import (CLIP_OPTIONS, DIFF_CLIP_OPTION_NAMES, DIFF_CLIP_OPTIONS, ClipPlan, check_clip_request,
                            clip_plan, clip_reason, diff_clip_cap, diff_clip_plan, diff_clip_probes, diff_clip_reason,
                            difference_norms)
from .dp_gd import noisy_gradient_ascent
from .public_scale import public_curvature_bound, public_metric, units_factor

__all__ = ["ANCHOR_SPEC", "AnchorPlan", "AnchorRelease", "AnchoredLikelihood", "DefaultAnchor", "split_anchor",
           "plan_anchor", "run_anchor", "anchor_row_gradients", "anchor_statistics", "ANCHOR_CLIP_OPTIONS", "DEFAULT_ANCHORED",
           "GRADIENT_BOUND_OPTIONS", "clipped_rows_message", "curvature_source", "default_anchor"]

ANCHOR_KINDS = ("none", "dp-gd")
#: the anchor kind that releases a private anchor
DP_GD_ANCHOR = ANCHOR_KINDS[1]


def asks_anchor(options: Mapping[str, Any]) -> bool:
    """Whether ``options`` ask for the private anchor (``anchor='dp-gd'``)."""
    return options.get("anchor") == DP_GD_ANCHOR
#: kernel options that hold a per-row gradient (Lipschitz) bound the anchor phase can use as L, in order
ANCHOR_CLIP_OPTIONS = ("grad_clip", "ratio_clip", "row_bound")
#: the kernels that run anchored by default when chosen by name with a public per-row gradient bound
DEFAULT_ANCHORED = ("penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full")
#: the anchor defaults of the accept-test kernels (``DEFAULT_ANCHORED``; others keep ``ANCHOR_SPEC``'s). Their
#: effective draws, not G~'s noise, limit them where they converge: at a fixed budget they get about mu_k^2 / (C^2
#: sd^2) draws (``stan_dp.methods.kernels.forecast``), mu_k the kernel's share of the budget, while G~'s tilt moves the posterior
#: by about 2 tau_G L sd, a few hundredths of a posterior sd on 100,000 rows at epsilon 10. So they give G~ 0.3 of
#: the budget instead of 0.6 and the DP-GD steps 0.1 instead of 0.2 (the kernel keeps about 0.56 instead of 0.16),
#: and take C over 1.5 posterior scales instead of 3 (half the accept test's noise; rows whose curvature is near the
#: bound K are clipped beyond 1.5 scales). Measured on 100,000 rows of AER Fertility at epsilon 10
#: (benchmarks/bench_large_named.py, benchmarks/results/large_named.md).
ACCEPT_TEST_ANCHOR_DEFAULTS = {"anchor_share": 0.1, "anchor_gradient_share": 0.3, "anchor_radius": 1.5}
#: the options that state a public per-row GRADIENT bound, in order; a default anchor needs one of them (a
#: log-likelihood-ratio clip, ``ratio_clip`` or ``row_bound``, is not taken: see ``default_anchor``)
GRADIENT_BOUND_OPTIONS = ("anchor_grad_clip", "grad_clip")

ANCHOR_STEP_RELEASE = "anchor: DP-GD clipped gradient sum"
ANCHOR_GRADIENT_RELEASE = "anchor: clipped gradient sum G~ at the anchor"
ANCHOR_CURVATURE_RELEASE = "anchor: clipped squared-gradient sum (diagonal Fisher) at the anchor"
ANCHOR_CLIPPED_RELEASE = "anchor: count of the rows whose gradient the bound clips at the anchor"
#: warn when the released count says the bound clips more than this fraction of the rows at the anchor
CLIPPED_WARN_FRACTION = 0.05

#: the default share of a diagonal Fisher release at the anchor, when ``fisher_share_rule`` turns it on
FISHER_SHARE = 0.02
#: ... which it does when that release's noise sd is at most this fraction of the public Fisher scale N L^2 / (k d)
FISHER_PRECISION = 1e-3

ANCHOR_SPEC = OptionSpec("anchor", [
    Option("anchor", "choice", "none", choices=ANCHOR_KINDS,
           doc="'dp-gd': release a private anchor (DP-GD) and the noisy clipped full-data gradient there, then run "
               "the kernel on anchor-relative rows with the small clip bound diff_clip; 'none': plain run. penalty, "
               "dp-hmc and dp-fast-mh(-full) chosen by name default to 'dp-gd' when a public per-row gradient bound "
               "(anchor_grad_clip, or dp-hmc's grad_clip) is given (default_anchor)"),
    Option("anchor_share", "real", 0.2, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget (in Gaussian-DP rho terms) spent on the DP-GD steps that find the anchor "
               "(penalty, dp-hmc, dp-fast-mh: 0.1)"),
    Option("anchor_gradient_share", "real", 0.6, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget spent on G~, the noisy clipped full-data gradient at the anchor (its noise "
               "tilts the released posterior; penalty, dp-hmc, dp-fast-mh: 0.3)"),
    Option("anchor_curvature_share", "real", None, low=0.0, high=1.0, high_open=True,
           none_means=f"{FISHER_SHARE} when that release is precise at the public scale (its noise sd at most "
                      f"{FISHER_PRECISION:g} of N L^2 / (k d)), else 0 (fisher_share_rule)",
           doc="share of the budget spent on a diagonal Fisher at the anchor (the initial metric and the "
               "posterior scale of C); 0: none"),
    Option("clipped_count_share", "real", 0.02, low=0.0, high=1.0, high_open=True,
           doc="share of the budget spent on a noisy count of the rows whose gradient the bound L clips at the "
               "anchor (released, and warned about when large); 0: no count"),
    Option("anchor_steps", "int", 100, low=2, doc="full-batch DP-GD steps that find the anchor"),
    Option("anchor_step", "real", 1.0, low=0.0, low_open=True,
           doc="DP-GD step in units of 1 / (N K), the largest step the public curvature bound K keeps stable"),
    Option("anchor_momentum", "real", 0.9, low=0.0, high=1.0, high_open=True,
           doc="heavy-ball momentum of the DP-GD steps (the curvature bound is pessimistic for typical rows: "
               "momentum crosses the resulting ill-conditioning about sqrt(K / curvature) times faster)"),
    Option("anchor_grad_clip", "real", None, low=0.0, low_open=True,
           none_means="the kernel's grad_clip (else ratio_clip, else row_bound)",
           doc="L: public per-row gradient L2 clip bound of the anchor phase"),
    Option("diff_clip", "real", None, low=0.0, low_open=True,
           none_means="curvature_clip x anchor_radius x the posterior scale",
           doc="C: clip bound of the anchor-relative per-row terms in the main run"),
    Option("curvature_clip", "real", None, low=0.0, low_open=True,
           none_means="L^2 / 4, or L^2 / (4 k) with a privacy unit of at most k = max_rows_per_unit rows",
           doc="K: public bound on a row's curvature (largest Hessian eigenvalue of l_i, unconstrained scale); "
               "L^2 / 4 is exact for a logistic row with ||(1, x_i)|| <= L"),
    Option("anchor_radius", "real", 3.0, low=0.0, low_open=True,
           doc="radius around the anchor, in posterior scales, within which the default C rarely binds (penalty, "
               "dp-hmc, dp-fast-mh: 1.5)"),
    Option("noise_aware", "bool", True,
           doc="shift every released draw by Sigma t, t drawn from G~'s public noise distribution, so that "
               "intervals reflect the privacy noise (False: release the chains' noise-tilted draws as they are)"),
    *CLIP_OPTIONS,
    *DIFF_CLIP_OPTIONS,
])


@dataclasses.dataclass(frozen=True)
class AnchorPlan:
    """A validated anchor phase and its noise, fixed from public quantities before any row is read."""

    kind: str
    options: Mapping[str, Any]
    grad_clip: float  # L
    curvature_clip: float  # K
    tau_steps: float
    tau_gradient: float
    tau_curvature: float | None
    clip: ClipPlan | None = None  # the adaptive clip bound (clip='adaptive'), or None
    diff: ClipPlan | None = None  # the private quantile of the anchor differences (diff_clip_steps > 0), or None
    tau_clipped: float | None = None  # noise sd of the clipped-row count (sensitivity 1), or None (no count)
    rows_per_unit: int | None = None  # k: the public cap on a privacy unit's rows (None: one row, or no cap)
    fisher_reason: str = ""  # why the diagonal Fisher is (or is not) released (``fisher_share_rule``)

    @property
    def shares(self) -> float:
        """The budget share (rho terms) of the whole anchor phase (the adaptive clip's counts included)."""
        o = self.options
        return float(o["anchor_share"] + o["anchor_gradient_share"] + o["anchor_curvature_share"]
                     + float(o.get("clipped_count_share") or 0.0)
                     + (self.clip.share if self.clip is not None else 0.0)
                     + (self.diff.share if self.diff is not None else 0.0))

    @property
    def gradient_noise_sd(self) -> float:
        """sigma_G = 2 tau_G L: the sd of G~'s noise per coordinate (public)."""
        return mechanisms.gradient_noise_sd(self.tau_gradient, self.grad_clip)

    def phases(self) -> list[Phase]:
        """The anchor phase's releases as fixed prefix phases of the run's one accounting."""
        def fixed(name: str, tau: float, note: str) -> NoiseDeclaration:
            return NoiseDeclaration(parameters=lambda s: {"tau": tau},
                                    releases=lambda p: [gaussian_release(name, p["tau"], note=note)],
                                    noise_names=("tau",))

        out = [Phase(fixed(ANCHOR_STEP_RELEASE, self.tau_steps, "sigma = 2 tau L; one release per DP-GD step"),
                     1, int(self.options["anchor_steps"]))]
        if self.clip is not None:  # the counts of the adaptive bound, one per DP-GD step
            out.append(self.clip.phase())
        out += [Phase(fixed(ANCHOR_GRADIENT_RELEASE, self.tau_gradient, "sigma = 2 tau L; released once"), 1, 1)]
        if self.tau_curvature is not None:
            out.append(Phase(fixed(ANCHOR_CURVATURE_RELEASE, self.tau_curvature,
                                   "sigma = sqrt(2) tau L^2 on the sum of squared clipped gradients (sensitivity "
                                   "sqrt(2) L^2); released once"), 1, 1))
        if self.tau_clipped is not None:
            out.append(Phase(fixed(ANCHOR_CLIPPED_RELEASE, self.tau_clipped,
                                   "sensitivity 1 (a count); released once"), 1, 1))
        if self.diff is not None:  # the anchor-difference counts, after theta_hat
            out.append(self.diff.phase())
        return out


    def public_metric(self, n_rows: int, dim: int) -> np.ndarray:
        """The public posterior variance guess k d / (N L^2) per coordinate (``stan_dp.phases.public_scale``), with the
        given L (also when the bound is adaptive: the rule needs a true bound) and k = ``rows_per_unit``."""
        return public_metric(n_rows, dim, self.grad_clip, self.rows_per_unit)

    def public_diff_clip(self, n_rows: int, dim: int) -> float:
        """C as the rule sets it from public quantities (the given ``diff_clip``, else K r sqrt(d * k d / (N L^2)));
        a released diagonal Fisher can change it at run time (the run-length rule uses this one)."""
        if self.options["diff_clip"] is not None:
            return float(self.options["diff_clip"])
        scale = float(np.sqrt(np.sum(self.public_metric(n_rows, dim))))
        return self.curvature_clip * float(self.options["anchor_radius"]) * scale

    def iterations(self) -> int:
        """Accounted anchor iterations (the DP-GD steps and the one or two releases at the anchor)."""
        steps = int(self.options["anchor_steps"])
        return (steps * (2 if self.clip is not None else 1) + 1 + (self.tau_curvature is not None)
                + (self.tau_clipped is not None)
                + (self.diff.steps if self.diff is not None else 0))

    def describe(self) -> dict[str, Any]:
        """Public description for the attrs (options, shares and noise; no data-dependent values)."""
        out = {k: v for k, v in self.options.items() if k != "diff_clip" or v is not None}
        out.update(anchor_grad_clip=self.grad_clip, curvature_clip=self.curvature_clip,
                   anchor_tau_steps=self.tau_steps, anchor_tau_gradient=self.tau_gradient,
                   anchor_gradient_noise_sd=self.gradient_noise_sd)
        if self.rows_per_unit is not None:
            out["anchor_rows_per_unit"] = int(self.rows_per_unit)
        if self.tau_curvature is not None:
            out["anchor_tau_curvature"] = self.tau_curvature
        if self.fisher_reason:
            out["anchor_fisher_reason"] = self.fisher_reason
        if self.tau_clipped is not None:
            out["clipped_count_noise_sd"] = self.tau_clipped
        if self.clip is not None:
            out.update(self.clip.describe())
        else:
            for key in ("clip_quantile", "clip_share", "clip_rate"):
                out.pop(key, None)
        if self.diff is not None:
            out.update(self.diff.describe())
        else:
            for key in DIFF_CLIP_OPTION_NAMES:
                out.pop(key, None)
        return out


def split_anchor(options: Mapping[str, Any], kernel_spec: OptionSpec, algorithm: str,
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Separate the anchor options from the kernel's and validate them. Returns (kernel options, anchor options
    or None when no anchor is asked for). ``diff_clip`` is an anchor option here (the anchor sets the kernel's)."""
    kernel_opts: dict[str, Any] = {}
    anchor: dict[str, Any] = {}
    for key, value in options.items():
        (anchor if key in ANCHOR_SPEC.names else kernel_opts)[key] = value
    check_clip_request(anchor, algorithm)
    if not anchor or anchor.get("anchor", "none") in (None, "none"):
        extra = sorted(k for k in anchor if k != "anchor")
        if extra:
            raise ValueError(f"options {', '.join(map(repr, extra))} configure an anchor, but anchor is not set; "
                             f"give anchor='dp-gd' (algorithm {algorithm!r})")
        return kernel_opts, None
    if "diff_clip" not in kernel_spec.names:
        raise ValueError(f"algorithm {algorithm!r} has no clipped per-row mechanism to anchor; anchor='dp-gd' "
                         f"applies to penalty, dp-hmc, dp-fast-mh(-full) and the SG kernels")
    try:
        cfg = ANCHOR_SPEC.validate(anchor)
    except ValueError as exc:
        raise ValueError(f"{exc} (algorithm {algorithm!r})") from None
    if algorithm in DEFAULT_ANCHORED:  # the accept-test kernels' own defaults, where the caller gave none
        cfg.update({k: v for k, v in ACCEPT_TEST_ANCHOR_DEFAULTS.items() if k not in anchor})
    if cfg["anchor_grad_clip"] is None:
        given = [v for v in (kernel_opts.get(k) for k in ANCHOR_CLIP_OPTIONS) if v is not None]
        if not given:
            raise ValueError(f"anchor='dp-gd' needs a public per-row gradient bound: give anchor_grad_clip, or the "
                             f"kernel's {' / '.join(k for k in ANCHOR_CLIP_OPTIONS if k in kernel_spec.names)} "
                             f"(algorithm {algorithm!r})")
        cfg["anchor_grad_clip"] = float(given[0])
    clip_share = cfg["clip_share"] if cfg["clip"] == "adaptive" else 0.0
    if cfg["clip"] == "adaptive" and cfg["diff_clip_steps"] > 0:
        if cfg["diff_clip"] is not None:
            raise ValueError(f"diff_clip_steps > 0 asks for a private quantile of the anchor differences, but "
                             f"diff_clip is given; give one or the other (algorithm {algorithm!r})")
        clip_share += cfg["diff_clip_share"]
    if (cfg["anchor_share"] + cfg["anchor_gradient_share"] + (cfg["anchor_curvature_share"] or 0.0)
            + cfg["clipped_count_share"] + clip_share >= 0.95):
        raise ValueError("anchor_share + anchor_gradient_share + anchor_curvature_share + clipped_count_share (+ "
                         "clip_share and diff_clip_share with clip='adaptive') must leave at least 5 % of the budget "
                         "to the main run (their sum must be below 0.95)")
    return kernel_opts, cfg


@dataclasses.dataclass(frozen=True)
class DefaultAnchor:
    """What the default did for a kernel chosen by name: anchored by default or not, and why in one line (the
    run's ``anchor_reason`` attr). Public: a function of the algorithm's name and which options were given."""

    by_default: bool
    reason: str
    line: str = ""  # the decision in a few words (the one stderr line); "" reads as the reason

    @property
    def short(self) -> str:
        """The one line the run prints on stderr."""
        return self.line or self.reason


def default_anchor(options: Mapping[str, Any], kernel_spec: OptionSpec, algorithm: str, *, warm_start: bool,
                   row_bounds: Any = None) -> tuple[dict[str, Any], DefaultAnchor | None]:
    """The options of a kernel chosen BY NAME with ``anchor='dp-gd'`` added when the default applies, and what
    the default did (None when it does not concern this request: another algorithm, or ``anchor`` given).

    The default applies to ``DEFAULT_ANCHORED`` when the caller gave no ``anchor`` and no warm start (both set
    the chains' starts), stated a public per-row gradient bound (``anchor_grad_clip``, or the kernel's own
    ``grad_clip``: ``GRADIENT_BOUND_OPTIONS``) AND the per-row curvature bound the anchor rests on is known
    (``curvature_source``): given as ``curvature_clip``, or exact for the program's family, which
    ``row_bounds`` (``stan_dp.stan.glm_program.RowBounds``, public: the program text) says only of a logistic
    regression whose covariates declare their bounds. ``anchor='none'`` keeps the plain kernel.

    Why the curvature bound decides. The anchor's DP-GD step 1 / (N K), its clip rule C = K r s and its metric
    all rest on K, a bound on one row's curvature; unless told otherwise the run takes K = L^2 / 4, a fact for a
    logistic row with ||(1, x)|| <= L and an assumption for anything else. On a normal linear regression (5,000
    rows, DP-HMC by name with grad_clip 40, ratio_clip 25, epsilon 2000) the anchored default landed 104
    posterior sds off with chain R-hat 2.99 where the plain kernel converged, because a normal row with a scale
    parameter has no such bound. So a named kernel is anchored by default only where K is known; elsewhere it
    runs plain, its reason says how to anchor it (``curvature_clip=K``, or ``anchor='dp-gd'`` to assume
    L^2 / 4), and anchor options given for the default (such as ``anchor_grad_clip``) are left unused and named.

    Why a ratio clip alone does not anchor. ``ratio_clip`` (and DP-Fast MH's ``row_bound``) clips the change of
    one row's log-likelihood per unit move. A ratio bound that held for EVERY pair of points would bound the
    gradient by the same number, but the kernels only ever apply it along their proposals: a random-walk move
    sees the gradient's component along one direction, so a ratio clip that rarely binds there can bind for the
    whole gradient (about sqrt(d) times larger for a random direction). In DP-HMC that is harmless (its leapfrog
    clips at the ratio clip, which changes the proposal, not the target); in an anchored run the anchor gradient
    G~ enters the target, so a binding L biases the draws. The package cannot tell which bound the caller meant,
    so it does not invent a gradient bound from a ratio clip: such a run stays unanchored and its reason says
    how to anchor it (``anchor_grad_clip=L``). Privacy is not the question (any public L is enforced by
    clipping); accuracy is.
    """
    if algorithm not in DEFAULT_ANCHORED or "anchor" in options:
        return dict(options), None
    if warm_start:
        return dict(options), DefaultAnchor(False, "not anchored: a warm start was given (it sets the chains' "
                                                   "starts, as an anchor would)")
    bounds = [k for k in GRADIENT_BOUND_OPTIONS if options.get(k) is not None
              and (k != "grad_clip" or k in kernel_spec.names)]
    if not bounds:
        return dict(options), DefaultAnchor(False, (
            "not anchored: no public per-row gradient bound was given (a log-likelihood-ratio clip does not bound "
            "the whole gradient); give anchor_grad_clip=L, a bound on one row's gradient norm, to run anchored "
            "(anchor='dp-gd'), or anchor='none' to say the plain kernel is meant"))
    curvature = curvature_source(options, row_bounds)
    if curvature is None:
        unused = sorted(k for k in options if k in ANCHOR_SPEC.names and k not in kernel_spec.names)
        plain = {k: v for k, v in options.items() if k not in unused}
        what = ("this program is not a recognised regression" if row_bounds is None
                else f"this program is a {row_bounds.family} regression" if row_bounds.family != "logistic"
                else "this logistic program does not declare every covariate's bounds")
        return plain, DefaultAnchor(False, (
            f"not anchored: the anchor needs a per-row curvature bound, known only for a logistic program with "
            f"declared covariate bounds, and {what}; give curvature_clip=K to anchor, or anchor='dp-gd' to assume "
            "K = L^2 / 4" + (f" (unused: {', '.join(unused)})" if unused else "")),
            f"not anchored ({what}, so no per-row curvature bound is known; give curvature_clip=K to anchor)")
    return {**options, "anchor": "dp-gd"}, DefaultAnchor(True, (
        f"anchored by default (anchor='dp-gd': a private DP-GD anchor and G~ first, then anchor-relative "
        f"sensitivity): {bounds[0]} bounds a row's gradient and {curvature}; anchor='none' runs the plain kernel"),
        f"anchored by default ({bounds[0]} given, {curvature.split(' (')[0]}); anchor='none' runs it plain")


def curvature_source(options: Mapping[str, Any], row_bounds: Any = None) -> str | None:
    """Where the anchor's per-row curvature bound K comes from, in words, when it is known: given as
    ``curvature_clip``, or exact for a logistic program with declared covariate bounds (``row_bounds``, the
    program's public ``stan_dp.stan.glm_program.RowBounds``: K = L^2 / 4); None otherwise. Public: the option
    names and the program text."""
    if options.get("curvature_clip") is not None:
        return f"curvature_clip = {float(options['curvature_clip']):g} bounds its curvature"
    if row_bounds is not None and row_bounds.family == "logistic" and row_bounds.derivable:
        return "K = L^2 / 4 bounds its curvature (exact for this logistic program, whose covariates declare bounds)"
    return None


def fisher_share_rule(cfg: Mapping[str, Any], *, rho: float, n_rows: int | None, dim: int | None,
                      rows_per_unit: int | None = None) -> tuple[float, str]:
    """The share of the diagonal Fisher release at the anchor and why, from public inputs only.

    A given ``anchor_curvature_share`` is kept. Unset, the release is made with ``FISHER_SHARE`` of the budget when
    its noise sd sqrt(2) tau_F L^2 (tau_F from that share of rho) is at most ``FISHER_PRECISION`` of the public
    Fisher scale N L^2 / (k d), the inverse of the public posterior variance guess per coordinate: the
    released Fisher then sets the posterior scale (the chains' initial metric and C's radius) within a few per
    cent even when the rows' typical gradients are far below L (on simulated logistic rows with L = 4 the true
    Fisher was 1/16 of that scale, so the public guess made C cover 0.75 posterior sds instead of 3, and at
    twenty million rows the draws sat 1.6 asymptotic sds off with it, 0.05 with the release). Otherwise (small N or
    a small budget: the release would be noisy) nothing is spent on it. Without N and d (a plan made for a test
    or an audit) it stays off."""
    given = cfg.get("anchor_curvature_share")
    if given is not None:
        return float(given), "given"
    if n_rows is None or dim is None:
        return 0.0, "off: no row count or dimension to judge it by"
    L = float(cfg["anchor_grad_clip"])
    noise_sd = mechanisms.curvature_noise_sd(math.sqrt(1.0 / (2.0 * FISHER_SHARE * rho)), L)
    scale = 1.0 / float(public_metric(int(n_rows), int(dim), L, rows_per_unit)[0])
    others = (cfg["anchor_share"] + cfg["anchor_gradient_share"] + cfg["clipped_count_share"]
              + (cfg["clip_share"] if cfg.get("clip") == "adaptive" else 0.0))
    if noise_sd <= FISHER_PRECISION * scale and others + FISHER_SHARE < 0.95:
        return FISHER_SHARE, (f"{FISHER_SHARE:g} of the budget: its noise sd {noise_sd:.3g} is at most "
                              f"{FISHER_PRECISION:g} x the public Fisher scale N L^2 / (k d) = {scale:.3g}")
    return 0.0, (f"off: its noise sd at {FISHER_SHARE:g} of the budget, {noise_sd:.3g}, is above "
                 f"{FISHER_PRECISION:g} x the public Fisher scale N L^2 / (k d) = {scale:.3g}")


def plan_anchor(cfg: Mapping[str, Any], *, epsilon: float, delta: float, n_rows: int | None = None,
                rows_per_unit: int | None = None, dim: int | None = None) -> AnchorPlan:
    """The anchor phase's noise from its public shares of the budget (Gaussian-DP rho of (epsilon, delta));
    ``n_rows`` (public N) sets the adaptive clip's default quantile (needed with clip='adaptive').
    ``rows_per_unit``: k, the public cap on the rows of a privacy unit (``max_rows_per_unit``), or None (a row, or
    a unit without a public cap): the default curvature bound is then L^2 / (4 k) and the posterior-scale guess
    k d / (N L^2) (``stan_dp.phases.public_scale``). It changes only these public tuning constants, never a noise.
    ``dim``: the unconstrained dimension d, which with N lets ``fisher_share_rule`` turn on the diagonal Fisher
    release when ``anchor_curvature_share`` is unset."""
    rho = float(gaussian_rho(epsilon, delta))  # the total rho = mu_GDP^2 / 2 a Gaussian composition may spend
    if not rho > 0.0:
        raise ValueError(f"the budget (epsilon = {epsilon}, delta = {delta}) is too small for an anchor phase")

    def tau(share: float, releases: int) -> float:  # releases x rho 1 / (2 tau^2) = share x rho
        return math.sqrt(releases / (2.0 * share * rho))

    L = float(cfg["anchor_grad_clip"])
    k = units_factor(rows_per_unit)
    K = float(cfg["curvature_clip"]) if cfg["curvature_clip"] is not None else public_curvature_bound(L, k)
    curvature, fisher_reason = fisher_share_rule(cfg, rho=rho, n_rows=n_rows, dim=dim, rows_per_unit=rows_per_unit)
    cfg = {**cfg, "anchor_curvature_share": curvature}
    steps = int(cfg["anchor_steps"])
    clip = None
    if cfg.get("clip", "fixed") == "adaptive":  # a count has sensitivity 1: its noise sd is its multiplier
        if n_rows is None and cfg["clip_quantile"] is None:
            raise ValueError("clip='adaptive' without clip_quantile needs the row count N to plan (default quantile)")
        clip = clip_plan(cfg, start=L, steps=steps, count_sd=tau(float(cfg["clip_share"]), steps),
                         n_rows=int(n_rows or 1))
    diff = None
    if clip is not None and int(cfg.get("diff_clip_steps") or 0) > 0:
        diff = diff_clip_plan(cfg, count_sd=tau(float(cfg["diff_clip_share"]), int(cfg["diff_clip_steps"])))
    clipped = float(cfg.get("clipped_count_share") or 0.0)
    return AnchorPlan(
        kind=str(cfg["anchor"]), options=dict(cfg), grad_clip=L, curvature_clip=K,
        tau_steps=tau(float(cfg["anchor_share"]), steps),
        tau_gradient=tau(float(cfg["anchor_gradient_share"]), 1),
        tau_curvature=tau(curvature, 1) if curvature > 0.0 else None, clip=clip, diff=diff,
        tau_clipped=tau(clipped, 1) if clipped > 0.0 else None, rows_per_unit=None if k == 1 else k,
        fisher_reason=fisher_reason)


@dataclasses.dataclass(frozen=True)
class AnchorRelease:
    """What the anchor phase releases (mechanism outputs: publishable) and the public rules it implies."""

    theta_hat: np.ndarray
    gradient: np.ndarray  # G~
    fisher: np.ndarray | None  # F~ (diagonal), or None
    metric: np.ndarray  # initial inverse metric: 1 / F~ (floored) or the public d / (N L^2)
    diff_clip: float  # C
    diff_clip_reason: str
    grad_clip: float = float("nan")  # L the releases at the anchor clip at (L_f when adaptive): public
    grad_clip_reason: str = "given"
    gradient_noise_sd: float = float("nan")  # sigma_G = 2 tau_G L (public)
    clipped_rows: float | None = None  # noisy count of the rows the bound L clips at the anchor, or None
    clipped_rows_sd: float | None = None  # its noise sd (public)


def _diff_quantile(likelihood: RowLikelihood, diff: ClipPlan, rng: np.random.Generator, theta_hat: np.ndarray,
                   anchor_grads: np.ndarray, radius: float, rule: float, grad_clip: float,
                   probe_rng: np.random.Generator | None = None) -> tuple[float, str]:
    """C_f and its reason: ``diff.steps`` noisy counts of the rows with ||g_i(theta_m) - g_i(theta_hat)|| <= C_t,
    theta_m cycling over ``diff.probes`` public probe points at the rule's radius (drawn from ``probe_rng``, default
    ``rng``), C_t a
    ``QuantileClip`` from the rule's C capped at max(C, 2 L) (all public); the counts' noise from ``rng``. The
    per-row norms are private; only the counts are released."""
    n = int(likelihood.n_rows)
    cap = diff_clip_cap(rule, grad_clip)
    tracker = diff.tracker(n, start=min(rule, cap), cap=cap)
    norms = []
    for theta in diff_clip_probes(rng if probe_rng is None else probe_rng, theta_hat, radius, diff.probes):
        _, g = likelihood.row_log_lik_grad(theta)
        norms.append(difference_norms(np.asarray(g, dtype=float).reshape(anchor_grads.shape), anchor_grads))
    for t in range(int(diff.steps)):
        tracker.release_norms(rng, norms[t % len(norms)])
    final = float(tracker.bound)
    return final, diff_clip_reason(diff, rule, cap, radius, final)


def run_anchor(likelihood: RowLikelihood, plan: AnchorPlan, rng: np.random.Generator, theta0: np.ndarray,
               on_step: Callable[[int], Any] | None = None, probe_rng: np.random.Generator | None = None
               ) -> tuple[AnchorRelease, np.ndarray | None]:
    """Run the anchor phase: (the release, the PRIVATE per-row anchor gradients (N, dim), never released, or
    None when the rows live elsewhere and keep their anchor gradients there: ``anchor_statistics``).

    ``rng`` draws every mechanism's noise; ``probe_rng`` the public probe points of the difference quantile (the
    run passes its own "probe points" stream; None: ``rng``, for callers that keep one generator)."""
    n, d = int(likelihood.n_rows), int(likelihood.dim)
    L, opts = plan.grad_clip, plan.options
    learning_rate = float(opts["anchor_step"]) / (n * plan.curvature_clip)  # public K of the plan
    tracker = plan.clip.tracker(n) if plan.clip is not None else None
    theta_hat = noisy_gradient_ascent(likelihood, rng, theta0, clip=L, sampling_rate=1.0, tau=plan.tau_steps,
                                      steps=int(opts["anchor_steps"]), learning_rate=learning_rate,
                                      momentum=float(opts["anchor_momentum"]), on_step=on_step,
                                      clip_tracker=tracker)
    L_reason, K = "given", plan.curvature_clip
    m0 = plan.public_metric(n, d)  # the scale rule needs a true bound: the given L, also when adaptive
    if tracker is not None and plan.clip is not None:  # frozen: a function of released counts
        L = float(tracker.bound)
        L_reason = clip_reason(plan.clip, L)
    gradient_sd = mechanisms.gradient_noise_sd(plan.tau_gradient, L)
    # the difference quantile reads every row's anchor gradient here, so it needs them on this side
    sums, grads = anchor_statistics(likelihood, theta_hat, L, count=plan.tau_clipped is not None,
                                    squared=plan.tau_curvature is not None, local=plan.diff is not None)
    gradient = sums.gradient + mechanisms.gaussian_noise(rng, gradient_sd, size=d)
    clipped = None
    if plan.tau_clipped is not None:  # N minus a noisy count within L: post-processing of one Gaussian count
        clipped = n - mechanisms.noisy_count(rng, int(sums.inside or 0), plan.tau_clipped)
    fisher = None
    metric = m0
    if plan.tau_curvature is not None and sums.squared is not None:
        sd = mechanisms.curvature_noise_sd(plan.tau_curvature, L)
        fisher = sums.squared + mechanisms.gaussian_noise(rng, sd, size=d)
        # a coordinate whose noisy Fisher is within 3 noise sds of 0 keeps the public scale (post-processing)
        metric = np.where(fisher > 3.0 * sd, 1.0 / np.maximum(fisher, 3.0 * sd), m0)
    if opts["diff_clip"] is not None:
        c, reason = float(opts["diff_clip"]), "given"
    else:
        scale = float(np.sqrt(np.sum(metric)))
        c = K * float(opts["anchor_radius"]) * scale
        source = ("the released diagonal Fisher" if fisher is not None else "the public d / (N L^2)"
                  if plan.rows_per_unit is None else f"the public k d / (N L^2), k = {plan.rows_per_unit}")
        reason = (f"K r = {K:.4g} x {float(opts['anchor_radius']):g} x {scale:.4g} "
                  f"(curvature bound x radius x posterior scale from {source})")
        if plan.diff is not None and grads is not None:  # the private quantile of the differences from the rule's C
            radius = float(opts["anchor_radius"]) * scale  # the rule's radius r s
            c, reason = _diff_quantile(likelihood, plan.diff, rng, theta_hat, grads, radius, c, plan.grad_clip,
                                       probe_rng)
    release = AnchorRelease(theta_hat=theta_hat, gradient=gradient, fisher=fisher, metric=metric, diff_clip=c,
                            diff_clip_reason=reason, grad_clip=L, grad_clip_reason=L_reason,
                            gradient_noise_sd=gradient_sd, clipped_rows=clipped, clipped_rows_sd=plan.tau_clipped)
    return release, (None if grads is None else anchor_row_gradients(grads))


def anchor_statistics(likelihood: RowLikelihood, theta_hat: np.ndarray, bound: float, *, count: bool,
                      squared: bool, local: bool = False) -> tuple[mechanisms.AnchorSums, np.ndarray | None]:
    """The rows' statistics at the released point ``theta_hat`` that the anchor phase releases with noise
    (``mechanisms.anchor_sums``: the clipped gradient sum, with ``count`` the count within ``bound``, with
    ``squared`` the clipped squared-gradient sum), and the rows' gradients there ((N, dim), private) or None.

    Where the rows live elsewhere (a likelihood that offers ``PartialAnchorSums``, e.g. the Ray backend)
    each part forms its statistics where its rows live and anchors its rows there (the anchor gradients are formed
    where the rows live), and
    only the statistics cross the wire (None is returned for the gradients); ``local=True`` asks for the
    gradients on this side anyway (the difference quantile reads them). Otherwise the gradients are evaluated
    here. Never released: the caller adds each release's noise."""
    partial = (cast(PartialAnchorSums, likelihood).partial_anchor_sums
               if offers(likelihood, PartialAnchorSums) else None)
    if partial is not None and not local:
        parts = partial(theta_hat, bound, mechanisms.anchor_sums, anchor_row_gradients, count=count,
                        squared=squared)
        return mechanisms.AnchorSums.add(list(parts)), None
    _, grads = likelihood.row_log_lik_grad(theta_hat)
    grads = np.asarray(grads, dtype=float).reshape(int(likelihood.n_rows), int(likelihood.dim))
    return mechanisms.anchor_sums(grads, bound, count=count, squared=squared), grads


def anchor_row_gradients(grads: np.ndarray) -> np.ndarray:
    """The PRIVATE per-row anchor gradients the anchored rows subtract, from the rows' gradients at theta_hat
    ((N, dim)): a row with a non-finite gradient there contributes 0. A resumed run recomputes them from the
    stored (released) theta_hat: no noise is drawn for them.

    A writeable float64 ``grads`` is zeroed IN PLACE and returned (no second (N, dim) matrix; the callers pass
    gradients they own and read no more); any other input is converted or copied first."""
    grads = np.asarray(grads, dtype=float)
    if not grads.flags.writeable:
        grads = grads.copy()
    for block in mechanisms.row_blocks(grads.shape[0]):
        rows = grads[block]
        rows[~np.isfinite(rows).all(axis=1)] = 0.0
    return grads


def clipped_rows_message(release: AnchorRelease, n_rows: int, adaptive: bool, noun: str = "rows") -> str | None:
    """The warning for a released clipped-row count that says the bound binds for many rows at the anchor (more
    than ``CLIPPED_WARN_FRACTION`` of them, and more than two noise sds), else None. A quantile bound
    (``adaptive``) clips by design and is not warned about. Post-processing of the released count. ``noun``: what
    one "row" of the run is, in the plural (a privacy unit's name, e.g. "persons")."""
    count, sd = release.clipped_rows, release.clipped_rows_sd
    if count is None or adaptive or not (count > CLIPPED_WARN_FRACTION * n_rows and count > 2.0 * (sd or 0.0)):
        return None
    return (f"The gradient bound L = {release.grad_clip:.4g} clips about {count:.0f} of the {n_rows} {noun} at the "
            f"anchor ({100.0 * count / n_rows:.0f} %; a released noisy count, noise sd {sd:.3g}). A bound that binds "
            f"for many {noun} biases the anchor gradient and the draws (towards the clipped {noun}' smaller pull), so the "
            "intervals may not cover: give a larger, still public, bound (e.g. from the declared data bounds), or "
            "clip='adaptive'.")


class AnchoredLikelihood(DataFreeFromBase):
    """``base`` relative to an anchor: rows l_i(theta) - a_i . theta (a_i = g_i(theta_hat), a private cache, 0
    for a row that failed there) and data-free part log p0(theta) + (G~ - t) . theta with a public tilt t.

    What it offers is written out here, and nothing else: the row-likelihood interface (``constrain`` and
    ``param_shapes`` are the base's, data-free) and the optional capability ``PartialGradientSums``
    (``stan_dp.likelihood``: the anchored rows' clipped sums formed where the rows live, when the base keeps the
    anchor there). No attribute is handed to the base by lookup: a per-row method of the base would speak of its
    rows, not of the anchored rows. The kernels clip the anchored rows like any rows, so their sensitivity is
    enforced.
    """

    def __init__(self, base: RowLikelihood, anchor_grads: np.ndarray | None, gradient: np.ndarray,
                 tilt: np.ndarray | None = None, theta_hat: np.ndarray | None = None):
        self._base = base
        self.n_rows, self.dim = int(base.n_rows), int(base.dim)
        if anchor_grads is None and theta_hat is None:
            raise ValueError("anchored rows need the anchor gradients or the released point theta_hat")
        # None: computed from theta_hat on first use (``_anchor_matrix``): rows that keep their anchor where they
        # live (the Ray backend) never need them on this side unless a kernel asks for per-row values
        self._anchor_grads = (None if anchor_grads is None
                              else np.asarray(anchor_grads, dtype=float).reshape(self.n_rows, self.dim))
        self._theta_hat = None if theta_hat is None else np.array(theta_hat, dtype=float, copy=True)
        self._anchor_lock = threading.Lock()
        offset = np.asarray(gradient, dtype=float).reshape(self.dim)
        self.offset = offset - (0.0 if tilt is None else np.asarray(tilt, dtype=float).reshape(self.dim))
        # rows that live elsewhere (the Ray backend) keep their own anchor gradients, recomputed there from the
        # released theta_hat by the same rule (the same numbers as anchor_grads), so that the clipped sums of the
        # anchored rows are formed where the rows live. Only a base that offers the capability is asked: a wrapper
        # that changes what a "row" is (a privacy unit, the audit's substituted row) does not offer it
        self._remote_sums = (cast(KeepsAnchor, base).keep_anchor(theta_hat, anchor_row_gradients)
                             if theta_hat is not None and offers(base, KeepsAnchor) else None)

    @property
    def partial_clipped_gradient_sums(self) -> Any:
        """The base's per-part clipped sums of the anchored rows' gradients when its rows live elsewhere and keep
        the anchor there (``stan_dp.privacy.mechanisms.rows_clipped_gradient_sum`` calls it), else None (the
        anchored per-row gradients are then clipped by the caller)."""
        return self._remote_sums

    def log_prior(self, theta: np.ndarray) -> float:
        return float(self._base.log_prior(theta)) + float(self.offset @ np.asarray(theta, dtype=float))

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        lp, g = self._base.log_prior_grad(theta)
        return float(lp) + float(self.offset @ np.asarray(theta, dtype=float)), np.asarray(g, dtype=float) + self.offset

    def _anchor_matrix(self) -> np.ndarray:
        """The per-row anchor gradients (N, dim), computed from theta_hat by ``anchor_row_gradients`` on first
        use when they were not given (once, under a lock: chains run in threads; no lock once they are there,
        since every anchored step reads them)."""
        if self._anchor_grads is not None:
            return self._anchor_grads
        with self._anchor_lock:
            if self._anchor_grads is None:
                assert self._theta_hat is not None  # __init__ refuses neither
                _, grads = self._base.row_log_lik_grad(self._theta_hat)
                self._anchor_grads = anchor_row_gradients(
                    np.asarray(grads, dtype=float).reshape(self.n_rows, self.dim))
            return self._anchor_grads

    def _anchors(self, rows: np.ndarray | None) -> np.ndarray:
        anchors = self._anchor_matrix()
        if rows is None:
            return anchors
        # np.take gathers rows several times faster than fancy indexing on a large (N, d) array
        return np.take(anchors, np.asarray(rows, dtype=np.intp), axis=0)

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        theta = np.asarray(theta, dtype=float)
        with mechanisms.private_arithmetic():  # per-row private values: no warning may depend on them
            return np.asarray(self._base.row_log_lik(theta, rows), dtype=float) - self._anchors(rows) @ theta

    def row_log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        theta = np.asarray(theta, dtype=float)
        values, grads = self._base.row_log_lik_grad(theta, rows)
        a = self._anchors(rows)
        with mechanisms.private_arithmetic():
            return (np.asarray(values, dtype=float) - a @ theta,
                    np.asarray(grads, dtype=float).reshape(a.shape) - a)


def chain_starts(release: AnchorRelease, chains: int, rng: np.random.Generator) -> np.ndarray:
    """Each chain's start: the anchor plus uniform(-2, 2) in units of the initial metric's sd (public randomness
    from ``rng``, which must not be a generator that draws mechanism noise: the run passes its "chain starts"
    stream; dispersed like Stan's inits, so that R-hat can still see chains that do not mix)."""
    d = release.theta_hat.size
    return release.theta_hat + rng.uniform(-2.0, 2.0, size=(int(chains), d)) * np.sqrt(release.metric)


def posterior_target(plan: AnchorPlan | None, noise_aware_applied: bool, gradient_noise_sd: float | None = None
                     ) -> str:
    """What the released posterior targets, in words (attrs ``posterior_target``); ``gradient_noise_sd``: sigma_G
    of the run (the plan's unless an adaptive bound changed it)."""
    sd = plan.gradient_noise_sd if gradient_noise_sd is None and plan is not None else gradient_noise_sd
    if plan is None:
        return ("the posterior of the clipped likelihood (exactly the posterior where no clip binds), up to the "
                "algorithm's own approximations")
    if noise_aware_applied:
        return ("noise-aware: the posterior with the privacy noise of the anchor gradient G~ integrated out to first "
                "order. The chains target the posterior tilted by that noise, xi . theta with xi ~ N(0, sigma_G^2 I) "
                f"(sigma_G = {sd:.6g}); every released draw is m + D (x - m), x the chain's draw, m the chains' "
                "mean and D diagonal, so that each coordinate has the noise-aware variance Sigma_jj + sigma_G^2 "
                "(Sigma^2)_jj (Sigma the covariance of the chains' draws, unconstrained scale), plus the Monte Carlo "
                "error of the mean, raised to its upper confidence value given each coordinate's ESS; intervals include "
                "that noise. The map is per coordinate and common to all chains, so R-hat and ESS of the released "
                "draws are the chains' own; correlations between parameters are the chains'. The chains' own "
                "draws are the group chain_posterior (convergence is judged on them).")
    return ("the posterior tilted by the privacy noise of the anchor gradient G~: xi . theta with xi ~ N(0, sigma_G^2 "
            f"I), sigma_G = {sd:.6g}; its centre is shifted by about Sigma xi (Sigma the posterior "
            "covariance) and credible intervals do NOT include that noise (noise_aware=False)")
