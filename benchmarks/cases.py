"""Benchmark cases on NumPy reference models: real posteriordb data (shipped in the repository's
data/posteriordb, source and licence there) and simulated data, each with public clip bounds chosen from the model and the public
covariate scaling, never from the rows. Shared by bench_high_epsilon.py and bench_utility.py.

Each case is (name, model factory, options): ``options`` are the public clip bounds (every algorithm's option
names given together; ``auto`` and each algorithm keep the ones they use).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from stan_dp.models.reference_models import (BananaModel, GaussianMeanModel, LinearRegressionModel,
                                      LogisticRegressionModel, PoissonRegressionModel)

DATA = Path(__file__).resolve().parent.parent / "data" / "posteriordb"


@dataclass
class Case:
    name: str
    build: Callable[[], Any]
    bounds: dict[str, float] = field(default_factory=dict)
    real: bool = False


def _json(name: str) -> dict:
    with open(DATA / f"{name}.json") as fh:
        return json.load(fh)


def wells():
    """posteriordb wells: switched ~ logit(1, dist/100, arsenic, educ/4, assoc); public scalings."""
    d = _json("wells_data")
    X = np.column_stack([np.asarray(d["dist"]) / 100, d["arsenic"], np.asarray(d["educ"]) / 4, d["assoc"]])
    return LogisticRegressionModel(X, np.asarray(d["switched"]), prior_sd=2.5)


def nes_logit():
    """posteriordb nes_logit: vote ~ logit(alpha + beta income); income is on a 1-5 scale."""
    d = _json("nes_logit_data")
    return LogisticRegressionModel(np.asarray(d["income"], dtype=float)[:, None], np.asarray(d["vote"]),
                                   prior_sd=2.5)


def earnings():
    """posteriordb earnings: log(earn) - 10 ~ N(a + b (height - 66) / 4, sigma) (public centring from domain
    knowledge: US annual earnings of the order of exp(10) = 22,000 dollars, and a height scale in inches; rows
    with earn = 0, whose log is -inf, are dropped)."""
    d = _json("earnings")
    earn = np.asarray(d["earn"], dtype=float)
    keep = earn > 0
    height = (np.asarray(d["height"], dtype=float)[keep] - 66.0) / 4.0
    return LinearRegressionModel(height[:, None], np.log(earn[keep]) - 10.0, prior_sd=10.0, sigma_prior_sd=10.0)


def kidiq():
    """posteriordb kidiq: (kid_score - 100) / 15 ~ N(a + b (mom_iq - 100) / 15, sigma) (public rescaling: both
    are test scores normed to mean 100 and sd 15)."""
    d = _json("kidiq")
    x = (np.asarray(d["mom_iq"], dtype=float) - 100.0) / 15.0
    y = (np.asarray(d["kid_score"], dtype=float) - 100.0) / 15.0
    return LinearRegressionModel(x[:, None], y, prior_sd=10.0, sigma_prior_sd=10.0)


def sblri():
    """posteriordb sblri: y / 100 ~ N(alpha + (X / 100) beta, sigma) (public rescaling of the +-300 scales; the
    NumPy model adds an intercept alpha, which posteriordb's program does not have; both fits are compared
    with this model's own reference)."""
    d = _json("sblri")
    return LinearRegressionModel(np.asarray(d["X"], dtype=float) / 100.0, np.asarray(d["y"], dtype=float) / 100.0,
                                 prior_sd=10.0, sigma_prior_sd=10.0)


def logistic_readme(n: int):
    """The README logistic model: alpha = -0.5, beta = (1, -1, 0.5), x ~ N(0, I), prior sd 2.5."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 3))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(-0.5 + x @ np.array([1.0, -1.0, 0.5]))))).astype(int)
    return LogisticRegressionModel(x, y, prior_sd=2.5)


HIGH_EPSILON_CASES = [
    Case("wells", wells, {"ratio_clip": 12.0, "grad_clip": 12.0, "row_bound": 12.0}, real=True),
    Case("linreg-5k", lambda: LinearRegressionModel.simulate(5000, 3, seed=1),
         {"ratio_clip": 25.0, "grad_clip": 40.0, "row_bound": 25.0}),
    Case("linreg-10k", lambda: LinearRegressionModel.simulate(10000, 3, seed=2),
         {"ratio_clip": 25.0, "grad_clip": 40.0, "row_bound": 25.0}),
    Case("logistic-10k", lambda: logistic_readme(10_000), {"ratio_clip": 5.0, "grad_clip": 5.0, "row_bound": 5.0}),
]

UTILITY_CASES = [
    HIGH_EPSILON_CASES[0],
    Case("nes_logit", nes_logit, {"ratio_clip": 6.0, "grad_clip": 6.0, "row_bound": 6.0}, real=True),
    Case("earnings", earnings, {"ratio_clip": 25.0, "grad_clip": 25.0, "row_bound": 25.0}, real=True),
    Case("kidiq", kidiq, {"ratio_clip": 25.0, "grad_clip": 25.0, "row_bound": 25.0}, real=True),
    Case("sblri", sblri, {"ratio_clip": 25.0, "grad_clip": 25.0, "row_bound": 25.0}, real=True),
    HIGH_EPSILON_CASES[3],
    Case("poisson-10k", lambda: PoissonRegressionModel.simulate(10_000, 2, seed=3),
         {"ratio_clip": 20.0, "grad_clip": 20.0, "row_bound": 20.0}),
    Case("gauss10-100k", lambda: GaussianMeanModel.simulate(100_000, 10, seed=4),
         {"ratio_clip": 10.0, "grad_clip": 10.0, "row_bound": 10.0}),
    Case("banana-100k", lambda: BananaModel.simulate(100_000, seed=5),
         {"ratio_clip": 10.0, "grad_clip": 10.0, "row_bound": 10.0}),
]
LARGE_CASES = [Case("logistic-100k", lambda: logistic_readme(100_000),
                    {"ratio_clip": 5.0, "grad_clip": 5.0, "row_bound": 5.0})]
