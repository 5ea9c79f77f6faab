"""Stan's own NUTS service (``stan::services::sample::hmc_nuts_diag_e_adapt``, the code CmdStan runs), compiled
into every model library, run from Python: chains in parallel threads (the native call releases the GIL), draws
and sampler diagnostics written straight into NumPy buffers, with a progress bar and Ctrl-C.

Two callers: the non-private reference (``stan_dp.stan.reference``: the full-data instance) and the noise-aware
posteriors of the release-once methods (a generated program whose data are released statistics and public
inputs only; ``stan_dp.stan.posterior_program``).
"""
from __future__ import annotations

import ctypes
import dataclasses
import threading
import time
from typing import Any, Sequence

import numpy as np

from ..output.progress import progress_bar

__all__ = ["SAMPLER_COLUMNS", "NutsError", "NutsRun", "StanDraws", "run_stan_nuts"]

#: the sampler columns the service writes before the parameters, in order
SAMPLER_COLUMNS = ("lp", "acceptance_rate", "step_size", "tree_depth", "n_steps", "diverging", "energy")


class NutsError(RuntimeError):
    """Stan's NUTS service failed on a chain (the message carries Stan's own words)."""


@dataclasses.dataclass(frozen=True)
class NutsRun:
    """What one call of the service draws: ``chains`` chains of ``iter_warmup`` + ``iter_sampling`` iterations.

    seed: Stan's seed; first_chain: the chain id of the first chain (Stan's RNG stream of chain c is (seed, id));
    inits: one JSON text per chain (None or "" for Stan's random inits on (-init_radius, init_radius));
    step_size: the initial step size; max_depth, adapt_delta: Stan's tree depth limit and target acceptance;
    dense: adapt a dense metric in warmup (for correlated posteriors) instead of a diagonal one."""

    chains: int = 4
    iter_warmup: int = 1000
    iter_sampling: int = 1000
    seed: int = 1
    first_chain: int = 1
    inits: Sequence[str | None] | None = None
    init_radius: float = 2.0
    step_size: float = 1.0
    max_depth: int = 10
    adapt_delta: float = 0.8
    save_warmup: bool = False
    #: a dense metric (``hmc_nuts_dense_e_adapt``) instead of Stan's default diagonal one
    dense: bool = False


@dataclasses.dataclass(frozen=True)
class StanDraws:
    """The draws of a run: ``names`` the flat constrained names (Stan's order: parameters, transformed
    parameters, generated quantities), ``values`` (chains, draws, len(names)) and ``stats`` the sampler
    columns by name, each (chains, draws)."""

    names: list[str]
    values: np.ndarray
    stats: dict[str, np.ndarray]


def _bind(lib: ctypes.CDLL) -> None:
    lib.sdp_nuts_columns.restype = ctypes.c_int
    lib.sdp_nuts_columns.argtypes = [ctypes.c_void_p]
    for function in (lib.sdp_nuts_sample, lib.sdp_nuts_dense_sample):
        function.restype = ctypes.c_int
        function.argtypes = [
            ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_char_p, ctypes.c_double, ctypes.c_int,
            ctypes.c_int, ctypes.c_int, ctypes.c_double, ctypes.c_int, ctypes.c_double,
            np.ctypeslib.ndpointer(dtype=np.float64, flags=("C_CONTIGUOUS", "WRITEABLE")),
            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_char_p),
        ]
    lib.bs_free_error_msg.restype = None
    lib.bs_free_error_msg.argtypes = [ctypes.c_void_p]


def run_stan_nuts(model: Any, library_path: Any, run: NutsRun, *, label: str = "NUTS",
                  show_progress: bool = True) -> StanDraws:
    """Run ``run`` on ``model`` (a ``bridgestan.StanModel`` of the library at ``library_path``, with its data).

    The progress bar counts iterations of all chains (warmup included); Ctrl-C stops every chain and re-raises.
    ``NutsError`` when a chain fails."""
    lib = ctypes.CDLL(str(library_path))
    _bind(lib)
    cols = lib.sdp_nuts_columns(ctypes.c_void_p(model.model))
    names = list(model.param_names(include_tp=True, include_gq=True))
    if cols != len(SAMPLER_COLUMNS) + len(names):
        raise NutsError(f"unexpected column count {cols} for {len(names)} parameters")
    rows = run.iter_sampling + (run.iter_warmup if run.save_warmup else 0)
    # warmup iterations advance the progress counter even when they are not kept
    draws = np.zeros((run.chains, rows, cols))
    progress = (ctypes.c_int64 * run.chains)()
    stop = ctypes.c_int(0)
    errors: list[str | None] = [None] * run.chains
    inits = list(run.inits) if run.inits is not None else [None] * run.chains
    if len(inits) != run.chains:
        raise ValueError(f"one init per chain: {run.chains} chains, {len(inits)} inits")

    sample = lib.sdp_nuts_dense_sample if run.dense else lib.sdp_nuts_sample

    def run_chain(c: int) -> None:
        err = ctypes.c_char_p()
        init = inits[c]
        rc = sample(
            ctypes.c_void_p(model.model), int(run.seed), int(run.first_chain) + c,
            None if not init else init.encode(), float(run.init_radius), int(run.iter_warmup),
            int(run.iter_sampling), int(bool(run.save_warmup)), float(run.step_size), int(run.max_depth),
            float(run.adapt_delta), draws[c],
            ctypes.cast(ctypes.addressof(progress) + 8 * c, ctypes.POINTER(ctypes.c_int64)),
            ctypes.byref(stop), ctypes.byref(err))
        if rc != 0:
            errors[c] = err.value.decode("utf-8", "replace") if err.value else "unknown error"
            if err.value:
                lib.bs_free_error_msg(ctypes.cast(err, ctypes.c_void_p))

    threads = [threading.Thread(target=run_chain, args=(c,), daemon=True) for c in range(run.chains)]
    total = run.chains * (run.iter_warmup + run.iter_sampling)

    def phase() -> str:
        return "warmup" if min(progress) < run.iter_warmup else "sampling"

    bar = progress_bar(total=total, desc=f"{label}, {run.chains} chains ({phase()})", unit="it",
                       show=show_progress)
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            time.sleep(0.1)
            done = int(sum(progress))
            if done > bar.n:
                bar.set_description_str(f"{label}, {run.chains} chains ({phase()})", refresh=False)
                bar.update(done - bar.n)
    except KeyboardInterrupt:
        stop.value = 1
        for t in threads:
            t.join()
        raise
    finally:
        bar.update(int(sum(progress)) - bar.n)
        bar.close()
    for t in threads:
        t.join()
    failed = [f"chain {c + run.first_chain}: {e}" for c, e in enumerate(errors) if e]
    if failed:
        raise NutsError("Stan's NUTS failed. " + "; ".join(failed))
    stats = {name: draws[:, :, i] for i, name in enumerate(SAMPLER_COLUMNS)}
    stats["tree_depth"] = stats["tree_depth"].astype(np.int64)
    stats["n_steps"] = stats["n_steps"].astype(np.int64)
    stats["diverging"] = stats["diverging"].astype(bool)
    return StanDraws(names=names, values=draws[:, :, len(SAMPLER_COLUMNS):], stats=stats)
