"""The kernel interface shared by all private samplers and the run machinery (``stan_dp.run.chains``).

A kernel is one Markov transition with explicit state. The run machinery owns chains, warmup adaptation
(step size by dual averaging on the released acceptance statistic, optional diagonal metric from released
warmup draws), seeding, progress and accounting; kernels only know how to take one step.

Privacy contract: everything a kernel puts into ``StepInfo`` may be published. It must be a function of
mechanism outputs (noisy statistics, accept decisions, released draws) and public inputs only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

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
    """

    #: name recorded by the accountant (``stan_dp.privacy.accounting.calibrate``), e.g. "penalty", "dp-hmc"
    accounting_name: ClassVar[str]
    #: public options and their defaults (documented in the kernel's docstring)
    option_defaults: ClassVar[dict[str, Any]]

    #: the public options, their types, bounds, defaults and docs (``stan_dp.samplers.options``)
    option_spec: ClassVar[Any]

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Extra keyword arguments for ``calibrate`` implied by the options (e.g. ``leapfrog_steps``)."""

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> Any:
        """The DpEvents of ONE iteration as a function of the noise parameters
        (``stan_dp.privacy.events.NoiseDeclaration``); the accountant composes and inverts them generically.

        Optional attributes the run machinery reads: ``adapts_step_size`` (False: no dual averaging, e.g. kernels
        without an accept test), ``default_step_size`` (a step computed from public quantities),
        ``initial_metric()`` (a public starting diagonal metric for ``metric="diag"``) and ``run_defaults``.
        """

    def init_state(self, theta: np.ndarray) -> ChainState:
        """Build the state at a data-free initial point (no private data may be touched for release)."""

    def step(
        self,
        rng: np.random.Generator,
        state: ChainState,
        step_size: float,
        metric: np.ndarray,
    ) -> tuple[ChainState, StepInfo]:
        """One transition. ``metric`` is the diagonal inverse mass / proposal scale vector, shape (dim,)."""


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


def check_theta(theta, dim: int) -> np.ndarray:
    """A finite copy of a data-free initial point of shape (dim,)."""
    t = np.array(theta, dtype=float, copy=True)
    if t.shape != (dim,):
        raise ValueError(f"theta must have shape ({dim},), got {t.shape}")
    if not np.all(np.isfinite(t)):
        raise ValueError("the initial theta must be finite")
    return t
