"""The privacy events a kernel iteration releases, as ``dp_accounting`` DpEvents.

A kernel declares what ONE iteration releases as a function of one noise scale ``s`` (larger ``s`` = more
noise = less privacy loss): a :class:`NoiseDeclaration`. The accountant (``stan_dp.privacy.accounting``)
composes the declared releases over chains x iterations and inverts the budget by a one-dimensional root
search on ``s``; it knows no algorithm by name. Several phases (e.g. a warm start followed by a main phase)
compose into one budget by passing several :class:`Phase` objects to ``accounting.calibrate_phases``.

Convention for every Gaussian event declared here
    ``GaussianDpEvent(noise_multiplier)`` carries ``tau = sigma / Delta`` where ``Delta`` is the l2 distance
    between the released statistic on two neighbouring data sets (substitute one row). For a sum of per-row
    terms clipped to norm ``b`` this is ``Delta = 2 b``, so ``sigma = 2 tau b``. This is the convention of
    dp-accounting's RDP accountant (``GaussianDpEvent``, ``SampledWithoutReplacementDpEvent`` under
    REPLACE_ONE). dp-accounting's PLD accountant under REPLACE_ONE reads ``GaussianDpEvent(nm)`` as a shift
    of ``2`` against noise sd ``nm`` (it moves a row from ``-1`` to ``+1``), i.e. it expects ``nm = 2 tau``;
    the accountant translates (``evaluation._pld_of_gaussian``), and the tests check it against dp-accounting's own
    ``PLDAccountant`` fed with ``2 tau``.

Event kinds used by the kernels
    * ``GaussianDpEvent(tau)``: a full-data Gaussian mechanism (penalty test, DP-HMC gradients).
    * ``PoissonSampledDpEvent(q, GaussianDpEvent(tau))``: a Gaussian sum over a Poisson minibatch (every row
      enters independently with probability ``q``); accounted with PLD. Each row's clipped term lies within
      ``Delta / 2`` of the "row absent" value 0, which is what dp-accounting's REPLACE_ONE mixture pair
      ``q N(-1/2) + (1 - q) N(0)`` vs ``q N(+1/2) + (1 - q) N(0)`` (units of Delta) describes.
    * ``SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(tau))``: a fixed-size minibatch drawn
      uniformly without replacement; dp-accounting 0.6 has no PLD for it, so it is accounted with its RDP
      accountant (Wang, Balle and Kasiviswanathan 2019, replace-one).
    * :class:`EpsilonDeltaDpEvent` ``(epsilon, delta)`` (defined here; dp-accounting 0.6 has none): a
      mechanism known only by its (epsilon, delta) guarantee (DP-Fast MH's iteration); composed through the
      PLD of a generic (epsilon, delta) mechanism.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

from dp_accounting import dp_event

__all__ = [
    "EpsilonDeltaDpEvent",
    "NoiseDeclaration",
    "Phase",
    "Release",
    "epsilon_delta_release",
    "gaussian_release",
    "paper_sgmcmc_noise_multiplier",
    "subsampled_gaussian_release",
]


@dataclasses.dataclass(frozen=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    """A mechanism known only by its (epsilon, delta)-DP guarantee (dp-accounting 0.6 has no such event;
    this one follows its DpEvent conventions). The accountant composes it through the PLD of a generic
    (epsilon, delta) mechanism (``pld.privacy_loss_distribution.from_privacy_parameters``)."""

    epsilon: float
    delta: float


@dataclasses.dataclass(frozen=True)
class Release:
    """``count`` releases per iteration of one mechanism ``event`` (a DpEvent for ONE release)."""

    name: str
    event: dp_event.DpEvent
    count: int = 1
    note: str = ""


@dataclasses.dataclass(frozen=True)
class NoiseDeclaration:
    """What one iteration of a kernel releases, as a function of its noise parameters.

    ``parameters(s)``: the named parameters the kernel reads from the plan at noise scale ``s > 0`` (e.g.
    ``{"tau_l": s}``); ``noise_names`` lists the ones a caller gives for noise-first accounting, the rest
    (if any) are fixed shape values recorded for the kernel (e.g. ``leapfrog_steps``).
    ``releases(parameters)``: the releases of ONE iteration. The privacy loss of ``releases(parameters(s))``
    must decrease as ``s`` grows (the calibration's root search relies on it).
    ``start``: a scale at which to start the search (any positive value works; a good one saves time).
    ``check``: optional, called with the calibrated parameters (a kernel's own warnings or refusals).
    """

    parameters: Callable[[float], dict[str, Any]]
    releases: Callable[[dict[str, Any]], Sequence[Release]]
    noise_names: tuple[str, ...]
    start: float = 1.0
    check: Callable[[dict[str, Any]], None] | None = None


@dataclasses.dataclass(frozen=True)
class Phase:
    """``iterations`` iterations of every one of ``chains`` chains, each releasing ``declaration.releases(s)``."""

    declaration: NoiseDeclaration
    chains: int
    iterations: int

    @property
    def total_iterations(self) -> int:
        return self.chains * self.iterations


def gaussian_release(name: str, noise_multiplier: float, count: int = 1, note: str = "") -> Release:
    """``count`` full-data Gaussian mechanisms per iteration, each with ``tau = sigma / Delta``."""
    return Release(name, dp_event.GaussianDpEvent(float(noise_multiplier)), int(count), note)


def subsampled_gaussian_release(name: str, noise_multiplier: float, *, sampling: str, n_rows: int,
                                sampling_rate: float | None = None, batch_size: int | None = None,
                                count: int = 1, note: str = "") -> Release:
    """A Gaussian sum over a minibatch: Poisson with rate ``sampling_rate`` or fixed ``batch_size`` rows
    drawn uniformly without replacement from ``n_rows``. Poisson with rate 1 is a full-data Gaussian."""
    base = dp_event.GaussianDpEvent(float(noise_multiplier))
    if sampling == "poisson":
        if sampling_rate is None:
            raise ValueError("sampling='poisson' needs a sampling_rate in (0, 1]")
        q = float(sampling_rate)
        if not 0.0 < q <= 1.0:
            raise ValueError(f"sampling_rate must lie in (0, 1], got {sampling_rate!r}")
        event = base if q == 1.0 else dp_event.PoissonSampledDpEvent(q, base)
    elif sampling == "uniform":
        if batch_size is None:
            raise ValueError("sampling='uniform' needs a batch_size in [1, N]")
        n, b = int(n_rows), int(batch_size)
        if not 1 <= b <= n:
            raise ValueError(f"batch_size must lie in [1, N = {n}], got {batch_size!r}")
        event = base if b == n else dp_event.SampledWithoutReplacementDpEvent(n, b, base)
    else:
        raise ValueError(f"sampling must be 'poisson' or 'uniform', got {sampling!r}")
    return Release(name, event, int(count), note)


def epsilon_delta_release(name: str, epsilon: float, delta: float, count: int = 1, note: str = "") -> Release:
    """``count`` mechanisms per iteration known by their (epsilon, delta) guarantee."""
    return Release(name, EpsilonDeltaDpEvent(float(epsilon), float(delta)), int(count), note)


def paper_sgmcmc_noise_multiplier(sampling_rate: float, steps: int, epsilon: float, delta: float) -> float:
    """The noise multiplier (sigma / (2 L)) implied by the papers' DP-SGLD bound (the Privacy-for-Free paper Algorithm 2,
    Theorem 4; the Privacy-for-Free paper (long version) Theorem 16), for comparison with the PLD calibration; never used to calibrate.

    Algorithm 2 adds noise of variance ``C eta^2`` with
    ``C = 128 N T L^2 / (tau epsilon^2) log(2.5 N T / (tau delta)) log(2 / delta)`` to an update whose data
    part is ``eta (N / tau) sum_{i in S} grad l_i`` (tau the batch size, T the data passes). On the clipped
    sum the noise sd is ``sqrt(C) tau / N``; divided by the sensitivity 2L and written with the number of
    steps ``K = N T / tau`` and the rate ``q = tau / N`` it is
    ``q sqrt(32 K log(2.5 K / delta) log(2 / delta)) / epsilon``.
    """
    k = float(steps)
    return sampling_rate * math.sqrt(32.0 * k * math.log(2.5 * k / delta) * math.log(2.0 / delta)) / epsilon
