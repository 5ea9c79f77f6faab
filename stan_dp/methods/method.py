"""The interface every method's plan implements, so that ``stan_dp.run.pipeline`` holds no per-method branch.

A plan (``stan_dp.methods.kernels.kernel_run.RunPlan`` for the kernels, anchored or not, ``stan_dp.methods.dp_laplace.laplace.LaplacePlan``,
``stan_dp.methods.dp_ssp.ssp.SSPPlan``) is decided from public inputs alone by ``stan_dp.run.plan.plan_run``. It then runs
itself (:meth:`MethodPlan.execute`: the only step that reads rows) and publishes what it executed
(:meth:`MethodPlan.publish`: post-processing into ArviZ data). What a method cannot do is said before any row is
read: ``debug_refusal`` (no per-draw log density to report) and ``checkpoint_refusal`` (no chain state to store).
"""
from __future__ import annotations

import dataclasses
import threading
from typing import Any, Protocol

import numpy as np

from ..likelihood import RowLikelihood
from ..run_options import RUN_LEVEL_OPTIONS
from ..privacy import PrivacyPlan
from ..phases.checkpoint import Checkpoint, Checkpointer

__all__ = ["AutoChoice", "MethodPlan", "CHAIN_TUNING_OPTIONS", "chain_free_option_names", "chain_free_options", "check_lengths", "refuse_chain_tuning"]

#: run-level options that tune a kernel's chains (its step size, acceptance target and metric); a method that
#: draws in closed form (dp-laplace) or samples its own posterior with NUTS (dp-ssp) refuses them
CHAIN_TUNING_OPTIONS = ("step_size", "target_accept", "metric")


def refuse_chain_tuning(algorithm: str, run_options: Any, why: str) -> None:
    """``ValueError`` naming the chain-tuning options given in ``run_options`` (a mapping or None) that
    ``algorithm`` cannot use; ``why``: the reason, as a clause ("draws in closed form")."""
    given = [k for k in CHAIN_TUNING_OPTIONS if (run_options or {}).get(k) is not None]
    if given:
        raise ValueError(f"algorithm {algorithm!r} {why}; {', '.join(map(repr, given))} do not apply")


def chain_free_option_names(own: Any) -> frozenset[str]:
    """The options a method without a private chain takes: its ``own`` and the run-level ones that are not chain
    tuning."""
    return frozenset({*own, *(k for k in RUN_LEVEL_OPTIONS if k not in CHAIN_TUNING_OPTIONS)})


def chain_free_options(run_level: Any) -> dict[str, Any]:
    """The chain-tuning options given among the run-level ones (a mapping or None): what a method without a
    private chain checks (and refuses) and records."""
    return {k: (run_level or {}).get(k) for k in CHAIN_TUNING_OPTIONS}


def check_lengths(chains: Any, iter_warmup: Any, iter_sampling: Any) -> None:
    """``ValueError`` for a run length that is not an integer at least its minimum (chains 1, iter_warmup 0,
    iter_sampling 1); None leaves a length to the method."""
    for name, value, minimum in (("chains", chains, 1), ("iter_warmup", iter_warmup, 0),
                                 ("iter_sampling", iter_sampling, 1)):
        if value is None and name != "chains":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")


@dataclasses.dataclass
class AutoChoice:
    """How ``auto`` chose a plan (``stan_dp.run.auto.resolve_auto``, ``stan_dp.run.auto_release``): algorithm, its
    options, why (one plain sentence) and the evidence; a plan carries it and its publication records it."""

    algorithm: str
    options: dict[str, Any]
    reason: str
    dropped: list[str] = dataclasses.field(default_factory=list)
    #: the rule's evidence and the run's public inputs (stored in ``attrs["auto_evidence"]``, not printed)
    evidence: str = ""
    #: where the gradient bound came from ("grad_clip option", "the declared bounds of x"), or "" (no grad_clip)
    bounds_source: str = ""
    #: the price in advance in one sentence (``stan_dp.methods.dp_glm.glm_price``), or "" when no public curvature is known
    price: str = ""
    #: the choice in one short sentence (at most ``SHORT_LINE_MAX`` characters with its "auto: " prefix): what the
    #: run prints on stderr; ``reason`` holds the full sentence (attrs, ``stan-dp summary``)
    short: str = ""

    def annotate(self, fit: Any) -> Any:
        """Record the choice in the root attrs of an ArviZ result (``auto_choice``, ``auto_reason``,
        ``auto_evidence``, and ``bounds_source`` / ``price_in_advance`` when known)."""
        fit.attrs["auto_choice"] = self.algorithm
        fit.attrs["auto_reason"] = self.reason
        fit.attrs["auto_evidence"] = self.evidence
        if self.bounds_source:
            fit.attrs["bounds_source"] = self.bounds_source
        if self.price:
            fit.attrs["price_in_advance"] = self.price
        return fit


class MethodPlan(Protocol):
    """A private run's plan: its public description, its execution on the rows and its publication."""

    @property
    def label(self) -> str:
        """The algorithm as the metadata records it."""

    @property
    def algorithm(self) -> str:
        """The method's registry name."""

    @property
    def privacy(self) -> PrivacyPlan:
        """The calibrated noise of the whole run."""

    @property
    def debug_refusal(self) -> str | None:
        """Why ``debug=True`` is refused for this method (it evaluates no log density), else None."""

    @property
    def checkpoint_refusal(self) -> str | None:
        """Why ``checkpoint=`` is refused for this method (no chain state to store), else None."""

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
                show_progress: bool = True, save_warmup: bool = False, stop_event: threading.Event | None = None,
                checkpoint: Checkpointer | None = None, restored: Checkpoint | None = None) -> Any:
        """Run the mechanisms and the draws on ``likelihood`` (arguments as in ``sample_private``); returns
        what :meth:`publish` takes. ``checkpoint`` / ``restored``: only where ``checkpoint_refusal`` is None."""

    def publish(self, executed: Any, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """ArviZ data of ``executed`` (what :meth:`execute` returned): post-processing only."""
