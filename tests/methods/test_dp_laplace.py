"""algorithm="dp-laplace": the noise-aware private Laplace-type posterior.

NumPy reference models only (no Stan compilation); every tolerance is a stated multiple of a Monte Carlo standard
error of iid draws (the dp-laplace draws are independent given the releases), with fixed seeds.
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation
from scipy.stats import norm

from stan_dp import sample_private
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.privacy import mechanisms
from stan_dp.privacy.noise_source import stream
from stan_dp.run import pipeline
from stan_dp.methods.dp_laplace.laplace import LaplacePlan, LaplaceRelease, draws_from_release, newton_point
from stan_dp.run.plan import algorithm_names, plan_run
from row_guards import RowsForbidden

DELTA = 1e-5


def whitened_rows(n: int, d: int, centre, seed: int) -> np.ndarray:
    """Rows whose sample mean is ``centre`` and whose sample covariance (1 / N) is exactly I: then the empirical
    Fisher of the Gaussian-mean rows at the sample mean is exactly N I (the observed information)."""
    z = np.random.default_rng(seed).standard_normal((n, d))
    z -= z.mean(axis=0)
    chol = np.linalg.cholesky(z.T @ z / n)
    return z @ np.linalg.inv(chol).T + np.asarray(centre, dtype=float)


def gaussian_model(n: int = 20_000, d: int = 2, seed: int = 0) -> GaussianMeanModel:
    return GaussianMeanModel(whitened_rows(n, d, np.linspace(0.5, -0.3, d), seed), obs_cov=1.0, prior_mean=0.0,
                             prior_cov=100.0)


class PriorOnly:
    """The data-free part of a model: its prior gradient; any row access fails."""

    def __init__(self, base):
        self.log_prior_grad = base.log_prior_grad


def draws_of(fit) -> np.ndarray:
    theta = np.asarray(fit.posterior["theta"].values)
    return theta.reshape(-1, theta.shape[-1])


# ------------------------------------------------------------------------------------------------ (a) accuracy
@pytest.mark.slow
@pytest.mark.parametrize("max_full", [30, 0])
def test_conjugate_gaussian_at_huge_epsilon_matches_the_exact_posterior(max_full):
    """At epsilon = 1e5 the releases are nearly exact and no row clips (|x_i - theta| < 6 < L): the Laplace
    posterior of the conjugate Gaussian model is the exact posterior (the empirical Fisher at the sample mean is
    N I exactly, whitened rows). Mean within 4 MC standard errors (sd / sqrt(S)), sd within 4 relative standard
    errors (1 / sqrt(2 S)); both the full curvature and its diagonal (max_full = 0)."""
    model = gaussian_model()
    s = 4 * 1000
    fit = sample_private(model, algorithm="dp-laplace", epsilon=1e5, delta=DELTA, chains=4, iter_sampling=1000,
                         seed=3, show_progress=False, grad_clip=10.0, full_curvature_max_dim=max_full)
    draws = draws_of(fit)
    mean, sd = model.posterior_mean(), np.sqrt(np.diag(model.posterior_cov()))
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4.0 * sd / math.sqrt(s)), (draws.mean(axis=0), mean)
    assert np.all(np.abs(draws.std(axis=0) / sd - 1.0) < 4.0 / math.sqrt(2 * s)), (draws.std(axis=0), sd)
    assert fit.attrs["algorithm"] == "dp-laplace"
    form = json.loads(fit.attrs["algorithm_options"])["curvature_form"]
    assert form == ("full" if max_full else "diagonal")
    assert np.asarray(json.loads(fit.attrs["laplace_curvature"])).ndim == (2 if max_full else 1)


# ------------------------------------------------------------------------------------------- (b) accounting
@pytest.mark.parametrize("points", [1, 2])
def test_whole_budget_composes_in_one_pld_against_an_independent_dp_accounting_composition(points):
    """The shares are the rho shares of the three releases (count / (2 tau^2) proportional to the share), and
    dp-accounting's own PLD of the same Gaussian events (noise sd 2 tau against sensitivity 1, REPLACE_ONE), built
    here from the plan's taus, spends [0.99, 1.0] of the budget; so does the mu-GDP closed form."""
    n, d, eps = 10_000, 4, 1.0
    plan = plan_run(n, d, algorithm="dp-laplace", epsilon=eps, delta=DELTA, chains=4, quiet=True, grad_clip=2.5,
                    newton_steps=points)
    assert isinstance(plan, LaplacePlan)
    p, steps = plan.privacy.parameters, int(plan.options["anchor_steps"])
    rho = {"laplace_anchor_share": steps / (2 * p["tau_anchor"] ** 2),
           "laplace_gradient_share": points / (2 * p["tau_gradient"] ** 2),
           "laplace_curvature_share": points / (2 * p["tau_curvature"] ** 2)}
    total_rho = sum(rho.values())
    for key, value in rho.items():
        assert value / total_rho == pytest.approx(plan.options[key], rel=1e-9)
    interval, total = 1e-4, None
    for tau, count in ((p["tau_anchor"], steps), (p["tau_gradient"], points), (p["tau_curvature"], points)):
        one = pld_lib.from_gaussian_mechanism(standard_deviation=2.0 * tau, sensitivity=1.0,
                                              value_discretization_interval=interval,
                                              neighboring_relation=NeighboringRelation.REPLACE_ONE
                                              ).self_compose(count)
        total = one if total is None else total.compose(one)
    independent = total.get_epsilon_for_delta(DELTA)
    assert 0.99 * eps <= independent <= eps * 1.001, independent
    mu = math.sqrt(2.0 * total_rho)  # Gaussian-DP composition: mu^2 adds up
    gdp_delta = norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2)
    assert DELTA * 0.5 < gdp_delta <= DELTA * (1 + 1e-6), gdp_delta
    assert 0.99 * eps <= plan.privacy.report().epsilon <= eps


def test_outer_product_mechanism_sensitivity_and_symmetric_noise():
    """Replacing one row moves the upper triangle of sum_i c_i c_i^T by at most sqrt(2) L^2 in L2 norm (worst
    rows: two orthogonal clipped gradients reach ||cc^T - c'c'^T||_F = sqrt(2) L^2; the worst case itself is
    tests/privacy/test_private_messages.py); the noise is symmetric with sd sigma on every free entry (4 standard errors of
    the sample sd over 4000 matrices)."""
    rng = np.random.default_rng(5)
    L, d = 1.5, 4
    worst = 0.0
    for _ in range(200):
        grads = rng.standard_normal((30, d)) * rng.uniform(0.1, 5.0)
        other = grads.copy()
        other[7] = rng.standard_normal(d) * rng.uniform(0.1, 5.0)
        diff = mechanisms.clipped_outer_product_sum(grads, L) - mechanisms.clipped_outer_product_sum(other, L)
        worst = max(worst, float(np.linalg.norm(diff[np.triu_indices(d)])))
    assert worst <= mechanisms.curvature_sensitivity(L) + 1e-12
    noise = mechanisms.symmetric_gaussian_noise(rng, 0.7, d, size=4000)
    assert np.array_equal(noise, np.swapaxes(noise, 1, 2))
    upper = noise[:, np.triu_indices(d)[0], np.triu_indices(d)[1]]
    assert np.all(np.abs(upper.std(axis=0) / 0.7 - 1) < 4 / math.sqrt(2 * 4000))


# ------------------------------------------------------------------------------------------ (c) planning
def test_planning_reads_no_row(monkeypatch):
    """plan_run / sample_private's planning stage runs on a likelihood whose row methods raise; the rows open
    only when execution starts."""
    lik = RowsForbidden(gaussian_model(n=500))
    plan = plan_run(lik.n_rows, lik.dim, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, quiet=True,
                    grad_clip=5.0)
    assert "dp-laplace" in str(plan) and "dp-laplace" in algorithm_names()
    original = pipeline.execute

    def opening(plan, likelihood, **kwargs):
        likelihood.open_rows = True
        return original(plan, likelihood, **kwargs)

    monkeypatch.setattr(pipeline, "execute", opening)
    fit = pipeline.sample_private(lik, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, chains=2,
                                  iter_sampling=50, seed=1, show_progress=False, grad_clip=5.0)
    assert draws_of(fit).shape == (100, 2)


# ------------------------------------------------------------------------------- (d) only mechanism outputs
@pytest.mark.parametrize("points", [1, 2])
def test_only_mechanism_outputs_differ_between_neighbours_and_the_draws_are_their_post_processing(points):
    """Neighbouring data sets (one row substituted), noise seeded identically: the attrs that differ are the
    released statistics (and the date); the posterior is reproduced exactly from the
    released theta_hat, G~, F~, the data-free prior and the public draw randomness, so nothing else of the rows
    reaches it; with two Newton points the second point is the noisy Newton step from the first point's released
    values. No group holds lp or log-likelihoods."""
    x = whitened_rows(400, 2, [0.2, 0.1], seed=7)
    y = x.copy()
    y[11] = [3.0, -2.5]
    fits, models = [], []
    for rows in (x, y):
        model = GaussianMeanModel(rows, obs_cov=1.0, prior_mean=0.0, prior_cov=4.0)
        models.append(model)
        fits.append(sample_private(model, algorithm="dp-laplace", epsilon=2.0, delta=DELTA, chains=2,
                                   iter_sampling=200, seed=11, show_progress=False, grad_clip=4.0,
                                   newton_steps=points))
    released = {"laplace_theta_hat", "laplace_gradient", "laplace_curvature"} | (
        {"laplace_newton_path"} if points > 1 else set())
    derived = {"created_at"}  # the date of the run
    a, b = fits[0].attrs, fits[1].attrs
    assert set(a) == set(b)
    differing = {k for k in a if str(a[k]) != str(b[k])}
    assert released <= differing and differing <= released | derived, differing
    groups = fits[0].groups() if callable(getattr(fits[0], "groups", None)) else list(fits[0].children)
    assert set(groups) <= {"posterior", "sample_stats"}, groups
    assert list(fits[0].posterior.data_vars) == ["theta"]
    for fit, model in zip(fits, models):
        plan = plan_run(model.n_rows, model.dim, algorithm="dp-laplace", epsilon=2.0, delta=DELTA, chains=2,
                        iter_sampling=200, quiet=True, grad_clip=4.0, newton_steps=points)
        release = LaplaceRelease(*(np.asarray(json.loads(fit.attrs[k])) for k in (
            "laplace_theta_hat", "laplace_gradient", "laplace_curvature")))
        path = json.loads(fit.attrs["laplace_newton_path"])
        assert len(path) == points - 1
        if path:
            previous = [np.asarray(v) for v in path[-1]]
            assert np.allclose(newton_point(*previous, PriorOnly(model), plan), release.theta_hat, rtol=0, atol=1e-12)
        rng = stream(11, "posterior draws", "dp-laplace")
        again = draws_from_release(release, plan, PriorOnly(model), rng)
        assert np.array_equal(again.reshape(-1, 2), draws_of(fit))
        text = fit.attrs["posterior_target"]
        assert "Laplace-type" in text and "multimodal" in text and "boundary" in text


# --------------------------------------------------------------------------------------- (e) noise-aware width
@pytest.mark.slow
def test_noise_aware_intervals_widen_by_the_predicted_amount():
    """1-d Gaussian mean, N = 2000, epsilon = 3 with 5 % of rho on G~: G~'s noise dominates the posterior sd.
    Same releases (same seed), noise-aware vs plain: the sd ratio equals the one predicted from the released
    values and the public noise scales by quadrature over the curvature noise (Gauss-Hermite, 80 nodes;
    the gradient noise integrates in closed form): Var = E[1/P_s + sigma_G^2 / P_s^2] + Var(b / P_s),
    b = G~ + prior gradient, P_s = max(F~ + E, floor) - prior Hessian. Tolerance: 5 standard errors of the log
    sd ratio (sqrt(1/(2S)) each, doubled for the mixture's excess kurtosis)."""
    model = GaussianMeanModel(whitened_rows(2000, 1, [0.4], seed=3), obs_cov=1.0, prior_mean=0.0, prior_cov=4.0)
    common = dict(algorithm="dp-laplace", epsilon=3.0, delta=DELTA, chains=4, iter_sampling=2500, seed=21,
                  show_progress=False, grad_clip=5.0, laplace_anchor_share=0.3, laplace_gradient_share=0.05,
                  laplace_curvature_share=0.65)
    aware = sample_private(model, noise_aware=True, **common)
    plain = sample_private(model, noise_aware=False, **common)
    for key in ("laplace_theta_hat", "laplace_gradient", "laplace_curvature"):
        assert aware.attrs[key] == plain.attrs[key]
    opts = json.loads(aware.attrs["algorithm_options"])
    sg, sf, floor = opts["gradient_noise_sd"], opts["curvature_noise_sd"], opts["eigen_floor"]
    theta = float(json.loads(aware.attrs["laplace_theta_hat"])[0])
    g = float(json.loads(aware.attrs["laplace_gradient"])[0])
    f = float(np.asarray(json.loads(aware.attrs["laplace_curvature"])).reshape(-1)[0])
    b, h0 = g - theta / 4.0, 1.0 / 4.0
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    weights = weights / weights.sum()
    p = np.maximum(f + sf * nodes, floor) + h0
    mean_m = np.sum(weights * b / p)
    predicted_var = np.sum(weights * (1 / p + sg ** 2 / p ** 2)) + np.sum(weights * (b / p) ** 2) - mean_m ** 2
    plain_var = 1.0 / (max(f, floor) + h0)
    predicted = math.sqrt(predicted_var / plain_var)
    assert predicted > 1.5  # the noise dominates
    s = 4 * 2500
    observed = draws_of(aware).std() / draws_of(plain).std()
    print(f"sd ratio observed {observed:.4f}, predicted {predicted:.4f}")
    assert abs(math.log(observed / predicted)) < 5 * math.sqrt(2 * 2 / (2 * s)), (observed, predicted)
    assert abs(draws_of(plain).std() / math.sqrt(plain_var) - 1) < 5 / math.sqrt(2 * s)
    assert "NOT noise-aware" in plain.attrs["posterior_target"]


# ---------------------------------------------------------------------------------------------- (f) errors
@pytest.mark.parametrize("kwargs, match", [
    ({}, "grad_clip"),
    ({"grad_clip": -1.0}, "grad_clip"),
    ({"grad_clip": 1.0, "laplace_gradient_share": 0.5}, "sum to 1"),
    ({"grad_clip": 1.0, "step_size": 0.1}, "step_size"),
    ({"grad_clip": 1.0, "iter_warmup": 100}, "no warmup"),
    ({"grad_clip": 1.0, "leapfrog_steps": 3}, "unknown option"),
    ({"grad_clip": 1.0, "eigen_floor": 0.0}, "eigen_floor"),
    ({"grad_clip": 1.0, "anchor_steps": 1}, "anchor_steps"),
    ({"grad_clip": 1.0, "chains": 0}, "chains"),
])
def test_bad_inputs_are_refused_before_any_row_is_read(kwargs, match):
    lik = RowsForbidden(gaussian_model(n=100))
    args = dict(algorithm="dp-laplace", epsilon=1.0, delta=DELTA, show_progress=False, **kwargs)
    with pytest.raises(ValueError, match=match):
        sample_private(lik, **args)


def test_debug_is_refused():
    model = RowsForbidden(gaussian_model(n=100))
    with pytest.raises(ValueError, match="debug"):
        sample_private(model, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, chains=1, iter_sampling=10,
                       show_progress=False, grad_clip=5.0, debug=True)


# ------------------------------------------------------------------- (g) brute force over the released noise
@pytest.mark.slow
def test_noise_aware_draws_match_a_brute_force_monte_carlo_over_the_release_noise():
    """2-d Gaussian mean (quadratic log-likelihood, known obs covariance I), N = 2000, epsilon = 2: the releases
    of one run (theta_hat, G~, F~, read from the attrs) are fixed, and the noise-aware posterior they define is
    the mixture over the redrawn release noise (xi ~ N(0, sigma_G^2 I), E symmetric with N(0, sigma_F^2) upper
    triangle) of N(m, P^-1), P = max-eig-floor(F~ + E) + H0 (then floored again), m = theta_hat + P^-1 (G~ + xi +
    g0), with g0, H0 the exact prior gradient and minus Hessian of N(0, 4 I). This test rebuilds that mixture by
    brute force here (K = 400,000 noise draws, its own eigen-floor code, no package function) and compares its
    mean and covariance with the package's released draws (S = 4 x 5000).

    Tolerances, from Monte Carlo error: mean, 4.5 standard errors sqrt(Var / S + Var / K) per coordinate;
    covariance entries, 4.5 standard errors estimated from the draws themselves (sd of (x_i - mu_i)(x_j - mu_j)
    over sqrt(S), which covers the mixture's excess kurtosis) plus the brute force's own, from its K draws.
    The noise is chosen large (sd ratio to the non-private posterior > 1.3) so that the check is not a trivial
    N(mean, N^-1 I)."""
    n, d = 2000, 2
    model = GaussianMeanModel(whitened_rows(n, d, [0.3, -0.2], seed=5), obs_cov=1.0, prior_mean=0.0,
                              prior_cov=4.0)
    chains, per_chain = 4, 5000
    fit = sample_private(model, algorithm="dp-laplace", epsilon=2.0, delta=DELTA, chains=chains,
                         iter_sampling=per_chain, seed=11, show_progress=False, grad_clip=5.0,
                         laplace_anchor_share=0.3, laplace_gradient_share=0.1, laplace_curvature_share=0.6)
    opts = json.loads(fit.attrs["algorithm_options"])
    assert opts["curvature_form"] == "full"
    sg, sf, floor = opts["gradient_noise_sd"], opts["curvature_noise_sd"], opts["eigen_floor"]
    theta_hat = np.asarray(json.loads(fit.attrs["laplace_theta_hat"]))
    g_tilde = np.asarray(json.loads(fit.attrs["laplace_gradient"]))
    f_tilde = np.asarray(json.loads(fit.attrs["laplace_curvature"]))
    g0, h0 = -theta_hat / 4.0, np.eye(d) / 4.0  # the N(0, 4 I) prior, exactly

    k = 400_000
    rng = np.random.default_rng(2024)
    a, b, c = rng.normal(0.0, sf, size=(3, k))
    e = np.empty((k, d, d))
    e[:, 0, 0], e[:, 1, 1], e[:, 0, 1], e[:, 1, 0] = a, c, b, b

    def floored(m: np.ndarray) -> np.ndarray:
        w, v = np.linalg.eigh(m)
        return np.einsum("kij,kj,klj->kil", v, np.maximum(w, floor), v)

    p = floored(floored(f_tilde + e) + h0)
    cov_k = np.linalg.inv(p)
    rhs = g_tilde + g0 + rng.normal(0.0, sg, size=(k, d))
    m_k = theta_hat + np.einsum("kij,kj->ki", cov_k, rhs)
    mc_mean = m_k.mean(axis=0)
    mc_cov = cov_k.mean(axis=0) + np.cov(m_k.T)

    draws = draws_of(fit)
    s = draws.shape[0]
    assert s == chains * per_chain
    assert np.sqrt(np.diag(mc_cov)).min() > 1.3 / math.sqrt(n)  # the release noise matters here
    mean_se = np.sqrt(np.diag(mc_cov) / s + np.diag(mc_cov) / k)
    assert np.all(np.abs(draws.mean(axis=0) - mc_mean) < 4.5 * mean_se), (draws.mean(axis=0), mc_mean, mean_se)
    centred = draws - draws.mean(axis=0)
    cov = centred.T @ centred / (s - 1)
    for i in range(d):
        for j in range(i, d):
            prod = centred[:, i] * centred[:, j]
            se = prod.std() / math.sqrt(s) + math.sqrt(mc_cov[i, i] * mc_cov[j, j] + mc_cov[i, j] ** 2) / math.sqrt(k)
            assert abs(cov[i, j] - mc_cov[i, j]) < 4.5 * se, (i, j, cov[i, j], mc_cov[i, j], se)


def test_a_floored_curvature_direction_is_counted_and_warned_about():
    """Where the released curvature is below the eigen floor in some direction (an uncentred covariate: one
    small eigenvalue of the Fisher, buried in the curvature noise at epsilon 1), the fit counts the floored
    directions (attrs laplace_floored_directions, from the released F~ and the public floor) and warns that the
    intervals there may not cover; a well-conditioned problem at a huge budget has none and gives no warning."""
    from stan_dp.models.reference_models import LogisticRegressionModel
    from stan_dp.output.diagnostics import ConvergenceWarning
    from stan_dp.methods.dp_laplace.laplace_posterior import floored_directions

    assert floored_directions(np.diag([5.0, 0.5]), 1.0) == 1 and floored_directions(np.array([5.0, 2.0]), 1.0) == 0
    rng = np.random.default_rng(4)
    x = 3.0 + rng.uniform(-2.0, 2.0, size=(1000, 1))  # uncentred: (1, x) nearly collinear directions
    y = (rng.uniform(size=1000) < 1.0 / (1.0 + np.exp(-(-1.0 + 0.3 * x[:, 0])))).astype(int)
    model = LogisticRegressionModel(x, y, prior_sd=2.5)
    with pytest.warns(ConvergenceWarning, match="below its noise level"):
        fit = sample_private(model, algorithm="dp-laplace", epsilon=1.0, delta=DELTA, grad_clip=5.1, seed=3,
                             show_progress=False)
    assert fit.attrs["laplace_floored_directions"] >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = sample_private(gaussian_model(), algorithm="dp-laplace", epsilon=1e5, delta=DELTA, grad_clip=20.0,
                             seed=3, show_progress=False)
    assert fit.attrs["laplace_floored_directions"] == 0
