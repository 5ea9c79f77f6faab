"""``algorithm="dp-ssp"``: one private release of the sufficient statistics of a normal linear regression, then
the noise-aware posterior given them (docs/algorithms/dp-ssp.md).

1. Plan (public inputs only: N, the number of covariates K, the public bounds of x and y, the budget): the
   whole budget goes to ONE Gaussian mechanism on the moment matrix of the clamped, centred rows
   v_i = (1, x_i - c_x, y_i - c_y) (``stan_dp.privacy.moments``: upper triangle without the public constant N,
   the sums weighted by w against the products, replace-one L2 sensitivity Delta_w from the bounds, noise sd
   tau * Delta_w on the products and tau * Delta_w / w on the sums, tau from the accountant). w minimises the
   price below over a grid (:func:`choose_linear_weight`: a function of the bounds alone) unless the option
   ``linear_weight`` gives it.
2. Release: the only place the rows are read.
3. Draws: several chains of a real MCMC on the noise-aware posterior (``stan_dp.run.ssp_posterior``) using the
   program's own data-free prior and, for the latent design moments, the prior of normal covariate rows with a
   public hyper-prior (``stan_dp.methods.dp_ssp.ssp_design``; option ``design_prior``); post-processing, any number of
   draws at the same budget. R-hat and ESS of
   the released draws are those of these chains.

Bounds: the data block's declared constraints (Stan's place for them), else the options ``x_bounds`` (a pair
(lower, upper) for every covariate, or one pair per covariate) and ``y_bounds`` (a pair); options override
declarations. A row outside the bounds is clamped inside the mechanism (Stan already rejects data that violate
declared constraints when it loads them).

The price in advance (:func:`ssp_floor`): from N, the bounds and the noise sds alone, under a stated public
design assumption, the expected error of any answer built on this release in posterior sds and the width of
its intervals relative to a non-private fit.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, cast

import numpy as np

from ...likelihood import LinearRowLikelihood, LinearSpec, RowLikelihood
from ...output.run_result import RunResult
from ...privacy import PrivacyPlan, calibrate_phases
from ...privacy.events import NoiseDeclaration, Phase, gaussian_release
from ...privacy.moments import (box_centre_half_width, entry_weights, moment_sensitivities, moment_sensitivity,
                               release_moments, unit_moment_sensitivity)
from ...privacy.noise_source import stream
from ...user_warnings import warn
from ..method import CHAIN_TUNING_OPTIONS, chain_free_option_names, chain_free_options, check_lengths, refuse_chain_tuning
from ..registry import PlanInputs, PlannedMethod, register
from ..release_posterior import (ConvergencePolicy, PosteriorDraws, load_posterior_program, publish_release,
                                 sample_until_converged)
from .ssp_design import DesignPrior, design_prior_from_bounds
from .ssp_program import SSP_PREFIX, choose_centred, coefficient_expressions, ssp_data, ssp_inits, ssp_pieces

__all__ = ["SSP", "SSP_OPTIONS", "SSPPlan", "SSPFloor", "resolve_bounds", "covariate_pairs", "plan_ssp", "ssp_floor", "execute_ssp",
           "publish_ssp", "ssp_refusal", "check_ssp_options", "choose_linear_weight"]

SSP = "dp-ssp"
RELEASE = "dp-ssp: moment matrix of (1, x, y) (upper triangle without the constant N)"
DEFAULT_WARMUP = 1000
DEFAULT_DRAWS = 1000
#: the default cap (seconds) on the compute spent sampling the noise-aware posterior (post-processing)
DEFAULT_TIME_CAP = 900.0
#: the options dp-ssp takes (besides chains / iter_warmup / iter_sampling / seed / inits); ``thin`` is accepted and
#: ignored (deprecated: it thinned the random-walk Metropolis chains dp-ssp used before it sampled with NUTS; refused
#: from version 0.2.0)
SSP_OPTIONS = ("x_bounds", "y_bounds", "centred", "thin", "design_prior", "linear_weight", "time_cap")
#: the priors dp-ssp can put on the latent design moments (option ``design_prior``; the first is the default)
DESIGN_PRIORS = ("normal", "flat")
#: run-level options dp-ssp refuses (Stan's NUTS adapts its own)
NO_CHAIN_OPTIONS = CHAIN_TUNING_OPTIONS
#: the public design assumption of the floor: bounds at +-4 sds of each covariate and of the residuals
BOUND_SDS = 4.0
#: ... and the outcome's mean this many residual sds from the centre of its bounds (the intercept in the
#: release's centred coordinates; with it the noise of the sums reaches the slopes and sigma)
OFFSET_SDS = 1.0
#: from this price ratio for sigma on, its noise-aware posterior can lean towards 0 under vague priors (measured,
#: benchmarks/results/calibration.md: kidiq at ratio 6.5 covered 0.83 over 100 noise seeds, its mean 0.88 of its own
#: posterior sd low on average; kidiq at 2.4 and earnings at 3.3 covered 0.89 and 0.92; a simulated case at 4.3
#: covered 0.80 over 20 seeds with its mean only 0.18 posterior sds low). A judgement from few cases, said as such.
SIGMA_PRIOR_RATIO = 4.0
SIGMA_NOTE = ("this release pins sigma only loosely, so sigma's posterior is wide and shaped by the program's prior "
              "on sigma, and a run's sigma can land several of its sds from the non-private value, either way (on 434 "
              "real rows at this level its 90 % interval missed the non-private sigma in 17 % of noise seeds, not "
              "10 %): read sigma's interval as approximate, or give more budget or narrower bounds")
#: the weights of the sums :func:`choose_linear_weight` tries (1: unweighted)
LINEAR_WEIGHTS = tuple(1.0 + 0.25 * k for k in range(13))


def bound_pair(value: Any, what: str) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a pair (lower, upper) of numbers, got {value!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ValueError(f"{what} must be finite with lower < upper, got {value!r}")
    return lo, hi


def covariate_pairs(value: Any, k: int, what: str = "x_bounds") -> list[tuple[float, float]]:
    """One (lower, upper) pair per covariate from an option: one pair for all ``k`` covariates, or ``k`` pairs
    (``ValueError`` naming the fix otherwise)."""
    arr = np.asarray(value, dtype=object)
    if arr.ndim == 2:
        if arr.shape != (k, 2):
            raise ValueError(f"{what} must be one pair (lower, upper) or {k} pairs (one per covariate), got shape "
                             f"{arr.shape}")
        return [bound_pair(p, f"{what}[{j}]") for j, p in enumerate(value)]
    return [bound_pair(value, what)] * k


def resolve_bounds(spec: LinearSpec, options: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, str]:
    """The public box (lower, upper) of z = (x_1..x_K, y) and where it came from; ``ValueError`` naming the
    variables that have no bounds (neither declared nor given) and how to give them."""
    k = int(spec.n_covariates)
    lo = np.array([np.nan] * (k + 1))
    hi = np.array([np.nan] * (k + 1))
    source = []
    if spec.x_bounds is not None:
        lo[:k], hi[:k] = spec.x_bounds
    if spec.y_bounds is not None:
        lo[k], hi[k] = spec.y_bounds
    if options.get("x_bounds") is not None:
        pairs = covariate_pairs(options["x_bounds"], k)
        lo[:k] = [p[0] for p in pairs]
        hi[:k] = [p[1] for p in pairs]
        source.append("x_bounds option")
    elif spec.x_bounds is not None:
        source.append("declared bounds of the covariates")
    if options.get("y_bounds") is not None:
        lo[k], hi[k] = bound_pair(options["y_bounds"], "y_bounds")
        source.append("y_bounds option")
    elif spec.y_bounds is not None:
        source.append(f"declared bounds of {spec.outcome_name}")
    missing = [name for j, name in enumerate(spec.column_names) if not (np.isfinite(lo[j]) and np.isfinite(hi[j]))]
    if missing:
        raise ValueError(
            f"algorithm 'dp-ssp' needs public bounds for {', '.join(missing)}: declare them in the data block "
            f"(e.g. 'vector<lower=-4, upper=4>[N] y;', 'matrix<lower=-1, upper=1>[N, K] x;') or give "
            "x_bounds=(lower, upper) / y_bounds=(lower, upper), chosen from public knowledge, never from the rows")
    if np.any(hi <= lo):
        raise ValueError(f"dp-ssp bounds need lower < upper, got lower = {lo.tolist()}, upper = {hi.tolist()}")
    return lo, hi, " and ".join(source)


@dataclasses.dataclass(frozen=True)
class SSPFloor:
    """The price in advance (public): expected error in posterior sds of the intercept, each slope and sigma,
    their typical maximum, and the width of the noise-aware intervals relative to a non-private fit."""

    per_parameter: dict[str, float]
    max_error: float
    width_ratio: float
    assumption: str

    @property
    def sigma_leans_low(self) -> bool:
        """Whether the release pins sigma so loosely (price ratio >= SIGMA_PRIOR_RATIO) that, under vague priors,
        its posterior leans towards 0 (docs/algorithms/dp-ssp.md; a function of the price, so public)."""
        return self.per_parameter.get("sigma", 0.0) >= SIGMA_PRIOR_RATIO

    def sentence(self) -> str:
        text = (f"at these bounds and this budget no private method can be expected within about "
                f"{self.max_error:.2g} reference sds (the largest error over the coefficients and sigma); expect "
                f"intervals about {self.width_ratio:.2g} times wider than a non-private fit ({self.assumption})")
        return text + (f"; {SIGMA_NOTE}" if self.sigma_leans_low else "")


def ssp_floor(n_rows: int, lower: np.ndarray, upper: np.ndarray, noise_sd: float,
              noise_sd_linear: float | None = None) -> SSPFloor:
    """Expected error of the moment release in posterior sds, from public inputs only. ``noise_sd``: the noise
    sd of the products (quadratic entries); ``noise_sd_linear``: that of the sums (default the same).

    Assumption (public, stated): every covariate and the residuals have sd = half the box width / 4 (the bounds
    at +-4 sds), the covariates are uncorrelated and centred in their boxes, the slopes are small and the
    outcome's mean lies c0 = OFFSET_SDS residual sds from the centre of its box. Linearising the least-squares
    solution c = S_xx^-1 T and R = yy - T' S_xx^-1 T in the noise (s_q on the products, s_l on the sums): the
    intercept moves by s_l / N (posterior sd sigma / sqrt N), slope j by sqrt(s_q^2 + c0^2 s_l^2) / (N sd_j^2)
    (sd sigma / (sqrt N sd_j)), R by sqrt(s_q^2 + 4 c0^2 s_l^2) and so sigma by that / (2 N sigma) (sd sigma /
    sqrt(2 N)). The median of the largest of several half-normal errors is about 1.2 times the largest ratio;
    the noise-aware interval width about sqrt(1 + r^2) times the non-private one."""
    _, half = box_centre_half_width(lower, upper)
    sd = half / BOUND_SDS
    sd_x, sigma = sd[:-1], float(sd[-1])
    s_q = float(noise_sd)
    s_l = s_q if noise_sd_linear is None else float(noise_sd_linear)
    c0 = OFFSET_SDS * sigma
    n = float(n_rows)
    r = {"intercept": s_l / (math.sqrt(n) * sigma)}
    for j, s in enumerate(sd_x):
        r[f"slope {j + 1}"] = math.hypot(s_q, c0 * s_l) / (math.sqrt(n) * float(s) * sigma)
    r["sigma"] = math.hypot(s_q, 2.0 * c0 * s_l) / (math.sqrt(2.0 * n) * sigma**2)
    top = max(r.values())
    return SSPFloor(per_parameter=r, max_error=1.2 * top, width_ratio=math.sqrt(1.0 + top**2),
                    assumption="assumed: covariates and residuals with sds of a quarter of their bounds' half "
                               "widths, uncorrelated, covariates centred in their bounds, the outcome's mean one "
                               "residual sd from the centre of its bounds")


def choose_linear_weight(n_rows: int, lower: np.ndarray, upper: np.ndarray) -> float:
    """The weight w of the sums (``stan_dp.privacy.moments``) that minimises the price's largest error over
    ``LINEAR_WEIGHTS``: noise sd Delta_w on the products and Delta_w / w on the sums (the common factor tau
    cancels), so w depends on the bounds alone (public)."""
    _, half = box_centre_half_width(lower, upper)
    deltas = moment_sensitivities(half, LINEAR_WEIGHTS)  # the box's vertices enumerated once
    prices = [ssp_floor(n_rows, lower, upper, d, d / w).max_error for w, d in zip(LINEAR_WEIGHTS, deltas)]
    return LINEAR_WEIGHTS[int(np.argmin(prices))]


@dataclasses.dataclass(frozen=True)
class SSPPlan:
    """A dp-ssp run decided from public inputs alone: bounds, sensitivity, noise, chain lengths."""

    options: Mapping[str, Any]
    n_rows: int
    dim: int
    n_covariates: int
    lower: np.ndarray
    upper: np.ndarray
    bounds_source: str
    sensitivity: float
    epsilon: float
    delta: float
    chains: int
    iter_warmup: int
    iter_sampling: int
    privacy: PrivacyPlan
    auto: Any = None  # the AutoChoice when auto chose dp-ssp
    #: w, the weight of the sums against the products in the release (1: unweighted)
    linear_weight: float = 1.0
    #: a privacy unit's public cap k on its rows (None: row-level); then N is the number of units and the row
    #: count is released with the moments (weighted w), at the unit's sensitivity
    rows_per_unit: int | None = None

    label = SSP
    algorithm = SSP
    lengths = None
    debug_refusal = "algorithm 'dp-ssp' has no debug diagnostics (it evaluates no per-row log density)"
    checkpoint_refusal = "dp-ssp makes one release and runs chains on post-processing only"

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, inits: Any = None,
                show_progress: bool = True, **_: Any) -> ExecutedSSP:
        """:func:`execute_ssp` of this plan (the run's other arguments do not apply)."""
        # an SSPPlan is made only for a likelihood that declares its linear form (plan_run's facts.linear)
        return execute_ssp(self, cast(LinearRowLikelihood, likelihood), seed=seed, inits=inits,
                           show_progress=show_progress)

    def publish(self, executed: ExecutedSSP, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """:func:`publish_ssp` of this plan."""
        return publish_ssp(executed, self, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)

    @property
    def time_cap(self) -> float:
        """Seconds of compute the noise-aware posterior's sampling may take (post-processing; public)."""
        cap = self.options.get("time_cap")
        return DEFAULT_TIME_CAP if cap is None else float(cap)

    @property
    def policy(self) -> ConvergencePolicy:
        """When the noise-aware posterior's sampling stops (``stan_dp.methods.release_posterior``)."""
        return ConvergencePolicy(warmup=self.iter_warmup, draws=self.iter_sampling, time_cap=self.time_cap)

    @property
    def noise_sd(self) -> float:
        """s = tau * Delta_w, the sd of the noise on each released product (public)."""
        return float(self.privacy.parameters["tau_moments"]) * self.sensitivity

    @property
    def noise_sd_linear(self) -> float:
        """s / w, the sd of the noise on each released sum (public)."""
        return self.noise_sd / self.linear_weight

    @property
    def entry_noise_sds(self) -> np.ndarray:
        """The noise sd of every released moment entry, in the release's order (public; the count's is
        :attr:`count_noise_sd`)."""
        return self.noise_sd / entry_weights(self.n_covariates + 1, self.linear_weight)

    @property
    def count_noise_sd(self) -> float | None:
        """The released row count's noise sd (a privacy unit), else None (N is public)."""
        return None if self.rows_per_unit is None else self.noise_sd / self.linear_weight

    @property
    def assumed_rows(self) -> int:
        """The rows the price assumes: N, or with a privacy unit every unit at its cap (the most rows it may have)."""
        return self.n_rows * (self.rows_per_unit or 1)

    @property
    def floor(self) -> SSPFloor:
        return ssp_floor(self.assumed_rows, self.lower, self.upper, self.noise_sd, self.noise_sd_linear)

    @property
    def design_prior_kind(self) -> str:
        return str(self.options.get("design_prior") or DESIGN_PRIORS[0])

    def design_prior(self, n_rows: int | None = None) -> DesignPrior | None:
        """The prior of the latent design moments (public inputs only): the normal-rows model with Sigma's mode
        at the price's design assumption (``stan_dp.methods.dp_ssp.ssp_design``), or None for the flat prior. ``n_rows``:
        the rows it is for (default N; with a privacy unit an estimate from the released count)."""
        if self.design_prior_kind == "flat":
            return None
        half = box_centre_half_width(self.lower, self.upper)[1]
        return design_prior_from_bounds(self.n_rows if n_rows is None else n_rows, half[:-1], BOUND_SDS)

    def design_assumption(self) -> str:
        """The design prior in words (attrs)."""
        prior = self.design_prior()
        if prior is None:
            return "flat prior on the positive definite design moments (option design_prior='flat')"
        sds = ", ".join(f"{math.sqrt(v):.3g}" for v in np.diag(prior.psi) / (prior.nu + prior.n_covariates + 1))
        return (f"covariate rows normal with a flat prior on their mean and an inverse Wishart prior on their "
                f"covariance (nu = {prior.nu:g}) whose mode has sds {sds} (a quarter of each bound's half width) "
                "and no correlation; the scatter's prior is this covariance integrated out")

    def describe(self) -> dict[str, Any]:
        """Public description for the attrs (no data-dependent value)."""
        return {"x_bounds": np.column_stack([self.lower[:-1], self.upper[:-1]]).tolist(),
                "y_bounds": [float(self.lower[-1]), float(self.upper[-1])], "bounds_source": self.bounds_source,
                "sensitivity": self.sensitivity, "tau_moments": float(self.privacy.parameters["tau_moments"]),
                "linear_weight": self.linear_weight, "noise_sd": self.noise_sd,
                "noise_sd_linear": self.noise_sd_linear, "iter_warmup": self.iter_warmup, "time_cap": self.time_cap,
                "design_prior": self.design_prior_kind,
                **({"rows_per_unit": self.rows_per_unit, "count_noise_sd": self.count_noise_sd}
                   if self.rows_per_unit is not None else {}),
                **({"centred": self.options["centred"]} if self.options.get("centred") is not None else {})}

    def __str__(self) -> str:
        return (f"Run plan: dp-ssp, one release of the moment matrix of (1, x, y) with the whole budget "
                f"(epsilon = {self.epsilon:g}, delta = {self.delta:g}; N = {self.n_rows}, K = {self.n_covariates} "
                f"covariates, bounds from the {self.bounds_source}; sums weighted {self.linear_weight:g} against the "
                f"products, sensitivity {self.sensitivity:.4g}, noise sd {self.noise_sd:.4g} on the products and "
                f"{self.noise_sd_linear:.4g} on the sums); then Stan's NUTS on the noise-aware posterior, {self.chains} "
                f"chains x ({self.iter_warmup} + {self.iter_sampling}) iterations, doubled until R-hat <= 1.01 and "
                f"bulk and tail ESS >= 100 per chain or {self.time_cap:g} s of compute (post-processing). Price: "
                f"{self.floor.sentence()}.")


def _declaration() -> NoiseDeclaration:
    return NoiseDeclaration(
        parameters=lambda s: {"tau_moments": s},
        releases=lambda p: [gaussian_release(RELEASE, p["tau_moments"],
                                             note="sigma = tau Delta_w on each entry of W r (the sums weighted w); "
                                                  "Delta_w the replace-one L2 sensitivity of W r from the bounds "
                                                  "(docs/algorithms/dp-ssp.md); once per run")],
        noise_names=("tau_moments",))


def check_ssp_options(options: Mapping[str, Any]) -> None:
    """Refuse an option dp-ssp does not take (the names only: bounds are checked against the program)."""
    unknown = sorted(k for k in options if k not in SSP_OPTIONS)
    if unknown:
        raise ValueError(f"algorithm 'dp-ssp' does not take {', '.join(unknown)}; its options are "
                         f"{', '.join(SSP_OPTIONS)}")


def ssp_refusal(spec: LinearSpec | None, reason: str | None = None) -> str:
    """Why dp-ssp cannot run on a likelihood (for errors and auto's reason), in words."""
    if spec is None:
        return ("dp-ssp needs a normal linear regression row program (one statement y ~ normal(a + x * b, sigma) "
                f"or normal_id_glm over data variables){': ' + reason if reason else ''}")
    return reason or ""


def plan_ssp(n_rows: int, dim: int, *, linear: LinearSpec | None, epsilon: float, delta: float, chains: int = 4,
             iter_warmup: int | None = None, iter_sampling: int | None = None,
             run_options: Mapping[str, Any] | None = None, linear_refusal: str | None = None,
             auto: Any = None, rows_per_unit: int | None = None, **options: Any) -> SSPPlan:
    """The :class:`SSPPlan` from public inputs (N, dim, the linear structure and its bounds, the budget;
    ``rows_per_unit``: a privacy unit's cap, N then being the number of units)."""
    if linear is None:
        raise ValueError(f"algorithm 'dp-ssp' cannot run on this model: {ssp_refusal(None, linear_refusal)}")
    check_ssp_options(options)
    refuse_chain_tuning(SSP, run_options, "samples its own posterior with NUTS")
    if options.get("thin") is not None:
        warn("dp-ssp's option 'thin' no longer applies (its posterior is sampled with NUTS until converged) and is "
             "ignored; it will be refused from version 0.2.0", DeprecationWarning)
    cap = options.get("time_cap")
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, (int, float, np.integer, np.floating))
                            or not (math.isfinite(cap) and cap > 0)):
        raise ValueError(f"time_cap must be a positive number of seconds (the compute the noise-aware posterior's "
                         f"sampling may take), got {cap!r}")
    if linear.terms is None:
        raise ValueError("dp-ssp needs the program's coefficients as Stan references (a Stan program recognised as "
                         "a normal linear regression, or a reference model that gives them)")
    if options.get("design_prior") not in (None, *DESIGN_PRIORS):
        raise ValueError(f"design_prior must be one of {', '.join(map(repr, DESIGN_PRIORS))} (the prior of the "
                         f"latent design moments), got {options['design_prior']!r}")
    if options.get("centred") not in (None, True, False):
        raise ValueError(f"centred must be True, False or None (chosen from the release), got {options['centred']!r}")
    weight = options.get("linear_weight")
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float, np.integer, np.floating))
                               or not (math.isfinite(weight) and weight >= 1.0)):
        raise ValueError(f"linear_weight must be a number >= 1 (the weight of the sums against the products in the "
                         f"release; default chosen from the bounds), got {weight!r}")
    lower, upper, source = resolve_bounds(linear, options)
    k = int(linear.n_covariates)
    if int(n_rows) < k + 3:
        raise ValueError(f"dp-ssp needs N >= K + 3 rows, got N = {n_rows} with K = {k} covariates")
    _, half = box_centre_half_width(lower, upper)
    privacy = calibrate_phases([Phase(_declaration(), 1, 1)], epsilon=epsilon, delta=delta, algorithm=SSP)
    warm = DEFAULT_WARMUP if iter_warmup is None else int(iter_warmup)
    w = float(weight) if weight is not None else choose_linear_weight(int(n_rows), lower, upper)
    sensitivity = (moment_sensitivity(half, w) if rows_per_unit is None
                   else unit_moment_sensitivity(half, w, int(rows_per_unit), count_weight=w))
    return SSPPlan(options={k_: options.get(k_) for k_ in SSP_OPTIONS}, n_rows=int(n_rows), dim=int(dim),
                   n_covariates=k, lower=lower, upper=upper, bounds_source=source,
                   sensitivity=sensitivity, epsilon=float(epsilon), delta=float(delta),
                   chains=int(chains), iter_warmup=warm, iter_sampling=int(iter_sampling or DEFAULT_DRAWS),
                   privacy=privacy, auto=auto, linear_weight=w,
                   rows_per_unit=None if rows_per_unit is None else int(rows_per_unit))


def auto_ssp_reason(plan_floor: SSPFloor, bounds_source: str) -> str:
    """auto's sentence when it chooses dp-ssp."""
    return (f"dp-ssp: the program is a normal linear regression with public bounds ({bounds_source}), so one "
            f"release of its sufficient statistics with the whole budget is the best known use of it; "
            f"{plan_floor.sentence()}")


@dataclasses.dataclass(frozen=True)
class ExecutedSSP:
    """The released entries, the chains' record, the latent form and the noise-aware program with its sampling."""

    released: np.ndarray
    result: RunResult
    centred: bool
    program: str = ""
    sampling: PosteriorDraws | None = None


#: the first line of the generated program. It names no row count or other data: the program's text is its cache
#: key, so the same user program gets the same compiled posterior whatever the size of its data.
SSP_TITLE = "dp-ssp: noise-aware posterior given one release of the moment matrix of (1, x, y)"


def execute_ssp(plan: SSPPlan, likelihood: LinearRowLikelihood, *, seed: int | None = None, inits: Any = None,
                show_progress: bool = True, **_: Any) -> ExecutedSSP:
    """Release the moments (mechanism noise from its own generator; the only read of the rows), then sample the
    noise-aware posterior (``stan_dp.methods.dp_ssp.ssp_program``, Stan's NUTS; public randomness from another generator)
    until it has converged. ``inits`` is not used: the chains start from the release (post-processing) and
    Stan's random inits of the program's parameters."""
    spec = likelihood.linear_spec
    program = getattr(likelihood, "prior_program", None)
    if program is None or spec.terms is None:  # said before any row is read
        raise ValueError("dp-ssp needs the model as a Stan program (its noise-aware posterior is a Stan program); "
                         "this likelihood gives none")
    x, y = likelihood.linear_rows()
    z = np.column_stack([np.asarray(x, dtype=float).reshape(len(y), -1), np.asarray(y, dtype=float)])
    rng = stream(seed, "mechanism noise", "dp-ssp")
    count_weight = None if plan.rows_per_unit is None else plan.linear_weight
    released = release_moments(z, plan.lower, plan.upper, plan.noise_sd, rng, linear_weight=plan.linear_weight,
                               count_weight=count_weight)
    del x, y, z
    count, n_rows = None, plan.n_rows
    if count_weight is not None:  # the released row count, then the moments (post-processing from here on)
        count = (float(released[0]), float(plan.count_noise_sd or 0.0))
        released = released[1:]
        n_rows = max(int(round(count[0])), plan.n_covariates + 4)
    sds = plan.entry_noise_sds
    forced = plan.options.get("centred")
    centred = bool(forced) if forced is not None else choose_centred(released, n_rows, sds)
    terms = spec.terms
    pieces = ssp_pieces(**coefficient_expressions(terms.intercept, terms.slopes, terms.scale or "1"),
                        title=SSP_TITLE)
    added = ssp_data(released=released, noise_sds=sds, n_rows=n_rows, lower=plan.lower, upper=plan.upper,
                     centred=centred, design=plan.design_prior(n_rows), count=count)
    model, library, text = load_posterior_program(program, pieces, {**program.data, **added},
                                                  show_progress=show_progress)
    draw_rng = stream(seed, "posterior draws", "dp-ssp")
    sampled = sample_until_converged(model, library, prefix=SSP_PREFIX, dim=plan.dim, chains=plan.chains,
                                     rng=draw_rng, policy=plan.policy, inits=lambda r: ssp_inits(added, jitter=r),
                                     label="dp-ssp posterior", show_progress=show_progress)
    result = sampled.run_result(seeded=seed is not None,
                                init_description="the release (post-processing) for the latent statistics, Stan's "
                                                 "random inits for the program's parameters")
    return ExecutedSSP(released=released, result=result, centred=centred, program=text, sampling=sampled)


def posterior_target(design: str = "a flat prior") -> str:
    """What the released draws target, in words (attrs ``posterior_target``); ``design``: the design moments'
    prior in words."""
    return ("the noise-aware posterior of the program's parameters given the released moment matrix: the true "
            "moments are latent, the rows' likelihood given them is the exact normal linear-regression likelihood "
            f"(conditional on the design), the design moments have {design}, and the release noise is modelled "
            "with its public sd; the prior is the program's own. Rows outside the bounds were clamped to them.")


def publish_ssp(executed: ExecutedSSP, plan: SSPPlan, likelihood: RowLikelihood, *, model_name: str | None = None,
                source_hash: str | None = None, debug: bool = False, **_: Any) -> Any:
    """ArviZ data of a dp-ssp run: the chains' draws constrained with the data-free instance, the privacy report,
    the released moments and the plan in the attrs, and the convergence verdict of the released chains."""
    centre = box_centre_half_width(plan.lower, plan.upper)[0]
    fit = publish_release(executed.result, likelihood, plan, released="one Gaussian release of the moment matrix",
                          program=executed.program, sampling=executed.sampling, target=posterior_target(
                              "a flat prior" if plan.design_prior() is None
                              else "the prior of normal covariate rows (ssp_design_prior)"),
                          expected_error=float(plan.floor.max_error), extra_attrs={
                              "ssp_released_moments": json.dumps(np.asarray(executed.released).tolist()),
                              "ssp_centre": json.dumps(centre.tolist()),
                              "ssp_latent_form": "centred" if executed.centred else "non-centred",
                              "ssp_floor": plan.floor.sentence(), "ssp_design_prior": plan.design_assumption()},
                          debug=debug, model_name=model_name, source_hash=source_hash)
    if plan.floor.sigma_leans_low:
        warn(f"dp-ssp: {SIGMA_NOTE} (the price's ratio for sigma is {plan.floor.per_parameter['sigma']:.2g}).")
    return plan.auto.annotate(fit) if plan.auto is not None else fit


def _plan_request(inputs: PlanInputs) -> SSPPlan:
    """dp-ssp's plan of a request (the registry's entry point)."""
    check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
    facts = inputs.facts
    return plan_ssp(inputs.n_rows, inputs.dim, linear=facts.linear, linear_refusal=facts.linear_refusal,
                    rows_per_unit=facts.rows_per_unit, epsilon=inputs.epsilon, delta=inputs.delta,
                    chains=inputs.chains, iter_warmup=inputs.iter_warmup, iter_sampling=inputs.iter_sampling,
                    run_options=chain_free_options(inputs.run_level), **inputs.options)


#: dp-ssp in the registry: it reads the program's normal linear structure; a privacy unit needs its row cap
register(PlannedMethod(SSP, check_ssp_options, _plan_request, chain_free_option_names(SSP_OPTIONS),
                       reads=frozenset({"linear"}), unit_needs_cap=True))
