"""A non-private reference posterior for the NumPy reference models (``stan_dp.models.reference_models``).

NOT PRIVATE: it reads every row. It exists so that benchmarks and ``stan_dp.advise`` can judge private fits of
NumPy models without a Stan compiler. Models with a closed-form posterior (``posterior_mean`` /
``posterior_cov`` and, for the banana, ``sample_posterior``) use it; the others run full-data HMC in
coordinates whitened by the Laplace approximation (the mode by L-BFGS, the Hessian by finite differences of
the exact gradient), started at the mode, with a jittered step length and trajectory. For the near-Gaussian
regression posteriors this targets, that sampler mixes in a few steps.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

__all__ = ["laplace", "reference_draws"]


def _log_post_grad(model, theta: np.ndarray) -> tuple[float, np.ndarray]:
    ll, grads = model.row_log_lik_grad(theta)
    lp, lp_grad = model.log_prior_grad(theta)
    return float(np.sum(ll) + lp), grads.sum(axis=0) + lp_grad


def laplace(model, start: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(mode, covariance) of the Laplace approximation of the full-data posterior (NOT private)."""
    x0 = np.zeros(model.dim) if start is None else np.asarray(start, dtype=float)

    def fun(t):
        v, g = _log_post_grad(model, t)
        if not np.isfinite(v):
            return 1e300, np.zeros_like(t)
        return -v, -g

    res = minimize(fun, x0, jac=True, method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-8})
    mode = res.x
    h = 1e-5 * np.maximum(1.0, np.abs(mode))
    hess = np.empty((model.dim, model.dim))
    for j in range(model.dim):
        e = np.zeros(model.dim)
        e[j] = h[j]
        hess[:, j] = (_log_post_grad(model, mode + e)[1] - _log_post_grad(model, mode - e)[1]) / (2 * h[j])
    prec = -0.5 * (hess + hess.T)
    cov = np.linalg.inv(prec)
    return mode, 0.5 * (cov + cov.T)


def reference_draws(model, *, chains: int = 4, draws: int = 1000, seed: int = 0) -> np.ndarray:
    """Reference draws (chains, draws, dim) on the unconstrained scale (NOT private)."""
    rng = np.random.default_rng(seed)
    if hasattr(model, "sample_posterior"):
        return model.sample_posterior(chains * draws, rng).reshape(chains, draws, model.dim)
    if type(model).__name__ == "GaussianMeanModel":
        flat = rng.multivariate_normal(model.posterior_mean(), model.posterior_cov(), size=chains * draws)
        return flat.reshape(chains, draws, model.dim)
    mode, cov = laplace(model)
    chol = np.linalg.cholesky(cov)
    out = np.empty((chains, draws, model.dim))
    for c in range(chains):
        z = rng.standard_normal(model.dim) * 0.5
        theta = mode + chol @ z
        value, grad = _log_post_grad(model, theta)
        warm = draws // 2
        for i in range(warm + draws):
            eps = 0.5 * rng.uniform(0.5, 1.0)
            steps = int(rng.integers(3, 8))
            p0 = rng.standard_normal(model.dim)
            p, q, g = p0.copy(), z.copy(), chol.T @ grad
            p = p + 0.5 * eps * g
            v_new = value
            for j in range(steps):
                q = q + eps * p
                v_new, grad_new = _log_post_grad(model, mode + chol @ q)
                g = chol.T @ grad_new
                p = p + (eps if j < steps - 1 else 0.5 * eps) * g
            log_alpha = v_new - value - 0.5 * p @ p + 0.5 * p0 @ p0
            if np.isfinite(log_alpha) and np.log(rng.uniform()) < log_alpha:
                z, value, grad = q, v_new, grad_new
            if i >= warm:
                out[c, i - warm] = mode + chol @ z
    return out
