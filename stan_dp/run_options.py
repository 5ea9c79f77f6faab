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

import argparse
import json
from typing import Any

__all__ = ["RUN_LEVEL_OPTIONS", "add_unit_arguments", "parse_option", "run_level_listing", "unit_options"]

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


def add_unit_arguments(p: argparse.ArgumentParser) -> None:
    """``--privacy-unit`` and ``--max-rows-per-unit`` (``stan-dp sample`` and ``advise``)."""
    p.add_argument("--privacy-unit", metavar="NAME", default=None,
                   help="protect all rows of one unit instead of one row: NAME is an int data variable with one "
                        "label per row (e.g. person); clip bounds then bound one unit's total, the number of units "
                        "is public (docs: privacy units)")
    p.add_argument("--max-rows-per-unit", metavar="K", type=int, default=None,
                   help="with --privacy-unit: keep each unit's first K rows (public cap; the number dropped is "
                        "never released)")


def unit_options(args: argparse.Namespace) -> dict[str, Any]:
    """The privacy-unit keywords of ``sample`` / ``advise`` given on the command line (none when not given)."""
    out: dict[str, Any] = {}
    if getattr(args, "privacy_unit", None) is not None:
        out["privacy_unit"] = args.privacy_unit
    if getattr(args, "max_rows_per_unit", None) is not None:
        out["max_rows_per_unit"] = args.max_rows_per_unit
    return out
