#!/usr/bin/env python
"""Run lengths per algorithm: does the number of iterations buy accuracy at a fixed budget?

For each case (``benchmarks/cases.py``), epsilon and algorithm family it runs the same budget with several
lengths per chain -- the old fixed default 1000 + 1000, a sweep of other totals T (split half warmup, half
sampling) and the lengths ``stan_dp.methods.kernels.run_lengths`` picks ("rule") -- and scores every fit against a non-private
NumPy reference: max |mean error| and median sd ratio in reference sds, max split R-hat, wall time. For OPS the
sweep is over the number of released draws per chain (its warmup runs inside the mechanism and costs no budget).
delta = 1e-5, 4 chains (the default), NumPy reference models, seeded noise.

Families: ``dp-sgnht`` stands for the SG kernels (what ``auto`` picks when grad_clip is given); ``penalty``,
``dp-hmc`` and ``dp-fast-mh`` are measured one by one; ``ops`` uses ``loglik_bounds = (-10, 0)`` on the logistic
cases (a Bernoulli row has l_i <= 0; -10 is a public cap on how badly one row may be fitted).

``benchmarks/results/run_lengths.csv`` holds the runs quoted in ``stan_dp/methods/kernels/run_lengths.py`` (labels relative to
the current rule), made with:
  --cases logistic-10k poisson-10k --algorithms dp-sgnht ops penalty                     (seed 1)
  --cases wells kidiq --algorithms dp-sgnht penalty                                      (seed 1)
  --cases logistic-10k poisson-10k --algorithms dp-hmc dp-fast-mh --epsilons 10 100      (seed 1)
  --cases logistic-10k --algorithms ops --seed 2 --ops-draws 1 2 5                       (seed 2)
  --cases wells logistic-10k poisson-10k --algorithms dp-sgnht --epsilons 10 100 --totals 8000 --seed 2

Run (about 10-25 min for the defaults; best on otherwise idle cores):
  OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_run_lengths.py \
      [--cases logistic-10k poisson-10k] [--algorithms dp-sgnht penalty ops] [--epsilons 1 10 100] \
      [--totals 400 8000] [--ops-draws 1 2 5 25] [--seed 1] [--csv PATH]   (1000 + 1000 always runs)
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cases import LARGE_CASES, UTILITY_CASES  # noqa: E402
from provenance import comment_header  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.methods.kernels.run_lengths import choose_run_lengths  # noqa: E402
from stan_dp.tools.utility import TrialRun, released_matrix, run_and_score  # noqa: E402

CASES = {c.name: c for c in [*UTILITY_CASES, *LARGE_CASES]}
OPS_BOUNDS = {"loglik_bounds": (-10.0, 0.0)}
FIELDS = ["case", "n_rows", "dim", "epsilon", "algorithm", "seed", "lengths", "iter_warmup", "iter_sampling",
          "max_mean_err_sd", "median_sd_ratio", "rhat", "wall_s", "error"]


def settings(algorithm: str, args, model, epsilon: float, bounds: dict) -> list[tuple[str, int, int]]:
    """(label, iter_warmup, iter_sampling) to run for one cell: old default, sweep, rule (deduplicated)."""
    rule = choose_run_lengths(algorithm, n_rows=model.n_rows, dim=model.dim, epsilon=epsilon, delta=1e-5,
                              chains=args.chains, options=bounds)
    out = []
    if algorithm == "ops":  # the old 1000 draws per chain cost 10,000 NUTS iterations per chain: --ops-draws 1000
        out += [(f"{s} draws", 1000, s) for s in args.ops_draws]
    else:
        out += [("old 1000+1000", 1000, 1000)] + [(f"T={t}", t // 2, t - t // 2) for t in args.totals]
    out.append((f"rule ({rule.reason})", rule.iter_warmup, rule.iter_sampling))
    seen, unique = set(), []
    for label, w, s in out:
        if (w, s) in seen:
            unique = [(lab + " = rule" if (uw, us) == (w, s) and label.startswith("rule") else lab, uw, us)
                      for lab, uw, us in unique]
            continue
        seen.add((w, s))
        unique.append((label, w, s))
    return unique


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=["logistic-10k", "poisson-10k", "wells"])
    ap.add_argument("--algorithms", nargs="+", default=["dp-sgnht", "penalty", "ops"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0, 100.0])
    ap.add_argument("--totals", nargs="+", type=int, default=[400, 8000],
                    help="total iterations per chain of the sweep (besides 2000 = the old default)")
    ap.add_argument("--ops-draws", nargs="+", type=int, default=[1, 2, 5, 25], help="OPS draws per chain")
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--csv", type=Path, default=ROOT / "benchmarks" / "results" / "run_lengths.csv")
    args = ap.parse_args(argv)
    rows = []
    print("| case | eps | algorithm | lengths | warmup+sampling | max err (sd) | sd ratio | R-hat | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases:
        case = CASES[name]
        model = case.build()
        ref = released_matrix(model, reference_draws(model, chains=4, draws=1000, seed=0))
        for epsilon in args.epsilons:
            for algorithm in args.algorithms:
                if algorithm == "ops" and "logistic" not in name and name not in ("wells", "nes_logit"):
                    continue  # loglik_bounds (-10, 0) hold for Bernoulli rows only
                bounds = OPS_BOUNDS if algorithm == "ops" else case.bounds
                for label, warmup, sampling in settings(algorithm, args, model, epsilon, bounds):
                    trial = TrialRun(epsilon=epsilon, delta=1e-5, chains=args.chains, iter_warmup=warmup,
                                     iter_sampling=sampling, seed=args.seed)
                    r = run_and_score(model, algorithm, bounds, ref, trial)
                    row = {"case": name, "n_rows": model.n_rows, "dim": model.dim, "epsilon": epsilon,
                           "algorithm": algorithm, "seed": args.seed, "lengths": label, "iter_warmup": warmup,
                           "iter_sampling": sampling,
                           **{k: r.get(k, "") for k in FIELDS[9:]}}
                    rows.append(row)
                    if "error" in r:
                        print(f"| {name} | {epsilon:g} | {algorithm} | {label} | {warmup}+{sampling} | "
                              f"error: {r['error']} | | | {r['wall_s']:.0f} |", flush=True)
                        continue
                    print(f"| {name} | {epsilon:g} | {algorithm} | {label} | {warmup}+{sampling} | "
                          f"{r['max_mean_err_sd']:.2f} | {r['median_sd_ratio']:.2f} | {r['rhat']:.2f} | "
                          f"{r['wall_s']:.0f} |", flush=True)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with open(args.csv, "w", newline="") as fh:
        fh.write(comment_header())
        writer = csv.DictWriter(fh, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
