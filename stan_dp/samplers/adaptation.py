"""Warmup adaptation from released outputs: dual averaging of the step size, Stan's metric windows, pooling.

Everything here is a function of *released* kernel outputs (``StepInfo.accept_stat`` and the draws) and public
settings, so adaptation is post-processing and costs no privacy budget. The run machinery
(``stan_dp.phases.chains``) drives it during warmup; OPS's internal NUTS (``stan_dp.samplers.nuts``) uses the same
dual averaging and variance estimate.

Warmup, following Stan's windowed adaptation:

* step size: dual averaging (Nesterov 2009; Hoffman & Gelman 2014) with Stan's defaults gamma = 0.05,
  t0 = 10, kappa = 0.75, mu = log(10 * eps0), driven by the released acceptance statistic towards
  ``target_accept``. After warmup the step size is fixed at the averaged iterate exp(x_bar).
* ``metric="diag"``: the diagonal inverse metric is the regularised variance of the released unconstrained
  warmup draws, estimated in Stan's expanding windows (init buffer 75, first window 25 doubling, term buffer
  50; 15% / 75% / 10% of warmup when it is shorter than 150; no metric adaptation below 20 warmup
  iterations). A kernel with a ``refine_metric`` method may correct that estimate from the window's lag-1
  autocorrelation (DP-SGLD does: see its docstring). After each metric update the dual averaging restarts at
  the current step size.
* With a unit or fixed metric the dual averaging also restarts at the window ends, except the last one (Stan
  restarts only with metric updates). Private chains start far from the posterior and move slowly; the step
  size that suits the transient is larger than the stationary one, and the averaged step size lags behind.
  Restarts shorten that memory. Measured on penalty MH (100,000-row Gaussian mean model, default inits,
  target 0.3, 4 seeds x 2 chains): mean sampling acceptance 0.14 with these restarts vs 0.10 without after
  500 warmup iterations, 0.29 vs 0.27 after 1000. Skipping the restart at the last window end leaves the
  final step size averaged over the last window plus the term buffer rather than the 50-iteration term buffer
  alone: on a toy random walk a restart there too made the spread of the sampling acceptance over seeds
  about three times larger.
  When warmup ends before the chains reach the posterior, no step size fits both, and the sampling
  acceptance falls below the target: give more warmup (or public inits closer to plausible values).

The metric passed to ``Kernel.step`` is the *inverse* metric in Stan's sense: a vector of per-coordinate
variances. HMC kernels draw momenta with covariance diag(1 / metric) and move positions by
``step_size * metric * p``; random-walk kernels propose ``theta + step_size * sqrt(metric) * z``.
"""
from __future__ import annotations

import math
import threading
from typing import Sequence

import numpy as np

from .base import Kernel

__all__ = ["DualAveraging", "MetricPool", "MetricWindows", "lag1_autocorrelation", "public_metric",
           "regularized_variance", "units_factor", "window_metric"]


class DualAveraging:
    """Dual-averaging step-size adaptation on an acceptance statistic in [0, 1].

    ``update(stat)`` returns the step size for the next iteration; ``final`` is the averaged step size that is
    used after warmup. ``restart(step_size)`` forgets the history and re-centres the shrinkage point at
    log(10 * step_size), as Stan does after every metric update.
    """

    def __init__(
        self,
        target_accept: float,
        step_size: float,
        *,
        gamma: float = 0.05,
        t0: float = 10.0,
        kappa: float = 0.75,
    ):
        if not 0.0 < target_accept < 1.0:
            raise ValueError(f"target_accept must be strictly between 0 and 1, got {target_accept!r}.")
        self.target = float(target_accept)
        self.gamma = float(gamma)
        self.t0 = float(t0)
        self.kappa = float(kappa)
        self.restart(step_size)

    def restart(self, step_size: float) -> None:
        self.mu = math.log(10.0 * step_size)
        self.counter = 0
        self.s_bar = 0.0  # running average of (target - statistic)
        self.x_bar = 0.0  # running weighted average of log step sizes
        self.x = math.log(step_size)

    def update(self, accept_stat: float) -> float:
        stat = float(accept_stat)
        if not math.isfinite(stat):
            stat = 0.0
        stat = min(max(stat, 0.0), 1.0)
        self.counter += 1
        t = self.counter
        weight = 1.0 / (t + self.t0)
        self.s_bar = (1.0 - weight) * self.s_bar + weight * (self.target - stat)
        self.x = self.mu - self.s_bar * math.sqrt(t) / self.gamma
        avg_weight = t ** (-self.kappa)
        self.x_bar = (1.0 - avg_weight) * self.x_bar + avg_weight * self.x
        return math.exp(self.x)

    @property
    def current(self) -> float:
        return math.exp(self.x)

    @property
    def final(self) -> float:
        """The averaged step size exp(x_bar) (the current one before any update)."""
        return math.exp(self.x_bar) if self.counter > 0 else math.exp(self.x)


class MetricWindows:
    """Stan's warmup windows for metric estimation (and step-size restarts).

    ``ends`` are the 0-based warmup iterations after which the metric is updated; a window collects the
    draws from the end of the previous window (or the init buffer) up to and including its end.
    """

    def __init__(self, num_warmup: int, *, init_buffer: int = 75, term_buffer: int = 50, base_window: int = 25):
        self.num_warmup = int(num_warmup)
        self.ends: list[int] = []
        if self.num_warmup < 20:
            self.init_buffer = self.num_warmup
            self.term_buffer = 0
            return
        if init_buffer + base_window + term_buffer > self.num_warmup:
            init_buffer = int(0.15 * self.num_warmup)
            term_buffer = int(0.1 * self.num_warmup)
            base_window = self.num_warmup - init_buffer - term_buffer
        self.init_buffer, self.term_buffer = init_buffer, term_buffer
        last = self.num_warmup - term_buffer - 1
        size = base_window
        end = init_buffer + base_window - 1
        while True:
            self.ends.append(end)
            if end >= last:
                break
            size *= 2
            end += size
            # a window that would leave less than twice its size before the term buffer absorbs the rest
            if end + 2 * size >= self.num_warmup - term_buffer:
                end = last
        self._end_set = set(self.ends)

    @property
    def active(self) -> bool:
        return bool(self.ends)

    def collects(self, iteration: int) -> bool:
        return bool(self.ends) and self.init_buffer <= iteration <= self.ends[-1]

    def is_end(self, iteration: int) -> bool:
        return bool(self.ends) and iteration in self._end_set


def regularized_variance(draws: np.ndarray) -> np.ndarray:
    """Stan's regularised variance estimate of (n, dim) draws: shrunk towards 1e-3 with weight 5 / (n + 5)."""
    draws = np.asarray(draws, dtype=np.float64)
    n = draws.shape[0]
    if n < 2:
        raise ValueError("at least two draws are needed to estimate a variance")
    var = draws.var(axis=0, ddof=1)
    return (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0))


def lag1_autocorrelation(blocks: Sequence[np.ndarray]) -> np.ndarray:
    """Per-coordinate lag-1 autocorrelation of one or more chains' (n, dim) draws: the within-chain lag-1
    autocovariances (about each chain's own mean) summed over chains, over the within-chain variances summed.
    Coordinates that do not move get 1 (no evidence of over-relaxation)."""
    num: float | np.ndarray = 0.0
    den: float | np.ndarray = 0.0
    for block in blocks:
        x = np.asarray(block, dtype=np.float64)
        if x.shape[0] < 3:
            continue
        xc = x - x.mean(axis=0)
        num = num + np.sum(xc[1:] * xc[:-1], axis=0)
        den = den + np.sum(xc * xc, axis=0)
    num, den = np.broadcast_arrays(np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64))
    out = np.ones(num.shape)
    np.divide(num, den, out=out, where=den > 0)
    return out


def window_metric(kernel: Kernel, blocks: Sequence[np.ndarray], previous: np.ndarray,
                  step_size: float) -> np.ndarray:
    """The diagonal metric after a warmup window: the regularised variance of the (pooled) window draws, passed
    through the kernel's ``refine_metric(estimate, lag1, previous, step_size)`` when it has one (a kernel that
    knows how its own discretisation inflates the draws' variance, e.g. DP-SGLD, corrects it there). Only
    released draws and public quantities enter, so this is post-processing."""
    estimate = regularized_variance(np.concatenate(blocks))
    refine = kernel.refine_metric
    if refine is None:
        return estimate
    refined = np.asarray(refine(estimate, lag1_autocorrelation(blocks), np.asarray(previous, dtype=np.float64),
                                float(step_size)), dtype=np.float64)
    if refined.shape != estimate.shape or not np.all(np.isfinite(refined)) or np.any(refined <= 0):
        raise ValueError(f"{type(kernel).__name__}.refine_metric must return {estimate.shape[0]} positive finite "
                         "values.")
    return refined


class MetricPool:
    """Pools the released warmup-window draws of all chains for the diagonal metric estimate.

    At each window end every chain deposits its window's draws and waits for the others; all then use the
    regularised variance of the pooled draws (concatenated in chain order, so seeded runs stay reproducible).
    A handful of draws per chain gives a noisy, often collapsed, per-chain variance; pooling uses chains x as
    many, and the spread between chains that have not met yet widens the metric instead of shrinking it. If the
    run is stopped while a chain waits, the window is abandoned: ``gather_all`` gives None to that chain and to
    every chain that reaches the window afterwards (all chains complete a window, or none does, so that a resumed
    run completes it with the same draws); ``gather`` falls back to the caller's own draws. The draws are released
    outputs, so pooling is post-processing and costs no privacy.
    """

    def __init__(self, chains: int, stop: threading.Event):
        self.chains = int(chains)
        self.stop = stop
        self._cond = threading.Condition()
        self._deposits: dict[int, dict[int, np.ndarray]] = {}
        self._abandoned: set[int] = set()

    def gather_all(self, window: int, chain: int, draws: np.ndarray) -> list[np.ndarray] | None:
        """Every chain's draws of ``window`` in chain order, once all have deposited; None if the run was stopped
        before they all did (while the caller waited, or before it came: the window is abandoned for every chain,
        and the chain loop leaves its end to a resumed run, which deposits the same draws again)."""
        with self._cond:
            if window in self._abandoned:
                return None
            got = self._deposits.setdefault(window, {})
            got[chain] = np.asarray(draws, dtype=np.float64)
            self._cond.notify_all()
            while len(got) < self.chains and not self.stop.is_set():
                self._cond.wait(0.05)
            if len(got) < self.chains:
                self._abandoned.add(window)
                return None
            return [got[c] for c in range(self.chains)]

    def gather(self, window: int, chain: int, draws: np.ndarray) -> list[np.ndarray]:
        """Every chain's draws of ``window`` in chain order, once all have deposited (only the caller's own
        draws if the run was stopped while it waited)."""
        blocks = self.gather_all(window, chain, draws)
        return [np.asarray(draws, dtype=np.float64)] if blocks is None else blocks

    def variance(self, window: int, chain: int, draws: np.ndarray) -> np.ndarray:
        """The pooled regularised variance for ``window`` once every chain has deposited (own draws if stopped)."""
        return regularized_variance(np.concatenate(self.gather(window, chain, draws)))


# ------------------------------------------------------------------------ the public starting metric

def units_factor(rows_per_unit: int | None) -> int:
    """k: the public cap on the rows of one unit, 1 for a row-level run or a unit run without a public cap."""
    if rows_per_unit is None:
        return 1
    k = int(rows_per_unit)
    if k < 1:
        raise ValueError(f"rows_per_unit must be a positive integer (max_rows_per_unit), got {rows_per_unit!r}")
    return k


def public_metric(n_rows: int, dim: int, grad_clip: float, rows_per_unit: int | None = None) -> np.ndarray:
    """k d / (N L^2) per coordinate: the posterior variance scale when the rows' gradients fill the clip bound
    (N rows or units, L their bound, k the public cap on the rows of a unit; k = 1 at row level)."""
    k = units_factor(rows_per_unit)
    return np.full(int(dim), k * max(int(dim), 1) / (int(n_rows) * float(grad_clip) ** 2))
