"""The noise-aware map of an anchored run's released draws: y = m + D (x - m) per chain draw x.

An anchored run's chains target the posterior tilted by the noise xi of the released gradient G~ (``stan_dp.phases.anchor``,
"What the released posterior targets"): to first order its noise-aware posterior has the chains' mean m and the
covariance Sigma + sigma_G^2 Sigma^2, Sigma the posterior covariance. The map gives each coordinate that variance
with a diagonal D common to all chains, so that R-hat and ESS of the released draws are the chains' own.

Sigma is not known; it is estimated from the chains' draws, and how well depends on how much the chains explored.
Chains with a small effective sample size under-state it (measured on wells at epsilon 10: the chains' sd 0.76 of
the reference sd), and intervals from the plain estimate came out too narrow (coverage of the non-private mean
0.70 for the worst parameter over 20 noise seeds). The map therefore accounts for the Monte Carlo uncertainty of a
run with few effective draws: with n_j the bulk ESS of coordinate j, the noise-aware variance and the Monte Carlo
error of the mean, V_j = Sigma_jj + sigma_G^2 (Sigma^2)_jj + Sigma_jj / n_j, are raised to an upper confidence
value, kappa_j V_j with kappa_j = n_j / q(n_j), q(n) the ``ESS_VARIANCE_QUANTILE`` quantile of a chi-square with n
degrees of freedom (the variance that n independent normal draws support at that one-sided confidence). So
D_jj^2 = kappa_j V_j / Sigma_jj. kappa falls to 1 as the chains mix (ESS 7: 1.65, 55: 1.16, 200: 1.07, 2,000:
1.02). Measured over 20 noise seeds of ``auto`` (``benchmarks/results/calibration.md``): on wells at epsilon 10
(median ESS 7, R-hat 1.54) the worst parameter's coverage went from 0.70 to 0.95 and the median sd ratio from 1.52
to 1.83; on nes_logit at epsilon 10 (ESS 55) coverage stayed 1.00, sd ratio 1.97 -> 2.14. Raising Sigma itself
instead (the tilt term then grows with kappa^2) covered as well but widened nes_logit at epsilon 3 from 5.6 to 8.9
reference sds against 7.1. A wider interval when the chains say little is the honest price of few effective draws.

Everything here is post-processing of released draws and the public sigma_G.
"""
from __future__ import annotations

import warnings

import numpy as np
from scipy.stats import chi2

from ..output.arviz_compat import bulk_ess

__all__ = ["ESS_VARIANCE_QUANTILE", "effective_sizes", "variance_scales", "noise_aware_shifts"]

#: the lower chi-square quantile that turns a variance estimate from n effective draws into its upper confidence
#: value (0.25: the 75 % one-sided upper bound)
ESS_VARIANCE_QUANTILE = 0.25


def effective_sizes(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS per coordinate of (chains, draws, dim) draws, as ArviZ computes it (for a coordinate the draws do
    not move it may be any number or NaN; the map leaves such a coordinate where it is, its variance being 0)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # degenerate coordinates: ArviZ may warn
        return bulk_ess(np.asarray(draws, dtype=float))


def variance_scales(ess: np.ndarray, quantile: float = ESS_VARIANCE_QUANTILE) -> np.ndarray:
    """kappa = n / chi2.ppf(quantile, n) per coordinate (module doc); 1 where the ESS is not finite and positive."""
    n = np.asarray(ess, dtype=float)
    ok = np.isfinite(n) & (n > 0)
    safe = np.where(ok, n, 1.0)
    return np.where(ok, safe / chi2.ppf(quantile, safe), 1.0)


def noise_aware_shifts(draws: np.ndarray, gradient_noise_sd: float, rng: np.random.Generator | None = None, *,
                       finite_ess: bool = True) -> np.ndarray | None:
    """Shifts that turn the chains' draws (chains, draws, dim) into the noise-aware draws: y = m + D (x - m), the
    shift y - x, with m the draws' mean pooled over chains and D diagonal, D_jj^2 = kappa_j V_j / Sigma_jj (module
    doc; ``finite_ess=False``: the plain first-order map D_jj^2 = 1 + sigma_G^2 (Sigma^2)_jj / Sigma_jj, Sigma the
    draws' covariance).

    Every coordinate is an increasing affine function of the same coordinate of the chains' draws, common to all
    chains: each chain keeps its autocorrelation and its place among the chains, so R-hat and ESS (ranked or not)
    of every scalar are the chains' own. A coordinate the draws do not move (Sigma_jj = 0) stays. Post-processing
    of released draws and the public sigma_G; deterministic (``rng`` is accepted and not used). None when there
    are fewer than two draws (no covariance).
    """
    draws = np.asarray(draws, dtype=float)
    flat = draws.reshape(-1, draws.shape[-1])
    if flat.shape[0] < 2:
        return None
    cov = np.atleast_2d(np.cov(flat, rowvar=False))
    variance = np.diag(cov)
    target = variance + float(gradient_noise_sd) ** 2 * np.sum(cov * cov, axis=1)  # diag of Sigma^2: row norms
    if finite_ess:
        ess = effective_sizes(draws)
        known = np.isfinite(ess) & (ess > 0)
        target = variance_scales(ess) * (target + np.where(known, variance / np.where(known, ess, 1.0), 0.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(variance > 0.0, np.sqrt(target / np.where(variance > 0.0, variance, 1.0)), 1.0)
    return (draws - flat.mean(axis=0)) * (scale - 1.0)
