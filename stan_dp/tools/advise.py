"""``stan_dp.advise`` / ``stan-dp advise``: what to expect from a private run, learned on PUBLIC data.

Give a public or synthetic data set shaped like the private one (same model, similar N and covariate
scales; never the private rows). ``advise`` runs each candidate algorithm there at the planned budget and run
length, compares it with a non-private reference of the PUBLIC data, and reports per algorithm the max |mean
error| and median sd ratio in reference sds, R-hat, MMD and wall time, the algorithm ``auto`` would choose, and
for each clip bound the fraction of the public rows it clips at reference draws. It takes every option the
private run will take (inits, clip bounds, algorithm, run-level and warm-start options), runs each candidate once,
says which one it is running, and says plainly when no candidate reached the target (max error <= 0.3 reference
sd and R-hat <= 1.05, the README's "good"), with the error to expect instead. It reads no private data, so it
costs no privacy budget; the private run afterwards spends its budget once.

Reference: the ``reference`` argument (ArviZ data or unconstrained draws (chains, draws, dim)), else Stan NUTS
when a ``DPStanModel`` is given (CLI), else ``stan_dp.models.numpy_reference.reference_draws`` (Laplace-whitened
full-data HMC, accurate for near-Gaussian posteriors such as regressions with hundreds of rows or more).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..methods import registry
from ..phases.anchor import asks_anchor
from ..likelihood import RowLikelihood
from ..privacy.units import UnitLikelihood, unit_noun
from ..run.auto import CLIP_OPTIONS, resolve_auto
from ..run.pipeline import as_unit_likelihood, public_facts
from ..run_options import RUN_LEVEL_OPTIONS, parse_option, unit_options
from ..stan.data import load_data
from ..stan.glm_program import program_row_bounds, unit_row_bounds
from ..stan.linear_program import ssp_ready
from ..stan.row_tables import read_row_data
from ..stan.toolchain import canonical_program
from ..stan.units import resolve_privacy_unit
from ..suggest import did_you_mean
from .advise_arguments import ADVISE_DESCRIPTION, ADVISE_HELP, NO_PRIVACY_COST, add_advise_arguments
from .utility import TrialRun, options_for, released_matrix, run_and_score, split_variant

__all__ = ["Advice", "add_advise_arguments", "add_advise_parser", "advise", "clip_fractions", "run_advise"]

#: a candidate reached the target when its max error is at most this many reference sds ...
TARGET_ERROR_SD = 0.3
#: ... and its R-hat at most this (the README's "a fit is good below about 0.3 / 1.05")
TARGET_RHAT = 1.05

@dataclass
class Advice:
    """The outcome of ``advise``: one row per algorithm, the recommendation and the clipping on public data."""

    rows: list[dict[str, Any]]
    recommended: str
    auto_choice: str | None
    clip_fractions: dict[str, float]
    settings: dict[str, Any] = field(default_factory=dict)
    #: the recommendation in words, or "no candidate reached the target; expect ..."
    verdict: str = ""
    note: str = NO_PRIVACY_COST
    #: when dp-laplace is a candidate and auto does not choose it: why (``stan_dp.run.auto.LAPLACE_NOT_CHOSEN``)
    laplace_note: str = ""
    #: the price in advance, from public inputs only: dp-ssp's (``stan_dp.methods.dp_ssp.ssp.ssp_floor``), or a logistic
    #: program's through the public data's curvature (``stan_dp.methods.dp_glm.glm_price``)
    price: str = ""
    #: whose price it is ("dp-ssp", "logistic")
    price_label: str = "dp-ssp"
    #: the floor as a table row (max error, width ratio), or None
    floor: tuple[float, float] | None = None
    #: what one clipped contribution is: "rows", or the privacy unit's plural ("persons") when advised per unit
    clipped: str = "rows"
    #: what the clip bounds are for when some candidate needs none (dp-ssp takes the program's declared bounds)
    clip_note: str = ""
    #: what auto would run, in words (``auto_words``: "dp-sgnht from a private anchor"); "" shows ``auto_choice``
    auto_words: str = ""

    def table(self) -> str:
        """A markdown table of the per-algorithm results."""
        lines = ["| algorithm | max err (sd) | sd ratio | R-hat | MMD | wall s |", "|---|---|---|---|---|---|"]
        for r in self.rows:
            if r.get("error"):
                lines.append(f"| {r['algorithm']} | failed: {r['error']} | | | | |")
                continue
            lines.append(f"| {r['algorithm']} | {r['max_mean_err_sd']:.2f} | {r['median_sd_ratio']:.2f} | "
                         f"{r['rhat']:.2f} | {r['mmd']:.3f} | {r['wall_s']:.1f} |")
        if self.floor is not None:  # the yardstick: the best known one-shot release (stan_dp.methods.dp_glm.glm_price)
            lines.append(f"| floor: one release at the mode | {self.floor[0]:.2f} | {self.floor[1]:.2f} | | | |")
        return "\n".join(lines)

    def __str__(self) -> str:
        clips = ", ".join(f"{k}: {v:.1%} of {self.clipped} clipped"
                          for k, v in self.clip_fractions.items()) or "none given"
        clips += f" ({self.clip_note})" if self.clip_note else ""
        settings = "settings of the best candidate" if self.recommended == "none" else "settings"
        return (f"{self.table()}\n\n{self.verdict}\nrecommended: {self.recommended} (auto would choose "
                f"{self.auto_words or self.auto_choice})\nclip bounds on the public data: {clips}\n{settings}: "
                f"{self.settings}\n"
                f"{self.laplace_note + chr(10) if self.laplace_note else ''}"
                f"{self.price_label + ' price in advance: ' + self.price + chr(10) if self.price else ''}"
                f"{self.note}")


#: what dp-ssp takes instead of a clip bound (said beside the clip fractions when it is a candidate)
SSP_BOUNDS_NOTE = "dp-ssp takes the bounds of the outcome and covariates (declared, or x_bounds / y_bounds)"


def clip_fractions(likelihood: RowLikelihood, draws: np.ndarray, bounds: dict[str, Any], *, points: int = 20,
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


def _ssp_plan(likelihood: RowLikelihood, options: dict[str, Any], *, epsilon: float, delta: float, chains: int) -> Any:
    """The dp-ssp plan when ``likelihood`` is a normal linear regression with public bounds (declared or in
    ``options``), else None (public inputs only)."""
    from ..methods.dp_ssp.ssp import SSP_OPTIONS, plan_ssp

    spec = public_facts(likelihood).linear  # what a dp-ssp run would find (a unit wrapper declares none)
    if spec is None:
        return None
    try:
        return plan_ssp(likelihood.n_rows, likelihood.dim, linear=spec, epsilon=epsilon, delta=delta, chains=chains,
                        **{k: v for k, v in options.items() if k in SSP_OPTIONS})
    except ValueError:
        return None


def _logistic_price(likelihood: RowLikelihood, row_bounds: Any, grad_clip: Any, *, epsilon: float, delta: float) -> Any:
    """(the price in advance through the PUBLIC data's curvature, the public-only lower bound) for a recognised
    logistic program with a gradient bound (``stan_dp.methods.dp_glm.glm_price``), else None. The curvature is the inverse
    Hessian of the public data's log posterior at its mode; the private rows are never read here."""
    from ..models.numpy_reference import laplace
    from ..methods.dp_glm.glm_price import glm_floor

    if row_bounds is None or row_bounds.family != "logistic" or grad_clip is None:
        return None
    _, cov = laplace(likelihood)
    public = glm_floor(likelihood.n_rows, likelihood.dim, float(grad_clip), epsilon=epsilon, delta=delta,
                       covariance=cov)
    bound = glm_floor(likelihood.n_rows, row_bounds.coefficients or likelihood.dim, float(grad_clip),
                      epsilon=epsilon, delta=delta)
    return public, bound


#: kernels not listed as candidates of their own: the same mechanism as a listed one (DP-Fast MH's full-batch
#: variant is DP-Fast MH with the batch cap at N)
SAME_AS_LISTED = ("dp-fast-mh-full",)


def _candidates(bounds: dict[str, Any]) -> list[str]:
    """Every algorithm whose required options are among ``bounds`` and that takes one of them: the kernels, and
    ``dp-laplace`` (closed-form draws, ``stan_dp.methods.dp_laplace.laplace``) when ``grad_clip`` is given, listed beside them
    whether or not ``auto`` would choose it (``stan_dp.run.auto`` says when it does, and why)."""
    from ..methods.dp_laplace.laplace import LAPLACE
    from ..samplers import ALGORITHMS
    from ..samplers.options import spec_of

    out = []
    for name, cls in ALGORITHMS.items():
        if name in SAME_AS_LISTED:
            continue
        spec = spec_of(cls, name)
        required = [o.name for o in spec.options.values() if o.required]
        if all(r in bounds for r in required) and any(k in spec.names for k in bounds):
            out.append(name)
    if "grad_clip" in bounds:
        out.append(LAPLACE)
    return out


def _check_options(options: dict[str, Any], linear_bounds: bool = False, row_bounds: Any = None) -> None:
    """Refuse options that no algorithm, run or warm start takes (naming the closest valid one), and a set of
    options without a clip bound (``linear_bounds``: the program gives its own, dp-ssp's or a derived
    ``grad_clip``; ``row_bounds``: what the program text says, whose note the refusal adds)."""
    from ..phases.anchor import ANCHOR_SPEC
    from ..methods.dp_laplace.laplace import LAPLACE_SPEC
    from ..phases.warm_start import WARM_START_SPEC
    from ..samplers import ALL_ALGORITHMS
    from ..samplers.options import spec_of

    from ..methods.dp_ssp.ssp import SSP_OPTIONS

    valid = {*RUN_LEVEL_OPTIONS, *WARM_START_SPEC.names, *ANCHOR_SPEC.names, *LAPLACE_SPEC.names, *SSP_OPTIONS}
    for name, cls in ALL_ALGORITHMS.items():
        valid.update(spec_of(cls, name).names)
    unknown = sorted(k for k in options if k not in valid)
    if unknown:
        raise ValueError(f"advise: no algorithm takes {', '.join(k + did_you_mean(k, sorted(valid)) for k in unknown)}; "
                         "it takes every option stan_dp.sample takes (the clip bounds, the algorithms' options, "
                         "run-level and warm-start options).")
    if not linear_bounds and not any(k in CLIP_OPTIONS for k in options):
        program = ("" if row_bounds is None else
                   f" This program is a {row_bounds.family} regression: {row_bounds.note}.")
        raise ValueError("advise needs at least one public clip bound (ratio_clip, grad_clip, row_bound or "
                         "loglik_bounds) to try the algorithms with, unless the program gives its own: a normal "
                         "linear regression whose outcome and covariates declare literal bounds (dp-ssp uses them), "
                         "or a logistic regression whose covariates do (grad_clip is derived from them)." + program)


def _auto_row(names: list[str], options: dict[str, Any], choice: Any) -> str | None:
    """The candidate that is exactly the run ``auto`` would make (same algorithm, same options apart from the
    run-level ones, which both runs get), if any: its result stands for auto's, so that no run is made twice."""
    if choice is None or choice.algorithm not in names:
        return None
    own = {k: v for k, v in options_for(choice.algorithm, options).items() if k not in RUN_LEVEL_OPTIONS}
    return choice.algorithm if own == dict(choice.options) else None


def _resolve_auto(likelihood: RowLikelihood, options: dict[str, Any], *, epsilon: float, delta: float,
                  chains: int, row_bounds: Any = None) -> Any:
    """What ``auto`` would choose with ``options`` (its clip bounds and warm-start options; the run-level ones
    shape the run, not the choice), or None when it refuses them."""
    from ..phases.warm_start import WARM_START_SPEC

    taken = {k: v for k, v in options.items() if k in CLIP_OPTIONS or k in WARM_START_SPEC.names}
    try:
        return resolve_auto(n_rows=likelihood.n_rows, dim=likelihood.dim, epsilon=epsilon, delta=delta,
                            chains=chains, options=taken, quiet=True, row_bounds=row_bounds)
    except ValueError:
        return None


def _check_algorithms(names: Sequence[str]) -> None:
    """Refuse an unknown candidate name (naming the closest valid one); a name may carry the suffix "+anchor"
    (the anchored variant, ``stan_dp.tools.utility.split_variant``); ``dp-laplace`` is a candidate too."""
    from ..methods.dp_laplace.laplace import LAPLACE
    from ..methods.dp_ssp.ssp import SSP
    from ..samplers import ALGORITHMS

    valid = ["auto", LAPLACE, SSP, *sorted(ALGORITHMS)]
    for name in names:
        if split_variant(name)[0] not in valid:
            raise ValueError(f"unknown algorithm {name!r}{did_you_mean(name, valid)}; valid: {', '.join(valid)}.")


def advise(
    public_likelihood: RowLikelihood,
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
    inits: Any = None,
    show_progress: bool = False,
    privacy_unit: Any = None,
    max_rows_per_unit: int | None = None,
    **options: Any,
) -> Advice:
    """Run candidate algorithms on PUBLIC data at the planned budget and compare them with a reference.

    public_likelihood: a ``RowLikelihood`` on public or synthetic rows shaped like the private data (never the
        private rows: these are read without protection).
    epsilon, delta, chains, iter_warmup, iter_sampling: the settings planned for the private run (None: each
        algorithm's default run lengths, ``stan_dp.methods.kernels.run_lengths``; the recommended settings give the lengths used).
    algorithms: candidates (default: every algorithm whose required options are among the clip bounds given,
        ``dp-laplace`` included when ``grad_clip`` is: its closed-form draws have no warmup, and the draw count is
        ``iter_sampling``).
    reference: ArviZ data or unconstrained draws (chains, draws, dim) of the public posterior; default
        ``stan_dp.models.numpy_reference.reference_draws``.
    inits: the public inits planned for the private run, as ``sample_private`` takes them (None, a radius, or
        unconstrained values; the CLI and ``DPStanModel`` users pass dicts through ``stan_dp.stan.inits``): the
        candidates start where the private run will, which matters a lot for how far they get.
    show_progress: say on stderr which candidate runs (k of n) and how it scored, with its progress bar.
    privacy_unit, max_rows_per_unit: as ``sample_private`` takes them (one int label per public row): the candidates
        then run unit by unit, as the private run with that unit will (a ``UnitLikelihood`` is taken as it is).
    options: every option ``sample`` takes: at least one public clip bound (ratio_clip, grad_clip, row_bound,
        loglik_bounds), and any algorithm, run-level or warm-start option; each candidate gets those it takes.
    Returns an ``Advice``; ``print(advice)`` shows the table, the recommendation (or that no candidate reached
    the target, and what to expect) and the clipping. Each candidate runs once: when ``auto`` would pick one of
    them with the same options, that row is marked as auto's choice instead of running it again.
    """
    public_likelihood = as_unit_likelihood(public_likelihood, privacy_unit, max_rows_per_unit)
    ssp_plan = _ssp_plan(public_likelihood, options, epsilon=epsilon, delta=delta, chains=chains)
    row_bounds = public_facts(public_likelihood).row_bounds  # what the program text gives (stan_dp.stan.glm_program)
    derived = (row_bounds if row_bounds is not None and row_bounds.grad_clip is not None
               and not any(k in CLIP_OPTIONS for k in options) else None)
    _check_options(options, linear_bounds=ssp_plan is not None or derived is not None)
    asked = dict(options)  # as auto sees them (it derives grad_clip itself and says so)
    if derived is not None:  # the candidates run with the derived bound, as auto's own run will
        options = {**options, "grad_clip": derived.grad_clip}
    bounds = {k: v for k, v in options.items() if k in CLIP_OPTIONS}
    say = (lambda text: print(text, file=sys.stderr, flush=True)) if show_progress else (lambda text: None)
    names = list(algorithms) if algorithms is not None else _candidates(bounds)
    if algorithms is None and ssp_plan is not None:  # a normal linear regression with public bounds
        names.insert(0, ssp_plan.algorithm)
    _check_algorithms(names)
    choice = _resolve_auto(public_likelihood, asked, epsilon=epsilon, delta=delta, chains=chains,
                           row_bounds=row_bounds)
    if ssp_plan is not None:  # what auto does on such a program (stan_dp.run.plan)
        from ..run.auto import AutoChoice
        from ..methods.dp_ssp.ssp import SSP_OPTIONS, auto_ssp_reason

        choice = AutoChoice(ssp_plan.algorithm, {k: v for k, v in options.items() if k in SSP_OPTIONS},
                            auto_ssp_reason(ssp_plan.floor, ssp_plan.bounds_source))
    auto_row = _auto_row(names, options, choice)
    if auto_row is not None:  # auto's run is one of the candidates': run it once, under the candidate's name
        names = [name for name in names if not registry.is_auto(name)]
    elif include_auto and choice is not None and registry.AUTO not in names:
        names.append(registry.AUTO)
    ref, ref_unc = _reference_matrix(public_likelihood, reference, seed, say)
    planned = TrialRun(epsilon=epsilon, delta=delta, chains=chains, iter_warmup=iter_warmup,
                       iter_sampling=iter_sampling, seed=seed, inits=inits, show_progress=show_progress)
    rows = _run_candidates(public_likelihood, names, auto_row, choice, asked, options, ref, planned, say)
    recommended, settings, verdict = _recommend(rows, choice, chains)
    fractions = _reference_clip_fractions(public_likelihood, ref_unc, bounds, seed)
    from ..run.auto import LAPLACE_NOT_CHOSEN
    from ..methods.dp_laplace.laplace import LAPLACE

    listed = {split_variant(r.get("name", r["algorithm"]))[0] for r in rows} - {getattr(choice, "algorithm", None)}
    laplace_note = " ".join(note for method, note in {LAPLACE: LAPLACE_NOT_CHOSEN}.items() if method in listed)
    price, price_label, floor = _price(public_likelihood, ssp_plan, row_bounds, options, epsilon=epsilon, delta=delta)
    return Advice(rows, recommended, choice.algorithm if choice is not None else None, fractions, settings,
                  verdict=verdict, laplace_note=laplace_note, price=price, price_label=price_label, floor=floor,
                  clipped=(unit_noun(public_likelihood.privacy_unit, plural=True)
                           if isinstance(public_likelihood, UnitLikelihood) else "rows"),
                  auto_words=auto_words(choice),
                  clip_note=(("none needed: " if not bounds else "used by the other candidates only: ") + SSP_BOUNDS_NOTE
                             if ssp_plan is not None else ""))


def _reference_matrix(public_likelihood: RowLikelihood, reference: Any, seed: int,
                      say: Callable[[str], None]) -> tuple[np.ndarray, np.ndarray | None]:
    """(the reference draws as released, their unconstrained draws or None for an ArviZ reference): the given
    ``reference``, else ``reference_draws`` of the public data."""
    if reference is None:
        from ..models.numpy_reference import reference_draws

        say("advise: reference posterior of the public data ...")
        ref_unc = reference_draws(public_likelihood, chains=4, draws=1000, seed=seed)
        ref = released_matrix(public_likelihood, ref_unc)
    elif isinstance(reference, np.ndarray):
        ref_unc = reference
        ref = released_matrix(public_likelihood, reference)
    else:
        ref = released_matrix(public_likelihood, reference)
        ref_unc = None
    return ref, ref_unc


def _run_candidates(public_likelihood: RowLikelihood, names: list[str], auto_row: str | None, choice: Any,
                    asked: dict[str, Any], options: dict[str, Any], ref: np.ndarray, planned: TrialRun,
                    say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Run and score each candidate in turn as the private run is ``planned`` (candidate k with the seed
    ``planned.seed + 1 + k``): one table row each, its scores or the error it failed with."""
    seed = planned.seed
    rows = []
    for k, name in enumerate(names):
        label = (f"{name} (auto's choice)" if name == auto_row else
                 f"auto ({auto_words(choice)})" if registry.is_auto(name) else name)
        say(f"advise: candidate {k + 1} of {len(names)}: {label} ...")
        trial = dataclasses.replace(planned, seed=seed + 1 + k)
        # auto gets the options as asked, so that it derives a program's bound itself and says so
        result = run_and_score(public_likelihood, name, asked if registry.is_auto(name) else options, ref, trial,
                               score_seed=seed)
        if "error" in result:
            say(f"advise: {label}: failed: {result['error']}")
            rows.append({"algorithm": label, "error": result["error"]})
            continue
        say(f"advise: {label}: max error {result['max_mean_err_sd']:.3g} reference sd, R-hat {result['rhat']:.3g} "
            f"({result['wall_s']:.0f} s)")
        rows.append({"algorithm": label, "name": name, **{key: v for key, v in result.items() if key != "chosen"}})
    return rows


def _reference_clip_fractions(public_likelihood: RowLikelihood, ref_unc: np.ndarray | None,
                              bounds: dict[str, Any], seed: int) -> dict[str, float]:
    """:func:`clip_fractions` at unconstrained reference draws (for an ArviZ reference, which is constrained:
    points from the Laplace approximation instead)."""
    if ref_unc is None:  # an ArviZ reference is constrained: take points from the Laplace approximation instead
        from ..models.numpy_reference import laplace

        mode, cov = laplace(public_likelihood)
        ref_unc = np.random.default_rng(seed).multivariate_normal(mode, cov, size=(1, 20))
    return clip_fractions(public_likelihood, ref_unc, bounds, seed=seed)


def _price(public_likelihood: RowLikelihood, ssp_plan: Any, row_bounds: Any, options: dict[str, Any], *,
           epsilon: float, delta: float) -> tuple[str, str, tuple[float, float] | None]:
    """(the price of privacy in words, whose price it is, its floor as (max error, width ratio) or None): dp-ssp's
    floor when it runs, else a logistic regression's public price when it can be given, else no price."""
    price, price_label, floor = (ssp_plan.floor.sentence() if ssp_plan is not None else ""), "dp-ssp", None
    priced = None if ssp_plan is not None else _logistic_price(public_likelihood, row_bounds, options.get("grad_clip"),
                                                               epsilon=epsilon, delta=delta)
    if priced is not None:
        public, bound = priced
        price_label, floor = "logistic", (public.max_error, public.width_ratio)
        price = (f"{public.sentence()}; from the bounds alone (no data): {bound.max_error:.2g} reference sds at "
                 "least")
    return price, price_label, floor


def _reached(row: dict[str, Any]) -> bool:
    """The row met the target: max error <= TARGET_ERROR_SD reference sd and R-hat <= TARGET_RHAT."""
    return row["max_mean_err_sd"] <= TARGET_ERROR_SD and row["rhat"] <= TARGET_RHAT


#: a candidate whose R-hat is above this has not converged: its error is where its chains happened to be, not a
#: forecast, so it is never called the best while a converged candidate exists
CONVERGED_RHAT = 1.1


def auto_words(choice: Any) -> str:
    """What ``auto`` runs, in words that tell it from the table's rows of the same kernel without an anchor:
    ``dp-sgnht from a private anchor``, ``dp-ssp``."""
    if choice is None:
        return "nothing (it refuses these options)"
    anchored = asks_anchor(dict(choice.options))
    return f"{choice.algorithm} from a private anchor" if anchored else choice.algorithm


def _help(name: str) -> str:
    """What may bring a candidate closer, in words."""
    from ..methods import registry

    if "linear" in registry.reads(name) and not registry.is_auto(name):  # a release of the linear statistics
        return ("What may help: more rows, a larger epsilon, or narrower public bounds of the outcome and covariates "
                "(the price in advance below says what these bounds allow).")
    return ("What may help: more rows, a larger epsilon, public inits closer to the posterior, tighter public clip "
            "bounds, longer runs.")


def _badness(row: dict[str, Any]) -> tuple[float, float]:
    """Sort key of the candidates: the larger of the max error (in sds) and |log sd ratio|, then R-hat."""
    return max(row["max_mean_err_sd"], abs(math.log(max(row["median_sd_ratio"], 1e-9)))), row["rhat"]


def _recommend(rows: list[dict[str, Any]], choice: Any, chains: int) -> tuple[str, dict[str, Any], str]:
    """(recommended algorithm or "none", the settings of the best candidate, the verdict in words).

    The best candidate is the least bad (``_badness``) among those that reached the target, else among those whose
    chains converged (R-hat <= ``CONVERGED_RHAT``), else among all that ran; when none reached it the
    recommendation is "none" and the verdict says what to expect instead (and that an unconverged candidate came
    closer, when one did), or, when none converged, that their errors are no forecast."""
    ok = [r for r in rows if not r.get("error") and math.isfinite(r["max_mean_err_sd"])]
    if not ok:
        return "none", {}, "every candidate failed; see the table."
    reached = [r for r in ok if _reached(r)]
    converged = [r for r in ok if r["rhat"] <= CONVERGED_RHAT]
    best = min(reached or converged or ok, key=_badness)
    options = dict(best["options"])
    name = label = best["name"]
    if registry.is_auto(name) and choice is not None:  # the options auto runs its pick with, plus the run-level ones
        name, label = choice.algorithm, f"auto ({auto_words(choice)})"
        options = {**dict(choice.options), **{k: v for k, v in options.items() if k in RUN_LEVEL_OPTIONS}}
    settings = {"chains": chains, "iter_warmup": best["iter_warmup"], "iter_sampling": best["iter_sampling"],
                **options}
    target = f"max error <= {TARGET_ERROR_SD} reference sd and R-hat <= {TARGET_RHAT}"
    if reached:
        return name, settings, f"{label} reached the target ({target}) with the settings below."
    if not converged:
        return "none", settings, (
            f"no candidate reached the target, and none converged (R-hat {min(r['rhat'] for r in ok):.3g} at "
            f"best; want <= {TARGET_RHAT}): their errors say where the chains happened to be, not what to expect. "
            f"The least far off: {label}, {best['max_mean_err_sd']:.2g} reference sds with R-hat {best['rhat']:.3g} "
            f"(the target: {target}). {_help(name)}")
    closer = min((r for r in ok if r["rhat"] > CONVERGED_RHAT and _badness(r) < _badness(best)), key=_badness,
                 default=None)
    aside = ("" if closer is None else
             f" {closer['algorithm']} came closer ({closer['max_mean_err_sd']:.2g} reference sds), but its chains did "
             f"not converge (R-hat {closer['rhat']:.3g}): longer runs may bring it further, or not.")
    return "none", settings, (
        f"no candidate reached the target; expect the private fit to be about {best['max_mean_err_sd']:.2g} "
        f"reference sds off, with R-hat {best['rhat']:.3g} and sd ratio {best['median_sd_ratio']:.2g}, at best "
        f"(the best here: {label}; the target: {target}).{aside} {_help(name)}")


# ------------------------------------------------------------------------------------------------------ CLI
def add_advise_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``stan-dp advise`` on an argparse subparsers object; its handler is ``run_advise``."""
    p = subparsers.add_parser("advise", help=ADVISE_HELP, description=ADVISE_DESCRIPTION)
    add_advise_arguments(p)
    p.set_defaults(func=run_advise)
    return p


#: ``--option`` keys of ``stan-dp sample`` that shape what it writes, not the draws: accepted and unused here
OUTPUT_ONLY_OPTIONS = ("save_warmup", "include_tp", "include_gq")


def _cli_options(args: argparse.Namespace) -> tuple[dict[str, Any], Any, int | None]:
    """(the run's options, the inits as given, threads) from ``--option`` and ``--inits``, checked before
    compiling: ``inits=`` and ``threads=`` are taken as ``stan-dp sample`` takes them, the output-only keys of
    ``sample`` are dropped, and the algorithms and the other options are checked (``_check_options``)."""
    from ..stan.inits import load_inits

    options = dict(parse_option(text) for text in args.option or [])
    if args.inits is not None and "inits" in options:
        raise ValueError("inits given twice (--inits and --option inits=...).\nKeep only --inits.")
    inits = options.pop("inits", args.inits)
    threads = options.pop("threads", None)
    for key in OUTPUT_ONLY_OPTIONS:
        options.pop(key, None)
    unit = getattr(args, "privacy_unit", None)
    # stanc only: public program text (with a unit, one unit's bound: k times a row's, or what to give)
    program = unit_row_bounds(program_row_bounds(args.model, args.rows), unit, getattr(args, "max_rows_per_unit", None))
    linear = unit is None and ssp_ready(args.model, args.rows, options)  # dp-ssp takes the declared bounds
    _check_options(options, linear_bounds=linear or (program is not None and program.derivable), row_bounds=program)
    _check_algorithms(args.algorithm or [])
    return options, (load_inits(inits) if inits is not None else None), threads


def run_advise(args: argparse.Namespace) -> int:
    """Handler of ``stan-dp advise``: prints the advice (progress on stderr); returns the exit status."""
    from ..model import DPStanModel
    from ..stan.inits import resolve_inits

    options, inits, threads = _cli_options(args)  # before compiling
    quiet = bool(getattr(args, "quiet", False))
    say = (lambda text: None) if quiet else (lambda text: print(text, file=sys.stderr, flush=True))
    model = DPStanModel(args.model, show_progress=not quiet)
    row_variables = [v.strip() for v in args.row_variables.split(",") if v.strip()] if args.row_variables else None
    data: Any = args.data
    if getattr(args, "row_data", None) is not None:  # read once, for the run and the reference
        public = load_data(args.data)
        data = {**public, **read_row_data(args.row_data, model.data_declarations, public, rows=args.rows,
                                          row_variables=row_variables)}
    units = unit_options(args)
    labels, unit_name = None, None
    if "privacy_unit" in units:  # the unit variable of the public data, checked against the program
        labels, unit_name = resolve_privacy_unit(units["privacy_unit"], load_data(data), model.data_declarations,
                                                 canonical_program(model.stan_file, model.stanc_args),
                                                 rows=args.rows)
    elif "max_rows_per_unit" in units:
        raise ValueError("--max-rows-per-unit caps the rows of one privacy unit: give --privacy-unit as well.")
    likelihood = model.row_likelihood(data, rows=args.rows, row_variables=row_variables, threads=threads)
    if labels is None:  # a linear regression with declared bounds: dp-ssp among the candidates
        model.attach_linear(likelihood, data, args.rows)
    inits = resolve_inits(inits, likelihood.prior_model, args.chains)  # data-free: the program's own instance
    if labels is not None:
        likelihood = UnitLikelihood(likelihood, labels, name=str(unit_name),
                                    max_rows_per_unit=units.get("max_rows_per_unit"))
    say("advise: non-private reference of the PUBLIC data (Stan NUTS, 4 chains) ...")
    reference = model.reference(data, chains=4, seed=args.seed, show_progress=not quiet)
    advice = advise(likelihood, epsilon=args.epsilon, delta=args.delta, chains=args.chains,
                    iter_warmup=args.iter_warmup, iter_sampling=args.iter_sampling, algorithms=args.algorithm,
                    reference=reference, seed=args.seed, inits=inits, show_progress=not quiet, **options)
    print(advice)
    return 0
