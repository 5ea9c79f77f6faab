"""Sample a release-once method's noise-aware posterior until the draws have converged.

A release-once method (dp-ssp, dp-glm) spends the whole budget on one release; its posterior given the release
is written as a Stan program (``stan_dp.stan.posterior_program``) whose data are the release and public inputs.
Sampling it is post-processing, so convergence costs compute, never budget: this module runs Stan's NUTS
(``stan_dp.stan.nuts_service``) in rounds and stops at the first round whose draws pass the usual thresholds on
every released scalar (rank-normalised split R-hat <= 1.01, bulk and tail ESS >= 100 per chain:
``stan_dp.output.diagnostics``), or when the next round would exceed the compute cap.

Round k runs 2^k times the base warmup and sampling iterations from fresh, overdispersed starts and keeps every
2^k-th draw, so the released draws always number ``draws`` per chain and each round's chains are longer than the
last. Each round's seed comes from the caller's public generator. The record of the rounds (lengths, R-hat, ESS)
is released with the draws; wall-clock time is not (it would only say how fast this machine was).
"""
from __future__ import annotations

import dataclasses
import json
import math
import time
import warnings
from typing import Any, Callable, Mapping

import numpy as np

import bridgestan

from ..likelihood import PriorProgram
from ..output.arviz_compat import rhat_ess
from ..output.diagnostics import ESS_PER_CHAIN_MIN, RHAT_MAX, attach_convergence
from ..output.inference_data import RunRecord, build_inference_data
from ..output.run_result import ChainResult, RunResult
from ..stan.data import to_json
from ..stan.nuts_service import NutsRun, run_stan_nuts
from ..stan.posterior_program import PosteriorPieces, build_posterior_program

__all__ = ["ConvergencePolicy", "RoundRecord", "PosteriorDraws", "sample_until_converged", "KEPT_STATS",
           "load_posterior_program"]

#: sampler columns released with the draws (the noise-aware program's lp and energy are left out: they are
#: post-processing of the release, but read like the log densities a private run never publishes)
KEPT_STATS = ("acceptance_rate", "step_size", "tree_depth", "n_steps", "diverging")


@dataclasses.dataclass(frozen=True)
class ConvergencePolicy:
    """When to stop: ``rhat_max`` and ``ess_per_chain`` (bulk and tail) on every released scalar; base lengths
    ``warmup`` and ``draws`` per chain; at most ``max_rounds`` rounds and ``time_cap`` seconds of sampling (a
    round is not started when its expected time, twice the last round's, would pass the cap)."""

    rhat_max: float = RHAT_MAX
    ess_per_chain: float = ESS_PER_CHAIN_MIN
    warmup: int = 1000
    draws: int = 1000
    max_rounds: int = 5
    time_cap: float = 900.0
    adapt_delta: float = 0.9
    max_depth: int = 10
    #: a dense metric: the noise-aware posteriors couple the coefficients with the latent statistics
    dense: bool = True

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class RoundRecord:
    """One round: its warmup and sampling iterations per chain, the thinning, and the worst R-hat and smallest
    bulk / tail ESS over the released scalars of its kept draws."""

    warmup: int
    sampling: int
    thin: int
    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    divergent: int

    def passed(self, policy: ConvergencePolicy, chains: int) -> bool:
        need = policy.ess_per_chain * chains
        return (math.isfinite(self.max_rhat) and self.max_rhat <= policy.rhat_max
                and self.min_ess_bulk >= need and self.min_ess_tail >= need)


@dataclasses.dataclass(frozen=True)
class PosteriorDraws:
    """The released draws: ``draws`` (chains, draws, dim) on the program's unconstrained scale, ``stats`` the
    kept sampler columns (chains, draws), the rounds run, whether the last one passed, and why sampling stopped
    ("converged", "compute cap" or "round limit")."""

    draws: np.ndarray
    stats: dict[str, np.ndarray]
    rounds: tuple[RoundRecord, ...]
    converged: bool
    stopped_by: str
    step_sizes: np.ndarray

    def record(self) -> str:
        """The rounds as JSON (attrs): lengths and diagnostics, no timing."""
        return json.dumps({"converged": int(self.converged), "stopped_by": self.stopped_by,
                           "rounds": [dataclasses.asdict(r) for r in self.rounds]})

    def run_result(self, *, seeded: bool, init_description: str) -> RunResult:
        """The draws as the output stage reads them (one ChainResult per chain; the last round's lengths)."""
        chains, kept, dim = self.draws.shape
        last = self.rounds[-1]
        results = [ChainResult(draws=self.draws[c], stats={k: v[c] for k, v in self.stats.items()},
                               warmup_draws=None, warmup_stats={}, n_warmup=last.warmup, n_sampling=kept,
                               step_size=float(self.step_sizes[c]), metric=np.ones(dim), init=self.draws[c, 0])
                   for c in range(chains)]
        return RunResult(chains=results, dim=dim, iter_warmup=last.warmup, iter_sampling=kept, save_warmup=False,
                         interrupted=False, seeded=seeded, metric_kind="Stan's adaptation",
                         target_accept=0.9, initial_step_size=1.0, adapt_engaged=True,
                         init_description=init_description, stat_names=list(self.stats))


def load_posterior_program(prior: PriorProgram, pieces: PosteriorPieces, data: Mapping[str, Any], *,
                           show_progress: bool = True) -> tuple[Any, Any, str]:
    """Compile (cached) the noise-aware posterior program of ``prior`` and ``pieces`` and load it on ``data`` (the
    prior's public data with the release and public constants): (``bridgestan.StanModel``, library path, text)."""
    library, text = build_posterior_program(prior, pieces, progress=show_progress)
    model = bridgestan.StanModel(str(library), to_json(dict(data)), seed=1, warn=False)
    return model, library, text


def _diagnose(values: np.ndarray) -> tuple[float, float, float]:
    """Worst R-hat and smallest bulk / tail ESS over the scalars of (chains, draws, k) ``values``."""
    worst, bulk, tail = 0.0, math.inf, math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in range(values.shape[2]):
            column = values[:, :, j]
            if not np.all(np.isfinite(column)) or np.ptp(column) == 0:
                return math.nan, math.nan, math.nan
            r, b, t = rhat_ess(column)
            worst, bulk, tail = max(worst, r), min(bulk, b), min(tail, t)
    return worst, bulk, tail


def sample_until_converged(model: Any, library_path: Any, *, prefix: str, dim: int, chains: int,
                           rng: np.random.Generator, policy: ConvergencePolicy,
                           inits: Callable[[np.random.Generator], Mapping[str, Any]] | None = None,
                           label: str = "noise-aware posterior", show_progress: bool = True) -> PosteriorDraws:
    """Rounds of Stan's NUTS on ``model`` (a ``bridgestan.StanModel`` of the noise-aware program at
    ``library_path``) until the user's parameters (the constrained columns whose names do not start with
    ``prefix``, the added parameters' prefix) pass ``policy``. ``dim``: the user's unconstrained dimension (the first ``dim`` unconstrained coordinates of the
    program are the user's parameters, in the same order); ``inits(rng)``: a partial init (the added parameters)
    for one chain, drawn with public randomness; ``rng``: the public generator of seeds and inits."""
    rounds: list[RoundRecord] = []
    names = list(model.param_names())
    n_params = len(names)
    released_columns = sum(1 for name in names if not name.startswith(prefix))
    values = stats = None
    stopped, last_seconds = "round limit", 0.0
    spent = 0.0
    for k in range(int(policy.max_rounds)):
        factor = 2**k
        if k and spent + 2.0 * last_seconds > policy.time_cap:
            stopped = "compute cap"
            break
        run = NutsRun(chains=chains, iter_warmup=policy.warmup * factor, iter_sampling=policy.draws * factor,
                      seed=int(rng.integers(1, 2**31 - 1)), first_chain=1,
                      inits=[to_json(dict(inits(rng))) if inits is not None else None for _ in range(chains)],
                      adapt_delta=policy.adapt_delta, max_depth=policy.max_depth, dense=policy.dense)
        started = time.monotonic()
        result = run_stan_nuts(model, library_path, run, label=f"{label} (round {k + 1})", show_progress=show_progress)
        last_seconds = time.monotonic() - started
        spent += last_seconds
        keep = slice(factor - 1, None, factor)
        values = result.values[:, keep, :]
        stats = {name: result.stats[name][:, keep] for name in KEPT_STATS}
        worst, bulk, tail = _diagnose(values[:, :, :released_columns])
        record = RoundRecord(warmup=run.iter_warmup, sampling=run.iter_sampling, thin=factor, max_rhat=worst,
                             min_ess_bulk=bulk, min_ess_tail=tail,
                             divergent=int(np.sum(result.stats["diverging"])))
        rounds.append(record)
        if record.passed(policy, chains):
            stopped = "converged"
            break
    assert values is not None and stats is not None
    flat = values[:, :, :n_params].reshape(-1, n_params)
    unconstrained = np.array([model.param_unconstrain(np.ascontiguousarray(row)) for row in flat])
    draws = unconstrained[:, :dim].reshape(chains, -1, dim)
    steps = stats["step_size"][:, -1] if stats["step_size"].size else np.full(chains, np.nan)
    return PosteriorDraws(draws=draws, stats=stats, rounds=tuple(rounds), converged=stopped == "converged",
                          stopped_by=stopped, step_sizes=np.asarray(steps, dtype=float))


def publish_release(result: RunResult, likelihood: Any, plan: Any, *, released: str, program: str, sampling: Any,
                    target: str, expected_error: float, extra_attrs: Mapping[str, Any], debug: bool = False,
                    model_name: str | None = None, source_hash: str | None = None) -> Any:
    """ArviZ data of a release-once run (dp-ssp, dp-glm): the draws of its noise-aware program constrained with the
    data-free instance, the privacy report and the plan, the guarantee (post-processing of ``released``, the
    Gaussian releases in words), the method's own ``extra_attrs`` (its releases), the noise-aware program, the
    NUTS rounds' record (``sampling``, or None), what the draws target, the expected error and the convergence
    verdict. Post-processing only; ``debug`` is refused (no log density is evaluated on the rows)."""
    if debug:
        raise ValueError(plan.debug_refusal)
    report = plan.privacy.report()
    record = RunRecord(plan.algorithm, plan.describe(), report, plan=plan.privacy, model_name=model_name,
                       source_hash=source_hash, run_options={})
    fit = build_inference_data(result, likelihood, record)
    fit.attrs["privacy_guarantee"] = (
        f"The posterior group is ({float(report.epsilon):.6g}, {float(report.delta):.6g})-differentially private "
        f"with respect to {report.neighbouring_relation}: it is post-processing of {released} (listed in "
        "privacy_mechanisms); any number of draws.")
    fit.attrs.update(extra_attrs)
    fit.attrs["noise_aware_program"] = program
    if sampling is not None:
        fit.attrs["posterior_sampling"] = sampling.record()
    fit.attrs["posterior_target"] = target
    fit.attrs["expected_error_sd"] = float(expected_error)
    attach_convergence(fit, group="posterior")
    return fit
