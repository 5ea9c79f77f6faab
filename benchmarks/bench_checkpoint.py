#!/usr/bin/env python
"""Cost of checkpoints: the same seeded run without checkpoints, at the default cadence, and at a dense cadence.

A mid-size private run (NumPy logistic regression, N rows, 4 covariates, dp-sghmc, 2 chains) is run three times in
one process: without ``checkpoint=``, with the default cadence (a checkpoint before the first iteration, then every
60 s), and with a dense cadence (``--dense``, default every 2 s). For each it prints the wall time, the number of
checkpoints written, the time spent in checkpoint code (the chains' snapshots and the writes, measured by wrapping
them; on the chains' threads, so it is an upper bound on the delay it adds) and that time as a share of the run,
and the size of the checkpoint files. The draws of the three runs are checked to be identical (checkpoints must
not change a seeded run). Wall times on a shared machine are noisy; the measured checkpoint time is the steadier
number.

Run: .venv/bin/python benchmarks/bench_checkpoint.py [--n 50000] [--iterations 4000] [--dense 2s]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stan_dp.models.reference_models import LogisticRegressionModel  # noqa: E402
from stan_dp.phases import chains as chain_loop  # noqa: E402
from stan_dp.phases import checkpoint as ck  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402


class Timer:
    """Seconds spent inside the wrapped checkpoint functions (summed over threads) and the write count."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.writes = 0
        self._lock = threading.Lock()

    def wrap(self, owner: type, name: str, counts: bool) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                with self._lock:
                    self.seconds += time.perf_counter() - start
                    self.writes += int(counts)

        setattr(owner, name, timed)


def run(likelihood, options: dict, directory: Path | None, every) -> tuple[float, np.ndarray, Timer, int]:
    timer = Timer()
    saved = (chain_loop._ChainLoop.snapshot, ck.Checkpointer._write)
    timer.wrap(chain_loop._ChainLoop, "snapshot", counts=False)
    timer.wrap(ck.Checkpointer, "_write", counts=True)
    extra = {} if directory is None else {"checkpoint": directory, "checkpoint_every": every}
    try:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(likelihood, **options, **extra)
        wall = time.perf_counter() - start
    finally:
        chain_loop._ChainLoop.snapshot, ck.Checkpointer._write = saved
    size = sum(p.stat().st_size for p in directory.iterdir()) if directory is not None else 0
    draws = fit["posterior"].to_dataset().to_array().values if hasattr(fit, "children") else \
        fit.posterior.to_array().values
    return wall, draws, timer, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=50000, help="rows")
    parser.add_argument("--iterations", type=int, default=4000, help="warmup and sampling iterations, each")
    parser.add_argument("--dense", default="2s", help="the dense cadence (iterations, or seconds as '2s')")
    args = parser.parse_args()

    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.n, 4))
    y = (rng.uniform(size=args.n) < 1.0 / (1.0 + np.exp(-x @ np.array([1.0, -0.5, 0.25, 0.0])))).astype(float)
    likelihood = LogisticRegressionModel(x, y)
    options = dict(algorithm="dp-sghmc", grad_clip=3.0, epsilon=1.0, delta=1e-6, chains=2,
                   iter_warmup=args.iterations, iter_sampling=args.iterations, seed=5, show_progress=False)
    print(f"dp-sghmc, logistic regression N = {args.n}, dim 5, 2 chains x ({args.iterations} warmup + "
          f"{args.iterations} sampling) iterations")
    run(likelihood, {**options, "iter_warmup": 20, "iter_sampling": 20}, None, None)  # warm caches and imports
    base_wall, base_draws, _, _ = run(likelihood, options, None, None)
    print(f"{'cadence':<22} {'wall s':>8} {'writes':>7} {'in checkpoint code s':>21} {'share':>7} {'files MB':>9}")
    print(f"{'no checkpoint':<22} {base_wall:8.2f} {0:7d} {0.0:21.3f} {'-':>7} {0.0:9.2f}")
    per_write = []
    for label, every in (("default (60 s)", None), (f"dense ({args.dense})", args.dense)):
        with tempfile.TemporaryDirectory() as tmp:
            wall, draws, timer, size = run(likelihood, options, Path(tmp) / "ck", every)
        same = np.array_equal(draws, base_draws)
        per_write.append(timer.seconds / max(timer.writes, 1))
        print(f"{label:<22} {wall:8.2f} {timer.writes:7d} {timer.seconds:21.3f} "
              f"{100.0 * timer.seconds / wall:6.2f}% {size / 1e6:9.2f}"
              f"{'' if same else '  DRAWS DIFFER'}")
        print(f"{'':<22} wall-time difference vs no checkpoint: {100.0 * (wall / base_wall - 1.0):+.1f} % "
              "(noisy on a shared machine)")
    worst = max(per_write)
    print(f"checkpoint code per write: up to {worst:.3f} s; in a long run at the default cadence (one write per "
          f"{ck.DEFAULT_SECONDS:g} s) that is {100.0 * worst / ck.DEFAULT_SECONDS:.3f} % of the run time")


if __name__ == "__main__":
    main()
