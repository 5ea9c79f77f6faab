"""Pages generated at documentation build time (called from ``conf.py``; output in ``docs/_generated/``).

Each generator reads its source of truth (the argument parser, ``stan_dp.__all__``, the result files in
``benchmarks/results``, the scripts in ``examples/``) and writes a Markdown fragment that a hand-written page
includes. Nothing is retyped, so the pages cannot drift from the code or the measurements.
"""
from __future__ import annotations

import ast
import csv
import math
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

# ------------------------------------------------------------------------------------------------ CLI reference


#: the width the CLI reference's help text is wrapped to: a code block of the furo theme holds about 90
#: characters at a 1,280-pixel window (checked with headless Chromium screenshots), and argparse leaves
#: two columns of margin
CLI_COLUMNS = 88


def write_cli_reference(path: Path) -> None:
    """Write the ``--help`` text of ``stan-dp`` and of every subcommand, as the argument parser prints it, wrapped
    to ``CLI_COLUMNS`` so that no code block overflows the page."""
    os.environ["COLUMNS"] = str(CLI_COLUMNS)  # argparse wraps to the terminal width: the same page everywhere
    from stan_dp.cli import SUBCOMMANDS, build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    parts = ["## `stan-dp`\n", "```text", parser.format_help().rstrip(), "```\n"]
    for command in SUBCOMMANDS:
        sub = subparsers.choices[command.name]
        parts += [f"## `stan-dp {command.name}`\n", f"{command.help[0].upper()}{command.help[1:]}.\n",
                  "```text", sub.format_help().rstrip(), "```\n"]
    path.write_text("\n".join(parts))


# ------------------------------------------------------------------------------------------------ API reference


def write_api_reference(path: Path) -> None:
    """Write one autodoc entry per name in ``stan_dp.__all__`` (classes, functions, exceptions, the audit)."""
    import inspect

    import stan_dp

    classes, exceptions, functions, other = [], [], [], []
    for name in stan_dp.__all__:
        obj = getattr(stan_dp, name)
        if name == "audit":
            functions.append((name, "autofunction", "stan_dp.audit.audit"))
        elif inspect.isclass(obj) and issubclass(obj, BaseException):
            exceptions.append((name, "autoexception", f"stan_dp.{name}"))
        elif inspect.isclass(obj):
            classes.append((name, "autoclass", f"stan_dp.{name}"))
        elif callable(obj):
            functions.append((name, "autofunction", f"stan_dp.{name}"))
        else:
            other.append((name, obj))
    parts: list[str] = []
    for title, group in (("Classes", classes), ("Functions", functions), ("Exceptions and warnings", exceptions)):
        if not group:
            continue
        parts.append(f"## {title}\n")
        for name, directive, target in group:
            parts += ["```{eval-rst}", f".. {directive}:: {target}", "```\n"]
            if name == "audit":
                parts.append("`stan_dp.audit` is both the audit package and callable: `stan_dp.audit(...)` calls "
                             "this function.\n")
    if other:
        parts.append("## Constants\n")
        for name, value in other:
            parts.append(f"`stan_dp.{name}`\n: `{value!r}`\n")
    path.write_text("\n".join(parts))


#: a parameter entry of this package's docstrings: "name: text" or "a, b: text" at the left margin
_PARAM = re.compile(r"^(\*{0,2}[a-z_][a-z0-9_]*(?:, \*{0,2}[a-z_][a-z0-9_]*)*): (\S.*)$")


def parameter_lists(app, what, name, obj, options, lines: list[str]) -> None:  # noqa: ANN001
    """Turn the package's docstring parameter entries into reStructuredText definition lists, in place.

    The docstrings describe parameters as ``name: text`` with indented continuation lines, which reads well in
    ``help()`` but is not valid reStructuredText (no blank lines around the entries, ``**options`` looks like
    emphasis). Each entry becomes a definition-list item with the name as literal text. References to documents
    that are not in the repository are dropped from the rendered text.
    """
    lines[:] = [_scrub(line) for line in lines]  # the site cites nothing outside the repository
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _PARAM.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        if out and out[-1].strip():
            out.append("")
        out += [f"``{match.group(1)}``", "    " + match.group(2)]
        i += 1
        while i < len(lines) and lines[i].startswith(" ") and lines[i].strip():
            line = lines[i]
            out.append("    " + (line[4:] if line.startswith("    ") else line.strip()))
            i += 1
        out.append("")
    lines[:] = out


# ------------------------------------------------------------------------------------------------ benchmarks

#: what a results file holds, by a pattern of its name (files not listed get a title from their name)
_TITLES = [
    (r"^utility_full\.csv$", "Every algorithm with its defaults, plain (not anchored), on real and simulated data"),
    (r"^utility_full\.png$", "Every algorithm with its defaults: the benchmark script's own figure"),
    (r"^utility_anchored\.", "Anchored kernels against the plain ones"),
    (r"^utility_auto_anchored\.", "auto (anchored DP-SGNHT) on further cases"),
    (r"^utility_laplace_vs_auto", "dp-laplace against auto"),
    (r"^utility_diffq_fisher\.", "Private anchored clip C, with a released Fisher"),
    (r"^utility_diffq\.", "Private anchored clip C"),
    (r"^run_lengths\.", "Run lengths: the default rule against shorter and longer runs"),
    (r"^anchor_coverage\.", "Coverage of noise-aware intervals, N = 10,000"),
    (r"^coverage", "Coverage of noise-aware intervals, N = 1,000 and 10,000"),
    (r"^diffq_diagnostic\.", "Anchor-difference quantiles (a non-private diagnostic on public benchmark data)"),
    (r"^calibration", "Calibration: accuracy and coverage over noise seeds, with the floor"),
    (r"^ssp_", "dp-ssp on the real linear cases"),
    (r"^engine\.", "The compiled row engine against NumPy"),
    (r"^ray\.", "The Ray backend against the local engine"),
    (r"^panel_units\.", "Privacy units on a real panel: auto with the person as the unit"),
    (r"^glm_price\.", "The price in advance for logistic programs against the floor measured from the rows"),
    (r"^named_defaults\.", "Penalty, DP-HMC and DP-Fast MH chosen by name, anchored by default"),
    (r"^large_named\.", "Penalty, DP-HMC and DP-Fast MH by name on 100,000 real rows (AER Fertility)"),
    (r"^forecast_agreement\.", "The forecast of effective draws against the measured bulk ESS"),
]

_FLOAT = re.compile(r"^-?\d+\.\d{4,}(e-?\d+)?$")
# references to documents outside the repository (none may appear on a page): a whole parenthesis, the head of a
# parenthesis (of "(<reference>; not a release)" only "(not a release)" stays), or the bare reference
_REF = r"(?:issue \d+(?: item \d+)?|seed 0\d\d|DESIGN\.md(?: section \w+)?)"
_OUTSIDE_RULES = [(re.compile(rf"\s*\({_REF}\)", re.I), ""), (re.compile(rf"\({_REF}[;,]\s*", re.I), "("),
                  (re.compile(rf"\s*\b{_REF}", re.I), "")]


def _scrub(text: str) -> str:
    """``text`` without references to documents that are not in the repository."""
    for pattern, replacement in _OUTSIDE_RULES:
        text = pattern.sub(replacement, text)
    return text


def _title(name: str) -> str:
    for pattern, title in _TITLES:
        if re.search(pattern, name):
            return title
    stem = re.sub(r"_?issue\d+", "", Path(name).stem)
    return stem.replace("_", " ").capitalize()


def _num(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def _fmt(x: float) -> str:
    if not math.isfinite(x):
        return "-"
    if abs(x) >= 100:
        return f"{x:.3g}" if abs(x) < 1e4 else f"{x:.2g}"
    return f"{x:.2g}" if abs(x) < 10 else f"{x:.2g}"


def _utility_table(rows: list[dict[str, str]]) -> str | None:
    """Case x algorithm rows, one column per epsilon, cells 'max error / R-hat' (None if not that shape)."""
    need = {"case", "algorithm", "epsilon", "max_mean_err_sd", "rhat"}
    if not rows or not need <= set(rows[0]) or "lengths" in rows[0]:
        return None
    cells: dict[tuple[str, str], dict[float, str]] = defaultdict(dict)
    epsilons: set[float] = set()
    for r in rows:
        key = (f"{r['case']} ({int(_num(r['n_rows'])):,} rows)" if "n_rows" in r else r["case"], r["algorithm"])
        if r.get("chosen") and r["chosen"] != r["algorithm"] and r["algorithm"] == "auto":
            key = (key[0], f"auto ({r['chosen']})")
        eps = _num(r["epsilon"])
        rhat = _num(r.get("chain_rhat", "nan"))
        if not math.isfinite(rhat):
            rhat = _num(r["rhat"])
        if r.get("error"):
            cell = "failed"
        else:
            cell = f"{_fmt(_num(r['max_mean_err_sd']))} / {rhat:.2f}" if math.isfinite(rhat) else \
                f"{_fmt(_num(r['max_mean_err_sd']))} / -"
        if eps in cells[key]:
            return None  # repeated cells: not a grid
        cells[key][eps] = cell
        epsilons.add(eps)
    eps_sorted = sorted(epsilons)
    head = "| case | algorithm | " + " | ".join(f"eps {e:g}" for e in eps_sorted) + " |"
    lines = [head, "|" + "---|" * (2 + len(eps_sorted))]
    for (case, algorithm), by_eps in cells.items():
        lines.append(f"| {case} | {algorithm} | " + " | ".join(by_eps.get(e, "") for e in eps_sorted) + " |")
    return "\n".join(lines)


def _flat_table(rows: list[dict[str, str]], drop: tuple[str, ...] = ("error",)) -> str:
    columns = [c for c in rows[0] if c not in drop or any(r.get(c) for r in rows)]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(_num(r[c])) if _FLOAT.match(r[c] or "") else (r[c] or "")
                                      for c in columns) + " |")
    return "\n".join(lines)


def _utility_figure(rows: list[dict[str, str]], out: Path) -> bool:
    """Max error against epsilon, one panel per case, one line per algorithm (log scales)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[str, list[tuple[float, float]]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        err, eps = _num(r["max_mean_err_sd"]), _num(r["epsilon"])
        if math.isfinite(err) and math.isfinite(eps):
            series[r["case"]][r["algorithm"]].append((eps, err))
    if not any(len(pts) > 1 for by_alg in series.values() for pts in by_alg.values()):
        return False
    n = len(series)
    cols = min(4, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.7 * nrows), squeeze=False)
    for ax, (case, by_alg) in zip(axes.flat, series.items()):
        for algorithm, pts in sorted(by_alg.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=algorithm)
        ax.axhline(0.3, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(case, fontsize=9)
        ax.set_xlabel("epsilon", fontsize=8)
        ax.set_ylabel("max |mean error| (ref. sd)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    for ax in list(axes.flat)[1:n]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 5), 1, 1))
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return True


def _uncommented(lines: Iterable[str]) -> Iterator[str]:
    """A results CSV's lines without its ``#`` comment lines (where it records its command, commit and machine)."""
    return (line for line in lines if not line.startswith("#"))


def write_benchmarks(results: Path, out: Path) -> None:
    """Render every file in ``results``: CSVs as tables (and a figure), text as text, PNGs as images."""
    def order(f: Path) -> tuple[int, str]:  # the order of _TITLES (the accuracy grids first), then by name
        rank = next((i for i, (pattern, _) in enumerate(_TITLES) if re.search(pattern, f.name)), len(_TITLES))
        return rank, f.name

    parts: list[str] = []
    for f in sorted((f for f in results.iterdir() if not f.name.startswith(".")), key=order):
        parts.append(f"### {_title(f.name)}\n")
        parts.append(f"Source: `benchmarks/results/{f.name}`.\n")
        if f.suffix == ".csv":
            with f.open(newline="") as fh:
                rows = list(csv.DictReader(_uncommented(fh)))
            if not rows:
                parts.append("(empty)\n")
                continue
            table = _utility_table(rows)
            if table is not None:
                parts.append("Cells: max |mean error| over the parameters in reference posterior sds / R-hat of "
                             "the chains (a fit is good below about 0.3 / 1.05).\n")
                parts.append(table + "\n")
                png = out / f"fig_{f.stem}.png"
                if _utility_figure(rows, png):
                    parts.append(f"```{{image}} /_generated/{png.name}\n:alt: {_title(f.name)}\n"
                                 ":width: 100%\n```\n")
            else:
                parts.append(_flat_table(rows) + "\n")
        elif f.suffix == ".txt":
            text = "\n".join(_scrub(line) for line in f.read_text().splitlines())
            parts += ["```text", text.rstrip(), "```\n"]
        elif f.suffix == ".md":  # Markdown tables written by a benchmark; its own headings become bold lines
            lines = [_scrub(line) for line in f.read_text().splitlines()]
            parts.append("\n".join(f"**{line.lstrip('#').strip()}**" if line.startswith("#") else line
                                   for line in lines).rstrip() + "\n")
        elif f.suffix in (".png", ".svg"):
            target = out / f.name
            target.write_bytes(f.read_bytes())
            parts.append(f"```{{image}} /_generated/{f.name}\n:alt: {_title(f.name)}\n:width: 100%\n```\n")
    (out / "benchmarks.md").write_text("\n".join(parts))


def write_auto_table(results: Path, path: Path) -> None:
    """auto's accuracy per case and epsilon, from the ``utility_laplace_vs_auto*.csv`` result files."""
    cells: dict[str, dict[float, str]] = defaultdict(dict)
    for f in sorted(results.glob("utility_laplace_vs_auto*.csv")):
        with f.open(newline="") as fh:
            for r in csv.DictReader(_uncommented(fh)):
                if r["algorithm"] != "auto" or r.get("error"):
                    continue
                case = f"{r['case']} ({int(_num(r['n_rows'])):,} rows, d = {r['dim']})"
                cells[case][_num(r["epsilon"])] = \
                    f"{_fmt(_num(r['max_mean_err_sd']))} ({_fmt(_num(r['median_sd_ratio']))})"
    epsilons = sorted({e for by_eps in cells.values() for e in by_eps})
    lines = ["| case | " + " | ".join(f"epsilon {e:g}" for e in epsilons) + " |", "|" + "---|" * (1 + len(epsilons))]
    for case, by_eps in cells.items():
        lines.append(f"| {case} | " + " | ".join(by_eps.get(e, "") for e in epsilons) + " |")
    path.write_text("\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------ gallery


def write_gallery(examples: Path, out: Path) -> None:
    """One section per ``examples/gallery_*.py``: its docstring, how to run it, and its figure if committed."""
    parts: list[str] = []
    for script in sorted(examples.glob("gallery_*.py")):
        doc = ast.get_docstring(ast.parse(script.read_text())) or ""
        title, _, body = doc.partition("\n")
        parts += [f"## {title.strip().rstrip('.')}\n", _scrub(body.strip()) + "\n",
                  f"Run it from a clone: `python examples/{script.name}`.\n"]
        figure = examples / "figures" / f"{script.stem}.png"
        if figure.exists():
            (out / figure.name).write_bytes(figure.read_bytes())
            parts.append(f"```{{image}} /_generated/{figure.name}\n:alt: {title.strip()}\n:width: 90%\n```\n")
    (out / "gallery.md").write_text("\n".join(parts) if parts else "No gallery scripts yet.\n")
