"""Exact epsilon of Gaussian mechanisms composed with T copies of one (epsilon_0, delta_0) mechanism.

An anchored DP-Fast MH run composes the anchor phase's Gaussian releases (noise multipliers tau_j) with T
iterations, each an (epsilon_0, delta_0)-DP mechanism. Both parts have exact privacy loss distributions:

* the Gaussian releases compose to ONE Gaussian mechanism with mu^2 = sum_j count_j / tau_j^2 (Dong, Roth and
  Su, "Gaussian Differential Privacy", 2022): its privacy loss is N(mu^2 / 2, mu^2) and its privacy profile is
  delta_G(x) = Phi(mu / 2 - x / mu) - e^x Phi(-mu / 2 - x / mu), for every real x;
* an (epsilon_0, delta_0) mechanism is dominated by the pair whose loss is +inf with mass delta_0 and
  +-epsilon_0 with masses (1 - delta_0) e^epsilon_0 / (1 + e^epsilon_0) and (1 - delta_0) / (1 + e^epsilon_0)
  (Kairouz, Oh and Viswanath, "The Composition Theorem for Differential Privacy", 2015); T of them compose to
  a loss of +inf with mass 1 - (1 - delta_0)^T and (2 j - T) epsilon_0 with mass (1 - delta_0)^T Binom(j; T, p),
  p = e^epsilon_0 / (1 + e^epsilon_0).

The hockey-stick divergence of the composition at epsilon is E[(1 - e^(epsilon - L))_+] + P(L = inf) with the
total loss L the sum of the two independent losses; conditioning on the finite loss l_j of the second part,

    delta(epsilon) = 1 - (1 - delta_0)^T + (1 - delta_0)^T sum_j Binom(j; T, p) delta_G(epsilon - l_j),

with no discretisation at all. It is what dp-accounting's privacy loss distributions compute on a grid
(``stan_dp.privacy.evaluation``, which checks that this agrees with them), in O(T) closed-form terms instead of a
Gaussian distribution rebuilt on a fine grid (tens of seconds to minutes for each step of a budget inversion).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special, stats

__all__ = ["gaussian_and_epsilon_delta_delta", "gaussian_and_epsilon_delta_epsilon"]


def _gaussian_profile(x: np.ndarray, mu: float) -> np.ndarray:
    """delta_G(x) of a Gaussian mechanism with Gaussian-DP ``mu`` > 0 at every real x (log space for e^x)."""
    first = special.ndtr(mu / 2.0 - x / mu)
    second = np.exp(x + special.log_ndtr(-mu / 2.0 - x / mu))
    return np.clip(first - second, 0.0, 1.0)


def gaussian_and_epsilon_delta_delta(epsilon: float, mu: float, epsilon_0: float, delta_0: float,
                                     count: int) -> float:
    """delta(epsilon) of a Gaussian mechanism with Gaussian-DP ``mu`` composed with ``count`` (epsilon_0,
    delta_0)-DP mechanisms (the module's formula; exact)."""
    j = np.arange(count + 1)
    p = 1.0 / (1.0 + math.exp(-epsilon_0))  # e^eps0 / (1 + e^eps0), without overflow
    weights = stats.binom.pmf(j, count, p)
    losses = (2.0 * j - count) * epsilon_0
    keep = weights > 0.0
    finite = math.exp(count * math.log1p(-delta_0))  # (1 - delta_0)^count
    hockey = float(np.dot(weights[keep], _gaussian_profile(epsilon - losses[keep], mu)))
    return (1.0 - finite) + finite * hockey


def gaussian_and_epsilon_delta_epsilon(delta: float, mu: float, epsilon_0: float, delta_0: float,
                                       count: int) -> float:
    """The smallest epsilon >= 0 with ``gaussian_and_epsilon_delta_delta(epsilon, ...) <= delta`` (to a relative
    1e-12, rounded up), or inf when even an infinite epsilon leaves more than ``delta`` (the infinite mass
    1 - (1 - delta_0)^count exceeds it)."""
    def excess(e: float) -> float:
        return gaussian_and_epsilon_delta_delta(e, mu, epsilon_0, delta_0, count) - delta

    if excess(0.0) <= 0.0:
        return 0.0
    if -math.expm1(count * math.log1p(-delta_0)) >= delta:
        return math.inf
    high = count * epsilon_0 + mu * mu / 2.0 + 10.0 * mu + 1.0
    while excess(high) > 0.0:
        high *= 2.0
    root = optimize.brentq(excess, 0.0, high, xtol=1e-14, rtol=1e-12, maxiter=500)
    while excess(root) > 0.0:  # the safe side of the root
        root *= 1.0 + 1e-12
    return float(root)
