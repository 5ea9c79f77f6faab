"""The noise-aware posterior of ``algorithm="dp-glm"``, written as Stan: what the released draws come from.

Released (``stan_dp.privacy.glm_statistics``), at a public anchor theta_a in the release's coordinates (covariates
mapped to [-1, 1]): the score g~ = g + e and the curvature H~ = H + E of the rows, e and E normal with public sds.

Model. Around the anchor the log-likelihood of a logistic or Poisson regression is close to quadratic: the score
at theta_a of rows drawn from the model at theta has mean about H (theta - theta_a) and covariance the Fisher
information, which for these canonical links equals the curvature H itself (the same statement that makes the
Laplace approximation work). So, with the curvature H latent,

    g~ | theta, H  ~  N(H (theta - theta_a), H + s_g^2 I)        (the score's law plus the release noise)
    H~ | H         ~  N(H, diag(s_H^2))                         (entrywise, upper triangle)

and H has a flat prior on the positive definite matrices. With no release noise and H known this gives theta the
normal posterior of mean theta_a + H^-1 g and covariance H^-1 (the Laplace approximation at the anchor); with
noise it widens by H^-1 s_g^2 H^-1 and by what the release leaves unknown about H, in every direction that the
noise hides. The program's own prior (its model block with no rows) completes the posterior; theta is the
program's coefficients mapped to the release's coordinates (a public linear map).

The quadratic model is an approximation: it is good near the anchor, and the anchor comes from two noisy Newton
steps (``stan_dp.methods.dp_glm.glm_release``), so it is close to the posterior's centre at the budgets where the draws are
narrow and within its (wide) spread otherwise; the calibration (benchmarks/bench_calibration.py) measures what
this costs in accuracy and coverage.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...privacy.glm_statistics import GLMRelease
from ...stan.posterior_program import PosteriorPieces, pd_matrix_geometry, pd_matrix_text

__all__ = ["GLM_PREFIX", "glm_pieces", "glm_data", "glm_inits"]

GLM_PREFIX = "dpglm_"

_H = pd_matrix_text("dpglm_H", "dpglm_p")

_DATA = """
int<lower=1> dpglm_p;  // coefficients in the release's coordinates
vector[dpglm_p] dpglm_g;  // the released score at the anchor
vector[(dpglm_p * (dpglm_p + 1)) %/% 2] dpglm_Hz;  // the released curvature (upper triangle, row-major)
real<lower=0> dpglm_gsd;  // the score's noise sd
vector<lower=0>[(dpglm_p * (dpglm_p + 1)) %/% 2] dpglm_Hsd;  // each curvature entry's noise sd
vector[dpglm_p] dpglm_anchor;  // the anchor, in the release's coordinates
matrix[dpglm_p, dpglm_p] dpglm_from_user;  // the program's coefficients -> the release's coordinates
""" + _H["data"]

_MODEL = """
{
  vector[dpglm_p] dpglm_d = dpglm_from_user * {coefficients} - dpglm_anchor;
@H@  {
    vector[(dpglm_p * (dpglm_p + 1)) %/% 2] dpglm_h;
    int dpglm_k = 1;
    for (dpglm_i in 1:dpglm_p) {
      for (dpglm_j in dpglm_i:dpglm_p) {
        dpglm_h[dpglm_k] = dpglm_H[dpglm_i, dpglm_j];
        dpglm_k += 1;
      }
    }
    dpglm_Hz ~ normal(dpglm_h, dpglm_Hsd);  // the curvature's release noise
  }
  dpglm_g ~ multi_normal(dpglm_H * dpglm_d, add_diag(dpglm_H, square(dpglm_gsd)));  // score and its noise
}
""".replace("@H@", "".join(f"  {line}\n" for line in _H["build"].splitlines()))


def glm_pieces(coefficients: str, title: str) -> PosteriorPieces:
    """The Stan text dp-glm adds to the program; ``coefficients``: a Stan vector expression of the program's
    coefficients in release order (the intercept first when there is one)."""
    return PosteriorPieces(prefix=GLM_PREFIX, title=title, data=_DATA, parameters=_H["parameters"],
                           model=_MODEL.replace("{coefficients}", coefficients))


def glm_data(release: GLMRelease, from_user: np.ndarray) -> dict[str, Any]:
    """The data dp-glm adds (all public: the release, its noise sds, the anchor, the coordinate map and the latent
    curvature's offsets and scales from the release)."""
    d = release.point.size
    sds = np.zeros((d, d))
    sds[np.triu_indices(d)] = release.curvature_sds
    sds = sds + np.triu(sds, 1).T
    return {"dpglm_p": int(d), "dpglm_g": release.score.tolist(), "dpglm_Hz": release.curvature.tolist(),
            "dpglm_gsd": float(release.score_sd), "dpglm_Hsd": np.asarray(release.curvature_sds).tolist(),
            "dpglm_anchor": release.point.tolist(), "dpglm_from_user": np.asarray(from_user, dtype=float).tolist(),
            **pd_matrix_geometry("dpglm_H", release.curvature_matrix(), sds)}


def glm_inits(data: dict[str, Any], jitter: np.random.Generator | None = None) -> dict[str, Any]:
    """Inits of the latent curvature at its offsets, moved by a tenth of its scale with public randomness."""
    out = {}
    for name in ("dpglm_H_ld", "dpglm_H_od"):
        centre = np.asarray(data[f"{name}0"], dtype=float)
        scale = np.asarray(data[f"{name}sd"], dtype=float)
        if jitter is not None:
            centre = centre + 0.1 * scale * jitter.standard_normal(centre.shape)
        out[name] = centre.tolist()
    return out
