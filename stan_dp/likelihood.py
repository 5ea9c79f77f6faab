"""The row-likelihood interface that every private sampler runs on.

Samplers never see a compiled Stan model. They see an object with this interface:
the data-free log prior and its gradient, and per-row log-likelihoods l_i(theta) and their gradients for
an index set of rows. Everything is on the unconstrained scale.

Two implementations exist: the Stan engine (``stan_dp.stan.engine.StanRowLikelihood``) and the vectorised NumPy
reference models in ``stan_dp.models.reference_models``, which make statistical tests fast and compiler-free.

Optional capabilities. Besides the interface, a likelihood may offer capabilities that the package uses where they
exist, each a small protocol of its own (``CAPABILITIES``): ``ConstrainsMany`` (constrain many draws in one call),
``PartialGradientSums`` and ``PartialAnchorSums`` (rows that live elsewhere, e.g. Ray actors, clip and sum where
they live), ``KeepsAnchor`` (such rows keep an anchored run's anchor where they live), ``ReleasesMemory`` (give
freed memory back after a phase over all rows) and ``DigestsRows`` (private digests of the data's values that bind
a checkpoint to its rows). A wrapper that changes what a "row" is (a privacy unit, anchored rows) implements each
capability it offers explicitly, and no other: it never hands unknown attributes to its base (``__getattr__``),
where a per-row method would speak of the base's rows.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

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


# ------------------------------------------------------------------------------------------------ capabilities
@runtime_checkable
class ConstrainsMany(Protocol):
    """Constrains many unconstrained draws in one call (``stan_dp.output.inference_data.constrain_draws``)."""

    def constrain_many(self, thetas: np.ndarray) -> dict[str, np.ndarray]:
        """``thetas`` (m, dim) -> released parameter name -> values (m, *shape); data-free."""


@runtime_checkable
class PartialGradientSums(Protocol):
    """Rows that live elsewhere clip and sum their gradients where they live
    (``stan_dp.privacy.mechanisms.rows_clipped_gradient_sum``)."""

    @property
    def partial_clipped_gradient_sums(self) -> Callable[..., Any] | None:
        """``(theta, rows, bound, clip) -> iterable of partial clipped sums`` (one per part of the rows), or None
        when the rows are local just now (the caller then clips the per-row gradients itself)."""


@runtime_checkable
class PartialAnchorSums(Protocol):
    """Rows that live elsewhere form the anchor phase's statistics where they live
    (``stan_dp.phases.anchor.anchor_statistics``)."""

    @property
    def partial_anchor_sums(self) -> Callable[..., Any] | None:
        """``(theta_hat, bound, statistics, rule, *, count, squared) -> iterable of per-part statistics``, or None
        when the rows are local."""


@runtime_checkable
class KeepsAnchor(Protocol):
    """Rows that live elsewhere keep an anchored run's anchor gradients there (``stan_dp.phases.anchor``)."""

    def keep_anchor(self, theta_hat: np.ndarray, rule: Any) -> Callable[..., Any] | None:
        """Anchor the rows at the released ``theta_hat`` (anchor gradients ``rule(g_i(theta_hat))``) where they live
        and return their per-part clipped sums of g_i(theta) - a_i, or None (nothing done: local rows)."""


@runtime_checkable
class ReleasesMemory(Protocol):
    """Gives freed memory back to the system after a phase that evaluated all rows at once."""

    def release_memory(self) -> None:
        """Return freed heap memory (no effect on any value)."""


@runtime_checkable
class DigestsRows(Protocol):
    """Private digests of the data's values, by name, that bind a checkpoint to its rows (``stan_dp.phases.checkpoint``).

    PRIVATE material (a function of every row's values): stored inside a checkpoint, compared on resume, never put
    in a release, a message or an attr."""

    def row_digests(self) -> dict[str, str]:
        """Variable name (or a description such as ``"the row values"``) -> SHA-256 hex digest of its values."""


#: every optional capability, for code and tests that ask which of them a likelihood offers
CAPABILITIES: tuple[type, ...] = (ConstrainsMany, PartialGradientSums, PartialAnchorSums, KeepsAnchor,
                                  ReleasesMemory, DigestsRows)


_ABSENT = object()


def offers(likelihood: Any, capability: Any) -> bool:
    """Whether ``likelihood`` offers ``capability`` (one of ``CAPABILITIES``): every member of the protocol is
    defined on the object or its class, looked up with ``inspect.getattr_static``, so never found through a
    ``__getattr__`` fallback (which ``isinstance`` on a runtime protocol follows before Python 3.12)."""
    members = [name for name in vars(capability) if not name.startswith("_")]
    return all(inspect.getattr_static(likelihood, name, _ABSENT) is not _ABSENT for name in members)


def capabilities(likelihood: Any) -> set[str]:
    """The names of the optional capabilities ``likelihood`` offers (``CAPABILITIES``, by ``offers``)."""
    return {cap.__name__ for cap in CAPABILITIES if offers(likelihood, cap)}


class DataFreeFromBase:
    """For a wrapper over a row likelihood ``_base`` that changes the rows (a privacy unit, anchored rows, the
    audit's substituted rows): the data-free parts of the interface, which are the base's. The wrapper writes out
    its row terms and every capability it offers itself; nothing else reaches the base."""

    _base: RowLikelihood

    def log_prior(self, theta: np.ndarray) -> float:
        """The base's data-free log prior."""
        return self._base.log_prior(theta)

    def log_prior_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """The base's data-free log prior and its gradient."""
        return self._base.log_prior_grad(theta)

    def constrain(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """The base's data-free map to the released parameters."""
        return self._base.constrain(theta)

    def param_shapes(self) -> dict[str, tuple[int, ...]]:
        """The base's released parameters and their shapes."""
        return self._base.param_shapes()


#: what a digest of evaluations stands for in a refusal (a likelihood that names no variables)
ROW_VALUES = "the row values"
#: the public points ``evaluation_digests`` evaluates the rows at: a fixed generator, never the rows
_DIGEST_POINTS_SEED = 0x524F5753
_DIGEST_POINTS = 2


def evaluation_digests(likelihood: RowLikelihood) -> dict[str, str]:
    """``{ROW_VALUES: SHA-256}`` of every row's log-likelihood and gradient at two fixed public points (uniform(-2,
    2) on the unconstrained scale from a fixed generator), with the row count and dimension: a digest of the row
    values for a likelihood that names no data variables (``DigestsRows`` otherwise). Two data sets that differ in
    one row's values differ in it unless the row's log-likelihood agrees at both points, value and gradient. One
    evaluation of all rows per point. PRIVATE (a function of every row): never released."""
    n, dim = int(likelihood.n_rows), int(likelihood.dim)
    digest = hashlib.sha256(f"{n} rows, dimension {dim}".encode())
    rng = np.random.default_rng(_DIGEST_POINTS_SEED)
    for _ in range(_DIGEST_POINTS):
        values, grads = likelihood.row_log_lik_grad(rng.uniform(-2.0, 2.0, size=dim))
        digest.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(grads, dtype=np.float64).tobytes())
    return {ROW_VALUES: digest.hexdigest()}


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
    (``stan_dp.methods.dp_ssp.ssp``). ``DPStanModel.row_likelihood`` sets both on a recognised program; the reference
    ``LinearRegressionModel`` has them too."""

    #: the program's public linear structure (covariates, declared bounds, the data-free map to the parameters)
    linear_spec: LinearSpec

    def linear_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The private rows: x of shape (N, K) and y of shape (N,)."""


@dataclasses.dataclass(frozen=True)
class GLMSpec:
    """The public structure of a logistic or Poisson regression likelihood (y_i ~ bernoulli_logit(eta_i) or
    poisson_log(eta_i), eta_i = a + x_i . b), which ``algorithm="dp-glm"`` needs besides the row-likelihood
    interface (a likelihood that qualifies has a ``glm_spec`` attribute holding one and a ``glm_rows()`` method
    returning the private (x (N, K), y (N,))).

    family: "logistic" or "poisson"; column_names: x's columns then y (for messages); x_bounds: (lower (K,),
    upper (K,)) known from the program (its declared constraints) or None; y_bounds: (lower, upper) of the outcome
    or None (a Poisson outcome needs a declared upper bound, its cap); terms: the coefficients as references into
    the program (the intercept's may be empty: no intercept)."""

    family: str
    n_covariates: int
    column_names: tuple[str, ...]
    outcome_name: str
    terms: RegressionTerms
    x_bounds: tuple[np.ndarray, np.ndarray] | None = None
    y_bounds: tuple[float, float] | None = None

    @property
    def intercept(self) -> bool:
        """Whether the linear predictor has a free intercept (a reference that is not a number)."""
        return any(not _is_number(ref) for ref in self.terms.intercept)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class GLMRowLikelihood(RowLikelihood, Protocol):
    """A row likelihood of a logistic or Poisson regression that declares its form: what dp-glm reads
    (``stan_dp.methods.dp_glm.glm_release``). ``DPStanModel`` sets both on a recognised program; the reference
    ``LogisticRegressionModel`` and ``PoissonRegressionModel`` have them too."""

    #: the program's public regression structure (family, covariates, declared bounds, coefficient references)
    glm_spec: GLMSpec

    def glm_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The private rows: x of shape (N, K) and y of shape (N,)."""
