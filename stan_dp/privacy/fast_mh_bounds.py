"""The privacy mechanics of DP-Fast MH's acceptance test (Zhang & Zhang, "DP-Fast MH: Private, Fast, and Accurate
Metropolis-Hastings for Large-Scale Bayesian Inference", ICML 2023: Algorithm 2, Lemma 1 and the proof of
Theorem 2), as pure functions of public quantities, so that they can be audited in one place beside the rest of
the package's privacy arithmetic. The kernel (``stan_dp.samplers.fast_mh``) calls them and re-exports them.

Two departures from the paper's text, both on the side of privacy: the subsampling bound's delta' carries the
factor (e^{epsilon'} - 1) / (e^{epsilon_m} - 1) that the proof of Theorem 2 drops (``subsampled_minibatch_guarantee``
derives it), and the minibatch test's (epsilon_m, delta_m) are solved from the corrected bound where Algorithm 2's
values do not satisfy it (``minibatch_test_parameters``); the Gaussian noise multipliers are Algorithm 2's classic
ones only for epsilon < 1, and the analytic calibration of Balle & Wang (2018) from epsilon 1 on
(``gaussian_noise_multiplier``).
"""
from __future__ import annotations

import math

from scipy import optimize
from scipy.special import log_ndtr, ndtr

__all__ = [
    "sigma_1",
    "sigma_2",
    "minibatch_privacy_parameters",
    "sensitivity_minibatch",
    "sensitivity_full_batch",
    "gaussian_mechanism_delta",
    "gaussian_noise_multiplier",
    "analytic_gaussian_multiplier",
    "subsampled_minibatch_guarantee",
    "minibatch_test_parameters",
    "default_batch_limit",
    "recommended_batch_limit",
]


def sigma_2(epsilon: float, delta: float) -> float:
    """Full-batch noise multiplier: sigma_2 = sqrt(2 log(1.25 / delta)) / epsilon (Algorithm 2).

    The noise added to l2 has standard deviation sigma_2 * Delta(l2).
    """
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def sigma_1(epsilon: float, delta: float, batch_limit: float, max_c: float, total_c: float) -> float:
    """Minibatch noise multiplier, Algorithm 2 verbatim:

    sigma_1 = 6 K max_i c_i sqrt(2 log(2.5 K max_i c_i / (delta C))) / (epsilon C).

    It equals the classic Gaussian-mechanism multiplier sqrt(2 log(1.25 / delta_m)) / epsilon_m at the
    per-minibatch parameters of ``minibatch_privacy_parameters``. The noise added to l1 has standard
    deviation sigma_1 * Delta(l1).
    """
    k_ratio = batch_limit * max_c / total_c  # K max_i c_i / C  (= K / N for one shared bound c)
    return 6.0 * k_ratio * math.sqrt(2.0 * math.log(2.5 * k_ratio / delta)) / epsilon


def minibatch_privacy_parameters(
    epsilon: float, delta: float, batch_limit: float, max_c: float, total_c: float
) -> tuple[float, float]:
    """(epsilon_m, delta_m) that one minibatch test must satisfy so that, after sampling with replacement
    and B < K, the iteration is (epsilon, delta)-DP (proof of Theorem 2: epsilon' <= 6 K p epsilon_m and
    delta' <= 2 K p delta_m with p = max_i c_i / C).

    epsilon_m = epsilon C / (6 K max_i c_i) is also the minibatch privacy-for-free threshold of Algorithm 2.
    """
    k_ratio = batch_limit * max_c / total_c
    return epsilon / (6.0 * k_ratio), delta / (2.0 * k_ratio)


def sensitivity_minibatch(total_c: float, distance: float, lam: float) -> float:
    """Lemma 1, eq. (1): Delta(l1) = 2 log(1 + C M(theta, theta') / lambda)."""
    return 2.0 * math.log1p(total_c * distance / lam)


def sensitivity_full_batch(max_c: float, distance: float) -> float:
    """Lemma 1, eq. (2): Delta(l2) = 2 max_i c_i M(theta, theta')."""
    return 2.0 * max_c * distance


def gaussian_mechanism_delta(epsilon: float, noise_multiplier: float) -> float:
    """Exact delta(epsilon) of the Gaussian mechanism whose noise sd is ``noise_multiplier`` times the
    sensitivity (Balle & Wang 2018, Theorem 8; an "if and only if", valid at every epsilon >= 0):

    delta = Phi(1 / (2 s) - epsilon s) - exp(epsilon) Phi(-1 / (2 s) - epsilon s),  s = noise_multiplier.

    Used to check every calibration the kernels use (``DPFastMH._check_gaussian``) and to compute the
    analytic calibration (``analytic_gaussian_multiplier``).
    """
    s = noise_multiplier
    a = 1.0 / (2.0 * s)
    b = epsilon * s
    # exp(epsilon + log Phi(-a - b)) <= exp(epsilon - (a + b)^2 / 2) and (a + b)^2 / 2 >= 2 a b = epsilon,
    # so the exponent stays below ~0 and cannot overflow for any epsilon.
    return float(ndtr(a - b) - math.exp(epsilon + float(log_ndtr(-a - b))))


def analytic_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """The smallest noise multiplier s (noise sd / sensitivity) whose Gaussian mechanism is
    (epsilon, delta)-DP by the exact profile ``gaussian_mechanism_delta`` (the analytic Gaussian mechanism of
    Balle & Wang 2018, section 4), found by bisection and moved to the safe side of the root."""
    if not (epsilon > 0.0 and math.isfinite(epsilon)) or not 0.0 < delta < 1.0:
        raise ValueError(f"need epsilon > 0 finite and delta in (0, 1); got {epsilon!r}, {delta!r}")

    def excess(s: float) -> float:
        return gaussian_mechanism_delta(epsilon, s) - delta

    # at s = 1 / sqrt(2 epsilon) the two terms of the profile have equal arguments' magnitudes; the
    # classic multiplier is a valid upper end for epsilon < 1, and doubling finds one otherwise.
    lo = hi = math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    if excess(hi) > 0.0:
        while excess(hi) > 0.0:
            lo, hi = hi, 2.0 * hi
    else:
        while excess(lo) <= 0.0 and lo > 1e-300:
            hi, lo = lo, 0.5 * lo
    s = float(optimize.brentq(excess, lo, hi, xtol=1e-15 * hi, rtol=1e-15, maxiter=500))
    while excess(s) > 0.0:
        s *= 1.0 + 1e-12
    return s


def gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
    """The Gaussian noise multiplier the kernels use for an (epsilon, delta)-DP test.

    epsilon < 1: the classic multiplier sqrt(2 log(1.25 / delta)) / epsilon of Algorithm 2 (the DP-Fast MH paper
    Theorem 1, proven there for epsilon < 1). epsilon >= 1, where the classic bound is not proven (and
    fails for large epsilon): the analytic multiplier of Balle & Wang (``analytic_gaussian_multiplier``),
    proven at every epsilon. Either way the kernel confirms the result with the exact profile.
    """
    if epsilon < 1.0:
        return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    return analytic_gaussian_multiplier(epsilon, delta)


def _log_expm1(y: float) -> float:
    """log(e^y - 1) for y > 0 without overflow."""
    return math.log(math.expm1(y)) if y < 30.0 else y + math.log1p(-math.exp(-y))


def _subsampled_epsilon(epsilon_m: float, sample_prob: float, batch_limit: float) -> float:
    """epsilon' = K log((1 - p + p e^{eps_m}) / (1 - p + p e^{-eps_m})), overflow-free."""
    p, x = sample_prob, epsilon_m
    if x < 30.0:
        up = math.log1p(p * math.expm1(x))
    else:  # log(p e^x + 1 - p) = x + log(p + (1 - p) e^{-x})
        up = x + math.log(p + (1.0 - p) * math.exp(-x))
    down = math.log1p(-p * (-math.expm1(-x)))
    return batch_limit * (up - down)


def subsampled_minibatch_guarantee(
    epsilon_m: float, delta_m: float, sample_prob: float, batch_limit: float
) -> tuple[float, float]:
    """The (epsilon', delta') of one minibatch iteration from the proof of Theorem 2 (the DP-Fast MH paper, appendix B),
    with its delta term corrected:

    epsilon' = K log((1 - p + p e^{epsilon_m}) / (1 - p + p e^{-epsilon_m})),
    delta'   = delta_m (e^{epsilon'} - 1) / (e^{epsilon_m} - 1).

    Derivation (one batch size B <= K; q_k, q'_k the probabilities of an output set when the differing row
    is drawn k times; a = 1 - p + p e^{epsilon_m}, b = 1 - p + p e^{-epsilon_m}). The minibatch test being
    (epsilon_m, delta_m)-DP gives q_k <= e^{eps_m} q_{k-1} + delta_m and q_{k-1} <= e^{eps_m} q'_k + delta_m,
    so q_k <= e^{k eps_m} q_0 + delta_m (e^{k eps_m} - 1) / (e^{eps_m} - 1) and
    q'_k >= e^{-k eps_m} q_0 - delta_m (1 - e^{-k eps_m}) / (e^{eps_m} - 1). Averaging over the binomial
    number of draws of the row: P(D) <= q_0 a^B + d (a^B - 1) and P(D') >= q_0 b^B - d (1 - b^B) with
    d = delta_m / (e^{eps_m} - 1). Eliminating q_0 gives P(D) <= (a/b)^B P(D') + d ((a/b)^B - 1): the paper
    drops the negative term of the lower bound (its eq. (7)), which loses the factor (a/b)^B on delta;
    (a/b)^B is largest at B = K. Returns +inf for delta' beyond double precision.
    """
    eps_out = _subsampled_epsilon(epsilon_m, sample_prob, batch_limit)
    if eps_out <= 0.0 or delta_m <= 0.0:
        return eps_out, 0.0
    try:
        delta_out = math.exp(math.log(delta_m) + _log_expm1(eps_out) - _log_expm1(epsilon_m))
    except OverflowError:
        delta_out = math.inf
    return eps_out, delta_out


def minibatch_test_parameters(
    epsilon: float, delta: float, batch_limit: int, max_c: float, total_c: float
) -> tuple[float, float]:
    """(epsilon_m, delta_m) for one minibatch test such that ``subsampled_minibatch_guarantee`` gives at most
    the per-iteration (epsilon, delta).

    Algorithm 2's own values (``minibatch_privacy_parameters``: epsilon C / (6 K c), delta C / (2 K c)) are
    used whenever the corrected bound certifies them (every budget with epsilon_iteration below about 2 at the
    default K). Otherwise (large per-iteration budgets, or a user-set K far from the default) epsilon_m is
    the largest value with epsilon' <= epsilon, found by bisection, and delta_m = delta (e^{eps_m} - 1) /
    (e^{eps'} - 1) (capped at 1/2), so that delta' <= delta.
    """
    p = max_c / total_c
    eps_m, delta_m = minibatch_privacy_parameters(epsilon, delta, batch_limit, max_c, total_c)
    if delta_m < 1.0:
        e_sub, d_sub = subsampled_minibatch_guarantee(eps_m, delta_m, p, batch_limit)
        if e_sub <= epsilon and d_sub <= delta:
            return eps_m, delta_m
    target = epsilon * (1.0 - 1e-9)
    lo, hi = 0.0, 1.0
    while _subsampled_epsilon(hi, p, batch_limit) <= target:
        lo, hi = hi, 2.0 * hi
    x = float(optimize.brentq(lambda e: _subsampled_epsilon(e, p, batch_limit) - target, lo, hi,
                              xtol=1e-15 * hi, rtol=1e-15, maxiter=500))
    while _subsampled_epsilon(x, p, batch_limit) > target:
        x *= 1.0 - 1e-12
    eps_sub = _subsampled_epsilon(x, p, batch_limit)
    log_delta_m = math.log(delta) + _log_expm1(x) - _log_expm1(eps_sub)
    delta_m = 0.5 if log_delta_m > math.log(0.5) else math.exp(log_delta_m)
    # move to the safe side of rounding (differences of epsilons in the millions lose ~1e-10 relative)
    for _ in range(100):
        if subsampled_minibatch_guarantee(x, delta_m, p, batch_limit)[1] <= delta:
            break
        delta_m *= 1.0 - 1e-6
    return x, delta_m


def recommended_batch_limit(epsilon: float, delta: float, n_rows: int) -> int:
    """The kernel's default K: the paper's ``default_batch_limit`` when the corrected subsampling bound
    certifies Algorithm 2's minibatch parameters there (epsilon_iteration below about 2), else the largest
    K <= it for which K draws amplify privacy at all, i.e. epsilon'(epsilon_m = epsilon) <= epsilon; then the
    solved epsilon_m >= epsilon and delta_m >= delta (``minibatch_test_parameters``). At least 1."""
    k = default_batch_limit(epsilon, n_rows)
    eps_m, delta_m = minibatch_privacy_parameters(epsilon, delta, k, 1.0, float(n_rows))
    if delta_m < 1.0:
        e_sub, d_sub = subsampled_minibatch_guarantee(eps_m, delta_m, 1.0 / n_rows, k)
        if e_sub <= epsilon and d_sub <= delta:
            return k
    per_draw = _subsampled_epsilon(epsilon, 1.0 / n_rows, 1)
    return max(1, min(k, math.floor(epsilon / per_draw)))


def default_batch_limit(epsilon: float, n_rows: int) -> int:
    """The paper's recommended K (section 6.2: "around epsilon C / (6 max_i c_i)"), = epsilon N / 6 for one
    shared bound c, rounded *up*, at least 1 and at most N. Rounding up keeps epsilon_m = epsilon N / (6 K)
    <= 1, the range in which the classic Gaussian-mechanism calibration behind sigma_1 is stated (Theorem 1).
    The cap N (reached only at epsilon_iteration > 6) keeps a minibatch no larger than a full pass."""
    return max(1, min(int(n_rows), math.ceil(round(epsilon * n_rows / 6.0, 9))))
