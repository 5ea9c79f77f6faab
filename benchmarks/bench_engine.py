#!/usr/bin/env python
"""The compiled row engine against the NumPy closed forms, in one run (issue 17's evidence).

Models (simulated with fixed seeds; the engine's values and gradients are checked against NumPy first):
  * logistic: stan_models/logistic.stan vs stan_dp.models.reference_models.LogisticRegressionModel (D = 10);
  * gaussian: stan_models/gaussian_mean.stan vs stan_dp.models.reference_models.GaussianMeanModel.simulate (seed 004's
    10-d Gaussian: known covariance, theta ~ N(0, 100^2 I)).

It prints, all measured now:
  (1) per row, all N rows in one call: value only, and value + gradient, engine vs NumPy, one thread;
  (2) the cost of one engine call (value + gradient, and value only) for 1, 10, 100 and 1,000 rows, and the
      fixed per-call cost (the intercept of a least-squares line through those four points);
  (3) per iteration of DP penalty MH and DP-HMC (L leapfrog steps) on the 10-d Gaussian, engine vs NumPy;
  (4) extra: the engine on two threads (wall-clock; needs two idle cores).

Times are CPU seconds of the calling thread (time.thread_time; the engine on one thread runs in the calling
thread and NumPy's BLAS is pinned to one thread), minimum over repeats: other processes on the machine add
wall-clock time but little CPU time. The load average is printed at start and end.

Run: .venv/bin/python benchmarks/bench_engine.py [--n 100000] [--leapfrog-steps 12] [--repeats 5]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp.model import DPStanModel  # noqa: E402
from stan_dp.run.calibration import calibrate  # noqa: E402
from stan_dp.models.reference_models import GaussianMeanModel, LogisticRegressionModel  # noqa: E402
from stan_dp.samplers import DPHMC, PenaltyMH  # noqa: E402


def cpu_min(fn, repeats: int, inner: int = 1) -> float:
    """Minimum over ``repeats`` of the calling thread's CPU seconds per call (``inner`` calls per repeat)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        for _ in range(inner):
            fn()
        best = min(best, (time.thread_time() - start) / inner)
    return best


def wall_min(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def ns(seconds: float, n: int) -> str:
    return f"{seconds / n * 1e9:7.0f} ns/row"


def models(n: int, seed: int):
    """(name, NumPy model, Stan data, Stan file, test point) for both benchmark models."""
    logistic = LogisticRegressionModel.simulate(n, 9, seed=seed, prior_sd=2.5)
    logistic_data = {"N": n, "K": 9, "x": logistic.X, "y": logistic.y.astype(np.int64), "prior_sd": 2.5}
    gauss = GaussianMeanModel.simulate(n, 10, seed=seed)
    gauss_data = {"N": n, "d": 10, "x": gauss.x, "Sigma": gauss.obs_cov, "prior_mean": gauss.prior_mean,
                  "prior_sd": 100.0}
    return [
        ("logistic", logistic, logistic_data, "logistic.stan", np.asarray(logistic.true_theta, float)),
        ("gaussian", gauss, gauss_data, "gaussian_mean.stan", gauss.true_theta + 0.01),
    ]


def per_iteration(kernel, theta0: np.ndarray, step: float, iterations: int, repeats: int) -> float:
    """Minimum over repeats of CPU seconds per kernel iteration (blocks of ``iterations``)."""
    rng = np.random.default_rng(5)
    metric = np.ones(theta0.size)
    state = kernel.init_state(theta0)
    state, _ = kernel.step(rng, state, step, metric)

    def block():
        nonlocal state
        for _ in range(iterations):
            state, _ = kernel.step(rng, state, step, metric)

    return cpu_min(block, repeats) / iterations


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="rows (default 100000)")
    parser.add_argument("--leapfrog-steps", type=int, default=12, help="DP-HMC leapfrog steps (default 12)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per measurement (minimum taken)")
    parser.add_argument("--seed", type=int, default=20261121)
    args = parser.parse_args(argv)
    n, reps = args.n, args.repeats
    print(f"stan-dp row engine vs NumPy, N = {n:,} rows; CPU time of the calling thread, min of {reps} repeats")
    print(f"  start: {load()}")
    engines = {}
    print("\n(1) per row, all rows in one call, one thread")
    print(f"    {'model':<9} {'':<14} {'engine':>15} {'NumPy':>15} {'ratio':>7}")
    for name, numpy_model, data, stan_file, theta in models(n, args.seed):
        start = time.perf_counter()
        lik = DPStanModel(ROOT / "stan_models" / stan_file).row_likelihood(data, threads=1)
        build = time.perf_counter() - start
        engines[name] = (lik, numpy_model, theta)
        v, g = lik.row_log_lik_grad(theta)
        nv, ng = numpy_model.row_log_lik_grad(theta)
        diff = max(np.max(np.abs(v - nv)), np.max(np.abs(g - ng)))
        ev = cpu_min(lambda: lik.row_log_lik(theta), reps)
        nvt = cpu_min(lambda: numpy_model.row_log_lik(theta), reps)
        eg = cpu_min(lambda: lik.row_log_lik_grad(theta), reps)
        ngt = cpu_min(lambda: numpy_model.row_log_lik_grad(theta), reps)
        print(f"    {name:<9} {'value':<14} {ns(ev, n):>15} {ns(nvt, n):>15} {ev / nvt:6.2f}x")
        print(f"    {name:<9} {'value + grad':<14} {ns(eg, n):>15} {ns(ngt, n):>15} {eg / ngt:6.2f}x  "
              f"[target <= 3x: {'meets' if eg / ngt <= 3 else 'MISSES'}]")
        print(f"    {'':<9} (load with row program: {lik._rows.row_program}; instances + check built in "
              f"{build:.1f} s wall; max |engine - NumPy| = {diff:.1e})")

    print("\n(2) one engine call on k rows (rows 0..k-1), one thread, logistic / gaussian")
    for name in engines:
        lik, _, theta = engines[name]
        sizes = [1, 10, 100, 1000]
        grad_t, value_t = [], []
        for k in sizes:
            rows = np.arange(k)
            inner = max(20, 20_000 // k)
            grad_t.append(cpu_min(lambda: lik.row_log_lik_grad(theta, rows), reps, inner))
            value_t.append(cpu_min(lambda: lik.row_log_lik(theta, rows), reps, inner))
        for label, t in (("value + grad", grad_t), ("value", value_t)):
            slope, intercept = np.polyfit(sizes, t, 1)
            cells = "  ".join(f"k={k}: {s * 1e6:7.1f} us" for k, s in zip(sizes, t))
            print(f"    {name:<9} {label:<13} {cells}   per-call {intercept * 1e6:5.1f} us + "
                  f"{slope * 1e9:.0f} ns/row  [target <= 10 us: {'meets' if intercept <= 10e-6 else 'MISSES'}]")

    print(f"\n(3) per iteration on the 10-d Gaussian, N = {n:,}, one thread (DP-HMC L = {args.leapfrog_steps})")
    lik, numpy_model, theta = engines["gaussian"]
    pen_plan = calibrate("penalty", epsilon=1.0, delta=1e-5, chains=1, iterations=1000)
    hmc_plan = calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=1, iterations=1000,
                         leapfrog_steps=args.leapfrog_steps)
    for label, make, step, iters in (
        ("penalty", lambda m: PenaltyMH(m, pen_plan, ratio_clip=1.0), 1e-3, 10),
        ("dp-hmc", lambda m: DPHMC(m, hmc_plan, ratio_clip=1.0, grad_clip=1.0,
                                   leapfrog_steps=args.leapfrog_steps), 1e-4, 2),
    ):
        t_engine = per_iteration(make(lik), theta, step, iters, max(3, reps // 2))
        t_numpy = per_iteration(make(numpy_model), theta, step, iters, max(3, reps // 2))
        print(f"    {label:<8} engine {t_engine * 1e3:8.2f} ms  NumPy {t_numpy * 1e3:8.2f} ms  ratio "
              f"{t_engine / t_numpy:5.2f}x  [target <= 3x: {'meets' if t_engine / t_numpy <= 3 else 'MISSES'}]")

    print("\n(4) extra: all rows, value + gradient, 1 vs 2 engine threads (wall-clock, min of repeats)")
    for name in engines:
        lik, _, theta = engines[name]
        lik.set_threads(1)
        one = wall_min(lambda: lik.row_log_lik_grad(theta), reps)
        lik.set_threads(2)
        two = wall_min(lambda: lik.row_log_lik_grad(theta), reps)
        lik.set_threads(1)
        print(f"    {name:<9} 1 thread {ns(one, n)}, 2 threads {ns(two, n)}: speed-up {one / two:.2f}x")
    print(f"\n  end: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
