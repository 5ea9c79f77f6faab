"""Compare a private fit with a reference posterior.

``compare(fit, reference)`` returns one row per scalar parameter (labelled as ``az.summary`` labels them,
e.g. ``beta[0]`` or ``L[0, 1]``) with both means and standard deviations, the mean difference in reference
standard deviations, the sd ratio and the two-sample Kolmogorov-Smirnov distance of the marginals. The joint
maximum mean discrepancy (MMD) over all parameters is stored in ``df.attrs["mmd"]``; ``mmd(x, y)`` computes it
directly.

The MMD follows the evaluation metric of Räisä, Koskela & Honkela, "Differentially Private Hamiltonian
Monte Carlo" (section 4): "We used a Gaussian kernel, and chose the kernel width by choosing a 500
point subsample from both samples with replacement, and used the median between the distances of both
subsamples." Decisions the paper leaves open, made here:

* kernel ``k(x, y) = exp(-||x - y||^2 / (2 h^2))`` (the parametrisation of Gretton et al. 2012, the paper's
  reference for MMD), Euclidean distance on the scale the draws are given in (the constrained scale for a fit);
* ``h`` is the median of the pairwise Euclidean distances (over distinct index pairs) of the pooled
  1000 points made of 500 draws picked with replacement from each sample, with a seeded generator
  (``seed=0`` by default, so the value is reproducible);
* the estimate is the biased (V-statistic) ``MMD_b`` of Gretton et al. 2012, eq. (5): the square root of
  ``mean k(x_i, x_j) + mean k(y_i, y_j) - 2 mean k(x_i, y_j)`` over all index pairs. It is non-negative and
  exactly zero for a sample compared with itself;
* to keep the cost at O(n^2) with a small n, each sample is first thinned deterministically to at most
  ``max_draws`` (2000) draws at evenly spaced positions of the pooled (chain-major) draws.

How to read the result (also ``HOW_TO_READ``, printed by ``stan-dp compare``): ``mean_diff_sd`` is the shift of
the private mean in reference sds (|value| < 0.3 is close, > 1 is centred elsewhere), ``sd_ratio`` the width of
the private marginal relative to the reference (near 1 is good), ``ks`` the Kolmogorov-Smirnov distance (0 same,
1 no overlap). The MMD lies between 0 and sqrt(2); two samples of 2000 draws from the same posterior give about
0.01-0.03, a shift of 0.3 sd about 0.15, a shift of 1 sd about 0.45.

``compare`` checks the ``private`` attr of ArviZ inputs: given (reference, private fit) in that order it swaps
them with a warning; two private fits are refused (the reference must be a non-private posterior).

Only the ``posterior`` group (the parameters) is compared; ``sample_stats`` and other groups are ignored.
Fit and reference may be ArviZ data of either line (``az.InferenceData`` on arviz 0.x, ``xarray.DataTree`` on
arviz 1.x), a cmdstanpy ``CmdStanMCMC`` (used through its public ``stan_variables()``; cmdstanpy itself is never
imported), or Stan CSV file(s) (one path or a list of paths, one per chain; read by ``stan_dp.output.stan_csv``).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..user_warnings import warn
from . import arviz_compat
from .marginals import plot_marginals
from .stan_csv import read_stan_csv, read_stan_csv_attrs

__all__ = ["compare", "mmd", "median_bandwidth", "ks_distance", "plot_compare", "read_stan_csv"]

#: printed by ``stan-dp compare`` and the demo under the table
HOW_TO_READ = """How to read this table (one row per scalar parameter; private fit vs reference posterior):
  mean_private, mean_reference, sd_private, sd_reference: posterior means and standard deviations.
  mean_diff_sd: (mean_private - mean_reference) / sd_reference, the shift in reference sds; |value| < 0.3 is
      close, > 1 means the private fit is centred elsewhere.
  sd_ratio: sd_private / sd_reference; near 1 is good, > 1 means the private posterior is wider (extra noise).
  ks: Kolmogorov-Smirnov distance of the two marginals, 0 (same) to 1 (no overlap).
  Joint MMD: one number for all parameters together, 0 (same) to about 1.4 (no overlap). Two samples of 2000
      draws from the same posterior give about 0.01-0.03; a shift of 0.3 sd gives about 0.15; 1 sd about 0.45."""

MAX_DRAWS = 2000
BANDWIDTH_SUBSAMPLE = 500

COLUMNS = (
    "mean_private",
    "mean_reference",
    "sd_private",
    "sd_reference",
    "mean_diff_sd",
    "sd_ratio",
    "ks",
)


# --------------------------------------------------------------------------------------------------------
# Draw containers
# --------------------------------------------------------------------------------------------------------
class _Draws:
    """Pooled draws of named parameters: ``arrays[name]`` has shape ``(n_draws, *param_shape)``.

    ``dims``/``coords`` are kept when the source was ArviZ data, so that labels and plots follow it.
    """

    def __init__(self, arrays: dict[str, np.ndarray], dims: dict[str, list[str]] | None = None,
                 coords: dict[str, np.ndarray] | None = None, source: str = ""):
        self.arrays = arrays
        self.dims = dims or {}
        self.coords = coords or {}
        self.source = source

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.arrays[name].shape[1:])

    def n_draws(self) -> int:
        return next(iter(self.arrays.values())).shape[0] if self.arrays else 0

    def labels(self, name: str) -> list[str]:
        """Flat labels of ``name`` in C order, formatted like ``az.summary`` (``beta[0]``, ``L[0, 1]``)."""
        shape = self.shape(name)
        if not shape:
            return [name]
        dims = self.dims.get(name)
        axes_values: list[Sequence[Any]] = []
        for axis, size in enumerate(shape):
            values = None
            if dims is not None and axis < len(dims) and dims[axis] in self.coords:
                values = list(np.asarray(self.coords[dims[axis]]))
                if len(values) != size:
                    values = None
            axes_values.append(values if values is not None else list(range(size)))
        return [f"{name}[{', '.join(str(axes_values[a][i]) for a, i in enumerate(idx))}]"
                for idx in np.ndindex(*shape)]

    def flat(self, name: str) -> np.ndarray:
        """Draws of ``name`` as a ``(n_draws, n_scalars)`` matrix, C order."""
        a = self.arrays[name]
        return a.reshape(a.shape[0], -1)


def _is_path_like(obj: Any) -> bool:
    return isinstance(obj, (str, os.PathLike))


def _is_path_list(obj: Any) -> bool:
    return (isinstance(obj, (list, tuple)) and len(obj) > 0 and all(_is_path_like(p) for p in obj))


def _is_draw_source(obj: Any) -> bool:
    return (arviz_compat.is_fit(obj) or arviz_compat.leaf_dataset(obj) is not None or _is_path_like(obj)
            or _is_path_list(obj) or callable(getattr(obj, "stan_variables", None)))


def _from_dataset(ds: Any, source: str) -> _Draws:
    missing = [d for d in ("chain", "draw") if d not in ds.dims]
    if missing:
        raise ValueError(f"{source}: the posterior has no {' and '.join(missing)} dimension")
    arrays: dict[str, np.ndarray] = {}
    dims: dict[str, list[str]] = {}
    coords: dict[str, np.ndarray] = {}
    for name, da in ds.data_vars.items():
        other = [d for d in da.dims if d not in ("chain", "draw")]
        da = da.transpose("chain", "draw", *other)
        values = np.asarray(da.values, dtype=float)
        arrays[str(name)] = values.reshape(-1, *values.shape[2:])
        dims[str(name)] = [str(d) for d in other]
        for d in other:
            if d in da.coords:
                coords[str(d)] = np.asarray(da.coords[d].values)
    return _Draws(arrays, dims, coords, source)


def _load(obj: Any, source: str) -> _Draws:
    """Turn any supported input into pooled draws of its posterior parameters."""
    if isinstance(obj, _Draws):
        return obj
    if arviz_compat.leaf_dataset(obj) is not None:
        return _from_dataset(arviz_compat.leaf_dataset(obj), source)
    if arviz_compat.is_fit(obj):
        if "posterior" not in arviz_compat.group_names(obj):
            raise ValueError(f"{source} has no posterior group")
        return _from_dataset(arviz_compat.get_group(obj, "posterior"), source)
    if _is_path_like(obj) or _is_path_list(obj):
        return _Draws(read_stan_csv(obj), source=source)
    if callable(getattr(obj, "stan_variables", None)):  # cmdstanpy.CmdStanMCMC, duck-typed
        arrays = {}
        for name, value in obj.stan_variables().items():
            a = np.asarray(value, dtype=float)
            if a.ndim == 0:
                raise ValueError(f"{source}: stan_variables()[{name!r}] has no draw dimension")
            arrays[str(name)] = a
        return _Draws(arrays, source=source)
    raise TypeError(
        f"{source} must be ArviZ data (InferenceData or DataTree), a cmdstanpy CmdStanMCMC, or Stan CSV path(s); "
        f"got {type(obj).__name__}"
    )


def _align(fit: _Draws, ref: _Draws, var_names: Sequence[str] | None) -> list[str]:
    """Names to compare, in the fit's order; ValueError when names or shapes differ."""
    if var_names is not None:
        wanted = [var_names] if isinstance(var_names, str) else list(var_names)
        not_fit = [n for n in wanted if n not in fit.arrays]
        not_ref = [n for n in wanted if n not in ref.arrays]
        if not_fit or not_ref:
            parts = []
            if not_fit:
                parts.append(f"not in fit: {not_fit}")
            if not_ref:
                parts.append(f"not in reference: {not_ref}")
            raise ValueError("requested var_names are missing: " + "; ".join(parts))
        names = wanted
    else:
        fit_only = [n for n in fit.names if n not in ref.arrays]
        ref_only = [n for n in ref.names if n not in fit.arrays]
        if fit_only or ref_only:
            parts = []
            if fit_only:
                parts.append(f"in fit only: {fit_only}")
            if ref_only:
                parts.append(f"in reference only: {ref_only}")
            raise ValueError(
                "fit and reference have different parameters: " + "; ".join(parts)
                + " (pass var_names=[...] to compare a common subset)"
            )
        names = fit.names
    if not names:
        raise ValueError("there are no parameters to compare")
    for n in names:
        if fit.shape(n) != ref.shape(n):
            raise ValueError(
                f"parameter {n!r} has shape {fit.shape(n)} in fit but {ref.shape(n)} in reference"
            )
    for draws, label in ((fit, "fit"), (ref, "reference")):
        for n in names:
            a = draws.arrays[n]
            if a.shape[0] == 0:
                raise ValueError(f"parameter {n!r} has no draws in {label}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"parameter {n!r} has non-finite draws in {label}")
    return names


def _matrix(draws: _Draws, names: Sequence[str]) -> np.ndarray:
    return np.concatenate([draws.flat(n) for n in names], axis=1)


# --------------------------------------------------------------------------------------------------------
# Distances
# --------------------------------------------------------------------------------------------------------
def ks_distance(x: Any, y: Any) -> float:
    """Two-sample Kolmogorov-Smirnov statistic ``sup_t |F_x(t) - F_y(t)|`` of two 1-d samples."""
    xs = np.sort(np.asarray(x, dtype=float).ravel())
    ys = np.sort(np.asarray(y, dtype=float).ravel())
    if xs.size == 0 or ys.size == 0:
        raise ValueError("ks_distance needs two non-empty samples")
    points = np.concatenate([xs, ys])
    fx = np.searchsorted(xs, points, side="right") / xs.size
    fy = np.searchsorted(ys, points, side="right") / ys.size
    return float(np.max(np.abs(fx - fy)))


def _as_2d(a: Any, label: str) -> np.ndarray:
    arr = np.asarray(a, dtype=float)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"{label} must be a (n_draws, n_dims) array or a 1-d array; got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValueError(f"{label} has no draws")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{label} has non-finite values")
    return arr


def _pair_matrices(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    if _is_draw_source(x) or _is_draw_source(y) or isinstance(x, _Draws) or isinstance(y, _Draws):
        fx, fy = _load(x, "x"), _load(y, "y")
        names = _align(fx, fy, None)
        return _matrix(fx, names), _matrix(fy, names)
    xa, ya = _as_2d(x, "x"), _as_2d(y, "y")
    if xa.shape[1] != ya.shape[1]:
        raise ValueError(f"x has {xa.shape[1]} dimensions but y has {ya.shape[1]}")
    return xa, ya


def _thin(a: np.ndarray, max_draws: int | None) -> np.ndarray:
    """At most ``max_draws`` rows at evenly spaced positions (deterministic)."""
    if max_draws is None or a.shape[0] <= max_draws:
        return a
    if max_draws < 1:
        raise ValueError("max_draws must be at least 1")
    idx = np.round(np.linspace(0, a.shape[0] - 1, max_draws)).astype(np.int64)
    return a[idx]


def median_bandwidth(x: Any, y: Any, *, n_subsample: int = BANDWIDTH_SUBSAMPLE, seed: int | None = 0) -> float:
    """Median-heuristic Gaussian kernel width of the DP-HMC paper.

    ``n_subsample`` draws are picked with replacement from each sample (seeded generator), pooled, and the
    median of the Euclidean distances between all distinct pairs of the pooled points is returned. If that
    median is zero (many tied draws) the median of the non-zero distances is used; if all points coincide the
    width is 1 (any width then gives MMD 0).
    """
    from scipy.spatial.distance import pdist

    xa, ya = _pair_matrices(x, y)
    rng = np.random.default_rng(seed)
    pooled = np.concatenate([
        xa[rng.integers(0, xa.shape[0], size=n_subsample)],
        ya[rng.integers(0, ya.shape[0], size=n_subsample)],
    ])
    dist = pdist(pooled)
    h = float(np.median(dist))
    if h > 0:
        return h
    nonzero = dist[dist > 0]
    return float(np.median(nonzero)) if nonzero.size else 1.0


def mmd(x: Any, y: Any, *, bandwidth: float | None = None, max_draws: int | None = MAX_DRAWS,
        seed: int | None = 0) -> float:
    """Biased MMD estimate (Gretton et al. 2012, eq. 5) with a Gaussian kernel; see the module docstring.

    ``x`` and ``y`` are ``(n_draws, n_dims)`` arrays (1-d arrays are one dimension), or two draw sources
    accepted by :func:`compare` (InferenceData, CmdStanMCMC, Stan CSV paths), whose parameters are then
    aligned by name. Each sample is thinned deterministically to at most ``max_draws`` rows. ``bandwidth``
    defaults to :func:`median_bandwidth` (the DP-HMC paper's median heuristic, reproducible through ``seed``).
    """
    xa, ya = _pair_matrices(x, y)
    h = median_bandwidth(xa, ya, seed=seed) if bandwidth is None else float(bandwidth)
    if not h > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return _mmd_fixed(_thin(xa, max_draws), _thin(ya, max_draws), h)


def _mmd_fixed(x: np.ndarray, y: np.ndarray, h: float) -> float:
    from scipy.spatial.distance import cdist

    scale = -1.0 / (2.0 * h * h)
    kxx = np.exp(scale * cdist(x, x, "sqeuclidean")).mean()
    kyy = np.exp(scale * cdist(y, y, "sqeuclidean")).mean()
    kxy = np.exp(scale * cdist(x, y, "sqeuclidean")).mean()
    return float(math.sqrt(max(kxx + kyy - 2.0 * kxy, 0.0)))


# --------------------------------------------------------------------------------------------------------
# Public comparison
# --------------------------------------------------------------------------------------------------------
def _private_flag(obj: Any) -> int | None:
    """1 / 0 from the ``private`` attr of ArviZ data, None for inputs without it (CSV, cmdstanpy, Dataset)."""
    attrs = getattr(obj, "attrs", None) if arviz_compat.is_fit(obj) else None
    if not attrs or "private" not in attrs:
        return None
    return int(attrs["private"])


def _order(fit: Any, reference: Any) -> tuple[Any, Any]:
    """(private fit, reference): swaps arguments given the other way round, refuses two private fits."""
    p_fit, p_ref = _private_flag(fit), _private_flag(reference)
    if p_ref == 1 and p_fit == 1:
        raise ValueError("Both arguments are private fits; compare(fit, reference) needs a non-private reference "
                         "posterior second.\nRun model.reference(...) (stan-dp reference) for the reference.")
    if p_ref == 1:
        warn("compare(fit, reference): the second argument is the private fit and the first is not; they were "
             "swapped so that the columns are labelled correctly.", UserWarning)
        return reference, fit
    return fit, reference


class ComparisonTable(pd.DataFrame):
    """The table :func:`compare` returns: a ``pandas.DataFrame`` whose printed form (``print``, ``repr``, ``str``)
    shows every row and column in full, whatever pandas' display options, so that no column (``mean_diff_sd``)
    hides behind ``...``. Everything else is the DataFrame's (operations return tables of the same kind)."""

    @property
    def _constructor(self):
        return ComparisonTable

    def __repr__(self) -> str:
        return self.to_string()

    def __str__(self) -> str:
        return self.to_string()


def compare(fit: Any, reference: Any, *, var_names: Sequence[str] | None = None,
            max_draws: int | None = MAX_DRAWS, seed: int | None = 0) -> pd.DataFrame:
    """Per-parameter comparison of a private ``fit`` with a ``reference`` posterior.

    Parameters
    ----------
    fit : az.InferenceData or xarray.DataTree (or any input accepted for ``reference``)
        The private fit; only its ``posterior`` group is used.
    reference : az.InferenceData, xarray.DataTree, cmdstanpy.CmdStanMCMC, or Stan CSV path / list of paths
        The reference posterior (typically non-private NUTS).
    var_names : list of str, optional
        Compare only these parameters. By default both must hold exactly the same parameters.
    max_draws, seed : passed to :func:`mmd` for the joint MMD.

    Returns
    -------
    pandas.DataFrame
        Index: scalar parameters labelled like ``az.summary`` (``mu``, ``beta[0]``, ``L[0, 1]``).
        Columns: ``mean_private``, ``mean_reference``, ``sd_private``, ``sd_reference`` (ddof=1, all draws
        of all chains), ``mean_diff_sd`` = (mean_private - mean_reference) / sd_reference,
        ``sd_ratio`` = sd_private / sd_reference, ``ks`` = two-sample Kolmogorov-Smirnov distance.
        ``df.attrs``: ``mmd`` (joint MMD over all compared parameters), ``mmd_bandwidth``,
        ``mmd_draws_private`` / ``mmd_draws_reference`` (draws used after thinning), ``n_draws_private`` /
        ``n_draws_reference``.

    Raises
    ------
    ValueError
        When the parameter names differ (the message lists those in fit only and in reference only), when a
        parameter's shape differs, or when draws are missing or non-finite.
    """
    fit, reference = _order(fit, reference)
    f = _load(fit, "fit")
    r = _load(reference, "reference")
    names = _align(f, r, var_names)

    labels: list[str] = []
    rows: list[np.ndarray] = []
    for n in names:
        xf, xr_ = f.flat(n), r.flat(n)
        mean_f, mean_r = xf.mean(axis=0), xr_.mean(axis=0)
        sd_f = xf.std(axis=0, ddof=1) if xf.shape[0] > 1 else np.full(xf.shape[1], np.nan)
        sd_r = xr_.std(axis=0, ddof=1) if xr_.shape[0] > 1 else np.full(xr_.shape[1], np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            diff = (mean_f - mean_r) / sd_r
            ratio = sd_f / sd_r
        ks = np.array([ks_distance(xf[:, j], xr_[:, j]) for j in range(xf.shape[1])])
        labels.extend(f.labels(n))
        rows.append(np.column_stack([mean_f, mean_r, sd_f, sd_r, diff, ratio, ks]))

    df = ComparisonTable(np.concatenate(rows, axis=0), index=pd.Index(labels), columns=list(COLUMNS))

    xf_all, xr_all = _matrix(f, names), _matrix(r, names)
    h = median_bandwidth(xf_all, xr_all, seed=seed)
    xf_thin, xr_thin = _thin(xf_all, max_draws), _thin(xr_all, max_draws)
    df.attrs["mmd"] = _mmd_fixed(xf_thin, xr_thin, h)
    df.attrs["mmd_bandwidth"] = h
    df.attrs["mmd_draws_private"] = int(xf_thin.shape[0])
    df.attrs["mmd_draws_reference"] = int(xr_thin.shape[0])
    df.attrs["n_draws_private"] = int(xf_all.shape[0])
    df.attrs["n_draws_reference"] = int(xr_all.shape[0])
    return df


def _title(fit: Any) -> str:
    """The figure's title: the private fit's algorithm and budget, from its attrs (ArviZ data) or its Stan CSV
    header (written by ``stan_dp.to_stan_csv``); says so when the input records neither."""
    attrs: dict[str, Any] = {}
    if arviz_compat.is_fit(fit):
        attrs = dict(getattr(fit, "attrs", {}) or {})
    elif _is_path_like(fit) or _is_path_list(fit):
        attrs = read_stan_csv_attrs(fit if _is_path_like(fit) else fit[0])
    if "epsilon" not in attrs:
        return "Private fit vs reference posterior (the input records no privacy budget)"
    if str(attrs.get("private", "1")) in ("0", "0.0"):
        budget = f"NOT private ({attrs.get('privacy_warning', 'no guarantee')})"
    else:
        budget = f"epsilon = {float(attrs['epsilon']):g}, delta = {float(attrs['delta']):g} for the whole run"
        if str(attrs.get("interrupted", "0")) in ("1", "1.0"):
            budget += f" (stopped early: epsilon = {float(attrs['epsilon_spent']):.3g} spent)"
    algorithm = str(attrs.get("algorithm", "?"))
    if attrs.get("auto_choice"):  # "auto: dp-sgnht" (the algorithm attr already holds the choice)
        algorithm = f"auto: {attrs['auto_choice']}"
    return f"Private fit: {algorithm}, {budget}\nvs the reference posterior (not private)"


def plot_compare(fit: Any, reference: Any, var_names: Sequence[str] | None = None, *,
                 truth: dict[str, float] | None = None):
    """The marginal densities of the private fit and the reference, one panel per scalar parameter (labelled
    like the :func:`compare` table), with the private fit's algorithm and budget in the title; returns the
    matplotlib Figure (``stan_dp.output.marginals.plot_marginals``: full kernel density estimates, the same figure
    on both ArviZ lines).

    Inputs are as for :func:`compare` (same name and shape checks). ``truth``: optional values to mark by scalar
    label (e.g. the values used to simulate public data).
    """
    fit, reference = _order(fit, reference)
    f = _load(fit, "fit")
    r = _load(reference, "reference")
    names = _align(f, r, var_names)
    samples = {"private": {}, "reference": {}}
    for n in names:
        for label, j in zip(f.labels(n), range(f.flat(n).shape[1])):
            samples["private"][label] = f.flat(n)[:, j]
            samples["reference"][label] = r.flat(n)[:, j]
    return plot_marginals(samples, title=_title(fit),
                          labels={"private": "private", "reference": "reference (not private)"}, truth=truth)
