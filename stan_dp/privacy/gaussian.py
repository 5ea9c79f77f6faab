"""Closed form for compositions of Gaussian mechanisms (the DP-HMC paper Theorem 2.4).

The PLD of a composition of Gaussian mechanisms is ``N(rho, 2 rho)`` with ``rho = sum_i Delta_i^2 / (2 sigma_i^2)``
(for a noise multiplier ``tau = sigma / Delta`` each mechanism contributes ``1 / (2 tau^2)``). The DP-HMC paper
calls this sum ``mu``; it is the composition's zCDP parameter rho, and this package keeps the name mu for the
Gaussian-DP mu of Dong, Roth & Su (a Gaussian mechanism has ``mu = Delta / sigma = 1 / tau``; mu's compose as
``sqrt(sum_i mu_i^2)``), so ``rho = mu^2 / 2``.
:func:`gaussian_delta`, :func:`gaussian_epsilon` and :func:`gaussian_rho` evaluate and invert the closed form
exactly (:func:`gaussian_mu` is the Gaussian-DP mu of a budget); the calibration (``stan_dp.privacy.accounting``)
searches it and the evaluation (``stan_dp.privacy.evaluation``) reports it as a cross-check, or as the accountant
for budgets too small for the PLD.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from scipy import optimize, special

from .checks import check_delta, check_epsilon, check_real

__all__ = ["gaussian_delta", "gaussian_epsilon", "gaussian_mu", "gaussian_rho"]


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _normal_interval(center: float, width: float) -> float:
    """P(center - width/2 < Z < center + width/2) for standard normal Z, without cancellation.

    Narrow intervals (width < 0.05; tiny rho) are integrated by 8-point Gauss-Legendre quadrature of the
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


def _delta_closed_form(rho: float, epsilon: float) -> float:
    """delta(epsilon) of a PLD N(rho, 2 rho), no input checks.

    Theorem 2.4 writes it with erfc; with m = sqrt(2 rho) (the Gaussian-DP mu), a = epsilon/m - m/2 and
    0.5 erfc(x / sqrt 2) = Phi(-x) it is delta = Phi(-a) - e^epsilon Phi(-a - m), evaluated here as
    P(-a - m < Z < -a) - (e^epsilon - 1) Phi(-a - m) so that tiny rho and epsilon lose no digits; the last
    product is formed in log space so that e^epsilon cannot overflow.
    """
    if rho <= 0.0:
        return 0.0
    if math.isinf(rho):
        return 1.0
    m = math.sqrt(2.0 * rho)
    a = epsilon / m - 0.5 * m
    band = _normal_interval(-epsilon / m, m)  # the band (-a - m, -a) is centred at -epsilon/m
    if epsilon == 0.0:
        return max(band, 0.0)
    log_em1 = math.log(math.expm1(epsilon)) if epsilon < 30.0 else epsilon + math.log1p(-math.exp(-epsilon))
    tail = math.exp(log_em1 + float(special.log_ndtr(-a - m)))
    return max(band - tail, 0.0)


def gaussian_delta(rho: float, epsilon: float) -> float:
    """Tight delta(epsilon) of a composition of Gaussian mechanisms with total zCDP ``rho`` (the DP-HMC paper
    Theorem 2.4, where rho is called mu).

    ``rho = sum_i Delta_i^2 / (2 sigma_i^2)`` over all composed mechanisms (for a noise multiplier
    ``tau = sigma / Delta`` each contributes ``1 / (2 tau^2)``; the Gaussian-DP mu is ``sqrt(2 rho)``).
    ``epsilon >= 0``.
    """
    rho = check_real(rho, "rho")
    if rho < 0.0:
        raise ValueError(f"rho must be >= 0 (got {rho!r})")
    epsilon = check_real(epsilon, "epsilon")
    if epsilon < 0.0 or math.isinf(epsilon):
        raise ValueError(f"epsilon must be a finite number >= 0 (got {epsilon!r})")
    return _delta_closed_form(rho, epsilon)


def bracket_and_solve(f: Callable[[float], float], start: float, increasing: bool) -> float:
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


def gaussian_epsilon(rho: float, delta: float) -> float:
    """Smallest epsilon >= 0 with ``gaussian_delta(rho, epsilon) <= delta`` (the DP-HMC paper Theorem 2.4).

    The returned value is on the safe side of the root: ``gaussian_delta(rho, result) <= delta``.
    """
    rho = check_real(rho, "rho")
    if rho < 0.0 or math.isinf(rho):
        raise ValueError(f"rho must be a finite number >= 0 (got {rho!r})")
    delta = check_delta(delta)
    return solve_gaussian_epsilon(rho, delta)


def solve_gaussian_epsilon(rho: float, delta: float) -> float:
    if rho == 0.0 or _delta_closed_form(rho, 0.0) <= delta:
        return 0.0
    # zCDP bound: epsilon = rho + 2 sqrt(rho log(1/delta)) is always enough -> a safe start.
    start = rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    eps = bracket_and_solve(lambda e: _delta_closed_form(rho, e) - delta, start, increasing=False)
    for _ in range(200):  # move to the safe side of the root if Brent stopped just below it
        if _delta_closed_form(rho, eps) <= delta:
            return eps
        eps = eps * (1.0 + 2.0 ** -50) + 5e-324
    return start  # pragma: no cover - the zCDP bound is a valid (if looser) answer


def gaussian_rho(epsilon: float, delta: float) -> float:
    """Largest total zCDP ``rho`` whose Gaussian composition is ``(epsilon, delta)``-DP (inverse of Thm 2.4).

    The returned value is on the safe side: ``gaussian_delta(result, epsilon) <= delta``.  It can
    underflow to 0 for extreme budgets (no finite noise level meets them); callers check for that.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    return solve_gaussian_rho(epsilon, delta)


def gaussian_mu(epsilon: float, delta: float) -> float:
    """The Gaussian-DP mu of an ``(epsilon, delta)`` budget: ``sqrt(2 gaussian_rho(epsilon, delta))``. A
    composition of Gaussian mechanisms with per-mechanism ``mu_i = 1 / tau_i`` fits the budget when
    ``sqrt(sum_i mu_i^2)`` is at most this."""
    return math.sqrt(2.0 * gaussian_rho(epsilon, delta))


def solve_gaussian_rho(epsilon: float, delta: float) -> float:
    # Solve in m = sqrt(2 rho) (the Gaussian-DP mu); the classical calibration sigma = sqrt(2 log(1.25/delta)) /
    # epsilon gives a starting point of the right order.
    start = epsilon / math.sqrt(2.0 * math.log(1.25 / delta))
    m = bracket_and_solve(lambda m: _delta_closed_form(0.5 * m * m, epsilon) - delta, start,
                              increasing=True)
    if not math.isfinite(m):
        return m
    for _ in range(200):
        if _delta_closed_form(0.5 * m * m, epsilon) <= delta:
            return 0.5 * m * m
        m = m * (1.0 - 2.0 ** -50)
    # Only reached when the root lies where rho underflows: no representable rho > 0 meets the budget.
    return 0.0
