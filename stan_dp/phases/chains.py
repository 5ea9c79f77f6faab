"""The chain loop shared by every private sampler: chains, seeds, inits, warmup adaptation, progress, Ctrl-C.

``run_chains`` drives any ``stan_dp.samplers.base.Kernel``. It knows nothing about the algorithm and never
touches the data: the likelihood is consulted for its dimension only. Everything it adapts during warmup is a
function of *released* kernel outputs (``StepInfo.accept_stat`` and the draws), so adaptation is
post-processing and costs no privacy budget. Warmup iterations themselves run the
kernel's mechanisms and are counted by the accountant like any other iteration.

Warmup follows Stan's windowed adaptation (``stan_dp.samplers.adaptation``: dual averaging of the step size on
the released acceptance statistic, the diagonal metric from released warmup draws in expanding windows, pooled
over chains).

Chains run in a thread pool (the Stan engine releases the GIL inside native calls), each with its own
``numpy.random.Generator`` (``stan_dp.privacy.noise_source``): ChaCha20 keyed from the OS cryptographic source
for unseeded runs, PCG64 spawned from one ``SeedSequence`` for seeded ones. Seeded runs are reproducible
regardless of thread scheduling, because no generator is shared between chains. The chains' random starts come
from a separate stream per chain (purpose "chain starts") and the kernels' proposals, momenta and accept draws
from another (purpose "proposals"), never from the generator that draws the mechanisms' noise (purpose
"mechanism noise"; ``stan_dp.privacy.noise_source.streams``).
"""
from __future__ import annotations

import math
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from ..likelihood import RowLikelihood
from ..output.progress import progress_bar
from ..output.run_result import ChainResult, RunResult
from ..privacy.checks import check_count
from ..privacy.mechanisms import private_arithmetic
from ..privacy.noise_source import generator_state, restore_generator, streams
from ..run_options import RunSettings
from ..samplers.adaptation import DualAveraging, MetricPool, MetricWindows, window_metric
from ..samplers.base import ChainState, Kernel, StepInfo, takes_proposal_stream
from ..stan.backend_error import BackendError
from ..user_warnings import warn

__all__ = [
    "ChainSnapshot",
    "ResumeState",
    "RunInterruptedWarning",
    "initial_points",
    "run_chains",
]

#: Stan's uniform initialisation radius on the unconstrained scale
INIT_RADIUS = 2.0
METRICS = ("unit", "diag")
#: names of the per-iteration statistics that the run machinery itself records
CORE_STATS = ("accepted", "acceptance_rate", "step_size")


class RunInterruptedWarning(UserWarning):
    """The run stopped early (Ctrl-C or a stop event); the result holds the iterations that completed."""


# ------------------------------------------------------------------------------------------------ inits
@dataclass(frozen=True)
class Starts:
    """Chain starts that the run made itself (from a private anchor or a warm start: mechanism outputs and public
    randomness), with where they came from in words: ``initial_points`` takes the points as they are and records
    ``origin`` as the inits' description, so that the attrs never call them user-given."""

    points: Any
    origin: str


def initial_points(
    inits: Any, chains: int, dim: int, rngs: Sequence[np.random.Generator]
) -> tuple[np.ndarray, str]:
    """Data-free initial points (chains, dim) on the unconstrained scale and a description of their origin.

    ``inits`` may be
    * None: uniform(-2, 2) per coordinate, drawn from ``rngs[c]`` for chain c (Stan's default; the callers pass
      generators of the public "chain starts" purpose, never a mechanism's);
    * a non-negative number r: uniform(-r, r) (0 starts every chain at the origin), as in CmdStanPy;
    * an array of shape (dim,) used by every chain, or (chains, dim) with one row per chain
      (a list of ``chains`` arrays of length dim also works).
    * :class:`Starts`: points the run made itself (an anchor's, a warm start's), described by their origin.
    Initial values are public inputs: they must not be computed from the private rows.
    """
    origin = "user-given"
    if isinstance(inits, Starts):
        inits, origin = inits.points, inits.origin
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
        where = f"uniform(-{radius:g}, {radius:g})" if radius > 0 else "0 for every value"
        return points.reshape(chains, dim), f"{where} on the unconstrained scale"
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
    return arr.copy(), origin


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
    pool: MetricPool | None = None


class ChainCheckpoints(Protocol):
    """What the chain loop asks of a checkpoint writer (``stan_dp.phases.checkpoint.Checkpointer``)."""

    def due(self, chain: int, done: int) -> bool:
        """Whether chain ``chain``, having completed ``done`` iterations, must hand over its snapshot now."""

    def deliver(self, chain: int, done: int, snapshot: "ChainSnapshot") -> None:
        """Take chain ``chain``'s snapshot after ``done`` iterations (written once every chain has given one)."""

    def begin(self, snapshots: "list[ChainSnapshot]", init_description: str, total: int) -> None:
        """The chains' snapshots before their first iteration (``total`` iterations planned per chain)."""

    def stopped(self, snapshots: "list[ChainSnapshot]") -> None:
        """The run stopped early and its partial result is published: every chain's snapshot where it stopped
        (the chains may have completed different numbers of iterations)."""


@dataclass
class ChainSnapshot:
    """Everything one chain needs to continue exactly where it was: ``scalars`` (JSON values: counters, step size,
    dual-averaging state, the generator's state, the kernel cache's scalars) and ``arrays`` (position, kernel
    arrays such as momentum, metric, window draws, draws and statistics so far). The kernel's values at the current
    point (``Kernel.point_cache``: per-row values, noise-free sums) are left out and computed again on restore.
    PRIVATE (the generator state): it is written to a checkpoint, never released."""

    scalars: dict[str, Any]
    arrays: dict[str, np.ndarray]


def _cache_snapshot(cache: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A kernel cache as (JSON scalars with their types, arrays); ``TypeError`` for a value that is neither."""
    scalars: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}
    for key, value in cache.items():
        if isinstance(value, np.ndarray):
            arrays[key] = value.copy()
        elif value is None or isinstance(value, (bool, np.bool_)):
            scalars[key] = ["bool" if value is not None else "none", None if value is None else bool(value)]
        elif isinstance(value, (int, np.integer)):
            scalars[key] = ["int", int(value)]
        elif isinstance(value, (float, np.floating)):
            scalars[key] = ["float", float(value)]
        else:
            raise TypeError(f"the kernel keeps a {type(value).__name__} in its state ({key!r}), which a checkpoint "
                            "cannot hold")
    return scalars, arrays


_SCALAR_TYPES: dict[str, type] = {"bool": bool, "int": int, "float": float}


def _cache_restore(scalars: dict[str, Any], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    cache: dict[str, Any] = {}
    for key, (kind, value) in scalars.items():
        cache[key] = None if kind == "none" else _SCALAR_TYPES[kind](value)
    cache.update({key: np.array(value, copy=True) for key, value in arrays.items()})
    return cache


@dataclass
class ResumeState:
    """Where a resumed run's chains continue: one snapshot per chain, and how their starts were chosen."""

    snapshots: list[ChainSnapshot]
    init_description: str


class _ChainLoop:
    """The state of one chain's loop between two iterations: the kernel state, the adaptation, the draws and
    statistics so far. ``snapshot`` / ``restore`` move it in and out of a checkpoint exactly.

    ``pending_window``: a warmup iteration whose metric-window end is still to be done, because the run was
    stopped while this chain waited for the other chains' window draws (``MetricPool.gather_all``); a resumed
    chain does it first, with the same draws, so that it continues exactly as the uninterrupted run would have."""

    def __init__(self, kernel: Kernel, rngs: tuple[np.random.Generator, np.random.Generator], theta0: np.ndarray,
                 cfg: _ChainConfig) -> None:
        self.kernel = kernel
        self.proposals_taken = takes_proposal_stream(kernel)
        self.rng, self.proposal_rng = rngs  # the mechanisms' noise; the kernel's public randomness (proposals)
        self.theta0 = theta0.copy()
        self.state: ChainState = kernel.init_state(theta0.copy())
        self.metric = cfg.metric0.copy()
        self.step_size = float(cfg.step_size)
        self.adapting = cfg.adapt and cfg.iter_warmup > 0
        self.dual = DualAveraging(cfg.target_accept, self.step_size) if self.adapting and cfg.adapt_step_size else None
        self.window_draws: list[np.ndarray] = []
        self.pending_window: int | None = None
        dim = theta0.shape[0]
        self.draws = np.empty((cfg.iter_sampling, dim))
        self.warmup_draws = np.empty((cfg.iter_warmup, dim)) if cfg.save_warmup else None
        self.warm_stats, self.samp_stats = _StatRecorder(), _StatRecorder()
        self.n_warm = self.n_samp = 0

    @property
    def done(self) -> int:
        return self.n_warm + self.n_samp

    def snapshot(self) -> ChainSnapshot:
        # the kernel's values at the current point (per-row values, noise-free sums) are left out: a resumed chain
        # computes them again (``Kernel.restore_cache``)
        point = set(self.kernel.point_cache)
        dropped = sorted(key for key in self.state.cache if key in point)
        cache_scalars, cache_arrays = _cache_snapshot({k: v for k, v in self.state.cache.items() if k not in point})
        scalars: dict[str, Any] = {
            "n_warm": self.n_warm, "n_samp": self.n_samp, "step_size": self.step_size,
            "dual": None if self.dual is None else dict(vars(self.dual)),
            "rng": generator_state(self.rng), "proposal_rng": generator_state(self.proposal_rng),
            "cache": cache_scalars, "cache_dropped": dropped,
            "pending_window": self.pending_window,
            "warm_stats": self.warm_stats.names(), "samp_stats": self.samp_stats.names(),
        }
        arrays = {"theta0": self.theta0.copy(), "theta": np.array(self.state.theta, dtype=np.float64, copy=True),
                  "metric": np.array(self.metric, dtype=np.float64, copy=True),
                  "window_draws": np.array(self.window_draws, dtype=np.float64).reshape(-1, self.theta0.shape[0]),
                  "draws": self.draws[:self.n_samp].copy()}
        if self.warmup_draws is not None:
            arrays["warmup_draws"] = self.warmup_draws[:self.n_warm].copy()
        arrays.update({f"cache.{k}": v for k, v in cache_arrays.items()})
        for prefix, recorder, names in (("warm_stat.", self.warm_stats, scalars["warm_stats"]),
                                        ("samp_stat.", self.samp_stats, scalars["samp_stats"])):
            arrays.update({prefix + name: value for name, value in recorder.arrays(names).items()})
        return ChainSnapshot(scalars, arrays)

    def restore(self, snap: ChainSnapshot) -> None:
        sc, ar = snap.scalars, snap.arrays
        if not np.array_equal(ar["theta0"], self.theta0):
            raise ValueError("a chain snapshot does not belong to this chain (its start differs)")
        self.n_warm, self.n_samp = int(sc["n_warm"]), int(sc["n_samp"])
        self.step_size = float(sc["step_size"])
        if (sc["dual"] is None) != (self.dual is None):
            raise ValueError("a chain snapshot's step-size adaptation does not match the run's")
        if self.dual is not None:
            vars(self.dual).update(sc["dual"])
        self.rng = restore_generator(sc["rng"])
        self.proposal_rng = restore_generator(sc["proposal_rng"])
        pending = sc.get("pending_window")
        self.pending_window = None if pending is None else int(pending)
        cache_arrays = {k[len("cache."):]: v for k, v in ar.items() if k.startswith("cache.")}
        theta = np.array(ar["theta"], copy=True)
        cache = self.kernel.restore_cache(theta, _cache_restore(sc["cache"], cache_arrays), list(sc["cache_dropped"]))
        self.state = ChainState(theta=theta, cache=cache)
        self.metric = np.array(ar["metric"], copy=True)
        self.window_draws = [row.copy() for row in ar["window_draws"]]
        self.draws[:self.n_samp] = ar["draws"]
        if self.warmup_draws is not None:
            self.warmup_draws[:self.n_warm] = ar["warmup_draws"]
        for prefix, recorder, names, count in (("warm_stat.", self.warm_stats, sc["warm_stats"], self.n_warm),
                                               ("samp_stat.", self.samp_stats, sc["samp_stats"], self.n_samp)):
            columns = {name: ar[prefix + name] for name in names}
            recorder.rows = [{name: columns[name][i].item() for name in names} for i in range(count)]

    def end_of_warmup_iteration(self, cfg: _ChainConfig, windows: MetricWindows, it: int, index: int) -> bool:
        """The adaptation after warmup iteration ``it`` (its draw already recorded): a metric window's end (with
        the pooled draws of every chain) and the step size's restart, and the final step size after the last
        warmup iteration. False, with ``pending_window`` set, when the run was stopped while this chain waited for
        the other chains' window draws: nothing was changed, and a resumed chain does it again."""
        dual = self.dual
        if self.adapting and windows.collects(it) and windows.is_end(it):
            if cfg.metric_kind == "diag":
                own = np.array(self.window_draws)
                blocks = cfg.pool.gather_all(it, index, own) if cfg.pool is not None else [own]
                if blocks is None:
                    self.pending_window = it
                    return False
                self.metric = window_metric(self.kernel, blocks, self.metric, self.step_size)
                self.window_draws.clear()
            if dual is not None and (cfg.metric_kind == "diag" or it != windows.ends[-1]):
                dual.restart(dual.final)
                self.step_size = dual.current
        if dual is not None and it == cfg.iter_warmup - 1:
            self.step_size = dual.final
        self.pending_window = None
        return True

    def generator_states(self) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """Both generators' states, to put them back if an iteration fails part-way (``bit_generator.state`` builds
        a new dict every time: 3 to 5 us per generator, against 5 to 9 us for ``generator_state``'s checked copy)."""
        return self.rng.bit_generator.state, self.proposal_rng.bit_generator.state

    def restore_generators(self, states: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        self.rng, self.proposal_rng = (restore_generator(dict(state)) for state in states)

    def step(self) -> StepInfo:
        """One kernel iteration: the noise from ``rng``, the kernel's public randomness from ``proposal_rng`` when
        the kernel takes it (``takes_proposal_stream``)."""
        if self.proposals_taken:
            self.state, info = self.kernel.step(self.rng, self.state, self.step_size, self.metric,  # type: ignore[call-arg]
                                                proposal_rng=self.proposal_rng)
        else:
            self.state, info = self.kernel.step(self.rng, self.state, self.step_size, self.metric)
        return info

    def record(self, info: StepInfo, it: int, cfg: _ChainConfig, windows: MetricWindows) -> None:
        """Keep iteration ``it``'s released outputs: its draw and statistics, and (warmup) the step size's dual
        averaging and the current window's draws."""
        theta = np.asarray(self.state.theta, dtype=np.float64)
        if it < cfg.iter_warmup:
            self.warm_stats.add(info, self.step_size)
            if self.warmup_draws is not None:
                self.warmup_draws[self.n_warm] = theta
            self.n_warm += 1
            if self.dual is not None:
                self.step_size = self.dual.update(info.accept_stat)
            if self.adapting and windows.collects(it) and cfg.metric_kind == "diag":
                self.window_draws.append(theta.copy())
        else:
            self.samp_stats.add(info, self.step_size)
            self.draws[self.n_samp] = theta
            self.n_samp += 1


def _run_one_chain(
    kernel: Kernel,
    rngs: tuple[np.random.Generator, np.random.Generator],
    theta0: np.ndarray,
    cfg: _ChainConfig,
    progress: list[int],
    index: int,
    stop: threading.Event,
    failures: list[BackendError],
    checkpoints: ChainCheckpoints | None = None,
    resume: ChainSnapshot | None = None,
) -> tuple[ChainResult, _StatRecorder, _StatRecorder, _ChainLoop]:
    loop = _ChainLoop(kernel, rngs, theta0, cfg)
    windows = MetricWindows(cfg.iter_warmup)
    total = cfg.iter_warmup + cfg.iter_sampling
    # every step computes on private rows: no floating-point warning may depend on them (the kernels and
    # mechanisms say so too; this covers any kernel's own arithmetic, in this chain's thread)
    with private_arithmetic():
        if resume is not None:  # a kernel may compute its values at the point again (``Kernel.restore_cache``)
            loop.restore(resume)
        progress[index] = loop.done
        if loop.pending_window is not None:  # stopped last time while waiting at a window's end: finish it first
            loop.end_of_warmup_iteration(cfg, windows, loop.pending_window, index)
        for it in range(loop.done, total):
            if stop.is_set() or loop.pending_window is not None:
                break
            before = loop.generator_states() if checkpoints is not None else None
            try:
                info = loop.step()
            except BackendError as exc:  # the rows' backend failed: this iteration is dropped (nothing of it released)
                if before is not None:  # and the chain's checkpoint continues from before it, as if it never began
                    loop.restore_generators(before)
                failures.append(exc)
                stop.set()
                break
            loop.record(info, it, cfg, windows)
            if it < cfg.iter_warmup and not loop.end_of_warmup_iteration(cfg, windows, it, index):
                progress[index] += 1
                break
            progress[index] += 1
            if checkpoints is not None and checkpoints.due(index, it + 1):
                checkpoints.deliver(index, it + 1, loop.snapshot())
    step_size = loop.step_size
    if loop.dual is not None and loop.n_warm < cfg.iter_warmup:
        step_size = loop.dual.final  # interrupted during warmup: report the best current estimate
    result = ChainResult(
        draws=loop.draws[:loop.n_samp].copy(),
        stats={},
        warmup_draws=None if loop.warmup_draws is None else loop.warmup_draws[:loop.n_warm].copy(),
        warmup_stats={},
        n_warmup=loop.n_warm,
        n_sampling=loop.n_samp,
        step_size=float(step_size),
        metric=np.asarray(loop.metric, dtype=np.float64).copy(),
        init=theta0.copy(),
    )
    return result, loop.warm_stats, loop.samp_stats, loop


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


def run_chains(
    likelihood: RowLikelihood,
    kernel: Kernel,
    settings: RunSettings | None = None,
    *,
    seed: int | np.random.SeedSequence | None = None,
    inits: Any = None,
    stop_event: threading.Event | None = None,
    progress_desc: str | None = None,
    checkpoints: ChainCheckpoints | None = None,
    resume: ResumeState | None = None,
    **setting_changes: Any,
) -> RunResult:
    """Run ``settings.chains`` chains of ``kernel`` in parallel threads and collect the released outputs.

    likelihood: only its ``dim`` is used (run machinery never evaluates it).
    settings: the chain loop's public settings (``stan_dp.run_options.RunSettings``: chains, run lengths, start
        step size, target_accept, metric and its start, adaptation switches, save_warmup, show_progress); None:
        the defaults. ``setting_changes``: fields of it given as keywords (``run_chains(lik, kernel, chains=2,
        iter_sampling=50)``), applied on top; an unknown name is a ``TypeError``. The fields the loop reads:

        step_size: initial step size (kept fixed when there is no warmup or ``adapt_engaged`` is False).
        target_accept: target of the dual averaging on ``StepInfo.accept_stat``.
        metric: "unit", "diag" (estimated from released warmup draws) or a fixed positive inverse-metric vector.
        initial_metric: with ``metric="diag"``, the (public) inverse metric used until the first window ends
            (default: ones).
        adapt_step_size: False keeps the step size fixed during warmup while the metric is still adapted
            (kernels without an accept test, e.g. the SG-MCMC kernels).
        pool_metric: with ``metric="diag"`` and several chains, estimate the metric from the warmup-window draws
            of all chains together (``MetricPool``); False estimates it per chain, as Stan does.
    seed: int, ``numpy.random.SeedSequence`` or None (OS entropy). Chain c draws its mechanisms' noise from the
        c-th "mechanism noise" stream, its kernel's public randomness (proposals, momenta, accept draws: a kernel
        whose step takes ``proposal_rng``) from the c-th "proposals" stream and its random start from the c-th "chain
        starts" stream of the seed (``stan_dp.privacy.noise_source.streams``).
    inits: see ``initial_points``.
    stop_event: a ``threading.Event``; setting it stops every chain after its current iteration (this is also
        what Ctrl-C does). The result then holds the iterations that completed and ``interrupted`` is True.
    progress_desc: the progress bar's label (default "sampling (C chains)").
    checkpoints: a checkpoint writer (``stan_dp.phases.checkpoint.Checkpointer``): it gets every chain's snapshot
        before the first iteration and at its cadence (a snapshot is written once every chain has given it), and,
        when the run stops early (a stop event, Ctrl-C, a backend failure) and its partial result is returned,
        every chain's snapshot where it stopped (``stopped``): a run resumed from it never runs a returned iteration
        again. A chain whose backend failed mid-iteration is stored as it was before that iteration (its generator
        state too).
    resume: continue every chain from its snapshot (``ResumeState``; ``seed`` and ``inits`` are then unused: the
        generators' states and the starts are the snapshots'). A seeded run continued this way gives the same
        draws, bit for bit, as the run that was not interrupted.

    Per-iteration statistics: ``accepted`` and ``acceptance_rate`` (= ``StepInfo.accept_stat``), ``step_size``
    (the one passed to the kernel; a kernel that jitters it may report the value it used as
    ``extra["step_size"]``, which then wins) and every key of ``StepInfo.extra``.
    """
    settings = (settings or RunSettings()).replace(**setting_changes)
    cfg, chains, dim = _checked_config(settings, likelihood)
    seq, seeded = _seed_sequence(seed)
    stop = stop_event if stop_event is not None else threading.Event()
    if settings.pool_metric and cfg.metric_kind == "diag" and chains > 1:
        cfg.pool = MetricPool(chains, stop)
    rngs, init_points, init_description = _generators_and_starts(kernel, cfg, chains, dim, seq if seeded else None,
                                                                 inits, resume, checkpoints)

    failures: list[BackendError] = []  # backend failures met by the chains (they stop the run, keeping its draws)
    total = cfg.iter_warmup + cfg.iter_sampling
    bar = progress_bar(total=chains * total, desc=progress_desc or f"sampling ({chains} chains)",
                       unit="it", show=settings.show_progress)
    outcomes, interrupted_by = _drive_chains(
        [(kernel, rngs[c], init_points[c], cfg, None if resume is None else resume.snapshots[c])
         for c in range(chains)], stop, failures, checkpoints, bar)
    chain_results, stat_names = _merge_stats(outcomes)
    result = RunResult(
        chains=chain_results,
        dim=dim,
        iter_warmup=cfg.iter_warmup,
        iter_sampling=cfg.iter_sampling,
        save_warmup=cfg.save_warmup,
        interrupted=False,
        seeded=seeded,
        metric_kind=cfg.metric_kind,
        target_accept=cfg.target_accept,
        initial_step_size=cfg.step_size,
        adapt_engaged=cfg.adapt,
        init_description=init_description,
        stat_names=stat_names,
        failure=failures[0] if failures else None,
    )
    result.interrupted = result.completed_iterations < result.planned_iterations
    if result.interrupted:
        _settle_interruption(result, outcomes, failures, checkpoints, interrupted_by)
    return result


def _checked_config(settings: RunSettings, likelihood: RowLikelihood) -> tuple[_ChainConfig, int, int]:
    """(the chain loop's settings, checked, without a metric pool yet; the number of chains; the dimension):
    ValueError for a bad count, run length, step size, target_accept or metric, and a warning when the warmup is
    too short to adapt a diag metric."""
    chains = check_count(settings.chains, "chains", 1)
    iter_warmup = check_count(settings.iter_warmup, "iter_warmup", 0)
    iter_sampling = check_count(settings.iter_sampling, "iter_sampling", 0)
    if iter_warmup + iter_sampling == 0:
        raise ValueError("iter_warmup + iter_sampling must be at least 1.")
    dim = int(likelihood.dim)
    step_size = float(settings.step_size)
    if not (math.isfinite(step_size) and step_size > 0):
        raise ValueError(f"step_size must be positive and finite, got {step_size!r}.")
    target_accept = float(settings.target_accept)
    if not 0.0 < target_accept < 1.0:
        raise ValueError(f"target_accept must be strictly between 0 and 1, got {target_accept!r}.")
    metric_kind, metric0 = _resolve_metric(settings.metric, settings.initial_metric, dim)
    adapt = bool(settings.adapt_engaged)
    save_warmup = bool(settings.save_warmup)
    if adapt and metric_kind == "diag" and 0 < iter_warmup < 20:
        warn(f"iter_warmup={iter_warmup} is below 20: no metric adaptation takes place (the step size is still "
             "adapted).", UserWarning)
    cfg = _ChainConfig(iter_warmup, iter_sampling, step_size, target_accept, metric_kind, metric0, adapt, save_warmup,
                       bool(settings.adapt_step_size))
    return cfg, chains, dim


def _generators_and_starts(kernel: Kernel, cfg: _ChainConfig, chains: int, dim: int,
                           seq: np.random.SeedSequence | None, inits: Any, resume: ResumeState | None,
                           checkpoints: ChainCheckpoints | None
                           ) -> tuple[list[tuple[np.random.Generator, np.random.Generator]], np.ndarray, str]:
    """Each chain's generators (mechanism noise, proposals) and start, and the starts in words: the snapshots'
    when resuming; else fresh streams of ``seq`` (None: unseeded), the starts from ``inits``, and the checkpoint
    writer (if any) given every chain's snapshot before the first iteration."""
    if resume is not None:  # the generators and the starts are the snapshots' (restored in each chain's loop)
        if len(resume.snapshots) != chains:
            raise ValueError(f"resume holds {len(resume.snapshots)} chain snapshots for a run of {chains} chains")
        init_points = np.array([snap.arrays["theta0"] for snap in resume.snapshots], dtype=np.float64)
        init_description = resume.init_description
        rngs = [(restore_generator(snap.scalars["rng"]), restore_generator(snap.scalars["proposal_rng"]))
                for snap in resume.snapshots]
    else:
        # unseeded: ChaCha20 keyed from the OS cryptographic source; seeded: PCG64 children of the seed, one
        # stream per purpose: the kernels' noise never shares a generator with the (released) random starts
        rngs = list(zip(streams(seq, "mechanism noise", "chains", chains),
                        streams(seq, "proposals", "chains", chains)))
        init_points, init_description = initial_points(inits, chains, dim, streams(seq, "chain starts", "chains", chains))
        if checkpoints is not None:
            checkpoints.begin([_ChainLoop(kernel, rngs[c], init_points[c], cfg).snapshot() for c in range(chains)],
                              init_description, cfg.iter_warmup + cfg.iter_sampling)
    return rngs, init_points, init_description


def _settle_interruption(result: RunResult, outcomes: list[Any], failures: list[BackendError],
                         checkpoints: ChainCheckpoints | None, interrupted_by: str | None) -> None:
    """An interrupted run: the checkpoint writer (if any) gets every chain where it stopped, and unless a backend
    failed (the pipeline raises it with the partial fit) a ``RunInterruptedWarning`` says what the result holds."""
    if checkpoints is not None:
        # the partial result is published: the checkpoint continues from exactly the iterations it holds, so that a
        # resumed run never draws a published iteration again (each chain where it stopped)
        checkpoints.stopped([outcome[3].snapshot() for outcome in outcomes])
    if not failures:  # a backend failure is raised with the partial fit by the pipeline
        how = f"by {interrupted_by}" if interrupted_by else "by the stop event"
        warn(f"The run was interrupted {how} after {result.completed_iterations} of {result.planned_iterations} "
             f"iterations (summed over chains). The result holds the draws made so far ({result.n_draws()} sampling "
             "draws in every chain); the privacy budget actually spent covers the completed iterations only.",
             RunInterruptedWarning)


def _resolve_metric(metric: str | np.ndarray, initial_metric: np.ndarray | None, dim: int
                    ) -> tuple[str, np.ndarray]:
    """(metric kind: "unit", "diag" or "fixed"; the inverse metric the chains start with) from ``run_chains``'
    ``metric`` and ``initial_metric``, checked."""
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {', '.join(map(repr, METRICS))} or an array; got {metric!r}.")
        metric0 = np.ones(dim)
        if metric == "diag" and initial_metric is not None:
            metric0 = np.asarray(initial_metric, dtype=np.float64).copy()
            if metric0.shape != (dim,) or not np.all(np.isfinite(metric0)) or not np.all(metric0 > 0):
                raise ValueError(f"initial_metric must hold {dim} positive finite values.")
        return metric, metric0
    metric0 = np.asarray(metric, dtype=np.float64)
    if metric0.shape != (dim,) or not np.all(np.isfinite(metric0)) or not np.all(metric0 > 0):
        raise ValueError(f"a metric array must hold {dim} positive finite values (the diagonal inverse metric).")
    return "fixed", metric0


def _drive_chains(jobs: list[tuple], stop: threading.Event, failures: list[BackendError],
                  checkpoints: ChainCheckpoints | None, bar: Any) -> tuple[list, str | None]:
    """Run one thread per chain (``jobs``: the kernel, generators, start, config and snapshot of each), keep the
    progress bar moving, stop every chain after its current iteration on Ctrl-C or when one fails. Returns the
    chains' outcomes and what interrupted the run (None, "Ctrl-C" or a signal's name); a chain's exception is
    re-raised with a note naming the chain."""
    chains = len(jobs)
    progress = [0] * chains
    interrupted_by = None
    pool = ThreadPoolExecutor(max_workers=chains, thread_name_prefix="stan-dp-chain")
    futures: list[Future] = []
    try:
        try:
            for c, (kernel, rngs, start, cfg, snapshot) in enumerate(jobs):
                futures.append(pool.submit(_run_one_chain, kernel, rngs, start, cfg, progress, c, stop, failures,
                                           checkpoints, snapshot))
            while True:
                done, pending = wait(futures, timeout=0.1)
                bar.update(sum(progress) - bar.n)
                if any(f.exception() is not None for f in done):
                    stop.set()  # one chain failed: stop the others after their current iteration, re-raise below
                if not pending:
                    break
        except KeyboardInterrupt as exc:  # Ctrl-C, or a signal handler raising it (the CLI's SIGTERM: "SIGTERM")
            interrupted_by = str(exc.args[0]) if exc.args else "Ctrl-C"
            stop.set()
            bar.write(f"Interrupted ({interrupted_by}): stopping every chain after its current iteration ...",
                      file=sys.stderr)
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
        error = fut.exception()
        if error is not None:
            if sys.version_info >= (3, 11):  # exception notes are new in Python 3.11
                error.add_note(f"(raised in chain {c + 1} of {chains})")
            raise error
        outcomes.append(fut.result())
    return outcomes, interrupted_by


def _merge_stats(outcomes: list) -> tuple[list[ChainResult], list[str]]:
    """Every chain's per-iteration statistics as arrays over the union of their names (core names first)."""
    names: dict[str, None] = {name: None for name in CORE_STATS}
    for _, warm, samp, _ in outcomes:
        for name in warm.names() + samp.names():
            names.setdefault(name, None)
    stat_names = list(names)
    chain_results = []
    for res, warm, samp, _ in outcomes:
        res.warmup_stats = warm.arrays(stat_names)
        res.stats = samp.arrays(stat_names)
        chain_results.append(res)
    return chain_results, stat_names
