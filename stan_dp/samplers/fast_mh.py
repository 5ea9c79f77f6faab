"""DP-Fast MH (the DP-Fast MH paper: Zhang & Zhang, ICML 2023, Algorithm 2) and its full-batch variant.

DP-Fast MH is TunaMH (the DP-Fast MH paper, Algorithm 1: exact minibatch Metropolis-Hastings with Poisson auxiliary
variables) made differentially private. One iteration, as implemented here (energies U_i = -l_i):

1. propose theta' = theta + step_size * sqrt(metric) * z, z ~ N(0, I) (symmetric random walk), and compute
   M(theta, theta') = ||theta' - theta|| (Euclidean, unconstrained scale);
2. draw B ~ Poisson(lambda + C M); the minibatch branch runs when B < K, the full-batch branch otherwise;
3. minibatch branch: sample B row indices uniformly with replacement, keep each with TunaMH's Batch()
   probability, and form l1 = 2 sum_{kept} artanh(C (U_i(theta) - U_i(theta')) / (c (2 lambda + C M)));
   full-batch branch: l2 = sum_i (U_i(theta) - U_i(theta'));
4. if the branch's sensitivity (Lemma 1) is at most the branch's privacy-for-free threshold, no noise is
   added; otherwise xi ~ N(0, (sigma Delta)^2) with sigma = sigma_1 (minibatch) or sigma_2 (full batch), and
   the statistic becomes l + xi - (sigma Delta)^2 / 2 (the penalty correction that keeps the chain reversible);
5. accept with probability min(1, exp(statistic + log p0(theta') - log p0(theta))); the data-free prior
   ratio enters exactly (it is not part of any mechanism) and the proposal ratio is 1.

Project decisions, all visible here:

* one public per-row bound ``row_bound`` = c for every row, so C = N c, max_i c_i / C = 1 / N and Batch()
  draws rows uniformly (a data-dependent c_i would leak);
* Assumption 1 (|U_i(theta) - U_i(theta')| <= c M) is *enforced*: every per-row energy difference is clipped
  to [-c M, c M] before it enters Batch() or either statistic, so Lemma 1's sensitivities, and therefore the
  privacy guarantee, hold for any model. When the clip never binds, the chain targets the exact posterior
  (Theorem 3); when it binds, the target is the posterior of the clipped differences.
* A row log-likelihood that is NaN is treated as -inf (the row is impossible there); the resulting
  difference is clipped like any other, and a difference between two -inf values counts as 0.

Privacy mechanics of the algorithm (sigma_1, sigma_2, Lemma 1 sensitivities, privacy-for-free thresholds,
the exact Gaussian-mechanism check and the subsampling bound of the proof of Theorem 2) are pure functions in
``stan_dp.privacy.fast_mh_bounds`` (re-exported here) so that they can be audited in one place; the noise draw and the accept
draw are those of ``stan_dp.privacy.mechanisms``. Two departures from the paper's text, both on the side of
privacy: (1) the subsampling bound's delta' carries the factor (e^{epsilon'} - 1) / (e^{epsilon_m} - 1)
that the proof of Theorem 2 drops (``subsampled_minibatch_guarantee`` derives it), and the minibatch test's
(epsilon_m, delta_m) are solved from the corrected bound where Algorithm 2's values do not satisfy it
(``minibatch_test_parameters``); (2) the Gaussian noise multipliers are Algorithm 2's classic ones only for
epsilon < 1, where Theorem 1 proves them, and the analytic (exact) calibration of Balle & Wang from
epsilon 1 on (``gaussian_noise_multiplier``), so that any per-iteration budget, however large, is served
by a proven calibration.

Release. ``StepInfo`` carries the accept flag, ``accept_stat = float(accepted)``
and ``extra = {"batch_size", "full_batch", "noise_free"}``. The acceptance probability is never released:
in the privacy-for-free branch only the decision is covered by the guarantee; in the noisy branch a
function of the noisy test statistic would be a mechanism output, but releasing it only there would give
the step-size adaptation a statistic of a different kind in different iterations and adds disclosure the
accounting does not need, so the flag is released in every branch. Which rows Batch() kept, how many it
kept, l1, l2 and log-likelihoods are never released (the cache holding log-likelihoods is never released).
"""
from __future__ import annotations

import math
from numbers import Real
from typing import Any, ClassVar, Sequence

import numpy as np
from ..likelihood import RowLikelihood
from ..privacy import fast_mh_bounds, mechanisms
from ..privacy.fast_mh_bounds import (  # noqa: F401  (re-exported: the kernel's privacy mechanics)
    analytic_gaussian_multiplier,
    default_batch_limit,
    gaussian_mechanism_delta,
    gaussian_noise_multiplier,
    minibatch_privacy_parameters,
    minibatch_test_parameters,
    recommended_batch_limit,
    sensitivity_full_batch,
    sensitivity_minibatch,
    sigma_1,
    sigma_2,
    subsampled_minibatch_guarantee,
)
from ..privacy.events import NoiseDeclaration, epsilon_delta_release
from .base import ChainState, KernelBase, StepInfo, check_step_args, check_theta
from .options import DIFF_CLIP, Option, OptionSpec

FAST_MH_RELEASE = "DP-Fast MH acceptance test"
FAST_MH_NOTE = ("(epsilon_iteration, delta_iteration)-DP per iteration (DP-Fast MH paper, Zhang & Zhang 2023, Theorem 2); noise scales "
                "sigma_1, sigma_2 follow from it in Algorithm 2; composed as the PLD of an (epsilon, delta) "
                "mechanism")
#: Default fraction of delta that DP-Fast MH spends on the T per-iteration deltas:
#: ``delta_iteration = delta_split * delta / T``; the rest, ``(1 - delta_split) * delta``, is the slack of
#: the composition.  0.25 sits in the flat minimum of the full-batch noise multiplier
#: ``sqrt(2 log(1.25 / delta_iteration)) / epsilon_iteration`` (the DP-Fast MH paper, sigma_2) over the split for
#: runs of 400 to 8000 iterations at epsilon in [0.1, 1]; 0.5 costs about 1 % more noise, 0.9 about 8 %.
DEFAULT_DELTA_SPLIT = 0.25

_ROW_BOUND = Option(
    "row_bound", "real", None, required=True, low=0.0, low_open=True,
    doc="the public per-row bound c with |l_i(theta') - l_i(theta)| <= c ||theta' - theta|| on the "
        "unconstrained scale for every possible row (e.g. a Lipschitz constant of one row's log-likelihood; "
        "for logistic regression with ||x_i|| <= R, c = R); choose it from public knowledge of the model and "
        "the data domain, never by looking at the private rows; larger differences are clipped (private "
        "but biased)",
)
_PRIVACY_FOR_FREE = Option(
    "privacy_for_free", "bool", False,
    doc="True applies Algorithm 2's privacy-for-free branches, whose guarantee does not hold: the run is "
        "then marked NOT private",
)
_DELTA_SPLIT = Option(
    "delta_split", "real", DEFAULT_DELTA_SPLIT, low=0.0, high=1.0, low_open=True, high_open=True,
    doc="fraction of delta spent on the per-iteration deltas (delta_iteration = delta_split * delta / T); "
        "the rest is the composition's slack",
)

__all__ = ["DPFastMH", "DPFastMHFull", *fast_mh_bounds.__all__]  # the privacy mechanics are re-exported

# --------------------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------------------

def _is_real(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _sanitize(values: np.ndarray) -> np.ndarray:
    """Row log-likelihoods as float64 with NaN mapped to -inf (an impossible row)."""
    out = np.array(values, dtype=np.float64, copy=True).reshape(-1)
    out[np.isnan(out)] = -np.inf
    return out


def _clipped_log_lik_differences(ll_prop: np.ndarray, ll_cur: np.ndarray, bound: float) -> np.ndarray:
    """g_i = clip(l_i(theta') - l_i(theta), -bound, bound) = clip(U_i(theta) - U_i(theta'), ...).

    This is where Assumption 1 is enforced (bound = c M). A difference of two -inf values is 0.
    """
    with mechanisms.private_arithmetic():
        diff = ll_prop - ll_cur
    diff[np.isnan(diff)] = 0.0
    return mechanisms.clip_ratios(diff, bound)  # the package's one ratio clip (no NaN is left to map)


class DPFastMH(KernelBase):
    """DP-Fast MH (the DP-Fast MH paper, Algorithm 2): exact minibatch Metropolis-Hastings with differential privacy.

    Construction: ``DPFastMH(likelihood, plan, **options)`` where ``likelihood`` is a ``RowLikelihood`` and
    ``plan`` carries the per-iteration guarantee ``plan.epsilon_iteration`` and ``plan.delta_iteration``
    (from ``calibrate("dp-fast-mh", ...)``): every iteration is (epsilon_iteration, delta_iteration)-DP.

    Options (all public hyper-parameters; none is ever tuned from the private rows):

    ``row_bound`` (required, no default)
        the per-row bound c of Assumption 1 on the unconstrained scale: |l_i(theta') - l_i(theta)| <=
        c ||theta' - theta|| for every possible row (e.g. a Lipschitz constant of l_i; for logistic
        regression with ||x_i|| <= R it is R). It must come from public knowledge of the model and the data
        domain. Differences beyond c ||theta' - theta|| are clipped, which keeps the privacy guarantee for
        any model but biases the posterior. C = N c.
    ``lam`` (default None -> batch_limit / 2)
        lambda, the Poisson auxiliary rate; E[B] = lambda + C M. The paper gives no recommended value for
        DP-Fast MH (it keeps lambda free of C M to bound Delta(l1)); the default puts the expected batch
        size at K/2 when C M is small, so the minibatch branch is usable by construction. A larger lambda
        improves the acceptance rate (Theorem 4) at a larger batch cost.
    ``batch_limit`` (default None -> ceil(epsilon_iteration N / 6), at least 1; ``recommended_batch_limit``)
        K, the batch size upper bound: the minibatch branch runs when B < K. The default is the paper's
        recommendation (section 6.2) with one shared c, capped at N, and smaller at per-iteration epsilons
        above about 2, where the subsampling bound cannot certify Algorithm 2's minibatch parameters.
    ``privacy_for_free`` (default False)
        False (the default) adds Gaussian noise (sigma_1 or sigma_2) in every iteration with nonzero
        sensitivity, so every accept decision is post-processing of a Gaussian mechanism and the
        (epsilon_iteration, delta_iteration) guarantee holds. True applies Algorithm 2's privacy-for-free
        branches, whose guarantee we could not verify: the paper's argument (section 4, "Privacy for Free")
        bounds only the ratio of *accept* probabilities by exp(Delta); the ratio of *reject* probabilities is
        unbounded when min(1, r) = 1 on one data set and exp(-Delta) < 1 on its neighbour, so a free
        iteration is only (epsilon, 1 - exp(-Delta))-DP in general, with 1 - exp(-Delta) up to about epsilon,
        not delta. With True the run is therefore marked NOT private (``guarantee_holds`` is False).

    Released per iteration: accept flag, ``accept_stat = float(accepted)``, ``batch_size`` (B in the
    minibatch branch, N in the full-batch branch: the number of row draws the iteration used),
    ``full_batch`` and ``noise_free``. All three extras depend only on public quantities.
    """

    accounting_name: ClassVar[str] = "dp-fast-mh"
    option_spec: ClassVar[OptionSpec] = OptionSpec("dp-fast-mh", [
        _ROW_BOUND,
        DIFF_CLIP,
        Option("lam", "real", None, low=0.0, low_open=True, none_means="batch_limit / 2",
               doc="lambda, the Poisson auxiliary rate (E[B] = lambda + C M)"),
        Option("batch_limit", "int", None, low=1, none_means="ceil(epsilon_iteration N / 6)",
               doc="K, the batch size upper bound: the minibatch branch runs when B < K"),
        _PRIVACY_FOR_FREE,
        _DELTA_SPLIT,
    ])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    #: when True every iteration runs the full-batch branch (the paper's "DP-fast MH (full batch)")
    full_batch_only: ClassVar[bool] = False
    #: every row's log-likelihood at the current point, kept after a full batch: never in a checkpoint
    #: (``restore_cache`` computes it again)
    point_cache: ClassVar[tuple[str, ...]] = ("row_log_lik",)

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """Each iteration is one (epsilon_iteration, delta_iteration) mechanism; ``delta_split`` shapes it."""
        return {"delta_split": cls.option_spec.validate(options, require=False)["delta_split"]}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> NoiseDeclaration:
        """One ``EpsilonDeltaDpEvent(epsilon_iteration, delta_iteration)`` per iteration, with
        ``delta_iteration = delta_split * delta / T`` and noise scale ``s = 1 / epsilon_iteration``."""
        split = cls.option_spec.validate(shape, require=False)["delta_split"]
        delta_iteration = split * delta / total_iterations
        if not delta_iteration > 0.0:
            raise ValueError(f"no finite noise level meets the budget delta={delta!r}: delta / (chains * "
                             f"iterations) underflows; increase epsilon or delta")

        return NoiseDeclaration(
            parameters=lambda s: {"epsilon_iteration": 1.0 / s, "delta_iteration": delta_iteration},
            releases=lambda p: [epsilon_delta_release(FAST_MH_RELEASE, p["epsilon_iteration"],
                                                      p["delta_iteration"], note=FAST_MH_NOTE)],
            noise_names=("epsilon_iteration", "delta_iteration"),
            start=float(total_iterations),
        )

    # -- construction ---------------------------------------------------------------------------------

    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any) -> None:
        opts = self._validated_options(options)
        self.likelihood = likelihood
        self.n_rows = int(likelihood.n_rows)
        self.dim = int(likelihood.dim)
        if self.n_rows < 1:
            raise ValueError(f"{self.accounting_name}: the likelihood has no rows (n_rows = {self.n_rows}).")

        self.epsilon_iteration, self.delta_iteration = self._plan_budget(plan)
        eps, delta = self.epsilon_iteration, self.delta_iteration

        # c (= max_i c_i: one shared bound); an anchored run (diff_clip = C) bounds its anchored rows' remainders
        self.row_bound = opts["diff_clip"] or opts["row_bound"]
        self.total_bound = self.n_rows * self.row_bound  # C = N c
        self.privacy_for_free = opts["privacy_for_free"]
        #: False when the stated (epsilon, delta) guarantee does not hold (the privacy-for-free branches)
        self.guarantee_holds = not self.privacy_for_free

        # Full-batch branch (Algorithm 2): threshold epsilon, multiplier sigma_2 (the classic value of Algorithm
        # 2 below epsilon 1, the analytic one from epsilon 1 on; see gaussian_noise_multiplier).
        self.sigma_2 = gaussian_noise_multiplier(eps, delta)
        self.full_batch_threshold = eps
        self._check_gaussian(eps, delta, self.sigma_2, "full-batch (sigma_2)")

        if self.full_batch_only:
            self.lam = None
            self.batch_limit = None
            self.sigma_1 = None
            self.minibatch_threshold = None
            self.minibatch_epsilon = None
            self.minibatch_delta = None
        else:
            k = opts["batch_limit"]
            self.batch_limit = recommended_batch_limit(eps, delta, self.n_rows) if k is None else k
            self.lam = self.batch_limit / 2.0 if opts["lam"] is None else opts["lam"]
            # Minibatch branch: the privacy-for-free threshold is Algorithm 2's epsilon C / (6 K max c); the test's
            # (epsilon_m, delta_m) are Algorithm 2's when the corrected subsampling bound certifies them, and
            # otherwise solved from that bound (minibatch_test_parameters); sigma_1 is calibrated to them.
            self.minibatch_threshold = minibatch_privacy_parameters(
                eps, delta, self.batch_limit, self.row_bound, self.total_bound
            )[0]
            eps_m, delta_m = minibatch_test_parameters(
                eps, delta, self.batch_limit, self.row_bound, self.total_bound
            )
            if not delta_m > 0.0:
                raise ValueError(
                    f"{self.accounting_name}: batch_limit K = {self.batch_limit} is too large for epsilon_iteration "
                    f"= {eps:g} with N = {self.n_rows}: the subsampling bound (proof of Theorem 2) would need a "
                    f"minibatch delta below double precision. Use a smaller batch_limit, e.g. the default "
                    f"{recommended_batch_limit(eps, delta, self.n_rows)}."
                )
            self.minibatch_epsilon, self.minibatch_delta = eps_m, delta_m
            self.sigma_1 = gaussian_noise_multiplier(eps_m, delta_m)
            self._check_gaussian(eps_m, delta_m, self.sigma_1, "minibatch (sigma_1)")
            eps_sub, delta_sub = subsampled_minibatch_guarantee(
                eps_m, delta_m, self.row_bound / self.total_bound, self.batch_limit
            )
            if eps_sub > eps * (1 + 1e-12) or delta_sub > delta * (1 + 1e-12):  # pragma: no cover - by construction
                raise ValueError(
                    f"{self.accounting_name}: the subsampling bound (proof of Theorem 2, corrected delta) gives "
                    f"({eps_sub:g}, {delta_sub:g}) per iteration for batch_limit K = {self.batch_limit}, more than "
                    f"the planned ({eps:g}, {delta:g}). Use the default batch_limit."
                )

    def _validated_options(self, options: dict[str, Any]) -> dict[str, Any]:
        return self.option_spec.validate(options)

    def _plan_budget(self, plan: Any) -> tuple[float, float]:
        try:
            eps, delta = plan.epsilon_iteration, plan.delta_iteration
        except AttributeError as exc:
            raise ValueError(
                f"{self.accounting_name}: the privacy plan must carry epsilon_iteration and delta_iteration "
                f"(from calibrate({self.accounting_name!r}, ...))."
            ) from exc
        if eps is None or delta is None or not _is_real(eps) or not _is_real(delta):
            raise ValueError(f"{self.accounting_name}: plan.epsilon_iteration / delta_iteration must be numbers; got {eps!r}, {delta!r}.")
        eps, delta = float(eps), float(delta)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"{self.accounting_name}: plan.epsilon_iteration must be finite and > 0; got {eps!r}.")
        if not (0.0 < delta < 1.0):
            raise ValueError(f"{self.accounting_name}: plan.delta_iteration must lie in (0, 1); got {delta!r}.")
        return eps, delta

    def _check_gaussian(self, eps: float, delta: float, multiplier: float, which: str) -> None:
        """Refuse a calibration that the exact Gaussian profile (Balle & Wang, Theorem 8) does not confirm."""
        actual = gaussian_mechanism_delta(eps, multiplier)
        if not actual <= delta * (1 + 1e-9):  # pragma: no cover - gaussian_noise_multiplier guarantees it
            raise ValueError(
                f"{self.accounting_name}: the {which} Gaussian mechanism is not ({eps:g}, {delta:g})-DP: its noise "
                f"multiplier {multiplier:g} gives delta = {actual:.3g} at that epsilon."
            )

    # -- Kernel protocol -------------------------------------------------------------------------------

    def init_state(self, theta: np.ndarray) -> ChainState:
        """State at a data-free initial point. Only the (data-free) log prior is evaluated."""
        theta = check_theta(np.reshape(theta, -1), self.dim)
        return ChainState(theta=theta, cache={"theta": theta.copy(), "log_prior": float(self.likelihood.log_prior(theta))})

    def step(
        self,
        rng: np.random.Generator,
        state: ChainState,
        step_size: float,
        metric: np.ndarray,
        proposal_rng: np.random.Generator | None = None,
    ) -> tuple[ChainState, StepInfo]:
        """One iteration: the proposal, B and the accept draw from ``proposal_rng`` (the chain's proposal stream;
        None: ``rng``), Batch()'s rows and keep draws and the Gaussian noise from ``rng``."""
        prop_rng = rng if proposal_rng is None else proposal_rng
        theta = np.asarray(state.theta, dtype=np.float64).reshape(-1)
        cache = self._valid_cache(state, theta)
        scale = self._proposal_scale(step_size, metric)

        # ---- Public part: nothing below until the "private part" marker reads a row. ----------------------
        # theta is the current state (a released draw, or a function of earlier mechanism outputs and public
        # inits); z is data-independent noise. Hence theta', M(theta, theta') and the Poisson rate
        # lambda + C M (lambda, C = N c public) are public, and so are B, the branch (B < K, K public) and the
        # free/noisy choice (Lemma 1's Delta depends only on C, c, lambda and M, compared with thresholds
        # built from epsilon, K, N, c). This matches Algorithm 2, where B is drawn before Batch() touches
        # any U_i. Releasing them costs no budget.
        theta_prop = theta + scale * prop_rng.standard_normal(self.dim)
        distance = float(np.linalg.norm(theta_prop - theta))  # M(theta, theta')

        if self.full_batch_only:
            full_batch, n_draws = True, 0
        else:
            assert self.batch_limit is not None  # set whenever minibatches are possible
            n_draws = self._poisson_batch_size(prop_rng, distance)  # B ~ Poisson(lambda + C M): public, released
            full_batch = n_draws >= self.batch_limit

        if full_batch:
            sensitivity = sensitivity_full_batch(self.row_bound, distance)      # Delta(l2)
            threshold, multiplier = self.full_batch_threshold, self.sigma_2      # epsilon, sigma_2
            batch_size = self.n_rows
        else:
            assert self.lam is not None and self.minibatch_threshold is not None and self.sigma_1 is not None
            sensitivity = sensitivity_minibatch(self.total_bound, distance, self.lam)  # Delta(l1)
            threshold, multiplier = self.minibatch_threshold, self.sigma_1             # eps C/(6 K c), sigma_1
            batch_size = n_draws
        noise_free = self.privacy_for_free and sensitivity <= threshold
        noise_sd = 0.0 if noise_free else multiplier * sensitivity

        # ---- Private part: rows are read; nothing computed here is released except the accept flag. ------
        new_cache = dict(cache)
        if full_batch:
            statistic, ll_cur, ll_prop = self._full_batch_statistic(theta, theta_prop, distance, cache)
            new_cache["row_log_lik"] = ll_cur  # values at the current state (kept if rejected)
        else:
            statistic = self._minibatch_statistic(rng, theta, theta_prop, distance, n_draws, cache)
            ll_prop = None

        # The Gaussian mechanism (noise from stan_dp.privacy.mechanisms, like every kernel's noise).
        xi = mechanisms.gaussian_noise(rng, noise_sd) if noise_sd > 0.0 else 0.0
        log_prior_cur = cache["log_prior"] if "log_prior" in cache else float(self.likelihood.log_prior(theta))
        log_prior_prop = float(self.likelihood.log_prior(theta_prop))
        # Penalty correction -(sigma Delta)^2 / 2 keeps the test reversible (Ceperley & Dewing; Theorem 3).
        log_ratio = statistic + xi + mechanisms.penalty_log_accept_term(noise_sd) + (log_prior_prop - log_prior_cur)
        # accept iff log u < log_ratio, with log u = -Exp(1) (no log(0)); NaN compares False: reject
        accepted = mechanisms.penalty_accept(prop_rng, log_ratio)

        if accepted:
            next_cache: dict[str, Any] = {"theta": theta_prop.copy(), "log_prior": log_prior_prop}
            if ll_prop is not None:
                next_cache["row_log_lik"] = ll_prop
            next_state = ChainState(theta=theta_prop, cache=next_cache)
        else:
            new_cache["theta"] = theta.copy()
            new_cache["log_prior"] = log_prior_cur
            next_state = ChainState(theta=theta.copy(), cache=new_cache)

        info = StepInfo(
            accepted=accepted,
            accept_stat=float(accepted),
            extra={"batch_size": int(batch_size), "full_batch": bool(full_batch), "noise_free": bool(noise_free)},
        )
        return next_state, info

    def restore_cache(self, theta: np.ndarray, cache: dict[str, Any], dropped: Sequence[str]) -> dict[str, Any]:
        """A resumed chain whose checkpoint left out every row's log-likelihood at ``theta`` (kept after a full
        batch there) gets it back, computed by the same call as then (all rows at the point), so that its next
        step uses the same values."""
        if "row_log_lik" in dropped:
            cache = dict(cache, row_log_lik=_sanitize(self.likelihood.row_log_lik(np.asarray(theta, dtype=float),
                                                                                  None)))
        return cache

    # -- pieces of a step ------------------------------------------------------------------------------

    def _valid_cache(self, state: ChainState, theta: np.ndarray) -> dict[str, Any]:
        cache = state.cache or {}
        cached_theta = cache.get("theta")
        if cached_theta is None or not np.array_equal(cached_theta, theta):
            return {}
        return cache

    def _proposal_scale(self, step_size: float, metric: np.ndarray) -> np.ndarray:
        step_size, metric = check_step_args(step_size, np.reshape(metric, -1), self.dim)
        return step_size * np.sqrt(metric)

    def _poisson_batch_size(self, rng: np.random.Generator, distance: float) -> int:
        assert self.lam is not None and self.batch_limit is not None  # minibatch parameters (not full_batch_only)
        rate = self.lam + self.total_bound * distance
        if rate > 1e15:
            # Beyond numpy's Poisson range; P(B < K) < exp(-1e15) * ... for any K <= N, i.e. exactly 0 in
            # double precision: the full-batch branch, as the exact draw would choose.
            return self.batch_limit
        return int(rng.poisson(rate))

    def _full_batch_statistic(
        self, theta: np.ndarray, theta_prop: np.ndarray, distance: float, cache: dict[str, Any]
    ) -> tuple[float, np.ndarray, np.ndarray]:
        """l2 = sum_i clip(U_i(theta) - U_i(theta'), +-c M) over all rows (one call per point, the current
        point's values reused from the cache when a full batch was computed there)."""
        ll_cur = cache.get("row_log_lik")
        if ll_cur is None:
            ll_cur = _sanitize(self.likelihood.row_log_lik(theta, None))
        ll_prop = _sanitize(self.likelihood.row_log_lik(theta_prop, None))
        diffs = _clipped_log_lik_differences(ll_prop, ll_cur, self.row_bound * distance)
        return float(np.sum(diffs)), ll_cur, ll_prop

    def _minibatch_statistic(
        self,
        rng: np.random.Generator,
        theta: np.ndarray,
        theta_prop: np.ndarray,
        distance: float,
        n_draws: int,
        cache: dict[str, Any],
    ) -> float:
        """TunaMH's Batch(B) and the log of MHRatio without noise: l1 (Algorithm 1 with c_i = c)."""
        if n_draws == 0:
            return 0.0
        c, big_c, lam = self.row_bound, self.total_bound, self.lam
        assert lam is not None  # minibatch parameters (not full_batch_only)
        # Batch(B): i_b drawn with P(i_b = i) = c_i / C = 1 / N (uniform, with replacement).
        draws = rng.integers(0, self.n_rows, size=n_draws)
        rows, inverse = np.unique(draws, return_inverse=True)
        cached = cache.get("row_log_lik")
        ll_cur = cached[rows] if cached is not None else _sanitize(self.likelihood.row_log_lik(theta, rows))
        ll_prop = _sanitize(self.likelihood.row_log_lik(theta_prop, rows))
        # g = clip(U_i(theta) - U_i(theta'), +-c M), one value per draw (repeated rows share a value)
        g = _clipped_log_lik_differences(ll_prop, ll_cur, c * distance)[inverse]
        # keep i_b with probability (lambda c + C/2 (U(theta') - U(theta) + c M)) / (lambda c + c C M)
        keep_prob = (lam * c + 0.5 * big_c * (c * distance - g)) / (lam * c + c * big_c * distance)
        kept = rng.random(n_draws) < keep_prob
        # l1 = 2 sum_{i in I} artanh(C (U_i(theta) - U_i(theta')) / (c (2 lambda + C M))); |argument| < 1
        arg = big_c * g[kept] / (c * (2.0 * lam + big_c * distance))
        return float(2.0 * np.sum(np.arctanh(arg)))


class DPFastMHFull(DPFastMH):
    """The paper's "DP-fast MH (full batch)": Algorithm 2 that always runs the full-batch branch.

    Every iteration evaluates all rows at theta' (the current point's values come from the cache after the
    first iteration), adds no noise when Delta(l2) = 2 c M <= epsilon_iteration (privacy for free) and
    otherwise noise N(0, (sigma_2 Delta(l2))^2) with the penalty correction. Options: ``row_bound``
    (required) and ``privacy_for_free`` (default False, see DPFastMH); ``lam`` and ``batch_limit`` do not apply.
    Released: accept flag, ``accept_stat = float(accepted)``, ``batch_size`` (= N), ``full_batch`` (True),
    ``noise_free``.
    """

    accounting_name: ClassVar[str] = "dp-fast-mh-full"
    option_spec: ClassVar[OptionSpec] = OptionSpec("dp-fast-mh-full", [_ROW_BOUND, DIFF_CLIP, _PRIVACY_FOR_FREE, _DELTA_SPLIT])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    full_batch_only: ClassVar[bool] = True
