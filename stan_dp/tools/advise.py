"""``stan_dp.advise`` / ``stan-dp advise``: what to expect from a private run, learned on PUBLIC data.

Give a public or synthetic data set shaped like the private one (same model, similar N and covariate
scales; never the private rows). ``advise`` runs each candidate algorithm there at the planned budget and run
length, compares it with a non-private reference of the PUBLIC data, and reports per algorithm the max |mean
error| and median sd ratio in reference sds, R-hat, MMD and wall time, the algorithm ``auto`` would choose, and
for each clip bound the fraction of the public rows it clips at reference draws. It reads no private data, so it
costs no privacy budget; the private run afterwards spends its budget once.

Reference: the ``reference`` argument (ArviZ data or unconstrained draws (chains, draws, dim)), else Stan NUTS
when a ``DPStanModel`` is given (CLI), else ``stan_dp.models.numpy_reference.reference_draws`` (Laplace-whitened
full-data HMC, accurate for near-Gaussian posteriors such as regressions with hundreds of rows or more).
"""
from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..run.auto import CLIP_OPTIONS, resolve_auto
from .utility import released_matrix, run_and_score

__all__ = ["Advice", "add_advise_arguments", "add_advise_parser", "advise", "clip_fractions", "run_advise"]

NO_PRIVACY_COST = ("advise reads only the public data set you gave it: it costs no privacy budget. Its numbers "
                   "describe the public data; the private data's fit will differ as much as the data sets do.")


@dataclass
class Advice:
    """The outcome of ``advise``: one row per algorithm, the recommendation and the clipping on public data."""

    rows: list[dict[str, Any]]
    recommended: str
    auto_choice: str | None
    clip_fractions: dict[str, float]
    settings: dict[str, Any] = field(default_factory=dict)
    note: str = NO_PRIVACY_COST

    def table(self) -> str:
        """A markdown table of the per-algorithm results."""
        lines = ["| algorithm | max err (sd) | sd ratio | R-hat | MMD | wall s |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            if r.get("error"):
                lines.append(f"| {r['algorithm']} | failed: {r['error']} | | | | |")
                continue
            lines.append(f"| {r['algorithm']} | {r['max_mean_err_sd']:.2f} | {r['median_sd_ratio']:.2f} | "
                         f"{r['rhat']:.2f} | {r['mmd']:.3f} | {r['wall_s']:.1f} |")
        return "\n".join(lines)

    def __str__(self) -> str:
        clips = ", ".join(f"{k}: {v:.1%} of rows clipped" for k, v in self.clip_fractions.items()) or "none given"
        return (f"{self.table()}\n\nrecommended: {self.recommended} (auto would choose {self.auto_choice})\n"
                f"clip bounds on the public data: {clips}\nsettings: {self.settings}\n{self.note}")


def clip_fractions(likelihood: Any, draws: np.ndarray, bounds: dict[str, Any], *, points: int = 20,
                   seed: int = 0) -> dict[str, float]:
    """Fraction of (public) rows clipped by each bound, averaged over ``points`` reference draws.

    ratio_clip / row_bound: rows whose log-likelihood gradient norm exceeds the bound (their ratio for a small
    move along the gradient is clipped); grad_clip: rows whose gradient norm exceeds it; loglik_bounds (lo, hi):
    rows whose log-likelihood lies outside [lo, hi]. ``draws`` are unconstrained (chains, draws, dim).
    """
    flat = np.asarray(draws, dtype=float).reshape(-1, likelihood.dim)
    rng = np.random.default_rng(seed)
    picks = flat[rng.choice(flat.shape[0], size=min(points, flat.shape[0]), replace=False)]
    sums = {k: 0.0 for k in bounds if k in CLIP_OPTIONS}
    for theta in picks:
        values, grads = likelihood.row_log_lik_grad(theta)
        norms = np.linalg.norm(grads, axis=1)
        for key in sums:
            if key == "loglik_bounds":
                lo, hi = bounds[key]
                sums[key] += float(np.mean((values < lo) | (values > hi)))
            else:
                sums[key] += float(np.mean(norms > float(bounds[key])))
    return {k: v / len(picks) for k, v in sums.items()}


def _candidates(bounds: dict[str, Any]) -> list[str]:
    from ..samplers import ALGORITHMS
    from ..samplers.options import spec_of

    out = []
    for name, cls in ALGORITHMS.items():
        if name == "dp-fast-mh-full":
            continue
        spec = spec_of(cls, name)
        required = [o.name for o in spec.options.values() if o.required]
        if all(r in bounds for r in required) and any(k in spec.names for k in bounds):
            out.append(name)
    return out


def advise(
    public_likelihood: Any,
    *,
    epsilon: float,
    delta: float,
    chains: int = 4,
    iter_warmup: int | None = None,
    iter_sampling: int | None = None,
    algorithms: Sequence[str] | None = None,
    reference: Any = None,
    seed: int = 0,
    include_auto: bool = True,
    **bounds: Any,
) -> Advice:
    """Run candidate algorithms on PUBLIC data at the planned budget and compare them with a reference.

    public_likelihood: a ``RowLikelihood`` on public or synthetic rows shaped like the private data (never the
        private rows: these are read without protection).
    epsilon, delta, chains, iter_warmup, iter_sampling: the settings planned for the private run (None: each
        algorithm's default run lengths, ``stan_dp.run.run_lengths``; the recommended settings give the lengths used).
    algorithms: candidates (default: every algorithm whose required options are among ``bounds``).
    reference: ArviZ data or unconstrained draws (chains, draws, dim) of the public posterior; default
        ``stan_dp.models.numpy_reference.reference_draws``.
    bounds: the public clip bounds (any of ratio_clip, grad_clip, row_bound, loglik_bounds).
    Returns an ``Advice``; ``print(advice)`` shows the table, the recommendation and the clipping.
    """
    from ..samplers import ALGORITHMS

    unknown = sorted(k for k in bounds if k not in CLIP_OPTIONS)
    if unknown:
        raise ValueError(f"advise accepts the clip bounds {', '.join(CLIP_OPTIONS)}; got {', '.join(unknown)}.")
    if not bounds:
        raise ValueError("advise needs at least one public clip bound (ratio_clip, grad_clip, row_bound or "
                         "loglik_bounds) to try the algorithms with.")
    if reference is None:
        from ..models.numpy_reference import reference_draws

        ref_unc = reference_draws(public_likelihood, chains=4, draws=1000, seed=seed)
        ref = released_matrix(public_likelihood, ref_unc)
    elif isinstance(reference, np.ndarray):
        ref_unc = reference
        ref = released_matrix(public_likelihood, reference)
    else:
        ref = released_matrix(public_likelihood, reference)
        ref_unc = None
    names = list(algorithms) if algorithms is not None else _candidates(bounds)
    auto_choice = None
    try:
        auto_choice = resolve_auto(n_rows=public_likelihood.n_rows, dim=public_likelihood.dim, epsilon=epsilon,
                                   delta=delta, chains=chains, options=dict(bounds), quiet=True).algorithm
    except ValueError:
        pass
    if include_auto and auto_choice is not None and "auto" not in names:
        names.append("auto")
    rows = []
    for k, name in enumerate(names):
        if name != "auto" and name not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {name!r}; valid: auto, {', '.join(sorted(ALGORITHMS))}.")
        result = run_and_score(public_likelihood, name, bounds, ref, epsilon=epsilon, delta=delta, chains=chains,
                               iter_warmup=iter_warmup, iter_sampling=iter_sampling, seed=seed + 1 + k,
                               score_seed=seed)
        if "error" in result:
            rows.append({"algorithm": name, "error": result["error"]})
            continue
        rows.append({"algorithm": name, **{key: v for key, v in result.items() if key != "chosen"}})
    ok = [r for r in rows if not r.get("error") and math.isfinite(r["max_mean_err_sd"])]
    if not ok:
        recommended = "none (every candidate failed; see the table)"
        settings: dict[str, Any] = {}
    else:
        best = min(ok, key=lambda r: (max(r["max_mean_err_sd"], abs(math.log(max(r["median_sd_ratio"], 1e-9)))),
                                      r["rhat"]))
        recommended = auto_choice if best["algorithm"] == "auto" else best["algorithm"]
        settings = {"chains": chains, "iter_warmup": best["iter_warmup"], "iter_sampling": best["iter_sampling"],
                    **best["options"]}
    if ref_unc is None:  # an ArviZ reference is constrained: take points from the Laplace approximation instead
        from ..models.numpy_reference import laplace

        mode, cov = laplace(public_likelihood)
        ref_unc = np.random.default_rng(seed).multivariate_normal(mode, cov, size=(1, 20))
    fractions = clip_fractions(public_likelihood, ref_unc, bounds, seed=seed)
    return Advice(rows, recommended, auto_choice, fractions, settings)


# ------------------------------------------------------------------------------------------------------ CLI
ADVISE_HELP = "expected error per algorithm, learned on PUBLIC data (costs no privacy)"
ADVISE_DESCRIPTION = ("Run the candidate algorithms on a public or synthetic data set shaped like the private one, "
                      "at the planned budget, against a non-private reference of the public data. " + NO_PRIVACY_COST)


def add_advise_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``stan-dp advise`` (its handler is ``run_advise``)."""
    p.add_argument("model", help="Stan program (.stan)")
    p.add_argument("--data", required=True, help="PUBLIC data as a Stan JSON file (never the private rows)")
    p.add_argument("--epsilon", type=float, required=True, help="the budget you plan for the private run")
    p.add_argument("--delta", type=float, required=True, help="delta you plan for the private run")
    p.add_argument("--chains", type=int, default=4, help="number of chains")
    p.add_argument("--iter-warmup", type=int, default=None, help="warmup iterations per chain (default: each "
                   "algorithm's default run lengths, stan_dp.run.run_lengths)")
    p.add_argument("--iter-sampling", type=int, default=None, help="sampling iterations per chain (default: each "
                   "algorithm's default run lengths)")
    p.add_argument("--algorithm", action="append", help="candidate (repeatable; default: all that fit the bounds)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="public clip bound: ratio_clip=, grad_clip=, row_bound= or loglik_bounds=[lo,hi]")
    p.add_argument("--seed", type=int, default=0, help="seed of the public runs")


def add_advise_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``stan-dp advise`` on an argparse subparsers object; its handler is ``run_advise``."""
    p = subparsers.add_parser("advise", help=ADVISE_HELP, description=ADVISE_DESCRIPTION)
    add_advise_arguments(p)
    p.set_defaults(func=run_advise)
    return p


def run_advise(args: argparse.Namespace) -> int:
    """Handler of ``stan-dp advise``: prints the advice; returns the exit status."""
    import json

    from ..model import DPStanModel

    bounds = {}
    for text in args.option or []:
        if "=" not in text:
            raise ValueError(f"--option expects key=value, got {text!r}")
        key, raw = text.split("=", 1)
        try:
            bounds[key.strip().replace("-", "_")] = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"--option {key}: the value must be a number or a JSON list, got {raw!r}") from None
    model = DPStanModel(args.model)
    likelihood = model.row_likelihood(args.data)
    reference = model.reference(args.data, chains=4, seed=args.seed, show_progress=False)
    advice = advise(likelihood, epsilon=args.epsilon, delta=args.delta, chains=args.chains,
                    iter_warmup=args.iter_warmup, iter_sampling=args.iter_sampling, algorithms=args.algorithm,
                    reference=reference, seed=args.seed, **bounds)
    print(advice)
    return 0
