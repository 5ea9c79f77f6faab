"""The one module that knows which ArviZ line is installed.

stan-dp serves two ArviZ lines, chosen by pip through environment markers in ``pyproject.toml``:

* arviz 0.23 (Python 3.10 / 3.11): results are ``arviz.InferenceData``;
* arviz >= 1.3 (Python >= 3.12, the arviz-base / arviz-stats / arviz-plots packages): results are the
  ``xarray.DataTree`` that ArviZ 1.x produces and consumes.

Both carry the same groups (``posterior``, ``sample_stats``, ...), variable names, dims and root attrs, and
both offer ``.attrs``, ``.to_netcdf(path)`` and attribute access to groups (``fit.posterior``). Everything
else that differs between the lines (construction, listing groups, replacing a group, overlaid density
plots) goes through the functions below, so the rest of the package has no version branches.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

__all__ = [
    "arviz_major",
    "bulk_ess",
    "fit_type_name",
    "from_cmdstanpy",
    "from_netcdf",
    "get_group",
    "group_names",
    "is_fit",
    "leaf_dataset",
    "make_fit",
    "fit_from_dict",
    "replace_group",
    "rhat_ess",
    "uses_datatree",
]


@lru_cache(maxsize=None)
def arviz_major() -> int:
    """Major version of the installed ArviZ (0 or 1)."""
    import arviz as az

    return int(str(az.__version__).split(".")[0])


def uses_datatree() -> bool:
    """True when the installed ArviZ is the 1.x line, whose data type is ``xarray.DataTree``."""
    return arviz_major() >= 1


def fit_type_name() -> str:
    """Name of the type results have with the installed ArviZ (for messages and docs)."""
    return "xarray.DataTree" if uses_datatree() else "arviz.InferenceData"


def is_fit(obj: Any) -> bool:
    """True for ArviZ data with groups: ``InferenceData`` (0.x) or ``DataTree`` (either line)."""
    import xarray as xr

    if isinstance(obj, xr.DataTree):
        return True
    if not uses_datatree():
        import arviz as az

        return isinstance(obj, az.InferenceData)
    return False


def leaf_dataset(obj: Any):
    """``obj`` as an ``xarray.Dataset`` when it is one group's data (a Dataset, or a DataTree node without
    children such as ``fit.posterior`` on arviz 1.x), else ``None``."""
    import xarray as xr

    if isinstance(obj, xr.Dataset):
        return obj
    if isinstance(obj, xr.DataTree) and not obj.children and obj.has_data:
        return obj.to_dataset()
    return None


def group_names(fit: Any) -> list[str]:
    """Names of the top-level groups, e.g. ``["posterior", "sample_stats"]``."""
    import xarray as xr

    if isinstance(fit, xr.DataTree):
        return [str(name) for name in fit.children]
    return [str(name) for name in fit.groups()]


def get_group(fit: Any, name: str):
    """Group ``name`` of ``fit`` as an ``xarray.Dataset``; ``KeyError`` naming the groups present if absent."""
    import xarray as xr

    if name not in group_names(fit):
        raise KeyError(f"no group {name!r}; the groups are {group_names(fit)}")
    group = fit[name] if isinstance(fit, xr.DataTree) else getattr(fit, name)
    return group.to_dataset() if isinstance(group, xr.DataTree) else group


def replace_group(fit: Any, name: str, dataset: Any) -> None:
    """Replace (or add) group ``name`` of ``fit`` in place with ``dataset`` (an ``xarray.Dataset``)."""
    import xarray as xr

    if isinstance(fit, xr.DataTree):
        fit[name] = xr.DataTree(dataset)
    elif name in group_names(fit):
        setattr(fit, name, dataset)
    else:
        fit.add_groups({name: dataset})


def make_fit(groups: Mapping[str, Any], attrs: Mapping[str, Any]):
    """The installed line's result type from ``{group name: xarray.Dataset}`` and root ``attrs``."""
    import xarray as xr

    if uses_datatree():
        tree = {"/": xr.Dataset(attrs=dict(attrs))}
        tree.update({name: ds for name, ds in groups.items()})
        return xr.DataTree.from_dict(tree)
    import arviz as az

    return az.InferenceData(attrs=dict(attrs), **dict(groups))


def fit_from_dict(
    groups: Mapping[str, Mapping[str, np.ndarray]],
    *,
    dims: Mapping[str, Sequence[str]] | None = None,
    coords: Mapping[str, Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
):
    """ArviZ's ``from_dict`` on either line: ``{group: {variable: array (chain, draw, ...)}}``.

    ``dims``/``coords`` name the non-sample dimensions as in ArviZ; ``attrs`` become root attrs.
    """
    import arviz as az

    dims = dict(dims) if dims else None
    coords = dict(coords) if coords else None
    if uses_datatree():
        fit = az.from_dict({g: dict(v) for g, v in groups.items()}, dims=dims, coords=coords)
    else:
        fit = az.from_dict(**{g: dict(v) for g, v in groups.items()}, dims=dims, coords=coords)
    if attrs:
        fit.attrs.update(dict(attrs))
    return fit


def bulk_ess(draws: np.ndarray) -> np.ndarray:
    """Bulk ESS per coordinate of a (chain, draw, k) array, as a (k,) array, in one vectorised ArviZ call (the
    same figures as ``rhat_ess`` per scalar, on either ArviZ line)."""
    import arviz as az
    import xarray as xr

    values = xr.DataArray(np.asarray(draws, dtype=float), dims=("chain", "draw", "coordinate"))
    result = az.ess(values, method="bulk")
    if hasattr(result, "data_vars"):  # ArviZ 0.x returns a Dataset of the one variable
        result = result[next(iter(result.data_vars))]
    return np.asarray(result, dtype=float).reshape(-1)


def rhat_ess(draws: np.ndarray) -> tuple[float, float, float]:
    """Rank-normalised split R-hat, bulk ESS and tail ESS of one scalar's (chain, draw) array."""
    import arviz as az

    values: Any = np.asarray(draws, dtype=float)
    if uses_datatree():
        import xarray as xr

        values = xr.DataArray(values, dims=("chain", "draw"))
    return (float(np.asarray(az.rhat(values))), float(np.asarray(az.ess(values, method="bulk"))),
            float(np.asarray(az.ess(values, method="tail"))))


def from_netcdf(path: Any):
    """Read a netCDF file written by ``fit.to_netcdf`` as the installed line's type (attrs included)."""
    import arviz as az

    return az.from_netcdf(str(path))


def from_cmdstanpy(fit: Any):
    """ArviZ's converter for a cmdstanpy ``CmdStanMCMC`` on the installed line."""
    import arviz as az

    return az.from_cmdstanpy(fit)
