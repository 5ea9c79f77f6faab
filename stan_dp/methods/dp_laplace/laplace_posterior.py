"""The noise-aware Laplace-type posterior of ``algorithm="dp-laplace"``, built from released statistics only.

Everything here is post-processing: its inputs are the mechanism outputs of ``stan_dp.methods.dp_laplace.laplace`` (the anchor
theta_hat, the noisy clipped gradient sum G~ and the noisy curvature F~), public noise scales, and the data-free
prior (its gradient and a finite-difference Hessian at theta_hat). No row is read.

The quadratic surrogate of the log posterior at theta_hat is
    log p(theta | x) ~ const + (G + g0) . (theta - theta_hat) - 1/2 (theta - theta_hat)^T P (theta - theta_hat),
with G the clipped gradient sum, g0 the prior gradient and P = F + H0 (F the curvature of the likelihood, here the
empirical Fisher of the clipped per-row gradients, H0 minus the prior Hessian). Its Gaussian is N(m, P^-1) with
m = theta_hat + P^-1 (G + g0).

Noise-aware draws: the released G~ and F~ are G and F plus Gaussian noise of public distribution. For each draw s
the noise is redrawn around the released values (F_s = F~ + E_s, G_s = G~ + xi_s, E_s and xi_s from the same
public distributions; by symmetry of the noise, the spread of the redraws around the released value is the spread
of the released value around the unknown one), and theta_s ~ N(m_s, P_s^-1) with P_s and m_s built from
(G_s, F_s). The draws' spread then includes the privacy noise of both releases. Public randomness only.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...privacy import mechanisms

__all__ = ["floor_eigenvalues", "floored_directions", "prior_gradient_hessian", "laplace_mean", "laplace_draws",
           "BATCH"]

#: draws built per vectorised batch (memory: BATCH x dim x dim floats)
BATCH = 512


def floor_eigenvalues(matrices: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Eigen-decomposition of symmetric ``matrices`` (..., d, d) with eigenvalues raised to at least ``floor``:
    (eigenvalues (..., d), eigenvectors (..., d, d)). A projection onto {M : M >= floor I}, post-processing."""
    m = np.asarray(matrices, dtype=float)
    w, v = np.linalg.eigh(0.5 * (m + np.swapaxes(m, -1, -2)))
    return np.maximum(w, float(floor)), v


def floored_directions(curvature: np.ndarray, floor: float) -> int:
    """How many eigenvalues of the released curvature (a (d, d) matrix, or its diagonal (d,)) lie below ``floor``:
    the directions in which the floor replaces the released curvature. A function of the release and the public
    floor only (post-processing)."""
    c = np.asarray(curvature, dtype=float)
    values = np.linalg.eigvalsh(0.5 * (c + c.T)) if c.ndim == 2 else c
    return int(np.sum(values < float(floor)))


def _compose(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """V diag(w) V^T for stacked (w, v)."""
    return np.einsum("...ij,...j,...kj->...ik", v, w, v)


def prior_gradient_hessian(log_prior_grad: Callable[[np.ndarray], Any], theta: np.ndarray,
                           rel_step: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """(gradient of log p0 at ``theta``, H0 = minus its Hessian by central differences of the gradient,
    symmetrised). Data-free: the prior is a public input."""
    theta = np.asarray(theta, dtype=float)
    d = theta.size
    _, g0 = log_prior_grad(theta)
    g0 = np.asarray(g0, dtype=float).reshape(d)
    jac = np.empty((d, d))
    for j in range(d):
        h = rel_step * max(1.0, abs(float(theta[j])))
        up, down = theta.copy(), theta.copy()
        up[j] += h
        down[j] -= h
        jac[:, j] = (np.asarray(log_prior_grad(up)[1], dtype=float).reshape(d)
                     - np.asarray(log_prior_grad(down)[1], dtype=float).reshape(d)) / (2.0 * h)
    if not (np.all(np.isfinite(g0)) and np.all(np.isfinite(jac))):
        raise FloatingPointError("the prior's gradient or Hessian is not finite at the anchor; dp-laplace needs a "
                                 "prior that is differentiable there")
    return g0, -0.5 * (jac + jac.T)


def _precisions(curvature: np.ndarray, prior_hessian: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """Floored eigen-decompositions of P = floor(F) + H0 for stacked F (..., d, d), floored again so that a
    prior with negative curvature cannot make P singular."""
    w, v = floor_eigenvalues(curvature, floor)
    return floor_eigenvalues(_compose(w, v) + prior_hessian, floor)


def _as_matrix(curvature: np.ndarray, dim: int) -> np.ndarray:
    """A released diagonal curvature (..., d) as matrices (..., d, d); full matrices unchanged."""
    c = np.asarray(curvature, dtype=float)
    if c.shape[-2:] == (dim, dim):
        return c
    return c[..., :, None] * np.eye(dim)


def laplace_mean(*, theta_hat: np.ndarray, gradient: np.ndarray, curvature: np.ndarray, prior_grad: np.ndarray,
                 prior_hessian: np.ndarray, floor: float) -> np.ndarray:
    """m = theta_hat + P^-1 (G~ + g0) at the released values (a noisy Newton step), P as in the draws."""
    theta_hat = np.asarray(theta_hat, dtype=float)
    w, v = _precisions(_as_matrix(curvature, theta_hat.size), prior_hessian, floor)
    base = np.asarray(gradient, dtype=float) + np.asarray(prior_grad, dtype=float)
    return theta_hat + v @ ((v.T @ base) / w)


def laplace_draws(*, theta_hat: np.ndarray, gradient: np.ndarray, curvature: np.ndarray, prior_grad: np.ndarray,
                  prior_hessian: np.ndarray, gradient_noise_sd: float, curvature_noise_sd: float, floor: float,
                  n_draws: int, rng: np.random.Generator, noise_aware: bool) -> np.ndarray:
    """``n_draws`` draws (n_draws, d) of the Laplace-type posterior (module doc). ``curvature`` is the released
    F~ as a (d, d) matrix or its diagonal (d,); the noise redrawn for it matches (a symmetric matrix, or a
    vector, sd ``curvature_noise_sd`` per free entry). ``noise_aware=False``: plain N(m, P^-1) at the released
    values."""
    theta_hat = np.asarray(theta_hat, dtype=float)
    d = theta_hat.size
    full = np.asarray(curvature).ndim == 2
    base = np.asarray(gradient, dtype=float) + np.asarray(prior_grad, dtype=float)
    out = np.empty((int(n_draws), d))
    if not noise_aware:
        w, v = _precisions(_as_matrix(curvature, d), prior_hessian, floor)
        mean = theta_hat + v @ ((v.T @ base) / w)
        z = rng.standard_normal((int(n_draws), d))
        return mean + ((z @ v) / np.sqrt(w)) @ v.T  # P^-1/2 z: continuous in P (no eigenvector sign in it)
    for start in range(0, int(n_draws), BATCH):
        b = min(BATCH, int(n_draws) - start)
        if full:
            noise = mechanisms.symmetric_gaussian_noise(rng, curvature_noise_sd, d, size=b)
        else:
            noise = mechanisms.gaussian_noise(rng, curvature_noise_sd, size=(b, d))
        w, v = _precisions(_as_matrix(np.asarray(curvature, dtype=float) + noise, d), prior_hessian, floor)
        rhs = base + mechanisms.gaussian_noise(rng, gradient_noise_sd, size=(b, d))
        coef = np.einsum("bji,bj->bi", v, rhs) / w  # V^T rhs / w
        # V^T z / sqrt(w) with z ~ N(0, I): the symmetric square root P^-1/2 z, so that a draw depends continuously
        # on the released values (an eigenvector's arbitrary sign would flip its component of z / sqrt(w))
        z = np.einsum("bji,bj->bi", v, rng.standard_normal((b, d))) / np.sqrt(w)
        out[start:start + b] = theta_hat + np.einsum("bij,bj->bi", v, coef + z)
    return out
