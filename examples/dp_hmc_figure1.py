"""Reproduce Figure 1 of Räisä, Koskela and Honkela, "Differentially Private Hamiltonian Monte Carlo" (2021).

Figure 1 plots, against epsilon, the MMD between a private sample and 1000 i.i.d. posterior draws, and the
distance between the private sample mean and the posterior mean, for the banana model (top row) and the
10-dimensional Gaussian model (bottom row), n = 100,000 rows, delta = 0.1 / n. This script runs the two
algorithms of the figure that stan-dp implements, DP penalty MH ("penalty") and DP-HMC ("dp-hmc"), through
the package's public entry point ``stan_dp.run.pipeline.sample_private`` on the NumPy reference models
(``stan_dp.models.reference_models.BananaModel`` / ``GaussianMeanModel``), together with the figure's two
stochastic-gradient baselines, DP-SGLD ("dp-sgld") and DP-SGNHT ("dp-sgnht").

Setup taken from the paper (section 4) and, where the text is silent, from the authors' public parameter
files (github.com/DPBayes/DP-HMC-experiments, ``params/*.py`` and ``Snakefile``):

* data: banana sigma0 = 1000, sigma1^2 = 2000, sigma2^2 = 2500, a = 20, theta = (0, 3); Gaussian d = 10,
  mu0 = 0, sigma0 = 100, Sigma with gamma(0.5, 1) eigenvalues and QR eigenvectors, theta = (0, 3, 0, ...);
  simulated here with fixed seeds (the paper's own draws cannot be reproduced, so the Gaussian's Sigma, and
  with it how well the paper's step sizes fit, differs from the paper's);
* 4 chains, the first half of every chain discarded, 10 repeats, epsilon in {2, 4, 6, 8, 10, 12, 15},
  delta = 0.1 / n;
* clip bounds (text, section 4.2): ratio clip b_l = 0.15 / 10 (penalty, banana / Gaussian), 0.1 / 6
  (DP-HMC); gradient clip b_g = 0.05 / 10 (DP-HMC; authors' files);
* step sizes and L (authors' files): penalty proposal sd 0.06 / 0.0007; DP-HMC step 0.006 with L = 25 /
  step 0.00015 with L = 12, unit mass, step size jittered by a randomised Halton sequence in (0, 1) (the
  kernel does this; the nominal value is the largest step, as in the authors' code);
* the number of iterations: the paper fixes the noise (tau_l, tau_g per sqrt(n): penalty 0.17 / 0.05;
  DP-HMC tau_l = 0.1, tau_g = 0.55 / 0.25) and runs as many iterations as the budget then allows, split over
  the 4 chains (the paper's Theorems 2.4 and 3.5). stan-dp is budget-first, so this script computes that same
  iteration count from the paper's tau values (a public computation: epsilon, delta, n and constants),
  asks ``sample_private`` for that many iterations, and lets the package calibrate the noise for the whole
  run. The calibrated tau_l is then the paper's value; for DP-HMC the package splits the budget equally
  between the ratio test and the gradients, so tau_l and tau_g differ a little from the paper's split
  (both are printed);
* DP-SGLD / DP-SGNHT (authors' files ``params/dp-sg*_*.py`` and ``sgld.py``): minibatches of 1000 rows drawn
  without replacement, per-row gradient clip 15 / 0.2 (SGLD, Gaussian / banana) and 12 / 0.2 (SGNHT), constant
  steps eta / n with eta = 0.008 / 1 (SGLD) and 0.2 / 100 (SGNHT), SGNHT diffusion A = 30 / 50, unit metric.
  The authors fix the injected noise (variance eta/n per step for SGLD, 2 A eta/n for SGNHT), i.e. a noise
  multiplier tau_g = q sqrt(m / (eta / n)) / (2 b) (m = 1 or 2A), and run as many iterations as the budget
  then allows (their Fourier accountant); here the iteration count comes from stan-dp's accountant for the same
  tau_g (RDP, the tightest dp-accounting has for sampling without replacement, so somewhat fewer iterations
  than the paper's) and the package then calibrates tau_g for that run. What differs by design: stan-dp's
  DP-SGLD uses the drift (eta/2) g for the noise variance eta (the authors' code uses drift eta g, which
  targets the posterior squared; seed README), and its DP-SGNHT moves theta with the updated momentum.
  With these steps the noise is within the dynamics noise (privacy for free) in both kernels;
 the simulation's true parameter plus Gaussian noise whose sd is the
  mean posterior marginal sd (computed here from public quantities: n, the known variances and the true
  parameter); the same starting points for every algorithm and epsilon within a repeat.
* metrics: ``stan_dp.output.compare.mmd`` (Räisä et al.'s Gaussian kernel with the median heuristic on 500 + 500
  points; samples thinned to at most 2000 evenly spaced draws) against 1000 i.i.d. posterior draws (exact
  Gaussian posterior; ``BananaModel.sample_posterior``); mean error = ||sample mean - exact posterior
  mean||_2.

Privacy: every hyper-parameter above (clip bounds, step sizes, L, noise levels, iteration counts) is a public
constant taken from the paper or its public code; none is tuned here on the (simulated) private rows, and
no adaptation is used (``adapt_engaged=False``). The paper's authors chose them "by manually examining
diagnostics from preliminary runs", which a real private analysis could not do. Two further caveats, both
inherited from the paper's protocol: the starting points use the simulation's true parameter (a stand-in
for a cheap private location estimate that the paper does not charge to the budget), and the runs are
seeded for reproducibility (anyone who knows a seed can regenerate the noise). The numbers are a
reproduction of the paper's experiment, not a private analysis.

Scaling: the paper's grid costs hours on this machine (about 4 * 10 * 7 runs per model, DP-HMC at n = 1e5
with up to 26 gradient evaluations per iteration). The default (full) mode keeps the paper's iteration
counts and noise levels and runs fewer repeats on a subset of the epsilon grid; ``--quick`` also cuts the
iterations (and the package then calibrates less noise per iteration for the same budget). The script
prints what it scaled before running.

Usage::

    .venv/bin/python examples/dp_hmc_figure1.py            # full mode (about 20-30 min on 2 shared cores)
    .venv/bin/python examples/dp_hmc_figure1.py --quick    # a couple of minutes
    .venv/bin/python examples/dp_hmc_figure1.py --epsilons 2 4 6 8 10 12 15 --repeats 10   # the paper's grid

Outputs: ``examples/output/figure1.png`` and ``examples/output/figure1.csv`` (one row per run), and a table
of the numbers on stdout.
"""
from __future__ import annotations

import os

# One BLAS thread per process: the 4 chains already run in parallel threads, and multi-threaded OpenBLAS on
# small (100,000 x 10) products is several times slower than one thread on a shared machine.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import csv  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from stan_dp.output.compare import mmd  # noqa: E402
from stan_dp.privacy import gaussian_rho  # noqa: E402
from stan_dp.models.reference_models import BananaModel, GaussianMeanModel  # noqa: E402
from stan_dp.phases.calibration import account  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402

# ---------------------------------------------------------------------------------------------------------
# the paper's setup (public constants)
# ---------------------------------------------------------------------------------------------------------
N_ROWS = 100_000
DELTA = 0.1 / N_ROWS
CHAINS = 4
REFERENCE_DRAWS = 1000
PAPER_EPSILONS = (2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 15.0)
PAPER_REPEATS = 10

FULL_EPSILONS = (2.0, 4.0, 8.0, 15.0)
FULL_REPEATS = 3
QUICK_EPSILONS = (2.0, 15.0)
QUICK_REPEATS = 1
QUICK_ITER_SCALE = 0.25

MODELS = ("banana", "gauss")
ALGORITHMS = ("penalty", "dp-hmc", "dp-sgld", "dp-sgnht")
MODEL_TITLES = {"banana": "Banana (d = 2)", "gauss": "Gaussian (d = 10)"}
ALGORITHM_LABELS = {"penalty": "DP penalty MH", "dp-hmc": "DP-HMC", "dp-sgld": "DP-SGLD", "dp-sgnht": "DP-SGNHT"}

# fixed seeds (chosen before any run; not selected on results)
DATA_SEEDS = {"banana": 1101, "gauss": 1102}
REFERENCE_SEEDS = {"banana": 2201, "gauss": 2202}
INIT_SEED = 3301
RUN_SEED_BASE = 4_000_000


@dataclass(frozen=True)
class PaperSetting:
    """One (model, algorithm) cell of the paper's experiment. tau values are per sqrt(n), as in the paper."""

    tau_l: float | None
    step_size: float
    ratio_clip: float | None
    tau_g: float | None = None
    grad_clip: float | None = None
    leapfrog_steps: int | None = None
    batch_size: int | None = None  # SG kernels: rows per minibatch (without replacement)
    diffusion: float | None = None  # DP-SGNHT's A

    @property
    def stochastic_gradient(self) -> bool:
        return self.batch_size is not None

    def sg_noise_multiplier(self, n: int) -> float:
        """The authors' fixed noise as a noise multiplier (sigma / (2 b) on the clipped minibatch sum): the
        injected variance eta/n (SGLD) or 2 A eta/n (SGNHT) against the drift (eta/n) (n / B) S."""
        step = self.step_size / n
        mult = 1.0 if self.diffusion is None else 2.0 * self.diffusion
        return (self.batch_size / n) * math.sqrt(mult / step) / (2.0 * self.grad_clip)

    def rho_per_iteration(self, n: int) -> float:
        """zCDP rho of one iteration (the paper's mu, its Theorem 2.4 / 3.5) with the paper's noise levels."""
        rho = 1.0 / (2.0 * self.tau_l**2 * n)
        if self.leapfrog_steps is not None:
            rho += (self.leapfrog_steps + 1) / (2.0 * self.tau_g**2 * n)
        return rho

    def options(self) -> dict:
        if self.stochastic_gradient:
            opts = {"grad_clip": self.grad_clip, "batch_sampling": "uniform", "batch_size": self.batch_size}
            if self.diffusion is not None:
                opts["diffusion"] = self.diffusion
            return opts
        opts = {"ratio_clip": self.ratio_clip}
        if self.leapfrog_steps is not None:
            opts.update(grad_clip=self.grad_clip, leapfrog_steps=self.leapfrog_steps)
        return opts


PAPER = {
    ("banana", "penalty"): PaperSetting(tau_l=0.17, step_size=0.06, ratio_clip=0.15),
    ("gauss", "penalty"): PaperSetting(tau_l=0.05, step_size=0.0007, ratio_clip=10.0),
    ("banana", "dp-hmc"): PaperSetting(tau_l=0.10, tau_g=0.55, step_size=0.006, leapfrog_steps=25,
                                       ratio_clip=0.1, grad_clip=0.05),
    ("gauss", "dp-hmc"): PaperSetting(tau_l=0.10, tau_g=0.25, step_size=0.00015, leapfrog_steps=12,
                                      ratio_clip=6.0, grad_clip=10.0),
    # step_size holds the authors' eta; the step per iteration is eta / n
    ("banana", "dp-sgld"): PaperSetting(tau_l=None, ratio_clip=None, step_size=1.0, grad_clip=0.2, batch_size=1000),
    ("gauss", "dp-sgld"): PaperSetting(tau_l=None, ratio_clip=None, step_size=0.008, grad_clip=15.0,
                                       batch_size=1000),
    ("banana", "dp-sgnht"): PaperSetting(tau_l=None, ratio_clip=None, step_size=100.0, grad_clip=0.2,
                                         batch_size=1000, diffusion=50.0),
    ("gauss", "dp-sgnht"): PaperSetting(tau_l=None, ratio_clip=None, step_size=0.2, grad_clip=12.0,
                                        batch_size=1000, diffusion=30.0),
}


def paper_iterations_per_chain(setting: PaperSetting, epsilon: float, n: int = N_ROWS,
                               delta: float = DELTA, chains: int = CHAINS) -> int:
    """Iterations per chain the paper runs at ``epsilon``: the largest total count whose composition with the
    paper's noise is (epsilon, delta)-DP (closed form of the paper's Theorem 2.4; for the SG kernels stan-dp's
    accountant of the subsampled Gaussian), divided over the chains."""
    if setting.stochastic_gradient:
        tau = setting.sg_noise_multiplier(n)

        def spent(total: int) -> float:
            return account("dp-sgld", delta=delta, chains=1, iterations=total, n_rows=n, tau_g=tau,
                           batch_sampling="uniform", batch_size=setting.batch_size).epsilon

        lo, hi = 0, chains
        while spent(hi) <= epsilon:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if spent(mid) <= epsilon else (lo, mid)
        return lo // chains
    total = math.floor(gaussian_rho(epsilon, delta) / setting.rho_per_iteration(n))
    return total // chains


# ---------------------------------------------------------------------------------------------------------
# models, reference samples, public starting points
# ---------------------------------------------------------------------------------------------------------
def build_model(name: str):
    if name == "banana":
        return BananaModel.simulate(N_ROWS, seed=DATA_SEEDS[name])
    return GaussianMeanModel.simulate(N_ROWS, 10, seed=DATA_SEEDS[name])


def reference_sample(name: str, model) -> np.ndarray:
    """REFERENCE_DRAWS i.i.d. draws from the exact posterior (the paper's reference sample)."""
    rng = np.random.default_rng(REFERENCE_SEEDS[name])
    if name == "banana":
        return model.sample_posterior(REFERENCE_DRAWS, rng)
    return rng.multivariate_normal(model.posterior_mean(), model.posterior_cov(), size=REFERENCE_DRAWS)


def public_posterior_sd(name: str, model) -> np.ndarray:
    """Posterior marginal sds computed without the rows: the Gaussian posterior covariance depends only on n,
    the known covariance and the prior; for the banana the only data-dependent term (mu_1) is replaced by
    the simulation's true theta_1."""
    if name == "gauss":
        return np.sqrt(np.diag(model.posterior_cov()))
    n, a = model.n_rows, model.a
    tau0 = 1.0 / model.prior_sd**2
    var1 = 1.0 / (n / model.sigma1_sq + tau0)
    var2 = 1.0 / (n / model.sigma2_sq + tau0)
    t1 = float(model.true_theta[0])
    return np.sqrt([var1, var2 + a**2 * (2.0 * var1**2 + 4.0 * t1**2 * var1)])


def starting_points(name: str, model, repeats: int) -> np.ndarray:
    """(repeats, CHAINS, dim) starting points: true theta + N(0, s^2 I), s = mean public posterior sd."""
    scale = float(np.mean(public_posterior_sd(name, model)))
    rng = np.random.default_rng([INIT_SEED, MODELS.index(name)])
    return model.true_theta + scale * rng.standard_normal((repeats, CHAINS, model.dim))


# ---------------------------------------------------------------------------------------------------------
# one run
# ---------------------------------------------------------------------------------------------------------
def run_one(name: str, model, algorithm: str, epsilon: float, repeat: int, iterations: int,
            inits: np.ndarray, reference: np.ndarray, posterior_mean: np.ndarray) -> dict:
    setting = PAPER[(name, algorithm)]
    warmup = iterations // 2
    sampling = iterations - warmup
    seed = RUN_SEED_BASE + 100_000 * MODELS.index(name) + 10_000 * ALGORITHMS.index(algorithm) \
        + 100 * int(round(epsilon)) + repeat
    start = time.perf_counter()
    # SG kernels: the authors' eta is per n (step eta / n on the unit metric); MH kernels: the step itself
    step = setting.step_size / model.n_rows if setting.stochastic_gradient else setting.step_size
    fit = sample_private(
        model,
        algorithm=algorithm,
        epsilon=epsilon,
        delta=DELTA,
        chains=CHAINS,
        iter_warmup=warmup,
        iter_sampling=sampling,
        seed=seed,
        inits=inits,
        step_size=step,
        metric="unit",
        adapt_engaged=False,  # the paper's fixed step sizes; nothing is adapted
        show_progress=False,
        **setting.options(),
    )
    seconds = time.perf_counter() - start
    draws = np.asarray(fit.posterior["theta"].values, dtype=float).reshape(-1, model.dim)
    calibration = json.loads(fit.attrs["noise_calibration"])
    sqrt_n = math.sqrt(model.n_rows)
    return {
        "model": name,
        "algorithm": algorithm,
        "epsilon": epsilon,
        "repeat": repeat,
        "iterations_per_chain": iterations,
        "paper_iterations_per_chain": paper_iterations_per_chain(setting, epsilon),
        "epsilon_spent": float(fit.attrs["epsilon_spent"]),
        "tau_l": (calibration["tau_l"] / sqrt_n) if calibration.get("tau_l") is not None else float("nan"),
        "tau_g": (calibration["tau_g"] / sqrt_n) if calibration.get("tau_g") is not None else float("nan"),
        "tau_g_raw": float(calibration["tau_g"]) if calibration.get("tau_g") is not None else float("nan"),
        "acceptance": float(np.mean(fit.sample_stats["accepted"].values)),
        "mmd": mmd(draws, reference),
        "mean_error": float(np.linalg.norm(draws.mean(axis=0) - posterior_mean)),
        "seconds": seconds,
    }


# ---------------------------------------------------------------------------------------------------------
# reporting
# ---------------------------------------------------------------------------------------------------------
def print_scaling(epsilons, repeats, iter_scale, models, algorithms) -> None:
    print("Räisä, Koskela and Honkela (2021) Figure 1 reproduction: what differs from the paper")
    print(f"  epsilons : {', '.join(f'{e:g}' for e in epsilons)}   (paper: "
          f"{', '.join(f'{e:g}' for e in PAPER_EPSILONS)})")
    print(f"  repeats  : {repeats}   (paper: {PAPER_REPEATS})")
    if iter_scale == 1.0:
        print("  iterations: the paper's counts (set by the paper's noise levels and the budget); noise levels as"
              " in the paper")
    else:
        print(f"  iterations: {iter_scale:g} x the paper's counts; the package calibrates the noise to the same"
              " budget, so every iteration is LESS noisy than in the paper")
    print("  SG kernels: iteration counts from stan-dp's RDP accountant for the authors' noise (the paper: Fourier "
          "accountant); DP-SGLD drift corrected to (eta/2) g")
    print("  data      : simulated with this script's fixed seeds, not the paper's draws")
    print(f"  unchanged : n = {N_ROWS:,}, delta = 0.1/n = {DELTA:g}, {CHAINS} chains, first half discarded, "
          f"{REFERENCE_DRAWS} i.i.d. reference draws, clip bounds, step sizes and L of the paper")
    print()
    header = f"  {'model':<7} {'algorithm':<8} " + " ".join(f"{'eps=' + format(e, 'g'):>9}" for e in epsilons)
    print("Iterations per chain (paper -> this run):")
    print(header)
    for name in models:
        for algorithm in algorithms:
            setting = PAPER[(name, algorithm)]
            cells = []
            for eps in epsilons:
                k = paper_iterations_per_chain(setting, eps)
                cells.append(f"{k}->{scaled_iterations(k, iter_scale)}")
            print(f"  {name:<7} {algorithm:<8} " + " ".join(f"{c:>9}" for c in cells))
    print()
    sys.stdout.flush()


def scaled_iterations(paper_iterations: int, iter_scale: float) -> int:
    return max(2, int(round(paper_iterations * iter_scale)))


def summarise(rows: list[dict], models, algorithms, epsilons) -> None:
    print()
    print("Results: median over repeats [min, max]; tau per sqrt(n) as calibrated (paper's value in parentheses)")
    cols = (f"{'model':<7} {'algorithm':<8} {'eps':>4} {'iters':>6} {'tau_l':>14} {'tau_g':>14} "
            f"{'accept':>6} {'MMD':>24} {'mean error':>30}")
    print(cols)
    print("-" * len(cols))
    for name in models:
        for algorithm in algorithms:
            setting = PAPER[(name, algorithm)]
            for eps in epsilons:
                cell = [r for r in rows if r["model"] == name and r["algorithm"] == algorithm
                        and r["epsilon"] == eps]
                if not cell:
                    continue
                m = np.array([r["mmd"] for r in cell])
                e = np.array([r["mean_error"] for r in cell])
                acc = np.median([r["acceptance"] for r in cell])
                if setting.stochastic_gradient:
                    tau_l = "-"
                    tau_g = f"{cell[0]['tau_g_raw']:.3f} ({setting.sg_noise_multiplier(N_ROWS):.3f})"
                else:
                    tau_l = f"{cell[0]['tau_l']:.3f} ({setting.tau_l:g})"
                    tau_g = "-" if setting.tau_g is None else f"{cell[0]['tau_g']:.3f} ({setting.tau_g:g})"
                print(f"{name:<7} {algorithm:<8} {eps:>4g} {cell[0]['iterations_per_chain']:>6d} {tau_l:>14} "
                      f"{tau_g:>14} {acc:>6.3f} "
                      f"{np.median(m):>7.3f} [{m.min():.3f}, {m.max():.3f}] "
                      f"{np.median(e):>9.3g} [{e.min():.3g}, {e.max():.3g}]")
    sys.stdout.flush()


def plot(rows: list[dict], models, algorithms, epsilons, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"penalty": "tab:orange", "dp-hmc": "tab:blue", "dp-sgld": "tab:green", "dp-sgnht": "tab:red"}
    offsets = {"penalty": -0.2, "dp-hmc": -0.07, "dp-sgld": 0.07, "dp-sgnht": 0.2}
    fig, axes = plt.subplots(len(models), 2, figsize=(10, 3.6 * len(models)), squeeze=False)
    for i, name in enumerate(models):
        for j, (key, label) in enumerate((("mmd", "MMD"), ("mean_error", "mean error"))):
            ax = axes[i, j]
            for algorithm in algorithms:
                xs, meds = [], []
                for eps in epsilons:
                    vals = [r[key] for r in rows if r["model"] == name and r["algorithm"] == algorithm
                            and r["epsilon"] == eps]
                    if not vals:
                        continue
                    ax.scatter(np.full(len(vals), eps + offsets[algorithm]), vals, s=14, alpha=0.5,
                               color=colours[algorithm])
                    xs.append(eps)
                    meds.append(float(np.median(vals)))
                ax.plot(xs, meds, marker="o", color=colours[algorithm], label=ALGORITHM_LABELS[algorithm])
            ax.set_xlabel("epsilon")
            ax.set_ylabel(label)
            ax.set_title(f"{MODEL_TITLES[name]}: {label}")
            if key == "mean_error":
                ax.set_yscale("log")
            ax.set_xticks(list(epsilons))
            ax.grid(alpha=0.3)
            ax.legend()
    fig.suptitle(f"{', '.join(ALGORITHM_LABELS[a] for a in algorithms)}, n = {N_ROWS:,}, delta = 0.1/n "
                 f"(points: repeats; line: median)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_csv(rows: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


# ---------------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"quick mode: epsilons {QUICK_EPSILONS}, {QUICK_REPEATS} repeat, "
                             f"{QUICK_ITER_SCALE:g} x the paper's iterations (a couple of minutes)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=None,
                        help=f"epsilon values (full mode default: {' '.join(f'{e:g}' for e in FULL_EPSILONS)})")
    parser.add_argument("--repeats", type=int, default=None, help=f"repeats (full mode default: {FULL_REPEATS})")
    parser.add_argument("--iter-scale", type=float, default=None,
                        help="multiply the paper's iteration counts (full mode default: 1)")
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--algorithms", nargs="+", choices=ALGORITHMS, default=list(ALGORITHMS))
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "output",
                        help="output directory (default: examples/output)")
    args = parser.parse_args(argv)

    epsilons = tuple(args.epsilons) if args.epsilons else (QUICK_EPSILONS if args.quick else FULL_EPSILONS)
    repeats = args.repeats if args.repeats is not None else (QUICK_REPEATS if args.quick else FULL_REPEATS)
    iter_scale = args.iter_scale if args.iter_scale is not None else (QUICK_ITER_SCALE if args.quick else 1.0)
    if repeats < 1 or iter_scale <= 0 or any(e <= 0 for e in epsilons):
        parser.error("repeats must be >= 1, --iter-scale > 0 and every epsilon > 0")
    models, algorithms = tuple(args.models), tuple(args.algorithms)

    print_scaling(epsilons, repeats, iter_scale, models, algorithms)
    wall = time.perf_counter()
    rows: list[dict] = []
    for name in models:
        model = build_model(name)
        reference = reference_sample(name, model)
        posterior_mean = model.posterior_mean()
        inits = starting_points(name, model, repeats)
        extra = ""
        if name == "gauss":
            eig = np.linalg.eigvalsh(model.obs_cov)
            extra = f"; eigenvalues of Sigma {eig.min():.3g} .. {eig.max():.3g}"
        print(f"[{name}] n = {model.n_rows:,}, dim = {model.dim}, true theta = {np.round(model.true_theta, 3)}, "
              f"posterior mean = {np.round(posterior_mean, 4)}{extra}")
        for algorithm in algorithms:
            setting = PAPER[(name, algorithm)]
            for eps in epsilons:
                iterations = scaled_iterations(paper_iterations_per_chain(setting, eps), iter_scale)
                for r in range(repeats):
                    row = run_one(name, model, algorithm, eps, r, iterations, inits[r], reference, posterior_mean)
                    rows.append(row)
                    print(f"  {name:<6} {algorithm:<7} eps={eps:<4g} repeat {r + 1}/{repeats}: "
                          f"{iterations} it/chain, accept {row['acceptance']:.3f}, MMD {row['mmd']:.3f}, "
                          f"mean error {row['mean_error']:.3g}  ({row['seconds']:.1f} s)", flush=True)

    summarise(rows, models, algorithms, epsilons)
    figure = args.out / "figure1.png"
    table = args.out / "figure1.csv"
    plot(rows, models, algorithms, epsilons, figure)
    write_csv(rows, table)
    print()
    print(f"Figure: {figure}")
    print(f"Per-run numbers: {table}")
    print(f"Wall time: {time.perf_counter() - wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
