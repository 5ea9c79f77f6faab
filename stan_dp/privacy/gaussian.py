"""Closed form for compositions of Gaussian mechanisms (the DP-HMC paper Theorem 2.4).

The PLD of a composition of Gaussian mechanisms is ``N(mu, 2 mu)`` with ``mu = sum_i Delta_i^2 / (2 sigma_i^2)``
(for a noise multiplier ``tau = sigma / Delta`` each mechanism contributes ``1 / (2 tau^2)``).
:func:`gaussian_delta`, :func:`gaussian_epsilon` and :func:`gaussian_mu` evaluate and invert it exactly;
the calibration (``stan_dp.privacy.accounting``) searches it and the evaluation (``stan_dp.privacy.evaluation``)
reports it as a cross-check, or as the accountant for budgets too small for the PLD.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from .checks import _check_delta, _check_epsilon, _real

__all__ = ["gaussian_delta", "gaussian_epsilon", "gaussian_mu"]


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
