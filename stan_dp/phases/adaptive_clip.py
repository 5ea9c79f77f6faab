"""``clip="adaptive"``: a per-row gradient clip bound chosen privately during the DP-GD steps.

Why. The public gradient bound L of a small real data set (6-25 on the battery) is far above a typical row's
gradient norm, and every Gaussian release on clipped gradients has noise proportional to L. Following the idea
of quantile-adaptive clipping (Andrew et al., NeurIPS 2021), each DP-GD step of the anchor phase (anchored runs
and ``dp-laplace``) also releases a noisy count of the rows whose gradient norm at the current point is within
the current bound L_t (``stan_dp.privacy.mechanisms.QuantileClip``: sensitivity 1, Gaussian noise), and the bound
moves geometrically towards the ``clip_quantile`` quantile of the norms:
L_{t+1} = min(L_0, L_t exp(-clip_rate (noisy fraction - clip_quantile))), L_0 the user's public bound (start and
cap). Step t's gradient sum is clipped at L_t with noise sd 2 tau L_t: the noise MULTIPLIER is fixed, so the
accounting does not depend on the bounds. After the steps the bound is frozen at L_f = L_T: the releases at the
anchor (G~, F~) clip at L_f. The public scale rules of an anchored run keep the user's L (the default diff_clip
rule, the public metric d / (N L^2), the kernel's ``grad_clip`` and its metric floor 1 / (N L^2)): they need a true
bound, which a quantile is not (with L_f in them, dp-sgnht+anchor on wells at epsilon 3 went from 6 to 94 sd). L_f is a function of released counts (post-processing): it is released in the
attrs (``clip_bound``) with a reason (``clip_bound_reason``).

Accounting: ``clip_share`` of the budget (Gaussian-DP rho terms) pays for the ``anchor_steps`` counts, each a
``GaussianDpEvent(count_sd)`` (sensitivity 1, tau = sigma / Delta = count_sd), composed with everything else in
the run's one PLD (:meth:`ClipPlan.phase`).

Bias. Clipping at a quantile binds for about 1 - clip_quantile of the rows BY DESIGN, also at the anchor: the
clipped gradients do not sum to zero at the posterior mode, so G~ (and the Laplace mean built from it) carries a
bias towards the modes of the unclipped rows' terms, which grows as the quantile falls. It costs accuracy, never
privacy; ``tests/phases/test_adaptive_clip.py::test_quantile_clip_bias_is_measured`` checks its direction. Measured
without noise (one Newton step from the exact mode with the clipped sum, largest shift in posterior sds) at the
0.5 / 0.9 / 0.99 quantile: wells 5.8 / 3.3 / 0.77, kidiq 4.6 / 1.6 / 0.22, logistic N = 10,000 14 / 4.6 / 0.42. It
grows like sqrt(N) at a fixed quantile, so at large N the bias, not the noise, dominates: dp-laplace on
logistic-10k at epsilon 3 measured 5.5 sd off with the adaptive bound against 1.4 with the fixed L = 5 (four
seeds). Measured on dp-laplace, four seeds, mean max error in sds (fixed L / quantile 0.5 / 0.9 / 0.95 / 0.98 /
0.99): wells eps 3: 8.1 / 21 / 3.6 / 6.5 / 7.8 / 8.1, eps 10: 6.5 / - / 3.6 / 3.6 / 6.4 / 7.0; kidiq eps 3: 45 / 10 /
11 / 23 / 28 / 30 (0.7-0.85: 9.5-12), eps 10: 20 / - / 6.2 / 11 / 15 / 16; logistic-10k eps 3: 1.4 / - / 5.5 / 1.1 /
1.1 / 1.4, eps 10: 0.41 / - / 5.4 / 0.99 / 0.41 / 0.49. No fixed quantile serves all N: the default keeps
(1 - quantile) sqrt(N) at the wells value, 1 - 5.5 / sqrt(N) within [0.75, 0.99] (``default_quantile``: public).
The default rate 0.2 against 0.5 and 1.0 was best on wells (3.6 / 4.9 / 5.0), worse on kidiq (11 / 5.8 / 5.0).

The anchor differences (``diff_clip_steps`` > 0; anchored runs with ``clip="adaptive"`` and no ``diff_clip``;
default 0: off). After theta_hat (and G~, F~) are released, ``diff_clip_probes`` public probe points theta_hat + r s
u (u uniform on the unit sphere, public randomness; r s the C rule's radius: ``anchor_radius`` times the rule's
posterior scale) and ``diff_clip_steps`` noisy counts, cycling over them, of the rows with ||g_i(theta_m) -
g_i(theta_hat)|| <= C_t (sensitivity 1, Gaussian; a row whose gradient is not finite at either point is outside
every bound; the per-row norms are never released) move C_t geometrically towards the ``diff_clip_quantile``
(0.9) quantile at rate ``diff_clip_rate`` (0.5) (``QuantileClip.release_norms``). Start: the rule's C. Cap: max(C,
2 L). Why not cap at the rule's C: the rule assumes K = L^2 / 4, which Gaussian-regression rows violate, so their
quantile may lie ABOVE the rule and a cap there could only shrink C. Why 2 L: it is public and is what an
unanchored kernel pays (a row with gradient within L differs from its anchor value by at most 2 L), so a larger C
buys nothing. Why start low: the update grows fast when few rows are inside (factor e^{rate q} per count) and
shrinks slowly when most are (e^{-rate (1 - q)}). C_f = C_T is frozen and is the kernel's ``diff_clip``, released
in attrs ``diff_clip`` with ``diff_clip_reason`` (post-processing of the counts). Accounting: its own phase
(``diff_clip_share``, default 0.02 of the rho budget, beside ``clip_share``; each count ``GaussianDpEvent(s)``, s =
sqrt(T / (2 share rho)), T counts: Gaussian-DP mu = sqrt(T) / s), in the run's one PLD and listed in the report.
The run-length rule keeps the public C (planning reads no row).

Measured (``bench_utility.py --cases kidiq wells --algorithms dp-sgnht+anchor+adaptive
dp-sgnht+anchor+adaptive+diffq --epsilons 3 10 --seed 1``, 30 counts, ``benchmarks/results/utility_diffq.csv``): max
mean error in posterior sds without / with the difference quantile, kidiq eps 3: 11 / 5.7, eps 10: 3.7 / 12; wells
eps 3: 2.2 / 14, eps 10: 3.3 / 55 (median sd ratio 0.9-1.2 without, 2.2-4.2 with): worse in 3 of 4 cells. Why (a
non-private diagnostic, ``benchmarks/results/diffq_diagnostic.txt``): the rule's scale without a released Fisher is
the public sqrt(d^2 / (N L^2)), 15-23 times below the true posterior scale on these data (typical rows' gradients
are far below L), so the probes sit far inside where the chains go: the 0.9 quantile there is 0.07 (kidiq) / 0.03
(wells) against 1.1 / 0.64 at three true posterior scales. C_f (0.44-0.54 / 0.19-0.20, still shrinking after 30
counts, against the rule's 2.7 / 0.82) then clips the chains' differences and the posterior comes out 2-4 times
too wide. The public rule, with K = L^2 / 4 too large AND the scale too small, lands near the 0.95-0.99 quantile
at the true radius on both data sets. With a released diagonal Fisher (``anchor_curvature_share`` 0.1,
``anchor_gradient_share`` 0.5) the rule's scale is near the truth (0.097 / 0.10 against 0.089 / 0.17), the rule's
C is 45 / 11 (far above the quantile) and the counts bring it to 6.2-8.6 / 2.6-2.8; there (same command with
``--option anchor_curvature_share=0.1 --option anchor_gradient_share=0.5``, ``utility_diffq_fisher.csv``) the
errors without / with were kidiq 12 / 12 (eps 3) and 8.9 / 8.9 (eps 10), wells 6.6 / 5.7 and 6.8 / 3.0, sd ratios
2.1 / 0.85-0.89 on kidiq: no worse anywhere, but every cell's chains have R-hat above 2.4 and every cell is worse
than the run without a Fisher and without the counts. One seed, no cell meets a target. Hence off by default.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

from ..privacy import mechanisms
from ..privacy.events import NoiseDeclaration, Phase, gaussian_release
from ..samplers.options import Option

__all__ = ["default_quantile", "CLIP_KINDS", "CLIP_OPTIONS", "CLIP_OPTION_NAMES", "CLIP_RELEASE", "ClipPlan", "check_clip_request",
           "clip_plan", "clip_reason", "DIFF_CLIP_OPTIONS", "DIFF_CLIP_OPTION_NAMES", "DIFF_CLIP_RELEASE",
           "diff_clip_plan", "diff_clip_cap", "diff_clip_probes", "diff_clip_reason", "difference_norms"]

CLIP_KINDS = ("fixed", "adaptive")
CLIP_RELEASE = "adaptive clip: noisy count of rows with gradient norm <= L_t"
DIFF_CLIP_RELEASE = "adaptive diff_clip: noisy count of rows with anchor difference norm <= C_t"

CLIP_OPTIONS = [
    Option("clip", "choice", "fixed", choices=CLIP_KINDS,
           doc="'adaptive': the per-row gradient clip bound follows a private quantile of the gradient norms during "
               "the DP-GD steps (from the given bound, which is also its cap), then is frozen and released; "
               "'fixed': the given bound throughout"),
    Option("clip_quantile", "real", None, low=0.0, high=1.0, low_open=True, high_open=True,
           none_means="1 - 5.5 / sqrt(N), within [0.75, 0.99] (0.9 at N = 3,000; 0.945 at N = 10,000)",
           doc="target quantile of the per-row gradient norms (clip='adaptive')"),
    Option("clip_share", "real", 0.05, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget (Gaussian-DP rho terms) spent on the noisy counts (clip='adaptive')"),
    Option("clip_rate", "real", 0.2, low=0.0, low_open=True,
           doc="geometric rate eta of the bound's update L <- L exp(-eta (noisy fraction - quantile))"),
]
CLIP_OPTION_NAMES = tuple(o.name for o in CLIP_OPTIONS)

#: the private quantile of the anchor differences (anchored runs with clip='adaptive'; module doc)
DIFF_CLIP_OPTIONS = [
    Option("diff_clip_steps", "int", 0, low=0,
           doc="noisy counts that move the anchored kernel's clip C towards a private quantile of the anchor "
               "differences ||g_i(theta) - g_i(theta_hat)|| at public probe points (clip='adaptive', no diff_clip); "
               "0: C from the public rule"),
    Option("diff_clip_quantile", "real", 0.9, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="target quantile of the anchor difference norms at the probe points"),
    Option("diff_clip_share", "real", 0.02, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget (Gaussian-DP rho terms) spent on the anchor-difference counts"),
    Option("diff_clip_rate", "real", 0.5, low=0.0, low_open=True,
           doc="geometric rate of C's update C <- C exp(-rate (noisy fraction - quantile))"),
    Option("diff_clip_probes", "int", 5, low=1,
           doc="public probe points theta_hat + r s u (u uniform on the unit sphere); the counts cycle through them"),
]
DIFF_CLIP_OPTION_NAMES = tuple(o.name for o in DIFF_CLIP_OPTIONS)


def default_quantile(n_rows: int) -> float:
    """The public default target quantile 1 - 5.5 / sqrt(N), within [0.75, 0.99] (module doc: the bias of a
    quantile bound in posterior sds grows like sqrt(N) (1 - quantile), so this keeps it about constant)."""
    return float(min(0.99, max(0.75, 1.0 - 5.5 / math.sqrt(max(int(n_rows), 1)))))


def check_clip_request(raw: Mapping[str, Any], algorithm: str) -> None:
    """Refuse ``clip_*`` options given without ``clip='adaptive'`` (they would silently do nothing)."""
    if raw.get("clip", "fixed") in (None, "fixed"):
        extra = sorted(k for k in CLIP_OPTION_NAMES + DIFF_CLIP_OPTION_NAMES
                       if k != "clip" and raw.get(k) is not None)
        if extra:
            raise ValueError(f"options {', '.join(map(repr, extra))} configure an adaptive clip bound, but clip is "
                             f"'fixed'; give clip='adaptive' (algorithm {algorithm!r})")


@dataclasses.dataclass(frozen=True)
class ClipPlan:
    """The public side of a private quantile bound: start (and cap) L_0, target quantile, rate, the count noise.

    ``key`` names what is tracked: "clip" (the per-row gradient bound L, counts during the DP-GD steps) or
    "diff_clip" (the anchored kernel's C, counts at ``probes`` public probe points after theta_hat; its start
    and cap come from the public C rule at run time, :func:`diff_clip_cap`, so ``start`` is NaN here)."""

    start: float
    target: float
    rate: float
    share: float
    steps: int
    count_sd: float  # the count's noise sd = its noise multiplier (sensitivity 1)
    key: str = "clip"
    probes: int = 0

    @property
    def release_name(self) -> str:
        """The name of the count release in the accounting report."""
        return CLIP_RELEASE if self.key == "clip" else DIFF_CLIP_RELEASE

    def phase(self) -> Phase:
        """The ``steps`` count releases as a fixed phase of the run's one accounting."""
        note = ("sensitivity 1 (a count); one per DP-GD step" if self.key == "clip" else
                f"sensitivity 1 (a count); {self.steps} counts cycling over {self.probes} public probe points")
        decl = NoiseDeclaration(parameters=lambda s: {"tau": self.count_sd},
                                releases=lambda p: [gaussian_release(self.release_name, p["tau"], note=note)],
                                noise_names=("tau",))
        return Phase(decl, 1, int(self.steps))

    def tracker(self, n_rows: int, start: float | None = None, cap: float | None = None) -> mechanisms.QuantileClip:
        """A fresh adaptive bound for one run: starts at ``start`` (default L_0), capped at ``cap`` (default the
        start); both must be public."""
        start = self.start if start is None else float(start)
        return mechanisms.QuantileClip(bound=start, target=self.target, rate=self.rate, count_sd=self.count_sd,
                                       n_rows=int(n_rows), cap=start if cap is None else float(cap))

    def describe(self) -> dict[str, Any]:
        """Public description for the attrs (no data-dependent value)."""
        k = self.key
        out: dict[str, Any] = {f"{k}_quantile": self.target, f"{k}_share": self.share, f"{k}_rate": self.rate,
               f"{k}_count_noise_sd": self.count_sd}
        if k == "clip":
            out.update(clip="adaptive", clip_start=self.start)
        else:
            out.update({f"{k}_steps": self.steps, f"{k}_probes": self.probes})
        return out


def clip_plan(cfg: Mapping[str, Any], *, start: float, steps: int, count_sd: float, n_rows: int) -> ClipPlan | None:
    """The :class:`ClipPlan` of validated options (None for ``clip='fixed'``), with the count noise sd the caller
    calibrated from ``clip_share``; ``n_rows`` (public N) sets the default quantile."""
    if cfg.get("clip", "fixed") != "adaptive":
        return None
    if not (count_sd > 0.0 and math.isfinite(count_sd)):
        raise ValueError(f"the count noise sd of the adaptive clip must be finite and > 0, got {count_sd!r}")
    target = cfg["clip_quantile"] if cfg["clip_quantile"] is not None else default_quantile(n_rows)
    return ClipPlan(start=float(start), target=float(target), rate=float(cfg["clip_rate"]),
                    share=float(cfg["clip_share"]), steps=int(steps), count_sd=float(count_sd))


def clip_reason(plan: ClipPlan, final: float) -> str:
    """Why the frozen bound is what it is, in words (attrs ``clip_bound_reason``)."""
    return (f"private quantile: {plan.steps} noisy counts (noise sd {plan.count_sd:.4g}, sensitivity 1) of the rows "
            f"with gradient norm <= L_t at the DP-GD iterates, L_t moved by exp(-{plan.rate:g} (fraction - "
            f"{plan.target:g})) from L_0 = {plan.start:g} (also the cap); frozen at L_f = {final:.6g}")


def diff_clip_plan(cfg: Mapping[str, Any], *, count_sd: float) -> ClipPlan | None:
    """The :class:`ClipPlan` of the anchor-difference quantile (None unless clip='adaptive' and
    ``diff_clip_steps`` > 0), with the count noise sd the caller calibrated from ``diff_clip_share``. Refuses
    ``diff_clip_steps`` together with a given ``diff_clip`` (the counts would decide nothing)."""
    if cfg.get("clip", "fixed") != "adaptive" or int(cfg.get("diff_clip_steps") or 0) == 0:
        return None
    if cfg.get("diff_clip") is not None:
        raise ValueError("diff_clip_steps > 0 asks for a private quantile of the anchor differences, but diff_clip "
                         "is given; give one or the other")
    if not (count_sd > 0.0 and math.isfinite(count_sd)):
        raise ValueError(f"the count noise sd of the adaptive diff_clip must be finite and > 0, got {count_sd!r}")
    return ClipPlan(start=float("nan"), target=float(cfg["diff_clip_quantile"]), rate=float(cfg["diff_clip_rate"]),
                    share=float(cfg["diff_clip_share"]), steps=int(cfg["diff_clip_steps"]), count_sd=float(count_sd),
                    key="diff_clip", probes=int(cfg["diff_clip_probes"]))


def diff_clip_cap(rule: float, grad_clip: float) -> float:
    """The public cap of the adaptive C: max(rule C, 2 L), L the user's public gradient bound (module doc)."""
    return max(float(rule), 2.0 * float(grad_clip))


def diff_clip_probes(rng: np.random.Generator, theta_hat: np.ndarray, radius: float, count: int) -> np.ndarray:
    """``count`` public probe points theta_hat + radius u, u uniform on the unit sphere (public randomness; theta_hat
    is released): shape (count, dim)."""
    theta_hat = np.asarray(theta_hat, dtype=float).reshape(-1)
    u = rng.standard_normal((int(count), theta_hat.size))
    u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
    return theta_hat[None, :] + float(radius) * u


def difference_norms(grads: np.ndarray, anchor_grads: np.ndarray) -> np.ndarray:
    """||g_i(theta) - g_i(theta_hat)|| per row (PRIVATE, never released: only a noisy count reads it); NaN for a
    row whose gradient is not finite at either point, so that it counts as outside every bound."""
    grads, anchor_grads = np.asarray(grads, dtype=float), np.asarray(anchor_grads, dtype=float)
    norms = np.empty(grads.shape[0])
    with mechanisms.private_arithmetic():  # overflow of a private difference must not warn
        for block in mechanisms.row_blocks(grads.shape[0]):  # row-local: one block's difference at a time
            diff = grads[block] - anchor_grads[block]
            norms[block] = np.where(np.isfinite(diff).all(axis=1), mechanisms.row_norms(diff), np.nan)
    return norms


def diff_clip_reason(plan: ClipPlan, rule: float, cap: float, radius: float, final: float) -> str:
    """Why the anchored kernel's C is what it is, in words (attrs ``diff_clip_reason``)."""
    return (f"private quantile: {plan.steps} noisy counts (noise sd {plan.count_sd:.4g}, sensitivity 1) of the rows "
            f"with anchor difference norm ||g_i(theta_m) - g_i(theta_hat)|| <= C_t at {plan.probes} public probe "
            f"points theta_hat + {radius:.4g} u (u uniform on the unit sphere), C_t moved by exp(-{plan.rate:g} "
            f"(fraction - {plan.target:g})) from the public rule's C = {rule:.6g}, capped at max(C, 2 L) = "
            f"{cap:.6g}; frozen at C_f = {final:.6g}")
