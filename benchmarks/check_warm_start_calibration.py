"""Does every kernel calibrate after every warm start? (data-free, accounting only)

For each kernel x warm_start in {"dp-gd", "ops"} x N in {500, 2000, 10000} x epsilon in {1, 10}, delta 1e-5,
4 chains x (1000 warmup + 1000 sampling), default options, public bounds as in benchmarks/cases.py for the
README logistic model (grad_clip = ratio_clip = row_bound = 5; loglik_bounds = (-20, 0) for OPS), this builds
the phases exactly as ``sample_private`` does (``resolve_algorithm``, the kernel's accounting shape, the warm
start's prefix phase) and calibrates them. No data are read: calibration depends on public quantities only.
Printed per cell: ok / the error, the reported epsilon as a fraction of the budget, seconds.

    OPENBLAS_NUM_THREADS=1 python benchmarks/check_warm_start_calibration.py \
        [--quick] [--only WORD ...]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stan_dp.phases.calibration import calibrate  # noqa: E402
from stan_dp.run.plan import resolve_algorithm  # noqa: E402
from stan_dp.samplers import ALL_ALGORITHMS  # noqa: E402

DELTA = 1e-5
BOUNDS = {"grad_clip": 5.0, "ratio_clip": 5.0, "row_bound": 5.0}


def calibrate_cell(kernel: str, warm: str, n_rows: int, epsilon: float, chains: int, warmup: int,
                   sampling: int) -> float:
    """The epsilon reported for the calibrated run (raises what sample_private would raise)."""
    spec = resolve_algorithm(kernel, {}).spec
    options = {k: v for k, v in BOUNDS.items() if k in spec.names}
    if warm == "ops" or kernel == "ops":
        options["loglik_bounds"] = (-20.0, 0.0)
    if warm == "dp-gd" and "grad_clip" not in spec.names:
        options["warm_start_grad_clip"] = BOUNDS["grad_clip"]
    request = resolve_algorithm(kernel, {**options, "warm_start": warm})
    cls = request.kernel_cls
    full = spec.validate({k: v for k, v in request.options.items() if k in spec.names}, require=False)
    shape = cls.accounting_shape(full) if hasattr(cls, "accounting_shape") else {}
    run_warmup = 0 if getattr(cls, "internal_warmup", False) else warmup
    prefix = request.warm.prefix_phase(epsilon=epsilon, delta=DELTA, chains=chains, n_rows=n_rows)
    plan = calibrate(getattr(cls, "accounting_name", request.algorithm), epsilon=epsilon, delta=DELTA,
                     chains=chains, iterations=run_warmup + sampling, n_rows=n_rows, prefix_phases=(prefix,),
                     **shape)
    return plan.report().epsilon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 chains x (300 + 300)")
    ap.add_argument("--only", nargs="*", default=(), help="kernels whose name contains one of these words")
    args = ap.parse_args()
    chains, warmup, sampling = (2, 300, 300) if args.quick else (4, 1000, 1000)
    kernels = [k for k in ALL_ALGORITHMS if k != "ops" and (not args.only or any(w in k for w in args.only))]
    print(f"{chains} chains x ({warmup} + {sampling}), delta {DELTA}")
    print(f"{'kernel':16s} {'warm':6s} {'N':>6s} {'eps':>5s} {'result':8s} {'spent/eps':>10s} {'s':>6s}")
    failures = 0
    for kernel in kernels:
        for warm in ("dp-gd", "ops"):
            for n in (500, 2000, 10_000):
                for eps in (1.0, 10.0):
                    t0 = time.perf_counter()
                    try:
                        spent = calibrate_cell(kernel, warm, n, eps, chains, warmup, sampling)
                        result, frac = "ok", f"{spent / eps:.6f}"
                        if not 0.99 * eps <= spent <= eps:
                            result, failures = "OUTSIDE", failures + 1
                    except ValueError as exc:
                        result, frac, failures = "FAIL", str(exc)[:90], failures + 1
                    print(f"{kernel:16s} {warm:6s} {n:6d} {eps:5g} {result:8s} {frac:>10s} "
                          f"{time.perf_counter() - t0:6.1f}", flush=True)
    print(f"{failures} cell(s) failed")


if __name__ == "__main__":
    main()
