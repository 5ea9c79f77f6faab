"""The row-likelihood interface that every private sampler runs on.

Samplers never see a compiled Stan model. They see an object with this interface:
the data-free log prior and its gradient, and per-row log-likelihoods l_i(theta) and their gradients for
an index set of rows. Everything is on the unconstrained scale.

Two implementations exist: the Stan engine (``stan_dp.stan.engine.StanRowLikelihood``) and the vectorised NumPy
reference models in ``stan_dp.models.reference_models``, which make statistical tests fast and compiler-free.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np

Rows = "np.ndarray | Sequence[int] | None"


@runtime_checkable
class RowLikelihood(Protocol):
    """Per-row log-likelihoods of a model whose likelihood factorises over rows."""

    #: number of rows N (public)
    n_rows: int
    #: dimension of the unconstrained parameter vector
    dim: int

    def log_prior(self, theta: np.ndarray) -> float:
        """Data-free log density log p0(theta) on the unconstrained scale (Jacobian included)."""

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """``(log p0(theta), gradient)`` with gradient of shape (dim,)."""

    def row_log_lik(self, theta: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
        """l_i(theta) for the given row indices (all rows when None); shape (n,)."""

    def row_log_lik_grad(
        self, theta: np.ndarray, rows: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(values, gradients)`` of shapes (n,) and (n, dim) for the given rows (all when None)."""

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Map an unconstrained draw to released parameters by name and shape (data-free)."""

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """Names and shapes of the released parameters, in release order."""


@dataclasses.dataclass(frozen=True)
class RegressionTerms:
    """A regression's coefficients as references into its Stan program (public: program text only).

    intercept: references (or numbers) summed into the intercept; slopes: one (reference, is_vector) per covariate
    term in column order (a scalar for a vector covariate, a vector for a matrix covariate); scale: sigma's
    reference for a normal regression, else None."""

    intercept: tuple[str, ...]
    slopes: tuple[tuple[str, bool], ...]
    scale: str | None = None


@dataclasses.dataclass(frozen=True)
class PriorProgram:
    """A Stan program whose model block, run on ``data`` (its public data with the row count 0 and every row
    variable empty), is the prior of its parameters: what a release-once method's noise-aware posterior program
    is built from (``stan_dp.stan.posterior_program``). ``text``: stanc's canonical printing; ``name``: for
    messages and the model cache; ``stanc_args``: include paths. Public: program text and public data only."""

    text: str
    data: Mapping[str, Any]
    name: str
    stanc_args: tuple[str, ...] = ()


class LinearSpec:
    """The public structure of a normal linear regression likelihood y_i ~ N(a + x_i . b, sigma^2), which
    ``algorithm="dp-ssp"`` needs besides the row-likelihood interface (a likelihood that qualifies has a
    ``linear_spec`` attribute holding one and a ``linear_rows()`` method returning the private (x (N, K), y (N,))).

    n_covariates: K; column_names: names of x's columns and of y (for messages, e.g. ``("x[1]", "x[2]", "y")``);
    outcome_name: y's name; x_bounds: (lower (K,), upper (K,)) or None; y_bounds: (lower, upper) or None (public
    bounds known from the program, e.g. its declared constraints); coefficients: the data-free map from the
    unconstrained parameter vector to (a, b (K,), sigma) on the data's scale.
    """

    def __init__(self, *, n_covariates: int, column_names: tuple[str, ...], outcome_name: str,
                 coefficients, x_bounds: tuple[np.ndarray, np.ndarray] | None = None,
                 y_bounds: tuple[float, float] | None = None, terms: "RegressionTerms | None" = None) -> None:
        self.n_covariates = int(n_covariates)
        #: the coefficients as references into the program (for the noise-aware posterior program), or None
        self.terms = terms
        self.column_names = tuple(column_names)
        self.outcome_name = outcome_name
        self.coefficients = coefficients
        self.x_bounds = x_bounds
        self.y_bounds = y_bounds

    def __repr__(self) -> str:
        return (f"LinearSpec(K={self.n_covariates}, columns={self.column_names}, x_bounds={self.x_bounds}, "
                f"y_bounds={self.y_bounds})")


class LinearRowLikelihood(RowLikelihood, Protocol):
    """A row likelihood of a normal linear regression that declares its linear form: what dp-ssp reads
    (``stan_dp.run.ssp``). ``DPStanModel.row_likelihood`` sets both on a recognised program; the reference
    ``LinearRegressionModel`` has them too."""

    #: the program's public linear structure (covariates, declared bounds, the data-free map to the parameters)
    linear_spec: LinearSpec

    def linear_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The private rows: x of shape (N, K) and y of shape (N,)."""
