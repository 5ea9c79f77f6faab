"""The prior of ``algorithm="dp-ssp"`` on the latent design moments S_xx (docs/algorithms/dp-ssp.md).

Model (public, stated in the attrs): the covariate rows are normal, x_i ~ N(mu, Sigma) independently, mu with a
flat prior and Sigma ~ inverse Wishart(nu, Psi). Write S_xx = [[N, s^T], [s, B]] (s = sum_i x_i, B = sum_i x_i
x_i^T, all in the centred coordinates of the release) and W = B - s s^T / N, the scatter of the rows about their
mean. Given Sigma, W ~ Wishart(N - 1, Sigma), independently of the mean (flat, so s carries no prior
information). Sigma integrated out analytically leaves the matrix-variate beta-prime density

    p(W) = Gamma_K((n + nu) / 2) / (Gamma_K(n / 2) Gamma_K(nu / 2)) |Psi|^(nu / 2) |W|^((n - K - 1) / 2)
           |Psi + W|^(-(n + nu) / 2),                                                              n = N - 1,

and, since the map (s, B) -> (s, W) is a shift of B for each s (Jacobian 1), this is also the density of the
latent entries of S_xx. Psi is chosen so that the mode of Sigma, Psi / (nu + K + 1), is the public design
assumption D of the price in advance (each covariate's sd a quarter of its bounds' half width, uncorrelated);
nu = K + 3 keeps it weak (a prior sd of Sigma of about 70 % of D for one covariate). Everything here is a
function of N, the bounds and these constants: a prior, read from public inputs only.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.special import multigammaln

__all__ = ["DesignPrior", "design_prior_from_bounds"]


@dataclasses.dataclass(frozen=True)
class DesignPrior:
    """log p(S_xx) of the normal-rows design model with Sigma ~ inverse Wishart(nu, psi) integrated out.

    n_rows: N; psi: the K x K scale matrix (positive definite); nu: degrees of freedom (> K - 1)."""

    n_rows: int
    psi: np.ndarray
    nu: float
    _const: float = dataclasses.field(init=False, repr=False, default=0.0)

    def __post_init__(self) -> None:
        psi = np.atleast_2d(np.asarray(self.psi, dtype=float))
        k = psi.shape[0]
        if psi.shape != (k, k) or not np.allclose(psi, psi.T) or float(np.min(np.linalg.eigvalsh(psi))) <= 0:
            raise ValueError(f"psi must be a symmetric positive definite K x K matrix, got {psi.tolist()}")
        if not self.nu > k - 1:
            raise ValueError(f"nu must exceed K - 1 = {k - 1} (an inverse Wishart needs it), got {self.nu}")
        if int(self.n_rows) - 1 < k:
            raise ValueError(f"the design prior needs N - 1 >= K rows, got N = {self.n_rows} with K = {k}")
        object.__setattr__(self, "psi", psi)
        n, nu = float(self.n_rows - 1), float(self.nu)
        const = (multigammaln((n + nu) / 2.0, k) - multigammaln(n / 2.0, k) - multigammaln(nu / 2.0, k)
                 + (nu / 2.0) * float(np.linalg.slogdet(psi)[1]))
        object.__setattr__(self, "_const", const)

    @property
    def n_covariates(self) -> int:
        return int(self.psi.shape[0])

    def log_density_scatter(self, scatter: np.ndarray) -> float:
        """log p(W) for a K x K scatter matrix W (normalised over the positive definite matrices); -inf when W is
        not positive definite."""
        w = np.atleast_2d(np.asarray(scatter, dtype=float))
        k = self.n_covariates
        sign_w, logdet_w = np.linalg.slogdet(w)
        if not (sign_w > 0 and math.isfinite(logdet_w)):
            return -math.inf
        try:
            np.linalg.cholesky(w)
        except np.linalg.LinAlgError:
            return -math.inf
        logdet_sum = float(np.linalg.slogdet(self.psi + w)[1])
        n, nu = float(self.n_rows - 1), float(self.nu)
        return float(self._const + 0.5 * (n - k - 1.0) * logdet_w - 0.5 * (n + nu) * logdet_sum)

    def __call__(self, sxx: np.ndarray) -> float:
        """log p of the latent design moments: S_xx the (K + 1) x (K + 1) moments of (1, x) (S_xx[0, 0] = N), up
        to the flat factor of the sums; -inf when S_xx is not positive definite."""
        sxx = np.asarray(sxx, dtype=float)
        s = sxx[0, 1:]
        return self.log_density_scatter(sxx[1:, 1:] - np.outer(s, s) / float(self.n_rows))


def design_prior_from_bounds(n_rows: int, half_width_x: np.ndarray, bound_sds: float,
                             nu: float | None = None) -> DesignPrior:
    """The default design prior from public inputs: Sigma's mode at D = diag((half width / bound_sds)^2) (the
    price's design assumption), nu = K + 3 unless given."""
    half = np.asarray(half_width_x, dtype=float).ravel()
    k = half.size
    nu_ = float(k + 3) if nu is None else float(nu)
    d = np.diag((half / float(bound_sds)) ** 2)
    return DesignPrior(n_rows=int(n_rows), psi=(nu_ + k + 1.0) * d, nu=nu_)
