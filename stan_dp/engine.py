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
