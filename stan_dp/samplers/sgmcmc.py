"""Private stochastic-gradient MCMC: DP-SGLD, DP-SGHMC and DP-SGNHT (the Privacy-for-Free paper (Wang et al. 2015) Algorithm 2 and eqs
4.2-4.5).

Every iteration draws a data-independent minibatch B (Poisson with rate q, or B rows uniformly without
replacement, q = B/N), clips every row's gradient to the public bound L (``grad_clip``), and uses

    g(theta) = grad log p0(theta) + (1/q) S,   S = sum_{i in B} clip_L(grad l_i(theta)),

an unbiased estimate of the clipped log-posterior gradient (the data-free prior part is exact). The update
adds ONE Gaussian noise whose per-coordinate variance is max(what the dynamics need, what privacy needs)
(``mechanisms.merged_noise_variance``; the papers' max(C eta^2, eta)): when the dynamics term wins the
privacy costs nothing ("privacy for free"); otherwise the kernel either runs hotter (SGLD) or raises the
friction so that the target stays the posterior (SGHMC, SGNHT). Each iteration is one subsampled Gaussian
mechanism with noise multiplier ``tau_g`` (``noise_declaration``): the released theta' is post-processing of
S + noise. All clip/noise arithmetic lives in ``stan_dp.privacy.mechanisms``.

Discretisations (derived here; the papers' printed updates have typos, see the seed README). The metric
M^-1 = diag(m) (the run's inverse metric, ``m_j`` a posterior-variance scale) preconditions everything:
write theta = sqrt(m) z, so that z has roughly unit posterior scale and "step" is in those units.

* DP-SGLD, step eta:  theta' = theta + (eta/2) m g + N(0, diag(v)),  dynamics v_j = eta m_j.
  This is the Euler-Maruyama step of d theta = (1/2) M^-1 grad log pi dt + M^-1/2 dW, whose invariant
  law is pi. (The Privacy-for-Free paper's Algorithm 2 prints drift eta with noise variance eta, which targets pi^2;
  ``tests/samplers/test_sgmcmc.py`` fails on that.) Privacy: the drift scale of S is (eta/2) m_j / q, so
  v_j >= (tau_g L eta m_j / q)^2; privacy is free iff eta m_j <= (q / (tau_g L))^2 for every j. Otherwise
  the chain runs at temperature v_j / (eta m_j) > 1 (released as ``temperature``).
* DP-SGHMC, step h, friction C, gradient-noise estimate B_hat (Chen et al. 2014, the Privacy-for-Free paper eq 4.2 with its
  typos fixed), momentum r in z units:
      r' = a r + h sqrt(m) g + N(0, diag(v)),   theta' = theta + h sqrt(m) r',
  a = exp(-h C) (the exact friction factor; 1 - h C to first order, stable for any h C), dynamics
  v_j = 1 - a^2 - 2 h B_hat (= 2 (C - B_hat) h to first order: fluctuation-dissipation). Privacy needs
  v_j >= P_j = (2 tau_g L h sqrt(m_j) / q)^2. If P_j is larger, the friction of coordinate j is raised to
  a_j = sqrt(1 - P_j - 2 h B_hat) (C_eff = -log(a_j) / h): the injected noise is then exactly the noise that
  friction balances, so the target stays the posterior; only when P_j + 2 h B_hat >= 1 (no friction can
  balance it) does the coordinate run hot. We prefer raising the friction to running hot: it slows mixing
  but keeps the stationary law.
* DP-SGNHT, step h, diffusion A (Ding et al. 2014, the Privacy-for-Free paper eq 4.3 with r_{t-1} -> p_{t-1}, eta_t A ->
  h A, theta_{t-s} -> theta_{t-1}, I_n -> I_d fixed), momentum r in z units, thermostat xi:
      r' = exp(-h xi) r + h sqrt(m) g + N(0, diag(v)),  theta' = theta + h sqrt(m) r',
      xi' = xi + h (r'^T r' / d - 1),
  dynamics v_j = 2 A h; privacy v_j >= P_j; v_j = max. The thermostat raises the friction by itself until
  the kinetic temperature is 1, absorbing both the privacy noise and the minibatch noise. p_0 ~ N(0, I);
  xi_0 = A_eff = max_j v_j / (2 h) (the friction that balances the injected noise; = A when privacy is
  free), because the thermostat adapts slowly when the privacy noise is large (the Privacy-for-Free paper (long version) line 392). The
  thermostat is restarted at A_eff whenever the run changes the metric (warmup window ends only): in the
  transient from a far-away init the gradients push xi up by orders of magnitude, and it can come down by at
  most h per step; for the same reason xi is capped at 2 A_eff. At stationarity xi is about N(A, 1/d), so
  the cap binds in a few per cent of the iterations in small dimensions (8 % for d = 2, A = 1), where it
  slightly perturbs the thermostat; the exactness test (d = 2) passes with it. Measured on the README
  logistic model (N = 1e5, epsilon = 1, uniform(-2, 2) inits, NumPy engine): with the cap at
  2 A_eff + 4 / sqrt(d), which binds almost never at stationarity, the chains had not left the transient
  after 1000 warmup iterations (max error 6 reference sds); with 2 A_eff they had (0.7 sds).

Step sizes from public quantities only (``step_size`` is in z units; the run machinery keeps it fixed,
there is no accept test to adapt on, but adapts the diagonal metric m from released warmup draws):

* default step: the largest step whose minibatch-gradient noise stays below ``gradient_noise_ratio`` (rho,
  default 0.1) of the injected noise when m is the posterior variance. With Fisher information ~ 1/m_j per
  coordinate, Var(g_j) ~ (1 - q) / (q m_j); SGLD's minibatch noise (eta/2)^2 m_j^2 Var(g_j) over its
  injected eta m_j is eta (1 - q) / (4 q), so eta = 4 rho q / (1 - q); for SGHMC/SGNHT the ratio is
  h (1 - q) / (2 C q), so h = 2 rho C q / (1 - q) (C = friction or A). Capped at 1 (z units).
  In an anchored run the rows are the differences g_i(theta) - g_i(theta_hat) clipped at C_d (``diff_clip``),
  so Var(g_j) <= N C_d^2 (1 - q) / q whatever the Fisher information; at the public metric d / (N L^2) that
  is d (C_d / L)^2 times the guess above, and the step may grow by (L / C_d)^2 / d. It is not raised past
  ``ANCHORED_STEP_CAP`` = 0.1: there the Euler schemes, not the minibatch noise, limit accuracy (on a unit
  Gaussian with exact gradients the SGNHT update's stationary variance is 0.97 at h = 0.1, 0.87 at 0.25; SGLD's
  is 1 / (1 - eta / 4)). A plain rule above the cap is kept. With the plain rule alone, 2e6 and 2e7 anchored
  logistic rows (q = 0.021, 0.0067) ran at h = 0.0043 and 0.0013, and four chains of 5,000 + 5,000 iterations
  did not reach each other (R-hat 1.22 and 1.77).
* ``free_steps=True`` (default) keeps every coordinate in the privacy-for-free regime by capping its
  preconditioner: SGLD m_j <= (q / (tau_g L))^2 / eta, SGHMC/SGNHT m_j <= C q^2 / (2 tau_g^2 L^2 h) (from
  P_j <= 2 C h). Any fixed positive diagonal preconditioner leaves the target unchanged, so the cap costs speed,
  not accuracy, and (unlike capping the step by the largest m_j) it does not freeze coordinates with a small
  metric. Since tau_g grows like q sqrt(T) / mu, the largest free absolute step is about mu^2 / (L^2 T): the
  budget fixes how far the chain can diffuse in total, whatever q.
* ``step_schedule="decreasing"``: step_t = step (1 + t / decay_offset)^(-decay_exponent) (the papers'
  option; Welling & Teh use exponents in (0.5, 1]).
* initial metric (``initial_metric``, used when the run adapts a diagonal metric): m_j = d / (N L^2). The
  Fisher identity gives sum_j E[(d_j l_i)^2] = E||grad l_i||^2, at most L^2 when the clip rarely binds, so
  the posterior precision per coordinate is about N L^2 / d; m_j is never taken below 1 / (N L^2) (all of
  the gradient in one coordinate), which stops released-draw metric estimates from collapsing.
* DP-SGLD's ``refine_metric``: a warmup window whose draws over-relax (lag-1 autocorrelation below 0.5; the
  Euler step with a metric much wider than the posterior alternates sides) gets the metric read off the
  autocorrelation instead of the inflated variance (see the method). Without it a chain that met the
  posterior with a transient-inflated metric stayed over-relaxed: 5.7 (logistic) and 17 (Poisson) posterior
  sds wide at epsilon 100; after it 1.06 and 1.08 (``benchmarks/bench_utility.py --quick``).

Released per iteration (``StepInfo``; all public or functions of public quantities and released draws):
``accepted`` True, ``accept_stat`` 1, extra ``step_size`` (the step used, z units), ``noise_sd`` (largest
injected noise sd, in theta units for SGLD and z units for the momentum kernels), ``temperature`` (largest
v_j / dynamics_j for SGLD; 1 unless friction cannot balance for SGHMC/SGNHT), ``friction`` (SGHMC: largest
C_eff; SGNHT: xi, a function of released draws). The realised minibatch and its size are never released: the
Poisson-subsampled accountant's pair holds only while |B| is hidden (``_info``).
"""
from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from ..likelihood import RowLikelihood
from ..privacy import mechanisms
from ..privacy.events import NoiseDeclaration, subsampled_gaussian_release
from .adaptation import public_metric
from .base import ChainState, KernelBase, StepInfo, check_step_args, check_theta
from .options import DIFF_CLIP, Option, OptionSpec
from .penalty import plan_noise

__all__ = ["DPSGLD", "DPSGHMC", "DPSGNHT", "default_sampling_rate"]

SG_RELEASE = "clipped minibatch gradient sum"
SG_NOTE = ("sigma = 2 tau_g L on S = sum over the minibatch of per-row gradients clipped to L (sensitivity 2 L); "
           "one release per iteration")


#: the largest default step (z units) the anchored rule gives: the Euler discretisation of the momentum kernels
#: keeps the variance of a unit Gaussian within about 3 % at 0.1 (13 % low at 0.25; module doc)
ANCHORED_STEP_CAP = 0.1


def default_sampling_rate(n_rows: int) -> float:
    """q = min(1, 30 / sqrt(N)): a batch of about 30 sqrt(N) rows.

    The privacy-for-free step is about mu^2 / (L^2 T) whatever q (see the module doc), while the step the
    minibatch noise allows grows like q; batches of order sqrt(N) keep the minibatch limit at or above the
    privacy limit for N up to ~1e6 at epsilon ~ 1 (about 10 % of the rows at N = 1e5), at a per-step cost of
    O(sqrt(N)) rows.
    """
    return min(1.0, 30.0 / math.sqrt(max(int(n_rows), 1)))


def _common_options(algorithm: str, extra: list[Option]) -> OptionSpec:
    return OptionSpec(algorithm, [
        Option("grad_clip", "real", None, required=True, low=0.0, low_open=True,
               doc="L: public per-row gradient L2 clip bound on the unconstrained scale (choose it from public "
                   "knowledge of the model and data domain, e.g. a bound on ||x_i|| for a GLM, never from the "
                   "private rows); gradients beyond it are clipped (private but biased)"),
        Option("batch_sampling", "choice", "poisson", choices=("poisson", "uniform"),
               doc="'poisson': every row enters each minibatch independently with probability sampling_rate "
                   "(PLD accounting); 'uniform': batch_size rows without replacement (RDP accounting)"),
        Option("sampling_rate", "real", None, low=0.0, high=1.0, low_open=True,
               none_means="min(1, 30 / sqrt(N))",
               doc="q, the Poisson sampling probability (batch_sampling='poisson')"),
        Option("batch_size", "int", None, low=1, none_means="round(q N) with the default q",
               doc="rows per minibatch (batch_sampling='uniform')"),
        *extra,
        DIFF_CLIP,
        Option("gradient_noise_ratio", "real", 0.1, low=0.0, low_open=True,
               doc="rho: the default step keeps the minibatch-gradient noise at about rho times the injected "
                   "noise (smaller: more accurate, slower mixing)"),
        Option("free_steps", "bool", True,
               doc="cap each coordinate's preconditioner so that its privacy noise stays within the dynamics "
                   "noise (privacy for free); False lets the privacy noise win (hotter chain or higher friction)"),
        Option("step_schedule", "choice", "constant", choices=("constant", "decreasing"),
               doc="'decreasing': step_t = step (1 + t / decay_offset)^(-decay_exponent)"),
        Option("decay_exponent", "real", 0.55, low=0.0, high=1.0, low_open=True,
               doc="exponent of the decreasing schedule"),
        Option("decay_offset", "real", 100.0, low=0.0, low_open=True,
               doc="iterations over which the decreasing schedule halves the step about once"),
    ])


class _SGKernel(KernelBase):
    """Shared machinery of the three SG-MCMC kernels (minibatches, gradient estimate, steps, accounting)."""

    accounting_name: ClassVar[str] = ""
    option_spec: ClassVar[OptionSpec]
    #: the run machinery keeps the step size fixed (no accept test to adapt on); the metric is still adapted
    adapts_step_size: ClassVar[bool] = False
    run_defaults: ClassVar[dict[str, Any]] = {"metric": "diag"}
    #: option holding the friction-like constant C of the step rules (None for SGLD)
    friction_option: ClassVar[str | None] = None

    # ---- accounting ---------------------------------------------------------------------------------
    @classmethod
    def _sampling(cls, opts: dict[str, Any], n_rows: int | None) -> dict[str, Any]:
        if n_rows is None:
            raise ValueError(f"algorithm {cls.accounting_name!r} draws minibatches: the accountant needs the public "
                             f"row count N (pass n_rows=N to calibrate/account)")
        n = int(n_rows)
        if n < 1:
            raise ValueError(f"{cls.accounting_name}: the likelihood has no rows (N = {n})")
        spec = cls.option_spec
        if opts["batch_sampling"] == "poisson":
            if opts["batch_size"] is not None:
                raise spec.value_error("batch_size", opts["batch_size"],
                                       "left unset with batch_sampling='poisson' (use sampling_rate)")
            q = opts["sampling_rate"] if opts["sampling_rate"] is not None else default_sampling_rate(n)
            return {"batch_sampling": "poisson", "sampling_rate": float(q), "batch_size": None}
        if opts["sampling_rate"] is not None:
            raise spec.value_error("sampling_rate", opts["sampling_rate"],
                                   "left unset with batch_sampling='uniform' (use batch_size)")
        b = opts["batch_size"]
        if b is None:
            b = max(1, round(default_sampling_rate(n) * n))
        if b > n:
            raise spec.value_error("batch_size", b, f"at most N = {n}")
        return {"batch_sampling": "uniform", "sampling_rate": b / n, "batch_size": int(b)}

    @classmethod
    def accounting_shape(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options that shape the release: the minibatch rule."""
        opts = cls.option_spec.validate(options, require=False)
        return {k: opts[k] for k in ("batch_sampling", "sampling_rate", "batch_size")}

    @classmethod
    def noise_declaration(cls, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> NoiseDeclaration:
        """One subsampled Gaussian release per iteration with noise multiplier ``tau_g`` (the noise scale):
        Poisson-sampled (PLD) or sampled without replacement (RDP)."""
        opts = cls.option_spec.validate(shape, require=False)
        sampling = cls._sampling(opts, n_rows)
        if n_rows is None:
            raise ValueError(f"{cls.__name__}: the noise declaration needs the row count n_rows")
        n = int(n_rows)

        def releases(p: dict[str, Any]) -> list:
            return [subsampled_gaussian_release(SG_RELEASE, p["tau_g"], sampling=p["batch_sampling"], n_rows=n,
                                                sampling_rate=p["sampling_rate"], batch_size=p["batch_size"],
                                                note=SG_NOTE)]

        # tau_g ~ q sqrt(T) / mu for small q: start there (mu ~ 1)
        start = max(sampling["sampling_rate"] * math.sqrt(total_iterations), 0.5)
        return NoiseDeclaration(parameters=lambda s: {"tau_g": s, **sampling}, releases=releases,
                                noise_names=("tau_g",), start=start)

    # ---- construction -------------------------------------------------------------------------------
    def __init__(self, likelihood: RowLikelihood, plan: Any, **options: Any) -> None:
        self.likelihood = likelihood
        self.dim = int(likelihood.dim)
        self.n_rows = int(likelihood.n_rows)
        self.options = self.option_spec.validate(options)
        self.grad_clip = self.options["grad_clip"]
        #: the clip bound of the mechanism: L, or C (diff_clip) in an anchored run, whose rows are the gradient
        #: differences g_i(theta) - g_i(theta_hat); L keeps setting the public scales (initial metric, floor)
        self.mechanism_clip = self.options["diff_clip"] or self.grad_clip
        sampling = self._sampling(self.options, self.n_rows)
        for key, value in sampling.items():
            planned = getattr(plan, key, None)
            if planned != value:
                raise ValueError(f"{self.accounting_name}: the privacy plan was calibrated for {key} = {planned!r} but "
                                 f"the options give {value!r}; calibrate with accounting_shape(options) and "
                                 f"n_rows = {self.n_rows}")
        self.batch_sampling = sampling["batch_sampling"]
        self.sampling_rate = sampling["sampling_rate"]
        self.batch_size = sampling["batch_size"]
        self.tau_g = plan_noise(plan, "tau_g", self.accounting_name)
        self.metric_floor = 1.0 / (self.n_rows * self.grad_clip ** 2)
        #: default step in z units (public: rho, q, the friction option and, anchored, (L / C)^2 and d)
        clip_ratio = (self.grad_clip / self.mechanism_clip) ** 2
        self.default_step_size = self.minibatch_step(self.sampling_rate, self.options, clip_ratio=clip_ratio,
                                                     dim=self.dim)

    @classmethod
    def minibatch_step(cls, q: float, options: dict[str, Any], *, clip_ratio: float = 1.0, dim: int = 1) -> float:
        """The default step in z units (module doc): 4 rho q / (1 - q) for SGLD, 2 rho C q / (1 - q) for the
        momentum kernels (C: the friction option), 1 with full batches; capped at 1. In an anchored run
        (``clip_ratio`` = (L / C)^2 > 1, ``dim`` = d) the rows are differences clipped at C, whose minibatch noise
        is at most d / clip_ratio of the rule's Fisher-based guess at the public metric d / (N L^2), so the
        rule's step may grow by clip_ratio / d, up to ``ANCHORED_STEP_CAP`` (never below the plain rule).
        ``options`` validated."""
        if q >= 1.0:
            return 1.0
        ratio = options["gradient_noise_ratio"]
        friction = 2.0 if cls.friction_option is None else float(options[cls.friction_option])
        step = 2.0 * ratio * friction * q / (1.0 - q)
        if clip_ratio > 1.0:
            step = max(step, min(ANCHORED_STEP_CAP, step * clip_ratio / max(int(dim), 1)))
        return min(1.0, step)

    def initial_metric(self) -> np.ndarray:
        """Public starting metric m_j = d / (N L^2) (see the module doc): ``adaptation.public_metric``."""
        return public_metric(self.n_rows, self.dim, self.grad_clip)

    def init_state(self, theta: np.ndarray) -> ChainState:
        """State at a data-free initial point (momentum and thermostat are drawn on the first step)."""
        return ChainState(theta=check_theta(theta, self.dim), cache={"t": 0})

    # ---- pieces of a step ---------------------------------------------------------------------------
    def _batch(self, rng: np.random.Generator) -> np.ndarray:
        if self.batch_sampling == "poisson":
            if self.sampling_rate >= 1.0:
                return np.arange(self.n_rows)
            return mechanisms.poisson_minibatch(rng, self.n_rows, self.sampling_rate)
        return mechanisms.uniform_minibatch(rng, self.n_rows, self.batch_size)

    def _gradient(self, theta: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """g(theta): never released by itself (it enters the update only with the merged noise)."""
        _, prior_grad = self.likelihood.log_prior_grad(theta)
        clipped = mechanisms.rows_clipped_gradient_sum(self.likelihood, theta, rows, self.mechanism_clip)
        with mechanisms.private_arithmetic():
            g = mechanisms.minibatch_gradient(clipped, prior_grad, self.sampling_rate)
        return g

    def _metric(self, metric: np.ndarray, free_limit: float) -> np.ndarray:
        """The preconditioner actually used: the run's metric, at least ``metric_floor`` and, with
        ``free_steps``, at most the privacy-for-free limit (any fixed positive diagonal preconditioner leaves
        the target unchanged, so capping it per coordinate costs no accuracy, only speed)."""
        m = np.maximum(metric, self.metric_floor)
        if self.options["free_steps"]:
            m = np.minimum(m, free_limit)
        return m

    def _step(self, step_size: float, t: int) -> float:
        step = step_size
        if self.options["step_schedule"] == "decreasing":
            step = step * (1.0 + t / self.options["decay_offset"]) ** (-self.options["decay_exponent"])
        return step

    def _info(self, step: float, noise_sd: float, temperature: float, friction: float | None) -> StepInfo:
        """What one iteration releases besides the draw: public functions of the step, the metric and the
        released draws only. The realised minibatch (and its size) is NOT released: the Poisson-subsampled
        accountant covers the pair only while |B| stays hidden (given |B| = k the batch is a uniform k-subset
        and the pair becomes add/remove at the full substitution sensitivity 2 L)."""
        extra: dict[str, Any] = {"step_size": float(step), "noise_sd": float(noise_sd),
                                 "temperature": float(temperature)}
        if friction is not None:
            extra["friction"] = float(friction)
        # no accept test: every iterate is released; accept_stat 1 (the run does not adapt the step on it)
        return StepInfo(accepted=True, accept_stat=1.0, extra=extra)

    def _diverged(self, state: ChainState, step: float, cache: dict[str, Any]) -> tuple[ChainState, StepInfo]:
        raise FloatingPointError(
            f"{self.accounting_name}: the chain left the finite numbers at iteration {cache['t']} (step {step:.3g} in "
            f"metric units). Use a smaller step_size, keep free_steps=True, or give public inits closer to "
            f"plausible values.")


class DPSGLD(_SGKernel):
    """DP stochastic-gradient Langevin dynamics (the Privacy-for-Free paper Algorithm 2, corrected; see the module doc).

    Options (``option_spec``): grad_clip (required), batch_sampling, sampling_rate, batch_size,
    gradient_noise_ratio, free_steps, step_schedule, decay_exponent, decay_offset.
    Plan: ``tau_g`` (noise multiplier of the clipped minibatch sum) and the minibatch rule.
    """

    accounting_name: ClassVar[str] = "dp-sgld"
    option_spec: ClassVar[OptionSpec] = _common_options("dp-sgld", [])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults
    #: drift coefficient of the Euler-Maruyama step with noise variance eta m: 1/2 targets pi (the Langevin
    #: SDE); the printed Algorithm 2 of the Privacy-for-Free paper amounts to 1, which targets pi^2 (the tests check both)
    langevin_drift: ClassVar[float] = 0.5

    def free_metric_limit(self, eta: float) -> float:
        """Largest m_j with privacy for free at step eta: eta m_j <= (q / (tau_g L))^2."""
        if self.tau_g == 0.0:
            return math.inf
        return (self.sampling_rate / (self.tau_g * self.mechanism_clip)) ** 2 / eta

    #: lag-1 autocorrelation below which a warmup window counts as over-relaxed (see ``refine_metric``)
    over_relaxed_below: ClassVar[float] = 0.5

    def refine_metric(self, estimate: np.ndarray, lag1: np.ndarray, previous: np.ndarray,
                      step_size: float) -> np.ndarray:
        """Correct a warmup window's variance estimate for over-relaxation (called by the run at window ends).

        Near a mode with curvature 1 / s_j^2 the Euler step contracts by a_j = 1 - (eta / 2) m_j / s_j^2 per
        iteration, so the draws are an AR(1) with lag-1 autocorrelation a_j. When m_j exceeds 4 s_j^2 / eta
        (a_j < -1) the step is unstable, and between 2 s_j^2 / eta and that bound it over-relaxes: the draws
        alternate sides and their variance is many times s_j^2. A metric estimated from such draws keeps the
        chain there (measured on the README logistic model, N = 10,000, epsilon = 100: after the transient the
        window variance was ~20 s_j^2, the lag-1 autocorrelation -0.75 to -0.96 and the released draws 5.7
        posterior sds wide). Where a_j < ``over_relaxed_below`` the curvature scale is read off the
        autocorrelation instead, s_j^2 = eta m_j / (2 (1 - a_j)), with m_j the preconditioner the window
        actually used; the estimate is never raised. Inputs are released draws and public quantities only.
        With the decreasing schedule the window's steps were at most ``step_size``, so the correction is
        conservative.
        """
        eta = float(step_size)
        used = self._metric(np.asarray(previous, dtype=float), self.free_metric_limit(eta))
        curvature_scale = eta * used / (2.0 * (1.0 - np.minimum(lag1, self.over_relaxed_below)))
        return np.where(lag1 < self.over_relaxed_below, np.minimum(estimate, curvature_scale), estimate)

    def step(self, rng: np.random.Generator, state: ChainState, step_size: float,
             metric: np.ndarray) -> tuple[ChainState, StepInfo]:
        step_size, metric = check_step_args(step_size, metric, self.dim)
        cache = dict(state.cache)
        t = int(cache.get("t", 0))
        eta = self._step(step_size, t)
        m = self._metric(metric, self.free_metric_limit(eta))
        theta = np.asarray(state.theta, dtype=float)
        batch = self._batch(rng)
        g = self._gradient(theta, batch)
        drift_scale = self.langevin_drift * eta * m
        dynamics = eta * m
        variance = mechanisms.merged_noise_variance(
            dynamics, mechanisms.privacy_noise_variance(drift_scale, self.sampling_rate, self.mechanism_clip, self.tau_g))
        with mechanisms.private_arithmetic():
            theta_new = theta + drift_scale * g + mechanisms.merged_noise(rng, variance)
        cache["t"] = t + 1
        if not np.all(np.isfinite(theta_new)):
            return self._diverged(state, eta, cache)
        info = self._info(eta, math.sqrt(float(np.max(variance))), float(np.max(variance / dynamics)), None)
        return ChainState(theta=theta_new, cache=cache), info


class _MomentumKernel(_SGKernel):
    """Shared momentum update of DP-SGHMC and DP-SGNHT (z units; see the module doc). The initial momentum comes
    from the chain's proposal stream (``proposal_rng``), the minibatches and the merged noise from ``rng``."""

    def free_metric_limit(self, h: float, friction: float) -> float:
        """Largest m_j with privacy for free at step h: P_j <= 2 C h, i.e. m_j <= C q^2 / (2 tau_g^2 L^2 h)."""
        if self.tau_g == 0.0:
            return math.inf
        return friction * self.sampling_rate ** 2 / (2.0 * (self.tau_g * self.mechanism_clip) ** 2 * h)

    def public_state(self, theta: np.ndarray) -> ChainState:
        """State at a public point with the public momentum 0 (the privacy audit starts an audited iteration
        here: a fresh momentum drawn at that iteration is noise the mechanism does not own and would mask a
        sensitivity error at small steps)."""
        return ChainState(theta=check_theta(theta, self.dim), cache={"t": 0, "r": np.zeros(self.dim)})

    def _momentum(self, rng: np.random.Generator, cache: dict[str, Any]) -> np.ndarray:
        if "r" not in cache:
            cache["r"] = rng.standard_normal(self.dim)  # p_0 ~ N(0, I)
        return cache["r"]

    def _privacy_variance(self, h: float, m: np.ndarray) -> np.ndarray:
        return mechanisms.privacy_noise_variance(h * np.sqrt(m), self.sampling_rate, self.mechanism_clip,
                                                 self.tau_g)


class DPSGHMC(_MomentumKernel):
    """DP stochastic-gradient HMC (Chen et al. 2014; the Privacy-for-Free paper eq 4.2 corrected; see the module doc).

    Options: those of DP-SGLD plus ``friction`` (C, default 1 in metric units) and ``gradient_noise``
    (B_hat >= 0, default 0: the public guess of the minibatch-gradient noise, per unit time, in metric units).
    """

    accounting_name: ClassVar[str] = "dp-sghmc"
    friction_option: ClassVar[str | None] = "friction"
    option_spec: ClassVar[OptionSpec] = _common_options("dp-sghmc", [
        Option("friction", "real", 1.0, low=0.0, low_open=True,
               doc="C: friction per unit time in metric units (about 1 is near critical damping)"),
        Option("gradient_noise", "real", 0.0, low=0.0,
               doc="B_hat: public guess of the minibatch-gradient noise per unit time (metric units), "
                   "subtracted from the injected noise; 0 is the safe choice"),
    ])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults

    def step(self, rng: np.random.Generator, state: ChainState, step_size: float, metric: np.ndarray,
             proposal_rng: np.random.Generator | None = None) -> tuple[ChainState, StepInfo]:
        step_size, metric = check_step_args(step_size, metric, self.dim)
        cache = dict(state.cache)
        t = int(cache.get("t", 0))
        c, b_hat = self.options["friction"], self.options["gradient_noise"]
        h = self._step(step_size, t)
        m = self._metric(metric, self.free_metric_limit(h, c))
        r = self._momentum(rng if proposal_rng is None else proposal_rng, cache)
        theta = np.asarray(state.theta, dtype=float)
        batch = self._batch(rng)
        g = self._gradient(theta, batch)
        a = math.exp(-h * c)
        dynamics = np.full(self.dim, max(1.0 - a * a - 2.0 * h * b_hat, 0.0))
        privacy = self._privacy_variance(h, m)
        variance = mechanisms.merged_noise_variance(dynamics, privacy)
        # raise the friction where privacy needs more noise, so that friction still balances it
        a_eff = np.sqrt(np.clip(1.0 - variance - 2.0 * h * b_hat, 0.0, None))
        with mechanisms.private_arithmetic():
            r_new = a_eff * r + h * np.sqrt(m) * g + mechanisms.merged_noise(rng, variance)
            theta_new = theta + h * np.sqrt(m) * r_new
            friction = float(np.max(-np.log(np.maximum(a_eff, 1e-300)) / h))
        cache["t"] = t + 1
        if not (np.all(np.isfinite(theta_new)) and np.all(np.isfinite(r_new))):
            return self._diverged(state, h, cache)
        cache["r"] = r_new
        # hot only where no friction can balance the noise: stationary momentum variance v / (1 - a_eff^2)
        balance = 1.0 - a_eff ** 2
        temperature = float(np.max(np.where(balance > 0.0, variance / np.maximum(balance, 1e-300), np.inf)))
        temperature = max(temperature, 1.0) if variance.max() > 0 else 1.0
        info = self._info(h, math.sqrt(float(np.max(variance))), temperature, friction)
        return ChainState(theta=theta_new, cache=cache), info


class DPSGNHT(_MomentumKernel):
    """DP stochastic-gradient Nose-Hoover thermostat (Ding et al. 2014; the Privacy-for-Free paper eq 4.3 corrected).

    Options: those of DP-SGLD plus ``diffusion`` (A, default 1 in metric units; xi_0 = max(A, the friction
    that balances the privacy noise)).
    """

    accounting_name: ClassVar[str] = "dp-sgnht"
    friction_option: ClassVar[str | None] = "diffusion"
    option_spec: ClassVar[OptionSpec] = _common_options("dp-sgnht", [
        Option("diffusion", "real", 1.0, low=0.0, low_open=True,
               doc="A: injected diffusion per unit time in metric units; the thermostat xi starts at A"),
    ])
    option_defaults: ClassVar[dict[str, Any]] = option_spec.defaults

    def step(self, rng: np.random.Generator, state: ChainState, step_size: float, metric: np.ndarray,
             proposal_rng: np.random.Generator | None = None) -> tuple[ChainState, StepInfo]:
        step_size, metric = check_step_args(step_size, metric, self.dim)
        cache = dict(state.cache)
        t = int(cache.get("t", 0))
        big_a = self.options["diffusion"]
        h = self._step(step_size, t)
        m = self._metric(metric, self.free_metric_limit(h, big_a))
        r = self._momentum(rng if proposal_rng is None else proposal_rng, cache)
        theta = np.asarray(state.theta, dtype=float)
        batch = self._batch(rng)
        g = self._gradient(theta, batch)
        dynamics = np.full(self.dim, 2.0 * big_a * h)
        variance = mechanisms.merged_noise_variance(dynamics, self._privacy_variance(h, m))
        if "xi" not in cache or not np.array_equal(cache.get("metric"), metric):
            # xi_0 = A_eff (public). The run changes the metric only at warmup window ends; the thermostat is
            # restarted there, because far from the posterior the huge gradients drive xi up by orders of
            # magnitude and it comes down by at most h per step (the chain would stall for thousands of steps).
            cache["xi"] = float(np.max(variance)) / (2.0 * h)
            cache["metric"] = np.array(metric, copy=True)
        xi = cache["xi"]
        with mechanisms.private_arithmetic():
            r_new = math.exp(-h * xi) * r + h * np.sqrt(m) * g + mechanisms.merged_noise(rng, variance)
            theta_new = theta + h * np.sqrt(m) * r_new
            xi_new = xi + h * (float(r_new @ r_new) / self.dim - 1.0)
        # cap at twice the balancing friction A_eff: far from the posterior the thermostat would otherwise stall
        # the chain (see the module doc)
        xi_new = min(xi_new, 2.0 * float(np.max(variance)) / (2.0 * h))
        cache["t"] = t + 1
        if not (np.all(np.isfinite(theta_new)) and np.all(np.isfinite(r_new)) and math.isfinite(xi_new)):
            return self._diverged(state, h, cache)
        cache["r"], cache["xi"] = r_new, xi_new
        info = self._info(h, math.sqrt(float(np.max(variance))), 1.0, xi_new)
        return ChainState(theta=theta_new, cache=cache), info
