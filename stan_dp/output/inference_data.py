"""ArviZ data from a private run, with the privacy metadata in the root attrs.

The type is the installed ArviZ line's (``arviz.InferenceData`` on arviz 0.23, ``xarray.DataTree`` on arviz 1.x;
see ``stan_dp.output.arviz_compat``); groups, variables and attrs are the same on both.

Groups:
* ``posterior``: the released parameters by Stan name and shape (``likelihood.param_shapes()``), constrained
  from the unconstrained draws with ``likelihood.constrain`` (data-free: the Stan engine constrains with the
  prior instance). Dims are ``(chain, draw, <name>_dim_0, ...)``.
* ``sample_stats``: ArviZ names where they apply (``acceptance_rate``, ``step_size``, ``n_steps``) plus the
  algorithm's fields (``accepted``, ``noise_sd``, ``batch_size``, ``full_batch``, ``noise_free``, ...): exactly
  the per-iteration ``StepInfo`` contents, which kernels guarantee to be releasable.
* ``warmup_posterior`` / ``warmup_sample_stats`` when the run kept warmup draws.
* ``chain_posterior``: in a noise-aware anchored run, the chains' own draws (``posterior`` then holds the
  noise-aware draws; ``stan_dp.phases.anchor``).
* debug groups (only with ``debug=True``): whatever diagnostics the caller passes; the root attrs then say
  ``private = 0`` and carry a plain-words ``privacy_warning``.

Nothing non-private is ever put in the standard groups: a sample statistic whose name looks like a log
density, a log-likelihood, an energy, a clipping count or a gradient norm is refused (``ValueError``).
(Posterior names are the model's own: parameters, and quantities evaluated data-free on the prior instance.)

Root attrs hold only str, int and float values (JSON strings for structured values), so they survive
``to_netcdf`` and ``from_netcdf`` unchanged.
"""
from __future__ import annotations

import dataclasses
import json
import math
from datetime import datetime, timezone
from typing import Any, Mapping

import numpy as np

from ..likelihood import ConstrainsMany, RowLikelihood, offers
from .. import _version
from ..privacy import noise_source
from .arviz_compat import make_fit
from .releasable import FORBIDDEN_PATTERNS, check_releasable
from .run_result import RunResult

__all__ = [
    "FORBIDDEN_PATTERNS",
    "RunRecord",
    "build_inference_data",
    "check_releasable",
    "constrain_draws",
    "to_json",
]

STANDARD_GROUPS = ("posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats", "chain_posterior")

NOT_PRIVATE_DEBUG = (
    "NOT PRIVATE: this object was made with debug=True and holds diagnostics computed directly from the private "
    "rows (group(s) {groups}). It carries no privacy guarantee as a whole. Do not publish or share it; rerun "
    "without debug=True for a private result."
)
SEEDED_NOTE = (
    "This run was seeded: its random noise is reproducible by anyone who knows the seed, and with the seed the "
    "privacy guarantee is void (the noise can be regenerated). Keep the seed secret; it is not stored here."
)


def package_version() -> str:
    """The installed stan-dp version."""
    return str(_version.__version__)


def to_json(value: Any) -> str:
    """JSON text of ``value`` (numpy types, tuples and dataclasses are converted; non-finite floats as strings)."""
    return json.dumps(_jsonable(value), sort_keys=False)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [_jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        return v if math.isfinite(v) else str(v)
    if value is None or isinstance(value, str):
        return value
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    return str(value)


# ------------------------------------------------------------------------------------------------ posterior
def constrain_draws(likelihood: RowLikelihood, draws: np.ndarray) -> dict[str, np.ndarray]:
    """Constrained parameters of unconstrained ``draws`` (chains, n, dim): name -> (chains, n, *shape).

    Uses ``likelihood.constrain_many(thetas)`` (thetas (m, dim) -> name -> (m, *shape)) when the likelihood
    offers it, else ``likelihood.constrain`` per draw in chain-major order (so that generated quantities
    drawn from one seeded RNG are reproducible).
    """
    draws = np.asarray(draws, dtype=np.float64)
    chains, n, dim = draws.shape
    shapes = {name: tuple(int(s) for s in shape) for name, shape in likelihood.param_shapes().items()}
    flat = draws.reshape(chains * n, dim)
    if offers(likelihood, ConstrainsMany):
        values = likelihood.constrain_many(flat) if flat.shape[0] else {}
        out = {}
        for name, shape in shapes.items():
            arr = np.asarray(values[name], dtype=np.float64) if flat.shape[0] else np.zeros((0, *shape))
            out[name] = arr.reshape(chains, n, *shape)
        return out
    out = {name: np.empty((chains * n, *shape)) for name, shape in shapes.items()}
    for i in range(flat.shape[0]):
        one = likelihood.constrain(flat[i])
        for name, shape in shapes.items():
            value = np.asarray(one[name], dtype=np.float64)
            if value.shape != shape:
                raise ValueError(f"constrain returned shape {value.shape} for {name!r}; param_shapes says {shape}")
            out[name][i] = value
    return {name: arr.reshape(chains, n, *shapes[name]) for name, arr in out.items()}


def _dataset(arrays: Mapping[str, np.ndarray], group_attrs: dict[str, Any]):
    """An xarray Dataset with dims (chain, draw, <name>_dim_k...) that keeps the variables in the given order."""
    import xarray as xr

    data_vars, coords = {}, {}
    for name, arr in arrays.items():
        arr = np.asarray(arr)
        if arr.ndim < 2:
            raise ValueError(f"{name!r} must have shape (chain, draw, ...), got {arr.shape}")
        coords.setdefault("chain", np.arange(arr.shape[0]))
        coords.setdefault("draw", np.arange(arr.shape[1]))
        dims = ["chain", "draw"] + [f"{name}_dim_{k}" for k in range(arr.ndim - 2)]
        for d, size in zip(dims[2:], arr.shape[2:]):
            coords[d] = np.arange(size)
        data_vars[name] = (dims, arr)
    return xr.Dataset(data_vars, coords=coords, attrs=dict(group_attrs))


# ------------------------------------------------------------------------------------------------- builder
@dataclasses.dataclass(frozen=True)
class RunRecord:
    """What a fit's attrs record about its run besides the draws (all public).

    algorithm: the algorithm as the metadata names it; options: its options (with defaults);
    report: the ``PrivacyReport`` of the budget actually spent (``plan.report(completed)`` for interrupted runs);
    plan: the ``PrivacyPlan`` (requested budget and calibrated noise), optional;
    model_name, source_hash: the model's name and the hash of its source (never of the data);
    run_options: the run-level options as recorded (``stan_dp.run_options.RunSettings.run_options``);
    void_reason: set when the kernel's options void the stated guarantee (e.g. DP-Fast MH's privacy-for-free
        branches); the object is then marked not private with this reason.
    """

    algorithm: str
    options: Mapping[str, Any]
    report: Any
    plan: Any = None
    model_name: str | None = None
    source_hash: str | None = None
    run_options: Mapping[str, Any] | None = None
    void_reason: str | None = None


def build_inference_data(
    result: RunResult,
    likelihood: RowLikelihood,
    record: RunRecord,
    *,
    debug: bool = False,
    diagnostics: Mapping[str, Mapping[str, np.ndarray]] | None = None,
    noise_aware_draws: np.ndarray | None = None,
    screen: Any = None,
):
    """Assemble the ArviZ data (InferenceData or DataTree, per the installed ArviZ) of a private run.

    record: the run's algorithm, options, privacy report and plan, model name and source hash, run-level options
        and (if any) why the guarantee is void (:class:`RunRecord`).

    noise_aware_draws: unconstrained draws (chains, draws, dim) to release as ``posterior`` instead of the chains'
        own (an anchored run's noise-aware draws, ``stan_dp.phases.anchor``); the chains' draws are then the group
        ``chain_posterior``.
    screen: which chains and draws are released (a ``stan_dp.output.plausible.Screen``); every draw group and
        ``sample_stats`` then hold only those (None: all). The privacy attrs still count every chain that ran.

    diagnostics: only with ``debug=True``: {group name: {variable: array (chain, draw, ...)}}, stored as extra
        groups; the object is then marked not private.
    """
    import arviz as az

    __version__ = package_version()
    if diagnostics and not debug:
        raise ValueError("diagnostics may only be stored with debug=True (they make the object non-private).")
    for group in diagnostics or {}:
        if group in STANDARD_GROUPS or not group.isidentifier():
            raise ValueError(f"a diagnostics group may not be called {group!r}")

    # the date only: the time a run ended can depend on its private rows (OPS tree depths, rows that throw),
    # so no clock finer than the day is released
    created = datetime.now(timezone.utc).date().isoformat()
    group_attrs = {
        "created_at": created,
        "arviz_version": az.__version__,
        "inference_library": "stan-dp",
        "inference_library_version": __version__,
    }

    def released(array: np.ndarray) -> np.ndarray:  # the chains and draws the screen lets through
        return array if screen is None else screen.select(array)

    def released_chains(array: np.ndarray) -> np.ndarray:  # warmup: the released chains, every draw
        return array if screen is None else np.asarray(array)[np.asarray(screen.kept, dtype=np.intp)]

    chain_draws = released(result.draws_array())
    posterior = constrain_draws(likelihood, chain_draws if noise_aware_draws is None else released(noise_aware_draws))
    stats = {name: released(values) for name, values in result.stats_arrays().items()}
    check_releasable(stats, "sample_stats")
    groups = {"posterior": _dataset(posterior, group_attrs), "sample_stats": _dataset(stats, group_attrs)}
    if noise_aware_draws is not None:
        groups["chain_posterior"] = _dataset(constrain_draws(likelihood, chain_draws), group_attrs)
    if result.save_warmup:
        groups["warmup_posterior"] = _dataset(
            constrain_draws(likelihood, released_chains(result.draws_array(warmup=True))), group_attrs)
        groups["warmup_sample_stats"] = _dataset(
            {name: released_chains(v) for name, v in result.stats_arrays(warmup=True).items()}, group_attrs)
    for group, arrays in (diagnostics or {}).items():
        groups[group] = _dataset(arrays, {**group_attrs, "private": 0})

    attrs = privacy_attrs(result, likelihood, record, released_variables=list(posterior),
                          released_sample_stats=list(stats), debug=debug, debug_groups=list(diagnostics or {}))
    attrs = {"created_at": created, "arviz_version": az.__version__, **attrs}
    return make_fit(groups, attrs)


#: attrs that state an (epsilon, delta) guarantee; a void run (``void_reason``) carries none of them
GUARANTEE_ATTRS = ("epsilon_spent", "delta_spent", "privacy_report", "privacy_mechanisms", "accountant")


def _strip_guarantee(attrs: dict[str, Any], void_reason: str) -> None:
    """Make a void run's attrs state no guarantee: the budget becomes ``epsilon_requested`` /
    ``delta_requested`` and every guarantee-bearing attr is removed or says "none"."""
    for key in GUARANTEE_ATTRS:
        attrs.pop(key, None)
    attrs["epsilon_requested"] = attrs.pop("epsilon")
    attrs["delta_requested"] = attrs.pop("delta")
    attrs["guarantee_type"] = "none"
    attrs["privacy_guarantee"] = f"none: this object is NOT private ({void_reason})"


def privacy_attrs(
    result: RunResult,
    likelihood: RowLikelihood,
    record: RunRecord,
    *,
    released_variables: list[str] | None = None,
    released_sample_stats: list[str] | None = None,
    debug: bool = False,
    debug_groups: list[str] | None = None,
) -> dict[str, Any]:
    """The root attrs of a private InferenceData: only str, int and float values.

    With ``record.void_reason`` (the options void the guarantee) no attr states one: ``privacy_guarantee`` says
    "none", the budget is recorded as ``epsilon_requested`` / ``delta_requested``, and ``epsilon_spent``,
    ``delta_spent``, ``privacy_report``, ``privacy_mechanisms`` and ``accountant`` are absent.
    """
    __version__ = package_version()
    algorithm, options, report, plan = record.algorithm, record.options, record.report, record.plan
    model_name, source_hash, run_options, void_reason = (record.model_name, record.source_hash, record.run_options,
                                                         record.void_reason)

    eps_spent, delta_spent = float(report.epsilon), float(report.delta)
    eps_budget = float(plan.epsilon) if plan is not None else eps_spent
    delta_budget = float(plan.delta) if plan is not None else delta_spent
    relation = str(report.neighbouring_relation)
    accountant = str(report.accountant)
    guarantee = _guarantee_sentence(result, report, eps_spent, delta_spent, relation, accountant)
    attrs: dict[str, Any] = {
        "inference_library": "stan-dp",
        "inference_library_version": __version__,
        "stan_dp_version": __version__,
        "private": 0 if (debug or void_reason) else 1,
    }
    warnings_text = []
    if debug:
        warnings_text.append(NOT_PRIVATE_DEBUG.format(groups=", ".join(debug_groups or []) or "none yet"))
    if void_reason:
        warnings_text.append(f"NOT PRIVATE: {void_reason}")
    if warnings_text:
        attrs["privacy_warning"] = " ".join(warnings_text)
    attrs.update(
        {
            "privacy_guarantee": guarantee,
            "guarantee_type": str(getattr(report, "guarantee", None) or "approximate differential privacy, (epsilon, delta)-DP"),
            "epsilon": eps_budget,
            "delta": delta_budget,
            "epsilon_spent": eps_spent,
            "delta_spent": delta_spent,
            "accountant": accountant,
            "neighbouring_relation": relation,
            "privacy_mechanisms": to_json(getattr(report, "mechanisms", [])),
            "privacy_report": str(report.to_json()),
            "algorithm": str(algorithm),
            "algorithm_options": to_json(dict(options)),
            "run_options": to_json(dict(run_options or {})),
            "released_variables": to_json(released_variables or []),
            "released_sample_stats": to_json(released_sample_stats or []),
            "seeded": int(result.seeded),
            "noise_source": noise_source.describe(bool(result.seeded)),
        }
    )
    if plan is not None:
        attrs["noise_calibration"] = to_json(_noise_calibration(plan, void_reason))
    if void_reason:
        _strip_guarantee(attrs, void_reason)
    if result.seeded:
        attrs["seed_note"] = SEEDED_NOTE
    attrs.update(_run_shape_attrs(result, likelihood))
    if model_name is not None:
        attrs["model_name"] = str(model_name)
    if source_hash is not None:
        attrs["stan_source_hash"] = str(source_hash)
    return attrs


def _guarantee_sentence(result: RunResult, report: Any, eps_spent: float, delta_spent: float, relation: str,
                        accountant: str) -> str:
    """The guarantee in words (attrs ``privacy_guarantee``): the groups it covers, the budget spent, the chains and
    iterations it covers and the accountant; a conditional guarantee (OPS draws) says so."""
    guarantee = (
        f"The posterior and sample_stats groups{' (and the warmup groups)' if result.save_warmup else ''} are "
        f"({eps_spent:.6g}, {delta_spent:.6g})-differentially private with respect to {relation}: the budget covers "
        f"all {result.n_chains} chains and all {result.completed_iterations} iterations that ran (warmup included), "
        f"accounted with {accountant}."
    )
    stated = str(getattr(report, "guarantee", "") or "")
    if "CONDITIONAL" in stated:  # OPS draws (Wang, Fienberg and Smola (2015), Proposition 3): say so in words
        guarantee += f" The guarantee is {stated[stated.index('CONDITIONAL'):]}"
    return guarantee


def _noise_calibration(plan: Any, void_reason: str | None) -> dict[str, Any]:
    """The plan's calibrated noise (attrs ``noise_calibration``): its ``to_dict()``, its dataclass fields, or the
    known noise fields; without the requested budget when the run is void (it is not a guarantee then)."""
    if hasattr(plan, "to_dict"):
        calibration = plan.to_dict()
    elif dataclasses.is_dataclass(plan):
        calibration = {f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)}
    else:
        fields = ("tau_l", "tau_g", "leapfrog_steps", "epsilon_iteration", "delta_iteration")
        calibration = {f: getattr(plan, f, None) for f in fields}
    if void_reason:  # the requested budget is not a guarantee: do not repeat it as one
        calibration = {k: v for k, v in calibration.items() if k not in ("epsilon", "delta")}
    return calibration


def _run_shape_attrs(result: RunResult, likelihood: RowLikelihood) -> dict[str, Any]:
    """The run's public shape and settings: N, the dimension, chains and iterations (planned, completed, per
    chain), the inits, the metric and the adapted step sizes and metrics (all released)."""
    return {
        "N": int(likelihood.n_rows),
        "unconstrained_dim": int(result.dim),
        "chains": int(result.n_chains),
        "iter_warmup": int(result.iter_warmup),
        "iter_sampling": int(result.iter_sampling),
        "save_warmup": int(result.save_warmup),
        "iterations_planned": int(result.planned_iterations),
        "iterations_completed": int(result.completed_iterations),
        "iterations_per_chain": to_json(result.iterations_per_chain),
        "interrupted": int(result.interrupted),
        "inits": result.init_description,
        "metric": result.metric_kind,
        "target_accept": float(result.target_accept),
        "adapt_engaged": int(result.adapt_engaged),
        "adapted_step_size": to_json(result.step_sizes),
        "inv_metric": to_json(result.metrics),
    }
