"""What a private run released, as the output stage reads it: per-chain draws, statistics and adapted settings.

``stan_dp.phases.chains.run_chains`` builds a :class:`RunResult`; ``stan_dp.output.inference_data`` turns it into
ArviZ data. The type lives here, below the run machinery, so that the output stage needs nothing of ``run/``.
Every field is releasable (a function of released kernel outputs and public settings).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ChainResult", "RunResult"]


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
    #: the backend failure that stopped the run early (``stan_dp.stan.backend_error.BackendError``), else None
    failure: BaseException | None = None

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
