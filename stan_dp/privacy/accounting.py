"""Privacy accounting for stan-dp: budget <-> noise for a whole planned run.

The user's ``(epsilon, delta)`` covers the **whole run**: every chain, every warmup and sampling iteration,
every mechanism invocation (DESIGN.md section 5). This module turns a budget into noise levels
(:func:`calibrate`, budget-first) and noise levels into the budget spent (:func:`account`, noise-first), and
describes the result in a :class:`PrivacyReport` that serialises to JSON for InferenceData attrs.

Neighbouring relation
    Datasets are neighbours when they differ by **substituting one row**; N is public (all seeds).
    Every ``noise_multiplier`` in this module is ``sigma / Delta`` where ``Delta`` is the l2-sensitivity
    of the released quantity under substitution.  For a sum of per-row terms clipped to norm ``b`` this is
    ``Delta = 2 b``; so the penalty test with ``sigma_l = 2 tau_l b_l ||theta' - theta||`` has noise
    multiplier ``tau_l``, and a gradient with ``sigma_g = 2 tau_g b_g`` has noise multiplier ``tau_g``.

Mechanisms per iteration (``T = chains * iterations``, iterations = warmup + sampling per chain)
    * ``"penalty"``: one Gaussian mechanism, ``mu = 1 / (2 tau_l^2)`` (seed 004 section 3).
    * ``"dp-hmc"``: the penalty test plus ``L + 1`` gradient releases, each ``mu = 1 / (2 tau_g^2)``
      (seed 004 Algorithm 1 and Theorem 3.5: ``mu_total = T / (2 tau_l^2) + T (L + 1) / (2 tau_g^2)``).
    * ``"dp-fast-mh"`` / ``"dp-fast-mh-full"``: one ``(epsilon_iteration, delta_iteration)``-DP mechanism
      (seed 000 Theorem 2), composed through the privacy loss distribution (PLD) of a generic
      ``(epsilon, delta)`` mechanism, i.e. the optimal composition of ``T`` such mechanisms.

Accountants
    * Gaussian compositions have the closed form of seed 004 Theorem 2.4 (:func:`gaussian_delta`,
      :func:`gaussian_epsilon`): the PLD of a composition of Gaussian mechanisms is ``N(mu, 2 mu)`` with
      ``mu = sum_i Delta_i^2 / (2 sigma_i^2)``.  Calibration searches this closed form and then confirms the
      result with dp-accounting's PLD (pessimistic, connect-the-dots), which is the number reported.
      dp-accounting's RDP accountant is computed as a cross-check; it is never tighter.
    * DP-Fast MH: dp-accounting's PLD of an ``(epsilon, delta)`` mechanism, self-composed ``T`` times.
      The discretisation interval is set to ``epsilon_iteration`` itself, so the losses ``+-epsilon_iteration``
      are represented exactly and the composition is exact (the binomial optimal-composition law).
    * Poisson-subsampled Gaussian: dp-accounting's PLD (substitution relation).  Uniformly subsampled
      (fixed batch size without replacement) Gaussian: dp-accounting's RDP accountant (Wang, Balle and
      Kasiviswanathan 2019, Theorem 27, replace-one relation); dp-accounting 0.6 has no PLD for it.

dp-accounting conventions used below (checked against its source, version 0.6)
    * ``from_gaussian_mechanism(..., neighboring_relation=REPLACE_ONE)`` shifts the mean by
      ``2 * sensitivity`` (a row moves from ``-sensitivity`` to ``+sensitivity``), so with our noise
      multiplier ``tau`` we pass ``standard_deviation=tau, sensitivity=0.5`` (units where ``Delta = 1``).
      For Poisson subsampling the same call gives the mixture pair
      ``q N(-1/2) + (1 - q) N(0)`` vs ``q N(+1/2) + (1 - q) N(0)``: each row's clipped term lies within
      ``Delta / 2`` of the "row absent" value 0, which holds for clipped sums.
    * The RDP accountant's ``GaussianDpEvent`` and ``SampledWithoutReplacementDpEvent`` take
      ``noise_multiplier = sigma / Delta`` with ``Delta`` the full (replace-one) sensitivity: our convention.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
import operator
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from scipy import optimize, special

from dp_accounting import dp_event
from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

__all__ = [
    "ALGORITHMS",
    "NEIGHBOURING_RELATION",
    "PrivacyPlan",
    "PrivacyReport",
    "account",
    "calibrate",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]

ALGORITHMS = ("penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full")
NEIGHBOURING_RELATION = "substitute one row; N public"
GUARANTEE = "approximate differential privacy, (epsilon, delta)-DP"
PLD_ACCOUNTANT = "PLD (dp-accounting)"
CLOSED_FORM_ACCOUNTANT = "closed form for Gaussian compositions (seed 004 Theorem 2.4; exact)"
RDP_ACCOUNTANT = "RDP (dp-accounting)"
BASIC_ACCOUNTANT = "basic composition (sum of per-mechanism epsilons and deltas; used where the PLD overflows)"

#: Default fraction of the total mu that DP-HMC spends on the L+1 gradient releases ("equal" split).
DEFAULT_GRADIENT_SHARE = 0.5
#: Default fraction of delta that DP-Fast MH spends on the T per-iteration deltas:
#: ``delta_iteration = delta_split * delta / T``; the rest, ``(1 - delta_split) * delta``, is the slack of
#: the composition.  0.25 sits in the flat minimum of the full-batch noise multiplier
#: ``sqrt(2 log(1.25 / delta_iteration)) / epsilon_iteration`` (seed 000, sigma_2) over the split for
#: runs of 400 to 8000 iterations at epsilon in [0.1, 1]; 0.5 costs about 1 % more noise, 0.9 about 8 %.
DEFAULT_DELTA_SPLIT = 0.25

# PLD discretisation for Gaussian compositions: interval = this fraction of the closed-form epsilon.
# Measured relative excess of the pessimistic PLD epsilon over the closed form: ~1e-8 for two composed
# Gaussian PLDs, ~1e-12 for one, for epsilon from 0.01 to 5.  Relative (not absolute) so that small
# budgets are as accurate as large ones, and the number of grid points stays ~1e5 whatever the budget.
_GAUSSIAN_PLD_RELATIVE_INTERVAL = 1e-4
_MIN_PLD_INTERVAL = 1e-12
# Default interval for Poisson-subsampled Gaussian PLDs (dp-accounting's own default).
_SUBSAMPLED_PLD_INTERVAL = 1e-4
# Calibration must spend at least this fraction of the budget.
_MIN_SPENT_FRACTION = 0.99
# Calibration aims this relative amount below the budget, so that other discretisations of the same PLD
# (e.g. dp-accounting's PLDAccountant at its default interval, which lands ~1e-12 above the closed form)
# also stay within the budget.  Costs a relative 1e-6 of noise.
_CALIBRATION_MARGIN = 1e-6
# Below this closed-form epsilon a Gaussian-only composition is accounted with the closed form alone (it is
# exact, seed 004 Theorem 2.4): dp-accounting's PLD construction for such extreme noise levels takes seconds
# to minutes and gigabytes of memory (measured: 15 s at epsilon 1e-5, out of memory at 1e-7).
_CLOSED_FORM_ONLY_BELOW = 1e-3

_KIND_GAUSSIAN = "gaussian"
_KIND_EPS_DELTA = "epsilon-delta"
_KIND_POISSON = "poisson-subsampled-gaussian"
_KIND_UNIFORM = "uniform-subsampled-gaussian"


# --------------------------------------------------------------------------------------------------
# input validation: every message names the input to change
# --------------------------------------------------------------------------------------------------

def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number (got {value!r})")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, not NaN")
    return value


def _check_epsilon(value: Any, name: str = "epsilon") -> float:
    value = _real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r}); pass a positive {name}")
    return value


def _check_delta(value: Any, name: str = "delta") -> float:
    value = _real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r}); typical values are "
                         f"well below 1/N")
    return value


def _check_count(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})")
    try:
        count = operator.index(value)
    except TypeError:
        if isinstance(value, numbers.Real) and float(value).is_integer():
            count = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})") from None
    if count < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (got {count})")
    return count


def _check_positive(value: Any, name: str) -> float:
    value = _real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    return value


def _check_open_fraction(value: Any, name: str) -> float:
    value = _real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r})")
    return value


def _check_algorithm(algorithm: Any) -> str:
    if isinstance(algorithm, str):
        key = algorithm.strip().lower().replace("_", "-")
        if key in ALGORITHMS:
            return key
    raise ValueError(f"algorithm must be one of {', '.join(repr(a) for a in ALGORITHMS)} "
                     f"(got {algorithm!r})")


def _no_finite_noise(epsilon: float, delta: float, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"no finite noise level meets the budget epsilon={epsilon!r}, delta={delta!r}{extra}; "
                      f"increase epsilon or delta")


# --------------------------------------------------------------------------------------------------
# closed form for compositions of Gaussian mechanisms (seed 004 Theorem 2.4)
# --------------------------------------------------------------------------------------------------

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _normal_interval(center: float, width: float) -> float:
    """P(center - width/2 < Z < center + width/2) for standard normal Z, without cancellation.

    Narrow intervals (width < 0.05; tiny mu) are integrated by 8-point Gauss-Legendre quadrature of the
    normal density (error far below double precision at that width; the width is passed, not recomputed
    from rounded end points); wide ones use erf/erfc differences on the side of zero where they do not
    cancel.
    """
    if width < 0.05:
        x = center + 0.5 * width * _GL_NODES
        return float(0.5 * width * np.dot(_GL_WEIGHTS, np.exp(-0.5 * x * x)) / math.sqrt(2.0 * math.pi))
    x1, x2 = center - 0.5 * width, center + 0.5 * width
    r = 1.0 / math.sqrt(2.0)
    if x1 >= 0.0:
        return 0.5 * float(special.erfc(x1 * r) - special.erfc(x2 * r))
    if x2 <= 0.0:
        return 0.5 * float(special.erfc(-x2 * r) - special.erfc(-x1 * r))
    return 0.5 * float(special.erf(x2 * r) - special.erf(x1 * r))


def _delta_closed_form(mu: float, epsilon: float) -> float:
    """delta(epsilon) of a PLD N(mu, 2 mu), no input checks.

    Theorem 2.4 writes it with erfc; with m = sqrt(2 mu), a = epsilon/m - m/2 and 0.5 erfc(x / sqrt 2) =
    Phi(-x) it is delta = Phi(-a) - e^epsilon Phi(-a - m), evaluated here as
    P(-a - m < Z < -a) - (e^epsilon - 1) Phi(-a - m) so that tiny mu and epsilon lose no digits; the last
    product is formed in log space so that e^epsilon cannot overflow.
    """
    if mu <= 0.0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    m = math.sqrt(2.0 * mu)
    a = epsilon / m - 0.5 * m
    band = _normal_interval(-epsilon / m, m)  # the band (-a - m, -a) is centred at -epsilon/m
    if epsilon == 0.0:
        return max(band, 0.0)
    log_em1 = math.log(math.expm1(epsilon)) if epsilon < 30.0 else epsilon + math.log1p(-math.exp(-epsilon))
    tail = math.exp(log_em1 + float(special.log_ndtr(-a - m)))
    return max(band - tail, 0.0)


def gaussian_delta(mu: float, epsilon: float) -> float:
    """Tight delta(epsilon) of a composition of Gaussian mechanisms with total ``mu`` (seed 004 Thm 2.4).

    ``mu = sum_i Delta_i^2 / (2 sigma_i^2)`` over all composed mechanisms (for a noise multiplier
    ``tau = sigma / Delta`` each contributes ``1 / (2 tau^2)``).  ``epsilon >= 0``.
    """
    mu = _real(mu, "mu")
    if mu < 0.0:
        raise ValueError(f"mu must be >= 0 (got {mu!r})")
    epsilon = _real(epsilon, "epsilon")
    if epsilon < 0.0 or math.isinf(epsilon):
        raise ValueError(f"epsilon must be a finite number >= 0 (got {epsilon!r})")
    return _delta_closed_form(mu, epsilon)


def _bracket_and_solve(f, start: float, increasing: bool) -> float:
    """Root of a monotone ``f`` on (0, inf), searched from ``start``.

    Halves or doubles from ``start`` until the root is bracketed by [x, 2x] (so the tolerance below is
    relative), then runs Brent's method.  ``increasing``: f goes from negative to positive.  Returns 0 or
    inf when the bracketing leaves the floating-point range.
    """
    sign = 1.0 if increasing else -1.0

    def g(x: float) -> float:
        return sign * f(x)

    lo = hi = start
    if g(start) > 0.0:
        while True:
            lo = hi * 0.5
            if lo == 0.0:
                return 0.0
            if g(lo) <= 0.0:
                break
            hi = lo
    else:
        while True:
            hi = lo * 2.0
            if math.isinf(hi):
                return math.inf
            if g(hi) > 0.0:
                break
            lo = hi
    if g(lo) == 0.0:
        return lo
    return optimize.brentq(g, lo, hi, xtol=lo * 1e-15, rtol=4 * np.finfo(float).eps, maxiter=200)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon >= 0 with ``gaussian_delta(mu, epsilon) <= delta`` (seed 004 Theorem 2.4).

    The returned value is on the safe side of the root: ``gaussian_delta(mu, result) <= delta``.
    """
    mu = _real(mu, "mu")
    if mu < 0.0 or math.isinf(mu):
        raise ValueError(f"mu must be a finite number >= 0 (got {mu!r})")
    delta = _check_delta(delta)
    return _gaussian_epsilon(mu, delta)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    if mu == 0.0 or _delta_closed_form(mu, 0.0) <= delta:
        return 0.0
    # zCDP bound (rho = mu): epsilon = mu + 2 sqrt(mu log(1/delta)) is always enough -> a safe start.
    start = mu + 2.0 * math.sqrt(mu * math.log(1.0 / delta))
    eps = _bracket_and_solve(lambda e: _delta_closed_form(mu, e) - delta, start, increasing=False)
    for _ in range(200):  # move to the safe side of the root if Brent stopped just below it
        if _delta_closed_form(mu, eps) <= delta:
            return eps
        eps = eps * (1.0 + 2.0 ** -50) + 5e-324
    return start  # pragma: no cover - the zCDP bound is a valid (if looser) answer


def gaussian_mu(epsilon: float, delta: float) -> float:
    """Largest total ``mu`` whose Gaussian composition is ``(epsilon, delta)``-DP (inverse of Thm 2.4).

    The returned value is on the safe side: ``gaussian_delta(result, epsilon) <= delta``.  It can
    underflow to 0 for extreme budgets (no finite noise level meets them); callers check for that.
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    return _gaussian_mu(epsilon, delta)


def _gaussian_mu(epsilon: float, delta: float) -> float:
    # Solve in m = sqrt(2 mu); the classical calibration sigma = sqrt(2 log(1.25/delta)) / epsilon gives
    # a starting point of the right order.
    start = epsilon / math.sqrt(2.0 * math.log(1.25 / delta))
    m = _bracket_and_solve(lambda m: _delta_closed_form(0.5 * m * m, epsilon) - delta, start,
                              increasing=True)
    if not math.isfinite(m):
        return m
    for _ in range(200):
        if _delta_closed_form(0.5 * m * m, epsilon) <= delta:
            return 0.5 * m * m
        m = m * (1.0 - 2.0 ** -50)
    # Only reached when the root lies where mu underflows: no representable mu > 0 meets the budget.
    return 0.0


# --------------------------------------------------------------------------------------------------
# mechanisms and their accounting
# --------------------------------------------------------------------------------------------------

def _gaussian_mechanism(name: str, tau: float, count: int, note: str) -> dict:
    return {"name": name, "kind": _KIND_GAUSSIAN, "noise_multiplier": tau, "mu": 0.5 / (tau * tau),
            "count": int(count), "note": note}


def _eps_delta_mechanism(name: str, epsilon: float, delta: float, count: int, note: str) -> dict:
    return {"name": name, "kind": _KIND_EPS_DELTA, "noise_multiplier": None, "epsilon": epsilon,
            "delta": delta, "count": int(count), "note": note}


@dataclasses.dataclass
class _Accounting:
    epsilon: float
    accountant: str
    closed_form_epsilon: float | None
    rdp_epsilon: float | None


def _gaussian_pld(noise_multiplier: float, interval: float, sampling_probability: float = 1.0):
    # REPLACE_ONE shifts by 2 * sensitivity, so sensitivity = 1/2 gives the shift Delta = 1 (see module doc).
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        sensitivity=0.5,
        value_discretization_interval=interval,
        sampling_prob=sampling_probability,
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE,
    )


def _rdp_epsilon(events: list[dp_event.DpEvent], delta: float,
                 relation=privacy_accountant.NeighboringRelation.REPLACE_ONE) -> float:
    accountant = rdp_privacy_accountant.RdpAccountant(neighboring_relation=relation)
    accountant.compose(dp_event.ComposedDpEvent(events))
    return float(accountant.get_epsilon(delta))


def _evaluate(mechanisms: list[dict], delta: float, interval: float | None = None) -> _Accounting:
    """Epsilon spent at ``delta`` by the composition of ``mechanisms`` (counts included)."""
    active = [m for m in mechanisms if m["count"] > 0]
    if not active:  # nothing ran: nothing spent
        gaussian_only = all(m["kind"] == _KIND_GAUSSIAN for m in mechanisms)
        return _Accounting(0.0, PLD_ACCOUNTANT, 0.0 if gaussian_only else None,
                           0.0 if gaussian_only else None)
    kinds = {m["kind"] for m in active}

    if _KIND_UNIFORM in kinds:
        if kinds != {_KIND_UNIFORM}:
            raise ValueError("uniformly subsampled mechanisms can only be composed with each other: dp-accounting "
                             "0.6 has no PLD for sampling without replacement, so they are accounted with RDP alone")
        events = []
        for m in active:
            frac = Fraction(m["sampling_probability"]).limit_denominator(10 ** 12)
            events.append(dp_event.SelfComposedDpEvent(
                dp_event.SampledWithoutReplacementDpEvent(
                    source_dataset_size=frac.denominator, sample_size=frac.numerator,
                    event=dp_event.GaussianDpEvent(m["noise_multiplier"])),
                m["count"]))
        eps = _rdp_epsilon(events, delta)
        return _Accounting(eps, RDP_ACCOUNTANT, None, eps)

    closed = rdp = None
    if kinds == {_KIND_GAUSSIAN}:
        mu_total = math.fsum(m["count"] * m["mu"] for m in active)
        closed = _gaussian_epsilon(mu_total, delta)
        if closed < _CLOSED_FORM_ONLY_BELOW and interval is None:
            return _Accounting(closed, CLOSED_FORM_ACCOUNTANT, closed, None)
        rdp = _rdp_epsilon([dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(m["noise_multiplier"]),
                                                         m["count"]) for m in active], delta)
        if interval is None:
            interval = max(closed * _GAUSSIAN_PLD_RELATIVE_INTERVAL, _MIN_PLD_INTERVAL) if closed > 0 \
                else _SUBSAMPLED_PLD_INTERVAL
    if interval is None:
        interval = _SUBSAMPLED_PLD_INTERVAL
    eps_deltas = [m["epsilon"] for m in active if m["kind"] == _KIND_EPS_DELTA]
    if eps_deltas:
        # Make the smallest per-mechanism epsilon an exact multiple of the grid: with a single kind of
        # (epsilon, delta) mechanism the interval equals its epsilon and the composition is exact.
        e0 = min(eps_deltas)
        interval = e0 / math.ceil(e0 / interval) if kinds != {_KIND_EPS_DELTA} else e0

    try:
        eps = _pld_epsilon(active, delta, interval)
    except OverflowError:
        # dp-accounting cannot build PLDs whose losses exceed double precision (e^epsilon overflows; seen at
        # per-mechanism epsilons in the hundreds). Fall back on bounds that need no PLD: the exact closed form
        # for Gaussian compositions, basic composition for (epsilon, delta) mechanisms.
        return _large_budget_accounting(active, delta, closed, rdp)
    return _Accounting(eps, PLD_ACCOUNTANT, closed, rdp)


def _large_budget_accounting(active: list[dict], delta: float, closed: float | None,
                             rdp: float | None) -> _Accounting:
    kinds = {m["kind"] for m in active}
    if kinds == {_KIND_GAUSSIAN}:
        return _Accounting(closed, CLOSED_FORM_ACCOUNTANT, closed, rdp)
    if kinds == {_KIND_EPS_DELTA}:
        spent_delta = math.fsum(m["count"] * m["delta"] for m in active)
        if spent_delta <= delta:
            return _Accounting(math.fsum(m["count"] * m["epsilon"] for m in active), BASIC_ACCOUNTANT, None, None)
    raise ValueError("the privacy loss of this run is too large for dp-accounting's PLD accountant (it overflows "
                     "double precision); use a smaller epsilon or fewer iterations")


def _pld_epsilon(active: list[dict], delta: float, interval: float) -> float:
    pld = None
    # dp-accounting's epsilon search divides by vanishing masses far in the tails (harmless overflow).
    with np.errstate(over="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        for m in active:
            if m["kind"] == _KIND_GAUSSIAN:
                # count identical Gaussians compose to one Gaussian with sigma/Delta = tau / sqrt(count)
                part = _gaussian_pld(m["noise_multiplier"] / math.sqrt(m["count"]), interval)
            elif m["kind"] == _KIND_EPS_DELTA:
                params = pld_common.DifferentialPrivacyParameters(m["epsilon"], m["delta"])
                part = pld_lib.from_privacy_parameters(params, value_discretization_interval=interval)
                part = part.self_compose(m["count"])
            elif m["kind"] == _KIND_POISSON:
                part = _gaussian_pld(m["noise_multiplier"], interval, m["sampling_probability"])
                part = part.self_compose(m["count"])
            else:  # pragma: no cover - internal
                raise ValueError(f"unknown mechanism kind {m['kind']!r}")
            pld = part if pld is None else pld.compose(part)
        return float(pld.get_epsilon_for_delta(delta))


# --------------------------------------------------------------------------------------------------
# report
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class PrivacyReport:
    """The (epsilon, delta) guarantee of a run and how it was computed.

    ``epsilon`` is the accountant's value (for PLD: the pessimistic, i.e. upper-bound, estimate) at
    ``delta``.  ``mechanisms`` lists every mechanism with its noise multiplier (sigma / sensitivity under
    substitution), ``mu`` or ``(epsilon, delta)`` where relevant, and its count over the whole run.
    ``closed_form_epsilon`` (Gaussian compositions, seed 004 Theorem 2.4) and ``rdp_epsilon``
    (dp-accounting's RDP accountant) are cross-checks; None where they do not apply.
    """

    epsilon: float
    delta: float
    accountant: str
    neighbouring_relation: str
    mechanisms: list[dict]
    rdp_epsilon: float | None = None
    closed_form_epsilon: float | None = None
    algorithm: str | None = None
    total_iterations: int | None = None
    guarantee: str = GUARANTEE

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """A JSON string (strict JSON: no NaN/Infinity) for InferenceData attrs."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, s: str) -> "PrivacyReport":
        data = json.loads(s)
        if not isinstance(data, dict):
            raise ValueError("s must be a JSON object produced by PrivacyReport.to_json")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"s has fields PrivacyReport does not know: {unknown}")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in data and f.default is dataclasses.MISSING)
        if missing:
            raise ValueError(f"s lacks required PrivacyReport fields: {missing}")
        return cls(**data)

    def __str__(self) -> str:
        title = f"Privacy guarantee: ({_fmt(self.epsilon)}, {_fmt(self.delta)})-DP"
        if self.algorithm:
            title += f" for {self.algorithm}"
        lines = [title,
                 f"  guarantee:             {self.guarantee}",
                 f"  neighbouring relation: {self.neighbouring_relation}",
                 f"  accountant:            {self.accountant}"]
        if self.total_iterations is not None:
            lines.append(f"  iterations (all chains, warmup + sampling): {self.total_iterations}")
        checks = []
        if self.closed_form_epsilon is not None:
            checks.append(f"closed form (Gaussian composition) epsilon = {_fmt(self.closed_form_epsilon)}")
        if self.rdp_epsilon is not None:
            checks.append(f"RDP epsilon = {_fmt(self.rdp_epsilon)}")
        if checks:
            lines.append("  cross-checks:          " + "; ".join(checks))
        lines.append("  mechanisms:")
        for m in self.mechanisms:
            parts = [m.get("kind", "?")]
            if m.get("noise_multiplier") is not None:
                parts.append(f"noise multiplier {_fmt(m['noise_multiplier'])}")
            if m.get("mu") is not None:
                parts.append(f"mu {_fmt(m['mu'])} each")
            if m.get("epsilon") is not None:
                parts.append(f"({_fmt(m['epsilon'])}, {_fmt(m.get('delta', 0.0))})-DP each")
            if m.get("sampling_probability") is not None:
                parts.append(f"sampling probability {_fmt(m['sampling_probability'])}")
            parts.append(f"x {m.get('count', '?')}")
            lines.append(f"    - {m.get('name', '?')}: " + ", ".join(parts))
        return "\n".join(lines)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _make_report(mechanisms: list[dict], delta: float, algorithm: str | None,
                 total_iterations: int | None, interval: float | None = None) -> PrivacyReport:
    acc = _evaluate(mechanisms, delta, interval)
    return PrivacyReport(epsilon=acc.epsilon, delta=delta, accountant=acc.accountant,
                         neighbouring_relation=NEIGHBOURING_RELATION, mechanisms=mechanisms,
                         rdp_epsilon=acc.rdp_epsilon, closed_form_epsilon=acc.closed_form_epsilon,
                         algorithm=algorithm, total_iterations=total_iterations)


# --------------------------------------------------------------------------------------------------
# per-algorithm mechanism lists
# --------------------------------------------------------------------------------------------------

_PENALTY_NAME = "log-likelihood ratio (penalty acceptance test)"
_PENALTY_NOTE = "sigma_l = 2 tau_l b_l ||theta' - theta||, sensitivity 2 b_l ||theta' - theta||; once per iteration"
_GRADIENT_NAME = "clipped log-likelihood gradient (leapfrog)"
_GRADIENT_NOTE = "sigma_g = 2 tau_g b_g, sensitivity 2 b_g; L + 1 releases per iteration"
_FAST_MH_NAME = "DP-Fast MH acceptance test"
_FAST_MH_NOTE = ("(epsilon_iteration, delta_iteration)-DP per iteration (seed 000 Theorem 2); noise scales "
                 "sigma_1, sigma_2 follow from it in Algorithm 2; composed as the PLD of an "
                 "(epsilon, delta) mechanism")


def _mechanisms(algorithm: str, count: int, *, tau_l=None, tau_g=None, leapfrog_steps=None,
                epsilon_iteration=None, delta_iteration=None) -> list[dict]:
    if algorithm == "penalty":
        return [_gaussian_mechanism(_PENALTY_NAME, tau_l, count, _PENALTY_NOTE)]
    if algorithm == "dp-hmc":
        return [_gaussian_mechanism(_PENALTY_NAME, tau_l, count, _PENALTY_NOTE),
                _gaussian_mechanism(_GRADIENT_NAME, tau_g, count * (leapfrog_steps + 1), _GRADIENT_NOTE)]
    return [_eps_delta_mechanism(_FAST_MH_NAME, epsilon_iteration, delta_iteration, count, _FAST_MH_NOTE)]


# --------------------------------------------------------------------------------------------------
# plan (budget-first)
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """Noise levels that make a planned run spend (at most, and at least 99 % of) its budget.

    ``iterations`` is warmup + sampling per chain; the run has ``total_iterations = chains * iterations``
    iterations.  Fields that do not apply to ``algorithm`` are None.
    """

    algorithm: str
    epsilon: float
    delta: float
    chains: int
    iterations: int
    tau_l: float | None = None
    tau_g: float | None = None
    leapfrog_steps: int | None = None
    epsilon_iteration: float | None = None
    delta_iteration: float | None = None
    gradient_share: float | None = None

    @property
    def total_iterations(self) -> int:
        return self.chains * self.iterations

    def mechanisms(self, completed_iterations: int | None = None) -> list[dict]:
        count = self.total_iterations if completed_iterations is None else completed_iterations
        return _mechanisms(self.algorithm, count, tau_l=self.tau_l, tau_g=self.tau_g,
                           leapfrog_steps=self.leapfrog_steps, epsilon_iteration=self.epsilon_iteration,
                           delta_iteration=self.delta_iteration)

    def report(self, completed_iterations: int | None = None) -> PrivacyReport:
        """Budget spent at the plan's delta.

        ``completed_iterations``: iterations run in total, summed over chains (an interrupted run); an
        iteration counts as soon as any of its mechanisms ran.  None means the whole plan.
        """
        if completed_iterations is None:
            count = self.total_iterations
        else:
            count = _check_count(completed_iterations, "completed_iterations", minimum=0)
            if count > self.total_iterations:
                raise ValueError(f"completed_iterations={count} exceeds the plan's chains * iterations = "
                                 f"{self.total_iterations}; the budget does not cover more iterations")
        return _make_report(self.mechanisms(count), self.delta, self.algorithm, count)


_SHAPE_OPTIONS = {
    "penalty": (),
    "dp-hmc": ("leapfrog_steps", "gradient_share"),
    "dp-fast-mh": ("delta_split",),
    "dp-fast-mh-full": ("delta_split",),
}


def calibrate(algorithm: str, *, epsilon: float, delta: float, chains: int, iterations: int,
              **shape: Any) -> PrivacyPlan:
    """Noise levels for a run of ``chains`` x ``iterations`` (warmup + sampling) within (epsilon, delta).

    Shape options:
      * ``"penalty"``: none.  Returns ``tau_l``.
      * ``"dp-hmc"``: ``leapfrog_steps`` (int >= 1, required); ``gradient_share`` in (0, 1) or "equal"
        (default 0.5): the fraction of the total mu spent on the L + 1 gradient releases per iteration,
        the rest goes to the acceptance test.  Returns ``tau_l`` and ``tau_g``.
      * ``"dp-fast-mh"``, ``"dp-fast-mh-full"``: ``delta_split`` in (0, 1) (default 0.25):
        ``delta_iteration = delta_split * delta / (chains * iterations)``, the remaining
        ``(1 - delta_split) * delta`` is the composition's slack; ``epsilon_iteration`` is the largest value
        whose T-fold PLD composition is (epsilon, delta)-DP.

    The plan spends at most the budget, per dp-accounting's PLD (pessimistic) and, for Gaussian
    compositions, per the closed form of seed 004 Theorem 2.4, and at least 99 % of it.
    """
    algorithm = _check_algorithm(algorithm)
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    chains = _check_count(chains, "chains")
    iterations = _check_count(iterations, "iterations")
    allowed = _SHAPE_OPTIONS[algorithm]
    unknown = sorted(set(shape) - set(allowed))
    if unknown:
        accepted = ", ".join(allowed) if allowed else "none"
        raise ValueError(f"option(s) {', '.join(unknown)} do not apply to algorithm {algorithm!r} "
                         f"(accepted options: {accepted})")
    total = chains * iterations
    common = dict(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains, iterations=iterations)

    if algorithm == "penalty":
        def build(mu: float) -> PrivacyPlan:
            return PrivacyPlan(**common, tau_l=math.sqrt(total / (2.0 * mu)))
        return _calibrate_gaussian(build, epsilon, delta)

    if algorithm == "dp-hmc":
        if shape.get("leapfrog_steps") is None:
            raise ValueError("algorithm 'dp-hmc' needs leapfrog_steps (the number L of leapfrog steps, "
                             "int >= 1; each iteration releases L + 1 gradients)")
        steps = _check_count(shape["leapfrog_steps"], "leapfrog_steps")
        share = shape.get("gradient_share", DEFAULT_GRADIENT_SHARE)
        if isinstance(share, str) and share.strip().lower() == "equal":
            share = DEFAULT_GRADIENT_SHARE
        share = _check_open_fraction(share, "gradient_share")

        def build(mu: float) -> PrivacyPlan:
            tau_l = math.sqrt(total / (2.0 * (1.0 - share) * mu))
            tau_g = math.sqrt(total * (steps + 1) / (2.0 * share * mu))
            return PrivacyPlan(**common, tau_l=tau_l, tau_g=tau_g, leapfrog_steps=steps,
                               gradient_share=share)
        return _calibrate_gaussian(build, epsilon, delta)

    split = _check_open_fraction(shape.get("delta_split", DEFAULT_DELTA_SPLIT), "delta_split")
    return _calibrate_fast_mh(common, total, split)


def _calibrate_gaussian(build, epsilon: float, delta: float) -> PrivacyPlan:
    target = epsilon * (1.0 - _CALIBRATION_MARGIN)
    for _ in range(20):
        mu = _gaussian_mu(target, delta)
        if not (mu > 0.0 and math.isfinite(mu)):
            raise _no_finite_noise(epsilon, delta, "the required noise overflows double precision")
        plan = build(mu)
        if not all(math.isfinite(t) for t in (plan.tau_l, plan.tau_g) if t is not None):
            raise _no_finite_noise(epsilon, delta, "the required noise overflows double precision")
        acc = _evaluate(plan.mechanisms(), delta)
        spent = max(acc.epsilon, acc.closed_form_epsilon)
        if spent <= epsilon:
            if spent < _MIN_SPENT_FRACTION * epsilon:  # only at budgets beyond double precision
                raise _no_finite_noise(epsilon, delta, f"the accountants cannot resolve this budget: "
                                                       f"the closest noise level spends {spent!r}")
            return plan
        # The PLD's pessimistic discretisation overshoots the closed form slightly: aim lower by twice the
        # overshoot and try again (one retry is the norm).
        target -= 2.0 * (spent - epsilon) + 4.0 * np.finfo(float).eps * epsilon
        if target <= 0.0:
            break
    raise _no_finite_noise(epsilon, delta, "the PLD accountant could not confirm any noise level")


def _fast_mh_epsilon(epsilon_iteration: float, delta_iteration: float, count: int, delta: float) -> float:
    mech = _mechanisms("dp-fast-mh", count, epsilon_iteration=epsilon_iteration,
                       delta_iteration=delta_iteration)
    return _evaluate(mech, delta).epsilon


def _calibrate_fast_mh(common: dict, total: int, split: float) -> PrivacyPlan:
    epsilon, delta = common["epsilon"], common["delta"]
    delta_iteration = split * delta / total
    if not delta_iteration > 0.0:
        raise _no_finite_noise(epsilon, delta, "delta / (chains * iterations) underflows")

    target = epsilon * (1.0 - _CALIBRATION_MARGIN)

    def f(e: float) -> float:
        return _fast_mh_epsilon(e, delta_iteration, total, delta) - target

    # Basic composition: target / T per iteration always fits (and leaves delta slack), so the root is
    # at or above it; the bracketing doubles from there.
    start = target / total
    if f(start) > 0.0:  # pragma: no cover - contradicts basic composition
        raise _no_finite_noise(epsilon, delta)
    e = _bracket_and_solve(f, start, increasing=True)
    if not math.isfinite(e):  # pragma: no cover - composed epsilon grows without bound in e
        raise _no_finite_noise(epsilon, delta)
    for _ in range(200):
        if f(e) <= 0.0:
            break
        e *= 1.0 - 1e-12
    # DP-Fast MH calibrates its Gaussian tests with the classic multiplier only below epsilon 1 and with the
    # exact (analytic) one above, so every epsilon_iteration is served by a proven calibration.
    return PrivacyPlan(**common, epsilon_iteration=e, delta_iteration=delta_iteration)


# --------------------------------------------------------------------------------------------------
# noise-first
# --------------------------------------------------------------------------------------------------

def account(algorithm: str, *, delta: float, chains: int, iterations: int, tau_l: float | None = None,
            tau_g: float | None = None, leapfrog_steps: int | None = None,
            epsilon_iteration: float | None = None, delta_iteration: float | None = None) -> PrivacyReport:
    """Budget spent (epsilon at ``delta``) by a run with explicit noise levels.

    ``"penalty"`` needs ``tau_l``; ``"dp-hmc"`` needs ``tau_l``, ``tau_g`` and ``leapfrog_steps``;
    ``"dp-fast-mh"``/``"dp-fast-mh-full"`` need ``epsilon_iteration`` and ``delta_iteration``
    (``chains * iterations * delta_iteration`` must stay below ``delta``).  Parameters that do not apply
    to the algorithm must be left None.
    """
    algorithm = _check_algorithm(algorithm)
    delta = _check_delta(delta)
    chains = _check_count(chains, "chains")
    iterations = _check_count(iterations, "iterations")
    given = {"tau_l": tau_l, "tau_g": tau_g, "leapfrog_steps": leapfrog_steps,
             "epsilon_iteration": epsilon_iteration, "delta_iteration": delta_iteration}
    needed = {"penalty": ("tau_l",), "dp-hmc": ("tau_l", "tau_g", "leapfrog_steps"),
              "dp-fast-mh": ("epsilon_iteration", "delta_iteration"),
              "dp-fast-mh-full": ("epsilon_iteration", "delta_iteration")}[algorithm]
    for name, value in given.items():
        if name in needed and value is None:
            raise ValueError(f"algorithm {algorithm!r} needs {name}")
        if name not in needed and value is not None:
            raise ValueError(f"{name} does not apply to algorithm {algorithm!r}; leave it None")
    total = chains * iterations
    kwargs: dict[str, Any] = {}
    if algorithm in ("penalty", "dp-hmc"):
        kwargs["tau_l"] = _check_positive(tau_l, "tau_l")
    if algorithm == "dp-hmc":
        kwargs["tau_g"] = _check_positive(tau_g, "tau_g")
        kwargs["leapfrog_steps"] = _check_count(leapfrog_steps, "leapfrog_steps")
    if algorithm in ("dp-fast-mh", "dp-fast-mh-full"):
        kwargs["epsilon_iteration"] = _check_epsilon(epsilon_iteration, "epsilon_iteration")
        d_it = _real(delta_iteration, "delta_iteration")
        if not 0.0 <= d_it < 1.0:
            raise ValueError(f"delta_iteration must lie in [0, 1) (got {d_it!r})")
        if total * d_it >= delta:
            raise ValueError(f"delta_iteration * chains * iterations = {total * d_it!r} is not below "
                             f"delta={delta!r}: no epsilon is reachable; lower delta_iteration or raise delta")
        kwargs["delta_iteration"] = d_it
    return _make_report(_mechanisms(algorithm, total, **kwargs), delta, algorithm, total)


# --------------------------------------------------------------------------------------------------
# subsampled Gaussian mechanisms (for stochastic-gradient samplers)
# --------------------------------------------------------------------------------------------------

def subsampled_gaussian_report(noise_multiplier: float, sampling_probability: float, count: int,
                               delta: float, *, sampling: str = "poisson",
                               name: str = "subsampled clipped gradient",
                               value_discretization_interval: float | None = None) -> PrivacyReport:
    """Budget spent by ``count`` subsampled Gaussian mechanisms (substitute-one-row relation).

    ``noise_multiplier`` = sigma / Delta with Delta = 2 b the substitution sensitivity of a sum of
    per-row terms clipped to norm b (the module-wide convention).
    ``sampling="poisson"``: each row enters each batch independently with ``sampling_probability``;
    accounted with dp-accounting's PLD (interval ``value_discretization_interval``, default 1e-4).
    ``sampling="uniform"``: a fixed-size batch drawn without replacement, ``sampling_probability`` =
    batch size / N; accounted with dp-accounting's RDP accountant (no PLD for it in dp-accounting 0.6).
    """
    noise_multiplier = _check_positive(noise_multiplier, "noise_multiplier")
    q = _real(sampling_probability, "sampling_probability")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling_probability must lie in (0, 1] (got {q!r})")
    count = _check_count(count, "count")
    delta = _check_delta(delta)
    if sampling not in ("poisson", "uniform"):
        raise ValueError(f"sampling must be 'poisson' or 'uniform' (got {sampling!r})")
    interval = None
    if value_discretization_interval is not None:
        interval = _check_positive(value_discretization_interval, "value_discretization_interval")
    kind = _KIND_POISSON if sampling == "poisson" else _KIND_UNIFORM
    note = "sigma = noise_multiplier * 2 b for per-row terms clipped to norm b"
    if kind == _KIND_POISSON and q == 1.0:
        # Poisson sampling with q = 1 keeps every row: plain Gaussian mechanisms, closed form applies.
        mech = _gaussian_mechanism(name, noise_multiplier, count, note)
        mech["sampling_probability"] = 1.0
    else:
        mech = {"name": name, "kind": kind, "noise_multiplier": noise_multiplier,
                "sampling_probability": q, "count": count, "note": note}
    return _make_report([mech], delta, None, None, interval)


def subsampled_gaussian_epsilon(noise_multiplier: float, sampling_probability: float, count: int,
                                delta: float, sampling: str = "poisson") -> float:
    """Epsilon at ``delta`` of ``count`` subsampled Gaussian mechanisms; see subsampled_gaussian_report."""
    return subsampled_gaussian_report(noise_multiplier, sampling_probability, count, delta,
                                      sampling=sampling).epsilon
