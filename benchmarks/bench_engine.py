#!/usr/bin/env python
"""The compiled row engine against the NumPy closed forms, in one run.

Models (simulated with fixed seeds; the engine's values and gradients are checked against NumPy first):
  * logistic: stan_models/logistic.stan vs stan_dp.models.reference_models.LogisticRegressionModel (K = 9, dim 10);
  * gaussian: stan_models/gaussian_mean.stan (multi_normal_cholesky) vs GaussianMeanModel.simulate (Räisä et al.'s
    10-d Gaussian: known covariance, theta ~ N(0, 100^2 I));
  * poisson: stan_models/poisson_regression.stan vs PoissonRegressionModel (K = 9, dim 10).

It prints, all measured now:
  (1) per row, all N rows in one call, one thread: value, and value + gradient, for the shard engine (the default),
      NumPy, and the per-row engine (one instance per row, the fallback and the engine before the shard engine);
  (2) the cost of one engine call (value + gradient, and value only) for 1, 10, 100 and 1,000 random rows, and the
      fixed per-call cost (the intercept of a least-squares line through those four points);
  (3) per iteration of DP penalty MH, DP-HMC (L leapfrog steps) and DP-SGLD (Poisson minibatches at the default
      rate) on the 10-d Gaussian, engine vs NumPy;
  (4) all rows on 1 vs 2 engine threads (wall-clock; needs two idle cores);
  (5) at N = --big-n (default 1e6), each model in a fresh process: build time per row (data to a checked row
      likelihood: shards, prior, the factorization check against the unchanged program on all rows) and the
      resident memory the engine keeps per row (RSS after the build minus RSS before it, the library already
      loaded), against the bytes of the row data as NumPy holds them; the peak is printed too;
  (6) with --huge N (e.g. 10000000): the logistic model at N rows built and one DP-SGLD step timed;
  (7) with --strategies: the differentiation strategies on the logistic model, value + gradient per row: one
      nested reverse pass per row instance (the per-row engine), the shard loop with a reverse sweep per row
      over Stan's own functions (the logistic program with a predictor the GLM kernel does not match), and the
      fused GLM kernel with direct gradients (the default). Forward mode (one pass per parameter) is measured
      by benchmarks/forward_mode_probe/ (C++).

Times in (1)-(3) are CPU seconds of the calling thread (time.thread_time; the engine on one thread runs in the
calling thread and NumPy's BLAS is pinned to one thread), minimum over repeats: other processes on the machine
add wall-clock time but little CPU time. The load average is printed at start and end.

Run: .venv/bin/python benchmarks/bench_engine.py [--n 100000] [--big-n 1000000] [--huge 10000000]
     [--leapfrog-steps 12] [--repeats 5] [--skip-per-row]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from provenance import comment_header  # noqa: E402

from stan_dp.model import DPStanModel  # noqa: E402
from stan_dp.models.reference_models import (  # noqa: E402
    GaussianMeanModel,
    LogisticRegressionModel,
    PoissonRegressionModel,
)
from stan_dp.phases.calibration import calibrate  # noqa: E402
from stan_dp.samplers import DPHMC, DPSGLD, PenaltyMH  # noqa: E402

STAN_FILES = {"logistic": "logistic.stan", "gaussian": "gaussian_mean.stan", "poisson": "poisson_regression.stan"}


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


def model_data(name: str, n: int, seed: int):
    """(NumPy model, Stan data, test point, the names of the row variables) of a benchmark model."""
    if name == "logistic":
        m = LogisticRegressionModel.simulate(n, 9, seed=seed, prior_sd=2.5)
        return m, {"N": n, "K": 9, "x": m.X, "y": m.y.astype(np.int64), "prior_sd": 2.5}, \
            np.asarray(m.true_theta, float), ("x", "y")
    if name == "gaussian":
        m = GaussianMeanModel.simulate(n, 10, seed=seed)
        return m, {"N": n, "d": 10, "x": m.x, "Sigma": m.obs_cov, "prior_mean": m.prior_mean, "prior_sd": 100.0}, \
            m.true_theta + 0.01, ("x",)
    m = PoissonRegressionModel.simulate(n, 9, seed=seed)
    return m, {"N": n, "K": 9, "x": m.X, "y": m.y.astype(np.int64), "prior_sd": 2.5}, \
        np.asarray(m.true_theta, float), ("x", "y")


def stan_model(name: str) -> DPStanModel:
    return DPStanModel(ROOT / "stan_models" / STAN_FILES[name])


def per_iteration(kernel, theta0: np.ndarray, step: float, iterations: int, repeats: int, metric=None) -> float:
    """Minimum over repeats of CPU seconds per kernel iteration (blocks of ``iterations``)."""
    rng = np.random.default_rng(5)
    metric = np.ones(theta0.size) if metric is None else metric
    state = kernel.init_state(theta0)
    state, _ = kernel.step(rng, state, step, metric)

    def block():
        nonlocal state
        for _ in range(iterations):
            state, _ = kernel.step(rng, state, step, metric)

    return cpu_min(block, repeats) / iterations


# ------------------------------------------------------------------------------------------ build and memory


def _rss_kib(field: str = "VmRSS") -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return -1


def build_probe(name: str, n: int, seed: int, threads: int | None) -> dict:
    """Run in a fresh process: build the row likelihood of ``name`` at ``n`` rows; time and memory."""
    model = stan_model(name)
    _, small, _, _ = model_data(name, 50, seed)
    model.row_likelihood(small, threads=threads)  # library, TBB and the Python modules loaded
    _, data, theta, row_vars = model_data(name, n, seed)
    data_bytes = sum(np.asarray(data[v]).nbytes for v in row_vars)
    gc.collect()
    before = _rss_kib()
    start = time.perf_counter()
    lik = model.row_likelihood(data, threads=threads)
    build = time.perf_counter() - start
    gc.collect()
    after = _rss_kib()
    peak = _rss_kib("VmHWM")
    start = time.perf_counter()
    lik.row_log_lik_grad(theta)
    full_grad = time.perf_counter() - start
    return {"engine": lik.row_engine, "build_s": build, "rss_kib": after - before, "peak_kib": peak - before,
            "data_bytes": data_bytes, "n": n, "full_grad_s": full_grad, "threads": lik._rows.threads}


def huge_probe(n: int, seed: int, threads: int | None) -> dict:
    """Run in a fresh process: the logistic model at ``n`` rows built, then DP-SGLD steps timed."""
    out = build_probe("logistic", n, seed, threads)
    model = stan_model("logistic")
    _, data, theta, _ = model_data("logistic", n, seed)
    lik = model.row_likelihood(data, threads=threads)
    plan = calibrate("dp-sgld", epsilon=1.0, delta=1e-5, chains=1, iterations=1000, n_rows=n)
    kernel = DPSGLD(lik, plan, grad_clip=1.0)
    rng = np.random.default_rng(0)
    state = kernel.init_state(theta)
    metric = kernel.initial_metric()
    state, _ = kernel.step(rng, state, kernel.default_step_size, metric)
    walls = []
    for _ in range(5):
        start = time.perf_counter()
        state, _ = kernel.step(rng, state, kernel.default_step_size, metric)
        walls.append(time.perf_counter() - start)
    out.update(sgld_wall_s=float(np.median(walls)), sampling_rate=kernel.sampling_rate,
               rss_total_kib=_rss_kib(), peak_total_kib=_rss_kib("VmHWM"))
    return out


def run_probe(kind: str, name: str, n: int, seed: int, threads: int | None) -> dict:
    code = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); "
            f"import bench_engine as b; "
            + (f"print(json.dumps(b.build_probe({name!r}, {n}, {seed}, {threads!r})))" if kind == "build" else
               f"print(json.dumps(b.huge_probe({n}, {seed}, {threads!r})))"))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout).strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def strategies(n: int, seed: int, reps: int) -> None:
    """Part 7: value + gradient per row of the logistic model by three differentiation strategies."""
    import tempfile

    numpy_model, data, theta, _ = model_data("logistic", n, seed)
    source = (ROOT / "stan_models" / STAN_FILES["logistic"]).read_text()
    generic_source = source.replace("alpha + x * beta", "alpha + x * beta + 0")
    assert generic_source != source
    print(f"\n(7) differentiation strategies, logistic, N = {n:,}, value + gradient, one thread")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "logistic_generic.stan"
        path.write_text(generic_source)
        generic_model = DPStanModel(path)
    fused_model = stan_model("logistic")
    numpy_t = cpu_min(lambda: numpy_model.row_log_lik_grad(theta), reps)
    rows = []
    for label, model, engine in (("per-row instances, nested reverse pass per row", fused_model, "per-row"),
                                 ("shard loop, reverse sweep per row (Stan's functions)", generic_model, "shard"),
                                 ("shard loop, fused GLM kernel, direct gradient", fused_model, "shard")):
        lik = model.row_likelihood(data, threads=1, engine=engine)
        t = cpu_min(lambda: lik.row_log_lik_grad(theta), reps)
        rows.append((label, t))
        del lik
        gc.collect()
    for label, t in rows:
        print(f"    {label:<55} {ns(t, n)}  {t / numpy_t:5.2f}x NumPy")


# ------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="rows for parts 1-4 (default 100000)")
    parser.add_argument("--big-n", type=int, default=1_000_000, help="rows for part 5 (default 1000000; 0 skips)")
    parser.add_argument("--huge", type=int, default=0, help="rows for part 6 (default 0: skipped)")
    parser.add_argument("--leapfrog-steps", type=int, default=12, help="DP-HMC leapfrog steps (default 12)")
    parser.add_argument("--repeats", type=int, default=5, help="repeats per measurement (minimum taken)")
    parser.add_argument("--skip-per-row", action="store_true", help="do not build the per-row engine in part 1")
    parser.add_argument("--strategies", action="store_true", help="part 7 (compiles one more program)")
    parser.add_argument("--seed", type=int, default=20261121)
    args = parser.parse_args(argv)
    n, reps = args.n, args.repeats
    wall_start = time.perf_counter()
    print(comment_header(), end="")  # command, commit, machine: for a results file made from this output
    print(f"stan-dp row engine vs NumPy, N = {n:,} rows; CPU time of the calling thread, min of {reps} repeats")
    print(f"  start: {load()}")
    engines = {}
    print("\n(1) per row, all rows in one call, one thread (engine: shard; per-row: one instance per row)")
    print(f"    {'model':<9} {'':<14} {'engine':>15} {'NumPy':>15} {'ratio':>7} {'per-row':>15} {'ratio':>7}")
    for name in STAN_FILES:
        numpy_model, data, theta, _ = model_data(name, n, args.seed)
        model = stan_model(name)
        start = time.perf_counter()
        lik = model.row_likelihood(data, threads=1)
        build = time.perf_counter() - start
        engines[name] = (lik, numpy_model, theta)
        v, g = lik.row_log_lik_grad(theta)
        nv, ng = numpy_model.row_log_lik_grad(theta)
        diff = max(np.max(np.abs(v - nv)), np.max(np.abs(g - ng)))
        rel = diff / max(1.0, np.max(np.abs(nv)), np.max(np.abs(ng)))
        ev = cpu_min(lambda: lik.row_log_lik(theta), reps)
        nvt = cpu_min(lambda: numpy_model.row_log_lik(theta), reps)
        eg = cpu_min(lambda: lik.row_log_lik_grad(theta), reps)
        ngt = cpu_min(lambda: numpy_model.row_log_lik_grad(theta), reps)
        old_v = old_g = float("nan")
        old_build = float("nan")
        if not args.skip_per_row:
            start = time.perf_counter()
            old = model.row_likelihood(data, threads=1, engine="per-row")
            old_build = time.perf_counter() - start
            old_v = cpu_min(lambda: old.row_log_lik(theta), max(2, reps // 2))
            old_g = cpu_min(lambda: old.row_log_lik_grad(theta), max(2, reps // 2))
            del old
            gc.collect()
        print(f"    {name:<9} {'value':<14} {ns(ev, n):>15} {ns(nvt, n):>15} {ev / nvt:6.2f}x "
              f"{ns(old_v, n):>15} {old_v / nvt:6.2f}x")
        print(f"    {name:<9} {'value + grad':<14} {ns(eg, n):>15} {ns(ngt, n):>15} {eg / ngt:6.2f}x "
              f"{ns(old_g, n):>15} {old_g / ngt:6.2f}x  [target <= 3x: {'meets' if eg / ngt <= 3 else 'MISSES'}]")
        kernels = ", ".join(model.shard_program.kernels) if model.shard_program else "-"
        print(f"    {'':<9} (engine {lik.row_engine}, kernels: {kernels}; built + checked in {build:.2f} s wall, "
              f"per-row engine in {old_build:.1f} s; max |engine - NumPy| = {diff:.1e}, relative {rel:.1e})")

    print("\n(2) one engine call on k random rows, one thread")
    rng = np.random.default_rng(1)
    for name in engines:
        lik, _, theta = engines[name]
        sizes = [1, 10, 100, 1000]
        grad_t, value_t = [], []
        for k in sizes:
            rows = np.sort(rng.choice(n, size=k, replace=False))
            inner = max(20, 20_000 // k)
            grad_t.append(cpu_min(lambda: lik.row_log_lik_grad(theta, rows), reps, inner))
            value_t.append(cpu_min(lambda: lik.row_log_lik(theta, rows), reps, inner))
        for label, t in (("value + grad", grad_t), ("value", value_t)):
            slope, intercept = np.polyfit(sizes, t, 1)
            cells = "  ".join(f"k={k}: {s * 1e6:7.1f} us" for k, s in zip(sizes, t))
            print(f"    {name:<9} {label:<13} {cells}   per-call {intercept * 1e6:5.1f} us + "
                  f"{slope * 1e9:.0f} ns/row  [target <= 10 us: {'meets' if intercept <= 10e-6 else 'MISSES'}]")

    print(f"\n(3) per iteration on the 10-d Gaussian, N = {n:,}, one thread (DP-HMC L = {args.leapfrog_steps}; "
          "DP-SGLD: Poisson minibatches at the default rate)")
    lik, numpy_model, theta = engines["gaussian"]
    pen_plan = calibrate("penalty", epsilon=1.0, delta=1e-5, chains=1, iterations=1000)
    hmc_plan = calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=1, iterations=1000,
                         leapfrog_steps=args.leapfrog_steps)
    sgld_plan = calibrate("dp-sgld", epsilon=1.0, delta=1e-5, chains=1, iterations=1000, n_rows=n)
    for label, make, step, iters in (
        ("penalty", lambda m: PenaltyMH(m, pen_plan, ratio_clip=1.0), 1e-3, 10),
        ("dp-hmc", lambda m: DPHMC(m, hmc_plan, ratio_clip=1.0, grad_clip=1.0,
                                   leapfrog_steps=args.leapfrog_steps), 1e-4, 2),
        ("dp-sgld", lambda m: DPSGLD(m, sgld_plan, grad_clip=1.0), None, 20),
    ):
        times = []
        for m in (lik, numpy_model):
            kernel = make(m)
            if step is None:
                times.append(per_iteration(kernel, theta, kernel.default_step_size, iters, max(3, reps // 2),
                                           kernel.initial_metric()))
            else:
                times.append(per_iteration(kernel, theta, step, iters, max(3, reps // 2)))
        t_engine, t_numpy = times
        print(f"    {label:<8} engine {t_engine * 1e3:8.2f} ms  NumPy {t_numpy * 1e3:8.2f} ms  ratio "
              f"{t_engine / t_numpy:5.2f}x  [target <= 3x: {'meets' if t_engine / t_numpy <= 3 else 'MISSES'}]")

    print("\n(4) all rows, value + gradient, 1 vs 2 engine threads (wall-clock, min of repeats)")
    for name in engines:
        lik, _, theta = engines[name]
        lik.set_threads(1)
        one = wall_min(lambda: lik.row_log_lik_grad(theta), reps)
        lik.set_threads(2)
        two = wall_min(lambda: lik.row_log_lik_grad(theta), reps)
        lik.set_threads(1)
        print(f"    {name:<9} 1 thread {ns(one, n)}, 2 threads {ns(two, n)}: speed-up {one / two:.2f}x")
    engines.clear()
    gc.collect()

    if args.big_n:
        big = args.big_n
        print(f"\n(5) build and memory at N = {big:,}, each model in a fresh process (default threads)")
        for name in STAN_FILES:
            r = run_probe("build", name, big, args.seed, None)
            if "error" in r:
                print(f"    {name:<9} failed: {r['error']}")
                continue
            per_row = r["rss_kib"] * 1024 / big
            data_row = r["data_bytes"] / big
            print(f"    {name:<9} build {r['build_s']:6.2f} s = {r['build_s'] / big * 1e6:5.2f} us/row "
                  f"({r['threads']} threads); resident {per_row:6.1f} B/row = {per_row / data_row:4.2f}x the data "
                  f"({data_row:.0f} B/row; target <= 2x: {'meets' if per_row <= 2 * data_row else 'MISSES'}); "
                  f"peak {r['peak_kib'] * 1024 / big:6.1f} B/row; engine {r['engine']}; "
                  f"all-row gradient {r['full_grad_s'] * 1e3:.0f} ms wall")
    if args.huge:
        print(f"\n(6) the logistic model at N = {args.huge:,} (fresh process, default threads)")
        r = run_probe("huge", "logistic", args.huge, args.seed, None)
        if "error" in r:
            print(f"    failed: {r['error']}")
        else:
            print(f"    built and checked in {r['build_s']:.1f} s ({r['build_s'] / args.huge * 1e6:.2f} us/row); "
                  f"engine resident {r['rss_kib'] / 2**20:.2f} GiB ({r['rss_kib'] * 1024 / args.huge:.1f} B/row, "
                  f"data {r['data_bytes'] / args.huge:.0f} B/row); process resident {r['rss_total_kib'] / 2**20:.2f} "
                  f"GiB, peak {r['peak_total_kib'] / 2**20:.2f} GiB")
            print(f"    one DP-SGLD step (q = {r['sampling_rate']:.2e}, ~{r['sampling_rate'] * args.huge:,.0f} rows): "
                  f"{r['sgld_wall_s'] * 1e3:.1f} ms wall (median of 5); one all-row gradient "
                  f"{r['full_grad_s']:.2f} s wall")
    if args.strategies:
        strategies(min(n, 100_000), args.seed, reps)
    print(f"\n  end: {load()}")
    print(f"{time.perf_counter() - wall_start:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
