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

from typing import Any, cast

import numpy as np

from ..likelihood import DataFreeFromBase, DigestsRows, RowLikelihood, evaluation_digests, offers
from .mechanisms import private_arithmetic

__all__ = ["ROW_UNIT", "SSP_UNIT_REFUSAL", "UnitLikelihood", "check_max_rows_per_unit", "group_rows",
           "stamp_privacy_unit", "unit_noun", "unit_relation"]

#: the privacy unit recorded for a row-level run (attrs ``privacy_unit``)
ROW_UNIT = "row"

#: why the release-once methods refuse a privacy unit without a cap on its rows (their statistics are sums over
#: rows, which one unit moves by as many rows as it has)
SSP_UNIT_REFUSAL = (
    "dp-ssp and dp-glm release sums over rows, which one unit moves by as many rows as it has: give "
    "max_rows_per_unit (a public cap k; the release's sensitivity is then k times one row's), or use another "
    "algorithm (auto chooses one)")


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


class UnitLikelihood(DataFreeFromBase):
    """A row likelihood seen unit by unit: "row" u of this object is unit u of ``base``, with
    l_u(theta) = sum of l_i(theta) over the unit's rows, and the same for gradients; ``n_rows`` is the number of
    units. Every mechanism that clips, samples and accounts rows therefore clips, samples and accounts units.

    ``base``: a ``RowLikelihood``. ``labels``: one integer label per row of ``base`` (private). ``name``: the
    unit's name for the guarantee (the data variable's name). ``max_rows_per_unit``: a public cap; each unit keeps
    its first that many rows in data order and the rest are left out of every evaluation (how many were dropped is
    never released).

    What it offers is written out here, and nothing else: the row-likelihood interface (the row terms summed per
    unit; ``log_prior``, ``log_prior_grad``, ``constrain`` and ``param_shapes`` are the base's, data-free), the
    optional capability ``DigestsRows`` (``stan_dp.likelihood``) and the unit's public facts. No attribute is handed to the base by lookup: a per-row
    method added to a row likelihood would otherwise reach a unit run and act on rows, not units. In particular
    it offers no per-part clipped sums (``PartialGradientSums``, ``PartialAnchorSums``, ``KeepsAnchor``): a backend
    that clips rows where they live (Ray shards) is bypassed, and the unit sums are formed here, on the driver, and
    clipped by the mechanisms.

    For the release-once methods (dp-ssp, dp-glm) it offers the base's regression structure, its program and the
    kept rows, but only with a cap on the rows of a unit (their releases are sums over rows, whose sensitivity is
    then the cap times one row's: ``stan_dp.methods.dp_ssp.ssp``, ``stan_dp.methods.dp_glm.glm_release``); without one the structure
    is withheld and the refusal says why (``SSP_UNIT_REFUSAL``).
    """

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

    # -- the release-once methods' view: the base's structure and program, the kept rows ----------------------
    def _structure(self, name: str) -> Any:
        """The base's public regression structure ``name``, offered only with a cap on a unit's rows."""
        return getattr(self._base, name, None) if self.max_rows_per_unit is not None else None

    @property
    def linear_spec(self) -> Any:
        """The base's linear structure (dp-ssp) when the unit's rows are capped, else None."""
        return self._structure("linear_spec")

    @property
    def linear_refusal(self) -> str | None:
        """Why dp-ssp cannot run on these units, or None."""
        return SSP_UNIT_REFUSAL if self.max_rows_per_unit is None else getattr(self._base, "linear_refusal", None)

    @property
    def glm_spec(self) -> Any:
        """The base's logistic or Poisson structure (dp-glm) when the unit's rows are capped, else None."""
        return self._structure("glm_spec")

    @property
    def glm_refusal(self) -> str | None:
        """Why dp-glm cannot run on these units, or None."""
        return SSP_UNIT_REFUSAL if self.max_rows_per_unit is None else getattr(self._base, "glm_refusal", None)

    @property
    def prior_program(self) -> Any:
        """The base's program with no rows (public: program text and public data), or None."""
        return getattr(self._base, "prior_program", None)

    def linear_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept rows' (x, y) of a linear base (PRIVATE): each unit's first ``max_rows_per_unit`` rows."""
        x, y = self._base.linear_rows()  # type: ignore[attr-defined]
        return np.asarray(x)[self._order], np.asarray(y)[self._order]

    def glm_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept rows' (x, y) of a logistic or Poisson base (PRIVATE)."""
        x, y = self._base.glm_rows()  # type: ignore[attr-defined]
        return np.asarray(x)[self._order], np.asarray(y)[self._order]

    @property
    def base(self) -> RowLikelihood:
        """The row likelihood whose rows the units group (its rows are private, like the grouping)."""
        return self._base

    def row_digests(self) -> dict[str, str]:
        """Private digests that bind a checkpoint to these units' rows: the base's (``DigestsRows``; the unit's
        labels are data of the base, so they are among them), else a digest of every unit's log-likelihood and
        gradient at public points (``evaluation_digests``). PRIVATE: never released."""
        if offers(self._base, DigestsRows):
            return cast(DigestsRows, self._base).row_digests()
        return evaluation_digests(self)

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
