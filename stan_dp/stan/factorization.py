"""The row contract's checks that need no compiler: ``ModelError`` and the factorization check (the per-row terms
sum to the full-data log density minus the prior at public test points). Used on the driver for all rows and by
each Ray actor on its shard (``stan_dp.stan.ray_rows``)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..user_warnings import warn

__all__ = ["FACTORIZATION_RTOL", "ModelError", "check_factorization"]

#: relative tolerance of the factorization check: sum_i l_i == lp_full - lp_prior
FACTORIZATION_RTOL = 1e-8


class ModelError(ValueError):
    """The Stan program does not meet the row contract (see the message for the fix)."""


def check_factorization(likelihood: Any, full: Any, prior: Any, *, points: int = 4, seed: int = 20261121) -> None:
    """Check sum_i l_i(theta) == lp_full(theta) - lp_prior(theta) at random unconstrained points.

    The points are drawn from a fixed public seed, independent of the data. Points where the prior or the full
    density is not finite are skipped. When the data-free prior is finite at no point (a fact of the program
    alone) a warning says that the check was not performed; when only the rows make the full density
    non-finite at every point (e.g. a row with an infinite covariate) the check is skipped SILENTLY: a warning
    there would tell a data set with such a row from its neighbour. (The mechanisms keep such rows inside their
    clip bounds either way.)
    """
    rng = np.random.default_rng(seed)
    checked, prior_finite = 0, False
    for _ in range(points * 5):
        if checked >= points:
            break
        theta = rng.uniform(-2, 2, size=likelihood.dim)
        try:
            lp_prior = prior.log_density(theta, propto=False, jacobian=True)
        except RuntimeError:
            continue
        if not np.isfinite(lp_prior):
            continue
        prior_finite = True
        try:
            lp_full = full.log_density(theta, propto=False, jacobian=True)
        except RuntimeError:
            continue
        if not np.isfinite(lp_full):
            continue
        with np.errstate(all="ignore"):  # private per-row values: no warning may depend on them
            row_sum = float(np.sum(likelihood.row_log_lik(theta)))
            expected = lp_full - lp_prior
            agree = np.isclose(row_sum, expected, rtol=FACTORIZATION_RTOL,
                               atol=FACTORIZATION_RTOL * max(1.0, abs(lp_full)))
        if not agree:
            raise ModelError(
                "The likelihood does not factorise over rows: at a public test point the per-row log-likelihoods "
                "do not sum to the full-data log density minus the prior (they differ beyond the relative tolerance "
                f"{FACTORIZATION_RTOL:g}; the values are not shown: they are functions of the private rows). Likely causes: "
                "transformed data that pools rows (e.g. standardising a column with its mean or sd: this is also a "
                "privacy leak; use public constants instead), a row variable that is not declared with leading size "
                f"{likelihood.split.count_name} (list it in row_variables=[...], --row-variables on the command line), or a likelihood term that is not a "
                "sum over rows."
            )
        checked += 1
    if not prior_finite:
        warn("The factorization check found no test point where the data-free prior density is finite; it was not "
             "performed.", RuntimeWarning)
