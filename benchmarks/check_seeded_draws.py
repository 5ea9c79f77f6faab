"""Are seeded private runs bit-identical across a change? (a check for refactors; NumPy models, no compiler)

``save OUT`` runs a fixed set of seeded ``sample_private`` calls (penalty with a unit and a diag metric, DP-HMC,
DP-SGLD, DP-SGNHT, DP-Fast MH, OPS, the hybrid, a DP-GD warm start, auto, default run lengths, dp-laplace, anchored
penalty MH) on the NumPy reference models and writes every released array (posterior, sample stats, warmup groups)
to OUT.npz and the attrs (without the creation time) to OUT.json. ``compare A B`` reports the arrays and attrs that differ between
two such saves. Run ``save`` before and after a change (e.g. from two worktrees), then ``compare``.

    python benchmarks/check_seeded_draws.py save runs_before
    python benchmarks/check_seeded_draws.py compare runs_before runs_after
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stan_dp.models.reference_models import GaussianMeanModel, LogisticRegressionModel  # noqa: E402
from stan_dp.output.arviz_compat import get_group, group_names  # noqa: E402
from stan_dp.run.pipeline import sample_private  # noqa: E402

GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats")


def cases() -> dict[str, tuple]:
    rng = np.random.default_rng(0)
    gauss = GaussianMeanModel(rng.normal(1.0, 1.0, size=(400, 2)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    x = rng.normal(size=(300, 2))
    y = (rng.uniform(size=300) < 1 / (1 + np.exp(-(x @ [1.0, -0.5])))).astype(float)
    logit = LogisticRegressionModel(x, y)
    return {
        "penalty": (gauss, dict(algorithm="penalty", ratio_clip=3.0)),
        "penalty-diag": (logit, dict(algorithm="penalty", ratio_clip=3.0, metric="diag")),
        "dp-hmc": (gauss, dict(algorithm="dp-hmc", ratio_clip=3.0, grad_clip=3.0, leapfrog_steps=3,
                                     anchor="none")),
        "dp-sgld": (logit, dict(algorithm="dp-sgld", grad_clip=3.0)),
        "dp-sgnht": (gauss, dict(algorithm="dp-sgnht", grad_clip=10.0)),
        "dp-fast-mh": (gauss, dict(algorithm="dp-fast-mh", row_bound=3.0)),
        "ops": (gauss, dict(algorithm="ops", loglik_bounds=(-60, 0), iter_warmup=100, iter_sampling=3)),
        "hybrid": (gauss, dict(algorithm="hybrid", loglik_bounds=(-60, 0), grad_clip=20.0, warm_start_warmup=100)),
        "warm-dp-gd": (gauss, dict(algorithm="dp-sgld", grad_clip=10.0, warm_start="dp-gd", warm_start_steps=20)),
        "auto": (logit, dict(algorithm="auto", grad_clip=3.0)),
        "run-lengths": (gauss, dict(algorithm="penalty", ratio_clip=3.0, iter_warmup=None, iter_sampling=None)),
        "dp-laplace": (logit, dict(algorithm="dp-laplace", grad_clip=3.0, iter_warmup=0)),
        "anchored-penalty": (logit, dict(algorithm="penalty", ratio_clip=3.0, anchor_grad_clip=3.0,
                                         curvature_clip=1.0)),
    }


def save(out: str) -> None:
    arrays, attrs = {}, {}
    for name, (model, options) in cases().items():
        args = dict(epsilon=2.0, delta=1e-5, chains=2, iter_warmup=60, iter_sampling=50, seed=11,
                    show_progress=False, save_warmup=True)
        args.update(options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(model, **args)
        for group in GROUPS:
            if group in group_names(fit):
                data = get_group(fit, group)
                arrays.update({f"{name}/{group}/{var}": np.asarray(data[var].values) for var in data.data_vars})
        attrs[name] = {k: v for k, v in fit.attrs.items() if k != "created_at"}
        print(name, "saved", flush=True)
    np.savez(out + ".npz", **arrays)
    Path(out + ".json").write_text(json.dumps(attrs, indent=1, sort_keys=True, default=str))


def _same(x: object, y: object) -> bool:
    """Equal attrs, a NaN being equal to a NaN (JSON keeps NaN, and NaN != NaN)."""
    if isinstance(x, float) and isinstance(y, float) and x != x and y != y:
        return True
    return x == y


def compare(a: str, b: str) -> int:
    first, second = np.load(a + ".npz"), np.load(b + ".npz")
    differ = sorted(set(first.files) ^ set(second.files))
    differ += [k for k in sorted(set(first.files) & set(second.files))
               if first[k].dtype != second[k].dtype or not np.array_equal(first[k], second[k], equal_nan=True)]
    attrs_a, attrs_b = json.loads(Path(a + ".json").read_text()), json.loads(Path(b + ".json").read_text())
    differ += [f"{case} attr {key}" for case in sorted(set(attrs_a) | set(attrs_b))
               for key in sorted(set(attrs_a.get(case, {})) | set(attrs_b.get(case, {})))
               if not _same(attrs_a.get(case, {}).get(key), attrs_b.get(case, {}).get(key))]
    print(f"{len(first.files)} arrays and the attrs of {len(attrs_a)} runs compared; {len(differ)} differ")
    for item in differ:
        print("  differs:", item)
    return 1 if differ else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("save").add_argument("out")
    cmp = sub.add_parser("compare")
    cmp.add_argument("a")
    cmp.add_argument("b")
    args = parser.parse_args()
    if args.command == "save":
        save(args.out)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
