"""``stan-dp demo`` / ``make demo``: a private fit and the non-private reference of a bundled model, side by
side. Compiles ``stan_models/logistic.stan``, simulates a demo data set from a fixed seed (kept in memory, not
written), runs DP penalty MH and Stan NUTS, prints both summaries, the convergence diagnostics of the private
chains, the comparison with how to read it and the privacy report, and writes the two fits and a figure of the
marginal posteriors.

The settings are public choices, none tuned on the rows: the clip bound 2.5 bounds how fast one row's
log-likelihood can change per unit move (|y - p| |(1, x) . d theta| with standardised covariates), and the chains
start at zero (the "no effect" point). Why N = 100,000 and epsilon = 5: the penalty noise per unit move is
2 tau_l ratio_clip, constant in N, while the posterior narrows like 1/sqrt(N); at a few thousand rows, or at
epsilon = 1 over thousands of iterations, the chains cannot move far enough to mix within a few minutes.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

BUNDLED = Path(__file__).resolve().parents[2] / "stan_models"  # the repository's stan_models/

#: the demo's settings (public: nothing here is tuned on the data)
DEMO = dict(n_rows=100_000, alpha=-0.5, beta=(1.0, -1.0, 0.5), prior_sd=2.5, epsilon=5.0, delta=1e-6,
            ratio_clip=2.5, chains=2, iter_warmup=1000, iter_sampling=1000)

CONVERGENCE_EXPLAINED = (
    "How to read this: R-hat compares the spread between chains with the spread within them; values near 1 mean "
    "the chains agree (Stan's threshold: <= 1.01). ESS (effective sample size) is how many independent draws the "
    "autocorrelated chains are worth, for the bulk of the distribution and for its tails (want >= 100 per chain). "
    "Private chains move through noise, so they mix more slowly than NUTS: judge the private fit by these numbers "
    "before reporting it. They are computed from the released draws only and cost no privacy."
)


def simulate_logistic(n_rows: int, alpha: float, beta: tuple[float, ...], prior_sd: float, seed: int = 1) -> dict:
    """Simulated logistic-regression rows (x standard normal) for logistic.stan."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, len(beta)))
    p = 1 / (1 + np.exp(-(alpha + x @ np.asarray(beta))))
    y = (rng.uniform(size=n_rows) < p).astype(int)
    return {"N": n_rows, "K": len(beta), "x": x.tolist(), "y": y.tolist(), "prior_sd": prior_sd}


def _scalars(fit: Any) -> dict[str, np.ndarray]:
    """Scalar label ("beta[0]") -> pooled draws of a fit's posterior."""
    from ..output.arviz_compat import get_group

    out = {}
    for name, var in get_group(fit, "posterior").data_vars.items():
        values = np.asarray(var.values, dtype=float)
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        for j in range(flat.shape[1]):
            out[f"{name}[{j}]" if values.ndim > 2 else str(name)] = flat[:, j]
    return out


def plot_marginals(fit: Any, ref: Any, truth: dict[str, float], title: str):
    """One panel per scalar parameter: reference and private marginal densities (histograms of the draws) and
    the value used to simulate the data; returns the matplotlib Figure."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    private, reference = _scalars(fit), _scalars(ref)
    names = [n for n in reference if n in private]
    cols = 2
    rows = int(np.ceil(len(names) / cols))
    figure, axes = plt.subplots(rows, cols, figsize=(9, 3.2 * rows + 0.8), squeeze=False)
    for ax, name in zip(axes.ravel(), names):
        both = np.concatenate([private[name], reference[name]])
        bins = np.linspace(*np.percentile(both, [0.5, 99.5]), 36)
        ax.hist(reference[name], bins=bins, density=True, histtype="stepfilled", alpha=0.35, color="tab:blue",
                label="reference (Stan NUTS, not private)")
        ax.hist(private[name], bins=bins, density=True, histtype="step", linewidth=2, color="tab:red",
                label="private (DP penalty MH)")
        if name in truth:
            ax.axvline(truth[name], color="black", linestyle="--", linewidth=1, label="value used to simulate")
        ax.set_title(name)
        ax.set_xlabel("parameter value")
        ax.set_ylabel("posterior density")
        ax.locator_params(axis="x", nbins=5)
    for ax in axes.ravel()[len(names):]:
        ax.remove()
    handles, labels = axes.ravel()[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3, frameon=False)
    figure.suptitle(title)
    figure.tight_layout(rect=(0, 0.07, 1, 0.95))
    return figure


def run_demo(output_dir: Path, quiet: bool = False) -> None:
    """Run the demo, print its report to stdout and write its files into ``output_dir``."""
    import warnings

    import arviz as az
    import pandas as pd

    from ..model import DPStanModel
    from ..output.compare import HOW_TO_READ, compare
    from ..output.diagnostics import ConvergenceWarning, convergence_text
    from ..privacy.statement import privacy_text

    start = time.time()
    output_dir.mkdir(parents=True, exist_ok=True)
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    eps, delta, chains = DEMO["epsilon"], DEMO["delta"], DEMO["chains"]
    print(f"=== stan-dp demo: logistic regression on N = {DEMO['n_rows']:,} simulated rows ===")
    print(f"Privacy budget of the private run: epsilon = {eps:g}, delta = {delta:g}, for the whole run ({chains} "
          f"chains x ({DEMO['iter_warmup']} warmup + {DEMO['iter_sampling']} sampling) iterations).")
    print(f"Algorithm: DP penalty MH, ratio_clip = {DEMO['ratio_clip']}, chains start at 0. The reference is "
          "Stan's NUTS on the same rows without privacy.\n")
    model = DPStanModel(BUNDLED / "logistic.stan", show_progress=not quiet)
    data = simulate_logistic(DEMO["n_rows"], DEMO["alpha"], DEMO["beta"], DEMO["prior_sd"])
    say(f"Private run (epsilon = {eps:g}, delta = {delta:g}) ...")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # printed with an explanation below
        fit = model.sample(data, algorithm="penalty", epsilon=eps, delta=delta, chains=chains,
                           iter_warmup=DEMO["iter_warmup"], iter_sampling=DEMO["iter_sampling"],
                           inits=np.zeros(1 + len(DEMO["beta"])), ratio_clip=DEMO["ratio_clip"],
                           show_progress=not quiet)
    say("Non-private reference (Stan NUTS on all rows) ...")
    ref = model.reference(data, chains=chains, iter_warmup=DEMO["iter_warmup"],
                          iter_sampling=DEMO["iter_sampling"], seed=2026, show_progress=not quiet)
    fit.to_netcdf(output_dir / "private_fit.nc")
    ref.to_netcdf(output_dir / "reference.nc")
    with pd.option_context("display.width", 120, "display.max_columns", 20), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(f"=== Private fit (epsilon = {eps:g}, delta = {delta:g}) ===")
        print(az.summary(fit))
        print("\n=== Convergence of the private chains ===")
        print(convergence_text(fit))
        print(CONVERGENCE_EXPLAINED)
        print("\n=== Non-private reference (Stan NUTS; not private, for comparison only) ===")
        print(az.summary(ref))
        table = compare(fit, ref)
        print("\n=== Comparison: private vs reference ===")
        print(table.round(3))
    if "mmd" in table.attrs:
        print(f"Joint MMD: {table.attrs['mmd']:.3f}")
    print(HOW_TO_READ)
    print("\n=== Privacy report of the private fit ===")
    print(privacy_text(fit))
    truth = {"alpha": DEMO["alpha"], **{f"beta[{j}]": b for j, b in enumerate(DEMO["beta"])}}
    figure = plot_marginals(fit, ref, truth, f"Logistic regression, N = {DEMO['n_rows']:,}: private posterior "
                                             f"(epsilon = {eps:g}, delta = {delta:g}) vs non-private reference")
    png = output_dir / "marginals.png"
    figure.savefig(png, dpi=100)
    print(f"\nTrue values used to simulate the public demo data: alpha = {DEMO['alpha']}, beta = {list(DEMO['beta'])}")
    print(f"Files written to {output_dir}/: private_fit.nc (the private fit, publishable), reference.nc (NOT "
          f"private), marginals.png (the figure). The simulated data are not written. "
          f"Demo took {time.time() - start:.0f} s.")
