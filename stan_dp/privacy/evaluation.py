"""Releases (DpEvents) -> mechanism records -> epsilon: the PLD / RDP / closed-form evaluation of a composition.

A release repeated over iterations becomes a mechanism record (:func:`describe_release`, a dispatch on the DpEvent type,
never on an algorithm); :func:`evaluate_mechanisms` returns the epsilon that the composition of all records spends at a
delta, with the accountant that computed it and the cross-checks.

Accountants
    * Gaussian compositions have the closed form of the DP-HMC paper Theorem 2.4 (:func:`gaussian_delta`,
      :func:`gaussian_epsilon`): the PLD of a composition of Gaussian mechanisms is ``N(rho, 2 rho)`` with
      ``rho = sum_i Delta_i^2 / (2 sigma_i^2)`` (the paper's mu; the zCDP rho of the composition).  Calibration searches this closed form and then confirms the
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
import functools
import math
import warnings
from typing import Any

import numpy as np

from dp_accounting import dp_event
from dp_accounting import privacy_accountant
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.rdp import rdp_privacy_accountant

from . import events
from .gaussian import solve_gaussian_epsilon
from .mixed_composition import gaussian_and_epsilon_delta_epsilon

PLD_ACCOUNTANT = "PLD (dp-accounting)"
CLOSED_FORM_ACCOUNTANT = "closed form for Gaussian compositions (Raisa, Koskela & Honkela, DP-HMC, Theorem 2.4; exact)"
RDP_ACCOUNTANT = "RDP (dp-accounting)"
MIXED_ACCOUNTANT = ("closed form for Gaussian mechanisms composed with one kind of (epsilon, delta) mechanism "
                    "(exact; stan_dp.privacy.mixed_composition)")
BASIC_ACCOUNTANT = "basic composition (sum of per-mechanism epsilons and deltas; used where the PLD overflows)"

# PLD discretisation for Gaussian compositions: interval = this fraction of the closed-form epsilon.
# Measured relative excess of the pessimistic PLD epsilon over the closed form: ~1e-8 for two composed
# Gaussian PLDs, ~1e-12 for one, for epsilon from 0.01 to 5.  Relative (not absolute) so that small
# budgets are as accurate as large ones, and the number of grid points stays ~1e5 whatever the budget.
_GAUSSIAN_PLD_RELATIVE_INTERVAL = 1e-4
_MIN_PLD_INTERVAL = 1e-12
# Default interval for Poisson-subsampled Gaussian PLDs (dp-accounting's own default).
_SUBSAMPLED_PLD_INTERVAL = 1e-4
# Below this closed-form epsilon a Gaussian-only composition is accounted with the closed form alone (it is
# exact, the DP-HMC paper Theorem 2.4): dp-accounting's PLD construction for such extreme noise levels takes seconds
# to minutes and gigabytes of memory (measured: 15 s at epsilon 1e-5, out of memory at 1e-7).
_CLOSED_FORM_ONLY_BELOW = 1e-3

KIND_GAUSSIAN = "gaussian"
_KIND_EPS_DELTA = "epsilon-delta"
KIND_POISSON = "poisson-subsampled-gaussian"
KIND_UNIFORM = "uniform-subsampled-gaussian"


def describe_release(release: events.Release, iterations: int) -> dict:
    """The report record of ``release`` repeated in ``iterations`` iterations: a dispatch on the DpEvent
    type (never on an algorithm)."""
    count = int(release.count) * int(iterations)
    ev = release.event
    record: dict[str, Any] = {"name": release.name}
    if isinstance(ev, dp_event.GaussianDpEvent):
        tau = float(ev.noise_multiplier)
        # Gaussian-DP mu = Delta / sigma = 1 / tau and zCDP rho = mu^2 / 2 of one release
        record.update(kind=KIND_GAUSSIAN, noise_multiplier=tau, mu=1.0 / tau, rho=0.5 / (tau * tau))
    elif isinstance(ev, dp_event.PoissonSampledDpEvent) and isinstance(ev.event, dp_event.GaussianDpEvent):
        record.update(kind=KIND_POISSON, noise_multiplier=float(ev.event.noise_multiplier),
                      sampling_probability=float(ev.sampling_probability))
    elif (isinstance(ev, dp_event.SampledWithoutReplacementDpEvent)
          and isinstance(ev.event, dp_event.GaussianDpEvent)):
        record.update(kind=KIND_UNIFORM, noise_multiplier=float(ev.event.noise_multiplier),
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


def _pld_of_gaussian(noise_multiplier: float, interval: float, sampling_probability: float = 1.0
                     ) -> pld_lib.PrivacyLossDistribution:
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
    if m["kind"] == KIND_UNIFORM:
        gaussian = dp_event.SampledWithoutReplacementDpEvent(
            source_dataset_size=m["source_dataset_size"], sample_size=m["batch_size"], event=gaussian)
    return dp_event.SelfComposedDpEvent(gaussian, m["count"])


def rdp_accountant_epsilon(mechanisms: list[dict], delta: float) -> float:
    accountant = rdp_privacy_accountant.RdpAccountant(
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE)
    accountant.compose(dp_event.ComposedDpEvent([_rdp_event(m) for m in mechanisms]))
    return float(accountant.get_epsilon(delta))


def evaluate_mechanisms(mechanisms: list[dict], delta: float, interval: float | None = None) -> _Accounting:
    """Epsilon spent at ``delta`` by the composition of ``mechanisms`` (counts included)."""
    active = [m for m in mechanisms if m["count"] > 0]
    if not active:  # nothing ran: nothing spent
        gaussian_only = all(m["kind"] == KIND_GAUSSIAN for m in mechanisms)
        return _Accounting(0.0, PLD_ACCOUNTANT, 0.0 if gaussian_only else None,
                           0.0 if gaussian_only else None)
    kinds = {m["kind"] for m in active}

    if KIND_UNIFORM in kinds:
        # dp-accounting 0.6 has no PLD for sampling without replacement: the whole composition goes to RDP.
        if not kinds <= {KIND_UNIFORM, KIND_GAUSSIAN}:
            raise ValueError("mechanisms on fixed-size minibatches (sampling without replacement) compose only "
                             "with Gaussian mechanisms: dp-accounting 0.6 accounts them with RDP alone, which "
                             "has no Poisson-sampled (replace-one) or (epsilon, delta) events")
        eps = rdp_accountant_epsilon(active, delta)
        return _Accounting(eps, RDP_ACCOUNTANT, None, eps)

    closed = rdp = None
    if kinds == {KIND_GAUSSIAN}:
        rho_total = math.fsum(m["count"] * m["rho"] for m in active)
        closed = solve_gaussian_epsilon(rho_total, delta)
        if closed < _CLOSED_FORM_ONLY_BELOW and interval is None:
            return _Accounting(closed, CLOSED_FORM_ACCOUNTANT, closed, None)
        rdp = rdp_accountant_epsilon(active, delta)
        if interval is None:
            interval = max(closed * _GAUSSIAN_PLD_RELATIVE_INTERVAL, _MIN_PLD_INTERVAL) if closed > 0 \
                else _SUBSAMPLED_PLD_INTERVAL
    if kinds == {KIND_GAUSSIAN, _KIND_EPS_DELTA} and interval is None:
        exact = _gaussian_with_epsilon_delta(active, delta)
        if exact is not None:
            return _Accounting(exact, MIXED_ACCOUNTANT, None, None)
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


def _gaussian_with_epsilon_delta(active: list[dict], delta: float) -> float | None:
    """The exact epsilon of Gaussian mechanisms composed with copies of ONE (epsilon, delta) mechanism (an anchored
    DP-Fast MH run: ``stan_dp.privacy.mixed_composition``), or None for several kinds of (epsilon, delta) mechanism
    (then the PLD composes them). The Gaussian records merge into one Gaussian mechanism (mu^2 = sum count / tau^2):
    nothing is discretised or rebuilt between the steps of a budget inversion. Agrees with dp-accounting's
    pessimistic PLD to about 1e-9 relative (tests/privacy/test_accounting.py)."""
    pairs = {(m["epsilon"], m["delta"]) for m in active if m["kind"] == _KIND_EPS_DELTA}
    if len(pairs) != 1:
        return None
    (epsilon_0, delta_0), = pairs
    count = sum(int(m["count"]) for m in active if m["kind"] == _KIND_EPS_DELTA)
    mu = math.sqrt(math.fsum(m["count"] / m["noise_multiplier"] ** 2 for m in active if m["kind"] == KIND_GAUSSIAN))
    return gaussian_and_epsilon_delta_epsilon(delta, mu, float(epsilon_0), float(delta_0), count)


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
    if kinds == {KIND_GAUSSIAN} and closed is not None:  # closed is always set for Gaussian compositions
        return _Accounting(closed, CLOSED_FORM_ACCOUNTANT, closed, rdp)
    if kinds == {_KIND_EPS_DELTA}:
        spent_delta = math.fsum(m["count"] * m["delta"] for m in active)
        if spent_delta <= delta:
            return _Accounting(math.fsum(m["count"] * m["epsilon"] for m in active), BASIC_ACCOUNTANT, None, None)
    raise ValueError("the privacy loss of this run is too large for dp-accounting's PLD accountant (it overflows "
                     "double precision); use a smaller epsilon or fewer iterations")


@functools.lru_cache(maxsize=64)
def _pld_part(kind: str, parameters: tuple[float, ...], count: int, interval: float
              ) -> pld_lib.PrivacyLossDistribution:
    """The PLD of one mechanism repeated ``count`` times. Cached: a calibration evaluates the same fixed phases
    (an anchor's releases, the counts) at every step of its search while only the calibrated phase's noise
    changes; dp-accounting's PLDs are not modified by composing them (compose returns a new one)."""
    if kind == KIND_GAUSSIAN:
        # count identical Gaussians compose to one Gaussian with sigma/Delta = tau / sqrt(count)
        return _pld_of_gaussian(parameters[0] / math.sqrt(count), interval)
    if kind == _KIND_EPS_DELTA:
        params = pld_common.DifferentialPrivacyParameters(parameters[0], parameters[1])
        return pld_lib.from_privacy_parameters(params, value_discretization_interval=interval).self_compose(count)
    # Poisson-subsampled Gaussian
    return _pld_of_gaussian(parameters[0], interval, parameters[1]).self_compose(count)


def _pld_epsilon(active: list[dict], delta: float, interval: float) -> float:
    pld = None
    # dp-accounting's epsilon search divides by vanishing masses far in the tails (harmless overflow).
    with np.errstate(over="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="overflow encountered", category=RuntimeWarning)
        for m in active:
            if m["kind"] == KIND_GAUSSIAN:
                parameters: tuple[float, ...] = (float(m["noise_multiplier"]),)
            elif m["kind"] == _KIND_EPS_DELTA:
                parameters = (float(m["epsilon"]), float(m["delta"]))
            else:
                parameters = (float(m["noise_multiplier"]), float(m["sampling_probability"]))
            part = _pld_part(m["kind"], parameters, m["count"], float(interval))
            pld = part if pld is None else pld.compose(part)
        assert pld is not None, "no active mechanism"  # callers pass a non-empty list
        return float(pld.get_epsilon_for_delta(delta))


def phase_mechanisms(phases: list[tuple[list[events.Release], int]]) -> list[dict]:
    return [describe_release(r, iterations) for releases, iterations in phases for r in releases]
