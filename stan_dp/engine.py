"""ctypes bindings to a model library's row API, and the Stan implementation of ``RowLikelihood``.

One native call per request: the library evaluates l_i(theta) = lp_i(theta) - lp_0(theta) (and gradients)
for an index set of rows in parallel TBB threads and writes into NumPy buffers owned here. ctypes releases
the GIL during the call, so chains running in Python threads evaluate concurrently.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any, Mapping

import numpy as np

from .data import RowSplit, to_json

_f64 = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
_f64_out = np.ctypeslib.ndpointer(dtype=np.float64, flags=("C_CONTIGUOUS", "WRITEABLE"))
_err = ctypes.POINTER(ctypes.c_char_p)


class NativeError(RuntimeError):
    """An error reported by the compiled model (message from Stan)."""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the row API signatures on a loaded library (idempotent)."""
    if getattr(lib, "_stan_dp_bound", False):
        return lib
    lib.sdp_rows_construct.restype = ctypes.c_void_p
    lib.sdp_rows_construct.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint, ctypes.c_int, _err]
    lib.sdp_rows_destruct.restype = None
    lib.sdp_rows_destruct.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_count.restype = ctypes.c_int64
    lib.sdp_rows_count.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_dim.restype = ctypes.c_int
    lib.sdp_rows_dim.argtypes = [ctypes.c_void_p]
    lib.sdp_rows_set_threads.restype = None
    lib.sdp_rows_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.sdp_rows_log_prior.restype = ctypes.c_int
    lib.sdp_rows_log_prior.argtypes = [ctypes.c_void_p, _f64, ctypes.POINTER(ctypes.c_double), ctypes.c_void_p, _err]
    lib.sdp_rows_log_lik.restype = ctypes.c_int
    lib.sdp_rows_log_lik.argtypes = [ctypes.c_void_p, _f64, ctypes.c_void_p, ctypes.c_int64, _f64_out, _err]
    lib.sdp_rows_log_lik_grad.restype = ctypes.c_int
    lib.sdp_rows_log_lik_grad.argtypes = [
        ctypes.c_void_p, _f64, ctypes.c_void_p, ctypes.c_int64, _f64_out, _f64_out, _err
    ]
    lib.bs_free_error_msg.restype = None
    lib.bs_free_error_msg.argtypes = [ctypes.c_void_p]
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


class RowInstances:
    """The prior instance and one instance per row, built by one native call."""

    def __init__(self, library_path: str, data: Mapping[str, Any], split: RowSplit, threads: int | None = None,
                 seed: int = 0):
        self._lib = _bind(ctypes.CDLL(library_path))
        err = ctypes.c_char_p()
        self.threads = threads or default_threads()
        handle = self._lib.sdp_rows_construct(
            to_json(data).encode(), split.count_name.encode(), ",".join(split.row_variables).encode(),
            seed, self.threads, ctypes.byref(err),
        )
        if not handle:
            _raise(self._lib, err, "sdp_rows_construct")
        self._handle = ctypes.c_void_p(handle)
        self.n_rows = int(self._lib.sdp_rows_count(self._handle))
        self.dim = int(self._lib.sdp_rows_dim(self._handle))

    def __del__(self) -> None:
        handle = getattr(self, "_handle", None)
        if handle is not None and handle.value:
            self._lib.sdp_rows_destruct(handle)
            self._handle = None

    def set_threads(self, threads: int) -> None:
        """Number of threads used by each row evaluation."""
        self.threads = max(1, int(threads))
        self._lib.sdp_rows_set_threads(self._handle, self.threads)

    def _theta(self, theta: np.ndarray) -> np.ndarray:
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        if theta.shape != (self.dim,):
            raise ValueError(f"theta must have shape ({self.dim},), got {theta.shape}")
        return theta

    def _rows(self, rows: np.ndarray | None) -> tuple[np.ndarray | None, int]:
        if rows is None:
            return None, self.n_rows
        idx = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        return idx, idx.size

    def log_prior(self, theta: np.ndarray, gradient: bool = False) -> tuple[float, np.ndarray | None]:
        theta = self._theta(theta)
        value = ctypes.c_double()
        grad = np.empty(self.dim) if gradient else None
        err = ctypes.c_char_p()
        grad_ptr = grad.ctypes.data_as(ctypes.c_void_p) if grad is not None else None
        if self._lib.sdp_rows_log_prior(self._handle, theta, ctypes.byref(value), grad_ptr, ctypes.byref(err)):
            _raise(self._lib, err, "sdp_rows_log_prior")
        return value.value, grad

    def log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        theta = self._theta(theta)
        idx, n = self._rows(rows)
        out = np.empty(n)
        err = ctypes.c_char_p()
        idx_ptr = idx.ctypes.data_as(ctypes.c_void_p) if idx is not None else None
        if self._lib.sdp_rows_log_lik(self._handle, theta, idx_ptr, n, out, ctypes.byref(err)):
            _raise(self._lib, err, "sdp_rows_log_lik")
        return out

    def log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        theta = self._theta(theta)
        idx, n = self._rows(rows)
        values = np.empty(n)
        grads = np.empty((n, self.dim))
        err = ctypes.c_char_p()
        idx_ptr = idx.ctypes.data_as(ctypes.c_void_p) if idx is not None else None
        if self._lib.sdp_rows_log_lik_grad(self._handle, theta, idx_ptr, n, values, grads, ctypes.byref(err)):
            _raise(self._lib, err, "sdp_rows_log_lik_grad")
        return values, grads


def _shapes_from_names(names: list[str]) -> dict[str, tuple[int, ...]]:
    """Stan flat names ('a', 'b.1', 'L.2.1', ...) to base names and shapes, in declaration order."""
    shapes: dict[str, tuple[int, ...]] = {}
    for flat in names:
        base, *idx = flat.split(".")
        dims = tuple(int(i) for i in idx)
        old = shapes.get(base)
        shapes[base] = dims if old is None else tuple(max(a, b) for a, b in zip(old, dims))
    return shapes


class StanRowLikelihood:
    """``RowLikelihood`` of a compiled Stan program: per-row terms from the row instances (native), the
    data-free prior and the release of parameters from the prior instance (N = 0).

    Released draws are constrained with the prior instance, so transformed parameters and generated
    quantities (released only when ``include_tp`` / ``include_gq`` are set) can never read private rows.
    """

    def __init__(self, instances: RowInstances, prior_model: Any, *, split: RowSplit):
        self._rows = instances
        self._prior = prior_model
        self.split = split
        self.n_rows = instances.n_rows
        self.dim = instances.dim
        self.include_tp = False
        self.include_gq = False
        self._gq_rng = None
        self._shapes = _shapes_from_names(self._names())

    # -- release configuration ----------------------------------------------------------------------------
    def set_release(self, *, include_tp: bool = False, include_gq: bool = False, seed: int | None = None) -> None:
        """Choose what ``constrain`` releases; generated quantities draw from a Stan RNG seeded by ``seed``."""
        self.include_tp, self.include_gq = bool(include_tp), bool(include_gq)
        if include_gq:
            seed = int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else int(seed)
            self._gq_rng = self._prior.new_rng(seed % (2**31))
        self._shapes = _shapes_from_names(self._names())

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
