#!/usr/bin/env python
"""Throughput of the row API (per-row log-likelihoods and gradients in compiled code).

Model: stan_models/logistic.stan (Bernoulli-logit regression), D = 10 unconstrained parameters: an intercept
alpha plus K = 9 coefficients beta. Data: N = 100,000 simulated rows (fixed seed). One "evaluation" is the
value and gradient of l_i(theta) for every row, which is what one DP-HMC leapfrog step needs.

Measured in this run (every number printed is measured now, none is remembered):
  (a) engine vs a Python loop over one bridgestan.StanModel per row (built for a subset of rows, timed, and
      extrapolated per row to N);
  (b) engine vs a vectorised NumPy closed form (stan_dp.models.reference_models.LogisticRegressionModel), one thread;
  (c) engine with 1 vs 2 threads;
  (d) memory per row instance (VmRSS before/after building the instances, divided by N);
  and the cost of one evaluation vs N.

Run: python benchmarks/bench_rows.py [--n 100000] [--loop-rows 2000] [--repeats 7]
The 1-vs-2-thread ratio needs two idle cores: the load average is printed at start and end.
"""
from __future__ import annotations

import os

# NumPy's closed form must run on one thread (the comparison is per core); set before NumPy loads BLAS.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import gc  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp.stan.data import prior_data, split_rows  # noqa: E402
from stan_dp.stan.engine import RowInstances  # noqa: E402
from stan_dp.model import DPStanModel  # noqa: E402

try:
    from stan_dp.models.reference_models import LogisticRegressionModel
except ImportError:  # pragma: no cover - only before the reference models existed
    LogisticRegressionModel = None

PRIOR_SD = 2.5


# ------------------------------------------------------------------------------------------------ helpers
def rss_bytes() -> int:
    """Resident set size of this process (VmRSS in /proc/self/status)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def release_freed_memory() -> None:
    """Collect Python garbage and hand freed heap pages back to the OS so that RSS reflects live memory."""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def timings(fn, repeats: int) -> np.ndarray:
    """Wall-clock seconds of ``repeats`` calls of ``fn`` after one warm-up call."""
    fn()
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return np.array(out)


def median_wall_cpu(fn, repeats: int) -> tuple[float, float]:
    """Median wall-clock and median CPU seconds of the calling thread per call (after one warm-up call).

    For single-threaded work (the engine with one thread runs in the calling thread) the CPU time is what the
    work costs even when other processes compete for the cores; the wall-clock time is what a user waits.
    """
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        start_wall, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return float(np.median(wall)), float(np.median(cpu))


def thread_cpu_ns() -> dict[str, int]:
    """CPU nanoseconds used so far by each thread of this process (/proc/self/task/*/schedstat)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                out[tid] = int(stat.read().split()[0])
        except OSError:  # the thread ended
            pass
    return out


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def simulate(n: int, k: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, k))
    alpha, beta = rng.normal(0.0, 0.5), rng.normal(0.0, 1.0, size=k)
    eta = alpha + x @ beta
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    return {"N": n, "K": k, "x": x, "y": y, "prior_sd": PRIOR_SD}


class ClosedForm:
    """Vectorised closed form, used only if stan_dp.models.reference_models is not available."""

    def __init__(self, x, y):
        self.design = np.column_stack([np.ones(len(y)), x])
        self.y = np.asarray(y, dtype=float)

    def row_log_lik_grad(self, theta):
        eta = self.design @ theta
        values = self.y * eta - np.logaddexp(0.0, eta)
        return values, (self.y - 1.0 / (1.0 + np.exp(-eta)))[:, None] * self.design


def build_instances(model: DPStanModel, data: dict, threads: int) -> tuple[RowInstances, float]:
    split, kept = split_rows(model.data_declarations, data)
    start = time.perf_counter()
    instances = RowInstances(str(model.library_path), kept, split, threads=threads)
    return instances, time.perf_counter() - start


def fmt_s(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def verdict(value: float, target: float) -> str:
    return "meets" if value >= target else "MISSES"


# ------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="rows (default 100000)")
    parser.add_argument("--k", type=int, default=9, help="covariates; D = K + 1 with the intercept (default 9)")
    parser.add_argument("--loop-rows", type=int, default=2000, help="rows of the per-row BridgeStan loop")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per measurement (median)")
    parser.add_argument("--sizes", type=str, default="1000,10000,100000", help="N values for cost vs N")
    parser.add_argument("--seed", type=int, default=20240917)
    args = parser.parse_args(argv)

    import bridgestan

    n, k, d = args.n, args.k, args.k + 1
    print("stan-dp row API benchmark")
    print(f"  model stan_models/logistic.stan: D = {d} (alpha + K = {k} coefficients), N = {n:,} simulated rows "
          f"(seed {args.seed}); one evaluation = value + gradient of l_i for all rows")
    print(f"  at start: {load()}")
    model = DPStanModel(ROOT / "stan_models" / "logistic.stan")
    data = simulate(n, k, args.seed)
    theta = np.random.default_rng(args.seed + 1).normal(0.0, 0.5, size=d)

    # (d) memory per row instance ------------------------------------------------------------------------
    release_freed_memory()
    before = rss_bytes()
    rows, build_seconds = build_instances(model, data, threads=2)
    release_freed_memory()
    after = rss_bytes()
    per_row = (after - before) / n
    print(f"\n(d) memory: RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB building {n:,} row instances + prior "
          f"(2 threads, {fmt_s(build_seconds)}, {fmt_s(build_seconds / n)} per row)")
    print(f"    {per_row:,.0f} bytes per row instance (RSS delta / N; the row's own data are {8 * d:,} bytes as "
          f"doubles)")

    # correctness of what is timed -------------------------------------------------------------------------
    if LogisticRegressionModel is not None:
        numpy_model = LogisticRegressionModel(data["x"], data["y"], prior_sd=PRIOR_SD)
        numpy_name = "stan_dp.models.reference_models.LogisticRegressionModel"
    else:
        numpy_model = ClosedForm(data["x"], data["y"])
        numpy_name = "closed form in this script"
    rows.set_threads(1)
    values, grads = rows.log_lik_grad(theta)
    np_values, np_grads = numpy_model.row_log_lik_grad(theta)
    print(f"\n    check: engine vs NumPy max |diff| values {np.max(np.abs(values - np_values)):.1e}, gradients "
          f"{np.max(np.abs(grads - np_grads)):.1e}")

    # (b) engine (1 thread) vs NumPy ----------------------------------------------------------------------
    rows.set_threads(1)
    engine_1, engine_1_cpu = median_wall_cpu(lambda: rows.log_lik_grad(theta), args.repeats)
    engine_1_value, engine_1_value_cpu = median_wall_cpu(lambda: rows.log_lik(theta), args.repeats)
    numpy_t, numpy_cpu = median_wall_cpu(lambda: numpy_model.row_log_lik_grad(theta), args.repeats)
    print(f"\n(b) one thread, all {n:,} rows, value + gradient (median of {args.repeats}; wall-clock / CPU time):")
    print(f"    engine {fmt_s(engine_1)} / {fmt_s(engine_1_cpu)} ({engine_1_cpu / n * 1e9:.0f} ns/row CPU; value only "
          f"{fmt_s(engine_1_value)} / {fmt_s(engine_1_value_cpu)})")
    print(f"    NumPy ({numpy_name}) {fmt_s(numpy_t)} / {fmt_s(numpy_cpu)} ({numpy_cpu / n * 1e9:.0f} ns/row CPU)")
    print(f"    engine / NumPy time = {engine_1 / numpy_t:.2f}x wall-clock, {engine_1_cpu / numpy_cpu:.2f}x CPU  "
          f"[target <= 8x: {'meets' if engine_1_cpu / numpy_cpu <= 8 else 'MISSES'} (CPU)]")

    # (c) 1 vs 2 threads ---------------------------------------------------------------------------------
    rows.set_threads(2)
    values_2, grads_2 = rows.log_lik_grad(theta)
    same = np.array_equal(values_2, values) and np.array_equal(grads_2, grads)
    cpu_before = thread_cpu_ns()
    engine_2 = np.median(timings(lambda: rows.log_lik_grad(theta), args.repeats))
    cpu_after = thread_cpu_ns()
    per_thread = sorted(((cpu_after[t] - cpu_before.get(t, 0)) / (args.repeats + 1) / 1e9 for t in cpu_after),
                        reverse=True) + [0.0]
    busiest, total = per_thread[0], sum(per_thread)
    print(f"\n(c) threads (wall-clock): 1 thread {fmt_s(engine_1)}, 2 threads {fmt_s(engine_2)}; speed-up "
          f"{engine_1 / engine_2:.2f}x  [target >= 1.7x: {verdict(engine_1 / engine_2, 1.7)}] "
          f"(results bit-identical: {same}; {load()})")
    print(f"    CPU per evaluation with 2 threads: {fmt_s(total)} in total ({total / engine_1_cpu:.2f}x the 1-thread "
          f"CPU), busiest thread {fmt_s(busiest)}, next {fmt_s(per_thread[1])}: the work splits "
          f"{per_thread[1] / total:.0%}/{busiest / total:.0%}, so two idle cores would give up to "
          f"{engine_1_cpu / busiest:.2f}x (an upper bound; the wall-clock ratio above is what this run got)")

    # (a) Python loop over one bridgestan.StanModel per row -----------------------------------------------
    m = min(args.loop_rows, n)
    split, kept = split_rows(model.data_declarations, data)
    release_freed_memory()
    rss_loop_before = rss_bytes()
    start = time.perf_counter()
    prior_bs = bridgestan.StanModel(str(model.library_path), _json(prior_data(split, kept)), warn=False)
    per_row_models = []
    for i in range(m):
        row = dict(kept, N=1, x=data["x"][i:i + 1], y=data["y"][i:i + 1])
        per_row_models.append(bridgestan.StanModel(str(model.library_path), _json(row), warn=False))
    loop_build = time.perf_counter() - start
    release_freed_memory()
    loop_rss = (rss_bytes() - rss_loop_before) / m
    loop_values = np.empty(m)
    loop_grads = np.empty((m, d))

    def python_loop() -> None:
        lp0, g0 = prior_bs.log_density_gradient(theta, propto=False, jacobian=True)
        for i, row_model in enumerate(per_row_models):
            lp, _ = row_model.log_density_gradient(theta, propto=False, jacobian=True, out=loop_grads[i])
            loop_values[i] = lp - lp0
            loop_grads[i] -= g0

    loop_t, loop_cpu = median_wall_cpu(python_loop, max(3, args.repeats // 2))
    np.testing.assert_allclose(loop_values, values[:m], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(loop_grads, grads[:m], rtol=1e-12, atol=1e-12)
    loop_full, loop_full_cpu = loop_t / m * n, loop_cpu / m * n
    print(f"\n(a) Python loop over {m:,} per-row bridgestan.StanModel objects (one per row, built in "
          f"{fmt_s(loop_build)} = {fmt_s(loop_build / m)} per row, {loop_rss:,.0f} bytes RSS per row model):")
    print(f"    {fmt_s(loop_t)} / {fmt_s(loop_cpu)} CPU for {m:,} rows = {loop_cpu / m * 1e6:.2f} us/row CPU; "
          f"EXTRAPOLATED to N = {n:,}: {fmt_s(loop_full)} / {fmt_s(loop_full_cpu)} CPU (values and gradients equal "
          "the engine's)")
    print(f"    engine 1 thread is {loop_full / engine_1:.1f}x faster wall-clock, {loop_full_cpu / engine_1_cpu:.1f}x "
          f"CPU  [target >= 10x: {verdict(loop_full_cpu / engine_1_cpu, 10)} (CPU)]; engine 2 threads "
          f"{loop_full / engine_2:.1f}x faster wall-clock")
    del per_row_models, prior_bs

    # cost vs N -----------------------------------------------------------------------------------------
    sizes = [int(float(s)) for s in args.sizes.split(",") if s]
    print(f"\ncost of one evaluation (value + gradient, all rows) vs N, median of max({args.repeats}, 1e6 / N) calls:")
    print(f"    {'N':>9} {'build':>10} {'1 thread':>11} {'ns/row':>7} {'CPU ns/row':>10} {'2 threads':>11} {'ns/row':>7} "
          f"{'speed-up':>8}")
    for size in sizes:
        if size == n:
            inst, build = rows, build_seconds
        else:
            sub = dict(data, N=size, x=data["x"][:size], y=data["y"][:size])
            inst, build = build_instances(model, sub, threads=2)
        times = {}
        reps = max(args.repeats, min(200, 1_000_000 // size))  # small N: more repeats, so one preemption cannot dominate
        inst.set_threads(1)
        times[1], cpu_1 = median_wall_cpu(lambda: inst.log_lik_grad(theta), reps)
        inst.set_threads(2)
        times[2] = np.median(timings(lambda: inst.log_lik_grad(theta), reps))
        print(f"    {size:>9,} {fmt_s(build):>10} {fmt_s(times[1]):>11} {times[1] / size * 1e9:>7.0f} "
              f"{cpu_1 / size * 1e9:>10.0f} {fmt_s(times[2]):>11} {times[2] / size * 1e9:>7.0f} "
              f"{times[1] / times[2]:>7.2f}x")
    print(f"\n  at end: {load()}")
    return 0


def _json(data: dict) -> str:
    from stan_dp.stan.data import to_json

    return to_json(data)


if __name__ == "__main__":
    raise SystemExit(main())
