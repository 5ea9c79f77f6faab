#!/usr/bin/env python
"""The long privacy audit: every target with a correct implementation, then with each planted fault.

For each case it runs ``stan_dp.audit`` on the synthetic NumPy model (``default_audit_model``: 10 rows at 0,
2 parameters) and prints one table row per target: the claimed epsilon (at delta 1e-5), the Clopper-Pearson
lower bound (confidence 0.95), the runs per neighbouring data set (half choose the test, half bound
epsilon), the statistic chosen, and the wall seconds of that target (the machine is shared: the load average
is printed at start and end).
Cases:

* correct: mechanisms, one iteration of every algorithm (the SG kernels at steps where their privacy noise
  binds, from a public momentum 0, and on a subsampled base whose 20 rows all sit at the clip bound, rate
  0.3), whole short runs of every algorithm and of OPS, the hybrid and an OPS warm start with a NaN canary;
* half-noise: every Gaussian noise draw at half its calibrated sd (mechanisms and iterations: it reaches
  every kernel, the SG kernels' merged noise included);
* reused-noise: pairs of releases sharing one noise draw (mechanisms; the x2 targets are the ones it hits);
* sg-sensitivity: the SG kernels' privacy noise sized for sensitivity L instead of 2 L (iterations);
* released-batch-size: the SG kernels release the realised Poisson batch size (subsampled iterations);
* nan-row-ops: OPS lets a NaN row through, removing half the support (whole runs of OPS, the hybrid and the
  OPS warm start);
* privacy-for-free: DP-Fast MH's privacy_for_free=True (iterations and whole runs of both variants);
* double-clip: every clipped release clips at twice its bound (gradients and their anchored differences, the
  curvature sums F~, ratios and their anchored remainders): one iteration of penalty MH and DP-SGLD on the
  generic anchored rows, DP-HMC on its anchored trajectory target and DP-Fast MH on its anchored rows-at-bound
  target (at --anchored-epsilon, with --anchored-runs). The whole-run targets of an anchored run and of
  dp-laplace run with the correct implementation only: no fault is claimed to show on them (not measured).

The correct cases also run the DP-HMC trajectory and DP-Fast MH at-bound targets at --anchored-epsilon and the
whole-run targets of an anchored run and of dp-laplace.

A correct target must stay below its claim; a planted fault should exceed it. Nothing here is hard-coded:
the table is what this run measured.

Run: .venv/bin/python benchmarks/bench_audit.py [--runs 20000] [--mechanism-runs 100000] [--sg-runs 100000]
     [--run-runs 1000] [--nan-run-runs 400] [--anchored-runs 100000] [--anchored-epsilon 3.0] [--epsilon 1.0]
     [--mechanism-epsilon 2.0] [--seed 1] [--quick] [--only CASE ...]
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from stan_dp.audit import audit  # noqa: E402
from stan_dp.samplers import ALGORITHMS  # noqa: E402

FAST_MH = [a for a in ALGORITHMS if a.startswith("dp-fast-mh")]
SG = ["dp-sgld", "dp-sghmc", "dp-sgnht"]
OPS_RUNS = ["ops", "hybrid", "dp-sgld warm_start=ops"]
WHOLE_RUNS = ["dp-sgld anchor=dp-gd", "dp-laplace"]
#: kernels whose clips show on the generic anchored target (penalty MH's ratio test, DP-SGLD's difference-clipped
#: sum; the other SG kernels release the same sum through a momentum); DP-HMC and DP-Fast MH have their own
#: anchored targets (CLIP_SHOWS)
RATIO_AND_SG = ["penalty", "dp-sgld"]
#: the anchored targets on which DP-HMC's and DP-Fast MH's clips show in what they release
CLIP_SHOWS = ["iteration:dp-hmc anchored trajectory"] + [f"iteration:{a} anchored at bound" for a in FAST_MH]


def timed(**kwargs):
    start = time.perf_counter()
    report = audit(show_progress=False, **kwargs)
    return report, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000, help="runs per data set, kernel iterations")
    parser.add_argument("--mechanism-runs", type=int, default=100_000, help="runs per data set, mechanisms")
    parser.add_argument("--sg-runs", type=int, default=100_000,
                        help="runs per data set, SG iterations with the sg-sensitivity and released-batch-size faults")
    parser.add_argument("--run-runs", type=int, default=1000, help="runs per data set, whole runs")
    parser.add_argument("--nan-run-runs", type=int, default=400, help="runs per data set, NaN-canary OPS runs")
    parser.add_argument("--anchored-runs", type=int, default=100_000,
                        help="runs per data set, the anchored DP-HMC trajectory and DP-Fast MH at-bound targets")
    parser.add_argument("--anchored-epsilon", type=float, default=3.0,
                        help="budget of the anchored DP-HMC trajectory and DP-Fast MH at-bound targets")
    parser.add_argument("--only", nargs="*", default=None, help="run only these cases (e.g. double-clip correct)")
    parser.add_argument("--epsilon", type=float, default=1.0, help="budget of iteration and run targets")
    parser.add_argument("--mechanism-epsilon", type=float, default=2.0, help="budget of mechanism targets")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="a tenth of every run count")
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    runs, mruns, rruns = args.runs // scale, args.mechanism_runs // scale, max(args.run_runs // scale, 50)
    sg_runs, nan_runs = args.sg_runs // scale, max(args.nan_run_runs // scale, 50)
    aruns = args.anchored_runs // scale
    sub = [f"iteration:{a} subsampled" for a in SG]
    pff = {a: {"row_bound": 1.0, "privacy_for_free": True} for a in FAST_MH}

    cases = [
        ("correct", dict(targets=["mechanisms"], epsilon=args.mechanism_epsilon, runs=mruns)),
        ("correct", dict(targets=["iteration"], epsilon=args.epsilon, runs=runs)),
        ("correct", dict(targets=["run"], algorithms=list(ALGORITHMS), epsilon=args.epsilon, run_runs=rruns)),
        ("correct", dict(targets=["run"], algorithms=OPS_RUNS, epsilon=args.epsilon, run_runs=nan_runs)),
        ("correct", dict(targets=["iteration"], algorithms=SG, epsilon=args.mechanism_epsilon, runs=sg_runs,
                         only=[f"iteration:{a}" for a in SG] + sub)),
        ("half-noise", dict(targets=["mechanisms"], epsilon=args.mechanism_epsilon, runs=mruns, fault="half-noise")),
        ("half-noise", dict(targets=["iteration"], epsilon=args.epsilon, runs=runs, fault="half-noise")),
        ("reused-noise", dict(targets=["mechanisms"], epsilon=args.mechanism_epsilon, runs=mruns,
                              fault="reused-noise")),
        ("sg-sensitivity", dict(targets=["iteration"], algorithms=SG, epsilon=args.mechanism_epsilon, runs=sg_runs,
                                only=[f"iteration:{a}" for a in SG], fault="sg-sensitivity")),
        ("released-batch-size", dict(targets=["iteration"], algorithms=SG, epsilon=args.mechanism_epsilon,
                                     runs=sg_runs, only=sub, fault="released-batch-size")),
        ("nan-row-ops", dict(targets=["run"], algorithms=OPS_RUNS, epsilon=args.epsilon, run_runs=nan_runs,
                             fault="nan-row-ops")),
        ("privacy-for-free", dict(targets=["iteration"], algorithms=FAST_MH, epsilon=args.epsilon, runs=runs,
                                  options=pff)),
        ("privacy-for-free", dict(targets=["run"], algorithms=FAST_MH, epsilon=args.epsilon, run_runs=rruns,
                                  options=pff, run_iterations=(0, 2), run_step_size=0.15)),
        ("correct", dict(targets=["iteration"], algorithms=["dp-hmc", *FAST_MH], epsilon=args.anchored_epsilon,
                         runs=aruns, only=CLIP_SHOWS)),
        ("correct", dict(targets=["run"], algorithms=WHOLE_RUNS, epsilon=args.epsilon, run_runs=rruns)),
        ("double-clip", dict(targets=["iteration"], algorithms=RATIO_AND_SG, epsilon=args.mechanism_epsilon,
                             runs=sg_runs, only=[f"iteration:{a} anchored" for a in RATIO_AND_SG],
                             fault="double-clip")),
        ("double-clip", dict(targets=["iteration"], algorithms=["dp-hmc", *FAST_MH], epsilon=args.anchored_epsilon,
                             runs=aruns, only=CLIP_SHOWS, fault="double-clip")),
    ]
    if args.only:
        cases = [c for c in cases if c[0] in set(args.only)]
    print(f"stan-dp audit benchmark: seed {args.seed}, delta 1e-5, confidence 0.95; load average "
          f"{os.getloadavg()[0]:.2f}")
    head = (f"{'case':<19} {'target':<32} {'claim':>7} {'lower bound':>11} {'ratio':>6} {'conf':>5} {'runs':>7} "
            f"{'wall s':>7}  statistic")
    print(head)
    print("-" * len(head))
    total = 0.0
    for case, kwargs in cases:
        report, _ = timed(seed=args.seed, **kwargs)
        for r in report.results:
            total += r.seconds
            flag = " EXCEEDS" if r.exceeds_claim else ""
            print(f"{case:<19} {r.target:<32} {r.claimed_epsilon:>7.3g} {r.epsilon_lower_bound:>11.3f} "
                  f"{r.epsilon_lower_bound / r.claimed_epsilon:>6.2f} {r.confidence:>5.2f} {r.runs:>7d} "
                  f"{r.seconds:>7.1f}  {r.statistic[:60]}{flag}", flush=True)
    print(f"total wall seconds of the targets: {total:.0f}; load average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
