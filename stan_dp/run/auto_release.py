"""``algorithm="auto"`` between a release-once method and the iterative kernels, by forecast, from public inputs.

A release-once method (dp-ssp for a normal linear program, dp-glm for a logistic or Poisson one) qualifies when its
public bounds are known (declared in the data block or given as options). Its chains are post-processing, so it
converges whatever the budget; its price is the error of its release (``expected_error_sd``). An iterative kernel
is worth running instead only where it can reach enough effective draws with the budget: its forecast
(``stan_dp.methods.kernels.forecast.kernel_ess_bound``, at the same public design assumption as the release's price) must
reach ``KERNEL_DRAWS_WANTED`` (400: what az.summary asks of 4 chains). So auto takes the release-once method
whenever it qualifies and the kernel's forecast is below that (or no kernel can run: no gradient bound), and says
both forecasts in one short sentence; otherwise it falls back to the kernels and says why the release-once method
was not used.
"""
from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from .auto import AutoChoice, short_line
from ..methods.kernels.forecast import KERNEL_DRAWS_WANTED, kernel_ess_bound
from ..methods.dp_glm.glm_release import BOUND_OPTIONS, GLM, GLM_SPEC, GLMPlan, design_posterior_sd, plan_glm
from ..methods.dp_ssp.ssp import SSP, SSP_OPTIONS, SSPPlan, auto_ssp_reason, plan_ssp, resolve_bounds

__all__ = ["release_once_choice"]


def _kernel_bound(options: dict[str, Any], row_bounds: Any) -> float | None:
    """The per-row gradient bound an iterative kernel would use: given, or derived from the program's bounds."""
    if options.get("grad_clip") is not None:
        return float(options["grad_clip"])
    if row_bounds is not None and getattr(row_bounds, "derivable", False) and row_bounds.grad_clip is not None:
        return float(row_bounds.grad_clip)
    return None


def _plan(n_rows: int, dim: int, facts: Any, *, epsilon: float, delta: float, chains: int,
          iter_warmup: int | None, iter_sampling: int | None, options: dict[str, Any]
          ) -> tuple[SSPPlan | GLMPlan | None, str, list[str]]:
    """The release-once plan the program qualifies for (or None) with the reason it does not, and the options it
    leaves unused."""
    if facts.linear is not None:
        try:
            resolve_bounds(facts.linear, options)
        except ValueError as exc:
            return None, f"dp-ssp not used: {exc}", []
        taken = {k: v for k, v in options.items() if k in SSP_OPTIONS}
        plan: SSPPlan | GLMPlan = plan_ssp(n_rows, dim, linear=facts.linear, epsilon=epsilon, delta=delta,
                                           chains=chains, iter_warmup=iter_warmup, iter_sampling=iter_sampling,
                                           rows_per_unit=facts.rows_per_unit, **taken)
    elif facts.glm is not None:
        taken = {k: v for k, v in options.items() if k in BOUND_OPTIONS or k in GLM_SPEC.names}
        try:
            plan = plan_glm(n_rows, dim, glm=facts.glm, epsilon=epsilon, delta=delta, chains=chains,
                            iter_warmup=iter_warmup, iter_sampling=iter_sampling,
                            rows_per_unit=facts.rows_per_unit, **taken)
        except ValueError as exc:
            return None, f"dp-glm not used: {exc}", []
    else:
        return None, "", []
    dropped = sorted(k for k in options if k not in taken and options[k] is not None)
    return plan, "", dropped


def _expected(plan: SSPPlan | GLMPlan) -> float:
    return float(plan.floor.max_error) if isinstance(plan, SSPPlan) else float(plan.price)


def _design_sd(plan: SSPPlan | GLMPlan) -> np.ndarray | None:
    """The posterior sds the release's price assumes, in the program's coordinates (GLM); None for dp-ssp, whose
    kernels need a residual scale no bound gives."""
    if isinstance(plan, GLMPlan):
        return design_posterior_sd(plan.assumed_rows, plan.box)
    return None


def release_once_choice(n_rows: int, dim: int, facts: Any, *, epsilon: float, delta: float, chains: int,
                        iter_warmup: int | None, iter_sampling: int | None, options: dict[str, Any],
                        quiet: bool) -> tuple[SSPPlan | GLMPlan | None, str]:
    """(the release-once plan auto takes, "") or (None, why none was taken, "" when none qualifies)."""
    plan, refusal, dropped = _plan(n_rows, dim, facts, epsilon=epsilon, delta=delta, chains=chains,
                                   iter_warmup=iter_warmup, iter_sampling=iter_sampling, options=options)
    if plan is None:
        return None, refusal
    name = SSP if isinstance(plan, SSPPlan) else GLM
    bound = _kernel_bound(options, facts.row_bounds)
    sd = _design_sd(plan)
    ess = None
    if bound is not None and sd is not None:
        ess = kernel_ess_bound(epsilon=epsilon, delta=delta, posterior_sd=sd, grad_clip=bound,
                               rows_per_unit=facts.rows_per_unit)
        if ess >= KERNEL_DRAWS_WANTED:
            return None, (f"{name} not used: an anchored kernel's forecast ({ess:.3g} effective draws) reaches "
                          f"{KERNEL_DRAWS_WANTED}")
    kernel = ("no iterative kernel has a gradient bound" if bound is None
              else "an iterative kernel's draws cannot be forecast without a residual scale" if ess is None
              else f"an iterative kernel would reach about {ess:.2g} effective draws")
    short = (f"{name}: released once, expected error about {_expected(plan):.2g} posterior sds; {kernel}")
    detail = (auto_ssp_reason(plan.floor, plan.bounds_source) if isinstance(plan, SSPPlan)
              else f"dp-glm: the program is a {plan.box.family} regression with public bounds ({plan.bounds_source}); "
                   f"{plan}")
    reason = f"{short}. {detail}" + (f"; unused: {', '.join(dropped)}" if dropped else "")
    line = short_line(f"{name}, released once: expected error about {_expected(plan):.2g} posterior sds", kernel)
    choice = AutoChoice(name, dict(plan.options), reason, dropped, short=line)
    if not quiet:
        print(choice.short, file=sys.stderr)
    return dataclasses.replace(plan, auto=choice), ""
