#!/usr/bin/env python
"""The Ray backend against the local engine, in one run: per-step time of DP-SGLD and of a full-data
clipped gradient vs the number of Ray workers (1, 2; the shard size is N / workers) at N = 1e6 and 1e7 simulated
rows of the logistic model (stan_models/logistic.stan, K = 9, dim 10), with the driver's share of the time.

What is measured (wall-clock, median over repeats; the machine's load average is printed at start and end):
  * build: data dict to a row likelihood (local: shard instances on all cores; ray: one actor per shard, each
    building its shard's instance on one thread). No factorization check (check=False) in either, so that the
    build times compare the engines alone;
  * DP-SGLD step: ``kernel.step`` of the dp-sgld kernel (Poisson minibatch at the default sampling rate; its
    clipped sum where the rows live, noise on the driver), as the chain loop calls it;
  * full-data clipped sum: ``mechanisms.rows_clipped_gradient_sum`` over all N rows plus noise (DP-GD's path: on
    Ray each actor returns its shard's clipped sum, one vector per shard);
  * all per-row gradients to the driver: all N per-row values and gradients, clipped and summed on the driver
    (DP-HMC's path: its penalty test needs the per-row values too);
  * driver share: the part of a step NOT spent waiting for the actors (``ray.get``): index split, reassembly,
    deserialising the per-row arrays, clipping and noise. For the local engine everything runs in the driver.

Run: .venv/bin/python benchmarks/bench_ray.py [--sizes 1000000 10000000] [--repeats 15]
Writes benchmarks/results/ray.txt (everything printed).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from stan_dp.model import DPStanModel  # noqa: E402
from stan_dp.privacy import mechanisms  # noqa: E402
from stan_dp.run.plan import plan_run  # noqa: E402
from provenance import header_for  # noqa: E402

K = 9
GRAD_CLIP = 2.0
LINES: list[str] = []


def say(text: str = "") -> None:
    print(text, flush=True)
    LINES.append(text)


def simulate(n: int, seed: int = 29) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, K))
    beta = rng.normal(size=K) / 3
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x @ beta)))).astype(np.int64)
    return {"N": n, "K": K, "x": x, "y": y, "prior_sd": 2.5}


class WaitClock:
    """Seconds the driver spends waiting in ray.get inside a RayShardRows (wraps its _gather)."""

    def __init__(self, rows) -> None:
        self.seconds = 0.0
        inner = rows._gather

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        rows._gather = timed


def median_time(fn, repeats: int, clock: WaitClock | None) -> tuple[float, float]:
    """(median seconds per call, median driver share) of ``fn``."""
    times, shares = [], []
    for _ in range(repeats):
        waited = clock.seconds if clock else 0.0
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        wait = (clock.seconds - waited) if clock else 0.0
        times.append(elapsed)
        shares.append(1.0 - wait / elapsed)
    return float(np.median(times)), float(np.median(shares))


def measure(label: str, lik, n: int, repeats: int) -> None:
    clock = WaitClock(lik._rows) if lik.row_backend == "ray" else None
    plan = plan_run(n, lik.dim, algorithm="dp-sgld", epsilon=1.0, delta=1.0 / (10 * n), chains=1, iter_warmup=100,
                    iter_sampling=100, quiet=True, grad_clip=GRAD_CLIP)
    kernel = plan.kernel_cls(lik, plan.privacy, **plan.options)
    rng = np.random.default_rng(1)
    state = {"s": kernel.init_state(np.zeros(lik.dim))}
    step = float(getattr(kernel, "default_step_size", None) or 1e-6)
    metric = np.ones(lik.dim)

    def sgld_step():
        state["s"], _ = kernel.step(rng, state["s"], step, metric)

    theta = np.full(lik.dim, 0.05)
    every_row = np.arange(n)

    def full_sum():  # DP-GD's path: the clipped sum where the rows live (one vector per shard on the wire)
        mechanisms.rows_clipped_gradient_sum(lik, theta, every_row, GRAD_CLIP) + rng.normal(0.0, 1.0, size=lik.dim)

    def full_gradient():  # DP-HMC's path: every per-row value and gradient to the driver, clipped there
        _, grads = lik.row_log_lik_grad(theta)
        mechanisms.clipped_gradient_sum(grads, GRAD_CLIP) + rng.normal(0.0, 1.0, size=lik.dim)

    sgld_step()  # warm the caches and the actors' scratch buffers
    sgld, sgld_share = median_time(sgld_step, repeats, clock)
    few = max(1, repeats // 5) if n < 5_000_000 else 1
    summed, summed_share = median_time(full_sum, few, clock)
    full, full_share = median_time(full_gradient, few, clock)
    q = plan.options.get("sampling_rate") or getattr(kernel, "sampling_rate", float("nan"))
    say(f"  {label:<18} DP-SGLD step {sgld * 1e3:8.2f} ms (driver {100 * sgld_share:5.1f}%; q {q:.3g}, ~{q * n:,.0f}"
        f" rows) | full-data clipped sum {summed * 1e3:7.1f} ms (driver {100 * summed_share:5.1f}%) | all per-row "
        f"gradients to the driver {full * 1e3:7.1f} ms (driver {100 * full_share:5.1f}%)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "ray.txt"))
    args = parser.parse_args()
    import ray

    say("Ray backend vs local engine (benchmarks/bench_ray.py; logistic, K = 9, dim 10; wall-clock medians)")
    say(f"machine: {os.cpu_count()} cores, load average at start {os.getloadavg()[0]:.2f}; ray {ray.__version__}")
    ray.init(num_cpus=max(args.workers), include_dashboard=False, log_to_driver=False)
    model = DPStanModel(ROOT / "stan_models" / "logistic.stan", show_progress=False)
    for n in args.sizes:
        data = simulate(n)
        say(f"\nN = {n:,} rows ({data['x'].nbytes / 1e6:,.0f} MB of x)")
        start = time.perf_counter()
        lik = model.row_likelihood(data, check=False)
        say(f"  local build {time.perf_counter() - start:7.1f} s (shard engine, {lik._rows.threads} threads)")
        measure("local, 2 threads", lik, n, args.repeats)
        del lik
        for workers in args.workers:
            start = time.perf_counter()
            lik = model.row_likelihood(data, check=False, backend="ray", ray_workers=workers)
            say(f"  ray build   {time.perf_counter() - start:7.1f} s ({workers} worker(s), shard size "
                f"{n // workers:,} rows, 1 thread each)")
            measure(f"ray, {workers} worker(s)", lik, n, args.repeats)
            lik.close()
            del lik
        del data
    say(f"\nload average at end {os.getloadavg()[0]:.2f} (another engineer's jobs share this 2-core machine)")
    ray.shutdown()
    Path(args.out).write_text(header_for(args.out) + "\n".join(LINES) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
