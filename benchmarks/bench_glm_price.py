"""The logistic price in advance (``stan_dp.methods.dp_glm.glm_price``) beside the measured floor, on wells and nes_logit.

Three figures per case and epsilon (delta 1e-5), in reference sds (the largest error over the coefficients):

* ``public only``: what ``auto``'s reason states from N, the number of coefficients, L and the budget alone
  (curvature bound K = L^2 / 4 per row: a lower bound);
* ``public data``: what ``stan_dp.advise`` states when the public data set is these rows (the Laplace covariance
  of their posterior);
* ``yardstick``: ``bench_calibration.floor_error`` (one gradient release at the true mode through the reference
  posterior's covariance, 200 noise draws), computed from the rows.

    python benchmarks/bench_glm_price.py [EPSILON ...]     (default: 1 3 10)
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_calibration import floor_error  # noqa: E402
from cases import nes_logit, wells  # noqa: E402
from provenance import markdown_header  # noqa: E402

from stan_dp.models.numpy_reference import laplace, reference_draws  # noqa: E402
from stan_dp.methods.dp_glm.glm_price import glm_floor  # noqa: E402
from stan_dp.tools.utility import released_matrix  # noqa: E402

DELTA = 1e-5
#: case -> (builder, the public bound on ||(1, x)|| the battery uses)
CASES = {"wells": (wells, 12.0), "nes_logit": (nes_logit, 5.1)}


def main() -> None:
    epsilons = [float(e) for e in sys.argv[1:]] or [1.0, 3.0, 10.0]  # python benchmarks/bench_glm_price.py [EPS ...]
    print(markdown_header(), end="")  # command, commit, machine: for a results file made from this output
    print("| case (N, d) | eps | public only (>=) | public data | yardstick | width ratio (public data) |")
    print("|---|---|---|---|---|---|")
    for name, (build, bound) in CASES.items():
        model = build()
        _, cov = laplace(model)
        ref = released_matrix(model, reference_draws(model, chains=4, draws=2000, seed=0)).reshape(-1, model.dim)
        for eps in epsilons:
            public = glm_floor(model.n_rows, model.dim, bound, epsilon=eps, delta=DELTA)
            data = glm_floor(model.n_rows, model.dim, bound, epsilon=eps, delta=DELTA, covariance=cov)
            yard = floor_error(model, {"grad_clip": bound}, bound, eps, ref)
            print(f"| {name} ({model.n_rows}, {model.dim}) | {eps:g} | {public.max_error:.2f} | {data.max_error:.2f} "
                  f"| {yard:.2f} | {data.width_ratio:.2f} |")


if __name__ == "__main__":
    main()
