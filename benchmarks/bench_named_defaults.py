"""Penalty MH, DP-HMC and DP-Fast MH chosen by name with their defaults on a real logistic regression.

A caller who names one of these kernels and gives a public per-row gradient bound gets the anchored kernel by
default (``stan_dp.phases.anchor.default_anchor``). This script fits each of them that way on the posteriordb
``wells`` data (3,020 rows, 5 coefficients; the public covariate scaling and the bound ||(1, x)|| <= 12 of the
battery in ``cases.py``) and prints, per kernel and epsilon, the chain R-hat and smallest bulk ESS (``attrs["convergence"]``: the
chains' own draws), the largest |mean error| over the coefficients in reference posterior sds and the median sd
ratio (released / reference), against Stan-free non-private reference draws of the same rows. Every run uses the
run lengths the package chooses (``iter_warmup`` / ``iter_sampling`` left unset), 4 chains, delta 1e-6.

Options given, all public (12 is the bound of the battery, from the covariates' public ranges):
  penalty      ratio_clip=12, anchor_grad_clip=12
  dp-hmc       ratio_clip=12, grad_clip=12
  dp-fast-mh   row_bound=12, anchor_grad_clip=12
``--anchor none`` runs the plain kernels with the same bounds (the behaviour before the default changed);
``--anchor dp-gd`` asks for the anchor explicitly (the default must give the same draws).

Usage (the default cells, epsilon 100: about 15 minutes on a loaded 2-core machine: penalty under half a minute,
DP-HMC 3-4 minutes, anchored DP-Fast MH about 13 minutes, most of it the accountant planning its noise; add
``--epsilons 100 10`` for the epsilon-10 cells):
    python benchmarks/bench_named_defaults.py --out benchmarks/results/named_defaults.txt
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import arviz as az
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import wells  # noqa: E402
from provenance import header_for  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402
from stan_dp.tools.utility import released_matrix  # noqa: E402

BOUND = 12.0
DELTA = 1e-6
OPTIONS = {
    "penalty": {"ratio_clip": BOUND, "anchor_grad_clip": BOUND},
    "dp-hmc": {"ratio_clip": BOUND, "grad_clip": BOUND},
    "dp-fast-mh": {"row_bound": BOUND, "anchor_grad_clip": BOUND},
}


def run(model, ref: np.ndarray, algorithm: str, epsilon: float, anchor: str, seed: int,
        lengths: dict | None = None) -> dict:
    options = {**OPTIONS[algorithm], **(lengths or {})}
    if anchor == "none":  # the plain kernel: no gradient bound to anchor with
        options = {k: v for k, v in options.items() if k != "anchor_grad_clip"}
        options["anchor"] = "none"
    elif anchor == "dp-gd":
        options["anchor"] = "dp-gd"
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm=algorithm, epsilon=epsilon, delta=DELTA, chains=4, seed=seed,
                             show_progress=False, **options)
    wall = time.perf_counter() - started
    x = released_matrix(model, fit).reshape(-1, model.dim)
    mean, sd = ref.mean(0), ref.std(0)
    finite = bool(np.all(np.isfinite(x)))
    convergence = json.loads(str(fit.attrs.get("convergence", "{}")))
    lo, hi = np.quantile(x, [0.05, 0.95], axis=0) if finite else (np.full(model.dim, np.nan),) * 2
    return {"algorithm": algorithm, "epsilon": epsilon, "anchor": anchor,
            "anchored": "anchor_theta" in fit.attrs, "by_default": int(fit.attrs.get("anchor_default", 0)),
            "rhat": float(convergence.get("max_rhat", float("nan"))),
            "ess": float(convergence.get("min_ess_bulk") or float("nan")),  # the chains' own, over 4 chains
            # what az.summary shows on the released posterior group (must not look better than the chains)
            "az_rhat": float(az.summary(fit, kind="diagnostics")["r_hat"].max()),
            # how many parameters' central 90 % intervals hold the reference mean
            "covered": int(np.sum((lo <= mean) & (mean <= hi))),
            "err": float(np.max(np.abs(x.mean(0) - mean) / sd)) if finite else float("inf"),
            "sd_ratio": float(np.median(x.std(0) / sd)) if finite else float("inf"),
            "iters": f"{fit.attrs.get('iter_warmup', '?')}+{fit.attrs.get('iter_sampling', '?')}",
            "wall": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--algorithms", nargs="+", default=list(OPTIONS), choices=list(OPTIONS))
    ap.add_argument("--epsilons", nargs="+", type=float, default=[100.0])
    ap.add_argument("--anchor", choices=("default", "dp-gd", "none"), default="default",
                    help="default: no anchor option (the new default); dp-gd / none: given explicitly")
    ap.add_argument("--seed", "--seeds", dest="seeds", type=int, nargs="+", default=[1])
    ap.add_argument("--iter-warmup", type=int, default=None, help="per chain (default: the package's rule)")
    ap.add_argument("--iter-sampling", type=int, default=None, help="per chain (default: the package's rule)")
    ap.add_argument("--out", default=None, help="append the table to this file")
    args = ap.parse_args()
    model = wells()
    ref = released_matrix(model, reference_draws(model, chains=4, draws=2000, seed=0)).reshape(-1, model.dim)
    lines = [f"# wells ({model.n_rows} rows, dim {model.dim}), named kernels, anchor {args.anchor!r}, seed "
             f"{' '.join(map(str, args.seeds))}, 4 chains, delta {DELTA:g}, run lengths "
             f"{'by the package' if args.iter_warmup is None and args.iter_sampling is None else 'given'}; target: chain R-hat <= 1.05 and "
             "max |mean error| <= 0.3 reference sd",
             "| kernel | eps | seed | anchored (by default) | iterations (warmup+sampling) | chain R-hat | "
             "min bulk ESS | az.summary R-hat | max err (sd) | sd ratio | 90 % intervals covering | s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + header_for(args.out) + "\n".join(lines) + "\n")
    for eps in args.epsilons:
        for algorithm in args.algorithms:
            lengths = {k: v for k, v in (("iter_warmup", args.iter_warmup), ("iter_sampling", args.iter_sampling))
                       if v is not None}
            for seed in args.seeds:
                r = run(model, ref, algorithm, eps, args.anchor, seed, lengths)
                line = (f"| {r['algorithm']} | {r['epsilon']:g} | {seed} | {int(r['anchored'])} ({r['by_default']}) | "
                        f"{r['iters']} | {r['rhat']:.3f} | {r['ess']:.0f} | {r['az_rhat']:.3f} | {r['err']:.2f} | {r['sd_ratio']:.2f} "
                        f"| {r['covered']} of {model.dim} | {r['wall']:.0f} |")
                print(line, flush=True)
                if args.out:  # each cell as it completes
                    with open(args.out, "a") as fh:
                        fh.write(line + "\n")


if __name__ == "__main__":
    main()
