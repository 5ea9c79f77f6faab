"""Run: a private run from its public inputs -> plan -> execute (warm start, chains) -> publish.

Takes: a row likelihood, the algorithm and its options, the (epsilon, delta) budget of the whole run, run options.
Gives: a ``RunPlan`` (printable before any row is read), the chains' released result, and the published fit.

Entry points: ``plan.plan_run`` / ``plan.RunPlan`` (defined in ``kernel_run``; every method's plan implements
``method.MethodPlan``), ``pipeline.execute`` / ``pipeline.publish`` and
``pipeline.sample_private`` (all three in one call; ``stan_dp.sample_private``).
"""
from typing import Any

from .._moved import forward_names

#: names of the old module ``stan_dp.run`` (the chain loop and its adaptation) and where they live now
_MOVED_NAMES = {
    **{name: "stan_dp.run.chains" for name in (
        "CORE_STATS", "INIT_RADIUS", "METRICS", "RunInterruptedWarning", "initial_points", "run_chains")},
    **{name: "stan_dp.samplers.adaptation" for name in (
        "DualAveraging", "MetricPool", "MetricWindows", "lag1_autocorrelation", "regularized_variance")},
    **{name: "stan_dp.output.run_result" for name in ("ChainResult", "RunResult")},
}


def __getattr__(name: str) -> Any:
    """``stan_dp.run.run_chains`` and the other names of the old module ``stan_dp.run`` keep working until
    version 0.2.0, which removes them, with a ``DeprecationWarning`` naming the new path (once: the name is then
    bound here)."""
    value = forward_names(__name__, _MOVED_NAMES, name)
    globals()[name] = value
    return value
