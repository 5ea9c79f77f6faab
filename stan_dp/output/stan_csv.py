"""Stan CSV files: write a fit as per-chain Stan CSV (``to_stan_csv``) and read Stan CSV (``read_stan_csv``).

Writing follows the layout CmdStan's ``sample`` method produces, so that ``cmdstanpy.from_csv``, R's
``cmdstanr::read_cmdstan_csv`` / ``posterior`` and other Stan CSV tools read the files:

* comment lines (``#``) with ``key = value`` pairs: first the fit's root attrs (the privacy metadata: epsilon,
  delta, the guarantee text, the accountant, the algorithm and its options, ...) each as
  ``stan_dp_<attr> = <value>`` (the prefix keeps them apart from CmdStan's keys), then the CmdStan
  configuration keys readers need (``model``, ``method = sample``, ``num_samples``, ``num_warmup``,
  ``save_warmup``, ``thin``, ``algorithm``, ``id``, and the Stan version when the fit records it);
* one header line: ``lp__``, the sample statistics as sampler columns (``__`` suffix), then the posterior
  variables with Stan's flat dotted names (``beta.1``, ``L.2.1``; 1-based, first index fastest, as Stan
  writes them);
* one line per sampling draw, values written with 17 significant digits (an exact round trip of doubles);
* trailing comment lines.

What goes into the columns Stan fills with non-private values:

* ``lp__`` is Stan's log density, which reads every private row. A stan-dp private fit never holds it, so
  the column is ``nan`` in every draw (a header comment says so). Only a fit that carries an ``lp`` sample
  statistic (a non-private reference) has numbers there.
* The other sampler columns are the fit's released sample statistics: ArviZ's standard names go back to
  Stan's (``acceptance_rate`` -> ``accept_stat__``, ``step_size`` -> ``stepsize__``, ``n_steps`` ->
  ``n_leapfrog__``, ``tree_depth`` -> ``treedepth__``, ``diverging`` -> ``divergent__``, ``energy`` ->
  ``energy__``), the algorithm's own fields keep their names with ``__`` appended (``accepted__``,
  ``noise_sd__``, ...). Nothing is invented: there is no ``treedepth__`` or ``energy__`` for a private fit.
* The configuration says ``algorithm = fixed_param``: it only tells Stan CSV readers that the file has no NUTS
  adaptation block and no tree-depth or divergence columns to check. The sampler that made the draws is
  ``stan_dp_algorithm``. Warmup draws are not written (``save_warmup = 0``); the adapted step sizes and
  metrics are in ``stan_dp_adapted_step_size`` and ``stan_dp_inv_metric``.

Reading (used by ``compare``) skips comments, drops sampler columns and warmup draws, and turns flat names
into arrays; it reads CmdStan's files and the files written here alike.
"""
from __future__ import annotations

import io
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .arviz_compat import get_group, group_names, is_fit
from .releasable import check_releasable

__all__ = ["read_stan_csv", "stan_csv_paths", "to_stan_csv"]

#: ArviZ sample-statistic names and the Stan CSV columns they come from (CmdStan's order)
STAN_SAMPLER_COLUMNS = {
    "lp": "lp__",
    "acceptance_rate": "accept_stat__",
    "step_size": "stepsize__",
    "tree_depth": "treedepth__",
    "n_steps": "n_leapfrog__",
    "diverging": "divergent__",
    "energy": "energy__",
}
LP_NOTE = (
    "lp__ is nan in every draw: Stan's lp__ is the log density, which reads the private rows, and stan-dp "
    "never releases it."
)
ALGORITHM_NOTE = (
    "The configuration below names the fixed_param algorithm only to tell Stan CSV readers that there is no NUTS "
    "adaptation block and no tree-depth or divergence columns; the draws come from stan_dp_algorithm. Warmup "
    "draws are not written."
)


# --------------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------------
def stan_csv_paths(path: str | os.PathLike, chains: int) -> list[Path]:
    """The per-chain file names ``to_stan_csv`` writes for ``path``: ``<stem>_<chain>.csv``, chain from 1."""
    base = Path(path)
    stem = base.name[:-4] if base.name.lower().endswith(".csv") else base.name
    if not stem:
        raise ValueError(f"{path!r} does not name a file")
    return [base.with_name(f"{stem}_{c}.csv") for c in range(1, chains + 1)]


def to_stan_csv(fit: Any, path: str | os.PathLike) -> list[Path]:
    """Write ``fit`` as one Stan CSV file per chain and return their paths.

    ``fit`` is a stan-dp result (``arviz.InferenceData`` or ``xarray.DataTree``, per the installed ArviZ) or
    any ArviZ data with a ``posterior`` group. ``path`` names the output: ``fit.csv`` gives ``fit_1.csv``,
    ``fit_2.csv``, ... in the same folder (which must exist). The layout, the privacy metadata in the header
    and what is written in ``lp__`` are described in the module docstring. Existing files are overwritten.
    """
    if not is_fit(fit):
        raise TypeError(
            f"to_stan_csv needs ArviZ data (InferenceData or DataTree) with a posterior group, got "
            f"{type(fit).__name__}"
        )
    if "posterior" not in group_names(fit):
        raise ValueError("the fit has no posterior group: there are no draws to write")
    attrs = dict(fit.attrs)
    posterior = get_group(fit, "posterior")
    stats = get_group(fit, "sample_stats") if "sample_stats" in group_names(fit) else None
    if int(_scalar(attrs.get("private", 0))) == 1 and stats is not None:
        check_releasable([str(n) for n in stats.data_vars], "sample_stats")
    n_chains, n_draws = int(posterior.sizes["chain"]), int(posterior.sizes["draw"])
    if n_draws == 0:
        raise ValueError("the fit has no sampling draws to write")

    names, columns = _columns(posterior, stats, n_chains, n_draws)
    paths = stan_csv_paths(path, n_chains)
    parent = paths[0].parent
    if not parent.is_dir():
        raise FileNotFoundError(f"the folder {parent} does not exist; create it or choose another path")
    header_lines = _metadata_lines(attrs)
    for c, out in enumerate(paths):
        lines = header_lines + _config_lines(attrs, n_draws, c + 1)
        table = np.column_stack([col[c] for col in columns])
        with open(out, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(f"# {line}\n" for line in lines))
            fh.write(",".join(names) + "\n")
            for row in table:
                fh.write(",".join(_number(v) for v in row) + "\n")
            fh.write(f"#\n# End of the sampling draws of chain {c + 1}, written by stan-dp.\n#\n")
    return paths


def _columns(posterior: Any, stats: Any, n_chains: int, n_draws: int) -> tuple[list[str], list[np.ndarray]]:
    """Flat column names and one (chains, draws) array per column: lp__, sampler columns, parameters."""
    names: list[str] = ["lp__"]
    columns: list[np.ndarray] = [np.full((n_chains, n_draws), np.nan)]
    extra: list[tuple[str, np.ndarray]] = []
    standard: dict[str, np.ndarray] = {}
    for name, da in (stats.data_vars.items() if stats is not None else ()):
        values = _chain_draw(da, str(name), "sample_stats")
        if values.ndim != 2:
            raise ValueError(f"sample statistic {name!r} is not one number per draw (dims {da.dims})")
        if str(name) in STAN_SAMPLER_COLUMNS:
            standard[STAN_SAMPLER_COLUMNS[str(name)]] = values
        else:
            extra.append((f"{name}__", values))
    if "lp__" in standard:
        columns[0] = standard.pop("lp__")
    for stan_name in STAN_SAMPLER_COLUMNS.values():
        if stan_name in standard:
            names.append(stan_name)
            columns.append(standard[stan_name])
    for stan_name, values in extra:
        names.append(stan_name)
        columns.append(values)
    for name, da in posterior.data_vars.items():
        values = _chain_draw(da, str(name), "posterior")
        shape = values.shape[2:]
        if values.shape[:2] != (n_chains, n_draws):
            raise ValueError(f"posterior variable {name!r} has shape {values.shape}; expected ({n_chains}, {n_draws}, ...)")
        # Stan's flat order: the first index varies fastest.
        for index in (tuple(reversed(i)) for i in np.ndindex(*reversed(shape))):
            names.append(".".join([str(name), *(str(i + 1) for i in index)]))
            columns.append(values[(slice(None), slice(None), *index)])
    for name in names:
        if "," in name:
            raise ValueError(f"column name {name!r} contains a comma and cannot be written as Stan CSV")
    return names, columns


def _chain_draw(da: Any, name: str, group: str) -> np.ndarray:
    if "chain" not in da.dims or "draw" not in da.dims:
        raise ValueError(f"{group} variable {name!r} has no chain/draw dimensions (dims {da.dims})")
    other = [d for d in da.dims if d not in ("chain", "draw")]
    values = np.asarray(da.transpose("chain", "draw", *other).values)
    if values.dtype.kind not in "biuf":
        raise ValueError(f"{group} variable {name!r} is not numeric (dtype {values.dtype}); Stan CSV holds numbers")
    return values.astype(np.float64)


def _number(value: float) -> str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _text(value: Any) -> str:
    """One line of header text for an attr value (numbers exactly, newlines folded)."""
    value = _scalar(value)
    if isinstance(value, float):
        text = _number(value)
    elif isinstance(value, (list, tuple, np.ndarray)):
        text = " ".join(_text(v) for v in np.asarray(value).ravel())
    else:
        text = str(value)
    return " ".join(text.split())


def _metadata_lines(attrs: dict[str, Any]) -> list[str]:
    lines = ["stan-dp fit written as Stan CSV. Privacy metadata (the fit's root attrs):"]
    private = int(_scalar(attrs.get("private", 0))) == 1
    if not private:
        lines.append("NOT PRIVATE: " + _text(attrs.get("privacy_warning", "this fit carries no privacy guarantee.")))
    for key, value in attrs.items():
        lines.append(f"  stan_dp_{key} = {_text(value)}")
    lines.append(LP_NOTE)
    lines.append(ALGORITHM_NOTE)
    return lines


_STANC = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


def _config_lines(attrs: dict[str, Any], n_draws: int, chain: int) -> list[str]:
    lines = []
    stanc = str(_scalar(attrs.get("stanc_version", "")))
    match = _STANC.search(stanc)
    if match:
        lines += [f"stan_version_major = {match.group(1)}", f"stan_version_minor = {match.group(2)}",
                  f"stan_version_patch = {match.group(3)}"]
    model = _text(attrs.get("model_name", "stan_dp_fit")) or "stan_dp_fit"
    lines += [
        f"model = {model}",
        "method = sample (Default)",
        "  sample",
        f"    num_samples = {n_draws}",
        f"    num_warmup = {int(_scalar(attrs.get('iter_warmup', 0)))}",
        "    save_warmup = 0",
        "    thin = 1 (Default)",
        "    algorithm = fixed_param",
        f"id = {chain}",
    ]
    if match:
        lines.append(f"stanc_version = {_text(stanc)}")
    return lines


# --------------------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------------------
def _split_flat_name(column: str) -> tuple[str, tuple[int, ...]]:
    """``beta.2`` -> ("beta", (1,)); ``L.1.2`` -> ("L", (0, 1)); ``z.3.imag`` -> ("z", (2, 1))."""
    parts = column.split(".")
    if len(parts) == 1:
        return column, ()
    base, rest = parts[0], parts[1:]
    index: list[int] = []
    for pos, part in enumerate(rest):
        if part.isdigit() and int(part) >= 1:
            index.append(int(part) - 1)
        elif pos == len(rest) - 1 and part in ("real", "imag"):
            index.append(0 if part == "real" else 1)
        else:  # not an array index (tuples etc.): keep the column as one scalar
            return column, ()
    return base, tuple(index)


def _unflatten(columns: Sequence[str], values: np.ndarray, where: str) -> dict[str, np.ndarray]:
    """Map flat Stan column names to arrays of shape ``(n_draws, *shape)``, in first-appearance order."""
    groups: dict[str, list[tuple[tuple[int, ...], int]]] = {}
    for j, col in enumerate(columns):
        base, index = _split_flat_name(col)
        groups.setdefault(base, []).append((index, j))
    out: dict[str, np.ndarray] = {}
    for base, entries in groups.items():
        ranks = {len(index) for index, _ in entries}
        if len(ranks) != 1:
            raise ValueError(f"{where}: columns of {base!r} have inconsistent numbers of indices")
        rank = ranks.pop()
        if rank == 0:
            if len(entries) != 1:
                raise ValueError(f"{where}: column {base!r} appears more than once")
            out[base] = values[:, entries[0][1]].copy()
            continue
        shape = tuple(max(index[a] for index, _ in entries) + 1 for a in range(rank))
        seen = {index for index, _ in entries}
        if len(seen) != len(entries) or len(entries) != math.prod(shape):
            raise ValueError(
                f"{where}: columns of {base!r} do not fill an array of shape {shape} "
                f"({len(entries)} columns, {len(seen)} distinct indices)"
            )
        arr = np.empty((values.shape[0], *shape))
        for index, j in entries:
            arr[(slice(None), *index)] = values[:, j]
        out[base] = arr
    return out


def _read_one_csv(path: str | os.PathLike) -> tuple[list[str], np.ndarray]:
    """Columns (sampler ``__`` columns dropped) and sampling draws of one Stan CSV file."""
    config: dict[str, str] = {}
    header: list[str] | None = None
    rows: list[str] = []
    adaptation_end: int | None = None
    with open(path, encoding="utf-8") as fh:
        for raw in fh:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                text = line.lstrip("#").strip()
                if header is None and "=" in text:
                    key, _, value = text.partition("=")
                    value_parts = value.split()
                    config.setdefault(key.strip(), value_parts[0] if value_parts else "")
                elif header is not None and text.startswith("Adaptation terminated") and adaptation_end is None:
                    adaptation_end = len(rows)
                continue
            if header is None:
                header = [c.strip() for c in line.split(",")]
            else:
                rows.append(line)
    if header is None:
        raise ValueError(f"{path}: no header line found (is this a Stan CSV file?)")
    if rows:
        table = pd.read_csv(io.StringIO("\n".join(rows)), header=None, dtype=float)
        values = table.to_numpy()
        if values.shape[1] != len(header):
            raise ValueError(f"{path}: draws have {values.shape[1]} columns but the header has {len(header)}")
    else:
        values = np.empty((0, len(header)))
    if config.get("save_warmup", "0").lower() in ("1", "true"):
        if adaptation_end is not None:
            n_warm = adaptation_end
        else:
            thin = max(int(config.get("thin", "1") or 1), 1)
            n_warm = math.ceil(int(config.get("num_warmup", "0") or 0) / thin)
        values = values[n_warm:]
    keep = [j for j, c in enumerate(header) if not c.endswith("__")]
    return [header[j] for j in keep], values[:, keep]


def read_stan_csv(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> dict[str, np.ndarray]:
    """Read Stan CSV file(s) (one per chain) into ``{name: draws}`` with draws of shape ``(n, *shape)``.

    Comment lines (``#``) are skipped, sampler columns ending in ``__`` (``lp__``, ``accept_stat__``, ...)
    are dropped, warmup draws saved with ``save_warmup`` are dropped, and flat names (``beta.1``, ``L.1.2``;
    1-based, any column order) become 0-based arrays. Chains are pooled in the order the files are given.
    """
    files = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if not files:
        raise ValueError("no Stan CSV files given")
    columns: list[str] | None = None
    chunks = []
    for f in files:
        cols, values = _read_one_csv(f)
        if columns is None:
            columns = cols
        elif cols != columns:
            raise ValueError(f"{f}: columns differ from those of {files[0]}")
        chunks.append(values)
    assert columns is not None
    return _unflatten(columns, np.concatenate(chunks, axis=0), str(files[0]))


