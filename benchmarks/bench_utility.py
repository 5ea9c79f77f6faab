#!/usr/bin/env python
"""Utility battery: every algorithm with its defaults, and ``auto``, over real and simulated
cases and a range of budgets, scored against a non-private reference.

Cases (``benchmarks/cases.py``; NumPy reference models, so no compiler is needed): posteriordb wells,
nes_logit, earnings, kidiq and sblri (real data, public rescalings), the README logistic model at N = 10,000
(and 100,000 in full mode), a Poisson regression (N = 10,000), Räisä et al.'s 10-d Gaussian and banana
(N = 100,000). Each case has public clip bounds; every algorithm gets the ones it accepts, ``auto`` gets all.
Per cell (case x epsilon x algorithm), against ``stan_dp.models.numpy_reference`` draws (analytic for the Gaussian and
banana): max |mean error| and median sd ratio in reference sds of the released draws, the fit's own max split
R-hat (``chain_rhat``: on the chains' draws, before an anchored run's noise-aware shift; ``rhat`` is that of the
released draws), MMD of the standardised draws, wall time. delta = 1e-5, or 1 / (10 N) above 10,000 rows (the
delta rule refuses delta >= 1 / N). An algorithm named
``<kernel>+anchor`` is the anchored variant (``anchor="dp-gd"``, ``stan_dp.phases.anchor``); a further suffix ``+adaptive``
(also ``dp-laplace+adaptive``) adds ``clip="adaptive"`` (``stan_dp.phases.adaptive_clip``); ``...+adaptive+diffq`` also
the private quantile of the anchor differences (``diff_clip_steps=30``). ``--option KEY=VALUE`` adds an option to
every run that takes it.

Outputs: a CSV and a PNG (max error vs epsilon, one panel per case, one line per algorithm) under
``benchmarks/results/`` (or ``--out``), and a markdown table on stdout (cells: max error / R-hat).

Full mode: 4 chains and each algorithm's default run lengths (``stan_dp.methods.kernels.run_lengths``), epsilon in
{1, 3, 10, 100}, all cases.
``--quick``: 2 chains x (500 + 500), epsilon in {1, 10, 100}, the cases with N <= 10,000 -- a smoke run of the
machinery and a first look, NOT the defaults' numbers.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_utility.py [--quick]
     [--cases wells kidiq] [--algorithms penalty auto] [--epsilons 1 10] [--out DIR] [--seed 1]
     [--option anchor_curvature_share=0.1 ...]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cases import LARGE_CASES, UTILITY_CASES  # noqa: E402
from provenance import comment_header, png_metadata  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.tools.utility import TrialRun, released_matrix, run_and_score  # noqa: E402

ALL_ALGORITHMS = ["penalty", "dp-fast-mh", "dp-hmc", "dp-sgld", "dp-sghmc", "dp-sgnht", "auto"]
FIELDS = ["case", "n_rows", "dim", "epsilon", "algorithm", "chosen", "max_mean_err_sd", "median_sd_ratio", "rhat",
          "chain_rhat", "mmd", "wall_s", "error"]


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(dict.fromkeys(r["case"] for r in rows))
    algorithms = list(dict.fromkeys(r["algorithm"] for r in rows))
    ncol = min(3, len(cases))
    nrow = -(-len(cases) // ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(4.2 * ncol, 3.2 * nrow), squeeze=False)
    for ax, case in zip(axes.flat, cases):
        for alg in algorithms:
            pts = sorted((float(r["epsilon"]), float(r["max_mean_err_sd"])) for r in rows
                         if r["case"] == case and r["algorithm"] == alg and r.get("max_mean_err_sd") not in ("", None))
            if pts:
                x, y = zip(*pts)
                ax.plot(x, np.clip(y, 1e-2, 1e4), marker="o", label=alg)
        ax.axhline(0.3, color="grey", lw=0.8, ls="--")
        ax.set(xscale="log", yscale="log", title=case, xlabel="epsilon", ylabel="max |mean error| (ref sd)")
    for ax in list(axes.flat)[len(cases):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata=png_metadata())


def markdown(rows: list[dict], epsilons: list[float]) -> str:
    head = "| case | algorithm | " + " | ".join(f"eps {e:g}" for e in epsilons) + " |"
    lines = [head, "|" + "---|" * (2 + len(epsilons))]
    keys = list(dict.fromkeys((r["case"], r["algorithm"]) for r in rows))
    for case, alg in keys:
        cells = []
        for e in epsilons:
            r = next((r for r in rows if r["case"] == case and r["algorithm"] == alg and float(r["epsilon"]) == e),
                     None)
            if r is None:
                cells.append("")
            elif r.get("error"):
                cells.append("error")
            else:
                cells.append(f"{r['max_mean_err_sd']:.2g} / {r['chain_rhat']:.2f}")
        label = alg if alg != "auto" else "auto (" + ",".join(sorted({r["chosen"] for r in rows if r["case"] == case
                                                                       and r["algorithm"] == "auto"
                                                                       and r.get("chosen")})) + ")"
        lines.append(f"| {case} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def delta_for(n_rows: int) -> float:
    """1e-5, or 1 / (10 N) when that is smaller (the package refuses delta >= 1 / N and warns above 1 / (10 N))."""
    return min(1e-5, 0.1 / n_rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--cases", nargs="*")
    ap.add_argument("--algorithms", nargs="*", default=ALL_ALGORITHMS)
    ap.add_argument("--epsilons", nargs="*", type=float)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tag", default=None, help="name of the output files (default: quick or full)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="an extra option for every run that takes it (a number, or text), e.g. "
                         "anchor_curvature_share=0.1; repeatable")
    args = ap.parse_args(argv)
    extra: dict = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            ap.error(f"--option takes KEY=VALUE, got {item!r}")
        try:
            extra[key] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            extra[key] = value
    if args.quick:
        chains, warmup, sampling = 2, 500, 500
        epsilons = args.epsilons or [1.0, 10.0, 100.0]
        cases = [c for c in UTILITY_CASES if c.name not in ("gauss10-100k", "banana-100k")]
    else:
        chains, warmup, sampling = 4, None, None  # the defaults: chosen per algorithm (stan_dp.methods.kernels.run_lengths)
        epsilons = args.epsilons or [1.0, 3.0, 10.0, 100.0]
        cases = UTILITY_CASES + LARGE_CASES
    if args.cases:
        known = {c.name: c for c in UTILITY_CASES + LARGE_CASES}
        missing = [n for n in args.cases if n not in known]
        if missing:
            ap.error(f"unknown cases {missing}; known: {', '.join(known)}")
        cases = [known[n] for n in args.cases]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = args.tag or ("quick" if args.quick else "full")
    csv_path, png_path = out / f"utility_{tag}.csv", out / f"utility_{tag}.png"
    rows: list[dict] = []
    started = time.perf_counter()
    with open(csv_path, "w", newline="") as fh:
        fh.write(comment_header())
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        for case in cases:
            model = case.build()
            ref = released_matrix(model, reference_draws(model, chains=4, draws=1000, seed=0))
            for eps in epsilons:
                for alg in args.algorithms:
                    trial = TrialRun(epsilon=eps, delta=delta_for(model.n_rows), chains=chains, iter_warmup=warmup,
                                     iter_sampling=sampling, seed=args.seed)
                    res = run_and_score(model, alg, {**case.bounds, **extra}, ref, trial)
                    row = {"case": case.name, "n_rows": model.n_rows, "dim": model.dim, "epsilon": eps,
                           "algorithm": alg, "chosen": res.get("chosen", ""), "error": res.get("error", ""),
                           **{k: res.get(k, "") for k in ("max_mean_err_sd", "median_sd_ratio", "rhat", "chain_rhat",
                                                          "mmd")},
                           "wall_s": round(res["wall_s"], 2)}
                    rows.append(row)
                    writer.writerow(row)
                    fh.flush()
                    print(f"{case.name} eps={eps:g} {alg}: "
                          + (row["error"] or f"err {row['max_mean_err_sd']:.2f} sd, ratio {row['median_sd_ratio']:.2f}, "
                                              f"rhat {row['chain_rhat']:.2f}, {row['wall_s']:.0f} s"),
                          file=sys.stderr, flush=True)
    plot(rows, png_path)
    print(f"# utility battery ({tag}: {chains} chains x ({warmup} + {sampling}), delta 1e-5 or 1/(10 N), seed {args.seed}"
          f"{', options ' + str(extra) if extra else ''}); "
          f"cells: max |mean error| in reference sds / max R-hat of the chains; wall {time.perf_counter() - started:.0f} s")
    print(markdown(rows, epsilons))
    print(f"\nCSV: {csv_path}\nPNG: {png_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
