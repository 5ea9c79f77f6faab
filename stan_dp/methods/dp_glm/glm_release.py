"""``algorithm="dp-glm"``: a logistic or Poisson regression released once, then its noise-aware posterior sampled
until it has converged (docs/algorithms/dp-glm.md).

1. Plan (public inputs only: N, the covariates' public box, the outcome's cap for Poisson, the budget): two or
   more Gaussian releases of the score and the curvature of the clamped rows (``stan_dp.privacy.glm_statistics``),
   composed in one accounting that spends the whole budget. The shares are public options: ``anchor_share`` for the
   ``newton_points`` releases that find the anchor (split equally, half score and half curvature at each point),
   ``curvature_share`` for the final curvature, the rest for the final score, which carries the answer.
2. Release (the only place the rows are read): at the public start (all coefficients 0 in the release's
   coordinates) and at each noisy Newton point after it, then the final score and curvature at the last point
   (the anchor). The Newton steps are post-processing of the releases: the first one moves the intercept to
   where the released score says the outcome's mean is (every row has the same mean at the start, so the score
   and curvature at any intercept-only point follow exactly from the first release), then takes a Newton step
   from there; each step's curvature is projected to eigenvalues at least the noise's scale and the point kept
   in a public box of +-10 per coordinate.
3. Draws: Stan's NUTS on the noise-aware posterior (``stan_dp.methods.dp_glm.glm_posterior``), doubled until converged
   (``stan_dp.methods.release_posterior``); post-processing, any number of draws at the same budget.

Bounds: the data block's declared constraints on every covariate (and, for Poisson, the outcome's declared upper
bound, its cap), else the options ``x_bounds`` and ``y_bounds``. A row outside them is clamped inside the
mechanism; Stan rejects data outside declared constraints when it loads them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, cast

import numpy as np

from ...likelihood import GLMRowLikelihood, GLMSpec, RowLikelihood
from ...output.run_result import RunResult
from ...privacy import PrivacyPlan, calibrate_phases
from ...privacy.events import NoiseDeclaration, Phase, gaussian_release
from ...privacy.glm_statistics import GLMBox, GLMRelease, glm_design, release_glm_statistics
from ...privacy.noise_source import stream
from ...samplers.options import Option, OptionSpec
from ...stan.posterior_program import coefficient_expressions
from .glm_posterior import GLM_PREFIX, glm_data, glm_inits, glm_pieces
from ..method import CHAIN_TUNING_OPTIONS, chain_free_option_names, chain_free_options, check_lengths, refuse_chain_tuning
from ..registry import PlanInputs, PlannedMethod, register
from ..release_posterior import (ConvergencePolicy, PosteriorDraws, load_posterior_program, publish_release,
                                 sample_until_converged)
from ..dp_ssp.ssp import bound_pair, covariate_pairs

__all__ = ["GLM", "GLM_SPEC", "GLMPlan", "plan_glm", "execute_glm", "publish_glm", "glm_box", "newton_point",
           "glm_price", "design_posterior_sd", "BOUND_OPTIONS"]

GLM = "dp-glm"
SCORE_RELEASE = "dp-glm: score sum at a Newton point"
CURVATURE_RELEASE = "dp-glm: curvature sum at a Newton point"
FINAL_SCORE_RELEASE = "dp-glm: score sum at the anchor"
FINAL_CURVATURE_RELEASE = "dp-glm: curvature sum at the anchor"
DEFAULT_WARMUP = 1000
DEFAULT_DRAWS = 1000
#: a public box for the Newton points (release coordinates: an effect of 10 per half width is beyond any
#: plausible logistic or Poisson coefficient)
POINT_BOX = 10.0
#: the weak ridge of the Newton steps (a N(0, 1) prior on each release coordinate; public)
NEWTON_RIDGE = 1.0

#: Newton points by family. A logistic row's curvature is at most a quarter everywhere, so one step from the
#: intercept's exact move lands close enough for the quadratic model; a Poisson row's curvature is its mean,
#: which changes by orders of magnitude across a box, so the anchor must come nearer the mode before the
#: quadratic model holds (on the calibration's Poisson case at epsilon 10: errors up to 43 posterior sds with one
#: point, up to 8 with three)
DEFAULT_NEWTON_POINTS = {"logistic": 1, "poisson": 3}

GLM_SPEC = OptionSpec(GLM, [
    Option("anchor_share", "real", 0.15, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget (Gaussian-DP rho) spent on the releases that find the anchor"),
    Option("curvature_share", "real", 0.35, low=0.0, high=1.0, low_open=True, high_open=True,
           doc="share of the budget spent on the curvature at the anchor (the rest goes to the score there)"),
    Option("newton_points", "int", None, low=1, high=5, none_means=f"{DEFAULT_NEWTON_POINTS['logistic']} for a "
           f"logistic program, {DEFAULT_NEWTON_POINTS['poisson']} for a Poisson one",
           doc="releases (score and curvature) before the anchor's: the public start, then noisy Newton points"),
    Option("mean_cap", "real", None, low=0.0, low_open=True, none_means="the count's cap y_max",
           doc="Poisson: a public cap on a row's mean in the released statistics (rows above it count as at it: a "
               "bias, never a leak); below y_max it makes the curvature's noise y_max / mean_cap times smaller"),
    Option("time_cap", "real", 900.0, low=0.0, low_open=True,
           doc="seconds of compute the noise-aware posterior's sampling may take (post-processing)"),
])
#: options given as pairs, checked here (not by the spec)
BOUND_OPTIONS = ("x_bounds", "y_bounds")


def glm_box(spec: GLMSpec, options: Mapping[str, Any], rows_per_unit: int | None = None,
            mean_cap: float | None = None) -> tuple[GLMBox, str]:
    """The release's public box and where it came from; ``ValueError`` naming what is missing and how to give it."""
    k = int(spec.n_covariates)
    if options.get("x_bounds") is not None:
        pairs = covariate_pairs(options["x_bounds"], k)
        lower, upper = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        source = ["x_bounds option"]
    elif spec.x_bounds is not None:
        lower, upper = (np.asarray(b, dtype=float) for b in spec.x_bounds)
        source = ["declared bounds of the covariates"]
    else:
        raise ValueError(
            f"algorithm 'dp-glm' needs public bounds for every covariate ({', '.join(spec.column_names[:-1])}): "
            "declare them in the data block (e.g. 'matrix<lower=-1, upper=1>[N, K] x;', 'vector<lower=0, "
            "upper=10>[N] dose;') or give x_bounds=(lower, upper), chosen from public knowledge, never from the rows")
    y_max = 1.0
    if spec.family == "poisson":
        if options.get("y_bounds") is not None:
            y_max = bound_pair(options["y_bounds"], "y_bounds")[1]
            source.append("y_bounds option")
        elif spec.y_bounds is not None:
            y_max = float(spec.y_bounds[1])
            source.append(f"declared upper bound of {spec.outcome_name}")
        else:
            raise ValueError(
                f"algorithm 'dp-glm' on a Poisson regression needs a public cap on the count {spec.outcome_name}: "
                f"declare it (e.g. 'array[N] int<lower=0, upper=50> {spec.outcome_name};') or give y_bounds=(0, cap)")
        if not y_max > 0:
            raise ValueError(f"the count's cap must be positive, got {y_max:g}")
    box = GLMBox(lower=lower, upper=upper, intercept=spec.intercept, family=spec.family, y_max=y_max,
                 rows_per_unit=int(rows_per_unit or 1), mean_cap=mean_cap if spec.family == "poisson" else None)
    return box, " and ".join(source)


@dataclasses.dataclass(frozen=True)
class GLMPlan:
    """A dp-glm run decided from public inputs alone: the box, the releases' noise, the chains' lengths."""

    options: Mapping[str, Any]
    n_rows: int
    dim: int
    box: GLMBox
    bounds_source: str
    epsilon: float
    delta: float
    chains: int
    iter_warmup: int
    iter_sampling: int
    privacy: PrivacyPlan
    auto: Any = None

    label = GLM
    algorithm = GLM
    lengths = None
    debug_refusal = "algorithm 'dp-glm' has no debug diagnostics (it evaluates no per-row log density)"
    checkpoint_refusal = "dp-glm makes its releases once and runs chains on post-processing only"

    def execute(self, likelihood: RowLikelihood, *, seed: int | None = None, show_progress: bool = True,
                **_: Any) -> ExecutedGLM:
        """:func:`execute_glm` of this plan (the run's other arguments do not apply)."""
        return execute_glm(self, cast(GLMRowLikelihood, likelihood), seed=seed, show_progress=show_progress)

    def publish(self, executed: ExecutedGLM, likelihood: RowLikelihood, *, debug: bool = False,
                model_name: str | None = None, source_hash: str | None = None) -> Any:
        """:func:`publish_glm` of this plan."""
        return publish_glm(executed, self, likelihood, debug=debug, model_name=model_name, source_hash=source_hash)

    @property
    def points(self) -> int:
        return int(self.options["newton_points"])

    def taus(self, final: bool) -> tuple[float, float]:
        """The noise multipliers (score, curvature) of a Newton point's releases or of the anchor's."""
        p = self.privacy.parameters
        return (p["tau_score"], p["tau_curvature"]) if final else (p["tau_point_score"], p["tau_point_curvature"])

    @property
    def score_sd(self) -> float:
        """The final score's noise sd (public)."""
        return self.taus(True)[0] * self.box.score_sensitivity

    @property
    def policy(self) -> ConvergencePolicy:
        return ConvergencePolicy(warmup=self.iter_warmup, draws=self.iter_sampling,
                                 time_cap=float(self.options["time_cap"]))

    @property
    def assumed_rows(self) -> int:
        """The rows the price assumes: N, or with a privacy unit every unit at its cap."""
        return self.n_rows * int(self.box.rows_per_unit)

    @property
    def price(self) -> float:
        """The expected largest error in posterior sds (:func:`glm_price`; public)."""
        return glm_price(self.assumed_rows, self.box, self.score_sd)

    def describe(self) -> dict[str, Any]:
        """Public description for the attrs (options, box, noise; no data-dependent value)."""
        p = self.privacy.parameters
        return {**{k: v for k, v in self.options.items() if v is not None},
                "family": self.box.family, "x_bounds": np.column_stack([self.box.lower, self.box.upper]).tolist(),
                "bounds_source": self.bounds_source, "intercept": int(self.box.intercept),
                **({"y_max": self.box.y_max} if self.box.family == "poisson" else {}),
                "design_bound": self.box.design_bound, "score_sensitivity": self.box.score_sensitivity,
                "curvature_sensitivity": self.box.curvature_sensitivity,
                **{k: float(v) for k, v in p.items()}, "score_noise_sd": self.score_sd,
                "iter_warmup": self.iter_warmup}

    def __str__(self) -> str:
        return (f"Run plan: dp-glm ({self.box.family}), {self.points} release(s) of the score and curvature that "
                f"find the anchor, then one of each at the anchor, with the whole budget (epsilon = "
                f"{self.epsilon:g}, delta = {self.delta:g}; N = {self.n_rows}, bounds from the {self.bounds_source}; "
                f"the anchor's score noise sd {self.score_sd:.4g}); then Stan's NUTS on the noise-aware posterior, "
                f"{self.chains} chains x ({self.iter_warmup} + {self.iter_sampling}) iterations, doubled until "
                f"converged (post-processing). Expected largest error: about {self.price:.2g} posterior sds"
                + (POISSON_PRICE_CAVEAT if self.box.family == "poisson" else "") + ".")


def _phases(options: Mapping[str, Any]) -> list[Phase]:
    """The releases as phases of one accounting, all scaled by one noise scale s (their rho shares as given)."""
    points = int(options["newton_points"])
    anchor, curvature = float(options["anchor_share"]), float(options["curvature_share"])
    score = 1.0 - anchor - curvature
    if not score > 0:
        raise ValueError(f"anchor_share + curvature_share must leave a share for the anchor's score (< 1), got "
                         f"{anchor:g} + {curvature:g}")
    names = ("tau_point_score", "tau_point_curvature", "tau_score", "tau_curvature")

    def taus(s: float) -> dict[str, float]:
        per_point = anchor / (2.0 * points)
        return {"tau_point_score": s / math.sqrt(per_point), "tau_point_curvature": s / math.sqrt(per_point),
                "tau_score": s / math.sqrt(score), "tau_curvature": s / math.sqrt(curvature)}

    def phase(name: str, key: str, note: str, count: int) -> Phase:
        decl = NoiseDeclaration(parameters=taus, releases=lambda p: [gaussian_release(name, p[key], note=note)],
                                noise_names=names)
        return Phase(decl, 1, count)

    return [phase(SCORE_RELEASE, "tau_point_score", "sigma = tau 2 a B; one per Newton point", points),
            phase(CURVATURE_RELEASE, "tau_point_curvature",
                  "sigma = tau sqrt(2) w B^2 on the weighted upper triangle; one per Newton point", points),
            phase(FINAL_SCORE_RELEASE, "tau_score", "sigma = tau 2 a B; once", 1),
            phase(FINAL_CURVATURE_RELEASE, "tau_curvature", "sigma = tau sqrt(2) w B^2; once", 1)]


def plan_glm(n_rows: int, dim: int, *, glm: GLMSpec | None, epsilon: float, delta: float, chains: int = 4,
             iter_warmup: int | None = None, iter_sampling: int | None = None,
             run_options: Mapping[str, Any] | None = None, glm_refusal: str | None = None, auto: Any = None,
             rows_per_unit: int | None = None, **options: Any) -> GLMPlan:
    """The :class:`GLMPlan` from public inputs (N, the regression's structure and bounds, the budget;
    ``rows_per_unit``: a privacy unit's cap, N then being the number of units)."""
    if glm is None:
        raise ValueError("algorithm 'dp-glm' cannot run on this model: it needs a logistic or Poisson regression row "
                         "program (one statement y ~ bernoulli_logit(a + x * b) or poisson_log(...), or their _glm "
                         f"forms){': ' + glm_refusal if glm_refusal else ''}")
    refuse_chain_tuning(GLM, run_options, "samples its own posterior with NUTS")
    spec_options = {k: v for k, v in options.items() if k not in BOUND_OPTIONS}
    cfg = GLM_SPEC.validate(spec_options)
    if cfg["newton_points"] is None:
        cfg["newton_points"] = DEFAULT_NEWTON_POINTS[glm.family]
    box, source = glm_box(glm, options, rows_per_unit, cfg["mean_cap"])
    if int(n_rows) < box.dim + 1:
        raise ValueError(f"dp-glm needs more rows than coefficients, got N = {n_rows} with {box.dim}")
    privacy = calibrate_phases(_phases(cfg), epsilon=epsilon, delta=delta, algorithm=GLM)
    return GLMPlan(options={**cfg, **{k: options.get(k) for k in BOUND_OPTIONS}}, n_rows=int(n_rows), dim=int(dim),
                   box=box, bounds_source=source, epsilon=float(epsilon), delta=float(delta), chains=int(chains),
                   iter_warmup=DEFAULT_WARMUP if iter_warmup is None else int(iter_warmup),
                   iter_sampling=int(iter_sampling or DEFAULT_DRAWS), privacy=privacy, auto=auto)


def _mean_and_weight(family: str, eta: float, cap: float) -> tuple[float, float]:
    if family == "logistic":
        m = 1.0 / (1.0 + math.exp(-eta))
        return m, m * (1.0 - m)
    m = min(math.exp(min(eta, 700.0)), cap)
    return m, m


def newton_point(release: GLMRelease, box: GLMBox, n_rows: int | None) -> np.ndarray:
    """The next point from one release (post-processing, module doc): at the public start with an intercept, the
    intercept moves to the outcome's released mean first; then a Newton step on the curvature projected to
    eigenvalues at least its noise's scale, with a weak ridge, kept in the public box. ``n_rows``: the number of
    rows when public, else None (a privacy unit: read from the released curvature's intercept entry, the weight
    at the start times the rows)."""
    theta = release.point.copy()
    score = release.score.copy()
    curvature = release.curvature_matrix()
    d = theta.size
    if box.intercept and not np.any(theta):  # every row has the same mean: move along the intercept exactly
        m0, w0 = _mean_and_weight(box.family, 0.0, box.cap)
        rows = float(n_rows) if n_rows is not None else max(float(curvature[0, 0]) / w0, 1.0)
        upper = 1.0 - 0.5 / rows if box.family == "logistic" else box.cap
        mean = min(max(m0 + score[0] / rows, 0.5 / rows), upper)
        eta = math.log(mean / (1.0 - mean)) if box.family == "logistic" else math.log(mean)
        _, w = _mean_and_weight(box.family, eta, box.cap)
        design_sums = curvature[0] / w0  # sum_i v_i (the curvature's first row at the start, over the weight)
        score = score + (m0 - mean) * design_sums
        curvature = curvature * (w / w0)
        theta[0] = eta
    floor = 2.0 * math.sqrt(d) * float(np.max(release.curvature_sds))
    vals, vecs = np.linalg.eigh(0.5 * (curvature + curvature.T))
    step = vecs @ ((vecs.T @ score) / (np.maximum(vals, floor) + NEWTON_RIDGE))
    return np.clip(theta + step, -POINT_BOX, POINT_BOX)


def _design_curvature(n_rows: int, box: GLMBox) -> np.ndarray:
    """The curvature (release coordinates) of the price's public design assumption (:func:`glm_price`)."""
    weight = 0.2 if box.family == "logistic" else box.y_max / 4.0
    scale = np.full(box.dim, DESIGN_SD**2)
    if box.intercept:
        scale[0] = 1.0
    return n_rows * weight * np.diag(scale)


def design_posterior_sd(n_rows: int, box: GLMBox) -> np.ndarray:
    """The posterior sds of the program's coefficients under the price's public design assumption."""
    to_user = box.to_user()
    return np.sqrt(np.diag(to_user @ np.linalg.inv(_design_curvature(n_rows, box)) @ to_user.T))


def glm_price(n_rows: int, box: GLMBox, score_sd: float, draws: int = 400) -> float:
    """The expected largest error of the draws' means in posterior sds, from public inputs only: the score's noise
    through the curvature of an assumed design (covariates uncorrelated with sds of DESIGN_SD half widths around
    the box's centre; p (1 - p) = 0.2 for logistic, a mean of y_max / 4 for Poisson), in the program's own
    coefficients, as the median over ``draws`` noise draws (fixed public seed) of the largest ratio."""
    curvature = _design_curvature(n_rows, box)
    to_user = box.to_user()
    sd = design_posterior_sd(n_rows, box)
    xi = np.random.default_rng(0).standard_normal((draws, box.dim)) * float(score_sd)
    errors = xi @ np.linalg.inv(curvature) @ to_user.T
    return float(np.median(np.max(np.abs(errors) / sd, axis=1)))


#: what the Poisson price assumes and how it fared (said with the price of every Poisson plan)
POISSON_PRICE_CAVEAT = ("; for a Poisson program this assumes a mean of a quarter of the count's cap, and counts far "
                        "below their cap make the error larger (on a calibration case with a mean of 0.3 against a "
                        "cap of 10 the measured error was 2-15 times the price; a public mean_cap near the largest "
                        "mean you expect helps)")

#: the assumed covariate sd in half widths (the price's public design assumption). A covariate spread evenly over
#: its declared box has 0.58, one at the box's two ends 1; real covariates sit inside their boxes unevenly, and on
#: the calibration battery's logistic cases the measured error over this price ranged over a factor of about 3.7:
#: 0.5 is the value that puts that range within 2x either way (benchmarks/results/calibration.md)
DESIGN_SD = 0.5


@dataclasses.dataclass(frozen=True)
class ExecutedGLM:
    """The releases (the Newton points', then the anchor's), the chains' record and the noise-aware program."""

    releases: tuple[GLMRelease, ...]
    result: RunResult
    program: str
    sampling: PosteriorDraws


def execute_glm(plan: GLMPlan, likelihood: GLMRowLikelihood, *, seed: int | None = None,
                show_progress: bool = True) -> ExecutedGLM:
    """The releases (mechanism noise from its own generator; the only read of the rows), then the noise-aware
    posterior sampled until converged (public randomness from another generator)."""
    spec = likelihood.glm_spec
    program = getattr(likelihood, "prior_program", None)
    if program is None:  # said before any row is read
        raise ValueError("dp-glm needs the model as a Stan program (its noise-aware posterior is a Stan program); "
                         "this likelihood gives none")
    rng = stream(seed, "mechanism noise", GLM)
    x, y = likelihood.glm_rows()
    design = glm_design(x, plan.box)
    theta = np.zeros(plan.box.dim)
    releases = []
    tau_g, tau_h = plan.taus(False)
    for _ in range(plan.points):
        release = release_glm_statistics(design, y, theta, plan.box, tau_score=tau_g, tau_curvature=tau_h, rng=rng)
        releases.append(release)
        theta = newton_point(release, plan.box, plan.n_rows if plan.box.rows_per_unit == 1 else None)
    tau_g, tau_h = plan.taus(True)
    releases.append(release_glm_statistics(design, y, theta, plan.box, tau_score=tau_g, tau_curvature=tau_h,
                                           rng=rng))
    del x, y, design
    terms = spec.terms
    exprs = coefficient_expressions(terms.intercept, terms.slopes, "1")
    coefficients = f"append_row({exprs['intercept']}, {exprs['slopes']})" if plan.box.intercept else exprs["slopes"]
    # the title names no row count: the program's text is its cache key (same program, same library, any N)
    pieces = glm_pieces(coefficients, title=f"dp-glm: noise-aware posterior of a {plan.box.family} regression given "
                                            "its score and curvature released at an anchor")
    added = glm_data(releases[-1], np.linalg.inv(plan.box.to_user()))
    model, library, text = load_posterior_program(program, pieces, {**program.data, **added},
                                                  show_progress=show_progress)
    sampled = sample_until_converged(model, library, prefix=GLM_PREFIX, dim=plan.dim, chains=plan.chains,
                                     rng=stream(seed, "posterior draws", GLM), policy=plan.policy,
                                     inits=lambda r: glm_inits(added, jitter=r), label="dp-glm posterior",
                                     show_progress=show_progress)
    result = sampled.run_result(seeded=seed is not None,
                                init_description="the release (post-processing) for the latent curvature, Stan's "
                                                 "random inits for the program's parameters")
    return ExecutedGLM(releases=tuple(releases), result=result, program=text, sampling=sampled)


def posterior_target(plan: GLMPlan) -> str:
    """What the released draws target, in words (attrs ``posterior_target``)."""
    return (f"the noise-aware posterior of the program's parameters given the released score and curvature of the "
            f"{plan.box.family} regression at a private anchor: the rows' log-likelihood taken as quadratic around "
            "the anchor (the score's law N(H (theta - anchor), H) with the curvature H latent and a flat prior on "
            "it), the release noise modelled with its public sds, and the program's own prior. Rows outside the "
            "bounds were clamped to them; a Poisson row's fitted mean above the count's cap counts as the cap.")


def publish_glm(executed: ExecutedGLM, plan: GLMPlan, likelihood: RowLikelihood, *, model_name: str | None = None,
                source_hash: str | None = None, debug: bool = False, **_: Any) -> Any:
    """ArviZ data of a dp-glm run: the draws constrained with the data-free instance, the privacy report, the
    releases and the plan in the attrs, the noise-aware program and the convergence verdict of the chains."""
    releases = [{"point": r.point.tolist(), "score": r.score.tolist(), "curvature_upper": np.asarray(r.curvature).tolist()}
                for r in executed.releases]
    fit = publish_release(executed.result, likelihood, plan, released=(
        f"{2 * len(executed.releases)} Gaussian releases, composed in one accounting"), program=executed.program,
        sampling=executed.sampling, target=posterior_target(plan), expected_error=plan.price,
        extra_attrs={"glm_releases": json.dumps(releases)}, debug=debug, model_name=model_name,
        source_hash=source_hash)
    return plan.auto.annotate(fit) if plan.auto is not None else fit


#: run-level options dp-glm refuses (Stan's NUTS adapts its own)
NO_CHAIN_OPTIONS = CHAIN_TUNING_OPTIONS


def _check_request(options: Mapping[str, Any]) -> None:
    """dp-glm's options checked by its spec (its bounds are checked against the program when it is planned)."""
    GLM_SPEC.validate({k: v for k, v in options.items() if k not in BOUND_OPTIONS})


def _plan_request(inputs: PlanInputs) -> GLMPlan:
    """dp-glm's plan of a request (the registry's entry point)."""
    check_lengths(inputs.chains, inputs.iter_warmup, inputs.iter_sampling)
    facts = inputs.facts
    return plan_glm(inputs.n_rows, inputs.dim, glm=facts.glm, glm_refusal=facts.glm_refusal,
                    rows_per_unit=facts.rows_per_unit, epsilon=inputs.epsilon, delta=inputs.delta,
                    chains=inputs.chains, iter_warmup=inputs.iter_warmup, iter_sampling=inputs.iter_sampling,
                    run_options=chain_free_options(inputs.run_level), **inputs.options)


#: dp-glm in the registry: it reads the program's logistic or Poisson structure; a privacy unit needs its row cap
register(PlannedMethod(GLM, _check_request, _plan_request, chain_free_option_names((*GLM_SPEC.names, *BOUND_OPTIONS)),
                       reads=frozenset({"glm"}), unit_needs_cap=True))
