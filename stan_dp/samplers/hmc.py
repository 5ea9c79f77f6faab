"""DP-HMC (Raisa, Koskela & Honkela, the DP-HMC paper Algorithm 1).

One iteration with L = ``leapfrog_steps``, step eta (jittered, see below), inverse mass M^-1 = diag(metric):

    p ~ N(0, M);  (theta', p') = (theta, p)
    (theta', p') = l_{p, eta/2}(theta', p')                 # noisy gradient release 1 at theta
    repeat L - 1 times:
        (theta', p') = l_theta(theta', p')                  # theta' += eta M^-1 p'
        (theta', p') = l_{p, eta}(theta', p')               # one noisy gradient release at the new theta'
    (theta', p') = l_theta(theta', p')
    (theta', p') = l_{p, eta/2}(theta', p')                 # noisy gradient release L + 1 at theta'
    R = sum_i clip_c(l_i(theta') - l_i(theta)),  c = b_l ||theta' - theta||,  xi ~ N(0, sigma_l^2)
    dH = R + [1/2 p^T M^-1 p - 1/2 p'^T M^-1 p'] + log p0(theta') - log p0(theta) + xi
    accept iff log u < dH - sigma_l^2 / 2

where l_{p,s}(theta, p) = (theta, p + s g(theta)) and g is the noisy clipped gradient of the log density
    g(theta) = sum_i clip_{b_g}(grad l_i(theta)) + grad log p0(theta) + N(0, sigma_g^2 I), sigma_g = 2 tau_g b_g.
(The paper writes p - s(grad U + xi) with U = -log pi; moving along +g is the same update.) The momentum
updates are the half step, L - 1 full steps and the final half step: L + 1 updates, each with its own fresh
noisy gradient, so exactly L + 1 gradient releases per iteration (paper: "the gradient is evaluated L + 1
times per iteration of the outer for-loop") and one ratio release, i.e. zCDP rho = 1/(2 tau_l^2) + (L+1)/(2 tau_g^2)
per iteration (the DP-HMC paper Theorem 3.5, where rho is called mu).

Caching: the paper evaluates a fresh noisy gradient at the start of every iteration and explicitly does not
reuse the previous iteration's noisy gradient (that saving would make the chain depend on old noise). This
kernel follows it: release 1 of every iteration always draws fresh noise. Only the noise-free clipped sum
G(theta) = sum_i clip(grad l_i(theta)), a deterministic function of theta and the data, is cached from the
previous iteration (the end point if accepted, the start point if rejected) to save computation; the released
value G(theta) + grad log p0(theta) + fresh noise has exactly the distribution of a recomputation.

Step-size jitter (paper: "we use a randomised Halton sequence to perturb eta after Hoffman et al."): iteration
k of a chain uses eta_k = step_size * h_k, with h_k the k-th point of a randomised base-2 Halton (van der
Corput) sequence, randomised by a random digit permutation (for base 2: a random flip of each binary digit
level) drawn once per chain from the chain's generator. h_k lies in (0, 1), is evenly spread and has mean
1/2: ``step_size`` is the largest step and the average step is step_size / 2. eta is constant within an
iteration and data-free, so the invariant distribution is unchanged.
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
from .penalty import RATIO_CLIP, RATIO_NOTE, RATIO_RELEASE, gaussian_start, plan_noise

GRADIENT_RELEASE = "clipped log-likelihood gradient (leapfrog)"
GRADIENT_NOTE = "sigma_g = 2 tau_g b_g, sensitivity 2 b_g; L + 1 releases per iteration"

_HALTON_BITS = 52


def scrambled_van_der_corput(index: int, flips: int) -> float:
    """Point ``index`` of the base-2 Halton (van der Corput) sequence with digit level j flipped when bit j
    of ``flips`` is set (a random digit permutation per level, Owen's randomised Halton for base 2).

    The radical inverse of index = sum_j d_j 2^j is sum_j d_j 2^-(j+1); here d_j is replaced by d_j XOR f_j
    for the first 52 levels. The result is in (0, 1) unless index == flips (then the smallest positive value).
    """
    digits = (index ^ flips) & ((1 << _HALTON_BITS) - 1)
    reversed_digits = int(format(digits, f"0{_HALTON_BITS}b")[::-1], 2)
    value = reversed_digits / float(1 << _HALTON_BITS)
    return value if value > 0.0 else 2.0**-_HALTON_BITS


class DPHMC(KernelBase):
    """DP Hamiltonian Monte Carlo with noisy clipped gradients and the penalty acceptance test.

    Options (public; ``option_defaults``):
      ratio_clip (b_l, required: no default): per-row log-likelihood-ratio clip bound per unit Euclidean distance
        on the unconstrained scale (c = b_l ||theta' - theta||). Must be > 0.
      grad_clip (b_g, default None: b_l, since a ratio bound per unit move bounds the gradient too): per-row
        gradient L2 clip bound. Must be > 0. The leapfrog clips at
        min(b_g, b_l) so that its dynamics match the accept test's clipped ratios (see ``__init__``); the
        gradient noise is sigma_g = 2 tau_g min(b_g, b_l). Clipping gradients does not
        bias the chain (it only changes the proposal); clipping ratios does.
      leapfrog_steps (L, default 10): leapfrog steps per iteration; L + 1 gradient releases per iteration.
        Must agree with the plan (``plan.leapfrog_steps``), which was calibrated for it.
      gradient_share (default 0.5): the fraction of the run's privacy budget (its total zCDP rho) spent on the L + 1
        gradient releases per iteration, the rest going to the acceptance test; passed to ``calibrate``.
        Must lie in (0, 1). A larger share means less gradient noise and more acceptance-test noise.

    Plan: uses ``plan.tau_l``, ``plan.tau_g`` and ``plan.leapfrog_steps``.

    Released per step (``StepInfo``): ``accepted``; ``accept_stat`` = min(1, exp(log alpha)) of the noisy log
    acceptance ratio; extra ``n_steps`` (= L), ``step_size`` (the jittered eta actually used; the run machinery
    records it in place of the nominal one), ``noise_sd`` (sigma_l of the ratio mechanism), ``grad_noise_sd``
    (sigma_g) and ``diverging`` (the trajectory left the finite numbers).
    """

    accounting_name: ClassVar[str] = "dp-hmc"
    option_spec: ClassVar[OptionSpec] = OptionSpec("dp-hmc", [
        RATIO_CLIP,
        DIFF_CLIP,
        Option("grad_clip", "real", None, low=0.0, low_open=True,
               none_means="ratio_clip (a bound on the ratio per unit move bounds the gradient too)",
               doc="b_g: per-row gradient L2 clip bound (public; clipping gradients does not bias DP-HMC)"),
        Option("leapfrog_steps", "int", 10, low=1,
               doc="L: leapfrog steps per iteration; each iteration releases L + 1 noisy gradients"),
        Option("gradient_share", "real", 0.5, low=0.0, high=1.0, low_open=True, high_open=True,
               aliases=(("equal", 0.5),),
               doc="fraction of the run's total zCDP rho spent on the L + 1 gradient releases per iteration"),
    ])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    #: the values at the current point (``_evaluate``): per-row log-likelihoods and the noise-free clipped gradient
    #: sum among them. Never in a checkpoint; without "theta" the next step computes them again (the Halton
    #: jitter's state stays: it is data-free)
    point_cache: ClassVar[tuple[str, ...]] = ("theta", "row_log_lik", "clipped_grad_sum", "log_prior",
                                              "log_prior_grad")

    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any) -> None:
        self.likelihood = likelihood
        self.dim = int(likelihood.dim)
        self.options = self.option_spec.validate(options)
        # an anchored run (diff_clip = C) clips its anchored rows' ratio remainders and gradient differences at C
        anchored = self.options["diff_clip"]
        self.ratio_clip = anchored or self.options["ratio_clip"]
        # The leapfrog clips per-row gradients at min(b_g, b_l). The accept test sees each row's log-likelihood
        # change clipped at b_l ||theta' - theta||, i.e. rows whose gradient exceeds b_l count as if their slope
        # were b_l. Gradients clipped only at a larger b_g push the trajectory along slopes the test cannot
        # credit: the Hamiltonian error grows like N (b_g - b_l) ||theta' - theta||, every long move is
        # rejected and dual averaging shrinks the step by orders of magnitude (measured: linear regression,
        # N = 5,000, b_g 40, b_l 25, epsilon 100: step sizes 2e-6 to 5e-5, max error 115 reference sds).
        # The sensitivity of the gradient release is then 2 min(b_g, b_l) and the noise is scaled to it.
        grad_clip = self.options["grad_clip"]
        self.grad_clip = anchored or (self.ratio_clip if grad_clip is None else min(grad_clip, self.ratio_clip))
        self.leapfrog_steps = self.options["leapfrog_steps"]
        self.tau_l = plan_noise(plan, "tau_l", self.accounting_name)
        self.tau_g = plan_noise(plan, "tau_g", self.accounting_name)
        planned = getattr(plan, "leapfrog_steps", None)
        if planned is None or int(planned) != self.leapfrog_steps:
            raise ValueError(
                f"option 'leapfrog_steps' = {self.leapfrog_steps} does not match the privacy plan "
                f"(plan.leapfrog_steps = {planned!r}); the plan must be calibrated with "
                f"accounting_shape(options) = {{'leapfrog_steps': {self.leapfrog_steps}}}"
            )
        self.grad_noise_sd = mechanisms.gradient_noise_sd(self.tau_g, self.grad_clip)

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """``{"leapfrog_steps": L, "gradient_share": s}``: each iteration releases L + 1 gradients and one
        ratio; the share s of the budget goes to the gradients."""
        checked = cls.option_spec.validate(options, require=False)
        return {"leapfrog_steps": checked["leapfrog_steps"], "gradient_share": checked["gradient_share"]}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> NoiseDeclaration:
        """Per iteration: one Gaussian ratio release (``tau_l``) and L + 1 Gaussian gradient releases
        (``tau_g``). At noise scale s the iteration's zCDP rho is 1 / (2 s^2), split by ``gradient_share`` g:
        ``tau_l = s / sqrt(1 - g)``, ``tau_g = s sqrt((L + 1) / g)`` (the DP-HMC paper Theorem 3.5)."""
        opts = cls.option_spec.validate(shape, require=False)
        steps, share = opts["leapfrog_steps"], opts["gradient_share"]

        def parameters(s: float) -> dict[str, Any]:
            return {"tau_l": s / math.sqrt(1.0 - share), "tau_g": s * math.sqrt((steps + 1) / share),
                    "leapfrog_steps": steps, "gradient_share": share}

        def releases(p: dict[str, Any]) -> list:
            return [gaussian_release(RATIO_RELEASE, p["tau_l"], note=RATIO_NOTE),
                    gaussian_release(GRADIENT_RELEASE, p["tau_g"], count=p["leapfrog_steps"] + 1,
                                     note=GRADIENT_NOTE)]

        return NoiseDeclaration(parameters=parameters, releases=releases, noise_names=("tau_l", "tau_g"),
                                start=gaussian_start(total_iterations))

    def init_state(self, theta: np.ndarray) -> ChainState:
        """State at a data-free initial point; the private cache is filled on the first step."""
        return ChainState(theta=check_theta(theta, self.dim), cache={})

    # -- kernel-private cache -------------------------------------------------------------------------
    def _evaluate(self, theta: np.ndarray) -> dict[str, Any]:
        """Data-dependent values at theta (never released): per-row log-likelihoods, the noise-free clipped
        gradient sum G(theta), and the data-free log prior and its gradient."""
        ll, grads = self.likelihood.row_log_lik_grad(theta)
        lp, lp_grad = self.likelihood.log_prior_grad(theta)
        return {
            "theta": np.array(theta, dtype=float, copy=True),
            "row_log_lik": np.asarray(ll, dtype=float),
            "clipped_grad_sum": mechanisms.clipped_gradient_sum(grads, self.grad_clip),
            "log_prior": float(lp),
            "log_prior_grad": np.asarray(lp_grad, dtype=float),
        }

    def _point_cache(self, state: ChainState) -> dict[str, Any]:
        cache = state.cache
        if "theta" not in cache or not np.array_equal(cache["theta"], state.theta):
            cache.update(self._evaluate(np.asarray(state.theta, dtype=float)))
        return cache

    @staticmethod
    def _jitter(rng: np.random.Generator, cache: dict[str, Any]) -> float:
        # per-chain randomised Halton multiplier h_k in (0, 1); data-free
        if "halton_flips" not in cache:
            cache["halton_flips"] = int(rng.integers(0, 1 << _HALTON_BITS))
            cache["halton_index"] = 0
        h = scrambled_van_der_corput(cache["halton_index"], cache["halton_flips"])
        cache["halton_index"] += 1
        return h

    def draw_momentum(self, rng: np.random.Generator, metric: np.ndarray) -> np.ndarray:
        """The fresh momentum of a transition, p ~ N(0, M) with M = diag(1 / metric): data-free randomness (the
        privacy guarantee holds for every value of it; the audit conditions on a public one)."""
        return rng.standard_normal(self.dim) / np.sqrt(metric)

    # -- one transition -------------------------------------------------------------------------------
    def step(self, rng: np.random.Generator, state: ChainState, step_size: float, metric: np.ndarray,
             proposal_rng: np.random.Generator | None = None) -> tuple[ChainState, StepInfo]:
        """One iteration: the step jitter, the momentum and the accept draw from ``proposal_rng`` (the chain's
        proposal stream; None: ``rng``), the gradients' and the ratio's noise from ``rng``."""
        step_size, metric = check_step_args(step_size, metric, self.dim)
        prop_rng = rng if proposal_rng is None else proposal_rng
        cache = dict(self._point_cache(state))  # the returned state gets its own dict
        theta = cache["theta"]
        L, b_g, tau_g = self.leapfrog_steps, self.grad_clip, self.tau_g
        eta = step_size * self._jitter(prop_rng, cache)

        p0 = self.draw_momentum(prop_rng, metric)
        p = p0.copy()
        q = theta.copy()
        # gradient release 1 of L + 1: fresh noise on the cached G(theta) at the start point
        g, _ = mechanisms.noisy_gradient(rng, cache["clipped_grad_sum"], cache["log_prior_grad"], b_g, tau_g)
        with mechanisms.private_arithmetic():
            p = p + 0.5 * eta * g
        end = None
        diverging = False
        for j in range(1, L + 1):
            with mechanisms.private_arithmetic():
                q = q + eta * metric * p
            if not np.all(np.isfinite(q)):
                diverging = True
                break
            end = self._evaluate(q)
            # gradient release j + 1 of L + 1, at the new position
            g, _ = mechanisms.noisy_gradient(rng, end["clipped_grad_sum"], end["log_prior_grad"], b_g, tau_g)
            with mechanisms.private_arithmetic():
                p = p + (eta if j < L else 0.5 * eta) * g
        with mechanisms.private_arithmetic():
            moved = float(np.linalg.norm(q - theta))
        if diverging or not np.all(np.isfinite(p)) or not math.isfinite(moved):
            # The trajectory is a function of released noisy gradients and data-free randomness only, so this
            # check is post-processing; the ratio mechanism is not run (it would only spend less budget).
            info = StepInfo(
                accepted=False,
                accept_stat=0.0,
                extra={"n_steps": L, "step_size": eta, "noise_sd": float("nan"),
                       "grad_noise_sd": self.grad_noise_sd, "diverging": True},
            )
            return ChainState(theta=theta, cache=cache), info
        assert end is not None  # L >= 1 leapfrog steps ran without diverging

        # ratio mechanism on the clipped per-row log-likelihood ratios
        c = mechanisms.ratio_clip_bound(self.ratio_clip, theta, q)
        with mechanisms.private_arithmetic():  # inf - inf -> NaN, which the mechanism maps to -c
            ratios = end["row_log_lik"] - cache["row_log_lik"]
        noisy_ratio, sigma = mechanisms.noisy_clipped_ratio_sum(rng, ratios, c, self.tau_l)
        # data-free part: kinetic-energy difference and prior difference
        with mechanisms.private_arithmetic():
            kinetic_diff = 0.5 * float(np.sum(metric * p0 * p0)) - 0.5 * float(np.sum(metric * p * p))
        public = kinetic_diff + end["log_prior"] - cache["log_prior"]
        log_alpha = mechanisms.penalty_log_accept_ratio(noisy_ratio, public, sigma)
        accepted = mechanisms.penalty_accept(prop_rng, log_alpha)

        info = StepInfo(
            # output of the noisy test
            accepted=accepted,
            # function of R + xi (mechanism output), of p, p' and theta' (functions of data-free randomness and
            # the L + 1 released noisy gradients) and of the data-free prior: releasable
            accept_stat=mechanisms.accept_statistic(log_alpha),
            extra={
                "n_steps": L,  # public option
                "step_size": eta,  # the jittered step actually used: data-free
                # 2 tau_l b_l ||theta' - theta||: theta' is post-processing of released gradients
                "noise_sd": float(sigma),
                "grad_noise_sd": self.grad_noise_sd,  # 2 tau_g b_g: public constants
                "diverging": False,  # post-processing of released values (see above)
            },
        )
        if accepted:
            cache.update(end)
            return ChainState(theta=end["theta"].copy(), cache=cache), info
        return ChainState(theta=theta, cache=cache), info
