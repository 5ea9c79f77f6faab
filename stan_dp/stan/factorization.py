"""The row contract's checks that need no compiler: ``ModelError`` and the factorization check (the per-row terms
sum to the full-data log density minus the prior at public test points). Used on the driver for a bounded range
of the rows (``check_range``) and by each Ray actor on its shard (``stan_dp.stan.ray_rows``)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..likelihood import RowLikelihood
from ..user_warnings import warn

__all__ = ["CHECK_ROWS", "FACTORIZATION_RTOL", "ModelError", "check_factorization", "check_range"]

#: relative tolerance of the factorization check: sum_i l_i == lp_full - lp_prior
FACTORIZATION_RTOL = 1e-8

#: the most rows the factorization check at load evaluates the user's program on (``check_range``)
CHECK_ROWS = 8192


class ModelError(ValueError):
    """The Stan program does not meet the row contract (see the message for the fix)."""


def check_range(n_rows: int, boundaries: Sequence[int] = (), size: int | None = None) -> range:
    """The rows the factorization check at load runs on: all of them when there are at most ``size`` (default
    ``CHECK_ROWS``), else ``size`` contiguous rows that straddle the first of the engine's shard ``boundaries``
    (the first row of every shard but the first; none for the per-row engine, whose range then starts at row 0).

    Why a bounded range suffices: the check tests the program's STRUCTURE, that its log density is the prior
    plus a sum of one term per row, each term reading only its own row. Transformed data that pool rows (a
    column's mean or sd), a term that is not a sum over rows, a row variable missing from the split and a
    wrong rewrite of the shard program all break that structure on any few rows as they do on all rows, and
    the user's program is then instantiated on ``size`` rows instead of all N (a copy of the rows less in
    memory). The range crosses a shard boundary, so it is never exactly one shard: rows pooled within a shard
    (a wrong shard rewrite) differ from rows pooled over the range. What it cannot catch: a program whose
    terms break the structure only on rows outside the range (a branch on the row index beyond it, say), or
    values on which the engines disagree that occur only there. The range is a function of the row count, the
    shard layout and ``size``, never of row values, and the check releases nothing (it raises or not).
    """
    n_rows, size = int(n_rows), max(2, int(CHECK_ROWS if size is None else size))
    if n_rows <= size:
        return range(n_rows)
    inner = [int(b) for b in boundaries if 0 < int(b) < n_rows]
    first = 0 if not inner else min(max(inner[0] - size // 2, 0), n_rows - size)
    return range(first, first + size)


def check_factorization(likelihood: RowLikelihood, full: Any, prior: Any, *, points: int = 4, seed: int = 20261121,
                        rows: range | None = None) -> None:
    """Check sum_i l_i(theta) == lp_full(theta) - lp_prior(theta) at random unconstrained points.

    ``rows``: the contiguous rows ``full`` was built on (the sum then runs over them only; ``check_range``);
    None: ``full`` holds all rows.

    The points are drawn from a fixed public seed, independent of the data. Points where the prior or the full
    density is not finite are skipped. When the data-free prior is finite at no point (a fact of the program
    alone) a warning says that the check was not performed; when only the rows make the full density
    non-finite at every point (e.g. a row with an infinite covariate) the check is skipped SILENTLY: a warning
    there would tell a data set with such a row from its neighbour. (The mechanisms keep such rows inside their
    clip bounds either way.)
    """
    index = None if rows is None else np.arange(rows.start, rows.stop, dtype=np.int64)
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
            row_sum = float(np.sum(likelihood.row_log_lik(theta, index)))
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
