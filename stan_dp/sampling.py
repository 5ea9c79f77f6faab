"""``sample_private``: the algorithm-agnostic entry point of every private run.

It validates the algorithm and its options, calibrates the noise to the (epsilon, delta) budget of the whole
run (``stan_dp.run.calibration.calibrate``), builds the kernel, runs the chains (``stan_dp.run.chains.run_chains``) and
returns ArviZ data (InferenceData or DataTree, per the installed ArviZ) with the privacy metadata (``stan_dp.output.inference_data``).

Run-level options (shared by all algorithms) and their per-algorithm defaults:

=============  ==================  ==============  ===============================================================
algorithm      step_size (start)   target_accept   why
=============  ==================  ==============  ===============================================================
penalty        0.1                 0.30            Gaussian random walk: the efficient acceptance rate lies between
                                                   0.234 (many dimensions) and 0.44 (one dimension); the penalty's
                                                   noise grows with the step length, which favours the lower end
                                                   only mildly, so 0.3 is a robust middle for the small dims typical
                                                   of private models.
dp-fast-mh     0.1                 0.30            random-walk proposal as above (also dp-fast-mh-full); it releases
                                                   only accept flags, which dual averaging uses directly.
dp-hmc         0.1                 0.65            fixed-length HMC: 0.651 is the optimal acceptance of HMC
                                                   (Beskos et al. 2013), and noisy gradients favour short steps.
dp-sgld,       kernel rule         (unused)        no accept test: the step is fixed (in metric units) by the
dp-sghmc,                                          kernel's public rule (``default_step_size``, see
dp-sgnht                                           ``stan_dp.samplers.sgmcmc``) and only the diagonal metric is
                                                   adapted from released warmup draws (metric "diag" default).
other          0.1                 0.50            neutral default for kernels registered later.
=============  ==================  ==============  ===============================================================

A kernel class may override these with a class attribute ``run_defaults = {"step_size": ..., "target_accept":
...}``. The start value of the step size matters little: dual averaging moves it by orders of magnitude within
tens of warmup iterations. 0.1 rather than Stan's 1 because the posteriors of row-wise models shrink like
1/sqrt(N) on the unconstrained scale, and a smaller start wastes fewer early (paid-for) iterations on proposals
far outside the posterior.
"""
from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Any

import numpy as np

from .output.diagnostics import attach_convergence
from .output.inference_data import build_inference_data
from .run.chains import run_chains
from .run_options import RUN_LEVEL_OPTIONS, run_level_listing
from .samplers.options import spec_of
from .threads import limited_blas_threads

__all__ = ["RUN_DEFAULTS", "RUN_OPTIONS", "sample_private"]

RUN_OPTIONS = RUN_LEVEL_OPTIONS  # the one list lives in stan_dp.run_options (this name kept for imports)
GENERIC_RUN_DEFAULTS = {"step_size": 0.1, "target_accept": 0.5}
RUN_DEFAULTS: dict[str, dict[str, Any]] = {
    "penalty": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh": {"step_size": 0.1, "target_accept": 0.3},
    "dp-fast-mh-full": {"step_size": 0.1, "target_accept": 0.3},
    "dp-hmc": {"step_size": 0.1, "target_accept": 0.65},
}


def _registry() -> dict[str, type]:
    from .samplers import ALL_ALGORITHMS

    return ALL_ALGORITHMS


def algorithm_names() -> list[str]:
    """Every name ``sample_private`` takes as ``algorithm`` except "auto": the kernels and "hybrid"."""
    return sorted([*_registry(), "hybrid"])


@dataclasses.dataclass(frozen=True)
class ResolvedAlgorithm:
    """An algorithm request with "hybrid" mapped to its kernel and the warm-start options split off."""

    label: str  # the name the caller gave (recorded in the metadata)
    label_options: dict[str, Any]  # the hybrid's own options (then, ops_share), else empty
    algorithm: str  # the kernel's registry name
    kernel_cls: type
    spec: Any  # the kernel's OptionSpec
    options: dict[str, Any]  # options left for the kernel (unknown names included: the caller reports them)
    warm: Any  # stan_dp.warm_start.WarmStart or None


def resolve_algorithm(algorithm: str, options: dict[str, Any]) -> ResolvedAlgorithm:
    """Map ``algorithm`` and its options to a kernel without touching any data (used by ``sample_private`` and by
    the CLI's checks before a run). Raises ``ValueError`` for an unknown algorithm or bad hybrid / warm-start
    options."""
    from .warm_start import hybrid_arguments, split_warm_start

    label, label_options = algorithm, {}
    if algorithm == "hybrid":  # OPS starts (ops_share of the budget), then an SG-MCMC kernel: stan_dp.warm_start
        algorithm, options, label_options = hybrid_arguments(options)
    registry = _registry()
    if algorithm not in registry:
        raise ValueError(f"Unknown algorithm {algorithm!r}; valid algorithms: {', '.join(algorithm_names())}.")
    kernel_cls = registry[algorithm]
    spec = spec_of(kernel_cls, algorithm)
    kernel_options, warm = split_warm_start(options, spec, algorithm)
    return ResolvedAlgorithm(label, label_options, algorithm, kernel_cls, spec, kernel_options, warm)


def _calibrate(algorithm: str, **kwargs: Any) -> Any:
    from .run.calibration import calibrate

    return calibrate(algorithm, **kwargs)


def run_defaults(algorithm: str, kernel_cls: type | None = None) -> dict[str, Any]:
    """Start step size and target acceptance used when the caller gives none."""
    defaults = dict(GENERIC_RUN_DEFAULTS)
    defaults.update(RUN_DEFAULTS.get(algorithm, {}))
    defaults.update(getattr(kernel_cls, "run_defaults", None) or {})
    return defaults


def sample_private(
    likelihood: Any,
    *,
    algorithm: str,
    epsilon: float,
    delta: float,
    chains: int = 4,
    iter_warmup: int | None = None,
    iter_sampling: int | None = None,
    seed: int | None = None,
    inits: Any = None,
    show_progress: bool = True,
    save_warmup: bool = False,
    debug: bool = False,
    step_size: float | None = None,
    target_accept: float | None = None,
    metric: str | np.ndarray | None = None,
    adapt_engaged: bool = True,
    pool_metric: bool = True,
    model_name: str | None = None,
    source_hash: str | None = None,
    stop_event: threading.Event | None = None,
    **options: Any,
):
    """Differentially private posterior draws of ``likelihood`` (a ``RowLikelihood``) as ArviZ data.

    algorithm: a name in ``stan_dp.samplers.ALGORITHMS`` ("penalty", "dp-hmc", ...), or "auto" to choose one
        from public quantities and the clip bounds given (``stan_dp.auto``; recorded in attrs ``auto_choice``).
    epsilon, delta: the budget of the WHOLE run (all chains, warmup and sampling, every mechanism). The noise is
        calibrated from it before the run; a budget too small for the requested run raises ``ValueError``.
    chains, iter_warmup, iter_sampling: as in CmdStanPy. Warmup iterations are paid for like sampling ones.
        None (default) chooses them per algorithm from public quantities (``stan_dp.run_lengths``: the SG
        kernels run up to their privacy-free break-even length, 200 + 200 to 5000 + 5000; penalty MH and DP-HMC
        4000 + 4000 up to N = 10,000, down to 1000 + 1000 from N = 40,000 (8e7 / N iterations); DP-Fast MH
        1000 + 1000; OPS 1000 internal warmup and one released draw per chain unless more stay untempered);
        recorded in ``attrs["run_lengths_reason"]`` and printed on stderr. Explicit values are always used.
    seed: None (the private default: ChaCha20 noise keyed from the OS cryptographic source, see
        ``stan_dp.privacy.noise_source``) or an int (PCG64, reproducible). A seeded run's noise is reproducible
        by anyone who knows the seed; the seed is never stored in the output.
    inits: None (uniform(-2, 2) on the unconstrained scale), a radius, or public unconstrained values of shape
        (dim,) or (chains, dim).
    step_size, target_accept: start step size and dual-averaging target (defaults per algorithm, see module doc).
    metric: "unit", "diag" (estimated from the released warmup draws) or a fixed inverse-metric vector; None takes
        the algorithm's default ("diag" for the SG-MCMC kernels, starting from their public initial metric;
        "unit" otherwise: at epsilon = 100 a diag default measured no better for penalty MH and DP-Fast MH and
        worse for DP-HMC, see issue 13).
    adapt_engaged: False keeps ``step_size`` (and the metric) fixed during warmup.
    pool_metric: with metric "diag", estimate it from the released warmup-window draws of all chains pooled
        (default; see ``stan_dp.samplers.adaptation.MetricPool``); False estimates it per chain.
    save_warmup: also return ``warmup_posterior`` / ``warmup_sample_stats``.
    debug: add a ``debug_diagnostics`` group (log prior, log-likelihood and lp of every draw, computed from the
        private rows). The result is then marked NOT private (``attrs["private"] == 0``).
    model_name, source_hash: recorded in the attrs (the Stan model passes its name and source hash).
    stop_event: setting this ``threading.Event`` stops the run early, like Ctrl-C; the result then holds the
        completed iterations and the budget actually spent.
    **options: the algorithm's options (see the kernel class docstring and its ``option_defaults``), plus the
        warm-start options of ``stan_dp.warm_start`` (``warm_start="ops"|"dp-gd"``, ``warm_start_share``, ...).
        ``algorithm="hybrid"`` takes ``then``, ``ops_share``, ``loglik_bounds`` and the ``then`` kernel's options.
        For ``algorithm="ops"`` the ``iter_warmup`` iterations run inside the mechanism (released and accounted:
        nothing); ``iter_sampling`` draws per chain are released and accounted.

    After the run, R-hat and bulk / tail ESS of the released draws are stored in ``attrs["convergence"]`` and a
    ``stan_dp.ConvergenceWarning`` is emitted when they fail the usual thresholds (``stan_dp.output.diagnostics``).
    """
    auto = None
    if algorithm == "auto":  # choose from public quantities only (stan_dp.auto), before any row is read
        from .auto import resolve_auto

        auto = resolve_auto(n_rows=likelihood.n_rows, dim=likelihood.dim, epsilon=epsilon, delta=delta,
                            chains=chains, options=options, quiet=not show_progress)
        algorithm, options = auto.algorithm, dict(auto.options)
    request = resolve_algorithm(algorithm, options)
    label, label_options, kernel_cls, spec = request.label, request.label_options, request.kernel_cls, request.spec
    algorithm, options, warm = request.algorithm, request.options, request.warm
    unknown = [k for k in options if k not in spec.names]
    if unknown:
        raise ValueError(
            f"{spec.unknown_error(unknown)}. Run-level options for every algorithm: {run_level_listing()}, "
            "inits, seed, save_warmup, debug, show_progress; warm start: warm_start, warm_start_share and "
            "the warm_start_* options (stan_dp.warm_start)."
        )
    full_options = spec.validate(options, require=False)

    for name, value, minimum in (("chains", chains, 1), ("iter_warmup", iter_warmup, 0),
                                 ("iter_sampling", iter_sampling, 1)):
        if value is None and name != "chains":
            continue
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
            raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}.")

    lengths = None
    if iter_warmup is None or iter_sampling is None:  # from public quantities only (stan_dp.run_lengths)
        from .run_lengths import fill_run_lengths

        kernel_epsilon = epsilon * (1.0 - warm.share) if warm is not None else epsilon  # the kernel's share
        lengths = fill_run_lengths(algorithm, iter_warmup, iter_sampling, n_rows=likelihood.n_rows,
                                   dim=likelihood.dim, epsilon=kernel_epsilon, delta=delta, chains=int(chains),
                                   options=options, quiet=not show_progress)
        iter_warmup, iter_sampling = lengths.iter_warmup, lengths.iter_sampling

    run_cfg = run_defaults(algorithm, kernel_cls)
    if step_size is not None:
        run_cfg["step_size"] = step_size
    if target_accept is not None:
        run_cfg["target_accept"] = target_accept
    if metric is None:
        metric = run_cfg.get("metric", "unit")

    accounting_name = getattr(kernel_cls, "accounting_name", algorithm)
    shape = kernel_cls.accounting_shape(full_options) if hasattr(kernel_cls, "accounting_shape") else {}
    # OPS warms up inside its mechanism: those iterations release nothing and are not accounted
    internal_warmup = bool(getattr(kernel_cls, "internal_warmup", False))
    run_warmup = 0 if internal_warmup else int(iter_warmup)
    prefix = ()
    if warm is not None:
        prefix = (warm.prefix_phase(epsilon=epsilon, delta=delta, chains=int(chains), n_rows=int(likelihood.n_rows)),)
    plan = _calibrate(
        accounting_name,
        epsilon=epsilon,
        delta=delta,
        chains=int(chains),
        iterations=run_warmup + int(iter_sampling),
        n_rows=int(likelihood.n_rows),
        **shape,
        **({"prefix_phases": prefix} if prefix else {}),
    )
    kernel = kernel_cls(likelihood, plan, **options)
    if internal_warmup:
        kernel.set_internal_warmup(int(iter_warmup))
    if step_size is None and getattr(kernel, "default_step_size", None) is not None:
        run_cfg["step_size"] = float(kernel.default_step_size)  # computed from public quantities by the kernel
    initial_metric = kernel.initial_metric() if hasattr(kernel, "initial_metric") else None
    void_reason = None
    if not getattr(kernel, "guarantee_holds", True):
        void_reason = (
            f"the options of {algorithm!r} ({', '.join(f'{k}={v!r}' for k, v in options.items())}) use a mechanism "
            "whose (epsilon, delta) guarantee does not hold (see the algorithm's docstring); the stated budget is "
            "not a guarantee for this object."
        )
        warnings.warn(void_reason, RuntimeWarning, stacklevel=2)

    warm_iterations = 0
    with limited_blas_threads(int(chains)):  # one chain per thread: keep BLAS from oversubscribing the cores
        if warm is not None:  # each chain's start is a mechanism output (releasable)
            inits = warm.run(likelihood, chains=int(chains), seed=seed, inits=inits, show_progress=show_progress,
                             desc=f"{label} {warm.kind} warm start ({int(chains)} chains)")
            warm_iterations = warm.iterations(int(chains))
        result = run_chains(
            likelihood,
            kernel,
            chains=int(chains),
            iter_warmup=run_warmup,
            iter_sampling=int(iter_sampling),
            seed=seed,
            inits=inits,
            step_size=float(run_cfg["step_size"]),
            target_accept=float(run_cfg["target_accept"]),
            metric=metric,
            adapt_engaged=adapt_engaged,
            show_progress=show_progress,
            save_warmup=save_warmup,
            stop_event=stop_event,
            progress_desc=f"{label} ({int(chains)} chains)",
            initial_metric=initial_metric,
            adapt_step_size=bool(getattr(kernel, "adapts_step_size", True)),
            pool_metric=bool(pool_metric),
        )
    report = (plan.report(completed_iterations=warm_iterations + result.completed_iterations)
              if result.interrupted else plan.report())
    conditional = getattr(kernel_cls, "conditional_guarantee", None) or (
        warm.conditional_guarantee if warm is not None else None)
    if conditional:
        report = dataclasses.replace(report, guarantee=conditional)
    full_options = {**label_options, **full_options, **(warm.describe() if warm is not None else {})}

    diagnostics = {"debug_diagnostics": _debug_diagnostics(likelihood, result)} if debug else None
    run_options = {
        "step_size": float(run_cfg["step_size"]),
        "target_accept": float(run_cfg["target_accept"]),
        "metric": metric if isinstance(metric, str) else np.asarray(metric, dtype=float).tolist(),
        "adapt_engaged": bool(adapt_engaged),
        "pool_metric": bool(pool_metric),
    }
    fit = build_inference_data(
        result,
        likelihood,
        algorithm=label,
        options=full_options,
        report=report,
        plan=plan,
        model_name=model_name,
        source_hash=source_hash,
        run_options=run_options,
        debug=debug,
        diagnostics=diagnostics,
        void_reason=void_reason,
    )
    attach_convergence(fit)  # R-hat / ESS of the released draws: post-processing, no privacy cost
    if lengths is not None:
        fit.attrs["run_lengths_reason"] = lengths.reason
    return auto.annotate(fit) if auto is not None else fit


def _debug_diagnostics(likelihood: Any, result: Any) -> dict[str, np.ndarray]:
    """NON-PRIVATE per-draw log prior, log-likelihood (sum over rows) and lp = their sum, for debugging only."""
    draws = result.draws_array()
    chains, n, _ = draws.shape
    log_prior = np.empty((chains, n))
    log_lik = np.empty((chains, n))
    for c in range(chains):
        for i in range(n):
            log_prior[c, i] = likelihood.log_prior(draws[c, i])
            log_lik[c, i] = float(np.sum(likelihood.row_log_lik(draws[c, i])))
    return {"log_prior": log_prior, "log_likelihood": log_lik, "lp": log_prior + log_lik}
