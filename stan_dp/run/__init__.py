"""Run: planning and the pipeline of a private run: request -> plan -> execute -> publish.

Takes: a row likelihood, the algorithm and its options, the (epsilon, delta) budget of the whole run, run options.
Gives: the run's plan (printable before any row is read) and the published fit.

Entry points: ``request.make_request`` (the public keywords sorted once), ``plan.plan_run`` (``auto``'s choice,
``auto`` and ``auto_release``, then a lookup in ``stan_dp.methods.registry``), ``pipeline.execute`` /
``pipeline.publish`` and ``pipeline.sample_private`` (all in one call; ``stan_dp.sample_private``). The methods
are in ``stan_dp.methods``, the phases they are made of in ``stan_dp.phases``.
"""
from typing import Any

from .._moved import forward_names

#: names of the old module ``stan_dp.run`` (the chain loop and its adaptation) and where they live now
_MOVED_NAMES = {
    **{name: "stan_dp.phases.chains" for name in (
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
