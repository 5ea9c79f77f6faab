"""Utility of a private fit against a reference posterior: the numbers the benchmarks and ``advise`` report.

``score_draws`` compares private draws with reference draws, both as arrays (chains, draws, k) of the same
released scalars: the largest |mean difference| in reference sds, the median sd ratio (private / reference),
the largest rank-normalised split R-hat of the private chains, and the MMD (``stan_dp.compare.mmd``) of the
standardised joint draws. ``released_matrix`` turns an ArviZ result or unconstrained draws into that array.

These functions read only the draws they are given. Scoring against a reference computed from private rows is
not private: the benchmarks and ``advise`` use simulated or public data only.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .compare import mmd

__all__ = ["released_matrix", "score_draws", "split_rhat"]


def released_matrix(likelihood: Any, source: Any) -> np.ndarray:
    """(chains, draws, k) array of the released scalars, flattened in ``param_shapes()`` order.

    source: unconstrained draws of shape (chains, draws, dim), or ArviZ output with a ``posterior`` group
        holding the likelihood's parameters.
    """
    shapes = likelihood.param_shapes()
    if isinstance(source, np.ndarray):
        chains, draws, _ = source.shape
        out = []
        for c in range(chains):
            rows = []
            for i in range(draws):
                values = likelihood.constrain(source[c, i])
                rows.append(np.concatenate([np.ravel(values[name]) for name in shapes]))
            out.append(rows)
        return np.asarray(out, dtype=float)
    post = source["posterior"] if not hasattr(source, "posterior") else source.posterior
    parts = []
    for name in shapes:
        arr = np.asarray(post[name].values if hasattr(post[name], "values") else post[name], dtype=float)
        parts.append(arr.reshape(arr.shape[0], arr.shape[1], -1))
    return np.concatenate(parts, axis=2)


def split_rhat(draws: np.ndarray) -> float:
    """Largest rank-normalised split R-hat (Vehtari et al. 2021) over the columns of (chains, draws, k)."""
    import arviz as az

    values = []
    for j in range(draws.shape[2]):
        col = draws[:, :, j]
        if np.ptp(col) == 0:
            values.append(float("inf"))
            continue
        values.append(float(az.rhat(col, method="rank")))
    return float(np.max(values))


def score_draws(fit: np.ndarray, reference: np.ndarray, *, seed: int = 0) -> dict[str, float]:
    """Error of ``fit`` against ``reference`` (both (chains, draws, k)).

    Returns ``max_mean_err_sd`` (max_j |mean_fit_j - mean_ref_j| / sd_ref_j), ``median_sd_ratio``
    (median_j sd_fit_j / sd_ref_j), ``rhat`` (max split R-hat of the fit, inf for a stuck coordinate) and
    ``mmd`` (of the joint draws standardised by the reference means and sds).
    """
    fit = np.asarray(fit, dtype=float)
    reference = np.asarray(reference, dtype=float)
    if fit.ndim != 3 or reference.ndim != 3 or fit.shape[2] != reference.shape[2]:
        raise ValueError(f"fit and reference must be (chains, draws, k) with equal k; got {fit.shape} and "
                         f"{reference.shape}.")
    f = fit.reshape(-1, fit.shape[2])
    r = reference.reshape(-1, reference.shape[2])
    ref_mean, ref_sd = r.mean(axis=0), r.std(axis=0, ddof=1)
    ref_sd = np.where(ref_sd > 0, ref_sd, 1.0)
    err = np.abs(f.mean(axis=0) - ref_mean) / ref_sd
    ratio = f.std(axis=0, ddof=1) / ref_sd
    finite = np.all(np.isfinite(f))
    return {
        "max_mean_err_sd": float(np.max(err)) if finite else float("inf"),
        "median_sd_ratio": float(np.median(ratio)) if finite else float("nan"),
        "rhat": split_rhat(fit) if finite and fit.shape[1] >= 4 else float("nan"),
        "mmd": mmd((f - ref_mean) / ref_sd, (r - ref_mean) / ref_sd, seed=seed) if finite else float("nan"),
    }
