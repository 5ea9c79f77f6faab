"""The row engine sharded over Ray actors (``backend="ray"``; ``pip install stan-dp[ray]``).

The rows are cut into contiguous shards, one per actor. Each actor loads the compiled model library (the cached
path; the library must be reachable at that path on every node, e.g. a shared cache directory) and builds its
shard's native instance, exactly as the local engine does for all rows (``RowData`` + ``ShardInstances``, or
``RowInstances`` when the program has no shard program). The driver keeps the interface the local engine has
(``RayShardRows`` answers the calls ``StanRowLikelihood`` makes of ``_NativeRows``): per request it sends theta
and each actor's local row indices (drawn on the driver by the kernels' data-independent rules), gathers the
per-row values in the requested order, and hands them to the driver's clipping and noise
(``stan_dp.privacy.mechanisms``). Each row's value is computed by the same native code on the same row, so the
draws equal the local engine's.

Trust model: the cluster belongs to the data owner. What crosses the wire is the rows themselves (once, to their
actor) and, per request, either the per-row log-likelihoods and gradients of the requested rows or (for
``stan_dp.privacy.mechanisms.rows_clipped_gradient_sum``: the SG kernels and DP-GD) one clipped gradient sum per
shard, from the actors to the driver. None of these is private output: noise is drawn and added only on the driver, and what a run releases
is the same as locally. Errors raised inside an actor reach the driver with data values withheld.

Same code on both sides. An actor runs the package installed where it runs: this module's ``ShardWorker``, the
native engine's bindings (``stan_dp.stan.engine``), the row files' reader, the clip and the anchor statistics
(the driver sends references to ``mechanisms.clipped_gradient_sum`` and ``mechanisms.anchor_sums``, which each
worker resolves in its own installation) and the anchor rule (``stan_dp.phases.anchor.anchor_row_gradients``), and
importing any of them imports the package. At start-up every actor therefore compares its ``code_identity()``
(the package version and a SHA-256 of every module and native source file of the installed package, read from
its own files: public) with the driver's; an actor that differs in any file builds no instance and evaluates no
row, and the driver raises ``BackendError`` naming the versions and the files that differ.

Ray is imported only when this backend is used: ``import stan_dp`` never imports it.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import bridgestan
import numpy as np

from .backend_error import RERUN_NOTE, BackendError
from .data import RowSplit, prior_data, to_json
from .engine import NativeError, RowData, RowInstances, ShardInstances, default_shards, shard_boundaries
from .factorization import check_factorization, check_range
from .row_tables import RowFile, rows_left_in_file
from .stan_messages import clean_stan_message, withhold_data_values
from .._version import __version__
from ..privacy import mechanisms
from ..user_warnings import warn

__all__ = ["RayShardRows", "require_ray", "shard_starts", "shard_public", "shard_data", "row_chunks", "code_identity",
           "identity_mismatch"]

#: seconds to wait for every shard actor to be scheduled and built
START_TIMEOUT = 300.0
#: concurrent calls one actor serves (chains run in driver threads; the native engine is thread-safe)
ACTOR_CONCURRENCY = 16
#: the rows go to an actor in pieces of about this many bytes, one piece in Ray's object store at a time (the
#: store keeps the pages a piece touched resident after it is freed, so whole shards would stay there)
SHIP_CHUNK_BYTES = 32 * 2**20
#: rows per native call when an actor evaluates all its rows (a full-batch step, the statistics at the anchor):
#: the call's values and gradients are this many rows' instead of the whole shard's
ALL_ROWS_BLOCK = 2**18
#: the object store of a local Ray cluster this package starts: a few pieces of rows in flight (larger objects
#: spill to disk); the store keeps every page it has touched resident, so its size bounds that memory
LOCAL_OBJECT_STORE_BYTES = 4 * SHIP_CHUNK_BYTES
#: an actor's fixed mmap threshold (``limit_heap_retention``): the all-rows blocks' arrays (about 10 MB) are
#: mapped and unmapped, a minibatch's (a few MB) come from the heap
ACTOR_MMAP_THRESHOLD = 4 * 2**20
#: free memory at the top of an actor's heap kept for the next calls before glibc gives it back
ACTOR_TRIM_THRESHOLD = 32 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters (malloc.h)


def limit_heap_retention() -> None:
    """In an actor process on glibc: blocks of at least ``ACTOR_MMAP_THRESHOLD`` bytes are always mapped and
    unmapped. glibc otherwise raises that threshold to the largest block freed, after which the all-rows blocks'
    arrays come from the heaps of the calling threads, which keep them (measured: 0.35 GB per actor after the
    anchor phase at twenty million rows). Memory only: the values computed do not change. Nothing happens where
    glibc is absent. Fixing the threshold also stops glibc raising its trim threshold with it, which would leave it
    at 128 KiB: every call's few-MB arrays would then shrink and regrow the heap (measured: a fifth more sampling
    time), so the trim threshold is set to ``ACTOR_TRIM_THRESHOLD``."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, ACTOR_MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, ACTOR_TRIM_THRESHOLD)
    except (OSError, AttributeError):
        pass


def require_ray() -> Any:
    """The ``ray`` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("backend='ray' needs Ray, which is not installed: pip install 'stan-dp[ray]'") from exc
    return ray


def start_ray(ray: Any, address: str | None) -> None:
    """Connect this process to Ray: to ``address``, or to the cluster Ray finds without one, or to a new local
    cluster whose object store is ``LOCAL_OBJECT_STORE_BYTES`` (an existing cluster keeps its own settings)."""
    options = {"include_dashboard": False, "log_to_driver": False}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        try:
            ray.init(object_store_memory=LOCAL_OBJECT_STORE_BYTES, **options)
            return
        except ValueError as exc:  # Ray found a running cluster on this machine: its store is its own
            if "existing cluster" not in str(exc):
                raise
    ray.init(address=address, **options)


def shard_starts(n_rows: int, shards: int) -> np.ndarray:
    """First row of each of ``shards`` contiguous shards of near-equal size, then ``n_rows`` (length shards + 1).
    A function of the public row count and shard count only."""
    if shards < 1:
        raise ValueError(f"the number of Ray workers must be at least 1, got {shards}")
    shards = min(shards, max(1, n_rows))
    return np.array([(n_rows * s) // shards for s in range(shards + 1)], dtype=np.int64)


def shard_public(data: Mapping[str, Any], split: RowSplit, first: int, stop: int) -> dict[str, Any]:
    """The data of rows [first, stop) without the rows: the public variables unchanged, the row count set to the
    shard's size."""
    out = {name: data[name] for name in split.public_variables}
    out[split.count_name] = int(stop - first)
    return out


def shard_data(data: Mapping[str, Any], split: RowSplit, first: int, stop: int) -> dict[str, Any]:
    """The data of rows [first, stop): ``shard_public`` and the row variables sliced along their leading
    dimension."""
    out = shard_public(data, split, first, stop)
    for name in split.row_variables:
        out[name] = np.asarray(data[name])[first:stop]
    return out


def row_chunks(data: Mapping[str, Any], split: RowSplit, first: int, stop: int,
               chunk_bytes: int = SHIP_CHUNK_BYTES) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
    """The row variables of rows [first, stop) in consecutive pieces of about ``chunk_bytes`` bytes: (offset of
    the piece within the range, {row variable: its rows}). Views of the arrays in ``data`` (converted once)."""
    arrays = {name: np.asarray(data[name]) for name in split.row_variables}
    per_row = sum(a.dtype.itemsize * int(np.prod(a.shape[1:], dtype=np.int64)) for a in arrays.values())
    step = max(1, int(chunk_bytes) // max(1, per_row))
    for start in range(int(first), int(stop), step):
        end = min(int(stop), start + step)
        yield start - int(first), {name: a[start:end] for name, a in arrays.items()}


#: the files of the package whose code an actor may run: every Python module, and the native sources its model
#: library is built from
CODE_SUFFIXES = (".py", ".cpp", ".hpp")
#: the package's folder (this module is ``stan_dp/stan/ray_rows.py``)
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def _module_digests() -> tuple[tuple[str, str], ...]:
    files = sorted(path for path in _PACKAGE_DIR.rglob("*") if path.suffix in CODE_SUFFIXES and path.is_file()
                   and "__pycache__" not in path.parts)
    return tuple((path.relative_to(_PACKAGE_DIR.parent).as_posix(), hashlib.sha256(path.read_bytes()).hexdigest())
                 for path in files)


def code_identity() -> dict[str, Any]:
    """What a shard actor must share with the driver: ``{"version": the stan-dp version, "modules": {path: SHA-256}}``
    for every module and native source file of the installed package (``stan_dp/stan/ray_rows.py``,
    ``stan_dp/stan/engine.py``, ``stan_dp/privacy/mechanisms.py``, ``stan_dp/phases/anchor.py``, ...): an actor runs
    its shard worker, the engine, the clip and the anchor rule from its own installation, and importing them imports
    the package. Computed from the package's own files only (public; no data)."""
    return {"version": str(__version__), "modules": dict(_module_digests())}


def identity_mismatch(driver: Mapping[str, Any], worker: Mapping[str, Any]) -> str | None:
    """None when ``worker`` runs the driver's package version and the same file for every module, else a message
    naming the versions, the files that differ and the fix. A side that found no source file to hash is refused
    too (its code cannot be compared)."""
    mine, theirs = dict(driver.get("modules") or {}), dict(worker.get("modules") or {})
    if driver.get("version") == worker.get("version") and mine == theirs and mine:
        return None
    differ = sorted(name for name in set(mine) | set(theirs) if mine.get(name) != theirs.get(name))
    found = [f"stan-dp {worker.get('version')} where the driver runs stan-dp {driver.get('version')}"
             if driver.get("version") != worker.get("version") else f"stan-dp {worker.get('version')}"]
    if differ:
        found.append("other code in " + ", ".join(differ[:6]) + (f" and {len(differ) - 6} more" if len(differ) > 6
                                                                 else ""))
    if not (mine and theirs):
        found.append("no source file to compare")
    return (f"A Ray worker runs {' with '.join(found)} (SHA-256 of every module and native source file of the "
            "package, whose code an actor runs): the actors would evaluate, clip or anchor rows "
            "with code the driver does not run, so they were refused before any row was sent to them. Install the "
            "driver's stan-dp on every node (or point the workers' PYTHONPATH at the driver's package, e.g. "
            "runtime_env={'env_vars': {'PYTHONPATH': ...}} in ray.init) and start again.")


def _clean(exc: BaseException) -> str:
    """An error's message with Stan's prefixes removed and data values withheld."""
    return withhold_data_values(clean_stan_message(str(exc)))


class ShardWorker:
    """The body of one Ray actor: one shard's native instance, built from the shard's rows.

    Not used directly: ``RayShardRows`` wraps it in ``ray.remote``. Every error leaves with data values withheld.
    """

    def __init__(self, identity: Mapping[str, Any]):
        # the driver's code identity first: an actor whose package or code differs is never sent a row and
        # answers ``load`` with the refusal
        self._refusal = identity_mismatch(identity, code_identity())
        limit_heap_retention()
        self._rows: Any = None
        self._anchor_rule: Any = None  # the rule that turns the rows' gradients at the anchor into a_i (set_anchor)
        self._anchor_theta: np.ndarray | None = None  # the released point the rows are anchored at
        self._received: dict[str, np.ndarray] = {}  # the row variables as sent piece by piece (receive_rows)

    def receive_rows(self, rows: Mapping[str, Any], offset: int, total: int) -> None:
        """Keep one piece of the shard's rows (``row_chunks``) at ``offset`` in arrays of ``total`` rows that
        ``load`` then builds from. Refused, like ``load``, when the actor runs other code than the driver."""
        if self._refusal is not None:
            raise BackendError(self._refusal)
        for name, piece in rows.items():
            piece = np.asarray(piece)
            kept = self._received.get(name)
            if kept is None:
                kept = self._received[name] = np.empty((int(total),) + piece.shape[1:], dtype=piece.dtype)
            kept[int(offset):int(offset) + len(piece)] = piece

    def read_rows(self, row_file: RowFile, first: int, stop: int) -> None:
        """Read and check the shard's rows first..stop-1 from the file the driver left them in (``row_file``: a
        path and the program's declarations, ``stan_dp.stan.row_tables.RowFile``) for ``load`` to build from: the
        rows never pass through the driver or Ray's object store. Refused, like ``load``, when the actor runs
        other code than the driver; a bad value raises ``RowTableError`` naming the column only."""
        if self._refusal is not None:
            raise BackendError(self._refusal)
        self._received = row_file.read(int(first), int(stop))

    def load(self, library_path: str, data: Mapping[str, Any], split: RowSplit, engine: str, threads: int,
             row_program: bool) -> tuple[int, int]:
        """Build the shard's native instance from its rows (those in ``data``, and those sent before by
        ``receive_rows``); returns ``size()``. Refused (``BackendError``, raised before the rows are sent: the
        driver calls ``identity_check`` first) when the actor runs other code."""
        if self._refusal is not None:
            raise BackendError(self._refusal)
        data, self._received = {**data, **self._received}, {}
        self._library = library_path
        self._split = split
        try:
            if engine == "shard":
                self._rows = ShardInstances(library_path, RowData(library_path, data, split), threads=threads)
            else:
                self._rows = RowInstances(library_path, dict(data), split, threads=threads, row_program=row_program)
        except NativeError as exc:
            raise NativeError(f"building the shard's instance failed: {_clean(exc)}") from None
        # the factorization check's rows, as the local engine chooses them (``check_range``: a bounded range that
        # straddles the first boundary of the shard's own native shards); only their copy is kept, so the shard's
        # rows as sent (in Ray's object store) are freed once the instance holds them
        n = int(split.n_rows)
        inner = shard_boundaries(n, default_shards(n, max(1, int(threads)))) if engine == "shard" else ()
        self._check_rows = check_range(n, inner)
        self._check_data = {name: np.array(value, copy=True) if name in split.row_variables else value
                            for name, value in
                            shard_data(data, split, self._check_rows.start, self._check_rows.stop).items()}
        self.release_memory()  # the build's temporary copy of the rows is gone: give its heap back
        return self.size()

    def release_memory(self) -> None:
        """Give the actor's freed heap memory back to the system (after a build or a phase that evaluated all of
        its rows at once; glibc otherwise keeps the freed blocks resident)."""
        release = getattr(self._rows, "release_memory", None)
        if release is not None:
            release()

    def identity_check(self) -> bool:
        """True when the actor runs the driver's package version and code, else ``BackendError``."""
        if self._refusal is not None:
            raise BackendError(self._refusal)
        return True

    def pid(self) -> int:
        """The actor's process id (tests kill it to simulate a lost worker)."""
        return os.getpid()

    def size(self) -> tuple[int, int]:
        """(rows held, unconstrained dimension)."""
        return self._rows.n_rows, self._rows.dim

    def log_prior(self, theta: np.ndarray, gradient: bool) -> tuple[float, np.ndarray | None]:
        """The data-free log prior (when the driver holds no prior instance of its own)."""
        try:
            return self._rows.log_prior(theta, gradient=gradient)
        except NativeError as exc:
            raise NativeError(_clean(exc)) from None

    def log_lik(self, theta: np.ndarray, rows: np.ndarray | None) -> np.ndarray:
        """l_i(theta) of the shard's rows ``rows`` (local indices; all when None)."""
        try:
            return self._rows.log_lik(theta, rows)
        except NativeError as exc:
            raise NativeError(_clean(exc)) from None

    def log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(l_i(theta), grad l_i(theta)) of the shard's rows ``rows`` (local indices; all when None)."""
        try:
            return self._rows.log_lik_grad(theta, rows)
        except NativeError as exc:
            raise NativeError(_clean(exc)) from None

    def set_anchor(self, theta_hat: np.ndarray, rule: Any) -> None:
        """Anchor the shard's rows at ``theta_hat`` (a released point): anchored sums then subtract the rows' anchor
        gradients a_i = ``rule``(g_i(theta_hat)) (``rule``: ``stan_dp.phases.anchor.anchor_row_gradients``, passed
        by the driver). They are recomputed for the rows of each call (``_anchor_rows``) rather than kept: an
        (N, dim) matrix would hold about as many bytes as the rows themselves, for about a fifth more time per
        anchored call. Nothing leaves the actor."""
        self._anchor_rule = rule
        self._anchor_theta = np.array(theta_hat, dtype=float, copy=True)

    def _blocks(self) -> Iterator[np.ndarray]:
        """The shard's rows as local index blocks of at most ``ALL_ROWS_BLOCK`` rows, in order."""
        n = int(self._rows.n_rows)
        for first in range(0, n, ALL_ROWS_BLOCK):
            yield np.arange(first, min(n, first + ALL_ROWS_BLOCK), dtype=np.int64)

    def _gradients(self, theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The gradients of the shard's rows ``rows`` at ``theta``, (rows, dim)."""
        _, grads = self.log_lik_grad(theta, rows)
        return np.asarray(grads, dtype=float).reshape(len(rows), -1)

    def _anchor_rows(self, rows: np.ndarray) -> np.ndarray:
        """The anchor gradients ``rule``(g_i(theta_hat)) of the shard's rows ``rows`` (the same numbers for a row
        whatever the call: the same native code at the same released point)."""
        if self._anchor_theta is None:
            raise RuntimeError("an anchored sum was asked of a shard actor that holds no anchor")
        return self._anchor_rule(self._gradients(self._anchor_theta, rows))

    def anchor_sums(self, theta_hat: np.ndarray, bound: float, statistics: Any, rule: Any, count: bool,
                    squared: bool) -> Any:
        """The shard's part of the anchor phase's statistics at ``theta_hat`` (a released point): ``statistics``
        (``mechanisms.anchor_sums``, passed by the driver) of its rows' gradients there, formed block by block
        and added (``AnchorSums.add``); the rows are then anchored there (``set_anchor``). Only the small
        statistics leave the actor; the driver adds the parts and the noise."""
        parts = [statistics(self._gradients(theta_hat, block), bound, count=count, squared=squared)
                 for block in self._blocks()]
        self.set_anchor(theta_hat, rule)
        return mechanisms.AnchorSums.add(parts)

    def anchor_theta(self) -> np.ndarray | None:
        """The point the rows are anchored at (a released point), or None."""
        return self._anchor_theta

    def clipped_gradient_sum(self, theta: np.ndarray, rows: np.ndarray | None, bound: float, clip: Any,
                             anchored: bool = False) -> np.ndarray:
        """``clip`` (``mechanisms.clipped_gradient_sum``, passed by the driver: a sum of per-row clips) of the
        gradients of the shard's rows ``rows`` (``anchored``: of g_i(theta) - a_i, the anchor gradients of
        ``set_anchor``): the shard's partial clipped sum, shape (dim,). All rows (None) are summed block by
        block, so a full-batch call holds one block's gradients at a time. Never released: the driver adds the
        parts and the noise."""
        total = None
        for block in (self._blocks() if rows is None else [np.asarray(rows, dtype=np.int64)]):
            grads = self._gradients(theta, block)
            if anchored:
                grads = grads - self._anchor_rows(block)
            part = np.asarray(clip(grads, bound), dtype=float)
            total = part if total is None else total + part
        return total if total is not None else np.zeros(int(self._rows.dim))

    def check_factorization(self, points: int) -> bool:
        """The factorization check of ``stan_dp.stan.factorization.check_factorization`` on this shard's rows (the full
        program on the shard against the sum of its row terms); raises ``ModelError`` (no data values)."""
        prior_text = to_json(prior_data(self._split, self._check_data))
        full = bridgestan.StanModel(self._library, to_json(self._check_data), warn=False)
        prior = bridgestan.StanModel(self._library, prior_text, warn=False)

        class _Shard:  # the part of StanRowLikelihood the check reads
            dim = self._rows.dim
            split = self._split
            row_log_lik = staticmethod(self._rows.log_lik)

        check_factorization(_Shard(), full, prior, points=points, rows=self._check_rows)
        return True


class RayShardRows:
    """The per-row terms of all rows, computed by Ray actors that each hold one contiguous shard.

    Answers what ``StanRowLikelihood`` asks of a native engine: ``n_rows``, ``dim``, ``engine``,
    ``log_prior(theta, gradient)``, ``log_lik(theta, rows)``, ``log_lik_grad(theta, rows)`` and ``set_threads``.
    Rows are global indices; the driver maps them to (shard, local index) and returns values in the order asked.

    Args:
        library_path: the compiled model library (the same path must hold it on every node).
        data: the data (dict) with the row variables of all rows.
        split: the row split of ``data``.
        engine: "shard" or "per-row": the native engine each actor builds (chosen on the driver from the program
            and the split, public).
        row_program: with the per-row engine, build the row instances from the library's row program (the caller
            checked it was derived for ``split``).
        workers: number of actors (= shards); capped at the number of rows.
        threads: native threads per actor (each actor reserves that many Ray CPUs; default 1).
        address: a Ray cluster address ("auto", "ray://host:port", "host:port") or None, which connects to the
            running cluster of this process or starts a local one (``ray.init()``). When this process is already
            connected to Ray, that connection is used and a given address draws a warning.

    Raises:
        ImportError: Ray is not installed.
        BackendError: an actor runs another stan-dp version or other clip code than the driver (at start-up,
            before any row is sent: ``code_identity``), or an actor died or its node left the cluster during a call.
    """

    engine = ""
    backend = "ray"

    def __init__(self, library_path: str, data: Mapping[str, Any], split: RowSplit, *, engine: str = "shard",
                 row_program: bool = False, workers: int | None = None, threads: int | None = None, address: str | None = None):
        if engine not in ("shard", "per-row"):
            raise ValueError(f"engine must be 'shard' or 'per-row', not {engine!r}")
        ray = require_ray()
        if not ray.is_initialized():
            start_ray(ray, address)
        elif address is not None:
            warn(f"Ray is already connected in this process, so ray_address={address!r} is not used: the actors start "
                 "on the cluster it is connected to. Call ray.shutdown() first to connect elsewhere.")
        self._ray = ray
        self.engine = engine
        self.n_rows = int(split.n_rows)
        self.threads = max(1, int(threads or 1))
        workers = int(workers) if workers is not None else max(1, int(ray.cluster_resources().get("CPU", 1))
                                                                // self.threads)
        self.starts = shard_starts(self.n_rows, workers)
        self.workers = len(self.starts) - 1
        # no task events: Ray's control store would keep a record of every call (tens of thousands per run),
        # growing by hundreds of MB over a long run
        remote = ray.remote(num_cpus=self.threads, max_concurrency=ACTOR_CONCURRENCY, max_restarts=0,
                            enable_task_events=False)(ShardWorker)
        identity = code_identity()
        self._actors = [remote.remote(identity) for _ in range(self.workers)]
        refs = [a.identity_check.remote() for a in self._actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=START_TIMEOUT)
        if len(ready) < len(refs):
            self.close()
            raise BackendError(
                f"The Ray cluster did not start {self.workers} shard actors of {self.threads} CPU(s) each within "
                f"{START_TIMEOUT:g} s (CPUs available now: {ray.available_resources().get('CPU', 0):g}). Ask for "
                "fewer workers or threads, or free the cluster's CPUs (other stan-dp likelihoods hold actors until "
                "they are closed).")
        try:  # an actor that runs other code than the driver refuses here (BackendError), before any row is sent
            self._gather(refs, "the code identity check")
            # the rows go piece by piece, one piece in Ray's object store at a time (shared memory on the driver's
            # node, whose pages stay resident once touched), and the shards are built one by one
            # rows left in their Parquet file (``read_row_data(..., keep=False)``): each actor reads its own
            row_file = rows_left_in_file(data, split.row_variables)
            sizes = []
            for s in range(self.workers):
                first, stop = int(self.starts[s]), int(self.starts[s + 1])
                part = replace(split, n_rows=stop - first)
                public = shard_public(data, split, first, stop)
                if row_file is not None:
                    self._gather([self._actors[s].read_rows.remote(row_file, first, stop)], "reading the rows")
                for offset, piece in (row_chunks(data, split, first, stop) if row_file is None else ()):
                    self._gather([self._actors[s].receive_rows.remote(piece, offset, stop - first)],
                                 "sending the rows")
                load = self._actors[s].load.remote(library_path, public, part, engine, self.threads,
                                                   bool(row_program))
                sizes += self._gather([load], "building the shard instances")
        except BaseException:
            self.close()
            raise
        self.dim = int(sizes[0][1])
        self._prior = self._driver_prior(library_path, data, split)
        self._lock = threading.Lock()

    # -- construction ---------------------------------------------------------------------------------------
    def _driver_prior(self, library_path: str, data: Mapping[str, Any], split: RowSplit) -> Any:
        """A data-free (zero-row) shard instance on the driver for log p0, or None (then actor 0 answers)."""
        if self.engine != "shard":
            return None
        empty = replace(split, n_rows=0)
        try:
            return ShardInstances(library_path, RowData(library_path, prior_data(split, data), empty), threads=1)
        except NativeError:
            return None

    def check_factorization(self, points: int = 4) -> None:
        """Run the factorization check on every shard (each actor returns only whether it passed)."""
        self._gather([a.check_factorization.remote(points) for a in self._actors], "the factorization check")

    def close(self) -> None:
        """Stop the actors (their rows and instances go with them)."""
        for actor in getattr(self, "_actors", []):
            try:
                self._ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        self._actors = []

    # -- dispatch -------------------------------------------------------------------------------------------
    def _gather(self, refs: Sequence[Any], what: str, shards: Sequence[int] | None = None) -> list[Any]:
        """ray.get with the backend's error rules: a lost actor or node becomes BackendError; an error raised in
        an actor comes back as its own type with its (data-free) message only."""
        ray = self._ray
        try:
            return ray.get(list(refs))
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(exc.cause, Exception) else None
            if cause is not None and not isinstance(cause, ray.exceptions.RayError):
                raise type(cause)(*cause.args) from None
            raise NativeError(f"a Ray worker failed during {what}") from None
        except ray.exceptions.RayError as exc:
            raise BackendError(
                f"The Ray backend lost a worker during {what} ({type(exc).__name__}: an actor holding a shard of "
                f"the rows died or its node left the cluster); the run was stopped. {RERUN_NOTE}") from None

    def _split_rows(self, rows: Any) -> list[tuple[int, np.ndarray | None, np.ndarray | None]]:
        """(shard, local indices or None for all its rows, positions in the request or None) per shard asked."""
        if rows is None:
            return [(s, None, None) for s in range(self.workers)]
        idx = np.asarray(rows).reshape(-1).astype(np.int64, casting="same_kind")
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_rows):
            raise NativeError(f"row index out of range: the data have {self.n_rows} rows")
        if idx.size > 1 and bool(np.all(idx[1:] >= idx[:-1])):  # sorted (a minibatch): each shard is one slice
            cuts = np.searchsorted(idx, self.starts, side="left")
            return [(s, idx[cuts[s]:cuts[s + 1]] - self.starts[s], np.arange(cuts[s], cuts[s + 1]))
                    for s in range(self.workers) if cuts[s + 1] > cuts[s]]
        which = np.searchsorted(self.starts, idx, side="right") - 1
        out = []
        for s in np.unique(which):
            positions = np.flatnonzero(which == s)
            out.append((int(s), idx[positions] - self.starts[s], positions))
        return out

    def _theta(self, theta: Any) -> np.ndarray:
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        if theta.shape != (self.dim,):
            raise ValueError(f"theta must have shape ({self.dim},), got {theta.shape}")
        return theta

    def log_prior(self, theta: np.ndarray, gradient: bool = False) -> tuple[float, np.ndarray | None]:
        """log p0(theta) (Jacobian included) and, when asked, its gradient (data-free)."""
        theta = self._theta(theta)
        if self._prior is not None:
            return self._prior.log_prior(theta, gradient=gradient)
        return self._gather([self._actors[0].log_prior.remote(theta, gradient)], "the log prior")[0]

    def log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """l_i(theta) for ``rows`` (global indices; all rows when None), in the order asked."""
        theta = self._theta(theta)
        parts = self._split_rows(rows)
        values = self._gather([self._actors[s].log_lik.remote(theta, local) for s, local, _ in parts],
                              "a log-likelihood evaluation")
        if rows is None:
            return np.concatenate(values) if values else np.empty(0)
        out = np.empty(sum(len(p) for _, _, p in parts))
        for (_, _, positions), part in zip(parts, values):
            out[positions] = part
        return out

    def log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(l_i(theta), grad l_i(theta)) for ``rows`` (global indices; all when None), shapes (n,), (n, dim)."""
        theta = self._theta(theta)
        parts = self._split_rows(rows)
        results = self._gather([self._actors[s].log_lik_grad.remote(theta, local) for s, local, _ in parts],
                               "a gradient evaluation")
        if rows is None:
            if not results:
                return np.empty(0), np.empty((0, self.dim))
            return (np.concatenate([v for v, _ in results]), np.concatenate([g for _, g in results]))
        n = sum(len(p) for _, _, p in parts)
        values, grads = np.empty(n), np.empty((n, self.dim))
        for (_, _, positions), (v, g) in zip(parts, results):
            values[positions] = v
            grads[positions] = g
        return values, grads

    def partial_clipped_gradient_sums(self, theta: np.ndarray, rows: np.ndarray | None, bound: float,
                                      clip: Any, anchored: bool = False) -> list[np.ndarray]:
        """Per shard, in shard order, ``clip(gradients of its requested rows, bound)`` computed by its actor (only
        a vector of length dim per shard crosses the wire). ``stan_dp.privacy.mechanisms.rows_clipped_gradient_sum``
        adds them and the caller adds the noise; the parts are never stored. ``anchored``: the gradients less
        the anchor gradients each actor recomputes (``set_anchor``)."""
        theta = self._theta(theta)
        parts = self._split_rows(rows)
        return self._gather([self._actors[s].clipped_gradient_sum.remote(theta, local, float(bound), clip, anchored)
                             for s, local, _ in parts], "a clipped gradient sum")

    def set_anchor(self, theta_hat: np.ndarray, rule: Any) -> None:
        """Each actor anchors its rows at ``theta_hat`` (a released point): anchored clipped sums then subtract
        the rows' anchor gradients ``rule``(g_i(theta_hat)), recomputed where the rows live for the rows of each
        call, so no per-row gradient crosses the wire during the chains. Anchoring only records the point and the
        rule, so it is sent again even when ``partial_anchor_sums`` anchored the rows there already."""
        theta_hat = self._theta(theta_hat)
        self._gather([a.set_anchor.remote(theta_hat, rule) for a in self._actors], "anchoring the rows")

    def partial_anchor_sums(self, theta_hat: np.ndarray, bound: float, statistics: Any, rule: Any, *,
                            count: bool, squared: bool) -> list[Any]:
        """Per shard, in shard order, ``statistics`` (``mechanisms.anchor_sums``) of its rows' gradients at the
        released point ``theta_hat``, computed by its actor, which then anchors its rows there with ``rule``
        (``set_anchor``): the anchor phase's releases at theta_hat need no per-row gradient on the driver. The
        caller adds the parts (``mechanisms.AnchorSums.add``) and the noise."""
        theta_hat = self._theta(theta_hat)
        return self._gather([a.anchor_sums.remote(theta_hat, float(bound), statistics, rule, bool(count),
                                                  bool(squared)) for a in self._actors],
                            "the statistics at the anchor")

    def set_threads(self, threads: int) -> None:
        """Kept for the engine interface: the actors' threads are fixed when they are built (``threads``)."""

    def release_memory(self) -> None:
        """Each actor gives its freed heap memory back to the system (``StanRowLikelihood.release_memory``: after
        the anchor phase, which evaluated all rows at once)."""
        self._gather([a.release_memory.remote() for a in self._actors], "a status call")

    def actor_pids(self) -> list[int]:
        """The process ids of the actors, in shard order (tests use them to kill one)."""
        return self._gather([a.pid.remote() for a in self._actors], "a status call")
