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

Generic accounting (no algorithm is known here by name)
    Each kernel declares the ``dp_accounting`` DpEvents of one iteration as a function of its noise
    parameters (``stan_dp.privacy.events.NoiseDeclaration``, built by the kernel class's
    ``noise_declaration``). :func:`calibrate` composes them over chains x iterations and inverts the budget
    by a one-dimensional root search on a noise scale (:func:`calibrate_phases`, which also composes several
    phases, e.g. a warm start and a main phase, into one budget); :func:`account` composes them at given
    noise parameters.  The accountant is chosen by the kinds of events, never by the algorithm.

Accountants
    * Gaussian compositions have the closed form of the DP-HMC paper Theorem 2.4 (:func:`gaussian_delta`,
      :func:`gaussian_epsilon`): the PLD of a composition of Gaussian mechanisms is ``N(mu, 2 mu)`` with
      ``mu = sum_i Delta_i^2 / (2 sigma_i^2)``.  Calibration searches this closed form and then confirms the
      result with dp-accounting's PLD (pessimistic, connect-the-dots), which is the number reported.
      dp-accounting's RDP accountant is computed as a cross-check; it is never tighter.
    * ``EpsilonDeltaDpEvent`` (DP-Fast MH's iteration): dp-accounting's PLD of an ``(epsilon, delta)``
      mechanism, self-composed ``T`` times.
      The discretisation interval is set to ``epsilon_iteration`` itself, so the losses ``+-epsilon_iteration``
      are represented exactly and the composition is exact (the binomial optimal-composition law).
      Composed with other events, the interval is ``epsilon_iteration / 2^k`` (:func:`_exact_grid_interval`),
      which keeps ``+-epsilon_iteration`` exactly on the grid, so the accountant's epsilon stays monotone in
      the noise and the budget inversion cannot stop on a rounding spike.
    * Poisson-subsampled Gaussian: dp-accounting's PLD (substitution relation).  Uniformly subsampled
      (fixed batch size without replacement) Gaussian: dp-accounting's RDP accountant (Wang, Balle and
      Kasiviswanathan 2019, Theorem 27, replace-one relation), the tightest accountant dp-accounting 0.6
      has for it (its PLD has no event for sampling without replacement); the report names RDP then.

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
from typing import Any, ClassVar

import numpy as np
from scipy import optimize, special

from dp_accounting import dp_event
from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

from . import events

__all__ = [
    "NEIGHBOURING_RELATION",
    "PrivacyPlan",
    "PrivacyReport",
    "account",
    "calibrate",
    "calibrate_phases",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]

NEIGHBOURING_RELATION = "substitute one row; N public"
GUARANTEE = "approximate differential privacy, (epsilon, delta)-DP"
PLD_ACCOUNTANT = "PLD (dp-accounting)"
CLOSED_FORM_ACCOUNTANT = "closed form for Gaussian compositions (Raisa, Koskela & Honkela, DP-HMC, Theorem 2.4; exact)"
RDP_ACCOUNTANT = "RDP (dp-accounting)"
BASIC_ACCOUNTANT = "basic composition (sum of per-mechanism epsilons and deltas; used where the PLD overflows)"

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
# exact, the DP-HMC paper Theorem 2.4): dp-accounting's PLD construction for such extreme noise levels takes seconds
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


def _no_finite_noise(epsilon: float, delta: float, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"no finite noise level meets the budget epsilon={epsilon!r}, delta={delta!r}{extra}; "
                      f"increase epsilon or delta")


# --------------------------------------------------------------------------------------------------
# closed form for compositions of Gaussian mechanisms (the DP-HMC paper Theorem 2.4)
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
    """Tight delta(epsilon) of a composition of Gaussian mechanisms with total ``mu`` (the DP-HMC paper Thm 2.4).

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
    """Smallest epsilon >= 0 with ``gaussian_delta(mu, epsilon) <= delta`` (the DP-HMC paper Theorem 2.4).

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
# releases (DpEvents) -> mechanism records -> epsilon
# --------------------------------------------------------------------------------------------------

def _describe(release: events.Release, iterations: int) -> dict:
    """The report record of ``release`` repeated in ``iterations`` iterations: a dispatch on the DpEvent
    type (never on an algorithm)."""
    count = int(release.count) * int(iterations)
    ev = release.event
    record: dict[str, Any] = {"name": release.name}
    if isinstance(ev, dp_event.GaussianDpEvent):
        tau = float(ev.noise_multiplier)
        record.update(kind=_KIND_GAUSSIAN, noise_multiplier=tau, mu=0.5 / (tau * tau))
    elif isinstance(ev, dp_event.PoissonSampledDpEvent) and isinstance(ev.event, dp_event.GaussianDpEvent):
        record.update(kind=_KIND_POISSON, noise_multiplier=float(ev.event.noise_multiplier),
                      sampling_probability=float(ev.sampling_probability))
    elif (isinstance(ev, dp_event.SampledWithoutReplacementDpEvent)
          and isinstance(ev.event, dp_event.GaussianDpEvent)):
        record.update(kind=_KIND_UNIFORM, noise_multiplier=float(ev.event.noise_multiplier),
                      sampling_probability=ev.sample_size / ev.source_dataset_size,
                      batch_size=int(ev.sample_size), source_dataset_size=int(ev.source_dataset_size))
    elif isinstance(ev, events.EpsilonDeltaDpEvent):
        record.update(kind=_KIND_EPS_DELTA, noise_multiplier=None, epsilon=float(ev.epsilon),
                      delta=float(ev.delta))
    else:
        raise ValueError(f"the accountant does not support the DpEvent {ev!r} (release {release.name!r})")
    record["count"] = count
    record["note"] = release.note
    return record


@dataclasses.dataclass
class _Accounting:
    epsilon: float
    accountant: str
    closed_form_epsilon: float | None
    rdp_epsilon: float | None


def _pld_of_gaussian(noise_multiplier: float, interval: float, sampling_probability: float = 1.0):
    # Our tau = sigma / Delta; dp-accounting's REPLACE_ONE shifts by 2 * sensitivity, so sensitivity = 1/2
    # (units of Delta) gives the shift Delta = 1 (see the module doc and events.py).
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=noise_multiplier,
        sensitivity=0.5,
        value_discretization_interval=interval,
        sampling_prob=sampling_probability,
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE,
    )


def _rdp_event(m: dict) -> dp_event.DpEvent:
    gaussian = dp_event.GaussianDpEvent(m["noise_multiplier"])
    if m["kind"] == _KIND_UNIFORM:
        gaussian = dp_event.SampledWithoutReplacementDpEvent(
            source_dataset_size=m["source_dataset_size"], sample_size=m["batch_size"], event=gaussian)
    return dp_event.SelfComposedDpEvent(gaussian, m["count"])


def _rdp_epsilon(mechanisms: list[dict], delta: float) -> float:
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_event.ComposedDpEvent([_rdp_event(m) for m in mechanisms]))
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
        # dp-accounting 0.6 has no PLD for sampling without replacement: the whole composition goes to RDP.
        if not kinds <= {_KIND_UNIFORM, _KIND_GAUSSIAN}:
            raise ValueError("mechanisms on fixed-size minibatches (sampling without replacement) compose only "
                             "with Gaussian mechanisms: dp-accounting 0.6 accounts them with RDP alone, which "
                             "has no Poisson-sampled (replace-one) or (epsilon, delta) events")
        eps = _rdp_epsilon(active, delta)
        return _Accounting(eps, RDP_ACCOUNTANT, None, eps)

    closed = rdp = None
    if kinds == {_KIND_GAUSSIAN}:
        mu_total = math.fsum(m["count"] * m["mu"] for m in active)
        closed = _gaussian_epsilon(mu_total, delta)
        if closed < _CLOSED_FORM_ONLY_BELOW and interval is None:
            return _Accounting(closed, CLOSED_FORM_ACCOUNTANT, closed, None)
        rdp = _rdp_epsilon(active, delta)
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
        interval = _exact_grid_interval(e0, interval) if kinds != {_KIND_EPS_DELTA} else e0

    try:
        eps = _pld_epsilon(active, delta, interval)
    except OverflowError:
        # dp-accounting cannot build PLDs whose losses exceed double precision (e^epsilon overflows; seen at
        # per-mechanism epsilons in the hundreds). Fall back on bounds that need no PLD: the exact closed form
        # for Gaussian compositions, basic composition for (epsilon, delta) mechanisms.
        return _large_budget_accounting(active, delta, closed, rdp)
    return _Accounting(eps, PLD_ACCOUNTANT, closed, rdp)


def _exact_grid_interval(epsilon: float, at_most: float) -> float:
    """A PLD grid interval in ``(at_most / 2, at_most]`` of which ``epsilon`` is EXACTLY an integer multiple.

    dp-accounting's ``from_privacy_parameters`` puts the losses ``+-epsilon`` at ``ceil(+-epsilon / h)`` grid
    points. With ``h = epsilon / k`` for an arbitrary integer ``k``, the floating-point quotient
    ``epsilon / h`` is often ``k +- 1 ulp``, and the ceiling then moves a loss by a whole grid step
    (``+epsilon`` up to ``k + 1``, or ``-epsilon`` up to ``-(k - 1)``): still an upper bound, but ~``1 / k``
    of the mechanism's loss too pessimistic per composed mechanism, switching on and off as ``epsilon``
    moves by ulps. The accountant's epsilon is then not monotone in the noise scale and the budget
    inversion can stop on such a spike (measured: DP-Fast MH after a DP-GD warm start, N = 2,000, 2 chains
    x 600 iterations, epsilon 1: spikes of +0.05 to +0.08 that left the calibration at 0.955 of the budget).
    With ``k`` a power of two, ``h = epsilon / k`` only changes the exponent, so ``k h == epsilon`` exactly
    and both losses sit exactly on the grid.
    """
    k = 1 << max(0, math.ceil(math.log2(epsilon / at_most)))
    h = epsilon / k
    while h > at_most:  # log2 rounding at an exact power of two
        k, h = 2 * k, epsilon / (2 * k)
    return h


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
                part = _pld_of_gaussian(m["noise_multiplier"] / math.sqrt(m["count"]), interval)
            elif m["kind"] == _KIND_EPS_DELTA:
                params = pld_common.DifferentialPrivacyParameters(m["epsilon"], m["delta"])
                part = pld_lib.from_privacy_parameters(params, value_discretization_interval=interval)
                part = part.self_compose(m["count"])
            else:  # Poisson-subsampled Gaussian
                part = _pld_of_gaussian(m["noise_multiplier"], interval, m["sampling_probability"])
                part = part.self_compose(m["count"])
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
    substitution), ``mu`` or ``(epsilon, delta)`` where relevant, its sampling probability for minibatch
    mechanisms, and its count over the whole run.  ``closed_form_epsilon`` (Gaussian compositions, the DP-HMC paper
    Theorem 2.4) and ``rdp_epsilon`` (dp-accounting's RDP accountant) are cross-checks; None where they do
    not apply.  Minibatch Gaussian mechanisms also carry ``paper_epsilon``: the epsilon that the papers'
    own DP-SGLD bound (the Privacy-for-Free paper Algorithm 2 / Theorem 4, constant 128) certifies for the same noise, steps
    and batch fraction (looser; reported for comparison, never used to calibrate).
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
            if m.get("paper_epsilon") is not None:
                parts.append(f"the DP-SGLD paper's bound (Wang, Fienberg & Smola 2015, Theorem 4) would give epsilon {_fmt(m['paper_epsilon'])}")
            lines.append(f"    - {m.get('name', '?')}: " + ", ".join(parts))
        return "\n".join(lines)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _with_paper_bound(mechanisms: list[dict], delta: float) -> list[dict]:
    out = []
    for m in mechanisms:
        m = dict(m)
        if m["kind"] in (_KIND_POISSON, _KIND_UNIFORM) and m["count"] > 0:
            # the papers' noise multiplier is proportional to 1 / epsilon: invert it at our noise multiplier
            m["paper_epsilon"] = events.paper_sgmcmc_noise_multiplier(
                m["sampling_probability"], m["count"], 1.0, delta) / m["noise_multiplier"]
        out.append(m)
    return out


def _make_report(mechanisms: list[dict], delta: float, algorithm: str | None,
                 total_iterations: int | None, interval: float | None = None) -> PrivacyReport:
    acc = _evaluate(mechanisms, delta, interval)
    return PrivacyReport(epsilon=acc.epsilon, delta=delta, accountant=acc.accountant,
                         neighbouring_relation=NEIGHBOURING_RELATION,
                         mechanisms=_with_paper_bound(mechanisms, delta),
                         rdp_epsilon=acc.rdp_epsilon, closed_form_epsilon=acc.closed_form_epsilon,
                         algorithm=algorithm, total_iterations=total_iterations)


def _phase_mechanisms(phases: list[tuple[list[events.Release], int]]) -> list[dict]:
    return [_describe(r, iterations) for releases, iterations in phases for r in releases]


# --------------------------------------------------------------------------------------------------
# plan (budget-first) and the generic calibration
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """Noise levels that make a planned run spend (at most, and at least 99 % of) its budget.

    ``iterations`` is warmup + sampling per chain; the run has ``total_iterations = chains * iterations``
    iterations.  ``parameters`` holds the noise parameters (and fixed shape values) the kernel reads; each
    is also an attribute (``plan.tau_l``), and a name the kernel does not use reads as None.
    ``releases`` are the DpEvents of one iteration at those parameters, per phase (one phase for a
    plain run); ``noise_scale`` is the calibrated root of the search (None for noise-first plans).
    """

    algorithm: str
    epsilon: float
    delta: float
    chains: int
    iterations: int
    parameters: dict
    releases: tuple = ()
    noise_scale: float | None = None

    #: names that read as None when a kernel's plan does not carry them (the parameters of the built-in kernels)
    KNOWN_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "tau_l", "tau_g", "leapfrog_steps", "gradient_share", "epsilon_iteration", "delta_iteration",
        "sampling_rate", "batch_size", "batch_sampling")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        parameters = self.__dict__.get("parameters", {})
        if name in parameters:
            return parameters[name]
        if name in PrivacyPlan.KNOWN_PARAMETERS:
            return None
        raise AttributeError(f"the privacy plan of {self.__dict__.get('algorithm')!r} has no {name!r}")

    @property
    def total_iterations(self) -> int:
        return self.chains * self.iterations

    def _phases(self, completed_iterations: int | None) -> list[tuple[list[events.Release], int]]:
        phases = [(list(rel), int(n)) for rel, n in self.releases]
        if completed_iterations is None:
            return phases
        # iterations that ran are assigned to the phases in order (a chain finishes a phase before the next)
        left, out = int(completed_iterations), []
        for rel, n in phases:
            take = min(left, n)
            out.append((rel, take))
            left -= take
        return out

    def mechanisms(self, completed_iterations: int | None = None) -> list[dict]:
        return _phase_mechanisms(self._phases(completed_iterations))

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
        mech = self.mechanisms(None if completed_iterations is None else count)
        return _make_report(mech, self.delta, self.algorithm, count)

    def to_dict(self) -> dict:
        """JSON-able description (for InferenceData attrs): budget, run size and noise parameters."""
        return {"algorithm": self.algorithm, "epsilon": self.epsilon, "delta": self.delta,
                "chains": self.chains, "iterations": self.iterations, **self.parameters}


def _kernel_class(algorithm: Any) -> tuple[str, type]:
    from ..samplers import ALL_ALGORITHMS as registry  # the kernels declare their own events

    if isinstance(algorithm, str):
        key = algorithm.strip().lower().replace("_", "-")
        if key in registry:
            return key, registry[key]
    raise ValueError(f"algorithm must be one of {', '.join(repr(a) for a in registry)} (got {algorithm!r})")


def _declaration(algorithm: str, *, chains: int, iterations: int, delta: float, n_rows: int | None,
                 shape: dict) -> tuple[str, events.NoiseDeclaration]:
    key, cls = _kernel_class(algorithm)
    decl = cls.noise_declaration(shape, n_rows=n_rows, total_iterations=chains * iterations, delta=delta)
    return key, decl


def calibrate(algorithm: str, *, epsilon: float, delta: float, chains: int, iterations: int,
              n_rows: int | None = None, prefix_phases: tuple = (), **shape: Any) -> PrivacyPlan:
    """Noise levels for a run of ``chains`` x ``iterations`` (warmup + sampling) within (epsilon, delta).

    ``algorithm`` names a kernel in ``stan_dp.samplers.ALGORITHMS``; the kernel declares the DpEvents of one
    iteration (``noise_declaration``) and this function inverts the budget generically
    (:func:`calibrate_phases`). ``shape`` holds the kernel options that shape its releases (e.g.
    ``leapfrog_steps`` and ``gradient_share`` for DP-HMC, ``delta_split`` for DP-Fast MH, ``sampling_rate`` /
    ``batch_size`` / ``batch_sampling`` for the SG-MCMC kernels; defaults from the kernel's option spec);
    ``n_rows`` (public N) is needed by kernels that draw minibatches.

    The plan spends at most the budget, per dp-accounting's PLD (pessimistic) and, for Gaussian
    compositions, per the closed form of the DP-HMC paper Theorem 2.4 (RDP for fixed-size minibatches), and at
    least 99 % of it.

    ``prefix_phases``: phases that run before the kernel (e.g. a warm start, ``stan_dp.warm_start``) whose
    releases are fixed (independent of the search scale); the kernel's noise is calibrated so that the
    composition of the prefix and the kernel's run spends the budget, and the plan's parameters are the
    kernel's.
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    chains = _check_count(chains, "chains")
    iterations = _check_count(iterations, "iterations")
    key, decl = _declaration(algorithm, chains=chains, iterations=iterations, delta=delta, n_rows=n_rows,
                             shape=shape)
    prefix = list(prefix_phases)
    plan = calibrate_phases([*prefix, events.Phase(decl, chains, iterations)], epsilon=epsilon, delta=delta,
                            algorithm=key, parameter_phase=len(prefix))
    if decl.check is not None:
        decl.check(plan.parameters)
    return plan


def calibrate_phases(phases: list[events.Phase], *, epsilon: float, delta: float,
                     algorithm: str | None = None, parameter_phase: int = 0) -> PrivacyPlan:
    """The generic budget inversion: one noise scale ``s`` shared by every phase's declaration, chosen by a
    one-dimensional root search so that the composition of all releases over all chains and iterations
    spends the budget (at most ``epsilon``, at least 99 % of it).

    Gaussian-only compositions are solved on the closed form (the DP-HMC paper Theorem 2.4) and confirmed with
    dp-accounting's PLD; anything else is solved on the accountant's epsilon directly (PLD, or RDP for
    fixed-size minibatches). The returned plan carries the parameters of phase ``parameter_phase`` (default
    the first); ``chains`` are the first phase's, ``iterations`` the total per chain, and ``releases`` lists
    every phase in order.
    """
    epsilon = _check_epsilon(epsilon)
    delta = _check_delta(delta)
    if not phases:
        raise ValueError("calibrate_phases needs at least one phase")
    first = phases[0]
    total = sum(p.total_iterations for p in phases)

    def at(s: float) -> tuple[list[dict], list]:
        params = [p.declaration.parameters(s) for p in phases]
        rel = [(list(p.declaration.releases(pp)), p.total_iterations) for p, pp in zip(phases, params)]
        return params, rel

    def build(s: float) -> PrivacyPlan:
        params, rel = at(s)
        for pp in params:
            for name in phases[parameter_phase].declaration.noise_names:
                value = pp.get(name)
                if value is not None and not (isinstance(value, float) and math.isfinite(value) and value > 0):
                    raise _no_finite_noise(epsilon, delta, "the required noise overflows double precision")
        return PrivacyPlan(algorithm=algorithm or "custom", epsilon=epsilon, delta=delta, chains=first.chains,
                           iterations=first.iterations if len(phases) == 1 else total // first.chains,
                           parameters=params[parameter_phase],
                           releases=tuple((tuple(r), n) for r, n in rel),
                           noise_scale=s)

    if not 0 <= parameter_phase < len(phases):
        raise ValueError(f"parameter_phase must index one of the {len(phases)} phases, got {parameter_phase!r}")
    start = float(phases[parameter_phase].declaration.start)
    _, rel0 = at(start)
    kinds = {m["kind"] for m in _phase_mechanisms(rel0)}
    if kinds == {_KIND_GAUSSIAN}:
        return _calibrate_gaussian(build, at, start, epsilon, delta, total)
    return _calibrate_generic(build, start, epsilon, delta)


def _total_mu(rel) -> float:
    return math.fsum(m["count"] * m["mu"] for m in _phase_mechanisms(rel))


def _calibrate_gaussian(build, at, start: float, epsilon: float, delta: float, total: int) -> PrivacyPlan:
    target = epsilon * (1.0 - _CALIBRATION_MARGIN)
    for _ in range(20):
        mu = _gaussian_mu(target, delta)
        if not (mu > 0.0 and math.isfinite(mu)):
            raise _no_finite_noise(epsilon, delta, "the required noise overflows double precision")
        # root of total_mu(s) = mu, decreasing in s (more noise, less mu)
        s = _bracket_and_solve(lambda x: _total_mu(at(x)[1]) - mu, start, increasing=False)
        if not (s > 0.0 and math.isfinite(s)):
            raise _no_finite_noise(epsilon, delta, "the required noise overflows double precision")
        for _ in range(200):  # safe side of the root: total mu at most the target mu
            if _total_mu(at(s)[1]) <= mu:
                break
            s *= 1.0 + 2.0 ** -50
        plan = build(s)
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


def _calibrate_generic(build, start: float, epsilon: float, delta: float) -> PrivacyPlan:
    target = epsilon * (1.0 - _CALIBRATION_MARGIN)

    def spent(s: float) -> float:
        return _evaluate(build(s).mechanisms(), delta).epsilon

    s = _bracket_and_solve(lambda x: spent(x) - target, start, increasing=False)
    if not (s > 0.0 and math.isfinite(s)):
        raise _no_finite_noise(epsilon, delta, "the required noise is beyond double precision")
    # The accountant's epsilon is a step function on its grid (and the grid moves with s): move to the safe
    # side with relative steps that double from 1e-9, so that a step of any size is crossed in a few tries.
    step = 1e-9
    for _ in range(60):
        if spent(s) <= epsilon * (1.0 - 0.5 * _CALIBRATION_MARGIN):
            break
        s *= 1.0 + step
        step *= 2.0
    plan = build(s)
    got = spent(s)
    if not _MIN_SPENT_FRACTION * epsilon <= got <= epsilon:
        raise _no_finite_noise(epsilon, delta, f"the accountant cannot resolve this budget: the closest noise "
                                               f"level spends {got!r}")
    return plan


# --------------------------------------------------------------------------------------------------
# noise-first
# --------------------------------------------------------------------------------------------------

def account(algorithm: str, *, delta: float, chains: int, iterations: int, n_rows: int | None = None,
            **given: Any) -> PrivacyReport:
    """Budget spent (epsilon at ``delta``) by a run with explicit noise levels.

    ``given`` holds the kernel's noise parameters (``noise_declaration(...).noise_names``: e.g. ``tau_l`` for
    penalty MH; ``tau_l`` and ``tau_g`` for DP-HMC; ``epsilon_iteration`` and ``delta_iteration`` for DP-Fast
    MH; ``tau_g`` for the SG-MCMC kernels) and any shape options (e.g. ``leapfrog_steps``). Every noise
    parameter is required; names the kernel does not use are refused.
    """
    delta = _check_delta(delta)
    chains = _check_count(chains, "chains")
    iterations = _check_count(iterations, "iterations")
    key, cls = _kernel_class(algorithm)
    spec_names = set(cls.option_spec.names)
    shape = {k: v for k, v in given.items() if k in spec_names}
    noise = {k: v for k, v in given.items() if k not in spec_names}
    _, decl = _declaration(key, chains=chains, iterations=iterations, delta=delta, n_rows=n_rows, shape=shape)
    for name in noise:
        if name not in decl.noise_names:
            raise ValueError(f"{name} does not apply to algorithm {key!r} (its noise parameters: "
                             f"{', '.join(decl.noise_names)}); leave it out")
    params = dict(decl.parameters(decl.start))
    for name in decl.noise_names:
        if noise.get(name) is None:
            raise ValueError(f"algorithm {key!r} needs {name}")
        params[name] = _check_noise_parameter(name, noise[name])
    releases = list(decl.releases(params))
    total = chains * iterations
    for r in releases:
        if isinstance(r.event, events.EpsilonDeltaDpEvent) and total * r.count * r.event.delta >= delta:
            raise ValueError(f"{r.name}: its delta ({r.event.delta!r}, from delta_iteration) times the "
                             f"{total * r.count} releases is not below delta={delta!r}: no epsilon is "
                             f"reachable; lower delta_iteration or raise delta")
    return _make_report(_phase_mechanisms([(releases, total)]), delta, key, total)


def _check_noise_parameter(name: str, value: Any) -> float:
    if name.startswith("delta"):
        v = _real(value, name)
        if not 0.0 <= v < 1.0:
            raise ValueError(f"{name} must lie in [0, 1) (got {v!r})")
        return v
    return _check_positive(value, name)


# --------------------------------------------------------------------------------------------------
# subsampled Gaussian mechanisms on their own (for stochastic-gradient samplers and tests)
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
    batch size / N (as an exact fraction); accounted with dp-accounting's RDP accountant (no PLD for it in
    dp-accounting 0.6).
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
    note = "sigma = noise_multiplier * 2 b for per-row terms clipped to norm b"
    if sampling == "poisson":
        release = events.subsampled_gaussian_release(name, noise_multiplier, sampling="poisson", n_rows=0,
                                                     sampling_rate=q, note=note)
    else:
        frac = Fraction(q).limit_denominator(10 ** 12)
        if q == 1.0:
            release = events.gaussian_release(name, noise_multiplier, note=note)
        else:
            release = events.subsampled_gaussian_release(name, noise_multiplier, sampling="uniform",
                                                         n_rows=frac.denominator, batch_size=frac.numerator,
                                                         note=note)
    mechanisms = [_describe(release, count)]
    if sampling == "uniform" and mechanisms[0]["kind"] == _KIND_GAUSSIAN:
        eps = _rdp_epsilon(mechanisms, delta)  # fixed-size sampling is RDP-accounted, also at q = 1
        return PrivacyReport(epsilon=eps, delta=delta, accountant=RDP_ACCOUNTANT,
                             neighbouring_relation=NEIGHBOURING_RELATION, mechanisms=mechanisms,
                             rdp_epsilon=eps)
    if sampling == "poisson" and q == 1.0:
        mechanisms[0]["sampling_probability"] = 1.0
    return _make_report(mechanisms, delta, None, None, interval)


def subsampled_gaussian_epsilon(noise_multiplier: float, sampling_probability: float, count: int,
                                delta: float, sampling: str = "poisson") -> float:
    """Epsilon at ``delta`` of ``count`` subsampled Gaussian mechanisms; see subsampled_gaussian_report."""
    return subsampled_gaussian_report(noise_multiplier, sampling_probability, count, delta,
                                      sampling=sampling).epsilon
