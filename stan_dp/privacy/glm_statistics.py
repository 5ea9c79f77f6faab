"""The release of ``algorithm="dp-glm"``: the score and the curvature of a logistic or Poisson regression at a
public point, summed over clamped rows, each with Gaussian noise.

Coordinates. Each covariate is clamped to its public box [lo_j, hi_j] and mapped to [-1, 1] by the public affine
map x'_j = (x_j - c_j) / h_j (c the box's centre, h its half width), and a row's design vector is
v = (1, x') with an intercept, else v = x' (then c = 0 and x'_j = x_j / h_j, |x'_j| <= max(|lo_j|, |hi_j|) / h_j).
The coefficients theta' in these coordinates give the same linear predictor as the user's (an invertible linear
map, ``stan_dp.methods.dp_glm.glm_release``). ||v|| <= B, B = sqrt(1 + K) with an intercept.

Statistics at a public point theta' (eta = v . theta'):
* logistic: g = sum_i v_i (y_i - p_i), H = sum_i p_i (1 - p_i) v_i v_i^T, p = 1 / (1 + exp(-eta)), y clamped to
  [0, 1]; |y - p| <= 1 and p (1 - p) <= 1/4, so one row's score has norm <= B and its curvature Frobenius norm
  <= B^2 / 4;
* Poisson: g = sum_i v_i (y_i - min(mu_i, c)), H = sum_i min(mu_i, c) v_i v_i^T, mu = exp(eta), y clamped to
  [0, y_max] (the outcome's public cap) and c a public cap on the mean (default y_max): |y - min(mu, c)| <=
  a = max(y_max, c) and 0 <= min(mu, c) <= c, so the score's norm is <= a B and the curvature's Frobenius norm
  <= c B^2. The cap on the mean is part of the statistic: rows whose fitted mean passes c contribute as if it were
  c (a bias, never a leak); a c below y_max makes the curvature's noise y_max / c times smaller.

Replace-one sensitivities: the score moves by at most 2 a B (a = 1 or max(y_max, c)); the curvature of two rows are
positive semi-definite, so ||A - C||_F^2 <= ||A||_F^2 + ||C||_F^2 and it moves by at most sqrt(2) w B^2 in
Frobenius norm (w = 1/4 or c). The curvature is released as its upper triangle with the off-diagonal entries
multiplied by sqrt(2) (whose L2 norm IS the Frobenius norm), noise added, and divided back: the diagonal carries
noise sd s_H, the off-diagonal entries s_H / sqrt(2). A non-finite covariate maps to the box's centre and a
non-finite outcome to 0, so no row leaves its bounds.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from .mechanisms import gaussian_noise

__all__ = ["GLM_FAMILIES", "GLMBox", "glm_design", "glm_score_curvature", "release_glm_statistics",
           "curvature_entry_weights", "GLMRelease"]

#: the families whose score and curvature are bounded by the box and the outcome's cap
GLM_FAMILIES = ("logistic", "poisson")


@dataclasses.dataclass(frozen=True)
class GLMBox:
    """The public box of a GLM release: covariate bounds ``lower`` / ``upper`` (K,), whether the design has an
    intercept column, the family, (Poisson) the outcome's cap ``y_max`` and a privacy unit's cap on its rows
    ``rows_per_unit`` (1: row-level). A unit of at most k rows moves each statistic by at most k times a row's
    bound (pair its rows with the other unit's, absent rows counting zero: each pair moves the score by at most
    2 a B and the sum of PSD curvatures, as for one row, by at most sqrt(2) k w B^2 in all)."""

    lower: np.ndarray
    upper: np.ndarray
    intercept: bool
    family: str
    y_max: float = 1.0
    rows_per_unit: int = 1
    #: Poisson: the public cap c on a row's mean in the statistics (None: y_max)
    mean_cap: float | None = None

    def __post_init__(self) -> None:
        lo = np.asarray(self.lower, dtype=float).ravel()
        hi = np.asarray(self.upper, dtype=float).ravel()
        if lo.shape != hi.shape or not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(hi <= lo):
            raise ValueError(f"the covariates' bounds must be finite with lower < upper, got lower = {lo.tolist()}, "
                             f"upper = {hi.tolist()}")
        if self.family not in GLM_FAMILIES:
            raise ValueError(f"family must be one of {GLM_FAMILIES}, got {self.family!r}")
        if not (math.isfinite(self.y_max) and self.y_max > 0):
            raise ValueError(f"y_max must be finite and positive, got {self.y_max!r}")
        if self.mean_cap is not None and not (math.isfinite(self.mean_cap) and self.mean_cap > 0):
            raise ValueError(f"mean_cap must be finite and positive, got {self.mean_cap!r}")
        if int(self.rows_per_unit) < 1:
            raise ValueError(f"rows_per_unit must be a positive integer, got {self.rows_per_unit!r}")
        object.__setattr__(self, "lower", lo)
        object.__setattr__(self, "upper", hi)

    @property
    def centre(self) -> np.ndarray:
        """The shift of the map to [-1, 1] (0 without an intercept: a shift would need one)."""
        return (self.upper + self.lower) / 2.0 if self.intercept else np.zeros_like(self.lower)

    @property
    def scale(self) -> np.ndarray:
        """h: the half widths of the boxes."""
        return (self.upper - self.lower) / 2.0

    @property
    def dim(self) -> int:
        return self.lower.size + int(self.intercept)

    @property
    def design_bound(self) -> float:
        """B = max ||v|| over the box."""
        extent = np.maximum(np.abs(self.lower - self.centre), np.abs(self.upper - self.centre)) / self.scale
        return math.sqrt(int(self.intercept) + float(np.sum(extent**2)))

    @property
    def cap(self) -> float:
        """c: the cap on a Poisson row's mean in the statistics (y_max unless given)."""
        return float(self.y_max if self.mean_cap is None else self.mean_cap)

    @property
    def weight_bound(self) -> float:
        """a: the bound on |y - mean| (1 logistic, max(y_max, c) Poisson)."""
        return 1.0 if self.family == "logistic" else max(float(self.y_max), self.cap)

    @property
    def score_sensitivity(self) -> float:
        """2 a B (times k for a unit of at most k rows)."""
        return 2.0 * self.weight_bound * self.design_bound * int(self.rows_per_unit)

    @property
    def curvature_sensitivity(self) -> float:
        """sqrt(2) w B^2 with w = 1/4 (logistic) or c (Poisson) (times k for a unit of at most k rows)."""
        w = 0.25 if self.family == "logistic" else self.cap
        return math.sqrt(2.0) * w * self.design_bound**2 * int(self.rows_per_unit)

    def to_user(self) -> np.ndarray:
        """A with user coefficients = A theta' ((intercept,) slopes, in that order)."""
        k = self.lower.size
        h, c = self.scale, self.centre
        if not self.intercept:
            return np.diag(1.0 / h)
        a = np.zeros((k + 1, k + 1))
        a[0, 0] = 1.0
        a[0, 1:] = -c / h
        a[1:, 1:] = np.diag(1.0 / h)
        return a


def glm_design(x: np.ndarray, box: GLMBox) -> np.ndarray:
    """The rows' design vectors v (N, dim): covariates clamped to the box (a non-finite one to its centre), mapped
    to [-1, 1], with the intercept's 1 first."""
    x = np.asarray(x, dtype=float).reshape(len(x), -1)
    mid = (box.upper + box.lower) / 2.0
    x = np.clip(np.where(np.isfinite(x), x, mid), box.lower, box.upper)
    scaled = (x - box.centre) / box.scale
    return np.column_stack([np.ones(len(x)), scaled]) if box.intercept else scaled


def _outcome(y: np.ndarray, box: GLMBox) -> np.ndarray:
    y = np.asarray(y, dtype=float).ravel()
    return np.clip(np.where(np.isfinite(y), y, 0.0), 0.0, 1.0 if box.family == "logistic" else box.y_max)


def glm_score_curvature(design: np.ndarray, y: np.ndarray, theta: np.ndarray, box: GLMBox
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(g, H) of the module doc at ``theta`` (release coordinates), without noise: PRIVATE."""
    y = _outcome(y, box)
    eta = design @ np.asarray(theta, dtype=float)
    if box.family == "logistic":
        mean = 1.0 / (1.0 + np.exp(-np.clip(eta, -700.0, 700.0)))
        weight = mean * (1.0 - mean)
    else:
        mean = np.minimum(np.exp(np.minimum(eta, 700.0)), box.cap)
        weight = mean
    score = design.T @ (y - mean)
    curvature = (design * weight[:, None]).T @ design
    return score, curvature


def curvature_entry_weights(dim: int) -> np.ndarray:
    """The weights of the upper triangle's entries (row-major, diagonal included): 1 on the diagonal, sqrt(2) off
    it (so that the weighted vector's L2 norm is the matrix's Frobenius norm)."""
    iu = np.triu_indices(dim)
    return np.where(iu[0] == iu[1], 1.0, math.sqrt(2.0))


@dataclasses.dataclass(frozen=True)
class GLMRelease:
    """One release: the point theta' (public), the noisy score and the noisy curvature's upper triangle
    (row-major, diagonal included, unweighted), and the noise sds of the score and of each curvature entry."""

    point: np.ndarray
    score: np.ndarray
    curvature: np.ndarray
    score_sd: float
    curvature_sds: np.ndarray

    def curvature_matrix(self) -> np.ndarray:
        """The released curvature as a symmetric matrix."""
        d = self.point.size
        m = np.zeros((d, d))
        m[np.triu_indices(d)] = self.curvature
        return m + np.triu(m, 1).T


def release_glm_statistics(design: np.ndarray, y: np.ndarray, theta: np.ndarray, box: GLMBox, *,
                           tau_score: float, tau_curvature: float, rng: np.random.Generator) -> GLMRelease:
    """THE mechanism: g + N(0, (tau_score 2 a B)^2 I) and the weighted upper triangle of H + N(0, (tau_curvature
    sqrt(2) w B^2)^2 I), divided back by the weights (module doc). Two Gaussian mechanisms with noise multipliers
    tau_score and tau_curvature relative to their replace-one sensitivities."""
    theta = np.asarray(theta, dtype=float)
    score, curvature = glm_score_curvature(design, y, theta, box)
    d = theta.size
    s_g = float(tau_score) * box.score_sensitivity
    s_h = float(tau_curvature) * box.curvature_sensitivity
    weights = curvature_entry_weights(d)
    upper = curvature[np.triu_indices(d)]
    noisy_score = score + gaussian_noise(rng, s_g, size=d)
    noisy_upper = (weights * upper + gaussian_noise(rng, s_h, size=upper.shape)) / weights
    return GLMRelease(point=theta.copy(), score=noisy_score, curvature=noisy_upper, score_sd=s_g,
                      curvature_sds=s_h / weights)
