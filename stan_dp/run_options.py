"""The run-level options: the one list every part of the package reads (kept import-light for the CLI).

Run-level options are keywords of ``sample_private`` (and ``DPStanModel.sample``) that every algorithm takes and
that the run machinery (``stan_dp.run``) handles, never a kernel. ``stan_dp.sampling`` (``RUN_OPTIONS``), the
kernels' option specs (the "is a run-level option" hint in ``stan_dp.samplers.options``) and the CLI (which adds
its own extras explicitly, ``stan_dp.cli.CLI_RUN_EXTRAS``) all use this tuple.
"""
from __future__ import annotations

__all__ = ["RUN_LEVEL_OPTIONS", "run_level_listing"]

RUN_LEVEL_OPTIONS: tuple[str, ...] = ("step_size", "target_accept", "metric", "adapt_engaged", "pool_metric")


def run_level_listing(extras: tuple[str, ...] = ()) -> str:
    """``"step_size, target_accept, ..."``: the run-level options (then ``extras``) for error messages."""
    return ", ".join((*RUN_LEVEL_OPTIONS, *extras))
