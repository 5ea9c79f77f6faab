"""Calibration of anchored runs and dp-laplace: how often 90 % central intervals cover the
simulating values.

Over ``--datasets`` simulated logistic regressions (N rows, 3 covariates and an intercept, every row's
||(1, x_i)|| <= ``--bound`` so that the public gradient bound never clips, true coefficients drawn afresh per data
set), one private run each at the budget ``--epsilon`` with the given algorithm and ``anchor='dp-gd'`` (defaults
otherwise). Each run gives two sets of intervals: from the released ``posterior`` group (noise-aware: every draw
shifted by Sigma t, t from the anchor gradient's public noise distribution) and from ``chain_posterior`` (the
unshifted chains, i.e. what ``noise_aware=False`` releases). The script prints, per variant, the fraction of the
(data set, coordinate) pairs whose 90 % interval covers the true value, its binomial standard error, the median
interval width and the number of runs whose chains' R-hat exceeded 1.05.

A Bayesian posterior's intervals cover the truth at about their nominal rate when N is large and the prior is
wide (here N(0, 2.5^2) against true values of scale 1); the privacy noise in G~ tilts the chains' target, so the
unshifted intervals under-cover by a factor that grows with that noise.

``--algorithm dp-laplace`` (no chains: only the released, noise-aware group) and ``--algorithm auto`` (the run
``auto`` makes with ``grad_clip`` alone) are accepted too. Every data set also gets the NON-PRIVATE Laplace
approximation of its posterior (``stan_dp.models.numpy_reference.laplace``: mode and inverse Hessian, accurate
for these near-Gaussian posteriors at N >= 1,000), whose 90 % intervals give the non-private coverage and width
that the private widths are compared with (median over (data set, coordinate) of private width / non-private
width). ``--out FILE`` appends the summary to FILE.

    python benchmarks/bench_anchor_coverage.py                 # 40 data sets, N = 10,000, epsilon 1
    python benchmarks/bench_anchor_coverage.py --datasets 8    # a quicker look
    python benchmarks/bench_anchor_coverage.py --rows 1000 --epsilon 3 --algorithm auto
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.special import expit
from scipy.stats import norm

from stan_dp import sample_private
from stan_dp.models.numpy_reference import laplace
from stan_dp.models.reference_models import LogisticRegressionModel
from provenance import header_for


def simulate(n: int, bound: float, seed: int) -> tuple[LogisticRegressionModel, np.ndarray]:
    """Rows with ||(1, x_i)|| <= bound: standard-normal covariates shrunk radially where they would exceed it."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    limit = np.sqrt(bound ** 2 - 1.0)
    norms = np.linalg.norm(x, axis=1)
    x *= np.minimum(1.0, limit / np.maximum(norms, 1e-300))[:, None]
    truth = np.concatenate([[rng.normal(0.0, 0.5)], rng.normal(0.0, 1.0, size=3)])
    y = (rng.random(n) < expit(truth[0] + x @ truth[1:])).astype(int)
    return LogisticRegressionModel(x, y, prior_sd=2.5), truth


def draws_of(fit, group: str) -> np.ndarray:
    """(chains * draws, 4) array of (alpha, beta[0..2]) from one group."""
    data = fit[group]
    alpha = np.asarray(data["alpha"]).reshape(-1, 1)
    beta = np.asarray(data["beta"])
    return np.hstack([alpha, beta.reshape(-1, beta.shape[-1])])


def chain_rhat(fit) -> float:
    data = fit["chain_posterior"]
    alpha = np.asarray(data["alpha"])
    beta = np.asarray(data["beta"])
    values = np.concatenate([alpha[..., None], beta], axis=-1)  # (chains, draws, 4)
    chains, draws, _ = values.shape
    half = draws // 2
    split = np.concatenate([values[:, :half], values[:, half:2 * half]], axis=0)
    means = split.mean(axis=1)
    within = split.var(axis=1, ddof=1).mean(axis=0)
    between = half * means.var(axis=0, ddof=1)
    return float(np.max(np.sqrt(((half - 1) / half * within + between / half) / within)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=40)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--bound", type=float, default=2.5, help="public ||(1, x)|| bound, used as grad_clip")
    parser.add_argument("--algorithm", default="dp-sgnht",
                        help="a kernel (run with anchor='dp-gd'), 'auto' (grad_clip only) or 'dp-laplace'")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None, help="append the summary to this file")
    parser.add_argument("--clip", default="fixed", choices=("fixed", "adaptive"),
                        help="clip='adaptive' (stan_dp.phases.adaptive_clip) for dp-laplace or an anchored kernel")
    args = parser.parse_args()

    chains = args.algorithm not in ("dp-laplace",)
    groups = ("posterior", "chain_posterior")
    covered = {g: [] for g in groups}
    widths = {g: [] for g in groups}
    ratios = {g: [] for g in groups}
    np_covered, np_widths = [], []
    high_rhat, chosen = 0, set()
    z = norm.ppf(0.95)
    start = time.time()
    for k in range(args.datasets):
        model, truth = simulate(args.rows, args.bound, seed=args.seed * 100_003 + k)
        mode, cov = laplace(model)  # non-private, for the width comparison
        np_half = z * np.sqrt(np.diag(cov))
        np_covered.extend(np.abs(mode - truth) <= np_half)
        np_widths.extend(2 * np_half)
        extra = {} if args.algorithm in ("dp-laplace", "auto") else {"anchor": "dp-gd"}
        if args.clip == "adaptive":
            extra["clip"] = "adaptive"
        fit = sample_private(model, algorithm=args.algorithm, epsilon=args.epsilon, delta=args.delta,
                             grad_clip=args.bound, seed=args.seed * 7919 + k, show_progress=False, **extra)
        chosen.add(str(fit.attrs.get("auto_choice", args.algorithm)))
        names = fit.children if hasattr(fit, "children") else fit.groups()  # DataTree (arviz 1.x) or InferenceData
        present = [g for g in groups if g in names]
        for group in present:
            draws = draws_of(fit, group)
            low, high = np.quantile(draws, [0.05, 0.95], axis=0)
            covered[group].extend((low <= truth) & (truth <= high))
            widths[group].extend(high - low)
            ratios[group].extend((high - low) / (2 * np_half))
        line = f"data set {k + 1}/{args.datasets}: released covers {int(np.sum(covered['posterior'][-4:]))}/4"
        if "chain_posterior" in present:
            rhat = chain_rhat(fit)
            high_rhat += rhat > 1.05
            line += f", unshifted {int(np.sum(covered['chain_posterior'][-4:]))}/4, chain R-hat {rhat:.3f}"
        print(f"{line} ({time.time() - start:.0f} s)", flush=True)

    label = {"dp-laplace": "dp-laplace", "auto": f"auto (chose {', '.join(sorted(chosen))})"}.get(
        args.algorithm, f"{args.algorithm} + anchor='dp-gd'") + (", clip='adaptive'" if args.clip == "adaptive" else "")
    lines = [f"{label}, N = {args.rows}, epsilon = {args.epsilon:g}, delta = {args.delta:g}, grad_clip = "
             f"{args.bound:g}, seed {args.seed}, {args.datasets} data sets x 4 coordinates, 90 % central intervals:"]
    for group, name in (("posterior", "noise-aware (default)"), ("chain_posterior", "unshifted chains")):
        if not covered[group]:
            continue
        c = np.asarray(covered[group], dtype=float)
        se = np.sqrt(c.mean() * (1.0 - c.mean()) / c.size)
        lines.append(f"  {name:24s} coverage {c.mean():.3f} (+- {se:.3f} binomial se), median width "
                     f"{np.median(widths[group]):.4f}, median width / non-private {np.median(ratios[group]):.2f}")
    c = np.asarray(np_covered, dtype=float)
    se = np.sqrt(c.mean() * (1.0 - c.mean()) / c.size)
    lines.append(f"  {'non-private (Laplace)':24s} coverage {c.mean():.3f} (+- {se:.3f} binomial se), median width "
                 f"{np.median(np_widths):.4f}")
    if chains:
        lines.append(f"  runs with chain R-hat > 1.05: {high_rhat} of {args.datasets}")
    lines.append(f"  wall {time.time() - start:.0f} s")
    text = "\n".join(lines)
    print("\n" + text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + header_for(args.out) + text + "\n")


if __name__ == "__main__":
    main()
