"""The rows of a recognised regression program as a design matrix and an outcome, with the covariates' declared
bounds column by column (``stan_dp.stan.linear_program``, ``stan_dp.stan.glm_program``).

A matrix covariate ``x`` gives one column per column of x (named ``x[, j]``), a vector covariate one column;
the declared bounds of a covariate apply to each of its columns. The values are the private rows (read by the
release-once methods' mechanisms only); the names and bounds are public (program text).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from ..likelihood import GLMSpec, RegressionTerms

__all__ = ["RegressionRows", "regression_rows", "regression_terms", "glm_spec"]


@dataclasses.dataclass(frozen=True)
class RegressionRows:
    """x (N, K), y (N,) (PRIVATE), the column names and each column's declared (lower, upper) (NaN where none)."""

    x: np.ndarray
    y: np.ndarray
    names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray

    @property
    def declared_box(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(lower, upper) when every column has both bounds declared, else None."""
        if np.any(np.isnan(self.lower) | np.isnan(self.upper)):
            return None
        return self.lower.copy(), self.upper.copy()


def regression_rows(program: Any, raw: Mapping[str, Any], n_rows: int) -> RegressionRows:
    """The :class:`RegressionRows` of a recognised program (``covariates``, ``outcome``, ``bounds``) on data ``raw``."""
    columns, names, lower, upper = [], [], [], []
    for name, kind in program.covariates:
        values = np.asarray(raw[name], dtype=float).reshape(n_rows, -1)
        columns.append(values)
        lo, hi = program.bounds[name]
        for j in range(values.shape[1]):
            names.append(f"{name}[, {j + 1}]" if kind == "matrix" else name)
            lower.append(np.nan if lo is None else lo)
            upper.append(np.nan if hi is None else hi)
    x = np.column_stack(columns) if columns else np.zeros((n_rows, 0))
    y = np.asarray(raw[program.outcome], dtype=float).reshape(n_rows)
    return RegressionRows(x=x, y=y, names=tuple(names), lower=np.array(lower, dtype=float),
                          upper=np.array(upper, dtype=float))


def regression_terms(program: Any, scale: str | None = None) -> RegressionTerms:
    """The program's coefficients as references (a matrix covariate's slope is a vector)."""
    return RegressionTerms(intercept=tuple(program.intercept),
                           slopes=tuple((ref, kind == "matrix") for ref, (_, kind) in
                                        zip(program.slopes, program.covariates)),
                           scale=scale)


def glm_spec(program: Any, rows: RegressionRows) -> GLMSpec:
    """The public :class:`GLMSpec` of a recognised logistic or Poisson program (``stan_dp.stan.glm_program``)."""
    y_lo, y_hi = program.bounds[program.outcome]
    return GLMSpec(family=program.family, n_covariates=rows.x.shape[1], column_names=rows.names + (program.outcome,),
                   outcome_name=program.outcome, terms=regression_terms(program), x_bounds=rows.declared_box,
                   y_bounds=(y_lo, y_hi) if y_lo is not None and y_hi is not None else None)
