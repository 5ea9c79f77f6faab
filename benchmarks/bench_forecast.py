"""The forecast of effective draws (``stan_dp.methods.kernels.forecast``) against the bulk ESS the runs measure.

For every cell (case, kernel, epsilon) one seeded run of the named kernel with its defaults and the case's public
bounds (``sample_private``, 4 chains, delta 1e-6; the plain kernels on these programs, whose per-row curvature the
package cannot know), and beside the chains' smallest bulk ESS (``attrs["convergence"]``):

* ``forecast (public)``: what the run stated before it started (``attrs["forecast_ess"]``), at the public
  posterior-scale guess sqrt(d / (N L^2));
* ``forecast (cov)``: the same forecast at the reference posterior's covariance on the unconstrained scale (NOT
  private: the yardstick here; a user gets a figure like it from public data shaped like theirs);
* the ratios measured / forecast. A bulk ESS below about 10 over 4 chains is the estimator's floor (chains that do
  not mix read as a few effective draws): a cell where both the forecast and the measurement are below 10 agrees
  that the run is too short of draws, whatever the ratio.

Cases: the logistic and linear regressions of the calibration battery (``bench_calibration.py``: wells, nes_logit,
sim_logistic, kidiq, sim_linear; NumPy models of the same rows) and the 5,000-row linear regression at epsilon 2000
(``linear-5k``: alpha 0.5, beta (1, -0.5), sigma 1, x ~ N(0, I); grad_clip 40, ratio_clip 25, DP-HMC with 5 leapfrog
steps and 4 x (1000 + 1500) iterations). The large-data cases are in ``bench_large_named.py``, whose table carries the
same two columns.

    python benchmarks/bench_forecast.py --out benchmarks/results/forecast_agreement.md
    python benchmarks/bench_forecast.py --cases wells --kernels penalty --epsilons 100
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
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_calibration import sim_linear, sim_logistic  # noqa: E402
from cases import kidiq, nes_logit, wells  # noqa: E402
from provenance import header_for  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.models.reference_models import LinearRegressionModel  # noqa: E402
from stan_dp.methods.kernels.forecast import forecast_plan  # noqa: E402
from stan_dp.run.pipeline import public_facts, sample_private  # noqa: E402
from stan_dp.run.plan import plan_run  # noqa: E402

DELTA = 1e-6


def linear_5k():
    """5,000 rows: y = 0.5 + x (1, -0.5) + N(0, 1), x ~ N(0, I) (fixed seed)."""
    rng = np.random.default_rng(2024)
    x = rng.standard_normal((5000, 2))
    return LinearRegressionModel(x, 0.5 + x @ np.array([1.0, -0.5]) + rng.standard_normal(5000))


#: name -> (builder, public bounds, extra options per kernel, run lengths or None for the package's)
CASES = {
    "wells": (wells, 12.0, {}, None),
    "nes_logit": (nes_logit, 5.1, {}, None),
    "sim_logistic": (sim_logistic, 4.0, {}, None),
    "kidiq": (kidiq, 25.0, {}, None),
    "sim_linear": (sim_linear, 25.0, {}, None),
    "linear-5k": (linear_5k, (25.0, 40.0), {"dp-hmc": {"leapfrog_steps": 5}}, (1000, 1500)),
}


def options_for(kernel: str, bound) -> dict:
    ratio, grad = (bound, bound) if np.isscalar(bound) else bound
    return {"penalty": {"ratio_clip": ratio}, "dp-hmc": {"ratio_clip": ratio, "grad_clip": grad},
            "dp-fast-mh": {"row_bound": ratio}}[kernel]


def run_cell(case: str, kernel: str, epsilon: float, seed: int) -> dict:
    build, bound, extra, lengths = CASES[case]
    model = build()
    ref = reference_draws(model, chains=4, draws=1000, seed=0).reshape(-1, model.dim)  # NOT private: yardstick
    options = {**options_for(kernel, bound), **extra.get(kernel, {})}
    run_lengths = {} if lengths is None else {"iter_warmup": lengths[0], "iter_sampling": lengths[1]}
    plan = plan_run(model.n_rows, model.dim, algorithm=kernel, epsilon=epsilon, delta=DELTA, chains=4, quiet=True,
                    facts=public_facts(model), **run_lengths, **options)
    given = forecast_plan(plan, posterior_sd=np.cov(ref, rowvar=False))
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm=kernel, epsilon=epsilon, delta=DELTA, chains=4, seed=seed,
                             show_progress=False, **run_lengths, **options)
    conv = json.loads(str(fit.attrs.get("convergence", "{}")))
    return {"case": case, "N": model.n_rows, "kernel": kernel, "epsilon": epsilon,
            "iters": f"{plan.iter_warmup}+{plan.iter_sampling}",
            "ess": float(conv.get("min_ess_bulk") or float("nan")),
            "rhat": float(conv.get("max_rhat", float("nan"))),
            "public": float(fit.attrs.get("forecast_ess", float("nan"))), "given": given.ess,
            "wall_s": time.perf_counter() - started}


HEADER = ["| case (N) | kernel | eps | iterations | measured bulk ESS (min) | chain R-hat | forecast (public) | "
          "measured / public | forecast (cov) | measured / forecast (cov) | within 3 x | s |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|"]


def verdict(measured: float, forecast: float) -> str:
    if measured < 10.0 and forecast < 10.0:
        return "yes (both below 10)"
    return "yes" if 1.0 / 3.0 <= measured / forecast <= 3.0 else "no"


def line(r: dict) -> str:
    return (f"| {r['case']} ({r['N']}) | {r['kernel']} | {r['epsilon']:g} | {r['iters']} | {r['ess']:.0f} | "
            f"{r['rhat']:.3f} | {r['public']:.3g} | {r['ess'] / r['public']:.3g} | {r['given']:.3g} | "
            f"{r['ess'] / r['given']:.3g} | {verdict(r['ess'], r['given'])} | {r['wall_s']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--kernels", nargs="+", default=["penalty", "dp-hmc", "dp-fast-mh"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[10.0, 100.0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    title = (f"# Forecast agreement: seed {args.seed}, 4 chains, delta {DELTA:g}, commit {commit.strip()}, "
             f"{platform.node()} ({platform.machine()}, shared 2-core machine)\n# command: python "
             + " ".join(sys.argv))
    print("\n".join([title, *HEADER]), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + header_for(args.out) + "\n".join([title, *HEADER]) + "\n")
    for case in args.cases:
        epsilons = [2000.0] if case == "linear-5k" else args.epsilons
        for kernel in args.kernels:
            for eps in epsilons:
                text = line(run_cell(case, kernel, eps, args.seed))
                print(text, flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(text + "\n")


if __name__ == "__main__":
    main()
