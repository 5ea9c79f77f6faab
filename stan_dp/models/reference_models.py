"""Vectorised NumPy reference models implementing the ``RowLikelihood`` interface.

They let the private samplers be tested quickly and without a compiler. Every method
is a closed form evaluated for all requested rows at once: there is no Python loop over rows.

Models (all on the unconstrained scale R^dim, like Stan):

* :class:`GaussianMeanModel` -- x_i ~ N(theta, obs_cov), theta ~ N(prior_mean, prior_cov); conjugate, with
  the analytic posterior. ``simulate`` follows the 10-d Gaussian experiment of the DP-HMC paper section 4.
* :class:`BananaModel` -- the DP-HMC paper's banana model; the posterior is a banana distribution with a closed-form
  mean and covariance.
* :class:`LogisticRegressionModel` -- Bernoulli-logit regression with an intercept and Gaussian priors (the
  same program as ``stan_models/logistic.stan``).
* :class:`TruncatedGaussianMixtureModel` -- the DP-Fast MH paper section 6.1 / appendix E.1 two-component mixture with
  temperature and truncation, and its public per-row bound ``row_bound()`` for DP-Fast MH.

Conventions shared by all models:

* ``rows`` is ``None`` (all rows, in order) or a 1-d integer index array (repeats allowed);
* ``row_log_lik`` returns shape (n,); ``row_log_lik_grad`` returns ((n,), (n, dim));
* ``log_prior`` is the data-free log density of the unconstrained vector, Jacobian included;
* normalising constants are included, so sum_i l_i + log p0 is the exact log joint density.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy.special import expit

from ..likelihood import GLMSpec, LinearSpec, PriorProgram, RegressionTerms

__all__ = [
    "GaussianMeanModel",
    "BananaModel",
    "LogisticRegressionModel",
    "TruncatedGaussianMixtureModel",
    "LinearRegressionModel",
    "PoissonRegressionModel",
]

_LOG_2PI = math.log(2.0 * math.pi)


# ----------------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------------
class _RowModel:
    """Shared argument checking for the reference models."""

    n_rows: int
    dim: int

    def _theta(self, theta) -> np.ndarray:
        t = np.asarray(theta, dtype=float)
        if t.shape != (self.dim,):
            raise ValueError(f"theta must have shape ({self.dim},), got {t.shape}")
        return t

    def _rows(self, rows) -> np.ndarray | slice:
        if rows is None:
            return slice(None)
        idx = np.asarray(rows)
        if idx.ndim != 1:
            raise ValueError(f"rows must be a 1-d integer index array or None, got shape {idx.shape}")
        if idx.size == 0:
            return idx.astype(np.intp)
        if not np.issubdtype(idx.dtype, np.integer):
            raise ValueError(f"rows must hold integers, got dtype {idx.dtype}")
        if idx.min() < 0 or idx.max() >= self.n_rows:
            raise ValueError(f"row index out of range [0, {self.n_rows})")
        return idx.astype(np.intp, copy=False)


def _spd(matrix, dim: int, name: str) -> np.ndarray:
    """A (dim, dim) symmetric positive-definite matrix from a scalar, a diagonal vector or a matrix."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim == 0:
        m = float(m) * np.eye(dim)
    elif m.ndim == 1:
        if m.shape != (dim,):
            raise ValueError(f"{name} as a vector must have shape ({dim},), got {m.shape}")
        m = np.diag(m)
    if m.shape != (dim, dim):
        raise ValueError(f"{name} must have shape ({dim}, {dim}), got {m.shape}")
    if not np.allclose(m, m.T, rtol=1e-10, atol=1e-12 * np.abs(m).max()):
        raise ValueError(f"{name} must be symmetric")
    m = 0.5 * (m + m.T)
    try:
        np.linalg.cholesky(m)
    except np.linalg.LinAlgError as exc:
        raise ValueError(f"{name} must be positive definite") from exc
    return m


def _precision_and_logdet(cov: np.ndarray) -> tuple[np.ndarray, float]:
    chol = np.linalg.cholesky(cov)
    inv_chol = np.linalg.solve(chol, np.eye(cov.shape[0]))
    precision = inv_chol.T @ inv_chol
    precision = 0.5 * (precision + precision.T)
    logdet = 2.0 * float(np.sum(np.log(np.diag(chol))))
    return precision, logdet


# ----------------------------------------------------------------------------------------------------------
# Gaussian mean with known covariance (the DP-HMC paper, "Gaussian Model")
# ----------------------------------------------------------------------------------------------------------
class GaussianMeanModel(_RowModel):
    """Rows x_i ~ N_d(theta, obs_cov) with known ``obs_cov``; prior theta ~ N_d(prior_mean, prior_cov).

    l_i(theta) = log N(x_i | theta, obs_cov) (constant included). The posterior is Gaussian with
    precision prior_cov^-1 + N obs_cov^-1 (``posterior_cov``) and mean
    posterior_cov (prior_cov^-1 prior_mean + obs_cov^-1 sum_i x_i) (``posterior_mean``).

    ``obs_cov`` and ``prior_cov`` may be given as a full matrix, a diagonal vector or a scalar times I.
    Released parameter: ``theta`` with shape (d,). The unconstrained space is the parameter space itself.
    """

    def __init__(self, x, *, obs_cov, prior_mean, prior_cov):
        x = np.asarray(x, dtype=float)
        if x.ndim != 2:
            raise ValueError(f"x must have shape (N, d), got {x.shape}")
        self.x = x
        self.n_rows, self.dim = x.shape
        d = self.dim
        self.obs_cov = _spd(obs_cov, d, "obs_cov")
        self.prior_mean = np.broadcast_to(np.asarray(prior_mean, dtype=float), (d,)).copy()
        self.prior_cov = _spd(prior_cov, d, "prior_cov")
        self._obs_prec, self._obs_logdet = _precision_and_logdet(self.obs_cov)
        self._prior_prec, self._prior_logdet = _precision_and_logdet(self.prior_cov)
        self._obs_const = -0.5 * (d * _LOG_2PI + self._obs_logdet)
        self._prior_const = -0.5 * (d * _LOG_2PI + self._prior_logdet)

    # -- prior ---------------------------------------------------------------------------------------
    def log_prior(self, theta) -> float:
        diff = self._theta(theta) - self.prior_mean
        return float(self._prior_const - 0.5 * diff @ self._prior_prec @ diff)

    def log_prior_grad(self, theta) -> tuple[float, np.ndarray]:
        diff = self._theta(theta) - self.prior_mean
        pd = self._prior_prec @ diff
        return float(self._prior_const - 0.5 * diff @ pd), -pd

    # -- rows ----------------------------------------------------------------------------------------
    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        diff = self.x[self._rows(rows)] - self._theta(theta)
        quad = np.einsum("ij,ij->i", diff @ self._obs_prec, diff)
        return self._obs_const - 0.5 * quad

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        diff = self.x[self._rows(rows)] - self._theta(theta)
        pdiff = diff @ self._obs_prec  # row i: obs_prec (x_i - theta), the gradient of l_i
        quad = np.einsum("ij,ij->i", pdiff, diff)
        return self._obs_const - 0.5 * quad, pdiff

    # -- release -------------------------------------------------------------------------------------
    def constrain(self, theta) -> dict[str, np.ndarray]:
        return {"theta": self._theta(theta).copy()}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"theta": (self.dim,)}

    # -- analytic posterior --------------------------------------------------------------------------
    def posterior_cov(self) -> np.ndarray:
        """Covariance of the conjugate Gaussian posterior."""
        prec = self._prior_prec + self.n_rows * self._obs_prec
        cov = np.linalg.inv(prec)
        return 0.5 * (cov + cov.T)

    def posterior_mean(self) -> np.ndarray:
        """Mean of the conjugate Gaussian posterior."""
        rhs = self._prior_prec @ self.prior_mean + self._obs_prec @ self.x.sum(axis=0)
        return self.posterior_cov() @ rhs

    # -- data as in the DP-HMC paper -------------------------------------------------------------------------
    @classmethod
    def simulate(
        cls,
        n: int = 100_000,
        dim: int = 10,
        *,
        seed,
        true_theta: Sequence[float] | None = None,
        prior_mean: float | Sequence[float] = 0.0,
        prior_sd: float = 100.0,
        gamma_shape: float = 0.5,
        gamma_scale: float = 1.0,
    ) -> "GaussianMeanModel":
        """Data as in the DP-HMC paper's Gaussian experiment.

        Prior theta ~ N(mu0, sigma0^2 I) with mu0 = 0, sigma0 = 100 (the paper's values; sigma0 is a standard
        deviation). The known covariance follows the paper (after Hoffman et al.): eigenvalues drawn from a
        gamma distribution with shape 0.5 and scale 1, eigenvectors from orthonormalising (QR) the columns of
        a matrix with entries uniform on [0, 1]. The paper does not state the true theta; the default is
        (0, 3, 0, ..., 0), the value in the authors' public experiment code. The paper used d = 10 and
        n = 100,000. The true parameter is kept as ``model.true_theta``.
        """
        if n < 1 or dim < 1:
            raise ValueError("n and dim must be positive")
        rng = np.random.default_rng(seed)
        eigvals = rng.gamma(gamma_shape, gamma_scale, size=dim)
        q, _ = np.linalg.qr(rng.uniform(0.0, 1.0, size=(dim, dim)))
        obs_cov = (q * eigvals) @ q.T
        obs_cov = 0.5 * (obs_cov + obs_cov.T)
        if true_theta is None:
            true_theta = np.zeros(dim)
            if dim >= 2:
                true_theta[1] = 3.0
        true_theta = np.broadcast_to(np.asarray(true_theta, dtype=float), (dim,)).copy()
        noise = rng.standard_normal((n, dim)) * np.sqrt(eigvals)
        x = true_theta + noise @ q.T
        model = cls(x, obs_cov=obs_cov, prior_mean=prior_mean, prior_cov=prior_sd**2 * np.eye(dim))
        model.true_theta = true_theta
        return model


# ----------------------------------------------------------------------------------------------------------
# Banana (the DP-HMC paper, "Banana Model")
# ----------------------------------------------------------------------------------------------------------
class BananaModel(_RowModel):
    """The DP-HMC paper's banana model: theta ~ Ban(0, sigma0^2 I, a), x_i1 ~ N(theta_1, sigma1^2),
    x_i2 ~ N(theta_2 + a theta_1^2, sigma2^2).

    Ban(mu, Sigma, a) is the law of g(y) = (y_1, y_2 - a y_1^2) for y ~ N(mu, Sigma). g has unit Jacobian,
    so with y = (theta_1, theta_2 + a theta_1^2) the model is conjugate in y and the posterior is
    Ban(mu, Sigma, a) with (paper, tau_j = 1 / sigma_j^2)

        mu_j = n tau_j xbar_j / (n tau_j + tau_0),   Sigma = diag(1 / (n tau_j + tau_0)).

    The paper measures error against the mean of 1000 i.i.d. posterior draws; the posterior mean itself is
    exact here: E[theta_1] = mu_1, E[theta_2] = mu_2 - a (mu_1^2 + Sigma_11) (``posterior_mean``), and so
    is the covariance (``posterior_cov``). ``sample_posterior`` gives the paper's i.i.d. draws.

    Rows are x with shape (N, 2). Released parameter: ``theta`` with shape (2,) (unconstrained = R^2).
    """

    def __init__(self, x, *, a: float = 20.0, prior_sd: float = 1000.0, sigma1_sq: float = 2000.0,
                 sigma2_sq: float = 2500.0):
        x = np.asarray(x, dtype=float)
        if x.ndim != 2 or x.shape[1] != 2:
            raise ValueError(f"x must have shape (N, 2), got {x.shape}")
        for name, value in (("prior_sd", prior_sd), ("sigma1_sq", sigma1_sq), ("sigma2_sq", sigma2_sq)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        self.x = x
        self.n_rows, self.dim = x.shape[0], 2
        self.a = float(a)
        self.prior_sd = float(prior_sd)
        self.sigma1_sq = float(sigma1_sq)
        self.sigma2_sq = float(sigma2_sq)
        self._prior_var = self.prior_sd**2
        self._prior_const = -(_LOG_2PI + math.log(self._prior_var))
        self._row_const = -0.5 * (2 * _LOG_2PI + math.log(self.sigma1_sq) + math.log(self.sigma2_sq))

    def log_prior(self, theta) -> float:
        t = self._theta(theta)
        y2 = t[1] + self.a * t[0] ** 2
        return float(self._prior_const - 0.5 * (t[0] ** 2 + y2**2) / self._prior_var)

    def log_prior_grad(self, theta) -> tuple[float, np.ndarray]:
        t = self._theta(theta)
        y2 = t[1] + self.a * t[0] ** 2
        value = self._prior_const - 0.5 * (t[0] ** 2 + y2**2) / self._prior_var
        grad = np.array([-(t[0] + y2 * 2.0 * self.a * t[0]), -y2]) / self._prior_var
        return float(value), grad

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        t = self._theta(theta)
        x = self.x[self._rows(rows)]
        r1 = x[:, 0] - t[0]
        r2 = x[:, 1] - (t[1] + self.a * t[0] ** 2)
        return self._row_const - 0.5 * (r1**2 / self.sigma1_sq + r2**2 / self.sigma2_sq)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        t = self._theta(theta)
        x = self.x[self._rows(rows)]
        r1 = x[:, 0] - t[0]
        r2 = x[:, 1] - (t[1] + self.a * t[0] ** 2)
        values = self._row_const - 0.5 * (r1**2 / self.sigma1_sq + r2**2 / self.sigma2_sq)
        grads = np.empty((x.shape[0], 2))
        s2 = r2 / self.sigma2_sq
        grads[:, 0] = r1 / self.sigma1_sq + s2 * (2.0 * self.a * t[0])
        grads[:, 1] = s2
        return values, grads

    def constrain(self, theta) -> dict[str, np.ndarray]:
        return {"theta": self._theta(theta).copy()}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"theta": (2,)}

    # -- closed-form posterior -----------------------------------------------------------------------
    def posterior_params(self) -> tuple[np.ndarray, np.ndarray]:
        """(mu, diag(Sigma)) of the posterior Ban(mu, Sigma, a), as in the DP-HMC paper."""
        n = self.n_rows
        tau0 = 1.0 / self._prior_var
        tau = np.array([1.0 / self.sigma1_sq, 1.0 / self.sigma2_sq])
        xbar = self.x.mean(axis=0)
        mu = n * tau * xbar / (n * tau + tau0)
        var = 1.0 / (n * tau + tau0)
        return mu, var

    def posterior_mean(self) -> np.ndarray:
        """Exact posterior mean: (mu_1, mu_2 - a (mu_1^2 + Sigma_11))."""
        mu, var = self.posterior_params()
        return np.array([mu[0], mu[1] - self.a * (mu[0] ** 2 + var[0])])

    def posterior_cov(self) -> np.ndarray:
        """Exact posterior covariance of theta = (y_1, y_2 - a y_1^2) with y ~ N(mu, diag(var))."""
        mu, var = self.posterior_params()
        a = self.a
        cov12 = -2.0 * a * mu[0] * var[0]  # -a Cov(y1, y1^2)
        var2 = var[1] + a**2 * (2.0 * var[0] ** 2 + 4.0 * mu[0] ** 2 * var[0])  # + a^2 Var(y1^2)
        return np.array([[var[0], cov12], [cov12, var2]])

    def sample_posterior(self, size: int, rng: np.random.Generator) -> np.ndarray:
        """``size`` i.i.d. posterior draws (the paper's reference sample), shape (size, 2)."""
        mu, var = self.posterior_params()
        y = mu + rng.standard_normal((size, 2)) * np.sqrt(var)
        return np.column_stack([y[:, 0], y[:, 1] - self.a * y[:, 0] ** 2])

    @classmethod
    def simulate(
        cls,
        n: int = 100_000,
        *,
        seed,
        theta: Sequence[float] = (0.0, 3.0),
        a: float = 20.0,
        prior_sd: float = 1000.0,
        sigma1_sq: float = 2000.0,
        sigma2_sq: float = 2500.0,
    ) -> "BananaModel":
        """Data as in the DP-HMC paper: x_1 ~ N(theta_1, sigma1^2), x_2 ~ N(theta_2 + a theta_1^2, sigma2^2).

        Defaults are the values in the paper's text: sigma0 = 1000, sigma1^2 = 2000, sigma2^2 = 2500, a = 20,
        n = 100,000, true theta = (0, 3). (The authors' public code uses other variances; the text is taken
        as authoritative.) With smaller n, scaling sigma1^2 and sigma2^2 by n / 100,000 keeps the same
        posterior shape. The true parameter is kept as ``model.true_theta``.
        """
        if n < 1:
            raise ValueError("n must be positive")
        rng = np.random.default_rng(seed)
        t = np.asarray(theta, dtype=float)
        if t.shape != (2,):
            raise ValueError("theta must have two entries")
        x1 = t[0] + math.sqrt(sigma1_sq) * rng.standard_normal(n)
        x2 = t[1] + a * t[0] ** 2 + math.sqrt(sigma2_sq) * rng.standard_normal(n)
        model = cls(np.column_stack([x1, x2]), a=a, prior_sd=prior_sd, sigma1_sq=sigma1_sq,
                    sigma2_sq=sigma2_sq)
        model.true_theta = t.copy()
        return model


# ----------------------------------------------------------------------------------------------------------
# Logistic regression
# ----------------------------------------------------------------------------------------------------------
class _IsotropicGaussianPrior(_RowModel):
    """Every unconstrained coordinate ~ N(0, prior_sd^2) independently (the regression models' coefficients).
    Subclasses set ``prior_sd`` and ``dim``."""

    def log_prior(self, theta) -> float:
        return self.log_prior_grad(theta)[0]

    def log_prior_grad(self, theta) -> tuple[float, np.ndarray]:
        t = self._theta(theta)
        const = -0.5 * self.dim * (_LOG_2PI + 2.0 * math.log(self.prior_sd))
        return float(const - 0.5 * (t @ t) / self.prior_sd**2), -t / self.prior_sd**2


class _GLMRows:
    """What dp-glm reads of a logistic or Poisson reference model: its public structure (no declared bounds: give
    them as options), its rows, and the model as a Stan program (the same priors and unconstrained order)."""

    family = "logistic"
    _program = ""

    @property
    def glm_spec(self) -> GLMSpec:
        k = self.n_features
        intercept = ("alpha",) if getattr(self, "intercept", True) else ()
        return GLMSpec(family=self.family, n_covariates=k,
                       column_names=tuple(f"x[{j + 1}]" for j in range(k)) + ("y",), outcome_name="y",
                       terms=RegressionTerms(intercept=intercept, slopes=(("beta", True),)))

    def glm_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The private rows (x, y), read by the dp-glm mechanism only."""
        return self.X, self.y

    @property
    def prior_program(self) -> PriorProgram:
        """This model as a Stan program with its public data and no rows (its model block is then the prior)."""
        if not getattr(self, "intercept", True):
            raise ValueError("the reference model without an intercept has no Stan program")
        data = {"N": 0, "K": self.n_features, "x": np.zeros((0, self.n_features)), "y": [],
                "prior_sd": self.prior_sd}
        return PriorProgram(text=self._program, data=data, name=f"reference_{self.family}_regression")


def _glm_program(likelihood: str) -> str:
    return f"""data {{
  int<lower=0> N;
  int<lower=0> K;
  matrix[N, K] x;
  array[N] int<lower=0> y;
  real<lower=0> prior_sd;
}}
parameters {{
  real alpha;
  vector[K] beta;
}}
model {{
  alpha ~ normal(0, prior_sd);
  beta ~ normal(0, prior_sd);
  y ~ {likelihood}(alpha + x * beta);
}}
"""


class LogisticRegressionModel(_GLMRows, _IsotropicGaussianPrior):
    """Bernoulli-logit regression: P(y_i = 1) = logistic(alpha + x_i . beta), y_i in {0, 1}.

    The intercept ``alpha`` is a separate parameter (``intercept=True``, default), not a column of X, to
    match ``stan_models/logistic.stan``; the unconstrained vector is (alpha, beta_1, ..., beta_K), so
    ``dim = K + 1``. With ``intercept=False`` it is beta alone and X should carry any constant column.
    Priors: alpha, beta_k ~ N(0, prior_sd^2) independently.

    Released parameters: ``alpha`` (shape ()) and ``beta`` (shape (K,)), or ``beta`` alone.
    """

    family = "logistic"
    _program = _glm_program("bernoulli_logit")

    def __init__(self, X, y, *, prior_sd: float = 2.5, intercept: bool = True):
        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"X must have shape (N, K), got {X.shape}")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if not np.all((y == 0) | (y == 1)):
            raise ValueError("y must hold only 0 and 1")
        if not prior_sd > 0:
            raise ValueError(f"prior_sd must be positive, got {prior_sd}")
        self.X = X
        self.y = y.astype(float)
        self.intercept = bool(intercept)
        self.prior_sd = float(prior_sd)
        self.n_rows = X.shape[0]
        self.n_features = X.shape[1]
        self.dim = self.n_features + int(self.intercept)
        # design with the intercept column, used for linear predictors and gradients
        self._design = np.column_stack([np.ones(self.n_rows), X]) if self.intercept else X

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        idx = self._rows(rows)
        eta = self._design[idx] @ self._theta(theta)
        # y log s(eta) + (1 - y) log s(-eta) = y eta - log(1 + e^eta), computed stably
        return self.y[idx] * eta - np.logaddexp(0.0, eta)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._rows(rows)
        design = self._design[idx]
        eta = design @ self._theta(theta)
        y = self.y[idx]
        values = y * eta - np.logaddexp(0.0, eta)
        grads = (y - expit(eta))[:, None] * design
        return values, grads

    def constrain(self, theta) -> dict[str, np.ndarray]:
        t = self._theta(theta)
        if self.intercept:
            return {"alpha": np.array(t[0]), "beta": t[1:].copy()}
        return {"beta": t.copy()}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        if self.intercept:
            return {"alpha": (), "beta": (self.n_features,)}
        return {"beta": (self.n_features,)}

    @classmethod
    def simulate(cls, n: int = 1000, dim: int = 3, *, seed, prior_sd: float = 2.5,
                 intercept: bool = True) -> "LogisticRegressionModel":
        """``n`` rows with ``dim`` standard-normal covariates (the number of columns of X, i.e. K; the model
        dimension is ``dim + 1`` with the intercept). True alpha ~ N(0, 0.5^2) and beta_k ~ N(0, 1), kept as
        ``model.true_theta`` in the unconstrained order."""
        if n < 1 or dim < 1:
            raise ValueError("n and dim must be positive")
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, dim))
        beta = rng.normal(0.0, 1.0, size=dim)
        alpha = rng.normal(0.0, 0.5) if intercept else 0.0
        y = (rng.random(n) < expit(alpha + X @ beta)).astype(int)
        model = cls(X, y, prior_sd=prior_sd, intercept=intercept)
        model.true_theta = np.concatenate([[alpha], beta]) if intercept else beta
        return model


# ----------------------------------------------------------------------------------------------------------
# Truncated Gaussian mixture (the DP-Fast MH paper, section 6.1 and appendix E.1)
# ----------------------------------------------------------------------------------------------------------
class TruncatedGaussianMixtureModel(_RowModel):
    """The DP-Fast MH paper's truncated two-component Gaussian mixture at a temperature.

    Data model: x_i ~ 1/2 N(theta_1, sigma_x^2) + 1/2 N(theta_1 + theta_2, sigma_x^2), truncated to
    |x_i| <= ``x_bound`` (3 in the paper). Energy (appendix E.1) U_i = log(2 sqrt(2 pi) sigma_x)
    - log[exp(-(x_i - theta_1)^2 / 2 sigma_x^2) + exp(-(x_i - theta_1 - theta_2)^2 / 2 sigma_x^2)]; the
    paper's "temperature T" (500) divides every energy, so l_i(theta) = -U_i(theta) / T.

    Truncation of the parameter: appendix E's bound c_i needs |theta_j| <= 3 (its constants 9 = 3 * 3 and
    6 = 2 * 3), with a flat prior p(theta) = 1 on that box. Handled as Stan does for
    ``vector<lower=-b, upper=b>[2] theta``: the unconstrained vector u in R^2 maps to
    theta_j = -b + 2 b logistic(u_j) (``constrain``), and ``log_prior`` is the log Jacobian
    sum_j log(2 b logistic(u_j) (1 - logistic(u_j))), i.e. the flat prior on the box pushed to R^2. Every
    u is valid and every theta lies strictly inside the box, so no rejection at the boundary is needed.

    Released parameter: ``theta`` (shape (2,)) on the constrained scale.
    """

    def __init__(self, x, *, sigma_x_sq: float = 2.0, temperature: float = 500.0, theta_bound: float = 3.0,
                 x_bound: float = 3.0):
        x = np.asarray(x, dtype=float)
        if x.ndim == 2 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 1:
            raise ValueError(f"x must have shape (N,), got {x.shape}")
        for name, value in (("sigma_x_sq", sigma_x_sq), ("temperature", temperature),
                            ("theta_bound", theta_bound), ("x_bound", x_bound)):
            if not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        if np.any(np.abs(x) > x_bound):
            raise ValueError(f"the data must be truncated to [-{x_bound}, {x_bound}] (the model's x_bound)")
        self.x = x
        self.n_rows, self.dim = x.shape[0], 2
        self.sigma_x_sq = float(sigma_x_sq)
        self.temperature = float(temperature)
        self.theta_bound = float(theta_bound)
        self.x_bound = float(x_bound)
        self._row_const = -math.log(2.0 * math.sqrt(2.0 * math.pi * self.sigma_x_sq))
        self._log_width = math.log(2.0 * self.theta_bound)

    # -- transform -----------------------------------------------------------------------------------
    def _to_theta(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = expit(u)
        theta = -self.theta_bound + 2.0 * self.theta_bound * s
        jac = 2.0 * self.theta_bound * s * (1.0 - s)  # d theta_j / d u_j
        return theta, jac

    def unconstrain(self, theta) -> np.ndarray:
        """Inverse of ``constrain``: u_j = logit((theta_j + b) / 2b) for theta strictly inside the box."""
        t = np.asarray(theta, dtype=float)
        if t.shape != (2,) or np.any(np.abs(t) >= self.theta_bound):
            raise ValueError(f"theta must have shape (2,) and lie inside (-{self.theta_bound}, {self.theta_bound})")
        p = (t + self.theta_bound) / (2.0 * self.theta_bound)
        return np.log(p) - np.log1p(-p)

    # -- prior (flat on the box, plus the transform's Jacobian) --------------------------------------
    def log_prior(self, theta) -> float:
        u = self._theta(theta)
        # log s + log(1 - s) = -softplus(-u) - softplus(u)
        return float(np.sum(self._log_width - np.logaddexp(0.0, -u) - np.logaddexp(0.0, u)))

    def log_prior_grad(self, theta) -> tuple[float, np.ndarray]:
        u = self._theta(theta)
        value = np.sum(self._log_width - np.logaddexp(0.0, -u) - np.logaddexp(0.0, u))
        return float(value), 1.0 - 2.0 * expit(u)

    # -- rows ----------------------------------------------------------------------------------------
    def _components(self, u: np.ndarray, rows):
        theta, jac = self._to_theta(self._theta(u))
        x = self.x[self._rows(rows)]
        r1 = x - theta[0]
        r2 = x - theta[0] - theta[1]
        e1 = -0.5 * r1**2 / self.sigma_x_sq
        e2 = -0.5 * r2**2 / self.sigma_x_sq
        return jac, r1, r2, e1, e2

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        _, _, _, e1, e2 = self._components(theta, rows)
        return (np.logaddexp(e1, e2) + self._row_const) / self.temperature

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        jac, r1, r2, e1, e2 = self._components(theta, rows)
        values = (np.logaddexp(e1, e2) + self._row_const) / self.temperature
        w2 = expit(e2 - e1)  # responsibility of the second component
        w1 = 1.0 - w2
        d_theta1 = (w1 * r1 + w2 * r2) / self.sigma_x_sq
        d_theta2 = w2 * r2 / self.sigma_x_sq
        grads = np.column_stack([d_theta1 * jac[0], d_theta2 * jac[1]]) / self.temperature
        return values, grads

    # -- release -------------------------------------------------------------------------------------
    def constrain(self, theta) -> dict[str, np.ndarray]:
        return {"theta": self._to_theta(self._theta(theta))[0]}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"theta": (2,)}

    # -- public per-row bound ------------------------------------------------------------------------
    def row_bound(self, space: str = "unconstrained") -> float:
        """Public per-row bound c with |l_i(u) - l_i(u')| <= c ||u - u'||_2 for every row and u, u'.

        Appendix E.1 gives c_i = sqrt(((2|x_i| + 9) / sigma_x^2)^2 + ((|x_i| + 6) / sigma_x^2)^2), a bound on
        ||grad_theta U_i|| for |theta_j| <= 3 (9 = 3 b, 6 = 2 b with b = ``theta_bound``). It is made uniform
        (data-free) by its maximum over the truncated range |x_i| <= ``x_bound``, i.e. at |x_i| = x_bound,
        and divided by the temperature because l_i = -U_i / T:

            c_theta = sqrt(((2 x_bound + 3 b) / sigma_x^2)^2 + ((x_bound + 2 b) / sigma_x^2)^2) / T.

        ``space="constrained"`` returns c_theta, the bound per unit ||theta - theta'|| (the paper's M).
        ``space="unconstrained"`` (default; samplers measure M = ||u - u'|| on the unconstrained scale)
        multiplies by the transform's Lipschitz constant max_u d theta_j / d u_j = b / 2 (at u_j = 0); the
        chain rule and the mean value theorem on the convex R^2 give the bound for all u, u'.
        """
        b, xb, s2 = self.theta_bound, self.x_bound, self.sigma_x_sq
        c_theta = math.sqrt(((2.0 * xb + 3.0 * b) / s2) ** 2 + ((xb + 2.0 * b) / s2) ** 2) / self.temperature
        if space == "constrained":
            return c_theta
        if space == "unconstrained":
            return c_theta * b / 2.0
        raise ValueError(f"space must be 'unconstrained' or 'constrained', got {space!r}")

    @classmethod
    def simulate(
        cls,
        n: int = 50_000,
        *,
        seed,
        theta: Sequence[float] = (0.0, 1.0),
        sigma_x_sq: float = 2.0,
        temperature: float = 500.0,
        theta_bound: float = 3.0,
        x_bound: float = 3.0,
    ) -> "TruncatedGaussianMixtureModel":
        """The DP-Fast MH paper section 6.1: theta = (0, 1), sigma_x^2 = 2, N = 50,000, temperature 500, each x_i drawn
        from the equal-weight mixture and truncated to [-x_bound, x_bound] by rejection (i.e. drawn from the
        mixture conditioned on the range). The true parameter is kept as ``model.true_theta``."""
        if n < 1:
            raise ValueError("n must be positive")
        rng = np.random.default_rng(seed)
        t = np.asarray(theta, dtype=float)
        if t.shape != (2,):
            raise ValueError("theta must have two entries")
        sd = math.sqrt(sigma_x_sq)
        kept: list[np.ndarray] = []
        have = 0
        while have < n:
            m = int(1.2 * (n - have)) + 16
            centre = t[0] + t[1] * (rng.random(m) < 0.5)
            draw = centre + sd * rng.standard_normal(m)
            draw = draw[np.abs(draw) <= x_bound]
            kept.append(draw)
            have += draw.size
        x = np.concatenate(kept)[:n]
        model = cls(x, sigma_x_sq=sigma_x_sq, temperature=temperature, theta_bound=theta_bound,
                    x_bound=x_bound)
        model.true_theta = t.copy()
        return model


# ----------------------------------------------------------------------------------------------------------
# Linear regression with unknown noise scale
# ----------------------------------------------------------------------------------------------------------
#: LinearRegressionModel as a Stan program (the same priors, parameters and unconstrained order)
LINEAR_REGRESSION_PROGRAM = """data {
  int<lower=0> N;
  int<lower=0> K;
  matrix[N, K] x;
  vector[N] y;
  real<lower=0> prior_sd;
  real<lower=0> sigma_prior_sd;
}
parameters {
  real alpha;
  vector[K] beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, prior_sd);
  beta ~ normal(0, prior_sd);
  sigma ~ normal(0, sigma_prior_sd);
  y ~ normal(alpha + x * beta, sigma);
}
"""


class LinearRegressionModel(_RowModel):
    """y_i ~ N(alpha + x_i . beta, sigma^2); unconstrained vector (alpha, beta_1..K, log sigma), dim = K + 2.

    Priors: alpha, beta_k ~ N(0, prior_sd^2); sigma ~ half-normal(0, sigma_prior_sd) (the log density of
    log sigma includes the Jacobian log sigma). Released parameters: ``alpha``, ``beta`` (K,), ``sigma``.
    """

    def __init__(self, X, y, *, prior_sd: float = 10.0, sigma_prior_sd: float = 10.0):
        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"X must have shape (N, K), got {X.shape}")
        y = np.asarray(y, dtype=float)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y must have shape ({X.shape[0]},), got {y.shape}")
        if not (prior_sd > 0 and sigma_prior_sd > 0):
            raise ValueError("prior_sd and sigma_prior_sd must be positive")
        self.X, self.y = X, y
        self.prior_sd, self.sigma_prior_sd = float(prior_sd), float(sigma_prior_sd)
        self.n_rows, self.n_features = X.shape
        self.dim = self.n_features + 2
        self._design = np.column_stack([np.ones(self.n_rows), X])

    def _split(self, theta):
        t = self._theta(theta)
        return t[:-1], t[-1]

    def log_prior_grad(self, theta) -> tuple[float, np.ndarray]:
        coef, log_sigma = self._split(theta)
        s0, ss = self.prior_sd, self.sigma_prior_sd
        with np.errstate(over="ignore"):
            sigma_sq = float(np.exp(np.float64(2.0 * log_sigma)))  # inf far out: log prior -inf
        lp_coef = -0.5 * coef.size * (_LOG_2PI + 2 * math.log(s0)) - 0.5 * float(coef @ coef) / s0**2
        lp_sigma = math.log(2.0) - 0.5 * (_LOG_2PI + 2 * math.log(ss)) - 0.5 * sigma_sq / ss**2 + log_sigma
        grad = np.concatenate([-coef / s0**2, [1.0 - sigma_sq / ss**2]])
        return float(lp_coef + lp_sigma), grad

    def log_prior(self, theta) -> float:
        return self.log_prior_grad(theta)[0]

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._rows(rows)
        coef, log_sigma = self._split(theta)
        design = self._design[idx]
        resid = self.y[idx] - design @ coef
        with np.errstate(over="ignore", invalid="ignore"):  # far tails: -inf log-likelihoods, which reject
            inv_var = np.exp(np.float64(-2.0 * log_sigma))
            values = -0.5 * _LOG_2PI - log_sigma - 0.5 * resid**2 * inv_var
            grads = np.column_stack([(resid * inv_var)[:, None] * design, -1.0 + resid**2 * inv_var])
        return values, grads

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        return self.row_log_lik_grad(theta, rows)[0]

    def constrain(self, theta) -> dict[str, np.ndarray]:
        coef, log_sigma = self._split(theta)
        return {"alpha": np.array(coef[0]), "beta": coef[1:].copy(), "sigma": np.array(np.exp(np.float64(log_sigma)))}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"alpha": (), "beta": (self.n_features,), "sigma": ()}

    @property
    def linear_spec(self) -> LinearSpec:
        """The public linear structure for ``algorithm="dp-ssp"`` (bounds come from its options)."""
        k = self.n_features
        return LinearSpec(n_covariates=k, column_names=tuple(f"x[{j + 1}]" for j in range(k)) + ("y",),
                          outcome_name="y", coefficients=self._coefficients,
                          terms=RegressionTerms(intercept=("alpha",), slopes=(("beta", True),), scale="sigma"))

    @property
    def prior_program(self) -> PriorProgram:
        """This model as a Stan program with its public data and no rows (its model block is then the prior):
        what a release-once method's noise-aware posterior program is built on."""
        data = {"N": 0, "K": self.n_features, "x": np.zeros((0, self.n_features)), "y": np.zeros(0),
                "prior_sd": self.prior_sd, "sigma_prior_sd": self.sigma_prior_sd}
        return PriorProgram(text=LINEAR_REGRESSION_PROGRAM, data=data, name="reference_linear_regression")

    @staticmethod
    def _coefficients(theta) -> tuple[float, np.ndarray, float]:
        t = np.asarray(theta, dtype=float)
        with np.errstate(over="ignore"):
            return float(t[0]), t[1:-1], float(np.exp(t[-1]))

    def linear_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The private rows (x, y), read by the dp-ssp mechanism only."""
        return self.X, self.y

    @classmethod
    def simulate(cls, n: int = 5000, dim: int = 3, *, seed, sigma: float = 1.0, **kwargs) -> "LinearRegressionModel":
        """``n`` rows with ``dim`` standard-normal covariates; alpha ~ N(0, 1), beta_k ~ N(0, 1), noise sd
        ``sigma``. ``model.true_theta`` holds (alpha, beta, log sigma)."""
        if n < 1 or dim < 1:
            raise ValueError("n and dim must be positive")
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((n, dim))
        coef = rng.normal(0.0, 1.0, size=dim + 1)
        y = coef[0] + X @ coef[1:] + sigma * rng.standard_normal(n)
        model = cls(X, y, **kwargs)
        model.true_theta = np.concatenate([coef, [math.log(sigma)]])
        return model


# ----------------------------------------------------------------------------------------------------------
# Poisson regression
# ----------------------------------------------------------------------------------------------------------
class PoissonRegressionModel(_GLMRows, _IsotropicGaussianPrior):
    """y_i ~ Poisson(exp(alpha + x_i . beta)); unconstrained vector (alpha, beta_1..K), dim = K + 1.

    Priors alpha, beta_k ~ N(0, prior_sd^2). Released parameters: ``alpha`` and ``beta`` (K,).
    """

    family = "poisson"
    _program = _glm_program("poisson_log")

    def __init__(self, X, y, *, prior_sd: float = 2.5):
        from scipy.special import gammaln

        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise ValueError(f"X must have shape (N, K), got {X.shape}")
        y = np.asarray(y)
        if y.shape != (X.shape[0],) or np.any(y < 0) or np.any(y != np.round(y)):
            raise ValueError(f"y must hold {X.shape[0]} non-negative integer counts")
        if not prior_sd > 0:
            raise ValueError(f"prior_sd must be positive, got {prior_sd}")
        self.X, self.y = X, y.astype(float)
        self.prior_sd = float(prior_sd)
        self.n_rows, self.n_features = X.shape
        self.dim = self.n_features + 1
        self._design = np.column_stack([np.ones(self.n_rows), X])
        self._log_fact = gammaln(self.y + 1.0)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        idx = self._rows(rows)
        eta = self._design[idx] @ self._theta(theta)
        with np.errstate(over="ignore"):
            return self.y[idx] * eta - np.exp(eta) - self._log_fact[idx]

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        idx = self._rows(rows)
        design = self._design[idx]
        eta = design @ self._theta(theta)
        with np.errstate(over="ignore", invalid="ignore"):
            mean = np.exp(eta)
            values = self.y[idx] * eta - mean - self._log_fact[idx]
            grads = (self.y[idx] - mean)[:, None] * design
        return values, grads

    def constrain(self, theta) -> dict[str, np.ndarray]:
        t = self._theta(theta)
        return {"alpha": np.array(t[0]), "beta": t[1:].copy()}

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"alpha": (), "beta": (self.n_features,)}

    @classmethod
    def simulate(cls, n: int = 5000, dim: int = 2, *, seed, prior_sd: float = 2.5) -> "PoissonRegressionModel":
        """``n`` rows with ``dim`` covariates uniform on [-1, 1]; alpha = 1, beta_k ~ N(0, 0.5^2)."""
        if n < 1 or dim < 1:
            raise ValueError("n and dim must be positive")
        rng = np.random.default_rng(seed)
        X = rng.uniform(-1.0, 1.0, size=(n, dim))
        coef = np.concatenate([[1.0], rng.normal(0.0, 0.5, size=dim)])
        y = rng.poisson(np.exp(coef[0] + X @ coef[1:]))
        model = cls(X, y, prior_sd=prior_sd)
        model.true_theta = coef
        return model
