"""ctypes bindings to a model library's row API, and the Stan implementation of ``RowLikelihood``.

Two engines answer the same calls: ``ShardInstances`` (one instance of the shard program per contiguous range
of rows, built from the NumPy arrays through ``RowData``; ``stan_dp.stan.shard_program``) and ``RowInstances`` (one
instance per row, l_i = lp_i - lp_0; the fallback). One native call per request: the library evaluates l_i(theta)
(and gradients) for an index set of rows in parallel TBB threads and writes into NumPy buffers owned here.
ctypes releases the GIL during the call, so chains running in Python threads evaluate concurrently.
"""
from __future__ import annotations

import ctypes
import functools
import os
import threading
from typing import Any, Mapping

import numpy as np

from ..likelihood import evaluation_digests
from .data import RowSplit, to_json

_ptr = ctypes.c_void_p
_err = ctypes.POINTER(ctypes.c_char_p)

#: Calls with at most this many rows write into per-thread scratch buffers whose addresses are known, and return
#: copies: taking the address of a fresh NumPy array through ctypes costs about 2 us per array, more than the
#: rows of a small minibatch. Larger calls allocate their outputs (the address cost is then negligible).
SCRATCH_ROWS = 4096


class NativeError(RuntimeError):
    """An error reported by the compiled model (message from Stan)."""


def _bind_row_api(lib: ctypes.CDLL, prefix: str) -> None:
    """Signatures of the functions both row engines export (``sdp_rows_*``, ``sdp_shards_*``). Pointer arguments
    are plain addresses (ints): the callers pass the addresses of C-contiguous float64 / int64 buffers."""
    for name, restype, argtypes in (
        ("destruct", None, [ctypes.c_void_p]),
        ("count", ctypes.c_int64, [ctypes.c_void_p]),
        ("dim", ctypes.c_int, [ctypes.c_void_p]),
        ("set_threads", None, [ctypes.c_void_p, ctypes.c_int]),
        ("log_prior", ctypes.c_int, [_ptr, _ptr, _ptr, _ptr, _err]),
        ("log_lik", ctypes.c_int, [_ptr, _ptr, _ptr, ctypes.c_int64, _ptr, _err]),
        ("log_lik_grad", ctypes.c_int, [_ptr, _ptr, _ptr, ctypes.c_int64, _ptr, _ptr, _err]),
    ):
        function = getattr(lib, f"{prefix}_{name}")
        function.restype, function.argtypes = restype, argtypes


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the row API signatures on a loaded library (idempotent)."""
    if getattr(lib, "_stan_dp_bound", False):
        return lib
    lib.sdp_rows_construct.restype = ctypes.c_void_p
    lib.sdp_rows_construct.argtypes = [
        ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, ctypes.c_int, _err
    ]
    _bind_row_api(lib, "sdp_rows")
    lib.bs_free_error_msg.restype = None
    lib.bs_free_error_msg.argtypes = [ctypes.c_void_p]
    lib.sdp_data_construct.restype = ctypes.c_void_p
    lib.sdp_data_construct.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, _ptr, _ptr, _ptr, _ptr,
                                       _err]
    lib.sdp_data_destruct.restype = None
    lib.sdp_data_destruct.argtypes = [ctypes.c_void_p]
    lib.sdp_program_construct.restype = ctypes.c_void_p
    lib.sdp_program_construct.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                                          ctypes.c_uint, _err]
    lib.sdp_program_destruct.restype = None
    lib.sdp_program_destruct.argtypes = [ctypes.c_void_p]
    lib.sdp_program_dim.restype = ctypes.c_int
    lib.sdp_program_dim.argtypes = [ctypes.c_void_p]
    lib.sdp_program_log_density.restype = ctypes.c_int
    lib.sdp_program_log_density.argtypes = [ctypes.c_void_p, _ptr, ctypes.c_int, _ptr, _err]
    lib.sdp_release_memory.restype = ctypes.c_int
    lib.sdp_release_memory.argtypes = []
    lib.sdp_shards_construct.restype = ctypes.c_void_p
    lib.sdp_shards_construct.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_int, _err]
    lib.sdp_shards_shards.restype = ctypes.c_int
    lib.sdp_shards_shards.argtypes = [ctypes.c_void_p]
    _bind_row_api(lib, "sdp_shards")
    lib._stan_dp_bound = True
    return lib


def _raise(lib: ctypes.CDLL, err: ctypes.c_char_p, where: str) -> None:
    message = err.value.decode("utf-8", "replace") if err.value else f"unknown error in {where}"
    if err.value:
        lib.bs_free_error_msg(ctypes.cast(err, ctypes.c_void_p))
    raise NativeError(message)


def default_threads() -> int:
    """All cores available to this process."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


class _Scratch:
    """One thread's reusable buffers for small calls, with their addresses taken once."""

    def __init__(self, dim: int):
        self.dim = dim
        self.theta = np.empty(dim)
        self.theta_ptr = _address(self.theta)
        self.value = ctypes.c_double()
        self.value_ref = ctypes.byref(self.value)
        self.err = ctypes.c_char_p()
        self.err_ref = ctypes.byref(self.err)
        self.capacity = 0
        self._grow(64)

    def _grow(self, rows: int) -> None:
        self.capacity = rows
        self.idx = np.empty(rows, dtype=np.int64)
        self.values = np.empty(rows)
        self.grads = np.empty(rows * self.dim)
        self.idx_ptr, self.values_ptr, self.grads_ptr = map(_address, (self.idx, self.values, self.grads))
        self.prior_grad = np.empty(self.dim)
        self.prior_grad_ptr = _address(self.prior_grad)

    def reserve(self, rows: int) -> None:
        if rows > self.capacity:
            self._grow(max(rows, 2 * self.capacity))


class _NativeRows:
    """The calls shared by both engines: l_i(theta) and gradients for an index set, and the log prior, through
    one native handle (per-row instances or shards). Calls from several Python threads at once are safe (ctypes
    releases the GIL; each thread has its own scratch buffers, and the native side keeps no per-call state in the
    handle)."""

    #: which engine the handle is: "per-row" or "shard"
    engine = ""
    _prefix = ""

    def _bind_calls(self, lib: ctypes.CDLL, handle: int) -> None:
        self._lib = lib
        self._handle = ctypes.c_void_p(handle)
        self.n_rows = int(getattr(lib, self._prefix + "count")(self._handle))
        self.dim = int(getattr(lib, self._prefix + "dim")(self._handle))
        self._local = threading.local()
        self._log_lik_fn = getattr(lib, self._prefix + "log_lik")
        self._log_lik_grad_fn = getattr(lib, self._prefix + "log_lik_grad")
        self._log_prior_fn = getattr(lib, self._prefix + "log_prior")
        self._set_threads_fn = getattr(lib, self._prefix + "set_threads")
        self._destruct_fn = getattr(lib, self._prefix + "destruct")

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._destruct_fn(handle)
            self._handle = None

    def release_memory(self) -> None:
        """Give the process's freed heap memory back to the system (``release_memory``)."""
        self._lib.sdp_release_memory()

    def set_threads(self, threads: int) -> None:
        """Number of threads used by each row evaluation."""
        self.threads = max(1, int(threads))
        self._set_threads_fn(self._handle, self.threads)

    def _scratch(self) -> _Scratch:
        try:
            return self._local.scratch
        except AttributeError:
            self._local.scratch = _Scratch(self.dim)
            return self._local.scratch

    def _load_theta(self, scratch: _Scratch, theta: Any) -> None:
        """Copy theta into the thread's buffer, checking its shape."""
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.dim,):
            raise ValueError(f"theta must have shape ({self.dim},), got {theta.shape}")
        scratch.theta[:] = theta

    def _load_rows(self, scratch: _Scratch, rows: Any) -> tuple[int | None, int, np.ndarray | None]:
        """(address of the row indices or None for all rows, their number, the index array if it is not the
        scratch buffer). Indices are checked against the row count by the native call."""
        if rows is None:
            return None, self.n_rows, None
        idx = np.asarray(rows)
        if idx.ndim != 1:
            idx = idx.reshape(-1)
        n = idx.shape[0]
        if n <= SCRATCH_ROWS:
            scratch.reserve(n)
            scratch.idx[:n] = idx  # casts to int64 (refusing values that do not fit)
            return scratch.idx_ptr, n, None
        idx = np.ascontiguousarray(idx, dtype=np.int64)
        return _address(idx), n, idx

    def _check(self, rc: int, scratch: _Scratch, where: str) -> None:
        if rc:
            err, scratch.err = scratch.err, ctypes.c_char_p()
            scratch.err_ref = ctypes.byref(scratch.err)
            _raise(self._lib, err, where)

    def log_prior(self, theta: np.ndarray, gradient: bool = False) -> tuple[float, np.ndarray | None]:
        """log p0(theta) (Jacobian included) and, when asked, its gradient."""
        scratch = self._scratch()
        self._load_theta(scratch, theta)
        grad_ptr = scratch.prior_grad_ptr if gradient else None
        rc = self._log_prior_fn(self._handle, scratch.theta_ptr, scratch.value_ref, grad_ptr, scratch.err_ref)
        self._check(rc, scratch, self._prefix + "log_prior")
        return scratch.value.value, (scratch.prior_grad.copy() if gradient else None)

    def log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """l_i(theta) for ``rows`` (all rows when None)."""
        scratch = self._scratch()
        self._load_theta(scratch, theta)
        idx_ptr, n, _keep = self._load_rows(scratch, rows)
        if n <= SCRATCH_ROWS:
            scratch.reserve(n)
            rc = self._log_lik_fn(self._handle, scratch.theta_ptr, idx_ptr, n, scratch.values_ptr, scratch.err_ref)
            self._check(rc, scratch, self._prefix + "log_lik")
            return scratch.values[:n].copy()
        out = np.empty(n)
        rc = self._log_lik_fn(self._handle, scratch.theta_ptr, idx_ptr, n, _address(out), scratch.err_ref)
        self._check(rc, scratch, self._prefix + "log_lik")
        return out

    def log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(l_i(theta), grad l_i(theta)) for ``rows`` (all rows when None), shapes (n,) and (n, dim)."""
        scratch = self._scratch()
        self._load_theta(scratch, theta)
        idx_ptr, n, _keep = self._load_rows(scratch, rows)
        if n <= SCRATCH_ROWS:
            scratch.reserve(n)
            rc = self._log_lik_grad_fn(self._handle, scratch.theta_ptr, idx_ptr, n, scratch.values_ptr,
                                       scratch.grads_ptr, scratch.err_ref)
            self._check(rc, scratch, self._prefix + "log_lik_grad")
            return scratch.values[:n].copy(), scratch.grads[:n * self.dim].reshape(n, self.dim).copy()
        values = np.empty(n)
        grads = np.empty((n, self.dim))
        rc = self._log_lik_grad_fn(self._handle, scratch.theta_ptr, idx_ptr, n, _address(values), _address(grads),
                                   scratch.err_ref)
        self._check(rc, scratch, self._prefix + "log_lik_grad")
        return values, grads


class RowInstances(_NativeRows):
    """The prior instance and one instance per row, built by one native call from the data as JSON.

    With ``row_program=True`` the row instances come from the library's row program (``stan_dp.stan.row_program``),
    which the caller has checked was derived for ``split``.
    """

    engine = "per-row"
    _prefix = "sdp_rows_"

    def __init__(self, library_path: str, data: Mapping[str, Any], split: RowSplit, threads: int | None = None,
                 seed: int = 0, row_program: bool = False):
        lib = _bind(ctypes.CDLL(library_path))
        err = ctypes.c_char_p()
        self.threads = threads or default_threads()
        self.row_program = bool(row_program)
        handle = lib.sdp_rows_construct(
            to_json(data).encode(), split.count_name.encode(), ",".join(split.row_variables).encode(),
            seed, self.threads, int(row_program), ctypes.byref(err),
        )
        if not handle:
            _raise(lib, err, "sdp_rows_construct")
        self._bind_calls(lib, handle)


class RowDataError(ValueError):
    """A row variable that the binary data path cannot hold (not an array of reals or ints)."""


class RowData:
    """A data set as the native layer reads it without JSON: the public variables (and the row count) as Stan
    JSON text, the row variables as C-contiguous float64 / int64 arrays whose leading dimension is the row count.

    The arrays are kept alive by this object; native instances copy what they need when they are built, so the
    object can be dropped afterwards.
    """

    def __init__(self, library_path: str, data: Mapping[str, Any], split: RowSplit):
        self._lib = _bind(ctypes.CDLL(library_path))
        self.split = split
        public = {name: data[name] for name in (split.count_name, *split.public_variables)}
        self.arrays: list[np.ndarray] = []
        kinds, ndims, shapes = [], [], []
        for name in split.row_variables:
            try:
                array = np.asarray(data[name])
            except (TypeError, ValueError) as exc:
                raise RowDataError(f"row variable {name} is not a rectangular array") from exc
            if array.dtype.kind in "biu":
                array, kind = np.ascontiguousarray(array, dtype=np.int64), 1
            elif array.dtype.kind == "f":
                array, kind = np.ascontiguousarray(array, dtype=np.float64), 0
            else:
                raise RowDataError(f"row variable {name} holds {array.dtype} values, not reals or ints")
            self.arrays.append(array)
            kinds.append(kind)
            ndims.append(array.ndim)
            shapes.extend(array.shape)
        self._buffers = (ctypes.c_void_p * max(1, len(self.arrays)))(*[_address(a) for a in self.arrays])
        self._kinds = np.asarray(kinds or [0], dtype=np.intc)
        self._ndims = np.asarray(ndims or [0], dtype=np.intc)
        self._shapes = np.asarray(shapes or [0], dtype=np.int64)
        err = ctypes.c_char_p()
        handle = self._lib.sdp_data_construct(
            to_json(public).encode(), split.count_name.encode(), ",".join(split.row_variables).encode(),
            ctypes.addressof(self._buffers), _address(self._kinds), _address(self._ndims), _address(self._shapes),
            ctypes.byref(err))
        if not handle:
            _raise(self._lib, err, "sdp_data_construct")
        self._handle = ctypes.c_void_p(handle)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._lib.sdp_data_destruct(handle)
            self._handle = None

    def program(self, program: str = "user", first: int = 0, count: int | None = None, seed: int = 0
                ) -> "ProgramInstance":
        """An instance of the library's ``program`` ("user", "row" or "shard") on rows [first, first + count)."""
        kinds = {"user": 0, "row": 1, "shard": 2}
        count = self.split.n_rows - first if count is None else count
        return ProgramInstance(self._lib, self._handle, kinds[program], first, count, seed)


def release_memory(library_path: str) -> None:
    """Give freed heap memory back to the system (after large temporary instances are destroyed)."""
    _bind(ctypes.CDLL(library_path)).sdp_release_memory()


class ProgramInstance:
    """One model instance built from ``RowData`` (e.g. the user's unchanged program on all rows, for the
    factorization check): the unconstrained dimension and the log density with constants."""

    def __init__(self, lib: ctypes.CDLL, data_handle: ctypes.c_void_p, kind: int, first: int, count: int,
                 seed: int):
        self._lib = lib
        err = ctypes.c_char_p()
        handle = lib.sdp_program_construct(data_handle, kind, first, count, seed, ctypes.byref(err))
        if not handle:
            _raise(lib, err, "sdp_program_construct")
        self._handle = ctypes.c_void_p(handle)

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._lib.sdp_program_destruct(handle)
            self._handle = None

    def param_unc_num(self) -> int:
        """Number of unconstrained parameters."""
        return int(self._lib.sdp_program_dim(self._handle))

    def log_density(self, theta: np.ndarray, *, propto: bool = False, jacobian: bool = True) -> float:
        """Log density at unconstrained ``theta`` with constants (``propto`` must be False)."""
        if propto:
            raise ValueError("ProgramInstance evaluates the log density with constants only")
        x = np.ascontiguousarray(theta, dtype=np.float64)
        if x.shape != (self.param_unc_num(),):
            raise ValueError(f"theta must have shape ({self.param_unc_num()},), got {x.shape}")
        value = ctypes.c_double()
        err = ctypes.c_char_p()
        rc = self._lib.sdp_program_log_density(self._handle, _address(x), int(jacobian), ctypes.byref(value),
                                               ctypes.byref(err))
        if rc:
            _raise(self._lib, err, "sdp_program_log_density")
        return value.value


#: Default number of shards: one per thread, and at most this many rows per shard. Building a shard copies its
#: rows once more for a moment (Stan reads them as vectors before its own members are filled), in as many shards
#: at once as there are threads: small shards keep that transient small (about threads x 10 MiB for five
#: columns), and an evaluation does not depend on the layout (each row's terms are the same in any shard).
MAX_SHARD_ROWS = 1 << 18


def default_shards(n_rows: int, threads: int) -> int:
    """The shard count ``ShardInstances`` uses by default: one per thread, more when a shard would exceed
    ``MAX_SHARD_ROWS`` rows."""
    return max(int(threads), -(-int(n_rows) // MAX_SHARD_ROWS))


def shard_boundaries(n_rows: int, shards: int) -> list[int]:
    """The first row of each shard but the first, as the native engine lays them out (shard s holds rows
    [n s / S, n (s + 1) / S), S = min(shards, n)); used to place the factorization check's rows
    (``stan_dp.stan.factorization.check_range``)."""
    n = int(n_rows)
    count = max(1, min(int(shards), n)) if n else 0
    return [n * s // count for s in range(1, count)]


class ShardInstances(_NativeRows):
    """The prior instance and one shard instance per contiguous range of rows (``stan_dp.stan.shard_program``),
    built from ``RowData`` in parallel threads. Each shard holds its rows once and evaluates any set of them in one
    pass; one call serves any index set of all rows."""

    engine = "shard"
    _prefix = "sdp_shards_"

    def __init__(self, library_path: str, data: RowData, threads: int | None = None, shards: int | None = None,
                 seed: int = 0):
        lib = _bind(ctypes.CDLL(library_path))
        self.threads = threads or default_threads()
        n = data.split.n_rows
        shards = shards or default_shards(n, self.threads)
        err = ctypes.c_char_p()
        handle = lib.sdp_shards_construct(data._handle, int(shards), seed, self.threads, ctypes.byref(err))
        if not handle:
            _raise(lib, err, "sdp_shards_construct")
        self._bind_calls(lib, handle)
        self.shards = int(lib.sdp_shards_shards(self._handle))


def shapes_from_names(names: list[str]) -> dict[str, tuple[int, ...]]:
    """Stan flat names ('a', 'b.1', 'L.2.1', ...) to base names and shapes, in declaration order."""
    shapes: dict[str, tuple[int, ...]] = {}
    for flat in names:
        base, *idx = flat.split(".")
        dims = tuple(int(i) for i in idx)
        old = shapes.get(base)
        shapes[base] = dims if old is None else tuple(max(a, b) for a, b in zip(old, dims))
    return shapes


class StanRowLikelihood:
    """``RowLikelihood`` of a compiled Stan program: per-row terms from the native engine (shard instances, or
    one instance per row as the fallback), the data-free prior and the release of parameters from the prior
    instance (N = 0).

    Released draws are constrained with the prior instance, so transformed parameters and generated
    quantities (released only when ``include_tp`` / ``include_gq`` are set) can never read private rows.

    ``data_digests``: the digests of the data's values by variable name (``stan_dp.stan.digests.value_digests``;
    PRIVATE), set by ``DPStanModel`` when a checkpoint is written or resumed; ``row_digests`` returns them (or a
    digest of the rows' evaluations when they were not set).
    """

    #: variable name -> SHA-256 of its values (PRIVATE), or None
    data_digests: dict[str, str] | None = None

    def __init__(self, instances: "_NativeRows", prior_model: Any, *, split: RowSplit, engine_reason: str = ""):
        self._rows = instances
        self._prior = prior_model
        self.split = split
        #: which engine computes the rows: "shard" (one instance per shard, stan_dp.stan.shard_program) or "per-row"
        #: (one instance per row, the fallback); a function of the program and the split, not of the rows
        self.row_engine = instances.engine
        #: why the per-row fallback was taken ("" for the shard engine)
        self.row_engine_reason = engine_reason
        self.n_rows = instances.n_rows
        self.dim = instances.dim
        self.include_tp = False
        self.include_gq = False
        self._gq_rng = None
        self._shapes = shapes_from_names(self._names())

    # -- release configuration ----------------------------------------------------------------------------
    def set_release(self, *, include_tp: bool = False, include_gq: bool = False, seed: int | None = None) -> None:
        """Choose what ``constrain`` releases; generated quantities draw from a Stan RNG seeded by ``seed``."""
        self.include_tp, self.include_gq = bool(include_tp), bool(include_gq)
        if include_gq:
            seed = int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else int(seed)
            self._gq_rng = self._prior.new_rng(seed % (2**31))
        self._shapes = shapes_from_names(self._names())

    @property
    def prior_model(self) -> Any:
        """The data-free (N = 0) BridgeStan instance: parameter names, constraining and unconstraining."""
        return self._prior

    def _names(self) -> list[str]:
        return self._prior.param_names(include_tp=self.include_tp, include_gq=self.include_gq)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        return dict(self._shapes)

    # -- RowLikelihood ------------------------------------------------------------------------------------
    def log_prior(self, theta: np.ndarray) -> float:
        return self._rows.log_prior(theta)[0]

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        value, grad = self._rows.log_prior(theta, gradient=True)
        return value, grad

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        return self._rows.log_lik(theta, rows)

    def row_log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self._rows.log_lik_grad(theta, rows)

    def set_threads(self, threads: int) -> None:
        self._rows.set_threads(threads)

    def row_digests(self) -> dict[str, str]:
        """What binds a checkpoint to these rows (``stan_dp.likelihood.DigestsRows``; PRIVATE): ``data_digests``
        (by variable name) when they were set, else a digest of the rows' evaluations at public points."""
        if self.data_digests is not None:
            return dict(self.data_digests)
        return evaluation_digests(self)

    @property
    def partial_clipped_gradient_sums(self) -> Any:
        """The backend's per-shard clipped gradient sums (``stan_dp.privacy.mechanisms.rows_clipped_gradient_sum``
        calls it), or None when the rows are local (the per-row gradients are then clipped on the caller's side).

        Also None for a subclass that overrides ``row_log_lik_grad``: the backend's sums are of the base rows'
        gradients, so the override is honoured by clipping its per-row gradients here instead (correct on every
        backend; the sums then cross the wire per row)."""
        return self._backend_part("partial_clipped_gradient_sums")

    @property
    def partial_anchor_sums(self) -> Any:
        """The backend's per-shard anchor statistics (``stan_dp.phases.anchor.anchor_statistics`` calls it: each part
        also keeps its rows' anchor gradients), or None when the rows are local or a subclass overrides the row
        gradients (as ``partial_clipped_gradient_sums``)."""
        return self._backend_part("partial_anchor_sums")

    def _backend_part(self, name: str) -> Any:
        """The backend's per-part method ``name`` (statistics formed where the rows live), or None when the rows are
        local or a subclass overrides ``row_log_lik_grad`` (the backend's parts are of the base rows' gradients)."""
        if type(self).row_log_lik_grad is not StanRowLikelihood.row_log_lik_grad:
            return None
        return getattr(self._rows, name, None)

    def keep_anchor(self, theta_hat: np.ndarray, rule: Any) -> Any:
        """Where the rows live elsewhere (the Ray backend): have each part anchor its rows at theta_hat (anchor
        gradients ``rule``(g_i(theta_hat)), formed where the rows live) and return the backend's per-part clipped sums of g_i(theta) - a_i (the
        signature of ``partial_clipped_gradient_sums``); None (nothing done) when the rows are local or a subclass
        overrides the row gradients."""
        partial = self.partial_clipped_gradient_sums
        if partial is None or not hasattr(self._rows, "set_anchor"):
            return None
        self._rows.set_anchor(theta_hat, rule)
        return functools.partial(partial, anchored=True)

    @property
    def row_backend(self) -> str:
        """Where the rows are evaluated: "local" (this process) or "ray" (``stan_dp.stan.ray_rows``)."""
        return getattr(self._rows, "backend", "local")

    def release_memory(self) -> None:
        """Give the process's freed heap memory back to the system, e.g. after a phase that evaluated all rows at
        once (glibc otherwise keeps freed blocks resident); a no-op for a backend without it."""
        release = getattr(self._rows, "release_memory", None)
        if release is not None:
            release()

    def close(self) -> None:
        """Release the rows' backend (stops Ray actors; a local engine is freed with this object)."""
        close = getattr(self._rows, "close", None)
        if close is not None:
            close()

    def constrain_flat(self, theta: np.ndarray) -> np.ndarray:
        """Flat constrained values (Stan's column-major order) of one unconstrained draw."""
        return self._prior.param_constrain(
            np.asarray(theta, dtype=np.float64), include_tp=self.include_tp, include_gq=self.include_gq,
            rng=self._gq_rng,
        )

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        flat = self.constrain_flat(theta)
        out, pos = {}, 0
        for name, shape in self._shapes.items():
            size = int(np.prod(shape)) if shape else 1
            out[name] = flat[pos:pos + size].reshape(shape, order="F") if shape else flat[pos]
            pos += size
        return out
