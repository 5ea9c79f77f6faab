"""Limit BLAS / OpenMP threads while private chains run in parallel threads.

``run_chains`` runs one chain per Python thread. Each chain's NumPy linear algebra (the reference models'
matrix products, SciPy routines) may itself start a BLAS thread pool sized to every core, so ``chains``
chains on a 2-core machine would otherwise run ``chains x cores`` busy threads that fight for the cores.
``limited_blas_threads`` caps the BLAS and OpenMP pools for the duration of a run (threadpoolctl) and restores
them afterwards. It touches no data and changes no result beyond floating-point summation order.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

__all__ = ["blas_threads_per_chain", "limited_blas_threads"]


def blas_threads_per_chain(chains: int, cores: int | None = None) -> int:
    """BLAS threads each chain may use: the cores divided among the chains, at least 1.

    chains: chains that run at the same time (>= 1).
    cores: available cores (default: the CPUs this process may run on).
    """
    if chains < 1:
        raise ValueError(f"chains must be >= 1, got {chains}.")
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    return max(1, int(cores) // int(chains))


@contextlib.contextmanager
def limited_blas_threads(chains: int, cores: int | None = None) -> Iterator[int]:
    """Context manager: cap the BLAS and OpenMP thread pools at ``blas_threads_per_chain(chains, cores)``.

    Yields the limit in force. Limits already lower (e.g. ``OPENBLAS_NUM_THREADS=1``) are never raised.
    """
    from threadpoolctl import threadpool_info, threadpool_limits

    limit = blas_threads_per_chain(chains, cores)
    current = [int(p.get("num_threads", limit)) for p in threadpool_info()]
    effective = min([limit] + current) if current else limit
    with threadpool_limits(limits=effective):
        yield effective
