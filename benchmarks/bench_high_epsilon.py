#!/usr/bin/env python
"""Convergence when the noise is small: every algorithm at epsilon = 100 with defaults.

Cases (``benchmarks/cases.py``): wells (posteriordb, logistic, 5 coefficients, public scalings dist/100 and
educ/4, ratio_clip 12), linear regressions with N = 5,000 and 10,000 (grad_clip 40, ratio_clip 25) and the
README logistic model at N = 10,000. Each algorithm runs with its defaults (4 chains x (1000 + 1000), default
inits, default options apart from the public clip bounds) at epsilon = 100, delta = 1e-5, and is scored
against a non-private reference of the same NumPy model (``stan_dp.models.numpy_reference``) on the released
parameters: max |mean error| in reference sds, median sd ratio, max split R-hat. Target: R-hat <= 1.05 and max
error <= 0.3 sd.

Run: OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_high_epsilon.py
     [--cases wells linreg-5k] [--algorithms penalty dp-hmc] [--epsilon 100] [--seed 1] [--diagnostic-inits]
("--diagnostic-inits" starts the chains at the reference mean: a NOT private diagnostic that separates reaching
the posterior from mixing there.)
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402
from cases import HIGH_EPSILON_CASES  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402
from stan_dp.samplers import ALGORITHMS  # noqa: E402
from stan_dp.samplers.options import spec_of  # noqa: E402
from stan_dp.tools.utility import released_matrix, score_draws  # noqa: E402

DEFAULT_ALGORITHMS = ["penalty", "dp-fast-mh", "dp-hmc", "dp-sgld", "dp-sghmc", "dp-sgnht"]


def options_for(algorithm: str, bounds: dict) -> dict:
    """The clip bounds this algorithm accepts."""
    names = spec_of(ALGORITHMS[algorithm], algorithm).names
    return {k: v for k, v in bounds.items() if k in names}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=[c.name for c in HIGH_EPSILON_CASES])
    ap.add_argument("--algorithms", nargs="*", default=DEFAULT_ALGORITHMS)
    ap.add_argument("--epsilon", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--diagnostic-inits", action="store_true",
                    help="NOT PRIVATE diagnostic: start every chain at the reference mean, to separate the transient "
                         "(reaching the posterior) from mixing once there")
    args = ap.parse_args(argv)
    print("| case | algorithm | max err (sd) | sd ratio | R-hat | wall s |")
    print("|---|---|---|---|---|---|")
    for case in HIGH_EPSILON_CASES:
        if case.name not in args.cases:
            continue
        model = case.build()
        ref_unc = reference_draws(model, chains=4, draws=1000, seed=0)
        ref = released_matrix(model, ref_unc)
        inits = np.tile(ref_unc.reshape(-1, model.dim).mean(axis=0), (4, 1)) if args.diagnostic_inits else None
        for algorithm in args.algorithms:
            t0 = time.time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fit = sample_private(model, algorithm=algorithm, epsilon=args.epsilon, delta=1e-5,
                                     seed=args.seed, show_progress=False, inits=inits, **options_for(algorithm, case.bounds))
            wall = time.time() - t0
            s = score_draws(released_matrix(model, fit), ref)
            print(f"| {case.name} | {algorithm} | {s['max_mean_err_sd']:.2f} | {s['median_sd_ratio']:.2f} | "
                  f"{s['rhat']:.2f} | {wall:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
