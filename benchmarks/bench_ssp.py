"""Calibration of algorithm="dp-ssp" on the real linear cases (kidiq, earnings), epsilon 1 / 3 / 10.

For every cell (case, epsilon) and noise seed: one private run through ``sample_private`` (the product's own
path: release, chains, ArviZ output), compared with the case's non-private reference posterior (the NumPy
model's reference draws on the same rows, unclamped). Reported per cell, over the seeds:

* median over seeds of the max over parameters of |private mean - reference mean| / reference sd;
* median over seeds of the median over parameters of private sd / reference sd;
* per-parameter coverage: the fraction of seeds whose central 90 % interval holds the reference mean;
* median over seeds of the max R-hat of the released chains;
* beside them, two yardsticks: the plug-in SSP error (least squares on the noisy released moments of the same
  run, no noise-awareness) and the package's public price in advance (``stan_dp.methods.dp_ssp.ssp.ssp_floor``, from N, the bounds and the budget).

Bounds (public, as a user would declare them): kidiq y and x in [-4, 4]; earnings x in [-3.5, 3.5], y in
[-5.4, 3.8] (the public rescalings of benchmarks/cases.py).

Usage: python benchmarks/bench_ssp.py [--cases kidiq earnings] [--epsilons 1 3 10] [--seeds 20] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import earnings, kidiq  # noqa: E402
from provenance import header_for  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.privacy.moments import entries_to_matrix  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402
from stan_dp.run.plan import PublicFacts, plan_run  # noqa: E402
from stan_dp.tools.utility import released_matrix  # noqa: E402

CASES = {
    "kidiq": (kidiq, (-4.0, 4.0), (-4.0, 4.0)),
    "earnings": (earnings, (-3.5, 3.5), (-5.4, 3.8)),
}


def plug_in_error(fit, n_rows: int, n_features: int, ref_mean, ref_sd) -> float:
    """Max error (reference sds) of least squares on the SAME noisy release as ``fit`` (its released moments in
    centred coordinates; sigma from the residual sum of squares): the yardstick without noise-awareness."""
    m = entries_to_matrix(np.asarray(json.loads(fit.attrs["ssp_released_moments"])), n_rows)
    centre = np.asarray(json.loads(fit.attrs["ssp_centre"]))
    p = n_features + 1
    sxx, t = m[:p, :p], m[:p, p]
    try:
        c = np.linalg.solve(sxx, t)
    except np.linalg.LinAlgError:
        return float("inf")
    rss = max(m[p, p] - t @ c, 1e-12)
    b = c[1:]
    a = c[0] + centre[-1] - b @ centre[:-1]
    est = np.concatenate([[a], b, [np.sqrt(rss / (n_rows - p))]])
    return float(np.max(np.abs(est - ref_mean) / ref_sd))


def run_cell(name: str, epsilon: float, seeds: int, chains: int, warmup: int, draws: int, thin: int) -> dict:
    build, xb, yb = CASES[name]
    model = build()
    ref = released_matrix(model, reference_draws(model, chains=4, draws=2000, seed=0)).reshape(-1, model.dim)
    ref_mean, ref_sd = ref.mean(0), ref.std(0)
    options = {"x_bounds": xb, "y_bounds": yb}
    plan = plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=epsilon, delta=1e-5, chains=chains,
                    iter_warmup=warmup, iter_sampling=draws, facts=PublicFacts(linear=model.linear_spec), thin=thin, **options)
    errs, ratios, covered, rhats, plug = [], [], [], [], []
    for seed in range(seeds):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(model, algorithm="dp-ssp", epsilon=epsilon, delta=1e-5, chains=chains,
                                 iter_warmup=warmup, iter_sampling=draws, seed=1000 + seed, show_progress=False,
                                 thin=thin, **options)
        x = released_matrix(model, fit).reshape(-1, model.dim)
        errs.append(float(np.max(np.abs(x.mean(0) - ref_mean) / ref_sd)))
        ratios.append(float(np.median(x.std(0) / ref_sd)))
        lo, hi = np.quantile(x, [0.05, 0.95], axis=0)
        covered.append((lo <= ref_mean) & (ref_mean <= hi))
        rhats.append(json.loads(fit.attrs["convergence"])["max_rhat"])
        plug.append(plug_in_error(fit, model.n_rows, model.n_features, ref_mean, ref_sd))
    cov = np.mean(covered, axis=0)
    return {"case": name, "N": model.n_rows, "epsilon": epsilon, "seeds": seeds,
            "median_max_err": float(np.median(errs)), "median_sd_ratio": float(np.median(ratios)),
            "coverage": cov.tolist(), "min_coverage": float(cov.min()), "median_max_rhat": float(np.median(rhats)),
            "plug_in_median_max_err": float(np.median(plug)), "price_max_err": plan.floor.max_error,
            "price_width_ratio": plan.floor.width_ratio, "noise_sd": plan.noise_sd,
            "noise_sd_linear": plan.noise_sd_linear, "linear_weight": plan.linear_weight, "sensitivity": plan.sensitivity}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES))
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 3.0, 10.0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--chains", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=500)
    ap.add_argument("--thin", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    lines = [f"# dp-ssp calibration: {args.seeds} noise seeds a cell, {args.chains} chains x ({args.warmup} + "
             f"{args.thin} x {args.draws}), delta 1e-5, replace-one",
             "| case (N) | eps | median max err (sd) | median sd ratio | coverage per parameter (alpha, beta, sigma) "
             "| median max R-hat | plug-in SSP max err | price in advance (err / width) | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    if args.out:
        Path(args.out).write_text(header_for(args.out) + "\n".join(lines) + "\n")
    for name in args.cases:
        for eps in args.epsilons:
            t0 = time.time()
            r = run_cell(name, eps, args.seeds, args.chains, args.warmup, args.draws, args.thin)
            line = (f"| {name} ({r['N']}) | {eps:g} | {r['median_max_err']:.2f} | {r['median_sd_ratio']:.2f} | "
                    f"{' / '.join(f'{c:.2f}' for c in r['coverage'])} | {r['median_max_rhat']:.3f} | "
                    f"{r['plug_in_median_max_err']:.2f} | {r['price_max_err']:.2g} / {r['price_width_ratio']:.2g} | "
                    f"{time.time() - t0:.0f} |")
            print(line, flush=True)
            lines.append(line)
            if args.out:  # each cell as it completes
                with open(args.out, "a") as fh:
                    fh.write(line + "\n")


if __name__ == "__main__":
    main()
