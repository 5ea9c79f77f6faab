"""DP-GD: noisy clipped-gradient ascent on the log posterior, shared by the DP-GD warm start and the anchor.

Each step is one Gaussian mechanism on the clipped per-row gradient sum (``stan_dp.privacy.mechanisms``); the
caller declares and accounts the steps. The returned point is post-processing of the mechanism outputs.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..likelihood import RowLikelihood
from ..privacy import mechanisms

__all__ = ["noisy_gradient_ascent"]


def noisy_gradient_ascent(likelihood: RowLikelihood, rng: np.random.Generator, theta0: np.ndarray, *, clip: float,
                          sampling_rate: float, tau: float, steps: int, learning_rate: float,
                          momentum: float = 0.0, on_step: Callable[[int], Any] | None = None,
                          failure: str = "the noisy gradient ascent left the finite numbers; use a smaller step "
                                         "or a larger clip bound",
                          clip_tracker: mechanisms.QuantileClip | None = None) -> np.ndarray:
    """DP-GD: ``steps`` noisy clipped-gradient ascent steps on the log posterior, the average of the second half.

    Each step is one Gaussian mechanism (Poisson-subsampled with rate q < 1, full batch with q = 1) on
    S = sum_{i in B} clip_L(g_i(theta_t)), noise sd 2 tau L: with v the update,
    v = momentum v + lr (grad log p0 + (S + noise) / q), theta += v (heavy-ball momentum; 0: plain ascent). The
    result is post-processing of the mechanism outputs (releasable); nothing else is kept.

    ``clip_tracker`` (full batch only): an adaptive bound (``mechanisms.QuantileClip``). Step t then clips at
    its current bound L_t (noise sd 2 tau L_t: the noise multiplier, hence the accounting, does not change with
    L_t) and releases one noisy count of the rows with ||g_i(theta_t)|| <= L_t, which sets L_{t+1}; the caller
    accounts those counts too. ``clip`` is then unused (the tracker starts from it).

    ``failure``: the ``FloatingPointError``'s message when a step leaves the finite numbers (which phase, and the
    public option that fixes it).
    """
    if clip_tracker is not None and sampling_rate < 1.0:
        raise ValueError("an adaptive clip bound is released on full batches only (sampling_rate = 1)")
    n, d = int(likelihood.n_rows), int(likelihood.dim)
    theta = np.array(theta0, dtype=float)
    velocity = np.zeros(d)
    total, kept = np.zeros(d), 0
    for t in range(int(steps)):
        # a full batch is all rows (None: no index array of N entries)
        rows = None if sampling_rate >= 1.0 else mechanisms.poisson_minibatch(rng, n, sampling_rate)
        count = n if rows is None else rows.size
        _, prior_grad = likelihood.log_prior_grad(theta)
        bound = float(clip_tracker.bound) if clip_tracker is not None else clip
        grads = np.zeros((0, d))  # per-row gradients, read only by the adaptive clip's count
        if clip_tracker is None:
            s = mechanisms.rows_clipped_gradient_sum(likelihood, theta, rows, bound)
        elif count:  # the adaptive clip's count reads the per-row gradients too
            _, grads = likelihood.row_log_lik_grad(theta, rows)
            grads = np.asarray(grads, dtype=float).reshape(count, d)
            s = mechanisms.clipped_gradient_sum(grads, bound)
        else:
            s = np.zeros(d)
        noisy = s + mechanisms.gaussian_noise(rng, mechanisms.gradient_noise_sd(tau, bound), size=d)
        if clip_tracker is not None:  # the count at L_t (a mechanism), then L_{t+1} (post-processing)
            clip_tracker.release(rng, grads)
        velocity = momentum * velocity + learning_rate * mechanisms.minibatch_gradient(noisy, prior_grad,
                                                                                      sampling_rate)
        theta = theta + velocity
        if not np.all(np.isfinite(theta)):
            raise FloatingPointError(failure)
        if t >= int(steps) // 2:
            total += theta
            kept += 1
        if on_step is not None:
            on_step(1)
    return total / kept
