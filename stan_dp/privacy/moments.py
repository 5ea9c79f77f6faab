"""One Gaussian release of the moment matrix of bounded rows v_i = (1, z_i) (sufficient statistics of a
normal linear regression, ``algorithm="dp-ssp"``).

Each row's vector z_i = (x_i, y_i) is clamped to a public box [lo, hi] and centred at the box's midpoint (a
public shift), so that |z_ij| <= m_j = (hi_j - lo_j) / 2. The released statistic is the upper triangle of
M = sum_i v_i v_i^T with v_i = (1, z_i - centre), without its constant entry M[0, 0] = N (public, not noised):
r(v) = (z_j for all j; z_j z_k for j <= k), summed over the rows. Unweighted, independent N(0, s^2) noise is added
to each released entry, s = tau * Delta, with Delta the replace-one L2 sensitivity below.

Weighted entries. The mechanism may weight the p linear entries (the sums z_j) by a public w >= 1 against the
quadratic ones: it adds N(0, s^2) to W r(v) (W = diag(w on the linear entries, 1 on the others)) with s = tau *
Delta_w, Delta_w the sensitivity of W r, and releases W^-1 of that (post-processing): the linear entries then
carry noise sd s / w, the quadratic ones s. Sums of single coordinates move by at most 2 m_j when one row is
replaced, products by up to 2 m_j m_k, so a weight above 1 buys precise sums for a small rise of Delta_w
(``stan_dp.methods.dp_ssp.ssp`` chooses w from public inputs).

Sensitivity (derivation in docs/algorithms/dp-ssp.md). For two rows z, u in the centred box,
    ||W (r(z) - r(u))||^2 = w^2 (||z||^2 + ||u||^2) + (||z||^4 + ||u||^4) / 2 + sum_j (z_j^2 - u_j^2)^2 / 2
                            + w^4 - (z.u + w^2)^2  <=  Phi_w(a, b),  a_j = z_j^2, b_j = u_j^2,
with Phi_w(a, b) = w^2 (sum a + sum b) + ((sum a)^2 + (sum b)^2) / 2 + sum_j (a_j - b_j)^2 / 2 + w^4 convex on
the box [0, m^2]^(2p), so its maximum is at a vertex (each a_j, b_j either 0 or m_j^2). Every pair also has
z.u + w^2 >= w^2 - sum_j m_j^2, so (z.u + w^2)^2 >= max(0, w^2 - sum_j m_j^2)^2, and

    Delta_w^2 = max over the 4^p vertices of Phi_w  -  max(0, w^2 - sum_j m_j^2)^2.

The second term matters on small boxes (sum m_j^2 below w^2), where the constant w^4 of Phi_w would otherwise make
the bound loose. The bound is attained up to the gap between (z.u + w^2)^2 and that term at the best signs
(``worst_case_pair`` finds such a pair): within 3 % for two or more coordinates, within 10 % for one (tests).

The shift is post-processing in reverse: the moments of (1, z - c) are a fixed invertible linear map of the
moments of (1, z), so the regression on the centred statistics is the same regression (the sampler works in
centred coordinates).
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np
from scipy.optimize import minimize

from .mechanisms import gaussian_noise

__all__ = ["MAX_EXACT_COORDINATES", "box_centre_half_width", "moment_entries", "moment_sensitivity", "moment_sensitivities",
           "row_moment_norm", "unit_moment_sensitivity",
           "worst_case_pair", "clamped_centred_rows", "release_moments", "entries_to_matrix", "matrix_to_entries",
           "linear_entries", "entry_weights"]

#: up to this many coordinates (x and y together: ten covariates and the outcome) the vertex maximum is enumerated
#: (4^p vertices, in blocks); above it the looser closed form with every coordinate at its bound in both rows and
#: the sums of squares maximised separately is used
MAX_EXACT_COORDINATES = 11
#: worst_case_pair searches the signs of every maximising vertex (2^p each): up to this many coordinates
MAX_PAIR_COORDINATES = 9


def box_centre_half_width(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The public centre (hi + lo) / 2 and half width (hi - lo) / 2 of a box; ``ValueError`` if lo >= hi or
    a bound is not finite."""
    lo, hi = np.asarray(lo, dtype=float).ravel(), np.asarray(hi, dtype=float).ravel()
    if lo.shape != hi.shape or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(hi <= lo):
        raise ValueError(f"the bounds must be finite with lower < upper for every coordinate, got lower = "
                         f"{lo.tolist()}, upper = {hi.tolist()}")
    return (hi + lo) / 2.0, (hi - lo) / 2.0


def moment_entries(z: np.ndarray) -> np.ndarray:
    """r(v) for v = (1, z): the upper triangle of v v^T in row-major order without its (0, 0) entry; works on
    one row (p,) or a batch (n, p) (then shape (n, (p + 1)(p + 2) / 2 - 1))."""
    z = np.asarray(z, dtype=float)
    single = z.ndim == 1
    z2 = np.atleast_2d(z)
    v = np.column_stack([np.ones(len(z2)), z2])
    iu = np.triu_indices(v.shape[1])
    out = (v[:, :, None] * v[:, None, :])[:, iu[0], iu[1]][:, 1:]
    return out[0] if single else out


def linear_entries(p: int) -> np.ndarray:
    """Boolean mask of the linear entries (the sums z_j) among the released entries of p coordinates: the first
    p of them in the row-major upper triangle without the constant."""
    q = p + 1
    return np.arange(q * (q + 1) // 2 - 1) < p


def entry_weights(p: int, linear_weight: float = 1.0) -> np.ndarray:
    """W's diagonal over the released entries: ``linear_weight`` on the linear ones, 1 on the quadratic ones."""
    return np.where(linear_entries(p), float(linear_weight), 1.0)


def _check_weight(linear_weight: float) -> float:
    w = float(linear_weight)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"linear_weight must be finite and positive, got {linear_weight!r}")
    return w


def _phi(a: np.ndarray, b: np.ndarray, w: float = 1.0) -> np.ndarray:
    sa, sb = a.sum(axis=-1), b.sum(axis=-1)
    return w**2 * (sa + sb) + (sa**2 + sb**2) / 2.0 + ((a - b) ** 2).sum(axis=-1) / 2.0 + w**4


def _vertices(half_width: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m2 = np.asarray(half_width, dtype=float) ** 2
    states = np.array(list(itertools.product(range(4), repeat=m2.size)), dtype=int).reshape(-1, m2.size)
    a = np.where((states == 1) | (states == 3), m2, 0.0)
    b = np.where((states == 2) | (states == 3), m2, 0.0)
    return a, b


def moment_sensitivity(half_width: np.ndarray, linear_weight: float = 1.0) -> float:
    """Delta_w = sup ||W (r(z) - r(u))||_2 over two rows of the centred box |z_j|, |u_j| <= half_width_j, W the
    weights of :func:`entry_weights` (an upper bound, nearly attained for p <= MAX_EXACT_COORDINATES; looser
    above; module doc). ``linear_weight`` 1: the unweighted Delta."""
    return float(moment_sensitivities(half_width, [linear_weight])[0])


def _max_phi(m: np.ndarray, weights: Sequence[float]) -> np.ndarray:
    """max over the 4^p vertices of Phi_w for each weight, enumerated in blocks of 4^8 vertices (numpy only)."""
    m2 = np.asarray(m, dtype=float) ** 2
    p = m2.size
    low = min(p, 8)
    digits = (np.arange(4**low)[:, None] // 4 ** np.arange(low)[None, :]) % 4  # (4^low, low) vertex states
    a_low = np.where((digits == 1) | (digits == 3), m2[:low], 0.0)
    b_low = np.where((digits == 2) | (digits == 3), m2[:low], 0.0)
    best = np.full(len(weights), -np.inf)
    for high in itertools.product(range(4), repeat=p - low):
        state = np.asarray(high, dtype=int)
        a_high = np.where((state == 1) | (state == 3), m2[low:], 0.0)
        b_high = np.where((state == 2) | (state == 3), m2[low:], 0.0)
        sa = a_low.sum(axis=1) + a_high.sum()
        sb = b_low.sum(axis=1) + b_high.sum()
        dd = ((a_low - b_low) ** 2).sum(axis=1) + float(((a_high - b_high) ** 2).sum())
        for i, w in enumerate(weights):
            value = float(np.max(w**2 * (sa + sb) + (sa**2 + sb**2) / 2.0 + dd / 2.0)) + w**4
            best[i] = max(best[i], value)
    return best


def moment_sensitivities(half_width: np.ndarray, linear_weights: Sequence[float]) -> np.ndarray:
    """:func:`moment_sensitivity` for each of several weights, enumerating the box's vertices once."""
    m = np.asarray(half_width, dtype=float).ravel()
    if m.size == 0 or np.any(~np.isfinite(m)) or np.any(m <= 0):
        raise ValueError(f"half widths must be finite and positive, got {m.tolist()}")
    weights = [_check_weight(w) for w in linear_weights]
    # (z.u + w^2)^2 >= max(0, w^2 - sum m_j^2)^2 for every pair in the box: subtracted from the vertex maximum
    slack = np.array([max(0.0, w**2 - float(np.sum(m**2))) ** 2 for w in weights])
    if m.size <= MAX_EXACT_COORDINATES:
        return np.sqrt(_max_phi(m, weights) - slack)
    m2 = m**2  # every term of Phi_w maximised on its own: a valid (looser) bound
    s = float(m2.sum())
    return np.sqrt([2.0 * w**2 * s + s**2 + float((m2**2).sum()) / 2.0 + w**4 for w in weights] - slack)


def row_moment_norm(half_width: np.ndarray, linear_weight: float = 1.0, count_weight: float = 1.0) -> float:
    """max over the centred box of ||(count_weight, W r(z))||: how far one row moves the weighted moments with
    their count entry when it is added or removed (corners: the sums at w m_j, the products at m_j m_k)."""
    m2 = np.asarray(half_width, dtype=float).ravel() ** 2
    w = _check_weight(linear_weight)
    s2 = float(m2.sum())
    return math.sqrt(float(count_weight) ** 2 + w**2 * s2 + (s2**2 + float((m2**2).sum())) / 2.0)


def unit_moment_sensitivity(half_width: np.ndarray, linear_weight: float, rows_per_unit: int,
                            count_weight: float) -> float:
    """The sensitivity of the weighted moments WITH their count entry when one privacy unit of at most
    ``rows_per_unit`` rows is replaced by another (of any size up to the cap): pairing the two units' rows (the
    shorter padded with absent rows), each pair moves the vector by at most Delta_w (two rows: the count
    cancels) or :func:`row_moment_norm` (one row absent), so the unit by at most k times the larger."""
    k = int(rows_per_unit)
    if k < 1:
        raise ValueError(f"rows_per_unit must be a positive integer, got {rows_per_unit!r}")
    return k * max(moment_sensitivity(half_width, linear_weight),
                   row_moment_norm(half_width, linear_weight, count_weight))


def worst_case_pair(half_width: np.ndarray, linear_weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, float]:
    """Two rows z, u of the centred box at the maximising vertex with signs chosen to bring z.u nearest to -w^2,
    and ||W (r(z) - r(u))||_2 (which tests compare with :func:`moment_sensitivity`). Needs
    p <= MAX_PAIR_COORDINATES."""
    m = np.asarray(half_width, dtype=float).ravel()
    if m.size > MAX_PAIR_COORDINATES:
        raise ValueError(f"worst_case_pair enumerates vertices for at most {MAX_PAIR_COORDINATES} coordinates")
    w = _check_weight(linear_weight)
    weights = entry_weights(m.size, w)
    a, b = _vertices(m)
    phi = _phi(a, b, w)

    def distance(z: np.ndarray, u: np.ndarray) -> float:
        return float(np.linalg.norm(weights * (moment_entries(z) - moment_entries(u))))

    best, pair = -1.0, None
    for k in np.flatnonzero(phi >= phi.max() - w**4 - 1e-9):
        za, ub = np.sqrt(a[k]), np.sqrt(b[k])
        for signs in itertools.product((1.0, -1.0), repeat=m.size):
            u = ub * np.asarray(signs)
            value = distance(za, u)
            if value > best:
                best, pair = value, (za.copy(), u.copy())
    # polish inside the box (the maximum may lie inside a face: one coordinate of u near -w^2 / z)

    p = m.size

    def neg(v: np.ndarray) -> float:
        return -distance(v[:p], v[p:])

    box = [(-mj, mj) for mj in np.tile(m, 2)]
    assert pair is not None  # the corner search above always records a pair
    starts = [np.concatenate(pair)] + list(np.random.default_rng(0).uniform(-1, 1, (6, 2 * p)) * np.tile(m, 2))
    for start in starts:
        res = minimize(neg, start, method="L-BFGS-B", bounds=box)
        if -res.fun > best:
            best, pair = -float(res.fun), (res.x[:p].copy(), res.x[p:].copy())
    return pair[0], pair[1], best


def clamped_centred_rows(z: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Rows (n, p) clamped to [lo, hi] and centred at the box midpoint; a non-finite entry is mapped to the
    centre (0 after centring) so that one row can never leave the box."""
    z = np.array(z, dtype=float, copy=True)
    centre, _ = box_centre_half_width(lo, hi)
    lo_a, hi_a = np.asarray(lo, dtype=float).ravel(), np.asarray(hi, dtype=float).ravel()
    z = np.where(np.isfinite(z), z, centre)
    return np.clip(z, lo_a, hi_a) - centre


def entries_to_matrix(entries: np.ndarray, n_rows: float) -> np.ndarray:
    """The symmetric (p + 1) x (p + 1) matrix with M[0, 0] = n_rows and the upper triangle ``entries``."""
    entries = np.asarray(entries, dtype=float)
    q = int(round((math.sqrt(8 * (entries.size + 1) + 1) - 1) / 2))
    iu = np.triu_indices(q)
    out = np.zeros((q, q))
    out[iu] = np.concatenate([[float(n_rows)], entries])
    return out + np.triu(out, 1).T


def matrix_to_entries(matrix: np.ndarray) -> np.ndarray:
    """The released entries (upper triangle without [0, 0]) of a symmetric matrix."""
    matrix = np.asarray(matrix, dtype=float)
    iu = np.triu_indices(matrix.shape[0])
    return matrix[iu][1:]


def release_moments(z: np.ndarray, lo: np.ndarray, hi: np.ndarray, noise_sd: float,
                    rng: np.random.Generator, linear_weight: float = 1.0,
                    count_weight: float | None = None) -> np.ndarray:
    """THE mechanism: W^-1 (W sum_i r(clamp(z_i) - centre) + N(0, noise_sd^2 I)) (the released entries only; the
    constant entry N is public), W = :func:`entry_weights` (``linear_weight`` on the sums, 1 on the products):
    each linear entry carries noise sd noise_sd / w, each quadratic one noise_sd. ``noise_sd`` = tau *
    moment_sensitivity(half width, linear_weight). ``count_weight``: the row count is not public (a privacy
    unit): it is released too, as a first entry weighted by count_weight (noise sd noise_sd / count_weight), and
    ``noise_sd`` must then be tau * :func:`unit_moment_sensitivity`."""
    rows = clamped_centred_rows(z, lo, hi)
    total = moment_entries(rows).sum(axis=0)
    if not (math.isfinite(noise_sd) and noise_sd > 0):
        raise ValueError(f"noise_sd must be finite and positive, got {noise_sd!r}")
    weights = entry_weights(rows.shape[1], _check_weight(linear_weight))
    if count_weight is not None:
        total = np.concatenate([[float(rows.shape[0])], total])
        weights = np.concatenate([[_check_weight(count_weight)], weights])
    return (weights * total + gaussian_noise(rng, float(noise_sd), size=total.shape)) / weights
