#!/usr/bin/env python
"""OPS, the hybrid sampler and private warm starts on small data at small epsilon.

Part A (default): the README logistic model (``stan_models/logistic.stan``: alpha, beta[1..3] ~ N(0, 2.5^2),
y ~ bernoulli_logit(alpha + x beta)) at N = 10,000 with data from ``stan_dp.tools.demo.simulate_logistic`` (seed 1),
rows scaled into the public domain ||(1, x_i)|| <= 2.5 as in ``bench_sg_utility.py`` (so ``grad_clip = 2.5``,
``ratio_clip = row_bound = 2.5`` are public bounds that never clip). epsilon = 1, delta = 1e-5, package defaults
(4 chains x (1000 warmup + 1000 sampling), inits uniform(-2, 2)). The private runs use the NumPy
``LogisticRegressionModel`` (the same model through the row API, faster than the Stan engine); the reference is
Stan's NUTS on ``logistic.stan`` (``DPStanModel.reference``, 4 x (1000 + 1000)), so the two are independent
implementations. OPS and the OPS warm start use ``loglik_bounds = (-5, 0)`` (a Bernoulli row has l_i <= 0; in
the public domain |alpha + x beta| <= 2.5 ||theta|| keeps l_i >= -5 for ||theta|| <= 1.9, so the clip is
inactive near the posterior).

Rows printed: the hybrid (each ``then`` kernel), every kernel with ``warm_start="dp-gd"`` and with
``warm_start="ops"``, OPS alone, and the kernels without a warm start for comparison. Columns, all measured
in this run: max |mean error| over the 4 parameters in reference sds, median sd ratio (private / reference),
max rank-normalised split R-hat (arviz), epsilon spent, wall seconds. Target: the hybrid and the
best warm_start variant each reach max |mean error| <= 1.5 reference sd with R-hat <= 1.1.

Part B (``--part B``): the posteriordb ``wells_data`` (N = 3,020): switched ~ bernoulli_logit(alpha +
beta[1] dist100 + beta[2] educ4) with the public scalings dist100 = dist / 100 and educ4 = educ / 4, each clipped
into a public domain (dist100 in [0, 4], i.e. wells within 400 m; educ4 in [0, 4.5], i.e. at most 18 years of
schooling), so ||(1, x_i)|| <= sqrt(1 + 16 + 20.25) = 6.1 = grad_clip = ratio_clip = row_bound; priors N(0, 2.5^2)
(posteriordb's flat priors are improper). loglik_bounds = (-10, 0). epsilon 1, 4, 16, every algorithm at its
defaults; reference: the package's NumPy NUTS (``stan_dp.samplers.nuts``) on the full, untempered posterior,
4 x (1000 + 1000). Prints max mean error (reference sds) and median sd ratio.

Run: .venv/bin/python benchmarks/bench_ops_hybrid.py [--part A|B] [--seed 1]
     [--quick] [--only WORD ...] (``--only``: part A variants whose name contains a word; ``--quick``: 2 chains x (300 + 300) and fewer rows; not the targets' setting)
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import arviz as az  # noqa: E402

from stan_dp import compare  # noqa: E402
from stan_dp.tools.demo import simulate_logistic  # noqa: E402
from stan_dp.models.reference_models import LogisticRegressionModel  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402

STAN_FILE = ROOT / "stan_models" / "logistic.stan"
WELLS = ROOT / "data" / "posteriordb" / "wells_data.json"
DELTA = 1e-5


def options_for(bound: float, low: float) -> dict[str, dict]:
    """Default options of every algorithm, with the model's public bounds."""
    return {
        "penalty": {"ratio_clip": bound},
        "dp-hmc": {"grad_clip": bound},
        "dp-fast-mh": {"row_bound": bound},
        "dp-fast-mh-full": {"row_bound": bound},
        "dp-sgld": {"grad_clip": bound},
        "dp-sghmc": {"grad_clip": bound},
        "dp-sgnht": {"grad_clip": bound},
        "ops": {"loglik_bounds": (low, 0.0)},
    }


def run(model, ref, algorithm, options, epsilon, chains, warmup, sampling, seed) -> dict:
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm=algorithm, epsilon=epsilon, delta=DELTA, chains=chains,
                             iter_warmup=warmup, iter_sampling=sampling, seed=seed, show_progress=False, **options)
    wall = time.perf_counter() - t0
    table = compare(fit, ref)
    return {"max_err": float(np.max(np.abs(table["mean_diff_sd"]))),
            "sd_ratio": float(np.median(table["sd_ratio"])),
            "rhat": float(np.nanmax(az.rhat(fit).to_array().values)) if sampling > 1 else float("nan"),
            "eps": float(fit.attrs["epsilon_spent"]), "wall": wall}


def fmt(name: str, r: dict, target: bool = False) -> str:
    mark = ""
    if target:
        mark = "  meets target" if (r["max_err"] <= 1.5 and r["rhat"] <= 1.1) else "  misses target"
    return (f"{name:<34} {r['max_err']:>9.2f} {r['sd_ratio']:>9.2f} {r['rhat']:>7.3f} {r['eps']:>8.4f} "
            f"{r['wall']:>7.1f}{mark}")


HEADER = f"{'variant':<34} {'max|err|':>9} {'sd ratio':>9} {'R-hat':>7} {'eps':>8} {'wall s':>7}"


def readme_logistic(n_rows: int, bound: float = 2.5) -> tuple[dict, LogisticRegressionModel]:
    data = simulate_logistic(n_rows, -0.5, (1.0, -1.0, 0.5), 2.5, seed=1)
    x = np.asarray(data["x"])
    limit = np.sqrt(bound ** 2 - 1.0)
    norms = np.linalg.norm(x, axis=1)
    x = x * np.minimum(1.0, limit / np.maximum(norms, 1e-300))[:, None]
    data["x"] = x.tolist()
    return data, LogisticRegressionModel(x, np.asarray(data["y"]), prior_sd=2.5)


def part_a(args) -> None:
    from stan_dp.model import DPStanModel

    n = 2000 if args.quick else 10_000
    chains, warmup, sampling = (2, 300, 300) if args.quick else (4, 1000, 1000)
    data, model = readme_logistic(n)
    t0 = time.perf_counter()
    ref = DPStanModel(STAN_FILE).reference(data, chains=4, iter_warmup=1000, iter_sampling=1000, seed=args.seed,
                                           show_progress=False)
    print(f"Part A: README logistic model, N = {n}, epsilon = 1, delta = {DELTA}, {chains} chains x ({warmup} + "
          f"{sampling}), inits uniform(-2, 2), seed {args.seed}; reference Stan NUTS {time.perf_counter() - t0:.1f} s",
          flush=True)
    opts = options_for(2.5, -5.0)
    print(HEADER)
    variants: list[tuple[str, str, dict, bool]] = []
    for then in ("dp-sgnht", "dp-sgld", "dp-sghmc"):
        variants.append((f"hybrid then={then}", "hybrid",
                         {"then": then, "loglik_bounds": (-5.0, 0.0), **opts[then]}, True))
    for kind in ("dp-gd", "ops"):
        for alg in ("penalty", "dp-hmc", "dp-fast-mh", "dp-sgld", "dp-sghmc", "dp-sgnht"):
            extra = {"warm_start": kind}
            if kind == "ops":
                extra["loglik_bounds"] = (-5.0, 0.0)
            elif "grad_clip" not in opts[alg]:
                extra["warm_start_grad_clip"] = 2.5
            variants.append((f"{alg} warm_start={kind}", alg, {**opts[alg], **extra}, True))
    variants.append(("ops", "ops", opts["ops"], False))
    # the paper's use of OPS: few draws (here one per chain, iter_sampling = 1), so each gets a large epsilon
    variants.append(("ops, 1 draw per chain", "ops", {**opts["ops"], "iter_sampling": 1}, False))
    for alg in ("penalty", "dp-sgnht"):
        variants.append((f"{alg} (no warm start)", alg, opts[alg], False))
    for name, alg, o, target in variants:
        if args.only and not any(word in name for word in args.only):
            continue
        o = dict(o)
        n_sampling = o.pop("iter_sampling", sampling)
        try:
            r = run(model, ref, alg, o, 1.0, chains, warmup, n_sampling, args.seed)
        except (ValueError, FloatingPointError) as exc:
            print(f"{name:<34} failed: {str(exc)[:150]}", flush=True)
            continue
        print(fmt(name, r, target), flush=True)


def wells_model() -> LogisticRegressionModel:
    d = json.loads(WELLS.read_text())
    dist100 = np.clip(np.asarray(d["dist"], dtype=float) / 100.0, 0.0, 4.0)
    educ4 = np.clip(np.asarray(d["educ"], dtype=float) / 4.0, 0.0, 4.5)
    return LogisticRegressionModel(np.column_stack([dist100, educ4]), np.asarray(d["switched"]), prior_sd=2.5)


def nuts_reference(model, chains: int, warmup: int, sampling: int, seed: int):
    from stan_dp.samplers.nuts import NUTS

    def value_and_grad(theta):
        v, g = model.row_log_lik_grad(theta)
        p, pg = model.log_prior_grad(theta)
        return p + float(np.sum(v)), pg + g.sum(axis=0)

    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(chains):
        s = NUTS(value_and_grad, model.dim)
        theta = s.warmup(rng, rng.uniform(-2, 2, size=model.dim), warmup)
        draws.append(s.draws(rng, theta, sampling))
    arr = np.stack(draws)
    return az.from_dict(posterior={"alpha": arr[..., 0], "beta": arr[..., 1:]})


def part_b(args) -> None:
    model = wells_model()
    chains, warmup, sampling = (2, 300, 300) if args.quick else (4, 1000, 1000)
    ref = nuts_reference(model, 4, 1000, 1000, args.seed)
    bound = float(np.sqrt(1.0 + 4.0 ** 2 + 4.5 ** 2))
    opts = options_for(bound, -10.0)
    algorithms = [*opts, "hybrid"]
    print(f"Part B: posteriordb wells_data, N = {model.n_rows}, {chains} chains x ({warmup} + {sampling}), "
          f"bounds {bound:.2f}, loglik_bounds (-10, 0); reference: NumPy NUTS 4 x (1000 + 1000)")
    print(f"{'algorithm':<18} " + " ".join(f"{'eps ' + str(e) + ' err / sd':>20}" for e in (1, 4, 16)))
    for alg in algorithms:
        o = opts.get(alg) or {"loglik_bounds": (-10.0, 0.0), "grad_clip": bound}
        cells = []
        for eps in (1.0, 4.0, 16.0):
            try:
                r = run(model, ref, alg, o, eps, chains, warmup, sampling, args.seed)
                cells.append(f"{r['max_err']:>10.2f} / {r['sd_ratio']:<7.2f}")
            except (ValueError, FloatingPointError) as exc:
                cells.append(f"{'error: ' + type(exc).__name__:>20}")
        print(f"{alg:<18} " + " ".join(cells), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", choices=("A", "B"), default="A")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="+", default=None, help="part A: run only the variants whose name contains one "
                    "of these words")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    (part_a if args.part == "A" else part_b)(args)


if __name__ == "__main__":
    main()
