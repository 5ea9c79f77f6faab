"""``stan-dp demo`` / ``make demo``: a private fit with the package's defaults and the non-private reference of a
bundled model, side by side. It compiles the demo's program ``logistic.stan`` (shipped in the package next to this
module, so that the demo runs from an installed wheel; the repository's ``stan_models/logistic.stan`` links to it),
simulates a demo data set from a fixed seed (kept in memory, not written), runs the default algorithm (``auto``)
with one public bound and Stan's NUTS without privacy, and prints what each step does, the convergence of the
private chains and of the released draws, the noise-aware intervals next to the non-private ones, the comparison
and the privacy report; it writes the two fits and a figure of the marginal posteriors.

Every setting is a public choice, none tuned on the rows. The covariates are capped at norm ``X_MAX`` (a per-row
rule that reads no other row), so every possible row has ``||(1, x_i)|| <= sqrt(1 + X_MAX^2)``; a logistic row's
log-likelihood gradient is ``(y - p) (1, x_i)`` with ``|y - p| <= 1``, so ``grad_clip`` = that norm bounds every
row and never clips. ``auto`` then runs DP-SGNHT from a private anchor (``stan_dp.run.auto``). The run lengths are
fixed here (the rule of ``stan_dp.methods.kernels.run_lengths`` would run longer) so that the demo takes a few minutes on two
cores after the first compile; the private run is seeded so that the demo prints the same numbers every time (a
seeded run's noise is reproducible by anyone who knows the seed: leave ``seed`` unset for real data).
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

BUNDLED = Path(__file__).resolve().parent  # the folder of the demo's Stan program (package data)

#: cap on the norm of a row's covariates (public preprocessing rule of the demo)
X_MAX = 2.0

#: the demo's settings (public: nothing here is tuned on the data)
DEMO = dict(n_rows=20_000, alpha=-0.5, beta=(1.0, -1.0, 0.5), prior_sd=2.5, epsilon=5.0, delta=1e-6,
            grad_clip=math.ceil(100 * math.sqrt(1 + X_MAX ** 2)) / 100, chains=2, iter_warmup=1000,
            iter_sampling=3000, seed=2026)

CONVERGENCE_EXPLAINED = (
    "How to read this: R-hat compares the spread between chains with the spread within them; near 1 means the "
    "chains agree (want <= 1.05 at least, Stan's strict threshold is 1.01). ESS (effective sample size) is how "
    "many independent draws the autocorrelated chains are worth (want >= 100 per chain for reported tail "
    "intervals: a run for publication would sample longer). Both are computed from released draws only and cost "
    "no privacy. 'chains' are the sampler's own draws; 'released' are the draws in fit.posterior, shifted so that "
    "their spread includes the privacy noise of the anchor (noise-aware). Outside the demo, stan-dp warns "
    "(ConvergenceWarning) when the strict thresholds are not met; the demo prints the verdict here instead."
)


def simulate_logistic(n_rows: int, alpha: float, beta: tuple[float, ...], prior_sd: float, seed: int = 1,
                      max_norm: float | None = None) -> dict:
    """Simulated logistic-regression rows (x standard normal; with ``max_norm``, each row's x scaled down to norm
    at most ``max_norm``) for logistic.stan."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n_rows, len(beta)))
    if max_norm is not None:
        x *= np.minimum(1.0, max_norm / np.maximum(np.linalg.norm(x, axis=1), 1e-300))[:, None]
    p = 1 / (1 + np.exp(-(alpha + x @ np.asarray(beta))))
    y = (rng.uniform(size=n_rows) < p).astype(int)
    return {"N": n_rows, "K": len(beta), "x": x.tolist(), "y": y.tolist(), "prior_sd": prior_sd}


def _scalars(group) -> dict[str, np.ndarray]:
    """Scalar label ("beta[0]") -> all draws of one posterior group."""
    out = {}
    for name, var in group.data_vars.items():
        values = np.asarray(var.values, dtype=float)
        flat = values.reshape(values.shape[0] * values.shape[1], -1)
        for j in range(flat.shape[1]):
            out[name if values.ndim == 2 else f"{name}[{j}]"] = flat[:, j]
    return out


def interval_table(fit, ref, level: float = 0.9):
    """Per scalar: the reference's mean and central ``level`` interval, then the private released (noise-aware)
    draws' and the private chains' own (``chain_posterior``, when there is one)."""
    import pandas as pd

    from ..output.arviz_compat import get_group

    lo, hi = (1 - level) / 2, 1 - (1 - level) / 2
    groups = {"reference": get_group(ref, "posterior"), "private (released)": get_group(fit, "posterior")}
    try:
        groups["private chains"] = get_group(fit, "chain_posterior")
    except (KeyError, AttributeError, ValueError):
        pass
    columns = {}
    for label, group in groups.items():
        for name, draws in _scalars(group).items():
            q = np.quantile(draws, [lo, hi])
            columns.setdefault(name, {})[label] = f"{draws.mean():7.3f} [{q[0]:6.3f}, {q[1]:6.3f}]"
    table = pd.DataFrame(columns).T
    table.columns = [f"{c}: mean [{100 * lo:g}%, {100 * hi:g}%]" for c in table.columns]
    return table


def run_demo(output_dir: Path, quiet: bool = False) -> None:
    """Run the demo, print its report to stdout and write its files into ``output_dir``."""
    import warnings

    import arviz as az
    import pandas as pd

    from ..model import DPStanModel
    from ..output.compare import HOW_TO_READ, compare, plot_compare
    from ..output.diagnostics import ESS_PER_CHAIN_MIN, RHAT_MAX, ConvergenceWarning, convergence
    from ..privacy.statement import privacy_text

    start = time.time()
    output_dir.mkdir(parents=True, exist_ok=True)
    eps, delta, chains, clip = DEMO["epsilon"], DEMO["delta"], DEMO["chains"], DEMO["grad_clip"]
    print(f"=== stan-dp demo: logistic regression on N = {DEMO['n_rows']:,} simulated rows ===")
    print("Step 1: compile the Stan program (cached after the first time).", flush=True)
    model = DPStanModel(BUNDLED / "logistic.stan", show_progress=not quiet)
    data = simulate_logistic(DEMO["n_rows"], DEMO["alpha"], DEMO["beta"], DEMO["prior_sd"], max_norm=X_MAX)
    print(f"Step 2: the private fit, with the default algorithm (auto) and one public bound, grad_clip = {clip:g}:"
          f"\n  one row's log-likelihood gradient is (y - p)(1, x) with |y - p| <= 1, and the covariates are capped "
          f"at norm {X_MAX:g},\n  so no row's gradient exceeds sqrt(1 + {X_MAX:g}^2) = {math.sqrt(1 + X_MAX ** 2):.3f}."
          f" The budget, epsilon = {eps:g} and delta = {delta:g}, covers the whole run\n  ({chains} chains x "
          f"({DEMO['iter_warmup']} warmup + {DEMO['iter_sampling']} sampling) iterations and the anchor phase).",
          flush=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", ConvergenceWarning)  # the verdict is printed in step 4, with both thresholds
        fit = model.sample(data, epsilon=eps, delta=delta, chains=chains, iter_warmup=DEMO["iter_warmup"],
                           iter_sampling=DEMO["iter_sampling"], grad_clip=clip, seed=DEMO["seed"],
                           show_progress=not quiet)
    if quiet:  # otherwise the run has said it on stderr ("auto: ...")
        print(f"  auto: {fit.attrs.get('auto_reason', fit.attrs.get('algorithm'))}")
    print("Step 3: the non-private reference, Stan's NUTS on the same rows (NOT private; for comparison only).",
          flush=True)
    ref = model.reference(data, chains=chains, iter_warmup=1000, iter_sampling=1000, seed=DEMO["seed"],
                          show_progress=not quiet)  # NUTS mixes fast: Stan's default lengths suffice
    fit.to_netcdf(output_dir / "private_fit.nc")
    ref.to_netcdf(output_dir / "reference.nc")
    print("Step 4: check the private run and compare it with the reference.\n")
    with pd.option_context("display.width", 160, "display.max_columns", 20), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        print(f"=== Private fit (epsilon = {eps:g}, delta = {delta:g}): released draws ===")
        print(az.summary(fit))
        print("\n=== Convergence ===")
        for label, group in (("chains", "chain_posterior"), ("released", "posterior")):
            try:
                verdict = convergence(fit, group)
            except (KeyError, AttributeError, ValueError):
                continue
            ok = "converged" if verdict.max_rhat <= 1.05 else "NOT converged"
            strict = "met" if verdict.converged else "not met"
            print(f"  {label:9s} max R-hat {verdict.max_rhat:.3f}, min bulk ESS {verdict.min_ess_bulk:.0f}, "
                  f"min tail ESS {verdict.min_ess_tail:.0f}: {ok} (R-hat <= 1.05); Stan's strict thresholds "
                  f"(R-hat <= {RHAT_MAX}, ESS >= {ESS_PER_CHAIN_MIN} per chain): {strict}")
        print(CONVERGENCE_EXPLAINED)
        print("\n=== 90% intervals: non-private reference vs private (noise-aware released draws, and the chains) ===")
        print(interval_table(fit, ref).to_string())
        print("The released intervals include the uncertainty that the anchor's privacy noise adds to the chains' own "
              "(small at this budget and N).")
        table = compare(fit, ref)
        print("\n=== Comparison: private (released) vs reference ===")
        print(table.round(3).to_string())
    if "mmd" in table.attrs:
        print(f"Joint MMD: {table.attrs['mmd']:.3f}")
    print(HOW_TO_READ)
    print("\n=== Privacy report of the private fit ===")
    print(privacy_text(fit))
    truth = {"alpha": DEMO["alpha"], **{f"beta[{j}]": b for j, b in enumerate(DEMO["beta"])}}
    figure = plot_compare(fit, ref, truth=truth)
    png = output_dir / "marginals.png"
    figure.savefig(png, dpi=100)
    print(f"\nTrue values used to simulate the public demo data: alpha = {DEMO['alpha']}, beta = {list(DEMO['beta'])}")
    print(f"Files written to {output_dir}/: private_fit.nc (the private fit, publishable), reference.nc (NOT "
          f"private), marginals.png (the figure). The simulated data are not written. "
          f"Demo took {time.time() - start:.0f} s.", file=sys.stdout)
