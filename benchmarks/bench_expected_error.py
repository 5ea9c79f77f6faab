"""The expected largest error (``attrs["expected_error_sd"]``) of the release-once methods on the calibration cases,
computed from public inputs only (N, the declared bounds, the budget): the figure a run states before it starts.

It samples nothing, so it takes seconds; `bench_calibration.py` measures the error itself on the same cells (its
"expected" column is this number as the runs recorded it). Use it to see the forecast of a cell without rerunning
the battery, e.g. after a change to the forecast's design assumption.

Usage:
    python benchmarks/bench_expected_error.py [--cases ...] [--epsilons 1 3 10]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench_calibration import CASES, DELTA  # noqa: E402

from stan_dp.methods.dp_glm.glm_release import plan_glm  # noqa: E402
from stan_dp.methods.dp_ssp.ssp import plan_ssp  # noqa: E402
from stan_dp.tools.utility import options_for  # noqa: E402


def expected_error(case: str, epsilon: float) -> tuple[str, float]:
    """The method auto would release once for ``case`` and the error it states in advance (posterior sds)."""
    build, bounds, _ = CASES[case]
    model = build()
    linear = getattr(model, "linear_spec", None)
    if linear is not None:
        plan = plan_ssp(model.n_rows, model.dim, linear=linear, epsilon=epsilon, delta=DELTA,
                        **options_for("dp-ssp", bounds))
        return "dp-ssp", float(plan.floor.max_error)
    plan = plan_glm(model.n_rows, model.dim, glm=model.glm_spec, epsilon=epsilon, delta=DELTA,
                    **options_for("dp-glm", bounds))
    return "dp-glm", float(plan.price)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="*", default=list(CASES))
    ap.add_argument("--epsilons", nargs="*", type=float, default=[1.0, 3.0, 10.0])
    args = ap.parse_args()
    print(f"# expected largest error in posterior sds, delta {DELTA:g}, public inputs only")
    print("| case (N) | method | " + " | ".join(f"eps {e:g}" for e in args.epsilons) + " |")
    print("|---|---|" + "---|" * len(args.epsilons))
    for case in args.cases:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
        cells = [expected_error(case, e) for e in args.epsilons]
        n = CASES[case][0]().n_rows
        print(f"| {case} ({n}) | {cells[0][0]} | " + " | ".join(f"{v:.3g}" for _, v in cells) + " |", flush=True)


if __name__ == "__main__":
    main()
