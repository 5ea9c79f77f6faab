"""OPS, "one posterior sample" (Wang, Fienberg and Smola, "Privacy for free", 2015: Algorithm 1, section 3, Theorem 4 and Proposition 3).

Mechanism. Each row's log-likelihood is clipped to a public interval [a, b] (``loglik_bounds``), so that
substituting one row changes the clipped log-likelihood sum by at most Delta = b - a at every theta. The
tempered, clipped posterior

    pi_rho(theta) ∝ p0(theta)^kappa * exp(rho * sum_i clip(l_i(theta), a, b)),
    rho = min(1, epsilon_draw / (2 Delta)),  kappa = rho (``temper_prior=True``, default) or 1,

changes by a factor within exp(+-rho Delta) in its unnormalised density and within exp(+-rho Delta) in its
normaliser, so one EXACT draw from it is (2 rho Delta)-DP <= epsilon_draw-DP, pure (Wang, Fienberg and Smola (2015), Theorem 4 with
the range of the clipped row log-likelihood in place of 2B; see the seed README). The prior factor is
data-free, so tempering it or not does not change the guarantee; tempering it (default) makes the draw
exactly "the posterior to the power rho", whose spread is 1/rho times the posterior's for Gaussian
posteriors (the cost of privacy, Wang, Fienberg and Smola (2015) Proposition 9: relative efficiency about 1 + 4B / epsilon).

Sampler. A NumPy multinomial NUTS (``stan_dp.samplers.nuts``) runs on pi_rho through the row API (value and
gradient of the clipped sum: a clipped row contributes a constant and no gradient; a row whose evaluation
failed (NaN) counts as the lower bound a, so no row can remove part of the support, see
``mechanisms.clipped_log_likelihood_sum``). Its settings are public
and fixed (``max_depth``, ``nuts_target_accept``, the run's ``iter_warmup`` as the internal warmup and
``thin``); step size and diagonal metric are adapted INSIDE the mechanism during the internal warmup and are
never released. Each chain releases ``iter_sampling`` draws, one every ``thin`` NUTS iterations after the
internal warmup; nothing else leaves the mechanism (the released sample_stats carry only constants).

Guarantee: CONDITIONAL ON EXACT SAMPLING. Each released draw is epsilon_draw-DP if, given the draws released
before it, it is an exact draw from pi_rho; a Markov chain only approximates that (Proposition 3: within
total variation delta' for every data set gives (epsilon_draw, (1 + e^epsilon_draw) delta')), and no
diagnostic can certify the approximation. ``thin`` (default 10) lets the internal chain forget the previous
released draw between releases. The k = chains * iter_sampling released draws compose: the report gives
the tight composition of k pure epsilon_draw mechanisms at the run's delta (dp-accounting's PLD of
(epsilon_draw, 0)-DP mechanisms, the optimal composition of pure DP), and the basic (pure, delta = 0)
composition k * epsilon_draw is recorded in the mechanism note.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from ..likelihood import RowLikelihood
from ..privacy import mechanisms
from ..privacy.events import NoiseDeclaration, Release, epsilon_delta_release
from .base import ChainState, KernelBase, StepInfo, check_theta
from .nuts import NUTS
from .options import Option, OptionSpec

__all__ = ["OPS", "ClippedTemperedPosterior", "CONDITIONAL_GUARANTEE", "ops_temperature", "ops_option_spec",
           "check_loglik_bounds"]

CONDITIONAL_GUARANTEE = (
    "pure epsilon-DP per released OPS draw, CONDITIONAL ON EXACT SAMPLING (the Privacy-for-Free paper, Wang, "
    "Fienberg and Smola 2015, long version, Theorem 4 and Proposition 3): the guarantee holds only if every "
    "released OPS draw, given the draws released before it, is an exact draw from the tempered clipped posterior. "
    "The internal NUTS chain only approximates this and no diagnostic can certify it. The stated (epsilon, delta) "
    "composes these draws with any other mechanisms of the run.")

OPS_RELEASE = "OPS draw from the tempered clipped posterior"

BOUNDS_DOC = ("(a, b): public bounds on every row's log-likelihood l_i(theta); each l_i is clipped to [a, b] and "
              "the temperature is rho = min(1, epsilon_draw / (2 (b - a))). Only you know a valid bound, so there "
              "is no default: for a Bernoulli (logistic) row l_i <= 0, so give (a, 0) with a the smallest "
              "log-probability you accept, e.g. loglik_bounds=(-5, 0)")


class BoundsOption(Option):
    """An option whose value is a pair (a, b) of finite numbers with a < b."""

    def requirement(self) -> str:
        return "a pair (a, b) of finite numbers with a < b"

    def convert(self, value: Any) -> Any:
        if value is None:
            return None
        return check_loglik_bounds(value, error=lambda: ValueError(self.requirement()))


def check_loglik_bounds(value: Any, error: Callable[[], Exception] | None = None) -> tuple[float, float]:
    """``value`` as a pair (a, b) of finite floats with a < b, or ValueError."""
    def fail() -> Exception:
        return error() if error is not None else ValueError(
            f"loglik_bounds must be a pair (a, b) of finite numbers with a < b, got {value!r}; {BOUNDS_DOC}")

    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise fail()
    a, b = value
    for x in (a, b):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
            raise fail()
    if not float(a) < float(b):
        raise fail()
    return float(a), float(b)


def ops_option_spec(algorithm: str = "ops") -> list[Option]:
    """The OPS options (shared with the OPS warm start)."""
    return [
        BoundsOption("loglik_bounds", "real", None, required=True, doc=BOUNDS_DOC),
        Option("temper_prior", "bool", True,
               doc="temper the prior with the likelihood (the draw is then the posterior to the power rho); "
                   "False keeps the prior untempered (same guarantee: the prior is data-free)"),
        Option("thin", "int", 10, low=1,
               doc="internal NUTS iterations per released draw (public; more lets the chain forget the previous "
                   "released draw, which the conditional guarantee assumes)"),
        Option("max_depth", "int", 10, low=1, high=15, doc="largest NUTS tree depth of the internal sampler"),
        Option("nuts_target_accept", "real", 0.8, low=0.0, high=1.0, low_open=True, high_open=True,
               doc="dual-averaging target of the internal NUTS warmup (adapted inside the mechanism, never released)"),
    ]


def ops_temperature(epsilon_draw: float, bounds: tuple[float, float]) -> float:
    """rho = min(1, epsilon_draw / (2 (b - a)))."""
    a, b = bounds
    return min(1.0, float(epsilon_draw) / (2.0 * (b - a)))


class ClippedTemperedPosterior:
    """log pi_rho and its gradient through the row API (private: never released)."""

    def __init__(self, likelihood: RowLikelihood, bounds: tuple[float, float], rho: float, temper_prior: bool = True):
        self.likelihood = likelihood
        self.low, self.high = bounds
        self.rho = float(rho)
        self.prior_power = self.rho if temper_prior else 1.0

    def value_and_grad(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        """log pi_rho(theta) (up to a constant) and its gradient. Every row's term is clipped to [a, b] by
        ``mechanisms.clipped_log_likelihood_sum`` (NaN counts as a), so the clipped sum is always finite and
        only the data-free prior can make the value -inf."""
        lp0, g0 = self.likelihood.log_prior_grad(theta)
        g0 = np.asarray(g0, dtype=float)
        if not math.isfinite(float(lp0)):  # outside the prior's support (data-free)
            return -math.inf, np.zeros_like(g0)
        values, grads = self.likelihood.row_log_lik_grad(theta)
        loglik, loglik_grad = mechanisms.clipped_log_likelihood_sum(values, grads, self.low, self.high)
        value = self.prior_power * float(lp0) + self.rho * loglik
        grad = self.prior_power * g0 + self.rho * loglik_grad
        if not np.all(np.isfinite(grad)):  # the prior's gradient overflowed (data-free)
            return -math.inf, np.zeros_like(grad)
        return value, grad


class OPS(KernelBase):
    """OPS: draws from the tempered, clipped posterior by an internal NUTS (see the module doc).

    Options (``option_spec``): loglik_bounds (required), temper_prior, thin, max_depth, nuts_target_accept.
    Plan: ``epsilon_draw``, the pure epsilon of one released draw.
    The run's ``iter_warmup`` is the internal NUTS warmup of each chain: it releases nothing and is not
    accounted (``internal_warmup``); ``iter_sampling`` draws per chain are released and accounted.
    """

    accounting_name: ClassVar[str] = "ops"
    option_spec: ClassVar[OptionSpec] = OptionSpec("ops", ops_option_spec())
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    adapts_step_size: ClassVar[bool] = False
    #: the run's warmup happens inside the mechanism (nothing released, nothing accounted)
    internal_warmup: ClassVar[bool] = True
    checkpoint_refusal: ClassVar[str | None] = "ops draws with an internal sampler whose state is not stored"
    #: the guarantee is conditional on exact sampling (the attrs say so)
    conditional_guarantee: ClassVar[str] = CONDITIONAL_GUARANTEE

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """OPS's releases do not depend on its options (one pure draw per iteration)."""
        return {}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> NoiseDeclaration:
        """One pure epsilon_draw release per released draw; the search scale is s = 1 / epsilon_draw."""
        def releases(p: dict[str, Any]) -> list:
            return [pure_draw_release(p["epsilon_draw"])]

        return NoiseDeclaration(parameters=lambda s: {"epsilon_draw": 1.0 / s}, releases=releases,
                                noise_names=("epsilon_draw",), start=float(max(total_iterations, 1)))

    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any):
        self.likelihood = likelihood
        self.dim = int(likelihood.dim)
        self.options = self.option_spec.validate(options)
        eps = getattr(plan, "epsilon_draw", None)
        if eps is None or not (float(eps) > 0.0 and math.isfinite(float(eps))):
            raise ValueError(f"ops: the privacy plan carries no positive epsilon_draw (got {eps!r}); calibrate "
                             f"with algorithm 'ops'")
        self.epsilon_draw = float(eps)
        self.bounds = self.options["loglik_bounds"]
        self.rho = ops_temperature(self.epsilon_draw, self.bounds)
        self.target = ClippedTemperedPosterior(likelihood, self.bounds, self.rho, self.options["temper_prior"])
        self.warmup_iterations = 1000

    def set_internal_warmup(self, iterations: int) -> None:
        """Internal NUTS warmup iterations per chain (public)."""
        self.warmup_iterations = int(iterations)

    def init_state(self, theta: np.ndarray) -> ChainState:
        """State at a data-free initial point; the internal warmup runs on the first step."""
        return ChainState(theta=check_theta(theta, self.dim), cache={})

    def _sampler(self) -> NUTS:
        return NUTS(self.target.value_and_grad, self.dim, max_depth=self.options["max_depth"],
                    target_accept=self.options["nuts_target_accept"])

    def step(self, rng: np.random.Generator, state: ChainState, step_size: float,
             metric: np.ndarray) -> tuple[ChainState, StepInfo]:
        """The next released draw (``step_size`` and ``metric`` of the run are not used: the internal
        sampler adapts its own, inside the mechanism)."""
        cache = dict(state.cache)
        theta = np.asarray(state.theta, dtype=float)
        sampler = cache.get("nuts")
        if sampler is None:
            sampler = self._sampler()
            theta = sampler.warmup(rng, theta, self.warmup_iterations)
            cache["nuts"] = sampler
        theta = sampler.draws(rng, theta, 1, self.options["thin"])[0]
        return ChainState(theta=theta, cache=cache), StepInfo(accepted=True, accept_stat=1.0, extra={})

    def draw_once(self, rng: np.random.Generator, theta0: np.ndarray) -> np.ndarray:
        """One released draw from a data-free start (internal warmup, then ``thin`` iterations)."""
        state, _ = self.step(rng, self.init_state(theta0), 1.0, np.ones(self.dim))
        return state.theta


def pure_draw_release(epsilon_draw: float, name: str = OPS_RELEASE) -> Release:
    """One OPS draw as a pure epsilon_draw-DP mechanism (an (epsilon_draw, 0) event)."""
    return epsilon_delta_release(
        name, float(epsilon_draw), 0.0,
        note=("pure epsilon_draw-DP per exact draw (conditional on exact sampling); composed by the PLD of "
              "(epsilon_draw, 0) mechanisms; basic composition: count * epsilon_draw, pure"))
