"""``stan_dp.audit``: run the audit targets and turn their outputs into epsilon lower bounds."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..likelihood import RowLikelihood
from .bounds import evaluate, select_statistic
from .faults import planted_fault
from .neighbours import default_canaries
from .targets import (
    AUDIT_STEP_SIZES,
    NAN_RUN_TARGETS,
    AT_BOUND_TARGET_ALGORITHMS,
    TRAJECTORY_TARGET_ALGORITHMS,
    UNIT_TARGET_ALGORITHMS,
    WHOLE_RUN_TARGETS,
    Target,
    anchored_bound_target,
    anchored_iteration_target,
    anchored_trajectory_target,
    iteration_target,
    kernel_options,
    mechanism_targets,
    nan_run_target,
    run_target,
    subsampled_iteration_target,
    unit_iteration_target,
    whole_run_target,
)

__all__ = ["AuditResult", "AuditReport", "audit", "audit_target", "default_audit_model", "TARGET_KINDS"]

TARGET_KINDS = ("mechanisms", "iteration", "run")

PRIVACY_NOTE = (
    "The audit runs every mechanism many times on the data and on its neighbour: its output is a test of the "
    "implementation, not covered by any privacy budget. Run it on public or synthetic data of the same shape, "
    "or do not publish its output."
)
LIMITS_NOTE = (
    "A lower bound above the claim proves a violation (at the stated confidence, for that target); a bound below "
    "the claim proves nothing: the audit tries a few neighbouring pairs and threshold tests, not all of them."
)


@dataclass
class AuditResult:
    """The audit of one target: the claim next to an empirical lower bound on the true epsilon."""

    target: str
    kind: str
    claimed_epsilon: float
    claimed_delta: float
    epsilon_lower_bound: float
    confidence: float
    runs: int
    evaluation_runs: int
    statistic: str
    variant: str
    guarantee_holds: bool
    false_positives: int
    false_negatives: int
    seconds: float
    notes: list[str] = field(default_factory=list)

    @property
    def exceeds_claim(self) -> bool:
        """True when the lower bound is above the claimed epsilon: the claim is violated."""
        return self.epsilon_lower_bound > self.claimed_epsilon

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["exceeds_claim"] = self.exceeds_claim
        return out


@dataclass
class AuditReport:
    """All audited targets, with the settings used."""

    results: list[AuditResult]
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"private": False, "note": PRIVACY_NOTE, "limits": LIMITS_NOTE, "settings": self.settings,
                "results": [r.to_dict() for r in self.results]}

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def __str__(self) -> str:
        head = (f"{'target':<24} {'claim eps':>10} {'delta':>8} {'lower bound':>11} {'conf':>5} {'runs':>7} "
                f"{'sec':>6}  statistic")
        lines = [head, "-" * len(head)]
        for r in self.results:
            flag = "  << EXCEEDS CLAIM" if r.exceeds_claim else ""
            void = " (claims nothing: not private)" if not r.guarantee_holds else ""
            lines.append(f"{r.target:<24} {r.claimed_epsilon:>10.4g} {r.claimed_delta:>8.2g} "
                         f"{r.epsilon_lower_bound:>11.4g} {r.confidence:>5.2f} {r.runs:>7d} {r.seconds:>6.1f}  "
                         f"{r.statistic}{void}{flag}")
        lines += ["", f"Note: {LIMITS_NOTE}", f"Note: {PRIVACY_NOTE}"]
        return "\n".join(lines)


def default_audit_model(n_rows: int = 10, dim: int = 2):
    """The public synthetic data set audited when no model is given: a Gaussian mean model with all rows
    at 0 (so that, from the public state theta = 0, the other rows move the released statistics little and
    the substituted row's effect is easiest to see)."""
    from ..models.reference_models import GaussianMeanModel

    return GaussianMeanModel(np.zeros((n_rows, dim)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)


def _stan_canary(model: Any, data: Any, canary: Mapping[str, Any], rows: str = "N"):
    """A one-row Stan likelihood whose row variables hold ``canary`` (public data: the other data kept)."""
    from ..stan.data import load_data, split_rows

    raw = load_data(data)
    split, kept = split_rows(model.data_declarations, raw, rows=rows)
    one = dict(kept)
    one[split.count_name] = 1
    missing = [v for v in split.row_variables if v not in canary]
    if missing:
        raise ValueError(f"the canary row must give every row variable; missing: {', '.join(missing)}")
    for var in split.row_variables:
        one[var] = [canary[var]]
    return model.row_likelihood(one, rows=rows, check=False)


def _canary_pairs(canary: Any, center: np.ndarray, model: Any, data: Any) -> list[tuple[Any, Any]]:
    if canary is None:
        return default_canaries(center)
    if isinstance(canary, Mapping):
        if model is None:
            raise ValueError("a canary given as data values needs the Stan model (model=..., data=...)")
        one = _stan_canary(model, data, canary)
        one.name = "the given canary row"
        return [(None, one)]
    if int(getattr(canary, "n_rows", 0)) != 1:
        raise ValueError("canary must be None, a dict of one row's data values, or a one-row RowLikelihood")
    return [(None, canary)]


class _Progress:
    def __init__(self, total: int, show: bool):
        from tqdm.auto import tqdm

        self.bar = tqdm(total=total, desc="audit", unit="run", file=sys.stderr, disable=not show,
                        dynamic_ncols=True)

    def tick(self, k: int) -> None:
        self.bar.update(k)

    def close(self) -> None:
        self.bar.close()


def audit_target(target: Target, runs: int, *, seed: int | None = None, confidence: float = 0.95,
                 show_progress: bool = False) -> AuditResult:
    """Audit one ``Target`` built by hand (e.g. with a custom canary pair): ``runs`` per data set, half to
    choose the statistic and threshold over the variants, half for the bound."""
    progress = _Progress((len(target.variants) * (runs // 2) + (runs - runs // 2)) * 2, show_progress)
    try:
        return _audit_target(target, runs // 2, runs - runs // 2, np.random.SeedSequence(seed), confidence,
                             progress)
    finally:
        progress.close()


def _selection_confidence(confidence: float) -> float:
    """The stricter level used to rank thresholds on the selection half (1 - (1 - confidence) / 50, 0.999 for
    0.95): it discounts thresholds resting on a handful of runs, whose apparent separation is mostly chance
    (measured on Gaussian pairs: the held-out bound is higher and varies less than when ranking at 0.95)."""
    return 1.0 - (1.0 - confidence) / 50.0


def _audit_target(target: Target, n_select: int, n_eval: int, seq: np.random.SeedSequence, confidence: float,
                  progress: _Progress) -> AuditResult:
    start = time.perf_counter()
    children = seq.spawn(2 * len(target.variants) + 2)
    best = None
    for v, variant in enumerate(target.variants):
        x0 = variant.sample(0, n_select, np.random.default_rng(children[2 * v]), progress.tick)
        x1 = variant.sample(1, n_select, np.random.default_rng(children[2 * v + 1]), progress.tick)
        eps_sel, stat = select_statistic(x0, x1, target.feature_names, target.claimed_delta,
                                         _selection_confidence(confidence))
        if best is None or eps_sel > best[0]:
            best = (eps_sel, stat, variant)
    _, stat, variant = best
    x0 = variant.sample(0, n_eval, np.random.default_rng(children[-2]), progress.tick)
    x1 = variant.sample(1, n_eval, np.random.default_rng(children[-1]), progress.tick)
    eps, fp, fn = evaluate(stat, x0, x1, target.claimed_delta, confidence)
    return AuditResult(
        target=target.name, kind=target.kind, claimed_epsilon=float(target.claimed_epsilon),
        claimed_delta=float(target.claimed_delta), epsilon_lower_bound=float(eps), confidence=float(confidence),
        runs=int(n_select + n_eval), evaluation_runs=int(n_eval), statistic=stat.text(),
        variant=variant.description, guarantee_holds=bool(target.guarantee_holds), false_positives=fp,
        false_negatives=fn, seconds=time.perf_counter() - start, notes=list(target.notes))


def audit(
    likelihood: RowLikelihood | None = None,
    *,
    model: Any = None,
    data: Any = None,
    algorithms: Sequence[str] | None = None,
    targets: Iterable[str] = TARGET_KINDS,
    epsilon: float = 1.0,
    delta: float = 1e-5,
    runs: int = 2000,
    run_runs: int | None = None,
    seed: int | None = None,
    confidence: float = 0.95,
    canary: Any = None,
    row_index: int = 0,
    theta0: Sequence[float] | None = None,
    options: Mapping[str, Mapping[str, Any]] | None = None,
    step_sizes: Sequence[float] | None = None,
    run_iterations: tuple[int, int] = (0, 5),
    run_step_size: float = 0.1,
    fault: str | None = None,
    only: Sequence[str] | None = None,
    show_progress: bool = True,
) -> AuditReport:
    """Empirical lower bounds on epsilon for the package's mechanisms, kernels and whole runs.

    Neighbouring data sets: row ``row_index`` of the data substituted by a public worst-case row. By default
    two pairs of opposite canaries are searched (radial around ``theta0`` and linear along the first
    coordinate, ``stan_dp.audit.neighbours``), and for iterations also ``step_sizes``; a
    ``canary`` may be given instead (a one-row ``RowLikelihood``, or for a Stan model a dict of one row's
    data values), and then D0 is the data as given and D1 the data with the canary.

    likelihood / model + data: what to audit on (a ``RowLikelihood``, e.g. a NumPy reference model, or a
        ``DPStanModel`` and its data); neither: ``default_audit_model()``.
    algorithms: names in ``stan_dp.samplers.ALGORITHMS``, the OPS-based run targets of
        ``stan_dp.audit.targets.NAN_RUN_TARGETS`` ("ops", "hybrid", "dp-sgld warm_start=ops") and the whole-run
        targets of ``WHOLE_RUN_TARGETS`` ("dp-sgld anchor=dp-gd", "dp-laplace"); default: all.
    targets: any of "mechanisms" (each function of ``privacy.mechanisms``), "iteration" (one kernel iteration
        at the public state ``theta0``, default 0, with public momentum 0 for momentum kernels; every clipped
        kernel also on anchored rows (the difference-clipped sums and control-variate ratio tests of
        ``stan_dp.phases.anchor``), DP-HMC also on an anchored trajectory with public momentum and DP-Fast MH on
        anchored rows all at the clip bound (where their clips show in what they release); minibatch kernels
        also on a subsampled base whose rows all sit at the clip bound), "run" (whole short runs through
        ``sample_private``; the OPS-based samplers with a NaN canary; an anchored run and dp-laplace with their
        released statistics).
    step_sizes: step sizes tried by the one-iteration targets; None: the kernel's audit default
        (``AUDIT_STEP_SIZES``: large steps for the SG kernels, where their privacy noise binds) or (0.05, 0.25).
    epsilon, delta: the budget each target is calibrated to (for a mechanism: its releases; for an
        iteration: a one-iteration plan; for a run: the whole run). The claim audited is the accountant's.
    runs: runs per neighbouring data set for mechanisms and iterations; half choose the statistic and
        threshold (for every variant), the other half give the bound. ``run_runs``: the same for whole runs
        (default runs // 10, at least 50).
    confidence: joint confidence of the Clopper-Pearson bounds (per target).
    options: {algorithm: {option: value}} for the kernels (DP-Fast MH needs a public ``row_bound``;
        the audit uses 1.0 unless told otherwise).
    fault: a planted fault from ``stan_dp.audit.faults.FAULTS`` (tests of the audit itself).
    only: audit only the targets with these names (e.g. "mechanism:ratio", "iteration:penalty").

    Returns an ``AuditReport`` (``str()`` is a table; ``to_json()`` has claimed_epsilon, epsilon_lower_bound,
    confidence, runs and statistic per target). Its output is not private (see ``PRIVACY_NOTE``).
    """
    from ..samplers import ALGORITHMS

    kinds = tuple(targets)
    algos, run_runs = _checked_request(kinds, algorithms, [*ALGORITHMS, *NAN_RUN_TARGETS, *WHOLE_RUN_TARGETS], runs,
                                       run_runs, confidence)
    if likelihood is None:
        likelihood = model.row_likelihood(data) if model is not None else default_audit_model()
    dim = int(likelihood.dim)
    theta = np.zeros(dim) if theta0 is None else np.asarray(theta0, dtype=float).reshape(dim)
    pairs = _canary_pairs(canary, theta, model, data)
    options = dict(options or {})

    with planted_fault(fault):
        scope = _Scope(epsilon=epsilon, delta=delta, runs=runs, run_runs=run_runs, row_index=row_index,
                       step_sizes=step_sizes, run_iterations=run_iterations, run_step_size=run_step_size)
        planned = _planned_targets(kinds, algos, likelihood, pairs, theta, options, canary is not None, scope)
        if only is not None:
            planned = [p for p in planned if p[0] in set(only)]
        results = _audit_planned(planned, seed, confidence, show_progress)
    settings = {"epsilon": float(epsilon), "delta": float(delta), "runs": int(runs), "run_runs": int(run_runs),
                "confidence": float(confidence), "seeded": seed is not None, "row_index": int(row_index),
                "theta0": theta.tolist(), "fault": fault, "algorithms": algos, "targets": list(kinds),
                "step_sizes": None if step_sizes is None else [float(x) for x in step_sizes],
                "n_rows": int(likelihood.n_rows), "dim": dim}
    return AuditReport(results, settings)


def _checked_request(kinds: tuple[str, ...], algorithms: Sequence[str] | None, valid: list[str], runs: int,
                     run_runs: int | None, confidence: float) -> tuple[list[str], int]:
    """The algorithms to audit (all of ``valid`` by default) and the runs per whole-run target, after checking
    the target kinds, the algorithm names, ``runs`` and ``confidence`` (ValueError naming what is wrong)."""
    unknown = sorted(set(kinds) - set(TARGET_KINDS))
    if unknown:
        raise ValueError(f"unknown audit target(s) {', '.join(unknown)}; choose from {', '.join(TARGET_KINDS)}")
    algos = list(valid) if algorithms is None else list(algorithms)
    bad = [a for a in algos if a not in valid]
    if bad:
        raise ValueError(f"unknown algorithm(s) {', '.join(bad)}; valid: {', '.join(valid)}")
    if isinstance(runs, bool) or not isinstance(runs, (int, np.integer)) or runs < 20:
        raise ValueError(f"runs must be an integer >= 20 (half select the test, half bound epsilon); got {runs!r}")
    run_runs = max(runs // 10, 50) if run_runs is None else int(run_runs)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1); got {confidence!r}")
    return algos, run_runs


#: a target not built yet: (name, runs per neighbouring data set, builder)
_Planned = tuple[str, int, Callable[[], Target]]


@dataclass(frozen=True)
class _Scope:
    """The audit's settings every target is built with (as :func:`audit` takes them): the budget, the runs per
    data set (``run_runs`` for whole runs), the substituted row, the one-iteration targets' step sizes and the
    whole runs' lengths and step size."""

    epsilon: float
    delta: float
    runs: int
    run_runs: int
    row_index: int
    step_sizes: Sequence[float] | None
    run_iterations: tuple[int, int]
    run_step_size: float


def _planned_targets(kinds: tuple[str, ...], algos: list[str], likelihood: RowLikelihood,
                     pairs: list[tuple[Any, Any]], theta: np.ndarray, options: dict[str, Mapping[str, Any]],
                     canary_given: bool, scope: _Scope) -> list[_Planned]:
    """Every target of the kinds and algorithms asked for, in audit order: the mechanisms, then per algorithm its
    whole runs (OPS-based and whole-run targets) or its iteration targets and run. Names are known before a target
    is built, so ``only`` skips the building (a run target's probe run, a kernel's calibration) of targets it
    leaves out."""
    dim = theta.size
    epsilon, delta, run_runs, run_step_size = scope.epsilon, scope.delta, scope.run_runs, scope.run_step_size
    planned: list[_Planned] = []
    if "mechanisms" in kinds:
        planned += [(t.name, scope.runs, (lambda t=t: t)) for t in mechanism_targets(epsilon, delta, dim=dim)]
    for algorithm in algos:
        opts = dict(options.get(algorithm, {}))
        if algorithm in NAN_RUN_TARGETS:  # OPS-based: whole runs only (one OPS iteration is no mechanism)
            if "run" in kinds:
                planned.append((f"run:{algorithm}", run_runs, partial(
                    nan_run_target, algorithm, epsilon=epsilon, delta=delta, dim=dim,
                    step_size=run_step_size, options=opts)))
            continue
        if algorithm in WHOLE_RUN_TARGETS:  # an anchored run, dp-laplace: whole runs with their phases
            if "run" in kinds:
                planned.append((f"run:{algorithm}", run_runs, partial(
                    whole_run_target, algorithm, likelihood, epsilon=epsilon, delta=delta, dim=dim,
                    step_size=run_step_size, options=opts, canary_pairs=pairs if canary_given else None,
                    index=scope.row_index, theta0=theta)))
            continue
        steps = (tuple(scope.step_sizes) if scope.step_sizes is not None
                 else AUDIT_STEP_SIZES.get(algorithm, (0.05, 0.25)))
        if "iteration" in kinds:
            planned += _iteration_targets(algorithm, likelihood, pairs, theta, opts, steps, scope)
        if "run" in kinds:
            planned.append(_kernel_run_target(algorithm, likelihood, pairs, theta, opts, scope))
    return planned


def _iteration_targets(algorithm: str, likelihood: RowLikelihood, pairs: list[tuple[Any, Any]], theta: np.ndarray,
                       opts: dict[str, Any], steps: tuple[float, ...], scope: _Scope) -> list[_Planned]:
    """The one-iteration targets of a kernel: at the public state on the given rows, then each variant where one
    of its clips shows in what it releases (anchored rows, an anchored trajectory, anchored rows at the bound, a
    privacy unit, a subsampled base)."""
    from ..samplers import ALGORITHMS

    dim = theta.size
    epsilon, delta, runs, row_index = scope.epsilon, scope.delta, scope.runs, scope.row_index
    names = ALGORITHMS[algorithm].option_spec.names
    planned: list[_Planned] = [(f"iteration:{algorithm}", runs, partial(
        iteration_target, algorithm, likelihood, epsilon=epsilon, delta=delta, options=opts,
        canary_pairs=pairs, index=row_index, theta0=theta, step_sizes=steps))]
    if "diff_clip" in names:
        planned.append((f"iteration:{algorithm} anchored", runs, partial(
            anchored_iteration_target, algorithm, epsilon=epsilon, delta=delta, options=opts,
            dim=dim, step_sizes=steps)))
    if algorithm in TRAJECTORY_TARGET_ALGORITHMS:  # the anchored target where its gradient clip shows in the draw
        planned.append((f"iteration:{algorithm} anchored trajectory", runs, partial(
            anchored_trajectory_target, algorithm, epsilon=epsilon, delta=delta, options=opts,
            dim=dim)))
    if algorithm in AT_BOUND_TARGET_ALGORITHMS:  # the anchored target where its clip shows in the bit
        planned.append((f"iteration:{algorithm} anchored at bound", runs, partial(
            anchored_bound_target, algorithm, epsilon=epsilon, delta=delta, options=opts)))
    if algorithm in UNIT_TARGET_ALGORITHMS:  # a privacy unit whose rows all sit at the bound
        planned.append((f"iteration:{algorithm} unit", runs, partial(
            unit_iteration_target, algorithm, epsilon=epsilon, delta=delta, options=opts, dim=dim,
            step_sizes=steps)))
    if "sampling_rate" in names:
        planned.append((f"iteration:{algorithm} subsampled", runs, partial(
            subsampled_iteration_target, algorithm, epsilon=epsilon, delta=delta, options=opts,
            dim=dim, step_sizes=steps)))
    return planned


def _kernel_run_target(algorithm: str, likelihood: RowLikelihood, pairs: list[tuple[Any, Any]], theta: np.ndarray,
                       opts: dict[str, Any], scope: _Scope) -> _Planned:
    """The whole short run of a kernel through ``sample_private``, on the first canary pair."""
    from ..samplers import ALGORITHMS

    return (f"run:{algorithm}", scope.run_runs, partial(
        run_target, algorithm, likelihood, epsilon=scope.epsilon, delta=scope.delta,
        options=kernel_options(algorithm, ALGORITHMS[algorithm], opts),
        canary_pairs=pairs[:1], index=scope.row_index, theta0=theta, iter_warmup=int(scope.run_iterations[0]),
        iter_sampling=int(scope.run_iterations[1]), step_size=scope.run_step_size))


def _audit_planned(planned: list[_Planned], seed: int | None, confidence: float,
                   show_progress: bool) -> list[AuditResult]:
    """Build the planned targets and audit each, in order, with its own child of ``SeedSequence(seed)`` (one
    progress bar over all of them)."""
    built = [(build(), n) for _, n, build in planned]
    total = sum((len(t.variants) * (n // 2) + (n - n // 2)) * 2 for t, n in built)
    seq = np.random.SeedSequence(seed)
    progress = _Progress(total, show_progress)
    results = []
    try:
        for (target, n), child in zip(built, seq.spawn(len(built))):
            results.append(_audit_target(target, n // 2, n - n // 2, child, confidence, progress))
    finally:
        progress.close()
    return results
