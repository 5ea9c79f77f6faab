"""Neighbouring data sets for the audit: one row substituted by a public worst-case row (a "canary").

The guarantee is stated for any model and any data because every per-row contribution is clipped. The
strongest canary is therefore a row whose contribution hits the clip bound whatever the proposal:
``LinearCanary`` has l(theta) = slope * (w . theta) with a huge slope, so its log-likelihood ratio is
+-(clip bound) and its gradient is clipped to +-b w / ||w||; ``RadialCanary`` has l(theta) =
slope * ||theta - center||, whose ratio from the public state ``center`` has the same sign for every
proposal. Pairs of such canaries with opposite slopes are worst-case neighbouring pairs for the clipped
mechanisms in the package, on any model (the canary is a row-likelihood, not data of a particular model:
the guarantee covers every per-row function, so the audit may use one no data set of the model produces). A user may instead give a canary of their model (a
one-row ``RowLikelihood``, e.g. built from a data row of a Stan program).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..likelihood import DataFreeFromBase

__all__ = ["LinearCanary", "RadialCanary", "KinkCanary", "NaNCanary", "SubstitutedRows", "RowsAtBound",
           "default_canaries"]

#: slope of the default linear canaries: large enough that every clip binds for any realistic step
CANARY_SLOPE = 1e6


class LinearCanary:
    """A one-row ``RowLikelihood`` with l(theta) = slope * (direction . theta) (public, data-free)."""

    n_rows = 1

    def __init__(self, direction: np.ndarray, slope: float = CANARY_SLOPE, name: str | None = None):
        w = np.asarray(direction, dtype=float).reshape(-1)
        norm = float(np.linalg.norm(w))
        if not norm > 0.0:
            raise ValueError("a canary direction must be a non-zero vector")
        self.direction = w / norm
        self.dim = w.size
        self.slope = float(slope)
        self.name = name or f"linear canary, slope {self.slope:g} along {np.round(self.direction, 3).tolist()}"

    def _n(self, rows) -> int:
        return 1 if rows is None else int(np.asarray(rows).size)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        value = self.slope * float(self.direction @ np.asarray(theta, dtype=float))
        return np.full(self._n(rows), value)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        n = self._n(rows)
        return self.row_log_lik(theta, rows), np.tile(self.slope * self.direction, (n, 1))


class RadialCanary:
    """A one-row ``RowLikelihood`` with l(theta) = slope * ||theta - center|| (public, data-free).

    From the public state ``center`` every proposal moves it by slope * ||theta' - theta||, so with a huge
    slope its clipped ratio is +c (slope > 0) or -c (slope < 0) whatever the proposal's direction: the
    neighbour accepts as eagerly as possible (or as reluctantly), the worst case for accept/reject tests.
    Its gradient is slope times the unit vector away from ``center`` (0 at the center).
    """

    n_rows = 1

    def __init__(self, center: np.ndarray, slope: float = CANARY_SLOPE, name: str | None = None):
        self.center = np.asarray(center, dtype=float).reshape(-1)
        self.dim = self.center.size
        self.slope = float(slope)
        self.name = name or f"radial canary, slope {self.slope:g} around {np.round(self.center, 3).tolist()}"

    def _n(self, rows) -> int:
        return 1 if rows is None else int(np.asarray(rows).size)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        value = self.slope * float(np.linalg.norm(np.asarray(theta, dtype=float) - self.center))
        return np.full(self._n(rows), value)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        d = np.asarray(theta, dtype=float) - self.center
        norm = float(np.linalg.norm(d))
        grad = self.slope * d / norm if norm > 0.0 else np.zeros(self.dim)
        return self.row_log_lik(theta, rows), np.tile(grad, (self._n(rows), 1))


class KinkCanary:
    """A one-row ``RowLikelihood`` with l(theta) = slope * |w . (theta - kink)| (public, data-free): linear with
    gradient -slope w on the side of the hyperplane w . (theta - kink) = 0 that ``w`` points away from and
    +slope w on the other (w a unit vector).

    The canary of anchored targets whose kernels clip gradient DIFFERENCES: with the anchor theta_hat on the +
    side and the audited state on the - side, g(theta) - g(theta_hat) = -2 slope w at every theta of a short
    trajectory, so with a huge slope every difference clips to the same vector -C w (+C w for the opposite
    slope) and the releases of a whole trajectory add up in one direction; and the ratio remainder
    l(theta') - l(theta) - g(theta_hat) . (theta' - theta) = -2 slope w . (theta' - theta) clips to +-C M.
    (A linear canary has no difference at all, and a radial one's difference turns with the trajectory.)
    """

    n_rows = 1

    def __init__(self, direction: np.ndarray, kink: np.ndarray, slope: float = CANARY_SLOPE, name: str | None = None):
        w = np.asarray(direction, dtype=float).reshape(-1)
        norm = float(np.linalg.norm(w))
        if not norm > 0.0:
            raise ValueError("a canary direction must be a non-zero vector")
        self.direction = w / norm
        self.kink = np.asarray(kink, dtype=float).reshape(self.direction.shape)
        self.dim = w.size
        self.slope = float(slope)
        self.name = name or (f"kink canary, slope {self.slope:g} along {np.round(self.direction, 3).tolist()} at "
                             f"{np.round(self.kink, 3).tolist()}")

    def _n(self, rows) -> int:
        return 1 if rows is None else int(np.asarray(rows).size)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        value = self.slope * abs(float(self.direction @ (np.asarray(theta, dtype=float) - self.kink)))
        return np.full(self._n(rows), value)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        side = float(np.sign(self.direction @ (np.asarray(theta, dtype=float) - self.kink)))
        return self.row_log_lik(theta, rows), np.tile(self.slope * side * self.direction, (self._n(rows), 1))


class NaNCanary:
    """A one-row ``RowLikelihood`` that fails to evaluate (NaN value and gradient) wherever
    ``direction . theta > 0`` and is the constant ``value`` elsewhere: what the engine returns for a row whose
    evaluation throws on part of the parameter space. A mechanism that lets NaN through (instead of mapping it
    inside its clip bounds) lets this one row remove that half-space from the support of a released draw.
    With ``value`` at OPS's lower bound the correctly clipped row is the constant a everywhere (no jump for the
    internal sampler to stumble on)."""

    n_rows = 1

    def __init__(self, direction: np.ndarray, value: float = 0.0, name: str | None = None):
        w = np.asarray(direction, dtype=float).reshape(-1)
        if not float(np.linalg.norm(w)) > 0.0:
            raise ValueError("a canary direction must be a non-zero vector")
        self.direction = w
        self.dim = w.size
        self.value = float(value)
        self.name = name or f"NaN canary on {np.round(w, 3).tolist()} . theta > 0"

    def _n(self, rows) -> int:
        return 1 if rows is None else int(np.asarray(rows).size)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        failed = float(self.direction @ np.asarray(theta, dtype=float)) > 0.0
        return np.full(self._n(rows), np.nan if failed else self.value)

    def row_log_lik_grad(self, theta, rows=None) -> tuple[np.ndarray, np.ndarray]:
        values = self.row_log_lik(theta, rows)
        return values, np.full((values.size, self.dim), np.nan if np.isnan(values[0]) else 0.0)


def default_canaries(center: np.ndarray) -> list[tuple[Any, Any]]:
    """Canary pairs (row in D0, row in D1) searched by default: opposite radial canaries around the public
    state ``center`` and opposite linear canaries along the first coordinate (the audit keeps the pair whose
    runs separate best)."""
    center = np.asarray(center, dtype=float).reshape(-1)
    w = np.eye(center.size)[0]
    return [(RadialCanary(center, -CANARY_SLOPE), RadialCanary(center, CANARY_SLOPE)),
            (LinearCanary(w, -CANARY_SLOPE), LinearCanary(w, CANARY_SLOPE))]


class SubstitutedRows(DataFreeFromBase):
    """``base`` with row ``index`` replaced by row 0 of the one-row likelihood ``canary``.

    The row-likelihood interface only (the data-free parts are the base's): no other attribute reaches the base,
    where a per-row method would see the original row instead of the canary.
    """

    def __init__(self, base: Any, index: int, canary: Any):
        if not 0 <= int(index) < int(base.n_rows):
            raise ValueError(f"row index {index} is outside [0, {base.n_rows}) (the data have {base.n_rows} rows)")
        if int(canary.dim) != int(base.dim):
            raise ValueError(f"the canary has dimension {canary.dim}, the model {base.dim}")
        self._base = base
        self.index = int(index)
        self.canary = canary
        self.n_rows = int(base.n_rows)
        self.dim = int(base.dim)

    def _positions(self, rows) -> np.ndarray:
        if rows is None:
            return np.array([self.index])
        return np.flatnonzero(np.asarray(rows).reshape(-1) == self.index)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        values = np.array(self._base.row_log_lik(theta, rows), dtype=float, copy=True)
        pos = self._positions(rows)
        if pos.size:
            values[pos] = float(np.asarray(self.canary.row_log_lik(theta, np.array([0])))[0])
        return values

    def row_log_lik_grad(self, theta, rows=None):
        values, grads = self._base.row_log_lik_grad(theta, rows)
        values = np.array(values, dtype=float, copy=True)
        grads = np.array(grads, dtype=float, copy=True)
        pos = self._positions(rows)
        if pos.size:
            v, g = self.canary.row_log_lik_grad(theta, np.array([0]))
            values[pos] = float(np.asarray(v)[0])
            grads[pos] = np.asarray(g, dtype=float)[0]
        return values, grads


class RowsAtBound(DataFreeFromBase):
    """``base`` with EVERY row replaced by row 0 of ``canary`` (a data set whose rows all sit at the clip
    bound when the canary's slope is huge). The row-likelihood interface only; its data-free parts are the base's.

    This is the base the audit needs for subsampled mechanisms: with the other rows at the bound, the realised
    minibatch size tells how many of them were drawn, so a kernel that released it would turn the
    Poisson-subsampled pair into an add/remove pair at the full substitution sensitivity; with rows at 0 (the
    default audit model) that defect is invisible.
    """

    def __init__(self, base: Any, canary: Any):
        if int(canary.dim) != int(base.dim):
            raise ValueError(f"the canary has dimension {canary.dim}, the model {base.dim}")
        self._base = base
        self.canary = canary
        self.n_rows = int(base.n_rows)
        self.dim = int(base.dim)

    def _n(self, rows) -> int:
        return self.n_rows if rows is None else int(np.asarray(rows).size)

    def row_log_lik(self, theta, rows=None) -> np.ndarray:
        value = float(np.asarray(self.canary.row_log_lik(theta, np.array([0])))[0])
        return np.full(self._n(rows), value)

    def row_log_lik_grad(self, theta, rows=None):
        v, g = self.canary.row_log_lik_grad(theta, np.array([0]))
        n = self._n(rows)
        return np.full(n, float(np.asarray(v)[0])), np.tile(np.asarray(g, dtype=float)[0], (n, 1))
