"""The run-level options: the one list every part of the package reads, and how a command line spells options
(kept import-light for the CLI).

Run-level options are keywords of ``sample_private`` (and ``DPStanModel.sample``) that every algorithm takes and
that the run machinery (``stan_dp.run``: the plan and the chain loop's adaptation) handles, never a kernel.
``stan_dp.run.plan`` (``RUN_OPTIONS``), the kernels' option specs (the "is a run-level option" hint in
``stan_dp.samplers.options``) and the CLI (which adds its own extras explicitly, ``stan_dp.cli.CLI_RUN_EXTRAS``)
all use this tuple. It sits below both ``run/`` and ``samplers/`` (a seam, like ``stan_dp.likelihood``) and
imports nothing, so the CLI reads it without importing the samplers or the accountant.
"""
from __future__ import annotations

import json
from typing import Any

__all__ = ["RUN_LEVEL_OPTIONS", "parse_option", "run_level_listing"]

RUN_LEVEL_OPTIONS: tuple[str, ...] = ("step_size", "target_accept", "metric", "adapt_engaged", "pool_metric")


def run_level_listing(extras: tuple[str, ...] = ()) -> str:
    """``"step_size, target_accept, ..."``: the run-level options (then ``extras``) for error messages."""
    return ", ".join((*RUN_LEVEL_OPTIONS, *extras))


def parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` of a command line's ``--option``: the key with dashes as underscores, the value parsed as JSON
    when it is JSON (numbers, true/false, lists), else the text. ``ValueError`` without ``=``."""
    if "=" not in text:
        raise ValueError(f"--option expects key=value, got {text!r}.\nWrite e.g. --option ratio_clip=2.")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip().replace("-", "_"), value
