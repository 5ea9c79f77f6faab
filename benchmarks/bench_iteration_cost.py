#!/usr/bin/env python
"""Per-iteration cost of the private kernels as the number of rows N grows.

Kernels: DP penalty MH (``stan_dp.samplers.PenaltyMH``: one per-row log-likelihood evaluation per iteration)
and DP-HMC (``stan_dp.samplers.DPHMC``: L per-row gradient evaluations per iteration, plus a cached one).
Engines, on the same simulated logistic-regression data (fixed seed) for each N:

* NumPy: the vectorised closed form ``stan_dp.models.reference_models.LogisticRegressionModel``;
* Stan: ``stan_models/logistic.stan`` compiled once (cached library) and evaluated through the row API,
  ``stan_dp.model.DPStanModel(...).row_likelihood(data)``.

Each kernel is driven directly (``kernel.step`` in a plain loop) with a noise plan from
``stan_dp.calibrate``, so the time is the kernel's own work and not that of the run machinery
(calibration, threads, InferenceData). A measurement runs blocks of iterations of at least ``--min-time``
seconds and reports the median time per iteration over ``--blocks`` blocks.

Printed ratios are measured in this run (nothing is hard-coded): time per iteration relative to N = 1e3 for
the same engine and kernel (linear cost would give 10x and 100x), Stan / NumPy for the same kernel and N, and
DP-HMC / penalty for the same engine and N. The run shares the machine with whatever else is running: the
load average is printed at start and end.

Run: .venv/bin/python benchmarks/bench_iteration_cost.py [--sizes 1000 10000 100000] [--k 9]
     [--leapfrog-steps 10] [--threads 1] [--min-time 1.0] [--blocks 5]
"""
from __future__ import annotations

import os

# NumPy on one BLAS thread, so that both engines run per core (the Stan engine uses --threads row threads).
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
from stan_dp.phases.calibration import calibrate  # noqa: E402
from stan_dp.models.reference_models import LogisticRegressionModel  # noqa: E402
from stan_dp.samplers import DPHMC, PenaltyMH  # noqa: E402

STAN_FILE = ROOT / "stan_models" / "logistic.stan"
PRIOR_SD = 2.5
# Public, fixed settings; the budget only sets the noise level, which does not change the cost.
EPSILON, DELTA, PLANNED_ITERATIONS = 1.0, 1e-5, 1000
PENALTY_STEP, HMC_STEP = 0.01, 0.005


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def make_kernel(algorithm: str, likelihood, leapfrog_steps: int):
    if algorithm == "penalty":
        plan = calibrate("penalty", epsilon=EPSILON, delta=DELTA, chains=1, iterations=PLANNED_ITERATIONS)
        return PenaltyMH(likelihood, plan, ratio_clip=1.0), PENALTY_STEP
    plan = calibrate("dp-hmc", epsilon=EPSILON, delta=DELTA, chains=1, iterations=PLANNED_ITERATIONS,
                     leapfrog_steps=leapfrog_steps)
    return DPHMC(likelihood, plan, ratio_clip=1.0, grad_clip=1.0, leapfrog_steps=leapfrog_steps), HMC_STEP


def seconds_per_iteration(kernel, step_size: float, theta0: np.ndarray, *, min_time: float, blocks: int,
                          seed: int) -> tuple[float, int]:
    """Median seconds per iteration over ``blocks`` blocks of at least ``min_time`` seconds each, and the
    total number of iterations timed. Two untimed iterations first fill the kernel's caches."""
    rng = np.random.default_rng(seed)
    metric = np.ones(theta0.shape[0])
    state = kernel.init_state(theta0)
    for _ in range(2):
        state, _ = kernel.step(rng, state, step_size, metric)
    per_iter, total = [], 0
    for _ in range(blocks):
        count = 0
        start = time.perf_counter()
        while True:
            state, _ = kernel.step(rng, state, step_size, metric)
            count += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time and count >= 3:
                break
        per_iter.append(elapsed / count)
        total += count
    return float(np.median(per_iter)), total


def fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000], help="values of N")
    parser.add_argument("--k", type=int, default=9, help="covariates K; unconstrained dimension K + 1 (default 9)")
    parser.add_argument("--leapfrog-steps", type=int, default=10, help="DP-HMC leapfrog steps L (default 10)")
    parser.add_argument("--threads", type=int, default=1, help="row threads of the Stan engine (default 1)")
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per timed block (default 1.0)")
    parser.add_argument("--blocks", type=int, default=5, help="timed blocks per measurement (median; default 5)")
    parser.add_argument("--seed", type=int, default=20261121, help="data and kernel seed")
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sizes))
    algorithms = ("penalty", "dp-hmc")
    engines = ("numpy", "stan")

    print(f"Per-iteration cost vs N: logistic regression, K = {args.k} covariates (dim {args.k + 1}), "
          f"DP-HMC L = {args.leapfrog_steps}, Stan engine threads = {args.threads}, NumPy BLAS threads = "
          f"{os.environ.get('OPENBLAS_NUM_THREADS')}")
    print(f"start: {load_average()}")
    start = time.perf_counter()
    stan_model = DPStanModel(STAN_FILE)
    print(f"compile/load of {STAN_FILE.name}: {time.perf_counter() - start:.1f} s (cached after the first build)")
    sys.stdout.flush()

    results: dict[tuple[str, str, int], float] = {}
    for n in sizes:
        numpy_model = LogisticRegressionModel.simulate(n, args.k, seed=args.seed, prior_sd=PRIOR_SD)
        data = {"N": n, "K": args.k, "x": numpy_model.X, "y": numpy_model.y.astype(np.int64), "prior_sd": PRIOR_SD}
        start = time.perf_counter()
        stan_lik = stan_model.row_likelihood(data, threads=args.threads)
        build = time.perf_counter() - start
        theta0 = np.asarray(numpy_model.true_theta, dtype=float)
        # the two engines must compute the same thing
        ll_np, g_np = numpy_model.row_log_lik_grad(theta0)
        ll_st, g_st = stan_lik.row_log_lik_grad(theta0)
        diff = max(float(np.max(np.abs(ll_np - ll_st))), float(np.max(np.abs(g_np - g_st))))
        print(f"N = {n:>7,}: row instances built in {build:.2f} s; max |NumPy - Stan| over values and "
              f"gradients = {diff:.1e}")
        likelihoods = {"numpy": numpy_model, "stan": stan_lik}
        for engine in engines:
            for algorithm in algorithms:
                kernel, step = make_kernel(algorithm, likelihoods[engine], args.leapfrog_steps)
                sec, count = seconds_per_iteration(kernel, step, theta0, min_time=args.min_time,
                                                   blocks=args.blocks, seed=args.seed)
                results[(engine, algorithm, n)] = sec
                print(f"  {engine:<5} {algorithm:<7} {fmt_time(sec):>11} per iteration ({count} iterations timed)")
                sys.stdout.flush()
        del stan_lik

    base = sizes[0]
    print()
    print(f"Time per iteration, and relative to N = {base:,} for the same engine and kernel "
          f"(linear in N would be N / {base:,})")
    header = f"{'engine':<6} {'kernel':<8}" + "".join(f"{f'N = {n:,}':>24}" for n in sizes)
    print(header)
    for engine in engines:
        for algorithm in algorithms:
            cells = []
            for n in sizes:
                sec = results[(engine, algorithm, n)]
                cells.append(f"{fmt_time(sec)} ({sec / results[(engine, algorithm, base)]:.1f}x)")
            print(f"{engine:<6} {algorithm:<8}" + "".join(f"{c:>24}" for c in cells))
    print()
    print("Stan / NumPy time per iteration (same kernel and N; > 1 means the Stan engine is slower)")
    print(f"{'kernel':<15}" + "".join(f"{f'N = {n:,}':>14}" for n in sizes))
    for algorithm in algorithms:
        print(f"{algorithm:<15}" + "".join(
            f"{results[('stan', algorithm, n)] / results[('numpy', algorithm, n)]:>13.2f}x" for n in sizes))
    print()
    print(f"DP-HMC / penalty time per iteration (same engine and N; DP-HMC evaluates {args.leapfrog_steps} "
          "gradients per iteration, penalty one log-likelihood)")
    print(f"{'engine':<15}" + "".join(f"{f'N = {n:,}':>14}" for n in sizes))
    for engine in engines:
        print(f"{engine:<15}" + "".join(
            f"{results[(engine, 'dp-hmc', n)] / results[(engine, 'penalty', n)]:>13.1f}x" for n in sizes))
    print()
    print(f"end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
