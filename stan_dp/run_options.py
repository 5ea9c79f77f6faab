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
import dataclasses
import json
from typing import Any

__all__ = ["RUN_LEVEL_OPTIONS", "RunSettings", "add_unit_arguments", "parse_option", "run_level_listing",
           "unit_options"]

RUN_LEVEL_OPTIONS: tuple[str, ...] = ("step_size", "target_accept", "metric", "adapt_engaged", "pool_metric")


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """How the chain loop runs one private run: one frozen object instead of a dozen keywords passed along.

    Every field is public: given by the caller or chosen by the plan from public quantities; none reads a row.
    ``stan_dp.run.plan.plan_run`` resolves the run-level options (``RUN_LEVEL_OPTIONS``) and the run lengths
    into one of these (``RunPlan.settings``); ``stan_dp.run.pipeline.execute`` completes it with what only the
    kernel and the phases before the chains know (the kernel's public start step, the anchor's metric, whether
    the kernel adapts its step) and hands it to ``stan_dp.phases.chains.run_chains``; ``publish`` records the
    run-level part in the attrs (:meth:`run_options`).
    """

    chains: int = 4
    iter_warmup: int = 1000  # warmup iterations the chain loop runs (and the accountant counts)
    iter_sampling: int = 1000
    step_size: float = 1.0  # the start step size
    step_size_given: bool = True  # False: the caller gave none, and a kernel's public step rule may replace it
    target_accept: float = 0.8
    metric: Any = "unit"  # "unit", "diag" (adapted from released warmup draws) or a fixed inverse-metric vector
    metric_given: bool = True  # False: the caller gave none, and an anchored accept-test run may fix the anchor's
    initial_metric: Any = None  # the diagonal metric's public start (the kernel's or the anchor's), or None
    adapt_engaged: bool = True
    adapt_step_size: bool = True  # False for a kernel that keeps its step fixed
    pool_metric: bool = True  # estimate the diag metric from all chains' warmup draws together
    save_warmup: bool = False
    show_progress: bool = True

    def replace(self, **changes: Any) -> "RunSettings":
        """A copy with ``changes`` (field names as keywords); ``TypeError`` naming an unknown field."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"unknown run setting(s) {', '.join(unknown)}; known: "
                            f"{', '.join(f.name for f in dataclasses.fields(self))}")
        return dataclasses.replace(self, **changes)

    def run_options(self) -> dict[str, Any]:
        """The run-level options as the attrs record them (``run_options``): plain JSON values."""
        metric = self.metric if isinstance(self.metric, str) else [float(v) for v in self.metric]
        return {"step_size": float(self.step_size), "target_accept": float(self.target_accept), "metric": metric,
                "adapt_engaged": bool(self.adapt_engaged), "pool_metric": bool(self.pool_metric)}

    def describe(self) -> str:
        """One line for a printed plan: the run-level options."""
        metric = self.metric if isinstance(self.metric, str) else "fixed vector"
        step = f"{self.step_size:g}" + ("" if self.step_size_given else " (start; or the kernel's public step rule)")
        return (f"step_size {step}, target_accept {self.target_accept!r}, metric {metric!r}, "
                f"adapt_engaged {self.adapt_engaged!r}, pool_metric {self.pool_metric!r}")


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
