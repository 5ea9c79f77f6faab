"""The ``stan-dp`` command: sample, reference, compare, summary, audit, advise and demo.

Results go to stdout and files; progress and warnings go to stderr. Bad input exits with status 2 and a short
reason: the first line says what is wrong, the second what to do (``--verbose`` adds the traceback).
``--verbose`` and ``--quiet`` are accepted before or after the subcommand.

Subcommands are rows of ``SUBCOMMANDS`` (name, help, argument builder, runner): adding one is a local edit.
Everything a private run can be refused for (paths, suffixes, algorithm, options, budget range, inits file) is
checked before the Stan program is compiled and before any data row is read, and the draws of a finished run
are never lost: if the output cannot be written they go to a fallback file (``stan_dp.output.files``).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .stan.backend_error import BackendError
from .tools.advise_arguments import ADVISE_DESCRIPTION, ADVISE_HELP, add_advise_arguments
from .run_options import RUN_LEVEL_OPTIONS as PACKAGE_RUN_LEVEL_OPTIONS, add_unit_arguments, parse_option, run_level_listing, unit_options


class UsageError(ValueError):
    """Bad command-line input (reported in one or two lines, exit status 2)."""


# ------------------------------------------------------------------------------------------------ helpers
def _parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with value parsed as JSON when possible (``stan_dp.run_options.parse_option``)."""
    try:
        return parse_option(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        hint = "It is a directory; give a file inside it." if p.is_dir() else "Check the path (relative paths start " \
            f"in {Path.cwd()})."
        raise UsageError(f"{what} not found: {path}\n{hint}")
    return p


def _emit_warnings(command: str, caught: Sequence[warnings.WarningMessage], skip: tuple[type, ...] = ()) -> None:
    """Print caught warnings as ``stan-dp CMD: warning: ...`` lines on stderr (once each); ``skip``: categories
    already reported another way (the convergence verdict, which the summary prints)."""
    seen: set[str] = set()
    for w in caught:
        text = str(w.message)
        if text in seen or issubclass(w.category, (DeprecationWarning, FutureWarning, *skip)):
            continue
        seen.add(text)
        print(f"stan-dp {command}: warning: {text}", file=sys.stderr)


def _print_summary(idata: Any, verbose: bool = False, written: str | None = None) -> None:
    """az.summary, the convergence verdict (once), how the run was set up and the privacy statement. A verdict
    saying the chains are stuck (still near their start, drifting, or not moving) comes first: the table would
    mislead without it. ``verbose`` prints the verdict with its evidence. ``written``: the file the command has
    just written: then the guarantee is said in one line with where the rest is (``stan-dp summary FILE`` prints
    the setup and the privacy report), so that one workflow prints the report once."""
    import arviz as az
    import pandas as pd

    from .output.diagnostics import stored_convergence

    from .output.arviz_compat import get_group

    verdict = stored_convergence(idata)
    text = None if verdict is None else (verdict.details() if verbose else verdict.message())
    if verdict is not None and verdict.stuck:
        print(f"WARNING: {text}\n")
    draws = int(get_group(idata, "posterior").sizes.get("draw", 0))
    if draws < 2:  # e.g. a run stopped during warmup: nothing for az.summary to summarise
        print(f"No posterior summary: the fit holds {draws} sampling draw(s) per chain.")
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            table = az.summary(idata)
        with pd.option_context("display.width", 120, "display.max_columns", 20):
            print(table)
    if verdict is not None and not verdict.stuck:
        print()
        print(text)
    dependence = dict(idata.attrs).get("draw_dependence")
    if dependence:  # e.g. dp-laplace: independent draws, whose R-hat and ESS mean nothing
        print()
        print(f"Draws: {dependence}")
    print()
    if written is not None and int(dict(idata.attrs).get("private", 0)) == 1:
        from .privacy.statement import guarantee_line

        print(f"{guarantee_line(dict(idata.attrs))}\nHow the run was chosen and the full privacy report (what the "
              f"budget covers, what is not protected, the accountant's details): stan-dp summary {written}")
        return
    setup = _setup_text(dict(idata.attrs))
    if setup:
        print(setup + "\n")
    print(privacy_text(idata))


#: the attrs that say how a run was set up, with their labels in ``stan-dp summary``
SETUP_ATTRS = (("auto_reason", "Algorithm (auto)"), ("run_lengths_reason", "Run lengths"))


def _setup_text(attrs: dict[str, Any]) -> str:
    """How the run was set up (auto's full reason, the run lengths' reason), wrapped at 100 columns; "" when the
    fit has neither (a reference, or an algorithm named with given lengths)."""
    import textwrap

    return "\n".join(textwrap.fill(f"{label}: {attrs[key]}", width=100, subsequent_indent="  ")
                     for key, label in SETUP_ATTRS if attrs.get(key))


def privacy_text(idata: Any) -> str:
    """The privacy statement of a fit as readable text (``stan_dp.privacy.statement.privacy_text``)."""
    from .privacy.statement import privacy_text as text

    return text(idata)


def _load(path: str, what: str = "netCDF file"):
    """A netCDF fit, or Stan CSV path(s) (``a.csv`` or ``a_1.csv,a_2.csv``) passed through for ``compare``."""
    parts = [p for p in path.split(",") if p]
    if parts and all(p.lower().endswith(".csv") for p in parts):
        for p in parts:
            _existing(p, "Stan CSV file")
        return parts[0] if len(parts) == 1 else parts
    from .output.arviz_compat import from_netcdf

    p = _existing(path, what)
    try:
        return from_netcdf(p)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path} is not a netCDF file written by stan-dp ({type(exc).__name__}).\n"
                         "Give a .nc file written by `stan-dp sample` or `stan-dp reference`, or Stan CSV "
                         "file(s) ending in .csv.") from exc


# ------------------------------------------------------------------------------------------------ preflight
#: keys of --option that the CLI also routes to DPStanModel.sample rather than to the algorithm (its own extras)
CLI_RUN_EXTRAS = ("save_warmup", "threads", "include_tp", "include_gq", "inits")
#: keys of --option taken for every algorithm: the package's run-level options plus the CLI's extras
RUN_LEVEL_OPTIONS = (*PACKAGE_RUN_LEVEL_OPTIONS, *CLI_RUN_EXTRAS)


def _preflight_sample(args: argparse.Namespace, options: dict[str, Any]) -> None:
    """Refuse a private run for every reason that needs neither the compiler nor the data rows."""
    from .output.files import check_output_path
    from .methods import registry
    from .run.plan import algorithm_names, check_request
    from .run.request import make_request
    from .stan.glm_program import program_row_bounds, unit_row_bounds
    from .stan.linear_program import ssp_ready

    _existing(args.model, "Stan program")
    _existing(args.data, "Data file")
    _check_row_data_path(args)
    check_output_path(args.output, suffixes=(".nc",), what="--output")
    if args.csv:
        check_output_path(args.csv, suffixes=(".csv",), what="--csv")
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise UsageError(f"--epsilon must be a positive number, got {args.epsilon}.\nThe budget of the whole run, "
                         "e.g. --epsilon 1.")
    if not (0 < args.delta < 1):
        raise UsageError(f"--delta must lie strictly between 0 and 1, got {args.delta}.\nUse a value well below "
                         "1/N, e.g. --delta 1e-6.")
    for name in ("chains", "iter_sampling"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}.\n"
                             "Give a positive integer.")
    if args.iter_warmup is not None and args.iter_warmup < 0:
        raise UsageError(f"--iter-warmup must be at least 0, got {args.iter_warmup}.\nGive a non-negative integer.")
    request = make_request(algorithm=args.algorithm, epsilon=args.epsilon, delta=args.delta, chains=args.chains,
                           iter_warmup=args.iter_warmup, iter_sampling=args.iter_sampling,
                           **{k: v for k, v in options.items() if k not in CLI_RUN_EXTRAS})
    algorithm, algorithm_options = request.algorithm, dict(request.options)
    chooser = registry.is_auto(algorithm)
    if not chooser and algorithm not in algorithm_names():
        raise UsageError(f"Unknown algorithm {args.algorithm!r}; valid algorithms: auto, "
                         f"{', '.join(algorithm_names())}.\nPick one with --algorithm (auto is the default).")
    _check_row_count_declaration(args)
    try:  # the first stage of the run's plan (stan_dp.run.plan), which needs neither N nor the compiled program
        unit = getattr(args, "privacy_unit", None)
        ready = chooser and unit is None and ssp_ready(args.model, args.rows, algorithm_options)
        # with a unit, one unit's bound: k times a row's with the public cap k, or a refusal saying what to give
        derivable = (unit_row_bounds(program_row_bounds(args.model, args.rows), unit,
                                     getattr(args, "max_rows_per_unit", None)) if chooser else None)
        check_request(algorithm, algorithm_options, ssp_ready=ready, row_bounds=derivable)
    except ValueError as exc:
        text = str(exc)
        if text.startswith("unknown option"):
            raise UsageError(f"{text}.\nRun-level options for every algorithm: "
                             f"{run_level_listing(CLI_RUN_EXTRAS)}.") from None
        raise UsageError(text if text.endswith(".") else
                         f"{text}.\nSee `stan-dp sample --help` and the README's algorithm table.") from None
    _load_inits(args, options)


def _check_row_count_declaration(args: argparse.Namespace) -> None:
    """Refuse, from the program text before compiling, a row count declared with a lower bound above 0 (the
    data-free prior needs no rows). A program stanc cannot print is left to the compile, which names its error."""
    from .model import zero_rows_refusal
    from .stan import toolchain
    from .stan.data import parse_declarations

    try:
        declarations = parse_declarations(toolchain.canonical_program(Path(args.model)), "data")
    except Exception:  # noqa: BLE001 - a syntax error or a missing toolchain: the compile step reports it
        return
    rows = getattr(args, "rows", "N")  # every sample / advise parser has --rows (default N)
    declared = next((d.type_text for d in declarations if d.name == rows), None)
    refusal = None if declared is None else zero_rows_refusal(rows, declared)
    if refusal is not None:
        raise UsageError(refusal)


def _check_row_data_path(args: argparse.Namespace) -> None:
    """Refuse a --row-data path that does not exist or is neither Parquet nor CSV, before compiling."""
    if getattr(args, "row_data", None) is None:
        return
    path = _existing(args.row_data, "Row data file")
    if path.suffix.lower() not in (".parquet", ".pq", ".csv"):
        raise UsageError(f"--row-data must be a Parquet (.parquet) or CSV (.csv) file, got {path.name}.\nGive the "
                         "rows as Parquet or CSV with columns named like the row variables, or all data in --data.")


def _check_delta_for_rows(args: argparse.Namespace, data: dict[str, Any]) -> None:
    """Refuse a delta of at least 1/N before compiling, when the data file states N (``--rows``; public)."""
    from .privacy.checks import check_delta_for_rows

    n_rows = data.get(args.rows)
    if isinstance(n_rows, int) and not isinstance(n_rows, bool) and n_rows > 0:
        try:
            check_delta_for_rows(args.delta, n_rows)  # its warning comes with the run's other warnings
        except ValueError as exc:
            raise UsageError(str(exc)) from None


def _load_inits(args: argparse.Namespace, options: dict[str, Any]) -> None:
    if args.inits is not None:
        from .stan.inits import load_inits

        options["inits"] = load_inits(args.inits)


# ------------------------------------------------------------------------------------------------ commands
def _cmd_sample(args: argparse.Namespace) -> None:
    from .model import DPStanModel
    from .stan.data import load_data

    options = dict(_parse_option(o) for o in args.option or [])
    if args.inits is not None and "inits" in options:
        raise UsageError("inits given twice (--inits and --option inits=...).\nKeep only --inits.")
    _preflight_sample(args, options)
    data = load_data(args.data)  # read once; N (public) is checked against delta before compiling
    _check_delta_for_rows(args, data)
    if args.row_variables is not None:
        options["row_variables"] = [v.strip() for v in args.row_variables.split(",") if v.strip()]
    if args.include_gq:
        options["include_gq"] = True
    options.update(unit_options(args))
    if args.backend != "ray" and (args.address is not None or args.workers is not None):
        raise UsageError("--address and --workers apply to --backend ray only.\nAdd --backend ray, or drop them.")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}.\nGive a positive integer.")
    if args.backend == "ray":
        options.update(backend="ray", ray_address=args.address, ray_workers=args.workers)
    if args.checkpoint_every is not None and args.checkpoint is None:
        raise UsageError("--checkpoint-every applies with --checkpoint DIR only.\nAdd --checkpoint DIR, or drop it.")
    if args.checkpoint is not None:
        options.update(checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every)
        _record_command(args)  # the outputs `stan-dp resume DIR` writes (a DIR holding a checkpoint is refused)
    model = DPStanModel(args.model, show_progress=not args.quiet)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning)
        try:
            fit = model.sample(  # with a checkpoint, the file's path (stored so that `resume` finds the data)
                args.data if args.checkpoint is not None else data, row_data=args.row_data,
                algorithm=args.algorithm, epsilon=args.epsilon, delta=args.delta, chains=args.chains,
                iter_warmup=args.iter_warmup, iter_sampling=args.iter_sampling, seed=args.seed,
                show_progress=not args.quiet, rows=args.rows, **options,
            )
        except BackendError as exc:
            raise BackendError(f"{exc} {_save_partial(exc, args.output)}") from None
    _result_ready()  # a signal now must not cut the writing short
    stopped = " (the run was stopped early: the draws made so far, with the budget they spent)" if int(
        fit.attrs.get("interrupted", 0)) else ""
    written = _write_fit(fit, args.output, args.csv, "sample", f"Private draws written to {{written}}{stopped}")
    from .output.diagnostics import ConvergenceWarning

    _print_summary(fit, verbose=args.verbose, written=str(written))  # the convergence verdict is printed there, once
    _emit_warnings("sample", caught, skip=(ConvergenceWarning,))
    _report_stop("sample", fit, args.checkpoint)


def _cmd_resume(args: argparse.Namespace) -> None:
    from .model import resume
    from .output.diagnostics import ConvergenceWarning
    from .output.files import check_output_path
    from .phases.checkpoint import load_checkpoint

    load_checkpoint(args.directory)  # finished, missing or corrupted: refused before compiling or reading rows
    stored = _stored_command(args.directory)  # the interrupted command's own outputs; the flags override them
    output = args.output or stored.get("output")
    csv = args.csv if args.csv is not None else stored.get("csv")
    if output is None:
        raise UsageError(f"The checkpoint in {args.directory} records no output file (its run was not started by "
                         "`stan-dp sample --checkpoint`).\nGive one with --output FILE.nc.")
    check_output_path(output, suffixes=(".nc",), what="--output")
    if csv:
        check_output_path(csv, suffixes=(".csv",), what="--csv")
    if args.data is not None:
        _existing(args.data, "Data file")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}.\nGive a positive integer.")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=FutureWarning)
        try:
            fit = resume(args.directory, data=args.data, show_progress=not args.quiet, backend=args.backend,
                         ray_address=args.address, ray_workers=args.workers)
        except BackendError as exc:
            raise BackendError(f"{exc} {_save_partial(exc, output)}") from None
    _result_ready()
    if int(fit.attrs.get("interrupted", 0)):
        done = "Private draws of the resumed run, stopped early again (the draws made so far), written to {written}"
    else:
        done = ("Private draws of the resumed run written to {written}; the privacy report is the planned run's "
                "(no new budget spent)")
    written = _write_fit(fit, output, csv, "resume", done)
    _print_summary(fit, verbose=args.verbose, written=str(written))
    _emit_warnings("resume", caught, skip=(ConvergenceWarning,))
    _report_stop("resume", fit, args.directory)


def _resume_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", help="checkpoint directory of the run (stan-dp sample --checkpoint DIR)")
    p.add_argument("--data", default=None, help="the run's data again, as a Stan JSON file (default: the file the "
                   "run was started with); it must be the same data (shapes and values)")
    p.add_argument("--output", default=None, help="netCDF file to write (.nc); checked before the run (default: the "
                   "--output the run was started with, which then holds the whole run)")
    p.add_argument("--csv", metavar="PATH", default=None, help="also write Stan CSV, one file per chain (default: "
                   "the --csv the run was started with, if any)")
    p.add_argument("--backend", default=None, choices=["local", "ray"], help="where the rows are evaluated now "
                   "(default: the run's backend)")
    p.add_argument("--address", default=None, help="with --backend ray: the Ray cluster to join (a new cluster "
                   "after a lost one; default: start a local one)")
    p.add_argument("--workers", type=int, default=None, help="with --backend ray: number of actors (default: the "
                   "run's; the same number gives the draws of the uninterrupted run)")


#: the file ``stan-dp sample --checkpoint DIR`` writes into DIR: the command's own outputs (--output, --csv), which
#: ``stan-dp resume DIR`` writes by default. Public paths only; the checkpoint beside it is private.
COMMAND_FILE = "command.json"


def _record_command(args: argparse.Namespace) -> None:
    """Before a checkpointed run: refuse a DIR that already holds a checkpoint, then record the command's outputs in
    DIR (``COMMAND_FILE``, written atomically)."""
    import os

    from .phases.checkpoint import HEADER

    directory = Path(args.checkpoint)
    if (directory / HEADER).exists():
        raise UsageError(f"--checkpoint {directory} already holds a checkpoint.\nResume it (stan-dp resume "
                         f"{directory}) or give an empty directory.")
    record = {"command": "sample", "output": str(Path(args.output).resolve()),
              "csv": str(Path(args.csv).resolve()) if args.csv else None}
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / (COMMAND_FILE + ".tmp")
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, directory / COMMAND_FILE)
    except OSError as exc:
        raise UsageError(f"--checkpoint {directory}: cannot write there ({exc.strerror or exc}).\nGive a writable "
                         "directory.") from None


def _stored_command(directory: str) -> dict[str, Any]:
    """The outputs ``stan-dp sample`` recorded in a checkpoint directory ({} when it recorded none)."""
    try:
        stored = json.loads((Path(directory) / COMMAND_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return stored if isinstance(stored, dict) else {}


def _write_fit(fit: Any, output: str, csv: str | None, command: str, done: str) -> Path:
    """Write a private fit to ``output`` (netCDF; a fallback file if that fails) and, with ``csv``, as Stan CSV;
    print ``done`` (its ``{written}`` filled in) and where the CSV files went."""
    from .output.files import write_or_fallback

    written = write_or_fallback(fit.to_netcdf, output, what="private draws")
    print(done.format(written=written))
    if csv:
        from .output.stan_csv import to_stan_csv

        try:
            paths = to_stan_csv(fit, csv)
        except OSError as exc:
            print(f"stan-dp {command}: warning: Stan CSV not written ({exc}); the draws are in {written}.",
                  file=sys.stderr)
        else:
            print(f"Stan CSV (one file per chain) written to {', '.join(str(p) for p in paths)}")
    return written


def _report_stop(command: str, fit: Any, checkpoint: str | None) -> None:
    """After a run stopped early by a signal (its partial fit written): one line saying how to go on. The exit
    status (130 after SIGINT, 143 after SIGTERM) is set by ``main``."""
    signals = _Signals.active
    if signals is None or signals.received is None or not int(fit.attrs.get("interrupted", 0)):
        return
    signals.reported = True
    if checkpoint is not None:
        print(f"stan-dp {command}: stopped by {SIGNAL_WORDS[signals.received]}; the draws made so far are written. "
              f"Finish the run with `stan-dp resume {checkpoint}` (the same outputs, no new budget: it continues "
              "after the published iterations).", file=sys.stderr)
    else:
        print(f"stan-dp {command}: stopped by {SIGNAL_WORDS[signals.received]}; the draws made so far are written. "
              "The run had no checkpoint, so it cannot be resumed: a new run spends a new budget (--checkpoint DIR "
              "makes a run resumable).", file=sys.stderr)


def _save_partial(exc: BackendError, output: str) -> str:
    """Write the draws a failed run made before its backend failed (with the budget they spent); say where."""
    from .output.files import write_or_fallback

    if exc.partial_fit is None:
        return "No draws were made before the failure; nothing was written."
    _result_ready()
    written = write_or_fallback(exc.partial_fit.to_netcdf, output, what="partial private draws")
    return (f"The draws made before the failure, with the privacy report of the budget they spent, were written "
            f"to {written}.")


def _cmd_reference(args: argparse.Namespace) -> None:
    from .model import DPStanModel
    from .output.files import check_output_path, write_or_fallback

    _existing(args.model, "Stan program")
    _existing(args.data, "Data file")
    _check_row_data_path(args)
    check_output_path(args.output, suffixes=(".nc",), what="--output")
    model = DPStanModel(args.model, show_progress=not args.quiet)
    ref = model.reference(
        args.data, row_data=args.row_data, chains=args.chains, iter_warmup=args.iter_warmup,
        iter_sampling=args.iter_sampling, seed=args.seed, show_progress=not args.quiet, backend=args.backend,
    )
    _result_ready()
    written = write_or_fallback(ref.to_netcdf, args.output, what="reference draws")
    print(f"Non-private reference draws written to {written} (NOT private: do not publish)")
    _print_summary(ref)


def _cmd_summary(args: argparse.Namespace) -> None:
    _print_summary(_load(args.fit), verbose=args.verbose)


def _cmd_compare(args: argparse.Namespace) -> None:
    import pandas as pd

    from .output.compare import HOW_TO_READ, compare, plot_compare

    if args.plot:
        from .output.files import check_output_path

        check_output_path(args.plot, suffixes=(".png", ".pdf", ".svg"), what="--plot")
    fit, ref = _load(args.fit), _load(args.reference)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        table = compare(fit, ref)
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(table)
    if "mmd" in table.attrs:
        print(f"\nJoint MMD (Gaussian kernel, median heuristic): {table.attrs['mmd']:.4g}")
    print()
    print(HOW_TO_READ)
    if args.plot:
        figure = plot_compare(fit, ref)
        figure.savefig(args.plot, dpi=100)
        print(f"Marginal densities written to {args.plot}")
    _emit_warnings("compare", caught)


def _cmd_demo(args: argparse.Namespace) -> None:
    from .tools.demo import run_demo

    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {out} exists and is not a directory.\nChoose a directory name.")
    run_demo(out, quiet=args.quiet)


def _cmd_audit(args: argparse.Namespace) -> int:
    from .audit import audit

    algorithms = args.algorithm or None
    options = dict(_parse_option(o) for o in args.option or [])
    model = data = canary = None
    if args.json and args.json != "-":
        from .output.files import check_output_path

        check_output_path(args.json, suffixes=(".json",), what="--json")
    if args.model:
        from .model import DPStanModel

        if not args.data:
            raise UsageError("auditing a Stan program needs --data.\nGive its data as a Stan JSON file.")
        _existing(args.model, "Stan program")
        data = _existing(args.data, "Data file")
        model = DPStanModel(args.model, show_progress=not args.quiet)
    elif args.data or args.canary:
        raise UsageError("--data and --canary need a Stan program.\nWithout one the synthetic NumPy model is "
                         "audited; give the .stan file as the first argument.")
    if args.canary:
        canary = json.loads(_existing(args.canary, "Canary file").read_text())
    from .samplers import ALGORITHMS

    per_algorithm = {a: dict(options) for a in (algorithms or list(ALGORITHMS))}
    report = audit(
        model=model, data=data, algorithms=algorithms, targets=args.target or ("mechanisms", "iteration", "run"),
        epsilon=args.epsilon, delta=args.delta, runs=args.runs, run_runs=args.run_runs, seed=args.seed,
        confidence=args.confidence, canary=canary, row_index=args.row_index, options=per_algorithm,
        show_progress=not args.quiet,
    )
    print(report)
    if args.json:
        text = report.to_json()
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
            print(f"JSON report written to {args.json}")
    violated = [r.target for r in report.results if r.guarantee_holds and r.exceeds_claim]
    if violated:
        print(f"stan-dp audit: the lower bound exceeds the claim for {', '.join(violated)}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------------------------------ errors
def short_reason(exc: BaseException, verbose: bool = False) -> str:
    """What went wrong (first line) and what to do (second line), from the package's own message.

    stanc errors give the located line ("... line 2, column 21 ...") and stanc's message, each once. Other
    messages keep their first line (or first sentence) and their fix; a trailing "Stan said: ..." detail is
    shown only with ``verbose``.
    """
    from .stan.toolchain import StanCompileError

    text = str(exc).strip()
    if isinstance(exc, KeyError) and len(exc.args) == 1:
        text = str(exc.args[0])
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if isinstance(exc, StanCompileError):
        located = [line for line in lines if ", line " in line]
        if located:
            first, last = located[0], lines[-1]
            return first if last == first or last in first else f"{first}\n  {last}"
    if not verbose:
        lines = [line for line in lines if not line.startswith("Stan said:")] or lines[:1]
    if len(lines) == 1:
        head, sep, rest = _split_sentence(lines[0])
        return f"{head}\n  {rest}" if sep else head
    return lines[0] + "\n  " + " ".join(lines[1:])


def _split_sentence(line: str) -> tuple[str, str, str]:
    """(first sentence, separator, rest) of a long line; ("line", "", "") when it is one sentence."""
    import re

    match = re.search(r"(?<=[.;:])\s+(?=[A-Z])", line)
    if not match or match.start() < 20:
        return line, "", ""
    return line[:match.start()], " ", line[match.end():]


# ------------------------------------------------------------------------------------------------ parser
class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows "(default: X)" for options with a meaningful default (not None / False)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "%(default)" in text or "default:" in text:
            return text
        return super()._get_help_string(action)


def _global_flags(p: argparse.ArgumentParser, top: bool) -> None:
    """--verbose / --quiet, accepted before and after the subcommand (the subparser copies do not reset them)."""
    extra = {} if top else {"default": argparse.SUPPRESS}
    p.add_argument("--verbose", action="store_true", help="show tracebacks on errors", **extra)
    p.add_argument("--quiet", action="store_true", help="no progress bars or progress messages", **extra)


def _run_arguments(p: argparse.ArgumentParser, warmup: int | None, sampling: int | None) -> None:
    p.add_argument("model", help="Stan program (.stan)")
    p.add_argument("--data", required=True, help="data as a Stan JSON file (with --row-data: the public data only)")
    p.add_argument("--row-data", metavar="PATH", default=None, help="the rows as a Parquet (.parquet) or CSV (.csv) "
                   "file, columns named like the row variables (x.1 ... x.K for a vector per row); N and the row "
                   "sizes are set from it when --data omits them (Parquet needs pip install 'stan-dp[tables]')")
    p.add_argument("--chains", type=int, default=4, help="number of chains")
    chosen = " (default: chosen per algorithm from N, dimension, budget and options; see stan_dp.methods.kernels.run_lengths)"
    p.add_argument("--iter-warmup", type=int, default=warmup, help="warmup iterations per chain" + (
        chosen if warmup is None else f" (default {warmup})"))
    p.add_argument("--iter-sampling", type=int, default=sampling, help="sampling iterations per chain" + (
        chosen if sampling is None else f" (default {sampling})"))
    p.add_argument("--seed", type=int, default=None, help="seed (a seeded private run's noise is reproducible by "
                                                          "anyone who knows it; default: OS randomness)")
    p.add_argument("--output", required=True, help="netCDF file to write (.nc); checked before the run")


def _sample_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p, None, None)
    p.add_argument("--algorithm", default="auto",
                   help="auto | penalty | dp-hmc | dp-fast-mh | dp-fast-mh-full | dp-sgld | dp-sghmc | dp-sgnht | "
                        "ops | hybrid | dp-laplace | dp-ssp (auto chooses from the program, N, dimension, budget and "
                        "the bounds you give, and needs one unless the program is a linear regression with declared "
                        "bounds (then dp-ssp): --option grad_clip=L, or ratio_clip=b; penalty and dp-hmc need "
                        "--option ratio_clip=b; ops and hybrid need --option loglik_bounds=[a,b]; any algorithm "
                        "takes --option warm_start=dp-gd|ops)")
    p.add_argument("--epsilon", type=float, required=True, help="epsilon for the whole run (all chains, warmup)")
    p.add_argument("--delta", type=float, required=True, help="delta for the whole run: below 1/N (refused at or "
                   "above it: a release of one random row meets such a delta) and best at most 1/(10 N) (warned "
                   "above it), e.g. 1e-6 for N in the thousands")
    p.add_argument("--inits", metavar="JSON|R", help="public initial values: a JSON file (or inline JSON) of "
                   "constrained values by parameter name, or a list of them, one per chain; or a number as in "
                   "CmdStan: 0 (every unconstrained value 0) or R > 0 (uniform(-R, R) on the unconstrained scale) "
                   "(default: uniform(-2, 2))")
    p.add_argument("--rows", default="N", help="name of the int data variable holding the row count")
    p.add_argument("--row-variables", metavar="A,B,...", help="comma-separated row variables (default: every "
                   "data variable whose first size is the row count)")
    p.add_argument("--include-gq", action="store_true", help="also release generated quantities (computed "
                   "without the rows)")
    add_unit_arguments(p)
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="algorithm option, e.g. ratio_clip=2 or grad_clip=2.5 (dp-sgld/dp-sghmc/dp-sgnht)")
    p.add_argument("--csv", metavar="PATH", help="also write Stan CSV, one file per chain: PATH fit.csv gives "
                   "fit_1.csv, fit_2.csv, ... (lp__ is nan: the log density is never released)")
    p.add_argument("--backend", default="local", choices=["local", "ray"],
                   help="where the rows are evaluated: local (this process) or ray (rows sharded over Ray actors; "
                        "noise is added only here; pip install 'stan-dp[ray]')")
    p.add_argument("--address", default=None, help="with --backend ray: the Ray cluster to join (e.g. auto, or "
                   "host:6379 of `ray start --head`; default: start a local one)")
    p.add_argument("--workers", type=int, default=None, help="with --backend ray: number of actors (row shards; "
                   "default: the cluster's CPUs)")
    p.add_argument("--checkpoint", metavar="DIR", default=None, help="write checkpoints into DIR (PRIVATE: keep it "
                   "with the data); a killed run continues with `stan-dp resume DIR` under its planned budget")
    p.add_argument("--checkpoint-every", metavar="K|Ts", default=None, help="checkpoint cadence: every K "
                   "iterations of each chain, or every T seconds as e.g. 60s (default: 60s)")


def _reference_arguments(p: argparse.ArgumentParser) -> None:
    _run_arguments(p, 1000, 1000)
    p.add_argument("--backend", default="auto", choices=["auto", "builtin", "cmdstan"],
                   help="Stan NUTS backend")


def _summary_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("fit", help="netCDF file written by sample or reference")


def _compare_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("fit", help="the private fit: .nc, or Stan CSV (a.csv or a_1.csv,a_2.csv)")
    p.add_argument("reference", help="the reference posterior: .nc, or Stan CSV (e.g. CmdStan output)")
    p.add_argument("--plot", help="PNG file for overlaid marginal densities")


def _audit_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", nargs="?", help="Stan program (.stan); default: a synthetic NumPy model")
    p.add_argument("--data", help="data as a Stan JSON file (with a Stan program)")
    p.add_argument("--algorithm", action="append", help="algorithm to audit (repeatable; default: all)")
    p.add_argument("--target", action="append", choices=["mechanisms", "iteration", "run"],
                   help="what to audit (repeatable; default: all three)")
    p.add_argument("--epsilon", type=float, default=1.0, help="budget each target is calibrated to")
    p.add_argument("--delta", type=float, default=1e-5, help="delta of the claims")
    p.add_argument("--runs", type=int, default=2000, help="runs per data set for mechanisms and iterations")
    p.add_argument("--run-runs", type=int, default=None, help="runs per data set for whole runs (default runs/10)")
    p.add_argument("--seed", type=int, default=None, help="seed of the audit's own randomness")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bounds")
    p.add_argument("--canary", help="JSON file with one row's values of the row variables (default: "
                                    "synthetic worst-case canaries)")
    p.add_argument("--row-index", type=int, default=0, help="the substituted row")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="algorithm option, e.g. row_bound=2")
    p.add_argument("--json", help="also write the JSON report to this file ('-': stdout)")


def _cmd_advise(args: argparse.Namespace) -> int:
    from .tools.advise import run_advise

    return run_advise(args)


def _demo_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", default="demo_output", help="directory for the demo's files")


@dataclass(frozen=True)
class Subcommand:
    """One ``stan-dp`` subcommand: its name, one-line help, optional description, arguments and runner."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Any]
    description: str | None = None


SUBCOMMANDS: list[Subcommand] = [
    Subcommand("sample", "private posterior draws", _sample_arguments, _cmd_sample,
               "Private posterior draws under an (epsilon, delta) budget for the whole run. Stopped by Ctrl-C "
               "(SIGINT) or SIGTERM, the run writes the draws made so far with the budget they spent and exits 130 "
               "or 143; with --checkpoint DIR, `stan-dp resume DIR` then finishes it. A run in the background of a "
               "script ignores Ctrl-C: stop it with SIGTERM."),
    Subcommand("resume", "continue a checkpointed private run under its planned budget", _resume_arguments,
               _cmd_resume,
               "Finish a private run from its checkpoint (stan-dp sample --checkpoint DIR) as its command was given: "
               "write to its own --output and --csv what the uninterrupted run would have written, the same draws "
               "(bit for bit when seeded) and the planned budget (no new spend). A finished run, another program, "
               "data of other shapes or values, or a corrupted checkpoint is refused (exit status 2). Stopped by "
               "Ctrl-C or SIGTERM it writes the draws so far and exits 130 or 143; resume it again to finish."),
    Subcommand("reference", "non-private Stan NUTS reference (not private)", _reference_arguments, _cmd_reference),
    Subcommand("summary", "az.summary, convergence and the privacy report of a netCDF fit", _summary_arguments,
               _cmd_summary),
    Subcommand("compare", "compare a private fit with a reference", _compare_arguments, _cmd_compare),
    Subcommand("audit", "empirical privacy audit: lower bounds on epsilon next to the claims", _audit_arguments,
               _cmd_audit,
               "Run mechanisms, kernel iterations and short runs many times on neighbouring data sets (one row "
               "substituted by a worst-case canary) and report a Clopper-Pearson lower bound on epsilon next to "
               "each claim. The output is not private."),
    Subcommand("advise", ADVISE_HELP, add_advise_arguments, _cmd_advise, ADVISE_DESCRIPTION),
    Subcommand("demo", "compile a bundled model, run private and reference fits, compare", _demo_arguments,
               _cmd_demo),
]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: global flags, then one subparser per row of ``SUBCOMMANDS``."""
    parser = argparse.ArgumentParser(prog="stan-dp", description="Differentially private MCMC for Stan programs.",
                                     formatter_class=_HelpFormatter)
    _global_flags(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in SUBCOMMANDS:
        p = sub.add_parser(command.name, help=command.help, description=command.description or command.help,
                           formatter_class=_HelpFormatter)
        command.add_arguments(p)
        _global_flags(p, top=False)
        p.set_defaults(func=command.run)
    return parser


class _Signals:
    """SIGINT (Ctrl-C) and SIGTERM (what a batch scheduler sends at its time limit, and what stops a run in the
    background of a script) while a command runs.

    The first one raises ``KeyboardInterrupt`` in the main thread: a private run stops every chain after its current
    iteration, keeps the draws made so far with the budget they spent and checkpoints exactly those iterations
    (``stan_dp.phases.chains.run_chains``), and the command then writes them as usual and says how to resume
    (``_report_stop``). Once a command holds its result (:func:`_result_ready`), signals are only counted, so that
    writing the result is not cut short; before that, a second Ctrl-C aborts at once (nothing is written). ``main``
    exits with 130 after SIGINT and 143 after SIGTERM (128 + the signal's number). SIGINT is left alone when the
    process started with it ignored (a job put in the background by a non-interactive shell): such a run is
    stopped with SIGTERM.
    """

    active: "_Signals | None" = None  # the guard of the running command

    def __init__(self) -> None:
        self.received: str | None = None  # "SIGINT" or "SIGTERM": the first signal received
        self.reported = False  # the command said what the signal did (``_report_stop``)
        self.armed = True
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: Any) -> None:
        import signal

        name = "SIGINT" if signum == signal.SIGINT else "SIGTERM"
        first = self.received is None
        self.received = self.received or name
        if self.armed and (first or signum == signal.SIGINT):
            raise KeyboardInterrupt("Ctrl-C" if name == "SIGINT" else name)
        print(f"stan-dp: {name} received; finishing writing what was done first ...", file=sys.stderr)

    def __enter__(self) -> "_Signals":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():  # handlers can only be set there
            self._previous[signal.SIGTERM] = signal.signal(signal.SIGTERM, self._handler)
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started with it ignored
                self._previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._handler)
        _Signals.active = self
        return self

    def __exit__(self, *exc: Any) -> None:
        import signal

        _Signals.active = None
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _result_ready() -> None:
    """The command holds its result: from now on a signal no longer interrupts it (the exit status still says it
    came)."""
    if _Signals.active is not None:
        _Signals.active.armed = False


#: exit status after each signal (128 + its number, what a shell reports for a process the signal ended)
EXIT_STATUS = {"SIGINT": 130, "SIGTERM": 143}
#: the words for each signal in messages
SIGNAL_WORDS = {"SIGINT": "Ctrl-C (SIGINT)", "SIGTERM": "SIGTERM"}
#: exit status after SIGTERM
EXIT_SIGTERM = EXIT_STATUS["SIGTERM"]


def _checkpoint_hint(args: argparse.Namespace) -> str:
    """For a command cut short before its result: whether its checkpoint can be resumed (nothing was published)."""
    from .phases.checkpoint import CheckpointError, load_checkpoint

    directory = getattr(args, "checkpoint", None) or getattr(args, "directory", None)
    if directory is None or args.command not in ("sample", "resume"):
        return ""
    try:
        load_checkpoint(directory)
    except (CheckpointError, OSError):
        return ""
    return f" Its checkpoint can be resumed: `stan-dp resume {directory}`."


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stan-dp`` console script."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
    from .stan.data import DataError
    from .stan.toolchain import StanCompileError, ToolchainError

    parser = build_parser()
    args = parser.parse_args(argv)
    expected = (UsageError, ValueError, KeyError, DataError, StanCompileError, ToolchainError, OSError, BackendError,
                ImportError)
    signals = _Signals()
    try:
        with signals:
            status = args.func(args)
    except KeyboardInterrupt:
        name = signals.received or "SIGINT"
        print(f"stan-dp {args.command}: stopped by {SIGNAL_WORDS[name]} before a result was complete: nothing was "
              f"written and nothing was released (exit status {EXIT_STATUS[name]}).{_checkpoint_hint(args)}",
              file=sys.stderr)
        return EXIT_STATUS[name]
    except expected as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"stan-dp {args.command}: error: {short_reason(exc, args.verbose)}", file=sys.stderr)
        return 2
    if signals.received:
        if not signals.reported:
            print(f"stan-dp {args.command}: {SIGNAL_WORDS[signals.received]} received; what was done before it is "
                  "written above (a private run keeps its draws so far, with the privacy budget they spent in the "
                  f"file's privacy report). Exit status {EXIT_STATUS[signals.received]}.", file=sys.stderr)
        return EXIT_STATUS[signals.received]
    if args.verbose:
        # no wall time: the duration of a private run can depend on the private rows (see stan_dp.output.progress)
        print(f"stan-dp {args.command}: done", file=sys.stderr)
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
