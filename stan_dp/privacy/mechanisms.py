"""The privacy arithmetic of the samplers, in one auditable place.

Every clip, every noise draw and the penalty correction used by the private kernels is here; the kernels
(``stan_dp.samplers``) call these functions and do no clip or noise arithmetic of their own.

Neighbouring datasets differ by substituting one row (N is public). All queries are sums over rows of a
clipped per-row contribution, so replacing one row moves the sum by at most twice the clip bound:

* log-likelihood ratio (DP penalty MH, DP-HMC; the DP-HMC paper section 3): r_i = l_i(theta') - l_i(theta),
  clipped to [-c, c] with c = b_l ||theta' - theta||_2 (``ratio_clip_bound``). Sensitivity 2c; noise
  sd sigma = 2 tau_l c (``ratio_noise_sd``); each release is a Gaussian mechanism with Gaussian-DP
  mu = 2c / sigma = 1 / tau_l, i.e. zCDP rho = 1 / (2 tau_l^2) (the DP-HMC paper Theorem 2.4 calls rho mu).
* gradient (DP-HMC, the DP-HMC paper Algorithm 1): sum_i clip_{b_g}(grad l_i(theta)) with
  clip_b(y) = y min(1, b / ||y||_2). Sensitivity 2 b_g; noise N(0, sigma_g^2 I) with sigma_g = 2 tau_g b_g
  (``gradient_noise_sd``); mu = 1 / tau_g (rho = 1 / (2 tau_g^2)) per release.
* penalty correction (Ceperley & Dewing; Yildirim & Ermis; the DP-HMC paper section 3): a Gaussian-noised log
  acceptance ratio Delta + xi, xi ~ N(0, sigma^2), is corrected by -sigma^2 / 2
  (``penalty_log_accept_term``). Then E_xi[min(1, exp(Delta + xi - sigma^2/2))] = alpha(Delta) satisfies
  alpha(Delta) = e^Delta alpha(-Delta), so the chain stays reversible with respect to the exact target when
  no clipping occurs (the DP-HMC paper Theorem 3.3); ``penalty_accept_probability`` gives alpha in closed form.

Non-finite per-row values cannot be allowed to break the sensitivity bound (or to make the decision a
deterministic function of one row): a NaN log-likelihood ratio is treated as the most negative allowed
value -c and +-inf are clipped to +-c; a non-finite per-row gradient contributes the zero vector; a NaN
per-row log-likelihood in OPS counts as its lower bound a (``clip_log_likelihoods``). All keep every row's
contribution inside the clip set, so the sensitivity stays 2c (2 b_g, b - a) for any model, and no row can
remove part of the support of a released draw.

Released acceptance statistics are rounded to ``ACCEPT_STAT_DECIMALS`` decimal places
(``release_accept_stat``; every ``StepInfo`` applies it, so the adaptation uses the rounded value too). The
analysis assumes exact arithmetic; the low-order bits of a floating-point function of Gaussian noise are
not covered by it (Mironov 2012 showed such bits can leak for floating-point Laplace noise), and rounding,
a post-processing, removes them at no cost to the adaptation.

A noise scale tau = 0 switches the noise off through the very same code path (sd 0 gives exact zeros); the
accountant never produces it, it exists for tests only.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import cast, overload

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import log_ndtr

from ..likelihood import PartialGradientSums, RowLikelihood, offers

__all__ = [
    "ratio_clip_bound",
    "clip_ratios",
    "clipped_ratio_sum",
    "ratio_noise_sd",
    "noisy_clipped_ratio_sum",
    "penalty_log_accept_term",
    "penalty_log_accept_ratio",
    "accept_statistic",
    "penalty_accept",
    "penalty_accept_probability",
    "ROW_BLOCK",
    "row_blocks",
    "clip_gradients",
    "clipped_gradient_sum",
    "rows_clipped_gradient_sum",
    "gradient_noise_sd",
    "clipped_squared_gradient_sum",
    "clipped_outer_product_sum",
    "curvature_sensitivity",
    "curvature_noise_sd",
    "symmetric_gaussian_noise",
    "noisy_gradient",
    "noisy_clipped_gradient",
    "gaussian_noise",
    "ACCEPT_STAT_DECIMALS",
    "release_accept_stat",
    "poisson_minibatch",
    "uniform_minibatch",
    "minibatch_gradient",
    "privacy_noise_variance",
    "merged_noise_variance",
    "merged_noise",
    "clip_log_likelihoods",
    "clipped_log_likelihood_sum",
    "row_norms",
    "noisy_count_within",
    "count_within",
    "noisy_count",
    "AnchorSums",
    "anchor_sums",
    "quantile_clip_update",
    "QuantileClip",
    "private_arithmetic",
]

#: decimal places kept in released acceptance statistics (``accept_stat`` / ``acceptance_rate``)
ACCEPT_STAT_DECIMALS = 4


def _check_nonneg(name: str, value: float) -> float:
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be finite and >= 0, got {value}")
    return value


def _check_pos(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be finite and > 0, got {value}")
    return value


# ----------------------------------------------------------------------------------------------------------
# Gaussian noise
# ----------------------------------------------------------------------------------------------------------
@overload
def gaussian_noise(rng: np.random.Generator, sd: float, size: None = None) -> float: ...


@overload
def gaussian_noise(rng: np.random.Generator, sd: ArrayLike, size: int | tuple[int, ...]) -> np.ndarray: ...


def gaussian_noise(rng: np.random.Generator, sd: ArrayLike,
                   size: int | tuple[int, ...] | None = None) -> float | np.ndarray:
    """A draw from N(0, sd^2) (a float) or N(0, diag(sd^2)) with the given ``size``; sd = 0 gives zeros.

    ``sd`` is a number, or an array of per-coordinate sds broadcast against ``size``. EVERY Gaussian privacy
    noise of the package is drawn here (the ratio and gradient mechanisms, the merged noise of the SG kernels,
    the DP-GD warm start and anchor), so that the audit's planted faults reach every kernel.
    """
    if size is None:
        scale = _check_nonneg("noise sd", cast(float, sd))
        return scale * float(rng.standard_normal())
    sd = np.asarray(sd, dtype=float)
    if not (np.all(sd >= 0.0) and np.all(np.isfinite(sd))):
        raise ValueError("noise sds must be finite and >= 0")
    if sd.ndim == 0:
        sd = float(sd)
    return sd * rng.standard_normal(size)


# ----------------------------------------------------------------------------------------------------------
# log-likelihood ratio mechanism and the penalty test
# ----------------------------------------------------------------------------------------------------------
def ratio_clip_bound(ratio_clip: float, theta: np.ndarray, theta_prop: np.ndarray) -> float:
    """c = b_l ||theta' - theta||_2 (Euclidean, unconstrained scale): the per-row ratio clip bound."""
    b_l = _check_pos("ratio_clip", ratio_clip)
    dist = float(np.linalg.norm(np.asarray(theta_prop, dtype=float) - np.asarray(theta, dtype=float)))
    return b_l * dist


def clip_ratios(r: np.ndarray, c: float) -> np.ndarray:
    """Per-row log-likelihood ratios clipped to [-c, c]; NaN becomes -c, +-inf become +-c."""
    c = _check_nonneg("ratio clip bound c", c)
    r = np.asarray(r, dtype=float)
    return np.clip(np.where(np.isnan(r), -c, r), -c, c)


def clipped_ratio_sum(r: np.ndarray, c: float) -> float:
    """R = sum_i clip_c(r_i). Replacing one row changes R by at most 2c."""
    return float(np.sum(clip_ratios(r, c)))


def ratio_noise_sd(tau_l: float, c: float) -> float:
    """sigma = 2 tau_l c: noise sd of the ratio mechanism (sensitivity 2c, so Gaussian-DP mu = 1 / tau_l)."""
    return 2.0 * _check_nonneg("tau_l", tau_l) * _check_nonneg("ratio clip bound c", c)


def noisy_clipped_ratio_sum(rng: np.random.Generator, r: np.ndarray, c: float, tau_l: float) -> tuple[float, float]:
    """The ratio mechanism: ``(R + xi, sigma)`` with R = sum_i clip_c(r_i), xi ~ N(0, sigma^2), sigma = 2 tau_l c.

    ``R + xi`` is the mechanism output (releasable); R alone must never leave the caller.
    """
    sigma = ratio_noise_sd(tau_l, c)
    return clipped_ratio_sum(r, c) + gaussian_noise(rng, sigma), sigma


def penalty_log_accept_term(sigma: float) -> float:
    """The penalty correction -sigma^2 / 2 added to a log acceptance ratio carrying N(0, sigma^2) noise."""
    sigma = _check_nonneg("sigma", sigma)
    return -0.5 * sigma * sigma


def penalty_log_accept_ratio(noisy_ratio_sum: float, public_log_ratio: float, sigma: float) -> float:
    """log alpha = (R + xi) + [data-free terms: prior, proposal or kinetic-energy differences] - sigma^2 / 2.

    A function of the mechanism output and public values only, so it (and ``accept_statistic`` of it) is
    releasable. NaN (e.g. from -inf + inf in the public part) is returned as -inf, i.e. a rejection.
    """
    value = float(noisy_ratio_sum) + float(public_log_ratio) + penalty_log_accept_term(sigma)
    return -math.inf if math.isnan(value) else value


def accept_statistic(log_alpha: float) -> float:
    """min(1, exp(log alpha)) in [0, 1]; its expectation over the noise is the penalty acceptance probability."""
    if math.isnan(log_alpha):
        return 0.0
    return 1.0 if log_alpha >= 0.0 else math.exp(log_alpha)


def release_accept_stat(value: float) -> float:
    """An acceptance statistic as released: rounded to ``ACCEPT_STAT_DECIMALS`` decimal places."""
    return round(float(value), ACCEPT_STAT_DECIMALS)


def penalty_accept(rng: np.random.Generator, log_alpha: float) -> bool:
    """The accept/reject draw: accept iff log u < log alpha with u ~ Uniform(0, 1) (log u = -Exp(1))."""
    return bool(-rng.standard_exponential() < log_alpha)


def penalty_accept_probability(delta: float, sigma: float) -> float:
    """E_xi[min(1, exp(delta + xi - sigma^2/2))], xi ~ N(0, sigma^2), in closed form:
    Phi(delta/sigma - sigma/2) + exp(delta) Phi(-delta/sigma - sigma/2) (min(1, e^delta) when sigma = 0).

    It satisfies alpha(delta) = e^delta alpha(-delta) (detailed balance); used by tests and documentation.
    """
    sigma = _check_nonneg("sigma", sigma)
    if sigma == 0.0:
        return min(1.0, math.exp(min(delta, 0.0)))
    a = delta / sigma - sigma / 2.0
    b = -delta / sigma - sigma / 2.0
    return float(math.exp(log_ndtr(a)) + math.exp(delta + log_ndtr(b)))


# ----------------------------------------------------------------------------------------------------------
# gradient mechanism (DP-HMC)
# ----------------------------------------------------------------------------------------------------------
#: rows per block of the row-local work on per-row gradients (the non-finite rule, norms, clipping): its
#: temporaries then take one block's memory instead of several (N, dim) matrices'. Each row's result is computed
#: by the same operations whatever the block, so the results do not depend on it; sums over rows are not blocked.
ROW_BLOCK = 1 << 16


def row_blocks(n_rows: int, size: int | None = None) -> Iterator[slice]:
    """Consecutive slices of at most ``size`` (default ``ROW_BLOCK``) rows covering [0, n_rows)."""
    size = ROW_BLOCK if size is None else max(1, int(size))
    return (slice(start, min(start + size, int(n_rows))) for start in range(0, int(n_rows), size))


def _clip_scale(norms: np.ndarray, b_g: float, out: np.ndarray | None = None) -> np.ndarray:
    """min(1, b / ||y||) per row (1 for rows inside the ball, including zero rows), into ``out`` when given (it
    may be ``norms`` itself)."""
    outside = norms > b_g
    if out is None:
        return np.where(outside, b_g / np.where(outside, norms, 1.0), 1.0)
    np.divide(b_g, norms, out=out, where=outside)
    out[~outside] = 1.0
    return out


def private_arithmetic() -> np.errstate:
    """The floating-point context of every computation on private per-row values: ``np.errstate(all="ignore")``.

    NumPy reports an overflow, an invalid operation or a division by zero as a ``RuntimeWarning``, and whether
    one occurs can depend on a single row (a row with an entry near 1e308 overflows where its neighbour does
    not). A warning is an output no budget covers: the caller, a log or the command line would see a data set
    with an extreme row differ from its neighbour. Per-row arithmetic therefore runs silently; what it produces
    (inf, NaN) is mapped inside the clip set by the mechanisms here, as every non-finite per-row value is.
    The context is per thread (NumPy keeps it in a context variable): enter it in the thread that computes."""
    return np.errstate(all="ignore")


def _peaks_and_unit_rows(g: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(m, u, s) per row: m = max_j |g_j|, u = g / m (entries in [-1, 1]; u = g for a zero row) and s = ||u||_2 in
    [1, sqrt(dim)]: ||g|| = m s without squaring g (which overflows above about 1e154)."""
    peak = np.abs(g).max(axis=1, initial=0.0)
    safe_peak = np.where(peak > 0.0, peak, 1.0)
    unit = g / safe_peak[:, None]
    return peak, unit, np.sqrt(np.einsum("ij,ij->i", unit, unit))


def clip_gradients(grads: np.ndarray, b_g: float) -> np.ndarray:
    """Per-row L2 clipping clip_b(y) = y min(1, b / ||y||_2); non-finite rows become zero vectors.

    Overflow-free for every finite row: the norm is m ||y / m|| (m the row's largest |entry|), which is +inf only
    when the norm itself exceeds the largest double; such a row is clipped as (y / m) b / ||y / m||, the same
    direction at norm b. No floating-point warning is raised whatever the rows (``private_arithmetic``)."""
    b_g = _check_pos("grad_clip", b_g)
    g = np.asarray(grads, dtype=float)
    if g.ndim != 2:
        raise ValueError(f"per-row gradients must have shape (n, dim), got {g.shape}")
    clipped = np.empty(g.shape)
    with private_arithmetic():
        for block in row_blocks(g.shape[0]):  # row-local: one block's temporaries at a time
            clipped[block] = _clip_rows(g[block], b_g)
    return clipped


def _clip_rows(g: np.ndarray, b_g: float) -> np.ndarray:
    """``clip_gradients`` of the rows ``g`` (inside ``private_arithmetic``)."""
    finite = np.isfinite(g).all(axis=1)
    g = np.where(finite[:, None], g, 0.0)
    peak, unit, unit_norm = _peaks_and_unit_rows(g)
    norms = peak * unit_norm
    clipped = g * _clip_scale(norms, b_g)[:, None]
    huge = np.isinf(norms)  # the norm overflows: scale the unit row instead (b / ||u|| is finite)
    if huge.any():
        clipped[huge] = unit[huge] * (b_g / unit_norm[huge])[:, None]
    return clipped


def clipped_gradient_sum(grads: np.ndarray, b_g: float) -> np.ndarray:
    """G(theta) = sum_i clip_{b_g}(grad l_i(theta)), shape (dim,). Replacing one row moves it by <= 2 b_g.

    Deterministic given theta and the data, so it may be cached (never released) and re-released with fresh
    noise by ``noisy_gradient``: each such release is a new, separately accounted Gaussian mechanism.
    Same result as ``clip_gradients(grads, b_g).sum(axis=0)``, which is used whenever a row norm is not finite.
    """
    g, scale = _row_clip_scales(grads, b_g)
    with private_arithmetic():
        if scale is None:
            return clip_gradients(g, b_g).sum(axis=0)
        return scale @ g


def _row_clip_scales(grads: np.ndarray, b_g: float) -> tuple[np.ndarray, np.ndarray | None]:
    """(the per-row gradients as a float (n, dim) array, the clip scales min(1, b / ||g_i||) in one (N,) buffer
    that first holds the norms), or None for the scales when a row norm is not finite (the callers then clip a
    copy with ``clip_gradients``). Never released: the clipped sums use it."""
    b_g = _check_pos("grad_clip", b_g)
    g = np.asarray(grads, dtype=float)
    if g.ndim != 2:
        raise ValueError(f"per-row gradients must have shape (n, dim), got {g.shape}")
    with private_arithmetic():
        norms = np.einsum("ij,ij->i", g, g)
        np.sqrt(norms, out=norms)
        if not np.isfinite(norms).all():
            return g, None
        return g, _clip_scale(norms, b_g, out=norms)


def rows_clipped_gradient_sum(likelihood: RowLikelihood, theta: np.ndarray, rows: np.ndarray | None, b_g: float) -> np.ndarray:
    """G = sum over ``rows`` (None: all rows) of clip_{b_g}(grad l_i(theta)), shape (dim,): zeros for an empty
    index set. Never released by itself (noise is added by the caller). All rows as None spares the likelihood an
    index array of N entries (the same rows in the same order as ``np.arange(N)``).

    The one dispatch point for a clipped gradient sum over a likelihood's rows. A likelihood whose rows live
    elsewhere may offer ``partial_clipped_gradient_sums(theta, rows, b_g, clip)`` (the capability
    ``stan_dp.likelihood.PartialGradientSums``, None when the rows are local): it applies ``clip`` (this
    module's ``clipped_gradient_sum``) to each part of the rows where they live and returns the partial sums,
    which are added here in their order (e.g. the Ray backend: one partial sum per shard, so only a vector per
    shard crosses the wire). Otherwise the per-row gradients are clipped and summed here.
    """
    rows = None if rows is None else np.asarray(rows)
    dim = int(likelihood.dim)
    count = int(likelihood.n_rows) if rows is None else rows.size
    if count == 0:
        return np.zeros(dim)
    # only a likelihood that offers the capability itself (never through a wrapper's __getattr__: a wrapper that
    # changes the rows must not inherit its base's partial sums)
    partial = (cast(PartialGradientSums, likelihood).partial_clipped_gradient_sums
               if offers(likelihood, PartialGradientSums) else None)
    if partial is not None:
        total = np.zeros(dim)
        for part in partial(theta, rows, b_g, clipped_gradient_sum):  # None: every row (no index array of N)
            total = total + np.asarray(part, dtype=float)
        return total
    _, grads = likelihood.row_log_lik_grad(theta, rows)
    return clipped_gradient_sum(np.asarray(grads, dtype=float).reshape(count, dim), b_g)


def curvature_sensitivity(b_g: float) -> float:
    """sqrt(2) b^2: the replace-one sensitivity of ``clipped_squared_gradient_sum`` (L2 norm) and of
    ``clipped_outer_product_sum`` (Frobenius norm, and L2 norm of its upper triangle).

    For clipped rows c, c' (norms <= b) the change is v(c) - v(c') with v(c) = c * c (elementwise) or c c^T.
    Both have non-negative inner products, <v(c), v(c')> = sum_j c_j^2 c'_j^2 >= 0 or (c . c')^2 >= 0, so
    ||v(c) - v(c')||^2 = ||v(c)||^2 + ||v(c')||^2 - 2 <v(c), v(c')> <= ||v(c)||^2 + ||v(c')||^2 <= 2 b^4, as
    ||c * c||_2 <= ||c||^2 and ||c c^T||_F = ||c||^2. Orthogonal c, c' of norm b on coordinate axes attain it.
    The upper triangle of c c^T - c' c'^T has at most the Frobenius norm of the whole (off-diagonal entries
    counted once instead of twice). The proof in words: docs/privacy-notes.md."""
    b_g = _check_pos("grad_clip", b_g)
    return math.sqrt(2.0) * b_g * b_g


def curvature_noise_sd(tau: float, b_g: float) -> float:
    """sigma_F = tau sqrt(2) b^2: the noise sd per released entry of a curvature release (sensitivity
    ``curvature_sensitivity(b)``, so Gaussian-DP mu = 1 / tau: the convention tau = sigma / Delta of every
    release here)."""
    return _check_nonneg("tau", tau) * curvature_sensitivity(b_g)


def clipped_squared_gradient_sum(grads: np.ndarray, b_g: float) -> np.ndarray:
    """F = sum_i clip_b(g_i) * clip_b(g_i) (elementwise), shape (dim,): the diagonal of the empirical Fisher of
    the clipped per-row gradients. Replacing one row moves F by at most sqrt(2) b^2 in L2 norm
    (``curvature_sensitivity``): the Gaussian mechanism on F has noise sd ``curvature_noise_sd(tau, b)``.
    One pass with one (N,) buffer, like ``clipped_gradient_sum``: F_j = sum_i s_i^2 g_ij^2 with s_i = min(1,
    b / ||g_i||), no clipped copy of the N rows (the copy, ``clip_gradients``, only when a row norm is not
    finite)."""
    g, scale = _row_clip_scales(grads, b_g)
    with private_arithmetic():
        if scale is None:
            clipped = clip_gradients(g, b_g)
            return np.einsum("ij,ij->j", clipped, clipped)
        np.multiply(scale, scale, out=scale)
        return np.einsum("i,ij,ij->j", scale, g, g)


def clipped_outer_product_sum(grads: np.ndarray, b_g: float) -> np.ndarray:
    """F = sum_i c_i c_i^T with c_i = clip_b(g_i), shape (dim, dim): the empirical Fisher of the clipped per-row
    gradients (a curvature estimate that needs only per-row gradients, no per-row Hessians).

    Sensitivity: replacing one row moves F by at most sqrt(2) b^2 in Frobenius norm, and its upper triangle (the
    released free entries, diagonal included, each once) by at most as much in L2 norm
    (``curvature_sensitivity``). The Gaussian mechanism on it adds ``symmetric_gaussian_noise`` with sd
    ``curvature_noise_sd(tau, b)`` per free entry: mu = 1 / tau, the convention of every release here."""
    c = clip_gradients(grads, b_g)
    return c.T @ c


def symmetric_gaussian_noise(rng: np.random.Generator, sd: float, dim: int, size: int | None = None) -> np.ndarray:
    """A symmetric (dim, dim) matrix whose upper-triangle entries (diagonal included) are independent N(0, sd^2)
    and whose lower triangle mirrors them: the noise of the Gaussian mechanism on ``clipped_outer_product_sum``.
    ``size``: that many independent matrices, shape (size, dim, dim). sd = 0 gives zeros."""
    dim = int(dim)
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim!r}")
    shape = (dim, dim) if size is None else (int(size), dim, dim)
    upper = np.triu(gaussian_noise(rng, sd, size=shape))
    return upper + np.swapaxes(np.triu(upper, 1), -1, -2)


def gradient_noise_sd(tau_g: float, b_g: float) -> float:
    """sigma_g = 2 tau_g b_g: noise sd per coordinate of the gradient mechanism (Gaussian-DP mu = 1 / tau_g)."""
    return 2.0 * _check_nonneg("tau_g", tau_g) * _check_pos("grad_clip", b_g)


def noisy_gradient(
    rng: np.random.Generator,
    clipped_sum: np.ndarray,
    prior_grad: np.ndarray,
    b_g: float,
    tau_g: float,
) -> tuple[np.ndarray, float]:
    """One gradient release: ``(G + grad log p0 + N(0, sigma_g^2 I), sigma_g)``.

    ``clipped_sum`` is G(theta) from ``clipped_gradient_sum``; the data-free prior gradient is added exactly.
    Every call draws fresh noise and counts as one Gaussian mechanism in the accounting.
    """
    sigma_g = gradient_noise_sd(tau_g, b_g)
    g = np.asarray(clipped_sum, dtype=float) + np.asarray(prior_grad, dtype=float)
    return g + gaussian_noise(rng, sigma_g, size=g.shape), sigma_g


def noisy_clipped_gradient(
    rng: np.random.Generator,
    grads: np.ndarray,
    prior_grad: np.ndarray,
    b_g: float,
    tau_g: float,
) -> tuple[np.ndarray, float]:
    """``noisy_gradient`` applied to per-row gradients (clip, sum, add prior gradient, add noise)."""
    return noisy_gradient(rng, clipped_gradient_sum(grads, b_g), prior_grad, b_g, tau_g)


# ----------------------------------------------------------------------------------------------------------
# minibatch gradient mechanism (DP-SGLD, DP-SGHMC, DP-SGNHT; the Privacy-for-Free paper Algorithm 2 and eqs 4.2-4.5)
# ----------------------------------------------------------------------------------------------------------
def poisson_minibatch(rng: np.random.Generator, n_rows: int, rate: float) -> np.ndarray:
    """Sorted row indices of a Poisson minibatch: every row enters independently with probability ``rate``.

    Drawn as the successes of N independent Bernoulli(rate) trials in order: the gaps between successive
    successes are independent Geometric(rate) variables on {1, 2, ...}, so the indices are the cumulative sums of
    geometric draws (minus one) below N, already sorted (the same distribution as a Binomial(N, rate) size and a
    uniform subset of that size, in O(batch) work: about 3 times faster than that subset at N = 2e7, q = 0.0067).
    Data-independent, but NOT releasable: the Poisson-subsampled accountant (PLD, REPLACE_ONE) holds only
    while the batch and its size stay hidden; given the size k the batch is a uniform k-subset and the pair of
    output distributions becomes the add/remove pair at the full substitution sensitivity.
    """
    n_rows, rate = int(n_rows), float(rate)
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"a Poisson sampling rate must lie in (0, 1], got {rate}")
    if n_rows < 1:
        return np.empty(0, dtype=np.int64)
    chunk = int(n_rows * rate + 6.0 * math.sqrt(n_rows * rate) + 16)  # enough gaps to pass N almost always
    positions = np.cumsum(rng.geometric(rate, size=chunk)) - 1
    while positions[-1] < n_rows - 1:  # rarely: more gaps, continuing from the last success
        positions = np.concatenate([positions, positions[-1] + np.cumsum(rng.geometric(rate, size=chunk))])
    return positions[:int(np.searchsorted(positions, n_rows))]


def uniform_minibatch(rng: np.random.Generator, n_rows: int, batch_size: int) -> np.ndarray:
    """Sorted row indices of ``batch_size`` rows drawn uniformly without replacement (data-independent)."""
    return np.sort(rng.choice(int(n_rows), size=int(batch_size), replace=False, shuffle=False))


def minibatch_gradient(clipped_sum: np.ndarray, prior_grad: np.ndarray, sampling_rate: float) -> np.ndarray:
    """g = grad log p0(theta) + (1 / q) sum_{i in B} clip_L(grad l_i(theta)): unbiased for the clipped
    log-posterior gradient under Poisson sampling with rate q (and under fixed-size sampling with q = B/N).
    Never released by itself: it enters an update only together with ``merged_noise``."""
    return np.asarray(prior_grad, dtype=float) + np.asarray(clipped_sum, dtype=float) / float(sampling_rate)


def privacy_noise_variance(drift_scale: np.ndarray, sampling_rate: float, grad_clip: float,
                           tau_g: float) -> np.ndarray:
    """Per-coordinate noise variance the privacy of one minibatch update needs.

    An update that adds ``(drift_scale_j / q) S_j + e_j`` to coordinate j, with S = sum_{i in B}
    clip_L(grad l_i) and e_j ~ N(0, v_j), is post-processing of S + e' with e'_j = q e_j / drift_scale_j of
    sd q sqrt(v_j) / drift_scale_j. The subsampled Gaussian mechanism with noise multiplier tau_g (sd
    2 tau_g L on a sum whose substitution sensitivity is 2 L) needs that sd >= 2 tau_g L in every coordinate:
    v_j >= (2 tau_g L drift_scale_j / q)^2.
    """
    scale = 2.0 * _check_nonneg("tau_g", tau_g) * _check_pos("grad_clip", grad_clip) / _check_pos(
        "sampling_rate", sampling_rate)
    return (scale * np.asarray(drift_scale, dtype=float)) ** 2


def merged_noise_variance(dynamics_variance: np.ndarray, privacy_variance: np.ndarray) -> np.ndarray:
    """ONE noise for both needs: v_j = max(dynamics_j, privacy_j) (the papers' max(C eta^2, eta)). When the
    dynamics term wins the privacy costs nothing ("privacy for free")."""
    return np.maximum(np.asarray(dynamics_variance, dtype=float), np.asarray(privacy_variance, dtype=float))


def merged_noise(rng: np.random.Generator, variance: np.ndarray) -> np.ndarray:
    """A draw from N(0, diag(variance)): the single Gaussian noise of one SG-MCMC update (drawn through
    ``gaussian_noise``, like every privacy noise)."""
    variance = np.asarray(variance, dtype=float)
    if not (np.all(variance >= 0.0) and np.all(np.isfinite(variance))):
        raise ValueError("noise variances must be finite and >= 0")
    return gaussian_noise(rng, np.sqrt(variance), size=variance.shape)


# ----------------------------------------------------------------------------------------------------------
# clipped log-likelihood (OPS: the Privacy-for-Free paper Algorithm 1 / section 3)
# ----------------------------------------------------------------------------------------------------------
def clip_log_likelihoods(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """Per-row log-likelihoods clipped to the public interval [a, b] = [low, high].

    A NaN (a row whose evaluation failed) counts as the lower bound a and +-inf are clipped to b / a, so every
    row's contribution stays inside [a, b] and one row can change the clipped sum by at most b - a at EVERY
    theta: no row can remove part of the support. Only the data-free prior may make the
    tempered density -inf.
    """
    values = np.asarray(values, dtype=float)
    return np.clip(np.where(np.isnan(values), float(low), values), float(low), float(high))


def clipped_log_likelihood_sum(values: np.ndarray, grads: np.ndarray, low: float, high: float
                               ) -> tuple[float, np.ndarray]:
    """sum_i clip(l_i(theta), a, b) and its gradient in theta.

    A row strictly inside (a, b) with a finite gradient contributes its gradient; a row at or beyond a bound
    (the clipped value is constant there), a NaN row, or a row with a non-finite gradient contributes none.
    ``grads`` has shape (n, dim). The pair is never released: it enters OPS's internal sampler only.
    """
    values = np.asarray(values, dtype=float).reshape(-1)
    grads = np.asarray(grads, dtype=float).reshape(values.size, -1)
    clipped = clip_log_likelihoods(values, low, high)
    moving = (values > float(low)) & (values < float(high)) & np.isfinite(grads).all(axis=1)
    with private_arithmetic():
        return float(np.sum(clipped)), grads[moving].sum(axis=0)


# ----------------------------------------------------------------------------------------------------------
# private quantile of per-row gradient norms (adaptive clip bounds; after Andrew et al., NeurIPS 2021)
# ----------------------------------------------------------------------------------------------------------
def row_norms(grads: np.ndarray) -> np.ndarray:
    """L2 norm of every row of ``grads`` (n, dim); a row with a non-finite entry counts as the zero vector, as in
    ``clip_gradients`` (its clipped contribution is 0). Computed as m ||y / m|| (m the row's largest |entry|):
    finite, or +inf when the norm exceeds the largest double, with no floating-point warning. Never released:
    only ``noisy_count_within`` reads it."""
    g = np.asarray(grads, dtype=float)
    if g.ndim != 2:
        raise ValueError(f"per-row gradients must have shape (n, dim), got {g.shape}")
    norms = np.empty(g.shape[0])
    with private_arithmetic():
        for block in row_blocks(g.shape[0]):  # row-local: one block's temporaries at a time
            rows = np.where(np.isfinite(g[block]).all(axis=1)[:, None], g[block], 0.0)
            peak, _, unit_norm = _peaks_and_unit_rows(rows)
            norms[block] = peak * unit_norm
    return norms


def noisy_count_within(rng: np.random.Generator, norms: np.ndarray, bound: float, sd: float) -> float:
    """#{i : ||g_i|| <= bound} + N(0, sd^2): the Gaussian mechanism on a count.

    Sensitivity: each row contributes an indicator in {0, 1}, so substituting one row moves the count by at most
    1 (N is public and unchanged). With the package's convention tau = sigma / Delta the release is
    ``GaussianDpEvent(sd)``: Gaussian-DP mu = 1 / sd. A NaN norm is not <= bound and counts 0 (any value keeps
    the indicator in {0, 1}); ``row_norms`` maps non-finite rows to norm 0.
    """
    return noisy_count(rng, count_within(norms, bound), sd)


def count_within(norms: np.ndarray, bound: float) -> int:
    """#{i : ||g_i|| <= bound} of per-row norms (``row_norms``): the statistic of ``noisy_count_within``, never
    released without its noise (``noisy_count``); partial counts of parts of the rows add up to the whole."""
    bound = _check_pos("clip bound", bound)
    return int(np.count_nonzero(np.asarray(norms, dtype=float) <= bound))


def noisy_count(rng: np.random.Generator, inside: int, sd: float) -> float:
    """A count (``count_within``: sensitivity 1 under substitution) plus N(0, sd^2): the Gaussian mechanism of
    ``noisy_count_within``, for a count added up from parts of the rows (e.g. Ray shards)."""
    return float(inside) + gaussian_noise(rng, _check_nonneg("count noise sd", sd))


@dataclasses.dataclass(frozen=True)
class AnchorSums:
    """The statistics of the rows' gradients at an anchor that the anchor phase releases with noise: the clipped
    gradient sum (``clipped_gradient_sum``), the count of rows within the bound (``count_within`` of
    ``row_norms``; None when not asked for) and the clipped squared-gradient sum (``clipped_squared_gradient_sum``;
    None when not asked for). Never released as they are: the caller adds each release's noise. Sums over parts
    of the rows add up (``add``), so parts may be formed where the rows live."""

    gradient: np.ndarray
    inside: int | None = None
    squared: np.ndarray | None = None

    @staticmethod
    def add(parts: "list[AnchorSums]") -> "AnchorSums":
        """The statistics of all rows from those of disjoint parts (in the parts' order)."""
        if not parts:
            raise ValueError("no parts to add")
        first = parts[0]
        gradient = np.zeros_like(np.asarray(first.gradient, dtype=float))
        squared = None if first.squared is None else np.zeros_like(gradient)
        inside = None if first.inside is None else 0
        for part in parts:
            gradient = gradient + np.asarray(part.gradient, dtype=float)
            if squared is not None:
                squared = squared + np.asarray(part.squared, dtype=float)
            if inside is not None:
                inside += int(part.inside)  # type: ignore[arg-type]
        return AnchorSums(gradient, inside, squared)


def anchor_sums(grads: np.ndarray, b_g: float, *, count: bool = False, squared: bool = False) -> AnchorSums:
    """The anchor phase's statistics (``AnchorSums``) of per-row gradients ``grads`` (n, dim) at one point, clip
    bound ``b_g``: exactly the values of ``clipped_gradient_sum``, ``count_within(row_norms(.))`` and
    ``clipped_squared_gradient_sum``. Never released by itself."""
    return AnchorSums(clipped_gradient_sum(grads, b_g),
                      count_within(row_norms(grads), b_g) if count else None,
                      clipped_squared_gradient_sum(grads, b_g) if squared else None)


def quantile_clip_update(bound: float, noisy_fraction: float, target: float, rate: float,
                         cap: float | None = None) -> float:
    """The geometric step bound * exp(-rate (noisy_fraction - target)), at most ``cap``.

    Post-processing of a released fraction: a bound under which more than ``target`` of the rows lie shrinks, one
    under which fewer lie grows; its fixed point in expectation is the ``target`` quantile of the row norms.
    """
    new = _check_pos("clip bound", bound) * math.exp(-float(rate) * (float(noisy_fraction) - float(target)))
    return min(new, float(cap)) if cap is not None else new


@dataclasses.dataclass
class QuantileClip:
    """A clip bound that follows a private estimate of the ``target`` quantile of per-row gradient norms.

    Every :meth:`release` is ONE Gaussian mechanism on a count (``noisy_count_within``: sensitivity 1, noise sd
    ``count_sd``, accounted as ``GaussianDpEvent(count_sd)``) followed by the public update
    ``quantile_clip_update`` of the bound (post-processing), capped at ``cap`` (the public starting bound). The
    bound used by a round is a function of earlier releases only, so the sequence of bounds is publishable.
    """

    bound: float
    target: float
    rate: float
    count_sd: float
    n_rows: int
    cap: float | None = None
    path: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        _check_pos("clip bound", self.bound)
        if not 0.0 < float(self.target) < 1.0:
            raise ValueError(f"the target quantile must lie in (0, 1), got {self.target!r}")
        _check_pos("clip rate", self.rate)
        _check_pos("count noise sd", self.count_sd)
        if int(self.n_rows) < 1:
            raise ValueError(f"n_rows must be >= 1, got {self.n_rows!r}")

    def release(self, rng: np.random.Generator, grads: np.ndarray) -> float:
        """Release the noisy count at the current bound from per-row gradients (n, dim), then update the bound;
        returns the released noisy count. ``path`` records every bound used (publishable)."""
        return self.release_norms(rng, row_norms(grads))

    def release_norms(self, rng: np.random.Generator, norms: np.ndarray) -> float:
        """:meth:`release` from per-row norms (n,) already computed (e.g. of anchor differences
        ||g_i(theta) - g_i(theta_hat)||); a NaN norm is outside every bound. One Gaussian count, then the update."""
        norms = np.asarray(norms, dtype=float).reshape(-1)
        if norms.size != int(self.n_rows):
            raise ValueError(f"expected {int(self.n_rows)} row norms, got {norms.size}")
        count = noisy_count_within(rng, norms, self.bound, self.count_sd)
        self.path.append(float(self.bound))
        self.bound = quantile_clip_update(self.bound, count / float(self.n_rows), self.target, self.rate, self.cap)
        return count
