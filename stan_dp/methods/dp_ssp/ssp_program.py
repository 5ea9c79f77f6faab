"""The noise-aware posterior of ``algorithm="dp-ssp"``, written as Stan: what the released draws come from.

Released (``stan_dp.privacy.moments``): Z = s + E, with s the upper triangle (without the constant N) of the
moment matrix M of the clamped, centred rows v_i = (1, x_i - c_x, y_i - c_y) and E independent normal noise of
public sds (one for the sums, another for the products).

Model (in the spirit of Bernstein and Sheldon, "Differentially private Bayesian linear regression", NeurIPS
2019): the true statistics s are latent. Write M = [[S, T], [T', yy]] with S the (K + 1) x (K + 1) moments of
(1, x), T = sum_i (1, x_i) y_i and yy = sum_i y_i^2, and R = yy - T' S^-1 T the residual sum of squares. The
design S is latent with its own prior; conditionally on it (the regression's usual stance) and on
theta = (a, b, sigma),

    T | S, theta ~ N(S c, sigma^2 S)  and  R / sigma^2 ~ chi^2(N - K - 1), independent of T,

with c = (a + b . c_x - c_y, b) the coefficients in centred coordinates. Both are exact for normal rows, and
their product is, as a function of theta, exactly the rows' Gaussian likelihood: with no release noise the
draws follow the non-private posterior given the (clamped) rows.

The latent design is S = [[N, N (h o m)'], [N (h o m), N diag(h) (V + m m') diag(h)]], m the covariates' mean and
V their covariance (divisor N), both in units of the covariates' half widths h. Its prior (option
``design_prior``): "normal" (the default) takes the covariate rows as normal with a flat prior on their mean and
an inverse Wishart(nu, Psi) prior on their covariance, integrated out analytically (``stan_dp.methods.dp_ssp.ssp_design``: the
scatter W = N V then has the matrix-variate beta-prime density); "flat" a flat prior on V.

Two equivalent forms of (T, R): centred (T and R are parameters, on scales N h h_y and N h_y^2) or non-centred
(T = S c + sigma L u with L L' = S, u ~ N(0, I), R = sigma^2 q, q ~ chi^2(N - K - 1)). The centred form suits a
release whose noise is small beside the spread of the statistics (high epsilon: the statistics are pinned), the
non-centred one a noisy release; :func:`choose_centred` picks it from the release and public inputs alone.

The program's own prior (its model block with no rows) completes the posterior. Everything here reads the release
and public inputs only.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...privacy.moments import box_centre_half_width, entries_to_matrix
from ...stan.posterior_program import PosteriorPieces, coefficient_expressions, pd_matrix_geometry, pd_matrix_text

__all__ = ["SSP_PREFIX", "ssp_pieces", "ssp_data", "ssp_inits", "choose_centred", "coefficient_expressions",
           "valid_statistics"]

SSP_PREFIX = "dpssp_"

_V = pd_matrix_text("dpssp_V", "dpssp_K")  # the covariates' covariance, divisor N (half-width units)

_DATA = """
int<lower=1> dpssp_N;  // rows (public; with a privacy unit, an estimate from the released count)
int<lower=0, upper=1> dpssp_count_released;  // 1: the row count was released too (a privacy unit)
real dpssp_count;  // the released row count (when released)
real<lower=0> dpssp_count_sd;  // its noise sd (when released)
int<lower=1> dpssp_K;  // covariates
vector[((dpssp_K + 2) * (dpssp_K + 3)) %/% 2 - 1] dpssp_Z;  // the released moments (upper triangle, no constant)
vector<lower=0>[((dpssp_K + 2) * (dpssp_K + 3)) %/% 2 - 1] dpssp_sd;  // their public noise sds
vector[dpssp_K] dpssp_cx;  // centre of the covariates' bounds
real dpssp_cy;  // centre of the outcome's bounds
vector<lower=0>[dpssp_K] dpssp_hx;  // half widths of the covariates' bounds
int<lower=0, upper=1> dpssp_centred;  // 1: (T, log R) are parameters; 0: non-centred (u, log q)
int<lower=0, upper=1> dpssp_design_normal;  // 1: normal covariate rows; 0: a flat prior on V
real<lower=0> dpssp_nu;  // inverse Wishart degrees of freedom (normal design)
cov_matrix[dpssp_K] dpssp_Psi;  // inverse Wishart scale, in half-width units (normal design)
// where each added parameter sits and its scale, from the release (post-processing): sampling geometry only
vector[dpssp_K] dpssp_m0;
vector<lower=0>[dpssp_K] dpssp_msd;
vector[dpssp_K + 1] dpssp_t0;
vector<lower=0>[dpssp_K + 1] dpssp_tsd;
real dpssp_lr0;
real<lower=0> dpssp_lrsd;
""" + _V["data"]

_PARAMETERS = """
vector<offset=dpssp_m0, multiplier=dpssp_msd>[dpssp_K] dpssp_m;  // covariates' mean (half-width units)
vector<offset=dpssp_t0, multiplier=dpssp_tsd>[dpssp_K + 1] dpssp_t;  // centred: T; non-centred: u ~ N(0, I)
real<offset=dpssp_lr0, multiplier=dpssp_lrsd> dpssp_lr;  // centred: log R; non-centred: log q
vector<offset=dpssp_count, multiplier=dpssp_count_sd>[dpssp_count_released] dpssp_n;  // the rows, when latent
""" + _V["parameters"]

_MODEL_TEMPLATE = """
{
  int dpssp_p = dpssp_K + 1;
  real dpssp_nr = dpssp_N;  // the number of rows: public, or latent with its release
  real dpssp_df;
  real dpssp_a = {intercept};
  vector[dpssp_K] dpssp_b = {slopes};
  real dpssp_sigma = {scale};
  matrix[dpssp_K + 2, dpssp_K + 2] dpssp_M;  // the latent moment matrix of (1, x, y), centred coordinates
  vector[dpssp_K + 1] dpssp_c = append_row(dpssp_a + dot_product(dpssp_b, dpssp_cx) - dpssp_cy, dpssp_b);
  if (dpssp_count_released) {
    dpssp_nr = dpssp_n[1];
    dpssp_count ~ normal(dpssp_nr, dpssp_count_sd);
  }
  if (dpssp_nr <= dpssp_K + 2) {
    reject("the number of rows must exceed the coefficients plus one");
  }
  dpssp_df = dpssp_nr - dpssp_p;
@V@  dpssp_M[1, 1] = dpssp_nr;
  dpssp_M[2:dpssp_p, 1] = dpssp_nr * (dpssp_hx .* dpssp_m);
  dpssp_M[1, 2:dpssp_p] = dpssp_M[2:dpssp_p, 1]';
  dpssp_M[2:dpssp_p, 2:dpssp_p] = dpssp_nr * quad_form_diag(dpssp_V + dpssp_m * dpssp_m', dpssp_hx);
  {
    matrix[dpssp_K + 1, dpssp_K + 1] dpssp_L = cholesky_decompose(dpssp_M[1:dpssp_p, 1:dpssp_p]);
    vector[dpssp_K + 1] dpssp_T;
    real dpssp_yy;
    if (dpssp_centred) {  // T | S, theta ~ N(S c, sigma^2 S); R / sigma^2 ~ chi^2(N - K - 1)
      real dpssp_R = exp(dpssp_lr);
      dpssp_T = dpssp_t;
      dpssp_T ~ multi_normal_cholesky(dpssp_M[1:dpssp_p, 1:dpssp_p] * dpssp_c, dpssp_sigma * dpssp_L);
      target += chi_square_lpdf(dpssp_R / square(dpssp_sigma) | dpssp_df) - 2 * log(dpssp_sigma) + dpssp_lr;
      dpssp_yy = dpssp_R + dot_self(mdivide_left_tri_low(dpssp_L, dpssp_T));
    } else {  // the same law, non-centred: T = S c + sigma L u, R = sigma^2 q
      real dpssp_q = exp(dpssp_lr);
      dpssp_T = dpssp_M[1:dpssp_p, 1:dpssp_p] * dpssp_c + dpssp_sigma * (dpssp_L * dpssp_t);
      dpssp_yy = square(dpssp_sigma) * dpssp_q + dot_self(dpssp_L' * dpssp_c + dpssp_sigma * dpssp_t);
      dpssp_t ~ std_normal();
      target += chi_square_lpdf(dpssp_q | dpssp_df) + dpssp_lr;
    }
    dpssp_M[1:dpssp_p, dpssp_p + 1] = dpssp_T;
    dpssp_M[dpssp_p + 1, 1:dpssp_p] = dpssp_T';
    dpssp_M[dpssp_p + 1, dpssp_p + 1] = dpssp_yy;
  }
  {
    vector[((dpssp_K + 2) * (dpssp_K + 3)) %/% 2 - 1] dpssp_s;  // the latent released entries, in their order
    int dpssp_k = 1;
    for (dpssp_i in 1:(dpssp_K + 2)) {
      for (dpssp_j in dpssp_i:(dpssp_K + 2)) {
        if (dpssp_i > 1 || dpssp_j > 1) {
          dpssp_s[dpssp_k] = dpssp_M[dpssp_i, dpssp_j];
          dpssp_k += 1;
        }
      }
    }
    dpssp_Z ~ normal(dpssp_s, dpssp_sd);  // the release noise (public sds)
  }
  if (dpssp_design_normal) {  // normal covariate rows, their covariance integrated out (W = N V)
    matrix[dpssp_K, dpssp_K] dpssp_W = dpssp_nr * dpssp_V;
    target += 0.5 * (dpssp_nr - dpssp_K - 2) * log_determinant(dpssp_W)
              - 0.5 * (dpssp_nr - 1 + dpssp_nu) * log_determinant(dpssp_Psi + dpssp_W);
  }
}
"""
_MODEL = _MODEL_TEMPLATE.replace("@V@", "".join(f"  {line}\n" for line in _V["build"].splitlines()))


def ssp_pieces(intercept: str, slopes: str, scale: str, title: str) -> PosteriorPieces:
    """The Stan text dp-ssp adds to the program (module doc); the coefficients as Stan expressions
    (:func:`coefficient_expressions`)."""
    model = _MODEL.replace("{intercept}", intercept).replace("{slopes}", slopes).replace("{scale}", scale)
    return PosteriorPieces(prefix=SSP_PREFIX, title=title, data=_DATA, parameters=_PARAMETERS, model=model)


def valid_statistics(released: np.ndarray, n_rows: int, floor: float) -> np.ndarray:
    """The released moment matrix moved inside the support (the design block positive definite with its constant
    N, a positive residual sum of squares): (K + 2) x (K + 2). Post-processing of the release."""
    m = entries_to_matrix(released, n_rows)
    p = m.shape[0] - 1
    sxx = m[:p, :p]
    for _ in range(2):  # PD projection, then the constant back to N (repeat once)
        vals, vecs = np.linalg.eigh(sxx)
        sxx = (vecs * np.maximum(vals, floor)) @ vecs.T
        sxx[0, 0] = n_rows
    if np.linalg.eigvalsh(sxx).min() <= 0:
        sxx = np.diag(np.diag(sxx).clip(min=floor))
        sxx[0, 0] = n_rows
    m[:p, :p] = sxx
    t = m[:p, p]
    explained = float(t @ np.linalg.solve(sxx, t))
    m[:p, p] = t
    m[p, :p] = t
    m[p, p] = max(m[p, p], explained + max(floor, 1e-3 * (n_rows - p)))
    return m


def choose_centred(released: np.ndarray, n_rows: int, noise_sds: np.ndarray) -> bool:
    """Centred when the release noise is small beside the spread of the residual sum of squares that the release
    implies (sd sqrt(2 (N - p)) sigma^2 with sigma^2 = R / (N - p)): the statistics are then pinned near the
    release and the centred form has the better geometry. A function of the release and public inputs only."""
    sds = np.asarray(noise_sds, dtype=float)
    m = valid_statistics(released, n_rows, max(float(sds.max()), 1e-6 * n_rows))
    p = m.shape[0] - 1
    t = m[:p, p]
    rss = float(m[p, p] - t @ np.linalg.solve(m[:p, :p], t))
    df = n_rows - p
    spread = math.sqrt(2.0 * df) * rss / df
    return float(sds.max()) < 0.05 * spread


def _entry_index(p: int) -> dict[tuple[int, int], int]:
    """Position of M[i, j] (i <= j, not [0, 0]) among the released entries (row-major upper triangle)."""
    out, k = {}, 0
    for i in range(p + 1):
        for j in range(i, p + 1):
            if i or j:
                out[(i, j)] = k
                k += 1
    return out


def _geometry(released: np.ndarray, noise_sds: np.ndarray, n_rows: int, half: np.ndarray, centred: bool
              ) -> dict[str, Any]:
    """Offsets and scales of the added parameters (data of the program, module doc): where the release puts each
    latent quantity and about how tightly, so that every unconstrained coordinate has a scale near 1. They shape
    the sampler's geometry only (the posterior is the same for any offset and scale). Post-processing of the
    release and public inputs."""
    sds = np.asarray(noise_sds, dtype=float)
    k = half.size - 1
    p = k + 1
    hx = half[:-1]
    index = _entry_index(p)
    m = valid_statistics(released, n_rows, max(float(sds.max()), 1e-6 * n_rows))
    sd_of = lambda i, j: float(sds[index[(i, j)]])  # noqa: E731
    mean = m[0, 1:p] / n_rows / hx
    msd = np.array([sd_of(0, j + 1) for j in range(k)]) / (n_rows * hx)
    cov = m[1:p, 1:p] / n_rows / np.outer(hx, hx) - np.outer(mean, mean)
    cov_sds = np.array([[sd_of(min(i, j) + 1, max(i, j) + 1) for j in range(k)] for i in range(k)]) / (
        n_rows * np.outer(hx, hx))
    t = m[:p, p]
    rss = float(m[p, p] - t @ np.linalg.solve(m[:p, :p], t))
    df = n_rows - p
    sigma2 = rss / df
    if centred:
        t0 = t
        tsd = np.array([min(sd_of(j, p), math.sqrt(sigma2 * m[j, j])) for j in range(p)])
        lr0 = math.log(rss)
        lrsd = min(max(sd_of(p, p), math.sqrt(2.0 * df) * sigma2) / rss, 1.0)
    else:
        t0, tsd = np.zeros(p), np.ones(p)
        lr0, lrsd = math.log(df), math.sqrt(2.0 / df)
    return {**pd_matrix_geometry("dpssp_V", cov, cov_sds), "dpssp_m0": mean.tolist(),
            "dpssp_msd": np.clip(msd, 1e-8, 1.0).tolist(), "dpssp_t0": np.asarray(t0, dtype=float).tolist(),
            "dpssp_tsd": np.maximum(tsd, 1e-8).tolist(), "dpssp_lr0": float(lr0),
            "dpssp_lrsd": float(max(lrsd, 1e-6))}


def ssp_data(*, released: np.ndarray, noise_sds: np.ndarray, n_rows: int, lower: np.ndarray, upper: np.ndarray,
             centred: bool, design: Any | None, count: tuple[float, float] | None = None) -> dict[str, Any]:
    """The data dp-ssp adds to the program's public data (all public: the release, its noise sds, N, the bounds,
    the design prior's constants and the parameters' offsets and scales from the release). ``design``: a
    ``stan_dp.methods.dp_ssp.ssp_design.DesignPrior`` (in the release's units) or None for the flat prior. ``count``: the
    released row count and its noise sd (a privacy unit), or None when N is public; ``n_rows`` is then an estimate
    from it, used only to place the parameters."""
    centre, half = box_centre_half_width(lower, upper)
    k = centre.size - 1
    hx = half[:-1]
    if design is None:
        nu, psi = float(k + 3), np.eye(k)
    else:
        nu = float(design.nu)
        psi = np.asarray(design.psi, dtype=float) / np.outer(hx, hx)  # the prior in half-width units
    return {"dpssp_N": int(n_rows), "dpssp_K": int(k), "dpssp_Z": np.asarray(released, dtype=float).tolist(),
            "dpssp_sd": np.asarray(noise_sds, dtype=float).tolist(), "dpssp_cx": centre[:-1].tolist(),
            "dpssp_cy": float(centre[-1]), "dpssp_hx": hx.tolist(),
            "dpssp_centred": int(bool(centred)), "dpssp_design_normal": int(design is not None),
            "dpssp_nu": nu, "dpssp_Psi": psi.tolist(), "dpssp_count_released": int(count is not None),
            "dpssp_count": float(count[0]) if count is not None else 0.0,
            "dpssp_count_sd": float(count[1]) if count is not None else 1.0,
            **_geometry(np.asarray(released, dtype=float), noise_sds, int(n_rows), half, bool(centred))}


def ssp_inits(data: dict[str, Any], jitter: np.random.Generator | None = None) -> dict[str, Any]:
    """Inits of the added parameters (constrained values) at their offsets, each moved by ``jitter`` (public
    randomness) by a tenth of its scale so that the chains start apart. ``data``: :func:`ssp_data`'s output."""
    out: dict[str, Any] = {}
    if data.get("dpssp_count_released"):
        count = float(data["dpssp_count"]) + (0.1 * float(data["dpssp_count_sd"]) * jitter.standard_normal()
                                              if jitter is not None else 0.0)
        out["dpssp_n"] = [max(count, float(data["dpssp_K"]) + 3.5)]
    for name, centre, scale in (("dpssp_m", "dpssp_m0", "dpssp_msd"), ("dpssp_V_ld", "dpssp_V_ld0", "dpssp_V_ldsd"),
                                ("dpssp_V_od", "dpssp_V_od0", "dpssp_V_odsd"), ("dpssp_t", "dpssp_t0", "dpssp_tsd"),
                                ("dpssp_lr", "dpssp_lr0", "dpssp_lrsd")):
        c, s = np.asarray(data[centre], dtype=float), np.asarray(data[scale], dtype=float)
        if jitter is not None:
            c = c + 0.1 * s * jitter.standard_normal(c.shape)
        out[name] = c.tolist() if c.ndim else float(c)
    return out
