#!/usr/bin/env python
"""Cost of the cryptographic noise source: kernel steps drawing from ChaCha20 vs NumPy's PCG64.

Unseeded runs draw their noise from ChaCha20 (``stan_dp.privacy.noise_source``), seeded ones from PCG64. This
script times typical kernel steps with each bit generator in the same process and prints the per-iteration
CPU time (``time.process_time``, median over blocks) and the ratio ChaCha20 / PCG64, for

* DP penalty MH on the NumPy Gaussian mean model (N rows, 2 parameters): few random draws per step;
* DP-HMC (L leapfrog steps) on the NumPy logistic regression (N rows, 3 covariates): L + 1 noisy gradients;
* raw draws: 1e6 standard normals in one call, the generator's throughput without kernel work.

Run: .venv/bin/python benchmarks/bench_noise_source.py [--n 1000] [--leapfrog-steps 10] [--blocks 7]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stan_dp.privacy import noise_source  # noqa: E402
from stan_dp.phases.calibration import calibrate  # noqa: E402
from stan_dp.models.reference_models import GaussianMeanModel, LogisticRegressionModel  # noqa: E402
from stan_dp.samplers import DPHMC, PenaltyMH  # noqa: E402


def per_step(kernel, rng, theta, step, blocks, iters):
    times = []
    state = kernel.init_state(theta)
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(iters):
            state, _ = kernel.step(rng, state, step, np.ones(theta.size))
        times.append((time.process_time() - start) / iters)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--leapfrog-steps", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args()
    generators = {"PCG64": lambda: np.random.default_rng(1), "ChaCha20": noise_source.secure_generator}

    gauss = GaussianMeanModel.simulate(args.n, 2, seed=1)
    logit = LogisticRegressionModel.simulate(args.n, 3, seed=1)
    pen_plan = calibrate("penalty", epsilon=1.0, delta=1e-5, chains=1, iterations=1000)
    hmc_plan = calibrate("dp-hmc", epsilon=1.0, delta=1e-5, chains=1, iterations=1000,
                         leapfrog_steps=args.leapfrog_steps)
    cases = [
        ("penalty MH, Gaussian mean", PenaltyMH(gauss, pen_plan), gauss.posterior_mean(), 0.01, 400),
        (f"DP-HMC L={args.leapfrog_steps}, logistic", DPHMC(logit, hmc_plan, leapfrog_steps=args.leapfrog_steps),
         np.zeros(logit.dim), 0.01, 40),
    ]
    print(f"N = {args.n}; median CPU seconds per step over {args.blocks} blocks; load average "
          f"{os.getloadavg()[0]:.2f}")
    print(f"{'case':<28} {'PCG64 s/step':>13} {'ChaCha20 s/step':>16} {'ratio':>7}")
    for name, kernel, theta, step, iters in cases:
        t = {g: per_step(kernel, make(), theta.copy(), step, args.blocks, iters) for g, make in generators.items()}
        print(f"{name:<28} {t['PCG64']:>13.3e} {t['ChaCha20']:>16.3e} {t['ChaCha20'] / t['PCG64']:>7.3f}")
    raw = {}
    for g, make in generators.items():
        rng = make()
        times = []
        for _ in range(args.blocks):
            start = time.process_time()
            rng.standard_normal(1_000_000)
            times.append(time.process_time() - start)
        raw[g] = statistics.median(times)
    print(f"{'1e6 standard normals':<28} {raw['PCG64']:>13.3e} {raw['ChaCha20']:>16.3e} "
          f"{raw['ChaCha20'] / raw['PCG64']:>7.3f}")


if __name__ == "__main__":
    main()
