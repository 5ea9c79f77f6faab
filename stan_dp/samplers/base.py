"""The kernel interface shared by all private samplers and the run machinery (``stan_dp.phases.chains``).

A kernel is one Markov transition with explicit state. The run machinery owns chains, warmup adaptation
(step size by dual averaging on the released acceptance statistic, optional diagonal metric from released
warmup draws), seeding, progress and accounting; kernels only know how to take one step.

Privacy contract: everything a kernel puts into ``StepInfo`` may be published. It must be a function of
mechanism outputs (noisy statistics, accept decisions, released draws) and public inputs only.
"""
from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol, Sequence

import numpy as np
from numpy.typing import ArrayLike

from ..likelihood import RowLikelihood
from ..privacy.mechanisms import release_accept_stat


@dataclass
class ChainState:
    """State of one chain: the current unconstrained point plus kernel-private caches.

    ``cache`` may hold data-dependent values (e.g. log-likelihoods at ``theta``); it is never released.
    """

    theta: np.ndarray
    cache: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepInfo:
    """Releasable per-iteration output of a kernel step.

    accepted: the accept decision of the (noisy) test.
    accept_stat: a releasable acceptance statistic in [0, 1] used for step-size adaptation
        (a function of the noisy test statistic, or the accept flag itself where only that may be released),
        rounded on construction to ``mechanisms.ACCEPT_STAT_DECIMALS`` decimal places.
    extra: further releasable per-iteration fields (e.g. n_steps, batch_size, full_batch, noise_free).
    """

    accepted: bool
    accept_stat: float
    extra: dict[str, float | int | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # released (and used by the adaptation) at a documented precision; see mechanisms.release_accept_stat
        self.accept_stat = release_accept_stat(self.accept_stat)


class Kernel(Protocol):
    """One private MCMC transition over a ``RowLikelihood``.

    Construction convention: ``KernelClass(likelihood, plan, **options)`` where ``plan`` is the
    ``stan_dp.privacy.PrivacyPlan`` returned by ``calibrate`` (it carries tau_l, tau_g, epsilon_iteration,
    ...) and ``options`` are the algorithm's public options. The constructor validates options and raises
    ``ValueError`` naming the bad option and listing the valid ones (``option_defaults``).

    Every attribute the run machinery, the planner and the audit read is listed here; ``KernelBase`` declares
    the optional ones with their defaults, and every kernel derives from it (a kernel written outside the package
    too: it then declares only what it changes).
    """

    #: name recorded by the accountant (``stan_dp.privacy.accounting.calibrate``), e.g. "penalty", "dp-hmc"
    accounting_name: ClassVar[str]
    #: public options and their defaults (documented in the kernel's docstring)
    option_defaults: ClassVar[dict[str, Any]]
    #: the public options, their types, bounds, defaults and docs (``stan_dp.samplers.options``)
    option_spec: ClassVar[Any]
    #: public option values the privacy audit runs the kernel with (e.g. a required bound), or None
    audit_options: ClassVar[dict[str, Any] | None]
    #: run-level defaults over the generic ones (``stan_dp.run.plan.run_defaults``), or None
    run_defaults: ClassVar[dict[str, Any] | None]
    #: False: the run keeps the step size fixed (no accept test to adapt it on)
    adapts_step_size: ClassVar[bool]
    #: True: the kernel warms up inside its mechanism (``set_internal_warmup``); those iterations are not released
    internal_warmup: ClassVar[bool]
    #: the guarantee in words when it is conditional (OPS), else None
    conditional_guarantee: ClassVar[str | None]
    #: a start step computed from public quantities, used when the caller gives none; None: the run's default
    default_step_size: float | None
    #: False when the options chosen use a mechanism whose (epsilon, delta) guarantee does not hold
    guarantee_holds: bool
    #: ``refine_metric(estimate, lag1, previous, step_size)``: corrects a warmup window's metric estimate from the
    #: window's lag-1 autocorrelation (``stan_dp.samplers.adaptation.window_metric``); None: no correction
    refine_metric: Callable[..., np.ndarray] | None
    #: the entries of ``ChainState.cache`` computed at the current point, from the rows among them (per-row
    #: log-likelihoods, noise-free clipped sums): never written to a checkpoint; a resumed chain gets them back from
    #: ``restore_cache`` (or the kernel's next step computes them again), with the values they had
    point_cache: ClassVar[tuple[str, ...]]

    def restore_cache(self, theta: np.ndarray, cache: dict[str, Any], dropped: Sequence[str]) -> dict[str, Any]:
        """The cache of a chain resumed at ``theta`` from a checkpoint that left out the ``point_cache`` entries
        ``dropped`` (those the chain had): computed again where the kernel needs them now, else as it is."""

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Extra keyword arguments for ``calibrate`` implied by the options (e.g. ``leapfrog_steps``)."""

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> Any:
        """The DpEvents of ONE iteration as a function of the noise parameters
        (``stan_dp.privacy.events.NoiseDeclaration``); the accountant composes and inverts them generically."""

    def initial_metric(self) -> np.ndarray | None:
        """A public starting diagonal metric for ``metric="diag"``, or None (the run's unit metric)."""

    def init_state(self, theta: np.ndarray) -> ChainState:
        """Build the state at a data-free initial point (no private data may be touched for release)."""

    def public_state(self, theta: np.ndarray) -> ChainState:
        """The public state a privacy audit starts one iteration from (``init_state`` unless the kernel carries a
        momentum, which is then the public 0)."""

    def step(
        self,
        rng: np.random.Generator,
        state: ChainState,
        step_size: float,
        metric: np.ndarray,
    ) -> tuple[ChainState, StepInfo]:
        """One transition. ``metric`` is the diagonal inverse mass / proposal scale vector, shape (dim,). ``rng``
        draws the mechanisms' noise (and the kernel's secret randomness, such as minibatches). A kernel whose
        ``step`` also takes the keyword ``proposal_rng`` (``takes_proposal_stream``) gets a generator of the chain's
        own there for its public randomness (proposals, momenta, step jitter, accept uniforms, public batch counts),
        whose results are released or nearly: they never come from the generator of the mechanisms' noise
        (``stan_dp.privacy.noise_source``: one stream per purpose). None: ``rng`` draws everything (the audit)."""


class KernelBase(ABC):
    """The one place where a kernel's optional attributes get their defaults (listed and documented in
    ``Kernel``). Every kernel class derives from it and overrides what it changes; the run machinery, the
    planner and the audit then read the attributes directly. ``init_state`` and ``step`` have no default: a class
    that lacks one cannot be instantiated (``TypeError`` naming it); ``noise_declaration``, which only the
    accountant reads, has none either: the accountant's call is refused with a ``TypeError``."""

    accounting_name: ClassVar[str] = ""
    option_defaults: ClassVar[dict[str, Any]] = {}
    option_spec: ClassVar[Any] = None
    audit_options: ClassVar[dict[str, Any] | None] = None
    run_defaults: ClassVar[dict[str, Any] | None] = None
    adapts_step_size: ClassVar[bool] = True
    internal_warmup: ClassVar[bool] = False
    #: why a run of this kernel cannot be checkpointed (its state is not all in ``ChainState``), else None
    checkpoint_refusal: ClassVar[str | None] = None
    conditional_guarantee: ClassVar[str | None] = None
    default_step_size: float | None = None
    guarantee_holds: bool = True
    refine_metric: Callable[..., np.ndarray] | None = None
    point_cache: ClassVar[tuple[str, ...]] = ()

    # the constructor every kernel has (the run builds kernel classes through this signature); nothing to store
    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any) -> None:  # noqa: B027
        """Every kernel is built as ``KernelClass(likelihood, plan, **options)`` (see ``Kernel``)."""

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """No calibration keywords implied by the options."""
        return {}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> Any:
        """The DpEvents of one iteration (see ``Kernel.noise_declaration``). A class that does not declare them
        cannot be accounted, so the accountant's call is refused."""
        raise TypeError(f"{cls.__name__} declares no privacy noise (no noise_declaration): it cannot be accounted")

    def set_internal_warmup(self, iterations: int) -> None:
        """Only a kernel with ``internal_warmup = True`` is told its warmup length; telling another one is a
        mistake of the caller."""
        raise TypeError(f"{type(self).__name__} does not warm up internally (internal_warmup is False)")

    def initial_metric(self) -> np.ndarray | None:
        """No public starting metric: the run's unit metric."""
        return None

    @abstractmethod
    def init_state(self, theta: np.ndarray) -> ChainState:
        """The state at a data-free initial point (see ``Kernel.init_state``)."""

    def public_state(self, theta: np.ndarray) -> ChainState:
        """The audit's start: the kernel's ``init_state`` (a kernel with a momentum overrides this)."""
        return self.init_state(theta)

    def restore_cache(self, theta: np.ndarray, cache: dict[str, Any], dropped: Sequence[str]) -> dict[str, Any]:
        """The cache as it is: a kernel whose ``point_cache`` entries are missing computes them at its next step
        (see ``Kernel.restore_cache``)."""
        return cache

    @abstractmethod
    def step(self, rng: np.random.Generator, state: ChainState, step_size: float,
             metric: np.ndarray) -> tuple[ChainState, StepInfo]:
        """One transition (see ``Kernel.step``)."""


def takes_proposal_stream(kernel: Any) -> bool:
    """Whether ``kernel.step`` takes the keyword ``proposal_rng`` (see ``Kernel.step``): the package's penalty,
    DP-HMC, DP-Fast MH, DP-SGHMC and DP-SGNHT do; a kernel (or a subclass overriding ``step``) without it draws
    everything from its one generator."""
    try:
        return "proposal_rng" in inspect.signature(kernel.step).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


# ------------------------------------------------------------------------ argument checks shared by kernels

def check_step_args(step_size: float, metric: np.ndarray, dim: int) -> tuple[float, np.ndarray]:
    """Validate the run-level step size (> 0) and diagonal metric (shape (dim,), entries > 0)."""
    step_size = float(step_size)
    if not (step_size > 0.0 and math.isfinite(step_size)):
        raise ValueError(f"step_size must be finite and > 0, got {step_size}")
    metric = np.asarray(metric, dtype=float)
    if metric.shape != (dim,):
        raise ValueError(f"metric must have shape ({dim},), got {metric.shape}")
    if not (np.all(metric > 0.0) and np.all(np.isfinite(metric))):
        raise ValueError("metric entries must be finite and > 0")
    return step_size, metric


def check_theta(theta: ArrayLike, dim: int) -> np.ndarray:
    """A finite copy of a data-free initial point of shape (dim,)."""
    t = np.array(theta, dtype=float, copy=True)
    if t.shape != (dim,):
        raise ValueError(f"theta must have shape ({dim},), got {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("the initial theta must be finite")
    return t
