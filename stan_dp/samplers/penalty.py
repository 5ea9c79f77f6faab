"""DP penalty Metropolis-Hastings (Yildirim & Ermis; the DP-HMC paper section 3).

One iteration:

1. Gaussian random-walk proposal theta' = theta + step_size * sqrt(metric) * z, z ~ N(0, I) (data-free;
   symmetric, so the log proposal ratio is 0).
2. Per-row ratios r_i = l_i(theta') - l_i(theta), clipped to [-c, c] with c = ratio_clip * ||theta' - theta||_2.
3. The ratio mechanism releases R + xi, R = sum_i clip_c(r_i), xi ~ N(0, sigma^2), sigma = 2 tau_l c.
4. Accept iff log u < R + xi + [log p0(theta') - log p0(theta)] + 0 - sigma^2 / 2 (the penalty correction).

Each iteration is one Gaussian mechanism with Gaussian-DP mu = 1 / tau_l (zCDP rho = 1 / (2 tau_l^2), the DP-HMC
paper's Theorem 2.4 "mu"). All clip, noise and
penalty arithmetic is in ``stan_dp.privacy.mechanisms``.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..likelihood import RowLikelihood
from ..privacy import mechanisms
from ..privacy.events import NoiseDeclaration, gaussian_release
from .base import ChainState, KernelBase, StepInfo, check_step_args, check_theta
from .options import DIFF_CLIP, Option, OptionSpec

RATIO_RELEASE = "log-likelihood ratio (penalty acceptance test)"
RATIO_NOTE = "sigma_l = 2 tau_l b_l ||theta' - theta||, sensitivity 2 b_l ||theta' - theta||; once per iteration"

RATIO_CLIP = Option(
    "ratio_clip", "real", None, required=True, low=0.0, low_open=True,
    doc="b_l, a bound on how fast one row's log-likelihood can change per unit move on the unconstrained scale "
        "(per-row ratios are clipped to b_l ||theta' - theta||), i.e. a bound on the per-row gradient norm; for a "
        "logistic regression with covariates scaled so that ||(1, x_i)|| <= R, b_l = R (e.g. 2.5). Choose it from "
        "the model and the possible range of the data, never from the private rows",
)


def gaussian_start(total_iterations: int, releases_per_iteration: float = 1.0) -> float:
    """A search start for Gaussian-only declarations: the noise multiplier at which the run's total rho is 1."""
    return math.sqrt(max(total_iterations * releases_per_iteration, 1.0) / 2.0)

def plan_noise(plan: Any, name: str, algorithm: str) -> float:
    """A noise multiplier (``tau_l`` / ``tau_g``) from the privacy plan, checked to be finite and >= 0.

    tau = 0 (noise off) is accepted for tests only; the accountant never produces it.
    """
    value = getattr(plan, name, None)
    if value is None:
        raise ValueError(f"the privacy plan has no {name}: it was not calibrated for {algorithm!r}")
    value = float(value)
    if not (value >= 0.0 and math.isfinite(value)):
        raise ValueError(f"plan.{name} must be finite and >= 0, got {value}")
    return value


class PenaltyMH(KernelBase):
    """DP penalty MH with a Gaussian random-walk proposal.

    Options (public; ``option_defaults``):
      ratio_clip (b_l, required: no default): per-row log-likelihood-ratio clip bound per unit of Euclidean
        distance on the unconstrained scale; c = b_l ||theta' - theta||. Must be > 0. Set it from public knowledge
        of the model (a per-row Lipschitz bound makes clipping never bind); it is never tuned on the private rows.

    Plan: uses ``plan.tau_l`` (noise sd sigma = 2 tau_l c).

    Released per step (``StepInfo``): ``accepted``; ``accept_stat`` = min(1, exp(log alpha)) of the noisy
    log acceptance ratio; ``extra["noise_sd"]`` = sigma.
    """

    accounting_name: ClassVar[str] = "penalty"
    option_spec: ClassVar[OptionSpec] = OptionSpec("penalty", [RATIO_CLIP, DIFF_CLIP])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    #: the per-row log-likelihoods at the current point (and the point and prior they go with): never in a
    #: checkpoint; without "theta" the next step computes them again at the chain's point
    point_cache: ClassVar[tuple[str, ...]] = ("theta", "row_log_lik", "log_prior")

    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any) -> None:
        self.likelihood = likelihood
        self.dim = int(likelihood.dim)
        self.options = self.option_spec.validate(options)
        # an anchored run (diff_clip) clips the ratio remainders of its anchored rows at C ||theta' - theta||
        self.ratio_clip = self.options["diff_clip"] or self.options["ratio_clip"]
        self.tau_l = plan_noise(plan, "tau_l", self.accounting_name)

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """No extra accounting arguments: one ratio mechanism per iteration."""
        cls.option_spec.validate(options, require=False)
        return {}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> NoiseDeclaration:
        """One Gaussian ratio release per iteration with noise multiplier ``tau_l`` (the noise scale)."""
        cls.option_spec.validate(shape, require=False)
        return NoiseDeclaration(
            parameters=lambda s: {"tau_l": s},
            releases=lambda p: [gaussian_release(RATIO_RELEASE, p["tau_l"], note=RATIO_NOTE)],
            noise_names=("tau_l",),
            start=gaussian_start(total_iterations),
        )

    def init_state(self, theta: np.ndarray) -> ChainState:
        """State at a data-free initial point; the private cache is filled on the first step."""
        return ChainState(theta=check_theta(theta, self.dim), cache={})

    def _point_cache(self, state: ChainState) -> dict[str, Any]:
        # Kernel-private, data-dependent values at the current point (never released): the per-row
        # log-likelihoods l_i(theta) and the data-free log prior. Recomputed if theta was changed externally.
        cache = state.cache
        if "theta" not in cache or not np.array_equal(cache["theta"], state.theta):
            cache["theta"] = np.array(state.theta, dtype=float, copy=True)
            cache["row_log_lik"] = np.asarray(self.likelihood.row_log_lik(cache["theta"]), dtype=float)
            cache["log_prior"] = float(self.likelihood.log_prior(cache["theta"]))
        return cache

    def step(self, rng: np.random.Generator, state: ChainState, step_size: float, metric: np.ndarray,
             proposal_rng: np.random.Generator | None = None) -> tuple[ChainState, StepInfo]:
        """One iteration: the proposal and the accept draw from ``proposal_rng`` (the chain's proposal stream;
        None: ``rng``), the ratio mechanism's noise from ``rng``."""
        step_size, metric = check_step_args(step_size, metric, self.dim)
        prop_rng = rng if proposal_rng is None else proposal_rng
        cache = self._point_cache(state)
        theta = cache["theta"]

        # data-free random-walk proposal (symmetric: log q(theta|theta') - log q(theta'|theta) = 0)
        theta_prop = theta + step_size * np.sqrt(metric) * prop_rng.standard_normal(self.dim)

        # the ratio mechanism: clip each r_i to +-c, sum, add N(0, (2 tau_l c)^2)
        c = mechanisms.ratio_clip_bound(self.ratio_clip, theta, theta_prop)
        ll_prop = np.asarray(self.likelihood.row_log_lik(theta_prop), dtype=float)
        with mechanisms.private_arithmetic():  # inf - inf -> NaN, which the mechanism maps to -c
            ratios = ll_prop - cache["row_log_lik"]
        noisy_ratio, sigma = mechanisms.noisy_clipped_ratio_sum(rng, ratios, c, self.tau_l)

        # data-free part of the log acceptance ratio: prior difference (+ log proposal ratio = 0)
        lp_prop = float(self.likelihood.log_prior(theta_prop))
        log_alpha = mechanisms.penalty_log_accept_ratio(noisy_ratio, lp_prop - cache["log_prior"], sigma)
        accepted = mechanisms.penalty_accept(prop_rng, log_alpha)

        info = StepInfo(
            # the accept decision is the output of the noisy test (a mechanism output plus public randomness)
            accepted=accepted,
            # a function of R + xi (mechanism output) and of data-free terms (prior difference, sigma): releasable;
            # its expectation over xi is the penalty acceptance probability
            accept_stat=mechanisms.accept_statistic(log_alpha),
            # sigma = 2 tau_l b_l ||theta' - theta||: public constants times a data-free proposal distance
            extra={"noise_sd": float(sigma)},
        )
        if not accepted:
            return state, info
        new_cache = dict(cache)
        new_cache.update(theta=theta_prop.copy(), row_log_lik=ll_prop, log_prior=lp_prop)
        return ChainState(theta=theta_prop, cache=new_cache), info
