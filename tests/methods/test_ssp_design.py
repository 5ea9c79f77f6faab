"""The dp-ssp design prior (stan_dp.methods.dp_ssp.ssp_design): the closed-form density of the scatter of normal rows with
an inverse Wishart covariance integrated out, its place in the noise-aware target, and the option naming it."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.special import multigammaln

from stan_dp.models.reference_models import LinearRegressionModel
from stan_dp.run.plan import PublicFacts, plan_run
from stan_dp.methods.dp_ssp.ssp import BOUND_SDS
from stan_dp.methods.dp_ssp.ssp_design import DesignPrior, design_prior_from_bounds


def test_one_covariate_density_integrates_and_matches_the_hierarchical_model():
    """K = 1: the density integrates to 1 (quadrature, error < 1e-6) and its CDF at four points equals the
    empirical CDF of W = Sigma chi^2(N - 1), Sigma ~ inverse gamma(nu / 2, psi / 2), over 200,000 draws (within
    4 binomial standard errors)."""
    prior = design_prior_from_bounds(40, [3.0], BOUND_SDS)
    density = np.vectorize(lambda w: math.exp(prior.log_density_scatter(np.array([[w]]))))
    total, _ = integrate.quad(density, 0, np.inf, limit=200)
    assert total == pytest.approx(1.0, abs=1e-6)
    rng = np.random.default_rng(0)
    n_draws = 200_000
    sigma = stats.invgamma.rvs(prior.nu / 2, scale=prior.psi[0, 0] / 2, size=n_draws, random_state=rng)
    w = sigma * rng.chisquare(39, size=n_draws)
    for q in np.quantile(w, [0.1, 0.4, 0.7, 0.95]):
        cdf, _ = integrate.quad(density, 0, q, limit=200)
        emp = float(np.mean(w <= q))
        assert abs(cdf - emp) < 4 * math.sqrt(emp * (1 - emp) / n_draws)


def test_two_covariate_density_is_the_wishart_averaged_over_the_inverse_wishart():
    """K = 2: at three scatter matrices the closed form equals the Monte Carlo average of the Wishart(N - 1,
    Sigma) density over 4,000 inverse Wishart draws of Sigma (within 4 Monte Carlo standard errors of the log
    average); a matrix that is not positive definite has density 0."""
    psi = np.array([[2.0, 0.5], [0.5, 1.0]])
    prior = DesignPrior(n_rows=25, psi=psi, nu=5.0)
    sigmas = stats.invwishart.rvs(df=5.0, scale=psi, size=4000, random_state=np.random.default_rng(1))
    n = 24
    for w in (np.array([[20.0, 3.0], [3.0, 10.0]]), np.array([[8.0, -2.0], [-2.0, 15.0]]),
              np.array([[40.0, 10.0], [10.0, 6.0]])):
        # the Wishart log density for every draw at once (checked against scipy's at the first draw)
        log_wishart = (0.5 * (n - 3) * np.linalg.slogdet(w)[1] - 0.5 * np.einsum("kij,ji->k", np.linalg.inv(sigmas), w)
                       - n * math.log(2.0) - 0.5 * n * np.linalg.slogdet(sigmas)[1] - multigammaln(n / 2, 2))
        assert log_wishart[0] == pytest.approx(stats.wishart.logpdf(w, df=n, scale=sigmas[0]))
        dens = np.exp(log_wishart)
        se = dens.std() / dens.mean() / math.sqrt(dens.size)
        assert abs(math.log(dens.mean()) - prior.log_density_scatter(w)) < 4 * se + 1e-9
    assert prior.log_density_scatter(np.array([[1.0, 2.0], [2.0, 1.0]])) == -math.inf


def test_design_prior_option():
    """dp-ssp defaults to the normal-rows design prior and states it; design_prior='flat' restores the flat one;
    any other value is refused in words."""
    rng = np.random.default_rng(4)
    model = LinearRegressionModel(rng.uniform(-1, 1, (100, 1)), rng.normal(0, 1, 100))
    common = dict(algorithm="dp-ssp", epsilon=1.0, delta=1e-5, facts=PublicFacts(linear=model.linear_spec), x_bounds=(-2, 2),
                  y_bounds=(-4, 4))
    plan = plan_run(model.n_rows, model.dim, **common)
    prior = plan.design_prior()
    assert isinstance(prior, DesignPrior)
    assert np.allclose(np.diag(prior.psi) / (prior.nu + 2), (2.0 / BOUND_SDS) ** 2)  # Sigma's mode: the assumption
    assert "inverse Wishart" in plan.design_assumption() and plan.describe()["design_prior"] == "normal"
    flat = plan_run(model.n_rows, model.dim, design_prior="flat", **common)
    assert flat.design_prior() is None and "flat" in flat.design_assumption()
    with pytest.raises(ValueError, match="design_prior must be one of"):
        plan_run(model.n_rows, model.dim, design_prior="wishart", **common)
