"""Run machinery shared by every private sampler: chains, seeds, inits, warmup adaptation, progress, Ctrl-C.

``run_chains`` drives any ``stan_dp.samplers.base.Kernel``. It knows nothing about the algorithm and never
touches the data: the likelihood is consulted for its dimension only. Everything it adapts during warmup is a
function of *released* kernel outputs (``StepInfo.accept_stat`` and the draws), so adaptation is
post-processing and costs no privacy budget (DESIGN.md section 5). Warmup iterations themselves run the
kernel's mechanisms and are counted by the accountant like any other iteration.

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

Chains run in a thread pool (the Stan engine releases the GIL inside native calls), each with its own
``numpy.random.Generator`` (``stan_dp.privacy.noise_source``): ChaCha20 keyed from the OS cryptographic source
for unseeded runs, PCG64 spawned from one ``SeedSequence`` for seeded ones. Seeded runs are reproducible
regardless of thread scheduling, because no generator is shared between chains.
"""
from __future__ import annotations

import math
import sys
import threading
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .privacy.noise_source import chain_generators
from .samplers.base import ChainState, Kernel, StepInfo

__all__ = [
    "ChainResult",
    "DualAveraging",
    "MetricPool",
    "MetricWindows",
    "RunInterruptedWarning",
    "RunResult",
    "initial_points",
    "lag1_autocorrelation",
    "regularized_variance",
    "run_chains",
]

#: Stan's uniform initialisation radius on the unconstrained scale
INIT_RADIUS = 2.0
METRICS = ("unit", "diag")
#: names of the per-iteration statistics that the run machinery itself records
CORE_STATS = ("accepted", "acceptance_rate", "step_size")


class RunInterruptedWarning(UserWarning):
    """The run stopped early (Ctrl-C or a stop event); the result holds the iterations that completed."""


# ----------------------------------------------------------------------------------------------- adaptation
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
    num = 0.0
    den = 0.0
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


def _window_metric(kernel: Kernel, blocks: Sequence[np.ndarray], previous: np.ndarray,
                   step_size: float) -> np.ndarray:
    """The diagonal metric after a warmup window: the regularised variance of the (pooled) window draws, passed
    through the kernel's ``refine_metric(estimate, lag1, previous, step_size)`` when it has one (a kernel that
    knows how its own discretisation inflates the draws' variance, e.g. DP-SGLD, corrects it there). Only
    released draws and public quantities enter, so this is post-processing."""
    estimate = regularized_variance(np.concatenate(blocks))
    refine = getattr(kernel, "refine_metric", None)
    if refine is None:
        return estimate
    refined = np.asarray(refine(estimate, lag1_autocorrelation(blocks), np.asarray(previous, dtype=np.float64),
                                float(step_size)), dtype=np.float64)
    if refined.shape != estimate.shape or not np.all(np.isfinite(refined)) or np.any(refined <= 0):
        raise ValueError(f"{type(kernel).__name__}.refine_metric must return {estimate.shape[0]} positive finite "
                         "values.")
    return refined


# ------------------------------------------------------------------------------------------------ inits
def initial_points(
    inits: Any, chains: int, dim: int, rngs: Sequence[np.random.Generator]
) -> tuple[np.ndarray, str]:
    """Data-free initial points (chains, dim) on the unconstrained scale and a description of their origin.

    ``inits`` may be
    * None: uniform(-2, 2) per coordinate, drawn from each chain's generator (Stan's default);
    * a non-negative number r: uniform(-r, r) (0 starts every chain at the origin), as in CmdStanPy;
    * an array of shape (dim,) used by every chain, or (chains, dim) with one row per chain
      (a list of ``chains`` arrays of length dim also works).
    Initial values are public inputs: they must not be computed from the private rows.
    """
    if inits is None or (np.isscalar(inits) and not isinstance(inits, (str, bytes))):
        radius = INIT_RADIUS if inits is None else inits
        if isinstance(radius, (bool, np.bool_)) or not isinstance(radius, (int, float, np.integer, np.floating)):
            raise TypeError(f"inits must be None, a radius, or an array of unconstrained values; got {inits!r}.")
        radius = float(radius)
        if not math.isfinite(radius) or radius < 0:
            raise ValueError(f"An init radius must be finite and non-negative, got {inits!r}.")
        points = np.array([rng.uniform(-radius, radius, size=dim) for rng in rngs]) if radius > 0 else np.zeros(
            (chains, dim)
        )
        return points.reshape(chains, dim), f"uniform(-{radius:g}, {radius:g}) on the unconstrained scale"
    if isinstance(inits, dict):
        raise TypeError(
            "inits must be unconstrained values as an array of shape (dim,) or (chains, dim); a dict of "
            "constrained parameter values is taken by DPStanModel.sample (Stan programs), which unconstrains it "
            "with the data-free instance; for other likelihoods unconstrain the values first."
        )
    try:
        arr = np.asarray(inits, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"inits must be an array of shape ({dim},) or ({chains}, {dim}) of unconstrained values: {exc}"
        ) from exc
    if arr.shape == (dim,):
        arr = np.tile(arr, (chains, 1))
    elif arr.shape != (chains, dim):
        raise ValueError(
            f"inits has shape {arr.shape}; expected ({dim},) for one point used by all chains or "
            f"({chains}, {dim}) for one point per chain (unconstrained dimension {dim}, {chains} chains)."
        )
    if not np.all(np.isfinite(arr)):
        bad = sorted({int(i) for i in np.argwhere(~np.isfinite(arr))[:, 0]})
        raise ValueError(f"inits must be finite; chain(s) {[b + 1 for b in bad]} have non-finite values.")
    return arr.copy(), "user-given"


# -------------------------------------------------------------------------------------------------- results
@dataclass
class ChainResult:
    """What one chain produced. Every field is releasable (a function of released kernel outputs)."""

    #: sampling draws on the unconstrained scale, (completed sampling iterations, dim)
    draws: np.ndarray
    #: per-iteration statistics of the sampling iterations, each of shape (completed sampling iterations,)
    stats: dict[str, np.ndarray]
    #: warmup draws (completed warmup iterations, dim) when ``save_warmup``, else None
    warmup_draws: np.ndarray | None
    #: per-iteration statistics of the warmup iterations (always kept; small)
    warmup_stats: dict[str, np.ndarray]
    #: warmup and sampling iterations actually run by this chain
    n_warmup: int
    n_sampling: int
    #: step size used after warmup (the adapted one)
    step_size: float
    #: inverse metric used after warmup, (dim,)
    metric: np.ndarray
    #: data-free initial point
    init: np.ndarray

    @property
    def iterations(self) -> int:
        """Iterations actually run by this chain (warmup + sampling)."""
        return self.n_warmup + self.n_sampling


@dataclass
class RunResult:
    """Result of ``run_chains``: per-chain draws and statistics plus what is needed for accounting."""

    chains: list[ChainResult]
    dim: int
    iter_warmup: int
    iter_sampling: int
    save_warmup: bool
    interrupted: bool
    seeded: bool
    metric_kind: str
    target_accept: float
    initial_step_size: float
    adapt_engaged: bool
    init_description: str
    stat_names: list[str] = field(default_factory=list)

    @property
    def n_chains(self) -> int:
        return len(self.chains)

    @property
    def completed_iterations(self) -> int:
        """Iterations actually run, summed over chains (what the privacy accountant must count)."""
        return int(sum(c.iterations for c in self.chains))

    @property
    def planned_iterations(self) -> int:
        return self.n_chains * (self.iter_warmup + self.iter_sampling)

    @property
    def iterations_per_chain(self) -> np.ndarray:
        return np.array([c.iterations for c in self.chains], dtype=np.int64)

    @property
    def step_sizes(self) -> np.ndarray:
        return np.array([c.step_size for c in self.chains])

    @property
    def metrics(self) -> np.ndarray:
        return np.stack([c.metric for c in self.chains])

    def n_draws(self, warmup: bool = False) -> int:
        """Iterations per chain in the rectangular arrays: the fewest any chain completed (normally all)."""
        return min((c.n_warmup if warmup else c.n_sampling) for c in self.chains)

    def draws_array(self, warmup: bool = False) -> np.ndarray:
        """Unconstrained draws (chains, draws, dim), trimmed to the draws every chain completed."""
        n = self.n_draws(warmup)
        if warmup:
            if not self.save_warmup:
                raise ValueError("warmup draws were not kept (run with save_warmup=True)")
            return np.stack([c.warmup_draws[:n] for c in self.chains])  # type: ignore[index]
        return np.stack([c.draws[:n] for c in self.chains])

    def stats_arrays(self, warmup: bool = False) -> dict[str, np.ndarray]:
        """Per-iteration statistics (chains, draws), aligned with ``draws_array(warmup)``."""
        n = self.n_draws(warmup)
        out: dict[str, np.ndarray] = {}
        for name in self.stat_names:
            out[name] = np.stack([(c.warmup_stats if warmup else c.stats)[name][:n] for c in self.chains])
        return out


class MetricPool:
    """Pools the released warmup-window draws of all chains for the diagonal metric estimate.

    At each window end every chain deposits its window's draws and waits for the others; all then use the
    regularised variance of the pooled draws (concatenated in chain order, so seeded runs stay reproducible).
    A handful of draws per chain gives a noisy, often collapsed, per-chain variance; pooling uses chains x as
    many, and the spread between chains that have not met yet widens the metric instead of shrinking it. If the
    run is stopped while a chain waits, that chain falls back to its own draws. The draws are released outputs,
    so pooling is post-processing and costs no privacy.
    """

    def __init__(self, chains: int, stop: threading.Event):
        self.chains = int(chains)
        self.stop = stop
        self._cond = threading.Condition()
        self._deposits: dict[int, dict[int, np.ndarray]] = {}

    def gather(self, window: int, chain: int, draws: np.ndarray) -> list[np.ndarray]:
        """Every chain's draws of ``window`` in chain order, once all have deposited (only the caller's own
        draws if the run was stopped while it waited)."""
        with self._cond:
            got = self._deposits.setdefault(window, {})
            got[chain] = np.asarray(draws, dtype=np.float64)
            self._cond.notify_all()
            while len(got) < self.chains and not self.stop.is_set():
                self._cond.wait(0.05)
            if len(got) < self.chains:
                return [got[chain]]
            return [got[c] for c in range(self.chains)]

    def variance(self, window: int, chain: int, draws: np.ndarray) -> np.ndarray:
        """The pooled regularised variance for ``window`` once every chain has deposited (own draws if stopped)."""
        return regularized_variance(np.concatenate(self.gather(window, chain, draws)))


# ------------------------------------------------------------------------------------------------ one chain
class _StatRecorder:
    """Per-iteration statistics of one chain phase, kept as Python lists until the end."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, info: StepInfo, step_size: float) -> None:
        row: dict[str, Any] = {"accepted": bool(info.accepted), "acceptance_rate": float(info.accept_stat),
                               "step_size": float(step_size)}
        for key, value in info.extra.items():
            if key in ("accepted", "acceptance_rate"):
                raise ValueError(f"StepInfo.extra must not redefine the core statistic {key!r}.")
            row[key] = value  # a kernel may report the step size it really used (e.g. jittered)
        self.rows.append(row)

    def names(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            for key in row:
                seen.setdefault(key, None)
        return list(seen)

    def arrays(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        out = {}
        for name in names:
            values = [row.get(name) for row in self.rows]
            if any(v is None for v in values):
                out[name] = np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)
            else:
                arr = np.asarray(values)
                if arr.dtype == object:
                    raise TypeError(f"statistic {name!r} must be a number or a bool in every iteration")
                out[name] = arr if arr.size else np.zeros(0)
        return out


@dataclass
class _ChainConfig:
    iter_warmup: int
    iter_sampling: int
    step_size: float
    target_accept: float
    metric_kind: str
    metric0: np.ndarray
    adapt: bool
    save_warmup: bool
    adapt_step_size: bool = True
    pool: "MetricPool | None" = None


def _run_one_chain(
    kernel: Kernel,
    rng: np.random.Generator,
    theta0: np.ndarray,
    cfg: _ChainConfig,
    progress: list[int],
    index: int,
    stop: threading.Event,
) -> tuple[ChainResult, _StatRecorder, _StatRecorder]:
    dim = theta0.shape[0]
    state: ChainState = kernel.init_state(theta0.copy())
    metric = cfg.metric0.copy()
    step_size = float(cfg.step_size)
    adapting = cfg.adapt and cfg.iter_warmup > 0
    dual = DualAveraging(cfg.target_accept, step_size) if adapting and cfg.adapt_step_size else None
    windows = MetricWindows(cfg.iter_warmup)
    estimate_metric = cfg.metric_kind == "diag"
    window_draws: list[np.ndarray] = []

    draws = np.empty((cfg.iter_sampling, dim))
    warmup_draws = np.empty((cfg.iter_warmup, dim)) if cfg.save_warmup else None
    warm_stats, samp_stats = _StatRecorder(), _StatRecorder()
    n_warm = n_samp = 0
    total = cfg.iter_warmup + cfg.iter_sampling
    for it in range(total):
        if stop.is_set():
            break
        warmup = it < cfg.iter_warmup
        state, info = kernel.step(rng, state, step_size, metric)
        theta = np.asarray(state.theta, dtype=np.float64)
        if warmup:
            warm_stats.add(info, step_size)
            if warmup_draws is not None:
                warmup_draws[n_warm] = theta
            n_warm += 1
            if dual is not None:
                step_size = dual.update(info.accept_stat)
            if adapting and windows.collects(it):
                if estimate_metric:
                    window_draws.append(theta.copy())
                if windows.is_end(it):
                    if estimate_metric:
                        own = np.array(window_draws)
                        blocks = cfg.pool.gather(it, index, own) if cfg.pool is not None else [own]
                        metric = _window_metric(kernel, blocks, metric, step_size)
                        window_draws.clear()
                    if dual is not None and (estimate_metric or it != windows.ends[-1]):
                        dual.restart(dual.final)
                        step_size = dual.current
            if dual is not None and it == cfg.iter_warmup - 1:
                step_size = dual.final
        else:
            samp_stats.add(info, step_size)
            draws[n_samp] = theta
            n_samp += 1
        progress[index] += 1
    if dual is not None and n_warm < cfg.iter_warmup:
        step_size = dual.final  # interrupted during warmup: report the best current estimate
    result = ChainResult(
        draws=draws[:n_samp].copy(),
        stats={},
        warmup_draws=None if warmup_draws is None else warmup_draws[:n_warm].copy(),
        warmup_stats={},
        n_warmup=n_warm,
        n_sampling=n_samp,
        step_size=float(step_size),
        metric=np.asarray(metric, dtype=np.float64).copy(),
        init=theta0.copy(),
    )
    return result, warm_stats, samp_stats


# --------------------------------------------------------------------------------------------------- driver
def _seed_sequence(seed: Any) -> tuple[np.random.SeedSequence, bool]:
    if seed is None:
        return np.random.SeedSequence(), False
    if isinstance(seed, np.random.SeedSequence):
        return seed, True
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be a non-negative int, a numpy SeedSequence or None; got {seed!r}.")
    if seed < 0:
        raise ValueError(f"seed must be non-negative, got {seed}.")
    return np.random.SeedSequence(int(seed)), True


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")
    return int(value)


def run_chains(
    likelihood: Any,
    kernel: Kernel,
    *,
    chains: int = 4,
    iter_warmup: int = 1000,
    iter_sampling: int = 1000,
    seed: int | np.random.SeedSequence | None = None,
    inits: Any = None,
    step_size: float = 1.0,
    target_accept: float = 0.8,
    metric: str | np.ndarray = "unit",
    adapt_engaged: bool = True,
    show_progress: bool = True,
    save_warmup: bool = False,
    stop_event: threading.Event | None = None,
    progress_desc: str | None = None,
    initial_metric: np.ndarray | None = None,
    adapt_step_size: bool = True,
    pool_metric: bool = True,
) -> RunResult:
    """Run ``chains`` chains of ``kernel`` in parallel threads and collect the released outputs.

    likelihood: only its ``dim`` is used (run machinery never evaluates it).
    seed: int, ``numpy.random.SeedSequence`` or None (OS entropy). Chain c uses the c-th child of the sequence.
    inits: see ``initial_points``.
    step_size: initial step size (kept fixed when there is no warmup or ``adapt_engaged`` is False).
    target_accept: target of the dual averaging on ``StepInfo.accept_stat``.
    metric: "unit", "diag" (estimated from released warmup draws) or a fixed positive inverse-metric vector.
    stop_event: a ``threading.Event``; setting it stops every chain after its current iteration (this is also
        what Ctrl-C does). The result then holds the iterations that completed and ``interrupted`` is True.
    initial_metric: with ``metric="diag"``, the (public) inverse metric used until the first window ends
        (default: ones).
    adapt_step_size: False keeps the step size fixed during warmup while the metric is still adapted (kernels
        without an accept test, e.g. the SG-MCMC kernels).
    pool_metric: with ``metric="diag"`` and several chains, estimate the metric from the warmup-window draws of
        all chains together (``MetricPool``); False estimates it per chain, as Stan does.

    Per-iteration statistics: ``accepted`` and ``acceptance_rate`` (= ``StepInfo.accept_stat``), ``step_size``
    (the one passed to the kernel; a kernel that jitters it may report the value it used as
    ``extra["step_size"]``, which then wins) and every key of ``StepInfo.extra``.
    """
    chains = _check_count("chains", chains, 1)
    iter_warmup = _check_count("iter_warmup", iter_warmup, 0)
    iter_sampling = _check_count("iter_sampling", iter_sampling, 0)
    if iter_warmup + iter_sampling == 0:
        raise ValueError("iter_warmup + iter_sampling must be at least 1.")
    dim = int(likelihood.dim)
    step_size = float(step_size)
    if not (math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be positive and finite, got {step_size!r}.")
    target_accept = float(target_accept)
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be strictly between 0 and 1, got {target_accept!r}.")
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(map(repr, METRICS))} or an array; got {metric!r}.")
        metric_kind, metric0 = metric, np.ones(dim)
        if metric == "diag" and initial_metric is not None:
            metric0 = np.asarray(initial_metric, dtype=np.float64).copy()
            if metric0.shape != (dim,) or not np.all(np.isfinite(metric0)) or not np.all(metric0 > 0):
                raise ValueError(f"initial_metric must hold {dim} positive finite values.")
    else:
        metric0 = np.asarray(metric, dtype=np.float64)
        if metric0.shape != (dim,) or not np.all(np.isfinite(metric0)) or not np.all(metric0 > 0):
            raise ValueError(f"a metric array must hold {dim} positive finite values (the diagonal inverse metric).")
        metric_kind = "fixed"
    adapt = bool(adapt_engaged)
    if adapt and metric_kind == "diag" and 0 < iter_warmup < 20:
        warnings.warn(
            f"iter_warmup={iter_warmup} is below 20: no metric adaptation takes place (the step size is still adapted).",
            UserWarning,
            stacklevel=2,
        )

    seq, seeded = _seed_sequence(seed)
    # unseeded: ChaCha20 keyed from the OS cryptographic source; seeded: PCG64 children of the seed
    rngs = chain_generators(seq if seeded else None, chains)
    init_points, init_description = initial_points(inits, chains, dim, rngs)
    stop = stop_event if stop_event is not None else threading.Event()
    metric_pool = MetricPool(chains, stop) if (pool_metric and metric_kind == "diag" and chains > 1) else None
    cfg = _ChainConfig(iter_warmup, iter_sampling, step_size, target_accept, metric_kind, metric0, adapt, save_warmup,
                       bool(adapt_step_size), metric_pool)

    progress = [0] * chains
    total = chains * (iter_warmup + iter_sampling)
    from .output.progress import progress_bar

    bar = progress_bar(total=total, desc=progress_desc or f"sampling ({chains} chains)", unit="it",
                       show=show_progress)
    interrupted_by_user = False
    pool = ThreadPoolExecutor(max_workers=chains, thread_name_prefix="stan-dp-chain")
    futures: list[Future] = []
    try:
        try:
            for c in range(chains):
                futures.append(pool.submit(_run_one_chain, kernel, rngs[c], init_points[c], cfg, progress, c, stop))
            while True:
                done, pending = wait(futures, timeout=0.1)
                bar.update(sum(progress) - bar.n)
                if any(f.exception() is not None for f in done):
                    stop.set()  # one chain failed: stop the others after their current iteration, re-raise below
                if not pending:
                    break
        except KeyboardInterrupt:
            interrupted_by_user = True
            stop.set()
            bar.write("Interrupted: stopping every chain after its current iteration ...", file=sys.stderr)
            wait(futures)  # a second Ctrl-C here aborts without a result
        except BaseException:
            stop.set()
            raise
    finally:
        pool.shutdown(wait=True)
        bar.update(sum(progress) - bar.n)
        bar.close()

    outcomes = []
    for c, fut in enumerate(futures):
        exc = fut.exception()
        if exc is not None:
            exc.add_note(f"(raised in chain {c + 1} of {chains})")
            raise exc
        outcomes.append(fut.result())

    names: dict[str, None] = {name: None for name in CORE_STATS}
    for _, warm, samp in outcomes:
        for name in warm.names() + samp.names():
            names.setdefault(name, None)
    stat_names = list(names)
    chain_results = []
    for res, warm, samp in outcomes:
        res.warmup_stats = warm.arrays(stat_names)
        res.stats = samp.arrays(stat_names)
        chain_results.append(res)

    result = RunResult(
        chains=chain_results,
        dim=dim,
        iter_warmup=iter_warmup,
        iter_sampling=iter_sampling,
        save_warmup=bool(save_warmup),
        interrupted=False,
        seeded=seeded,
        metric_kind=metric_kind,
        target_accept=target_accept,
        initial_step_size=step_size,
        adapt_engaged=adapt,
        init_description=init_description,
        stat_names=stat_names,
    )
    result.interrupted = result.completed_iterations < result.planned_iterations
    if result.interrupted:
        how = "by Ctrl-C" if interrupted_by_user else "by the stop event"
        warnings.warn(
            f"The run was interrupted {how} after {result.completed_iterations} of {result.planned_iterations} "
            f"iterations (summed over chains). The result holds the draws made so far ({result.n_draws()} sampling "
            "draws in every chain); the privacy budget actually spent covers the completed iterations only.",
            RunInterruptedWarning,
            stacklevel=2,
        )
    return result
