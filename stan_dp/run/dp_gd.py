"""DP-GD: noisy clipped-gradient ascent on the log posterior, shared by the DP-GD warm start and the anchor.

Each step is one Gaussian mechanism on the clipped per-row gradient sum (``stan_dp.privacy.mechanisms``); the
caller declares and accounts the steps. The returned point is post-processing of the mechanism outputs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..privacy import mechanisms

__all__ = ["noisy_gradient_ascent"]


def noisy_gradient_ascent(likelihood: Any, rng: np.random.Generator, theta0: np.ndarray, *, clip: float,
                          sampling_rate: float, tau: float, steps: int, learning_rate: float,
                          momentum: float = 0.0, on_step: Callable[[int], Any] | None = None,
                          what: str = "noisy gradient ascent",
                          remedy: str = "use a smaller step or a larger clip bound") -> np.ndarray:
    """DP-GD: ``steps`` noisy clipped-gradient ascent steps on the log posterior, the average of the second half.

    Each step is one Gaussian mechanism (Poisson-subsampled with rate q < 1, full batch with q = 1) on
    S = sum_{i in B} clip_L(g_i(theta_t)), noise sd 2 tau L: with v the update,
    v = momentum v + lr (grad log p0 + (S + noise) / q), theta += v (heavy-ball momentum; 0: plain ascent). The
    result is post-processing of the mechanism outputs (releasable); nothing else is kept.
    """
    n, d = int(likelihood.n_rows), int(likelihood.dim)
    theta = np.array(theta0, dtype=float)
    velocity = np.zeros(d)
    total, kept = np.zeros(d), 0
    for t in range(int(steps)):
        rows = np.arange(n) if sampling_rate >= 1.0 else mechanisms.poisson_minibatch(rng, n, sampling_rate)
        _, prior_grad = likelihood.log_prior_grad(theta)
        if rows.size:
            _, grads = likelihood.row_log_lik_grad(theta, rows)
            s = mechanisms.clipped_gradient_sum(np.asarray(grads, dtype=float).reshape(rows.size, d), clip)
        else:
            s = np.zeros(d)
        noisy = s + mechanisms.gaussian_noise(rng, mechanisms.gradient_noise_sd(tau, clip), size=d)
        velocity = momentum * velocity + learning_rate * mechanisms.minibatch_gradient(noisy, prior_grad,
                                                                                      sampling_rate)
        theta = theta + velocity
        if not np.all(np.isfinite(theta)):
            raise FloatingPointError(f"the {what} left the finite numbers; {remedy}")
        if t >= int(steps) // 2:
            total += theta
            kept += 1
        if on_step is not None:
            on_step(1)
    return total / kept
