"""The NumPy linear and Poisson regression models and the NumPy reference sampler (stan_dp.models.numpy_reference)."""
import numpy as np
import pytest

from stan_dp.models.numpy_reference import laplace, reference_draws
from stan_dp.models.reference_models import LinearRegressionModel, PoissonRegressionModel


@pytest.mark.parametrize("model", [LinearRegressionModel.simulate(300, 2, seed=1),
                                   PoissonRegressionModel.simulate(300, 2, seed=1)], ids=["linear", "poisson"])
def test_gradients_match_finite_differences(model):
    """Row gradients and the prior gradient agree with central differences (relative 1e-5)."""
    theta = model.true_theta + 0.05
    values, grads = model.row_log_lik_grad(theta)
    np.testing.assert_allclose(values, model.row_log_lik(theta))
    lp, lp_grad = model.log_prior_grad(theta)
    assert lp == pytest.approx(model.log_prior(theta))
    h = 1e-6
    for j in range(model.dim):
        e = np.zeros(model.dim)
        e[j] = h
        fd = (model.row_log_lik(theta + e) - model.row_log_lik(theta - e)) / (2 * h)
        np.testing.assert_allclose(grads[:, j], fd, rtol=1e-5, atol=1e-6)
        fd_prior = (model.log_prior(theta + e) - model.log_prior(theta - e)) / (2 * h)
        assert lp_grad[j] == pytest.approx(fd_prior, rel=1e-5, abs=1e-6)


def test_linear_model_far_tails_do_not_raise():
    """Far from the data (log sigma = -400) the log-likelihood is -inf, not an OverflowError."""
    model = LinearRegressionModel.simulate(50, 1, seed=2)
    values, _ = model.row_log_lik_grad(np.array([0.0, 0.0, -400.0]))
    assert np.all(values == -np.inf)
    assert model.log_prior(np.array([0.0, 0.0, 400.0])) == -np.inf


@pytest.mark.slow
def test_reference_draws_match_laplace_for_a_near_gaussian_posterior():
    """With 2,000 rows the linear-regression posterior is close to its Laplace approximation: the reference
    means lie within 4 Monte Carlo standard errors (4000 draws, ESS >= ~1000 assumed) of the mode and the sds
    within 15% of the Laplace sds."""
    model = LinearRegressionModel.simulate(2000, 2, seed=3)
    mode, cov = laplace(model)
    draws = reference_draws(model, chains=4, draws=1000, seed=1).reshape(-1, model.dim)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(axis=0) - mode) < 4 * sd / np.sqrt(1000))
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.15)
