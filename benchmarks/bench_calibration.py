"""Calibration as a routine measurement: accuracy and coverage of private runs against the non-private
reference, over many noise seeds, on the real battery and two simulated cases, with the floor beside them.

For every cell (case, epsilon, algorithm variant) and noise seed s = 0 .. seeds-1: one private run through
``sample_private`` (the product's own path) with the case's public bounds, compared with the case's non-private
reference posterior (NumPy model of the same rows). Printed per cell, over the seeds:

* ``err``: median over seeds of the max over parameters of |private mean - reference mean| / reference sd;
* ``sd ratio``: median over seeds of the median over parameters of private sd / reference sd;
* ``coverage``: per parameter, the fraction of seeds whose central 90 % interval of the released draws holds the
  reference mean (the worst parameter is printed; an honest wide interval covers, a narrow wrong one does not);
* ``chain R-hat``: median over seeds of the fit's own verdict on its chains (nan for dp-laplace: i.i.d. draws);
* ``floor``: the yardstick the package never sees, computed here from the rows: the median over 200 noise draws
  of the max error, in reference sds, of the best known one-shot release at the same bounds and budget.
  Logistic: one Gaussian release of the clipped gradient sum at the true mode (replace-one sensitivity 2 L, noise
  from the Gaussian-DP mu of (epsilon, delta)), mapped through the exact inverse curvature (the error is
  Sigma xi, Sigma the reference covariance). Linear: the package's own price in advance for dp-ssp
  (``stan_dp.methods.dp_ssp.ssp.ssp_floor``, from N, the bounds and the budget).

Cases (public bounds as a user would give them): wells (3,020 rows, ||(1, x)|| <= 12), nes_logit (1,179,
||(1, x)|| <= 5.1), earnings (1,192; x in [-3.5, 3.5], y in [-5.4, 3.8]), kidiq (434; x, y in [-4, 4]),
sim_logistic (2,000 rows, 3 covariates, ||(1, x)|| <= 4) and sim_linear (1,000 rows, x, y in [-4, 4]).

    python benchmarks/bench_calibration.py                                   # everything: slow (hours)
    python benchmarks/bench_calibration.py --cases nes_logit --epsilons 3 --variants dp-laplace auto --seeds 20
    python benchmarks/bench_calibration.py --out benchmarks/results/calibration.md   # appends each cell

Variants: any algorithm name of the package, with the suffixes of ``stan_dp.tools.utility.split_variant``
("+adaptive": clip="adaptive").
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import earnings, kidiq, nes_logit, wells  # noqa: E402
from rdata_cases import RDATA_CASES  # noqa: E402
from provenance import header_for  # noqa: E402

from stan_dp.models.numpy_reference import reference_draws  # noqa: E402
from stan_dp.models.reference_models import LinearRegressionModel, LogisticRegressionModel  # noqa: E402
from stan_dp.privacy.gaussian import gaussian_mu  # noqa: E402
from stan_dp.privacy.moments import box_centre_half_width, entries_to_matrix, moment_entries  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402
from stan_dp.run.plan import PublicFacts, plan_run  # noqa: E402
from stan_dp.tools.utility import options_for, released_matrix, split_variant  # noqa: E402

DELTA = 1e-5


def sim_logistic():
    """2,000 rows, 3 covariates uniform in [-1.2, 1.2]^3 (so ||(1, x)|| <= 2.3 < 4), coefficients (0.3, 1, -0.5,
    0.8), fixed seed: the simulating values are not used, only the rows."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-1.2, 1.2, size=(2000, 3))
    p = 1.0 / (1.0 + np.exp(-(0.3 + x @ np.array([1.0, -0.5, 0.8]))))
    return LogisticRegressionModel(x, (rng.uniform(size=2000) < p).astype(int), prior_sd=2.5)


def sim_linear():
    """1,000 rows, x ~ N(0, 1) clipped to [-4, 4], y = 0.5 + 0.7 x + N(0, 1) clipped to [-4, 4], fixed seed."""
    rng = np.random.default_rng(12)
    x = np.clip(rng.standard_normal(1000), -4, 4)
    y = np.clip(0.5 + 0.7 * x + rng.standard_normal(1000), -4, 4)
    return LinearRegressionModel(x[:, None], y, prior_sd=10.0, sigma_prior_sd=10.0)


#: wells and nes_logit: each covariate's public box (from what the variables mean: distance up to 350 m, arsenic up
#: to 10 times the standard, education up to 18 years, an association indicator; income on a 1-5 scale)
WELLS_BOX = [(0.0, 3.5), (0.0, 10.0), (0.0, 4.5), (0.0, 1.0)]
NES_BOX = [(1.0, 5.0)]

#: name -> (builder, public bounds as run options, the gradient bound L of the kernels' one-gradient floor or None)
CASES: dict[str, tuple[Any, dict, float | None]] = {
    "wells": (wells, {"grad_clip": 12.0, "x_bounds": WELLS_BOX}, 12.0),
    "nes_logit": (nes_logit, {"grad_clip": 5.1, "x_bounds": NES_BOX}, 5.1),
    "earnings": (earnings, {"x_bounds": (-3.5, 3.5), "y_bounds": (-5.4, 3.8)}, None),
    "kidiq": (kidiq, {"x_bounds": (-4.0, 4.0), "y_bounds": (-4.0, 4.0)}, None),
    "sim_logistic": (sim_logistic, {"grad_clip": 4.0, "x_bounds": (-1.2, 1.2)}, 4.0),
    "sim_linear": (sim_linear, {"x_bounds": (-4.0, 4.0), "y_bounds": (-4.0, 4.0)}, None),
    **{name: (build, bounds, None) for name, (build, bounds) in RDATA_CASES.items()},
}


def _family(model) -> str:
    return "linear" if isinstance(model, LinearRegressionModel) else getattr(model, "family", "logistic")


def linear_yardstick(model, bounds: dict, epsilon: float, ref_sd: np.ndarray, draws: int = 200) -> float:
    """The yardstick of a linear case, from the rows: dp-ssp's release decoded by least squares at the rows' exact
    moments, to first order in the release noise (a finite-difference Jacobian of (a, b, sigma) in the entries,
    times noise of the plan's per-entry sds), as the median over noise draws of the largest error in reference
    sds."""
    plan = plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=epsilon, delta=DELTA, chains=4,
                    iter_warmup=10, iter_sampling=10, facts=PublicFacts(linear=model.linear_spec), **bounds)
    centre, _ = box_centre_half_width(plan.lower, plan.upper)
    z = np.clip(np.column_stack([model.X, model.y]), plan.lower, plan.upper) - centre
    exact = moment_entries(z).sum(axis=0)
    k = model.n_features

    def decode(entries: np.ndarray) -> np.ndarray:
        m = entries_to_matrix(entries, model.n_rows)
        c = np.linalg.solve(m[:k + 1, :k + 1], m[:k + 1, k + 1])
        rss = m[k + 1, k + 1] - m[:k + 1, k + 1] @ c
        b = c[1:]
        return np.concatenate([[c[0] - b @ centre[:k] + centre[k]], b, [np.sqrt(rss / (model.n_rows - k - 1))]])

    base = decode(exact)
    steps = 1e-4 * np.maximum(np.abs(exact), 1.0)
    jac = np.column_stack([(decode(exact + np.eye(exact.size)[j] * steps[j]) - base) / steps[j]
                           for j in range(exact.size)])
    noise = np.random.default_rng(0).standard_normal((draws, exact.size)) * plan.entry_noise_sds
    return float(np.median(np.max(np.abs(noise @ jac.T) / ref_sd, axis=1)))


def glm_floor(model, bounds: dict, epsilon: float, ref: np.ndarray, draws: int = 200) -> float:
    """The yardstick of a logistic or Poisson case, from the rows: ONE release of the score at the true mode with
    the whole budget, in the release's coordinates (covariates mapped to [-1, 1] by their public boxes, noise sd
    2 a B / mu), through the exact curvature (the reference covariance), in reference sds: the median over noise
    draws of the largest error."""
    plan = plan_run(model.n_rows, model.dim, algorithm="dp-glm", epsilon=epsilon, delta=DELTA, chains=4,
                    iter_warmup=10, iter_sampling=10, facts=PublicFacts(glm=model.glm_spec),
                    **{k: v for k, v in bounds.items() if k in ("x_bounds", "y_bounds")})
    cov = np.cov(ref, rowvar=False)
    noise_sd = plan.box.score_sensitivity / gaussian_mu(epsilon, DELTA)
    xi = np.random.default_rng(0).standard_normal((draws, model.dim)) * noise_sd
    errors = xi @ np.linalg.inv(plan.box.to_user()) @ cov  # user-scale gradient noise A^-T xi through Sigma
    return float(np.median(np.max(np.abs(errors) / np.sqrt(np.diag(cov)), axis=1)))


def floor_error(model, bounds: dict, grad_bound: float | None, epsilon: float, ref: np.ndarray) -> float:
    """The yardstick of the module docstring (max error in reference sds of the best one-shot release)."""
    family = _family(model)
    if family == "linear":
        return linear_yardstick(model, bounds, epsilon, ref.std(0))
    return glm_floor(model, bounds, epsilon, ref)


def gradient_floor(model, grad_bound: float | None, epsilon: float, ref: np.ndarray) -> float:
    """The kernels' yardstick: one clipped gradient sum in the program's own coordinates (bound L), or NaN."""
    if grad_bound is None:
        return float("nan")
    sigma_cov = np.cov(ref, rowvar=False)
    sd = np.sqrt(np.diag(sigma_cov))
    noise_sd = 2.0 * grad_bound / gaussian_mu(epsilon, DELTA)
    xi = np.random.default_rng(0).standard_normal((200, model.dim)) * noise_sd
    return float(np.median(np.max(np.abs(xi @ sigma_cov) / sd, axis=1)))


def run_cell(case: str, epsilon: float, variant: str, seeds: int, extra_options: dict | None = None) -> dict:
    build, bounds, grad_bound = CASES[case]
    model = build()
    ref = released_matrix(model, reference_draws(model, chains=4, draws=2000, seed=0)).reshape(-1, model.dim)
    ref_mean, ref_sd = ref.mean(0), ref.std(0)
    algorithm, extra = split_variant(variant)
    options = {**options_for(algorithm, bounds), **extra, **(extra_options or {})}
    errs, ratios, covered, rhats, chosen, walls, released, expected = [], [], [], [], set(), [], [], []
    for seed in range(seeds):
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(model, algorithm=algorithm, epsilon=epsilon, delta=DELTA, seed=1000 + seed,
                                 show_progress=False, **options)
        walls.append(time.perf_counter() - started)
        x = released_matrix(model, fit).reshape(-1, model.dim)
        finite = bool(np.all(np.isfinite(x)))
        errs.append(float(np.max(np.abs(x.mean(0) - ref_mean) / ref_sd)) if finite else float("inf"))
        ratios.append(float(np.median(x.std(0) / ref_sd)) if finite else float("inf"))
        lo, hi = np.quantile(x, [0.05, 0.95], axis=0) if finite else (np.full(model.dim, np.nan),) * 2
        covered.append((lo <= ref_mean) & (ref_mean <= hi))
        verdict = json.loads(str(fit.attrs.get("convergence", "{}")))
        rhats.append(float(verdict.get("max_rhat", float("nan"))))
        released.append((verdict.get("max_rhat", float("nan")), verdict.get("min_ess_bulk", float("nan")),
                         verdict.get("min_ess_tail", float("nan"))))
        expected.append(float(fit.attrs.get("expected_error_sd", float("nan"))))
        chosen.add(str(fit.attrs.get("auto_choice", fit.attrs.get("algorithm", algorithm))))
    coverage = np.mean(covered, axis=0)
    released_arr = np.array(released, dtype=float)
    return {"case": case, "N": model.n_rows, "epsilon": epsilon, "variant": variant, "seeds": seeds,
            "chosen": "/".join(sorted(chosen)), "err": float(np.median(errs)), "sd_ratio": float(np.median(ratios)),
            "coverage": coverage.tolist(), "min_coverage": float(coverage.min()),
            "chain_rhat": float(np.nanmedian(rhats)) if np.any(np.isfinite(rhats)) else float("nan"),
            "worst_rhat": float(np.nanmax(released_arr[:, 0])) if np.any(np.isfinite(released_arr[:, 0])) else float("nan"),
            "min_ess": float(np.nanmin(released_arr[:, 1:])) if np.any(np.isfinite(released_arr[:, 1:])) else float("nan"),
            "expected": float(np.nanmedian(expected)) if np.any(np.isfinite(expected)) else float("nan"),
            "floor": floor_error(model, bounds, grad_bound, epsilon, ref),
            "gradient_floor": gradient_floor(model, grad_bound, epsilon, ref),
            "nonfinite": int(sum(not np.isfinite(e) for e in errs)), "wall_s": float(np.median(walls))}


HEADER = ["| case (N) | eps | variant (ran) | err (sd) | floor (sd) | err / floor | expected (sd) | err / expected | "
          "sd ratio | min coverage (per parameter) | R-hat median / worst | min bulk-tail ESS | s a run |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def row(r: dict) -> str:
    cover = " / ".join(f"{c:.2f}" for c in r["coverage"])
    bad = f" ({r['nonfinite']} non-finite)" if r["nonfinite"] else ""
    return (f"| {r['case']} ({r['N']}) | {r['epsilon']:g} | {r['variant']} ({r['chosen']}) | {r['err']:.2f}{bad} | "
            f"{r['floor']:.2f} | {r['err'] / r['floor']:.2f} | {r['expected']:.2f} | {r['err'] / r['expected']:.2f} | "
            f"{r['sd_ratio']:.2f} | {r['min_coverage']:.2f} ({cover}) | {r['chain_rhat']:.3f} / {r['worst_rhat']:.3f} | "
            f"{r['min_ess']:.0f} | {r['wall_s']:.1f} |")


def _value(text: str):
    """A command-line option value: int, float or the word itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 3.0, 10.0])
    ap.add_argument("--variants", nargs="+", default=["auto"])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", default=None, help="append the table (and each cell as it completes) to this file")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                    help="a run option for every variant (a number or a word), e.g. --option eigen_floor=10")
    args = ap.parse_args()
    extra_options = {k: _value(v) for k, v in (o.split("=", 1) for o in args.option)}
    title = (f"# Calibration: {args.seeds} noise seeds a cell, delta {DELTA:g}, replace-one; 90 % intervals; "
             "reference = non-private posterior of the same rows"
             + (f"; options {extra_options}" if extra_options else ""))
    print("\n".join([title, *HEADER]), flush=True)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + header_for(args.out) + "\n".join([title, *HEADER]) + "\n")
    for case in args.cases:
        for eps in args.epsilons:
            for variant in args.variants:
                line = row(run_cell(case, eps, variant, args.seeds, extra_options))
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a") as fh:
                        fh.write(line + "\n")


if __name__ == "__main__":
    main()
