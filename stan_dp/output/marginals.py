"""The figure of a comparison: one panel per scalar, the private and the reference marginal densities overlaid.

:func:`plot_marginals` draws with matplotlib alone, so the figure is the same on both ArviZ lines. Each density is
a Gaussian kernel density estimate over the whole range of both samples and a margin of three bandwidths, so
neither is cut (no HDI limits) and a private fit far from the reference is shown far from it; draws that do not
vary are a vertical line at their value. Panels are laid out in at most three columns, and the grid has no
empty panel. ``stan_dp.output.compare.plot_compare`` and the demo use it.
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

__all__ = ["plot_marginals"]

#: points of each density curve
GRID_POINTS = 400
COLOURS = {"private": "tab:red", "reference": "tab:blue"}


def _kde(draws: np.ndarray) -> tuple[Any, float] | None:
    """scipy's Gaussian KDE of ``draws`` and its bandwidth, or None when the draws do not vary."""
    from scipy import stats

    if draws.size < 2 or np.ptp(draws) == 0:
        return None
    kde = stats.gaussian_kde(draws)
    return kde, float(np.sqrt(kde.covariance[0, 0]))


def _layout(n: int) -> tuple[int, int]:
    """(rows, columns) of a grid for ``n`` panels: up to three columns, filled row by row."""
    cols = min(n, 3 if n > 4 else 2) if n > 1 else 1
    return math.ceil(n / cols), cols


def plot_marginals(samples: Mapping[str, Mapping[str, np.ndarray]], *, title: str,
                   labels: Mapping[str, str] | None = None, truth: Mapping[str, float] | None = None):
    """One panel per scalar: the marginal density of each sample, overlaid; returns the matplotlib Figure.

    samples: ``{"private": {scalar label: draws}, "reference": {...}}`` (any keys; the first key's scalars are
        drawn, in its order; 1-d arrays of pooled draws).
    title: the figure's title (``plot_compare`` puts the budget and the algorithm in it).
    labels: legend text per sample key (default: the key).
    truth: optional values to mark per scalar label (a dashed line, e.g. the value used to simulate data).
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    keys = list(samples)
    names = list(samples[keys[0]])
    rows, cols = _layout(len(names))
    figure, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows + 1.0), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        values = {k: np.asarray(samples[k][name], dtype=float).ravel() for k in keys if name in samples[k]}
        kdes = {k: _kde(v) for k, v in values.items()}
        pooled = np.concatenate(list(values.values()))
        margin = 3.0 * max((kb[1] for kb in kdes.values() if kb is not None), default=0.0)
        low, high = float(pooled.min()) - margin, float(pooled.max()) + margin
        if high <= low:  # every draw of every sample equal
            low, high = low - 0.5, high + 0.5
        grid = np.linspace(low, high, GRID_POINTS)
        for k, v in values.items():
            colour = COLOURS.get(k)
            text = (labels or {}).get(k, k)
            if kdes[k] is None:
                ax.axvline(float(v[0]), color=colour, linewidth=2, label=f"{text} (all draws equal)")
            else:
                ax.plot(grid, kdes[k][0](grid), color=colour, linewidth=2, label=text)
        if truth and name in truth:
            ax.axvline(truth[name], color="black", linestyle="--", linewidth=1, label="value used to simulate")
        ax.set_title(name)
        ax.set_xlabel("parameter value")
        ax.set_ylabel("density")
        ax.set_ylim(bottom=0)
        ax.locator_params(axis="x", nbins=5)
    for ax in axes.ravel()[len(names):]:
        ax.remove()  # no empty panels
    handles: dict[str, Any] = {}
    for ax in figure.axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(text, handle)
    figure.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(len(handles), 3),
                  frameon=False)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.08 if rows == 1 else 0.05, 1, 0.95))
    return figure
