#!/usr/bin/env python
"""What one minibatch costs at scale: the per-row gradients of q N scattered rows against the same number of
contiguous rows, and the gather of the anchored chains' per-row anchor gradients.

A logistic regression with five parameters (stan_models/logistic.stan, the rows of ``bench_row_data.py``: the
same simulation and seed) is built with N rows on the shard engine. A minibatch is what the SG kernels draw by
default: every row with probability q = 30 / sqrt(N) (``stan_dp.privacy.mechanisms.poisson_minibatch``), sorted.
Timed (median of ``--repeats`` calls each, milliseconds):

* the Poisson minibatch itself (indices only);
* ``row_log_lik_grad`` on those scattered rows, on as many contiguous rows, and on as many evenly spaced rows,
  with 1 and with 2 native threads (the chains of a run share the cores, so the 1-thread figure is the one that
  adds up over chains);
* the anchor gradients of the batch gathered from an (N, 5) float64 matrix by fancy indexing and by ``np.take``.

Scattered rows cost more than contiguous ones because their data are not in the caches; the shard engine's row
loop prefetches the data of the row a few requests ahead (``stan_dp/stan/native/shard_hooks.hpp``).

Run: python benchmarks/bench_minibatch_rows.py [--n 2e7] [--repeats 20]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_row_data import PRIOR_SD, PROGRAM, simulate  # noqa: E402


def median_ms(call, repeats: int) -> float:
    """The median wall time of ``call()`` over ``repeats`` calls, in milliseconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=float, default=2e7, help="rows (default 2e7)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    from stan_dp.model import DPStanModel
    from stan_dp.privacy import mechanisms

    n = int(args.n)
    x, y = simulate(n, 1)
    model = DPStanModel(PROGRAM, show_progress=False)
    likelihood = model.row_likelihood({"prior_sd": PRIOR_SD},
                                      row_data={**{f"x.{j + 1}": x[:, j] for j in range(x.shape[1])}, "y": y})
    del x, y
    rng = np.random.default_rng(0)
    q = min(1.0, 30.0 / np.sqrt(n))
    theta = np.zeros(likelihood.dim)
    scattered = mechanisms.poisson_minibatch(rng, n, q)
    b = scattered.size
    contiguous = np.arange(b) + (n - b) // 2
    spaced = np.linspace(0, n - 1, b).astype(np.int64)
    print(f"N = {n:,}, q = {q:.4g}: a minibatch of {b:,} rows; median of {args.repeats} calls, ms")
    draw = median_ms(lambda: mechanisms.poisson_minibatch(rng, n, q), args.repeats)
    print(f"  Poisson minibatch (indices, sorted): {draw:7.2f}")
    for threads in (1, 2):
        likelihood.set_threads(threads)
        cells = []
        for label, rows in (("scattered", scattered), ("contiguous", contiguous), ("evenly spaced", spaced)):
            cells.append(f"{label} {median_ms(lambda: likelihood.row_log_lik_grad(theta, rows), args.repeats):7.2f}")
        print(f"  row gradients, {threads} thread(s):  " + " | ".join(cells))
    anchors = np.random.default_rng(1).standard_normal((n, likelihood.dim))
    fancy = median_ms(lambda: anchors[scattered], args.repeats)
    take = median_ms(lambda: np.take(anchors, scattered, axis=0), args.repeats)
    print(f"  anchor gradients of the batch: fancy index {fancy:7.2f} | np.take {take:7.2f}")


if __name__ == "__main__":
    main()
