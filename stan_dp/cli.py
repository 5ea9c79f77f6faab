"""The ``stan-dp`` command: sample, reference, compare, summary, audit, advise and demo.

Results go to stdout and netCDF files; progress bars and messages go to stderr. Bad input exits with
status 2 and a one- or two-line reason (``--verbose`` shows the traceback).
"""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path
from typing import Any, Sequence


class UsageError(Exception):
    """Bad command-line input (reported in one line, exit status 2)."""


def _parse_option(text: str) -> tuple[str, Any]:
    """``key=value`` with value parsed as JSON when possible (numbers, true/false, lists), else a string."""
    if "=" not in text:
        raise UsageError(f"--option expects key=value, got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip().replace("-", "_")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def _existing(path: str, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{what} not found: {path}")
    return p


def _cmd_sample(args: argparse.Namespace) -> None:
    from .model import DPStanModel

    options = dict(_parse_option(o) for o in args.option or [])
    model = DPStanModel(_existing(args.model, "Stan program"))
    fit = model.sample(
        _existing(args.data, "Data file"), algorithm=args.algorithm, epsilon=args.epsilon, delta=args.delta,
        chains=args.chains, iter_warmup=args.iter_warmup, iter_sampling=args.iter_sampling, seed=args.seed,
        show_progress=not args.quiet, **options,
    )
    fit.to_netcdf(args.output)
    print(f"Private draws written to {args.output}")
    if args.csv:
        from .stan_csv import to_stan_csv

        paths = to_stan_csv(fit, args.csv)
        print(f"Stan CSV (one file per chain) written to {', '.join(str(p) for p in paths)}")
    _print_summary(fit)


def _cmd_reference(args: argparse.Namespace) -> None:
    from .model import DPStanModel

    model = DPStanModel(_existing(args.model, "Stan program"))
    ref = model.reference(
        _existing(args.data, "Data file"), chains=args.chains, iter_warmup=args.iter_warmup,
        iter_sampling=args.iter_sampling, seed=args.seed, show_progress=not args.quiet, backend=args.backend,
    )
    ref.to_netcdf(args.output)
    print(f"Non-private reference draws written to {args.output} (NOT private: do not publish)")
    _print_summary(ref)


def _load(path: str):
    import arviz as az

    return az.from_netcdf(_existing(path, "netCDF file"))


def privacy_text(idata: Any) -> str:
    """The privacy statement of an InferenceData's attrs as readable text."""
    attrs = dict(idata.attrs)
    if int(attrs.get("private", 0)) != 1:
        return attrs.get("privacy_warning", "NOT PRIVATE: this object carries no privacy guarantee.")
    report = attrs.get("privacy_report")
    if report:
        from .privacy import PrivacyReport

        return str(PrivacyReport.from_json(report))
    return f"epsilon = {attrs.get('epsilon')}, delta = {attrs.get('delta')}"


def _print_summary(idata: Any) -> None:
    import arviz as az
    import pandas as pd

    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(az.summary(idata))
    print()
    print(privacy_text(idata))


def _cmd_summary(args: argparse.Namespace) -> None:
    _print_summary(_load(args.fit))


def _cmd_compare(args: argparse.Namespace) -> None:
    import pandas as pd

    from .compare import compare, plot_compare

    fit, ref = _load(args.fit), _load(args.reference)
    table = compare(fit, ref)
    with pd.option_context("display.width", 120, "display.max_columns", 20):
        print(table)
    if "mmd" in table.attrs:
        print(f"\nJoint MMD (Gaussian kernel, median heuristic): {table.attrs['mmd']:.4g}")
    if args.plot:
        figure = plot_compare(fit, ref)
        figure.savefig(args.plot, dpi=100)
        print(f"Marginal densities written to {args.plot}")


def _cmd_demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    run_demo(Path(args.output_dir), quiet=args.quiet)


def _cmd_audit(args: argparse.Namespace) -> int:
    from .audit import audit

    algorithms = args.algorithm or None
    options = dict(_parse_option(o) for o in args.option or [])
    model = data = canary = None
    if args.model:
        from .model import DPStanModel

        if not args.data:
            raise UsageError("auditing a Stan program needs --data (its data as a Stan JSON file)")
        model = DPStanModel(_existing(args.model, "Stan program"))
        data = _existing(args.data, "Data file")
    elif args.data or args.canary:
        raise UsageError("--data and --canary need a Stan program (without one the synthetic NumPy model is audited)")
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


def short_reason(exc: BaseException) -> str:
    """One or two lines saying what went wrong: for stanc errors, the located line and stanc's message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    located = [line for line in lines if ", line " in line]
    if located:
        return located[0] + "\n  " + lines[-1]
    return "\n  ".join(lines[:2])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="stan-dp", description="Differentially private MCMC for Stan programs.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)

    def run_options(p: argparse.ArgumentParser, warmup: int, sampling: int) -> None:
        p.add_argument("model", help="Stan program (.stan)")
        p.add_argument("--data", required=True, help="data as a Stan JSON file")
        p.add_argument("--chains", type=int, default=4)
        p.add_argument("--iter-warmup", type=int, default=warmup)
        p.add_argument("--iter-sampling", type=int, default=sampling)
        p.add_argument("--seed", type=int, default=None, help="seed (a seeded private run's noise is reproducible)")
        p.add_argument("--output", required=True, help="netCDF file to write")
        p.add_argument("--quiet", action="store_true", help="no progress bar")

    p = sub.add_parser("sample", help="private posterior draws")
    run_options(p, 1000, 1000)
    p.add_argument("--algorithm", default="penalty",
                   help="penalty | dp-hmc | dp-fast-mh | dp-fast-mh-full | dp-sgld | dp-sghmc | dp-sgnht | auto (chosen from public quantities and the clip bounds given)")
    p.add_argument("--epsilon", type=float, required=True, help="epsilon for the whole run")
    p.add_argument("--delta", type=float, required=True, help="delta for the whole run")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="algorithm option, e.g. ratio_clip=2 or grad_clip=2.5 (dp-sgld/dp-sghmc/dp-sgnht)")
    p.add_argument("--csv", metavar="PATH", help="also write Stan CSV, one file per chain: PATH fit.csv gives "
                   "fit_1.csv, fit_2.csv, ... (lp__ is nan: the log density is never released)")
    p.set_defaults(func=_cmd_sample)

    p = sub.add_parser("reference", help="non-private Stan NUTS reference (not private)")
    run_options(p, 1000, 1000)
    p.add_argument("--backend", default="auto", choices=["auto", "builtin", "cmdstan"])
    p.set_defaults(func=_cmd_reference)

    p = sub.add_parser("summary", help="az.summary and the privacy report of a netCDF fit")
    p.add_argument("fit")
    p.set_defaults(func=_cmd_summary)

    p = sub.add_parser("compare", help="compare a private fit with a reference")
    p.add_argument("fit")
    p.add_argument("reference")
    p.add_argument("--plot", help="PNG file for overlaid marginal densities")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("audit", help="empirical privacy audit: lower bounds on epsilon next to the claims",
                       description="Run mechanisms, kernel iterations and short runs many times on neighbouring data "
                                   "sets (one row substituted by a worst-case canary) and report a Clopper-Pearson "
                                   "lower bound on epsilon next to each claim. The output is not private.")
    p.add_argument("model", nargs="?", help="Stan program (.stan); default: a synthetic NumPy model")
    p.add_argument("--data", help="data as a Stan JSON file (with a Stan program)")
    p.add_argument("--algorithm", action="append", help="algorithm to audit (repeatable; default: all)")
    p.add_argument("--target", action="append", choices=["mechanisms", "iteration", "run"],
                   help="what to audit (repeatable; default: all three)")
    p.add_argument("--epsilon", type=float, default=1.0, help="budget each target is calibrated to (default 1)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta of the claims (default 1e-5)")
    p.add_argument("--runs", type=int, default=2000, help="runs per data set for mechanisms and iterations")
    p.add_argument("--run-runs", type=int, default=None, help="runs per data set for whole runs (default runs/10)")
    p.add_argument("--seed", type=int, default=None, help="seed of the audit's own randomness")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the lower bounds")
    p.add_argument("--canary", help="JSON file with one row's values of the row variables (default: "
                                    "synthetic worst-case canaries)")
    p.add_argument("--row-index", type=int, default=0, help="the substituted row (default 0)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="algorithm option, e.g. row_bound=2")
    p.add_argument("--json", help="also write the JSON report to this file ('-': stdout)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_audit)

    from .advise import add_advise_parser

    add_advise_parser(sub)

    p = sub.add_parser("demo", help="compile a bundled model, run private and reference fits, compare")
    p.add_argument("--output-dir", default="demo_output")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=_cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``stan-dp`` console script."""
    import warnings

    warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
    from .data import DataError
    from .toolchain import StanCompileError, ToolchainError

    parser = build_parser()
    args = parser.parse_args(argv)
    expected = (UsageError, ValueError, DataError, StanCompileError, ToolchainError, FileNotFoundError, OSError)
    try:
        status = args.func(args)
    except KeyboardInterrupt:
        print("stan-dp: interrupted", file=sys.stderr)
        return 130
    except expected as exc:
        if args.verbose:
            traceback.print_exc()
        print(f"stan-dp {args.command}: error: {short_reason(exc)}", file=sys.stderr)
        return 2
    return int(status or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
