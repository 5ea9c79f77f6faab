"""Privacy units: make all rows of one unit (a person, a household) look like ONE row to every mechanism.

Row-level differential privacy protects one row. When a person contributes several rows (visits, years,
orders), a guarantee for that person needs the neighbouring relation "substitute ALL rows of one unit", with the
number of units public. :class:`UnitLikelihood` gives it without touching any mechanism: it wraps a row
likelihood and presents one "row" per unit, whose log-likelihood and gradient are the sums over the unit's rows.
The mechanisms then clip per unit (a unit's whole contribution is bounded by the clip bound), Poisson minibatches
sample units, and the accountant composes with the number of units as N. With one row per unit the adapter
returns the rows' own values, so a run reproduces the row-level run draw for draw.

Private material held here (never released, never part of an error message): the unit labels, which rows belong
to which unit, the number of rows of each unit, the total number of rows kept and the number of rows dropped by
``max_rows_per_unit``. Public: the number of units, the unit variable's name and ``max_rows_per_unit``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..likelihood import RowLikelihood
from .mechanisms import private_arithmetic

__all__ = ["ROW_UNIT", "SSP_UNIT_REFUSAL", "UnitLikelihood", "check_max_rows_per_unit", "group_rows",
           "stamp_privacy_unit", "unit_noun", "unit_relation"]

#: the privacy unit recorded for a row-level run (attrs ``privacy_unit``)
ROW_UNIT = "row"

#: why dp-ssp refuses a privacy unit (its moment matrix is a sum of per-row outer products, not of unit sums)
SSP_UNIT_REFUSAL = (
    "dp-ssp releases a sum of per-row moments (x x^T, x y), whose sensitivity is that of one row; with a privacy "
    "unit one unit moves it by as many rows as it has, which this release does not bound. Use another algorithm "
    "(auto chooses one), or collapse the data to one row per unit")


def unit_noun(name: str, plural: bool = False) -> str:
    """The word for one unit (``plural``: for several) in messages and the guarantee: the unit variable's name
    (``person``, ``persons``)."""
    name = str(name)
    return name + ("" if name.endswith("s") else "s") if plural else name


def unit_relation(name: str) -> str:
    """The neighbouring relation of a run whose privacy unit is the data variable ``name``."""
    return (f"substitute all rows of one {unit_noun(name)} (privacy unit '{name}', any number of rows); the number "
            f"of {unit_noun(name, plural=True)} public")


def check_max_rows_per_unit(value: Any) -> int | None:
    """``max_rows_per_unit`` as an int >= 1 (or None), else ValueError naming the fix."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) < 1:
        raise ValueError(f"max_rows_per_unit must be a positive integer (a public cap chosen without looking at "
                         f"the rows), got {value!r}.")
    return int(value)


def group_rows(labels: Any, max_rows_per_unit: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows grouped by unit: ``(order, starts, counts)`` with ``order`` the row indices unit by unit (units in the
    order of their first row, rows in data order within a unit, each unit's first ``max_rows_per_unit`` rows
    only), ``starts[u]`` the position of unit u's first row in ``order`` and ``counts[u]`` its number of rows kept.

    All three are private (computed from the labels); only ``len(starts)``, the number of units, is public.
    ``labels``: one integer label per row, shape (N,).
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise ValueError(f"the privacy unit needs one integer label per row, got an array of shape {labels.shape}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise ValueError("the privacy unit's labels must be integers")
    cap = check_max_rows_per_unit(max_rows_per_unit)
    _, first, codes = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.intp)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)  # units numbered by their first row
    unit_of_row = rank[codes.reshape(-1)]
    order = np.argsort(unit_of_row, kind="stable")  # rows unit by unit, data order within a unit
    counts = np.bincount(unit_of_row, minlength=first.size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    if cap is not None and int(np.max(counts)) > cap:
        position = np.arange(order.size) - np.repeat(starts, counts)  # each row's place within its unit
        order = order[position < cap]
        counts = np.minimum(counts, cap)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return order.astype(np.intp), starts.astype(np.intp), counts.astype(np.intp)


class UnitLikelihood:
    """A row likelihood seen unit by unit: "row" u of this object is unit u of ``base``, with
    l_u(theta) = sum of l_i(theta) over the unit's rows, and the same for gradients; ``n_rows`` is the number of
    units. Every mechanism that clips, samples and accounts rows therefore clips, samples and accounts units.

    ``base``: a ``RowLikelihood``. ``labels``: one integer label per row of ``base`` (private). ``name``: the
    unit's name for the guarantee (the data variable's name). ``max_rows_per_unit``: a public cap; each unit keeps
    its first that many rows in data order and the rest are left out of every evaluation (how many were dropped is
    never released). Every attribute other than the row terms (``constrain``, ``param_shapes``, ``prior_model``,
    ...) is the base's (data-free). A new per-row method of the row likelihoods must be added here explicitly: an
    attribute this class does not define is looked up on the base, where it would speak of rows, not units. Its partial clipped sums are None: a backend that clips rows where they live
    (Ray shards) is bypassed, and the unit sums are formed here, on the driver, and clipped by the mechanisms.
    """

    #: dp-ssp's public linear structure: not offered through a unit (see ``SSP_UNIT_REFUSAL``)
    linear_spec = None
    linear_refusal = SSP_UNIT_REFUSAL
    linear_rows = None
    #: declared (None) so that neither a lookup on the class nor one on the instance reaches the base's per-shard
    #: clipped sums (``mechanisms.rows_clipped_gradient_sum``): those clip ROWS where they live; a unit's rows are
    #: summed here first and the sum is clipped by the caller
    partial_clipped_gradient_sums = None
    #: likewise for the anchor phase's statistics (``stan_dp.run.anchor.anchor_statistics``): a unit's are formed
    #: here from its rows' summed gradients
    partial_anchor_sums = None

    def keep_anchor(self, theta_hat: Any, rule: Any) -> None:
        """Never keeps an anchored run's anchor where the rows live (``stan_dp.run.anchor.AnchoredLikelihood``):
        the actors would subtract and clip per row; a unit's anchored sum is formed here. None."""
        return None

    def __init__(self, base: RowLikelihood, labels: Any, *, name: str = "unit", max_rows_per_unit: int | None = None):
        labels = np.asarray(labels)
        if labels.shape != (int(base.n_rows),):
            raise ValueError(f"the privacy unit '{name}' needs one label per row ({int(base.n_rows)}), got shape "
                             f"{labels.shape}")
        self._base = base
        self.privacy_unit = str(name)
        self.max_rows_per_unit = check_max_rows_per_unit(max_rows_per_unit)
        self._order, self._starts, self._counts = group_rows(labels, self.max_rows_per_unit)
        self.n_rows = int(self._starts.size)  # the number of units (public)
        self.n_units = self.n_rows
        self.dim = int(base.dim)

    @property
    def base(self) -> RowLikelihood:
        """The row likelihood seen unit by unit (its public declarations, such as the program's per-row bounds, are
        read through it; its rows only through this object's methods)."""
        return self._base

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_base", "_order", "_starts", "_counts"):
            raise AttributeError(name)
        return getattr(self._base, name)

    def _rows_of(self, units: Any) -> tuple[np.ndarray, np.ndarray]:
        """(the base rows of ``units`` in unit order, the start of each unit's segment in them)."""
        if units is None:
            return self._order, self._starts
        units = np.asarray(units, dtype=np.intp).reshape(-1)
        counts = self._counts[units]
        seg = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.intp)
        position = np.arange(int(counts.sum()), dtype=np.intp) - np.repeat(seg, counts)
        return self._order[np.repeat(self._starts[units], counts) + position], seg

    def _empty(self, units: Any) -> bool:
        return units is not None and np.asarray(units).size == 0

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """The units' log-likelihoods l_u(theta) (sums over their rows) for unit indices ``rows`` (all when None)."""
        if self._empty(rows):
            return np.zeros(0)
        base_rows, seg = self._rows_of(rows)
        values = np.asarray(self._base.row_log_lik(theta, base_rows), dtype=float)
        with private_arithmetic():  # per-row private values: no warning may depend on them
            return np.add.reduceat(values, seg)

    def row_log_lik_grad(self, theta: np.ndarray, rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(values, gradients)`` of the units ``rows`` (all when None): sums over each unit's rows."""
        if self._empty(rows):
            return np.zeros(0), np.zeros((0, self.dim))
        base_rows, seg = self._rows_of(rows)
        values, grads = self._base.row_log_lik_grad(theta, base_rows)
        values = np.asarray(values, dtype=float)
        grads = np.asarray(grads, dtype=float).reshape(values.size, self.dim)
        with private_arithmetic():
            return np.add.reduceat(values, seg), np.add.reduceat(grads, seg, axis=0)


#: what "row" means in the rest of a unit fit's attrs
UNIT_NOTE = ("Every mechanism of this run treated one {unit} as one row: in the mechanism notes, the clip bounds, the "
             "minibatch sampling probability and N, a 'row' is one {unit}, whose log-likelihood and gradient are the "
             "sums over all of its rows; the clip bounds bound one {unit}'s total contribution.")


def stamp_privacy_unit(attrs: Any, name: str | None, n_units: int) -> None:
    """Record the privacy unit in a fit's root ``attrs`` (a mutable mapping): ``privacy_unit`` (the unit
    variable's name, or ``"row"``) and ``n_units`` (public), and for a unit other than the row the unit's
    neighbouring relation wherever the row's is stated (``neighbouring_relation``, ``privacy_guarantee``, the
    ``privacy_report`` JSON, an algorithm's own guarantee words; a fit without a guarantee states none)."""
    attrs["privacy_unit"] = ROW_UNIT if name is None else str(name)
    attrs["n_units"] = int(n_units)
    if name is None:
        return
    attrs["privacy_unit_note"] = UNIT_NOTE.format(unit=unit_noun(name))
    old = attrs.get("neighbouring_relation")
    if old is None:
        return
    new = unit_relation(name)
    for key, value in list(attrs.items()):  # the relation, the guarantee, the report's JSON, an algorithm's words
        if isinstance(value, str) and str(old) in value:
            attrs[key] = value.replace(str(old), new)
