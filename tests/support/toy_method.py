"""A toy private method: everything a new method needs, in one module and one registration.

It releases one Gaussian mechanism, the clipped sum of the rows' log-likelihood gradients at the public start
(theta = 0), takes one gradient step from there, and publishes that point as every draw of every chain. It is not
a posterior sampler (its "draws" do not vary); it shows the interface: the options it takes (``check``), its plan
from public inputs (``plan``: the calibrated noise of the whole run, before any row is read), the step that reads
rows (``execute``) and the publication (``publish``: post-processing into ArviZ data with the privacy metadata).
The docs' design page shows this file; ``tests/methods/test_registry.py`` registers it and runs it end to end.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from stan_dp.likelihood import RowLikelihood
from stan_dp.output.inference_data import RunRecord, build_inference_data
from stan_dp.output.run_result import ChainResult, RunResult
from stan_dp.privacy import PrivacyPlan, calibrate_phases, mechanisms
from stan_dp.privacy.events import NoiseDeclaration, Phase, gaussian_release
from stan_dp.privacy.noise_source import stream
from stan_dp.methods.method import chain_free_option_names, check_lengths, refuse_chain_tuning
from stan_dp.methods.registry import PlanInputs, PlannedMethod

NAME = "toy-gradient-step"
OPTIONS = ("grad_clip", "step")
RELEASE = "toy: clipped gradient sum at the public start"


def check(options: dict[str, Any]) -> None:
    """Refuse what can never run, from the options alone (before any compile or row)."""
    unknown = sorted(k for k in options if k not in OPTIONS)
    if unknown:
        raise ValueError(f"algorithm {NAME!r} does not take {', '.join(unknown)}; its options are {', '.join(OPTIONS)}")
    if options.get("grad_clip") is None:
        raise ValueError(f"algorithm {NAME!r} needs a public per-row gradient bound: give grad_clip")


@dataclasses.dataclass(frozen=True)
class ToyPlan:
    """The toy's plan: public inputs and the calibrated noise only."""

    privacy: PrivacyPlan
    grad_clip: float
    step: float
    chains: int
    iter_sampling: int
    dim: int
    label: str = NAME
    algorithm: str = NAME
    debug_refusal: str | None = "the toy evaluates no log density to report"
    checkpoint_refusal: str | None = "the toy has no chain state to store"

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, **_: Any) -> np.ndarray:
        """The one release (the only step that reads rows) and the step from the public start."""
        theta0 = np.zeros(self.dim)
        _, grads = likelihood.row_log_lik_grad(theta0)
        _, prior_grad = likelihood.log_prior_grad(theta0)
        noisy, _ = mechanisms.noisy_clipped_gradient(stream(seed, "mechanism noise", NAME), grads, prior_grad,
                                                     self.grad_clip, float(self.privacy.parameters["tau_g"]))
        return theta0 + self.step * noisy / int(likelihood.n_rows)

    def publish(self, executed: np.ndarray, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """The released point as every draw, with the privacy metadata (post-processing only)."""
        chains = [ChainResult(draws=np.tile(executed, (self.iter_sampling, 1)), stats={}, warmup_draws=None,
                              warmup_stats={}, n_warmup=0, n_sampling=self.iter_sampling, step_size=float("nan"),
                              metric=np.ones(self.dim), init=np.zeros(self.dim)) for _ in range(self.chains)]
        result = RunResult(chains=chains, dim=self.dim, iter_warmup=0, iter_sampling=self.iter_sampling,
                           save_warmup=False, interrupted=False, seeded=False, metric_kind="none",
                           target_accept=float("nan"), initial_step_size=float("nan"), adapt_engaged=False,
                           init_description="the public start theta = 0")
        record = RunRecord(NAME, {"grad_clip": self.grad_clip, "step": self.step}, self.privacy.report(),
                           plan=self.privacy, model_name=model_name, source_hash=source_hash)
        return build_inference_data(result, likelihood, record)


def plan(inputs: PlanInputs) -> ToyPlan:
    """The toy's plan from public inputs: one Gaussian mechanism calibrated to the whole budget."""
    check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
    refuse_chain_tuning(NAME, inputs.run_level, "publishes one released point")
    declaration = NoiseDeclaration(parameters=lambda s: {"tau_g": s},
                                   releases=lambda p: [gaussian_release(RELEASE, p["tau_g"])], noise_names=("tau_g",))
    privacy = calibrate_phases([Phase(declaration, 1, 1)], epsilon=inputs.epsilon, delta=inputs.delta,
                               algorithm=NAME)
    return ToyPlan(privacy, float(inputs.options["grad_clip"]), float(inputs.options.get("step", 1.0)),
                   int(inputs.chains), int(inputs.iter_sampling or 100), int(inputs.dim))


#: the registration: ``stan_dp.methods.registry.register(TOY)`` (a test registers it for its duration instead)
TOY = PlannedMethod(NAME, check, plan, chain_free_option_names(OPTIONS))
