"""The run-level options: the one list every part of the package reads (kept import-light for the CLI).

Run-level options are keywords of ``sample_private`` (and ``DPStanModel.sample``) that every algorithm takes and
that the run machinery (``stan_dp.run``: the plan and the chain loop's adaptation) handles, never a kernel.
``stan_dp.run.plan`` (``RUN_OPTIONS``), the kernels' option specs (the "is a run-level option" hint in
``stan_dp.samplers.options``) and the CLI (which adds its own extras explicitly, ``stan_dp.cli.CLI_RUN_EXTRAS``)
all use this tuple. It sits below both ``run/`` and ``samplers/`` (a seam, like ``stan_dp.likelihood``) and
imports nothing, so the CLI reads it without importing the samplers or the accountant.
"""
from __future__ import annotations

__all__ = ["RUN_LEVEL_OPTIONS", "run_level_listing"]

RUN_LEVEL_OPTIONS: tuple[str, ...] = ("step_size", "target_accept", "metric", "adapt_engaged", "pool_metric")


def run_level_listing(extras: tuple[str, ...] = ()) -> str:
    """``"step_size, target_accept, ..."``: the run-level options (then ``extras``) for error messages."""
    return ", ".join((*RUN_LEVEL_OPTIONS, *extras))
