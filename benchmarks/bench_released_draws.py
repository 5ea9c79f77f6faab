"""Do the released draws tell the truth about mixing? R-hat and ESS of the released ``posterior`` group (what
``az.summary`` prints) against the chains' own (``chain_posterior``), and whether any released value is non-finite
or absurd, for ``algorithm="auto"`` on a bounded linear regression of real rows.

The case is posteriordb's earnings (``benchmarks/cases.py``: log(earn) - 10 ~ N(a + b (height - 66) / 4, sigma),
1,192 rows, public centring and the battery's public bound 25), at ``--epsilon`` (default
10), one private run per seed. Per run and per parameter the script prints the released and the chains' R-hat and
bulk ESS, the released sd over the chains' sd (the noise-aware widening), the released mean's distance from the
non-private posterior mean in non-private posterior sds (a Laplace approximation of the full-data posterior: NOT
private, a yardstick computed here only), and then: the largest |R-hat released - R-hat chains|, the count of
non-finite released values, the largest released sigma and the released-draws screen (``attrs["released_draws"]``).

    python benchmarks/bench_released_draws.py                       # seed 1, epsilon 10 (about 3-4 minutes)
    python benchmarks/bench_released_draws.py --seeds 1 2 --epsilon 3
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arviz as az  # noqa: E402

import cases  # noqa: E402
from provenance import comment_header  # noqa: E402
from stan_dp import sample_private  # noqa: E402
from stan_dp.models.numpy_reference import laplace  # noqa: E402
from stan_dp.output.arviz_compat import get_group  # noqa: E402

NAMES = ("alpha", "beta[0]", "sigma")


def _columns(group) -> dict[str, np.ndarray]:
    """(chain, draw) arrays of alpha, beta[0], sigma of one group."""
    return {"alpha": np.asarray(group["alpha"].values), "beta[0]": np.asarray(group["beta"].values)[..., 0],
            "sigma": np.asarray(group["sigma"].values)}


def _summary(fit, group: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return az.summary(fit, group=group)
        except TypeError:  # arviz 0.23 spells the group differently
            return az.summary(getattr(fit, group))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    args = parser.parse_args()
    print(comment_header(), end="")  # command, commit, machine: for a results file made from this output

    model = cases.earnings()
    bounds = {c.name: c.bounds for c in cases.UTILITY_CASES}["earnings"]
    mode, cov = laplace(model)  # NOT private: the yardstick only
    ref_mean = {"alpha": mode[0], "beta[0]": mode[1], "sigma": float(np.exp(mode[2]))}
    ref_sd = {"alpha": np.sqrt(cov[0, 0]), "beta[0]": np.sqrt(cov[1, 1]),
              "sigma": float(np.exp(mode[2]) * np.sqrt(cov[2, 2]))}
    print(f"earnings: N = {model.n_rows}, auto, epsilon = {args.epsilon:g}, delta = {args.delta:g}, bounds "
          f"{bounds}; the yardstick is the non-private Laplace approximation")
    worst_gap, nonfinite_total = 0.0, 0
    for seed in args.seeds:
        start = time.time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit = sample_private(model, algorithm="auto", epsilon=args.epsilon, delta=args.delta, seed=seed,
                                 show_progress=False, **bounds)
        wall = time.time() - start
        released_group = get_group(fit, "posterior")
        released = _columns(released_group)
        has_chains = "chain_posterior" in (fit.children if hasattr(fit, "children") else fit.groups())
        chains = _columns(get_group(fit, "chain_posterior")) if has_chains else released
        table_r = _summary(fit, "posterior")
        table_c = _summary(fit, "chain_posterior") if has_chains else table_r
        print(f"\nseed {seed}: {fit.attrs.get('auto_choice', fit.attrs['algorithm'])}; "
              f"{released['alpha'].shape[0]} chains x {released['alpha'].shape[1]} draws released; {wall:.0f} s")
        print(f"  {'param':8s} {'R-hat rel':>9s} {'R-hat ch':>9s} {'ESS rel':>8s} {'ESS ch':>8s} "
              f"{'sd rel/ch':>9s} {'err (ref sd)':>12s}")
        for name in NAMES:
            r_rel, r_ch = float(table_r.loc[name, "r_hat"]), float(table_c.loc[name, "r_hat"])
            e_rel, e_ch = float(table_r.loc[name, "ess_bulk"]), float(table_c.loc[name, "ess_bulk"])
            ratio = float(np.std(released[name]) / np.std(chains[name]))
            err = abs(float(np.mean(released[name])) - ref_mean[name]) / ref_sd[name]
            worst_gap = max(worst_gap, abs(r_rel - r_ch))
            print(f"  {name:8s} {r_rel:9.3f} {r_ch:9.3f} {e_rel:8.0f} {e_ch:8.0f} {ratio:9.3f} {err:12.2f}")
        nonfinite = int(sum(np.sum(~np.isfinite(v)) for v in released.values()))
        nonfinite_total += nonfinite
        verdict = json.loads(fit.attrs["convergence"])
        print(f"  non-finite released values: {nonfinite}; largest released sigma {np.max(released['sigma']):.4g} "
              f"(non-private posterior mean {ref_mean['sigma']:.4g}); chains' max R-hat "
              f"{verdict['max_rhat'] if verdict['max_rhat'] is not None else float('nan'):.3f}")
        print(f"  released-draws screen: {fit.attrs.get('released_draws')}")
        for w in caught:
            if "Convergence" in str(w.message) or "Released draws" in str(w.message):
                print(f"  warning: {str(w.message)[:300]}")
    print(f"\nlargest |R-hat released - R-hat chains| over seeds and parameters: {worst_gap:.4f} (target <= 0.02); "
          f"non-finite released values: {nonfinite_total}")


if __name__ == "__main__":
    main()
