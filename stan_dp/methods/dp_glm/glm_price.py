"""The price in advance of a private regression fit with a per-row gradient bound (public inputs only).

The best known use of a budget on a smooth row likelihood is one release at the mode: the clipped gradient sum
G~ = sum_i clip_L(g_i(theta_hat)) + xi, xi ~ N(0, s^2 I) with s = 2 L / mu (replace-one sensitivity 2 L, mu the
Gaussian-DP parameter of the whole (epsilon, delta)), mapped through the inverse curvature: the answer moves by
Sigma xi, Sigma the posterior covariance. (The anchored kernels ``auto`` runs spend 60 % of the rho budget on their
G~, so their own noise is about 1.3 times s; this figure is for a one-shot release of the WHOLE budget, the
smallest noise any such method can have.) In posterior sds coordinate j is off by about
r_j = s sqrt((Sigma^2)_jj / Sigma_jj), and the noise-aware interval is about sqrt(1 + r_j^2) times as wide.

Two curvature sources:

* public bounds only (``glm_floor`` without ``covariance``): every row's curvature at most K (``curvature_clip``;
  K = L^2 / 4 for a logistic row, exact as a bound). Taking Sigma = I / (N K), the sharpest any data could make
  it, gives r = s / sqrt(N K) for every coordinate: a LOWER bound on the error ("at least about"). For a logistic
  row r = 4 / (mu sqrt(N)): L cancels. Real rows curve less than K (p (1 - p) < 1/4, ||(1, x)|| < L, correlated
  covariates), so the true floor is often several times higher;
* public data (``stan_dp.advise``): Sigma from the public data's own Laplace approximation (the inverse Hessian of
  its log posterior at its mode), a figure of the right size when the public data resemble the private ones.

The max error over d coordinates is the median, over the public noise distribution, of max_j |(Sigma xi)_j| /
sd_j (a fixed-seed Monte Carlo over xi: public randomness, no row).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ...privacy import gaussian_mu
from ...phases.public_scale import public_curvature_bound

__all__ = ["GLMFloor", "glm_floor", "one_shot_noise_sd"]

#: Monte Carlo draws of the public noise for the median max error
DRAWS = 4000


def one_shot_noise_sd(grad_clip: float, epsilon: float, delta: float) -> float:
    """s = 2 L / mu(epsilon, delta): the noise sd per coordinate of one clipped gradient sum released with the
    whole budget (replace-one sensitivity 2 L)."""
    return 2.0 * float(grad_clip) / float(gaussian_mu(epsilon, delta))


@dataclasses.dataclass(frozen=True)
class GLMFloor:
    """The price in advance: the typical largest error in posterior sds over the coefficients, the width of a
    noise-aware interval relative to a non-private fit, whether it is a lower bound, and its basis in words."""

    per_coordinate: tuple[float, ...]
    max_error: float
    width_ratio: float
    noise_sd: float
    lower_bound: bool
    basis: str

    def sentence(self) -> str:
        """The price in one sentence (for ``auto``'s reason and ``advise``). A lower bound from the public bounds
        alone says so first, and leaves out an interval ratio too close to 1 to say anything."""
        if not self.lower_bound:
            return (f"at these bounds and this budget no private method can be expected within about "
                    f"{self.max_error:.2g} reference sds (the largest error over the coefficients); expect "
                    f"intervals about {self.width_ratio:.3g} times wider than a non-private fit ({self.basis})")
        width = (f"; intervals at least about {self.width_ratio:.3g} times wider than a non-private fit"
                 if self.width_ratio >= WIDTH_WORTH_SAYING else "")
        return (f"from the bounds alone, at this budget no private method can be expected within "
                f"{self.max_error:.2g} reference sds (the largest error over the coefficients), at least{width} "
                f"({self.basis})")


#: a lower bound on the interval width ratio below this says nothing a user can act on, so the price leaves it out
WIDTH_WORTH_SAYING = 1.5


def glm_floor(n_rows: int, coefficients: int, grad_clip: float, *, epsilon: float, delta: float,
              curvature_clip: float | None = None, covariance: np.ndarray | None = None) -> GLMFloor:
    """The price in advance (module docstring) from public inputs: N, the number of coefficients d, L, the budget,
    and either the per-row curvature bound K (default L^2 / 4, the logistic bound; a lower bound on the error) or
    the posterior ``covariance`` (d x d) of PUBLIC data."""
    s = one_shot_noise_sd(grad_clip, epsilon, delta)
    if covariance is None:
        k = float(curvature_clip) if curvature_clip is not None else public_curvature_bound(grad_clip)
        d = max(int(coefficients), 1)
        sigma = np.eye(d) / (int(n_rows) * k)
        basis = (f"one release of the clipped gradient sum with the whole budget, noise sd {s:.3g}, through the "
                 f"per-row curvature bound K = {k:.3g}{' = L^2 / 4' if curvature_clip is None else ''}; real rows "
                 "curve less, so runs often land far beyond it: `stan-dp advise` on public data shaped like yours "
                 "gives a realistic figure")
    else:
        sigma = np.atleast_2d(np.asarray(covariance, dtype=float))
        basis = (f"one release of the clipped gradient sum with the whole budget, noise sd {s:.3g}, through the "
                 "public data's posterior covariance")
    sd = np.sqrt(np.diag(sigma))
    r = s * np.sqrt(np.diag(sigma @ sigma)) / sd
    xi = np.random.default_rng(0).standard_normal((DRAWS, sigma.shape[0])) * s
    top = float(np.median(np.max(np.abs(xi @ sigma) / sd, axis=1)))
    return GLMFloor(per_coordinate=tuple(float(v) for v in r), max_error=top,
                    width_ratio=math.sqrt(1.0 + float(np.max(r)) ** 2), noise_sd=s,
                    lower_bound=covariance is None, basis=basis)
