"""Tests of the NumPy reference models (stan_dp.models.reference_models): gradients, posterior formulas, shapes."""
from __future__ import annotations

import numpy as np
import pytest

from stan_dp.likelihood import RowLikelihood
from stan_dp.models.reference_models import (
    BananaModel,
    GaussianMeanModel,
    LogisticRegressionModel,
    TruncatedGaussianMixtureModel,
)


def _models():
    return {
        "gaussian": GaussianMeanModel.simulate(40, 3, seed=1),
        "banana": BananaModel.simulate(30, seed=2, sigma1_sq=2000 * 30 / 1e5, sigma2_sq=2500 * 30 / 1e5),
        "logistic": LogisticRegressionModel.simulate(50, 3, seed=3),
        "logistic_noint": LogisticRegressionModel.simulate(50, 2, seed=4, intercept=False),
        "mixture": TruncatedGaussianMixtureModel.simulate(60, seed=5, temperature=5.0),
    }


MODELS = _models()


def _fd_grad(f, theta, h=1e-6):
    grad = np.zeros_like(theta)
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        grad[j] = (f(theta + e) - f(theta - e)) / (2 * h)
    return grad


def _point(model, rng):
    if isinstance(model, BananaModel):
        return np.array([rng.normal(0, 0.2), rng.normal(3, 0.5)])
    return rng.normal(0.0, 0.7, size=model.dim)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_protocol_and_shapes(name):
    """Each model satisfies the RowLikelihood protocol and returns the documented shapes."""
    model = MODELS[name]
    assert isinstance(model, RowLikelihood)
    theta = _point(model, np.random.default_rng(0))
    assert model.row_log_lik(theta).shape == (model.n_rows,)
    values, grads = model.row_log_lik_grad(theta)
    assert values.shape == (model.n_rows,) and grads.shape == (model.n_rows, model.dim)
    rows = np.array([0, 2, 2, model.n_rows - 1])
    v, g = model.row_log_lik_grad(theta, rows)
    assert v.shape == (4,) and g.shape == (4, model.dim)
    np.testing.assert_allclose(v, values[rows])
    np.testing.assert_allclose(g, grads[rows])
    np.testing.assert_allclose(model.row_log_lik(theta, rows), values[rows])
    assert model.row_log_lik(theta, np.array([], dtype=int)).shape == (0,)
    lp, gp = model.log_prior_grad(theta)
    assert isinstance(lp, float) and gp.shape == (model.dim,)
    assert lp == pytest.approx(model.log_prior(theta))
    shapes = model.param_shapes()
    released = model.constrain(theta)
    assert list(released) == list(shapes)
    for key, shape in shapes.items():
        assert np.shape(released[key]) == shape
    assert sum(int(np.prod(s)) for s in shapes.values()) == model.dim
    with pytest.raises(ValueError):
        model.row_log_lik(np.zeros(model.dim + 1))
    with pytest.raises(ValueError):
        model.row_log_lik(theta, np.array([model.n_rows]))


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradients_match_finite_differences(name):
    """Row and prior gradients agree with central finite differences at random points."""
    model = MODELS[name]
    rng = np.random.default_rng(11)
    for _ in range(3):
        theta = _point(model, rng)
        _, grads = model.row_log_lik_grad(theta)
        fd = np.stack([_fd_grad(lambda t, i=i: model.row_log_lik(t, np.array([i]))[0], theta)
                       for i in range(model.n_rows)])
        np.testing.assert_allclose(grads, fd, rtol=1e-5, atol=1e-6 * (1 + np.abs(fd).max()))
        _, gp = model.log_prior_grad(theta)
        np.testing.assert_allclose(gp, _fd_grad(model.log_prior, theta), rtol=1e-5, atol=1e-7)
        values, _ = model.row_log_lik_grad(theta)
        np.testing.assert_allclose(values, model.row_log_lik(theta))


def test_gaussian_posterior_is_stationary_point_with_right_curvature():
    """The analytic Gaussian posterior mean zeroes the log-posterior gradient and its Hessian is -cov^-1."""
    model = GaussianMeanModel.simulate(25, 3, seed=7)
    mean, cov = model.posterior_mean(), model.posterior_cov()

    def grad_post(t):
        return model.row_log_lik_grad(t)[1].sum(axis=0) + model.log_prior_grad(t)[1]

    scale = np.abs(model.row_log_lik_grad(mean + 0.1)[1].sum(axis=0)).max()
    assert np.abs(grad_post(mean)).max() < 1e-9 * scale
    hess = np.stack([_fd_grad(lambda t, j=j: grad_post(t)[j], mean, h=1e-4) for j in range(3)])
    np.testing.assert_allclose(hess, -np.linalg.inv(cov), rtol=1e-5)
    # the row log-likelihood carries the normalising constant of N(x | theta, obs_cov)
    _, logdet = np.linalg.slogdet(model.obs_cov)
    value = model.row_log_lik(model.x[0], np.array([0]))[0]
    assert value == pytest.approx(-0.5 * (model.dim * np.log(2 * np.pi) + logdet))


def test_gaussian_simulate_follows_paper_recipe():
    """simulate() builds obs_cov = Q diag(gamma eigenvalues) Q^T, the N(0, 100^2 I) prior and default truth."""
    model = GaussianMeanModel.simulate(2000, 4, seed=3)
    np.testing.assert_allclose(model.prior_cov, 100.0**2 * np.eye(4))
    np.testing.assert_allclose(model.prior_mean, 0.0)
    np.testing.assert_allclose(model.true_theta, [0, 3, 0, 0])
    eig = np.linalg.eigvalsh(model.obs_cov)
    assert (eig > 0).all()
    emp = np.cov(model.x, rowvar=False)
    np.testing.assert_allclose(emp, model.obs_cov, atol=0.15 * eig.max())
    # with the diffuse prior the posterior mean is close to the data mean
    np.testing.assert_allclose(model.posterior_mean(), model.x.mean(axis=0), atol=1e-5)


def test_banana_posterior_mean_and_cov_match_quadrature():
    """The closed-form banana posterior mean/covariance agree with 2-d quadrature of the model's log density."""
    n = 200
    model = BananaModel.simulate(n, seed=5, sigma1_sq=2000 * n / 1e5, sigma2_sq=2500 * n / 1e5)
    mean, cov = model.posterior_mean(), model.posterior_cov()
    sd = np.sqrt(np.diag(cov))
    t1 = np.linspace(mean[0] - 9 * sd[0], mean[0] + 9 * sd[0], 401)
    t2 = np.linspace(mean[1] - 25 * sd[1], mean[1] + 8 * sd[1], 2001)
    T1, T2 = np.meshgrid(t1, t2, indexing="ij")
    x = model.x

    def log_joint(th1, th2):
        # sum_i l_i + log p0 from sufficient statistics (checked against the model's own methods below)
        m2 = th2 + model.a * th1**2
        ss1 = n * th1**2 - 2 * th1 * x[:, 0].sum() + (x[:, 0] ** 2).sum()
        ss2 = n * m2**2 - 2 * m2 * x[:, 1].sum() + (x[:, 1] ** 2).sum()
        return -0.5 * ss1 / model.sigma1_sq - 0.5 * ss2 / model.sigma2_sq - 0.5 * (th1**2 + m2**2) / 1000.0**2

    rng = np.random.default_rng(0)
    pts = rng.normal(mean, sd, size=(5, 2))
    exact = np.array([model.row_log_lik(p).sum() + model.log_prior(p) for p in pts])
    fast = np.array([log_joint(p[0], p[1]) for p in pts])
    np.testing.assert_allclose(np.diff(exact), np.diff(fast), rtol=1e-9, atol=1e-6)
    logp = log_joint(T1, T2)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    qmean = np.array([(w * T1).sum(), (w * T2).sum()])
    np.testing.assert_allclose(qmean, mean, atol=2e-3 * sd.max())
    c11 = (w * (T1 - qmean[0]) ** 2).sum()
    c22 = (w * (T2 - qmean[1]) ** 2).sum()
    c12 = (w * (T1 - qmean[0]) * (T2 - qmean[1])).sum()
    np.testing.assert_allclose([c11, c12, c22], [cov[0, 0], cov[0, 1], cov[1, 1]], rtol=2e-3, atol=1e-6)
    # i.i.d. posterior draws agree too (the paper's reference sample)
    draws = model.sample_posterior(200_000, np.random.default_rng(0))
    assert (np.abs(draws.mean(axis=0) - mean) < 4 * sd / np.sqrt(draws.shape[0])).all()
    np.testing.assert_allclose(np.cov(draws, rowvar=False), cov, rtol=0.02, atol=1e-4)
    assert x.shape == (n, 2)


def test_banana_paper_defaults_give_a_curved_posterior():
    """With the paper's hyper-parameters the posterior is strongly curved (theta_2 spread dominated by a)."""
    model = BananaModel.simulate(100_000, seed=1)
    cov = model.posterior_cov()
    mu, var = model.posterior_params()
    assert var[0] == pytest.approx(1 / (100_000 / 2000 + 1e-6))
    assert cov[1, 1] > 5 * var[1]
    np.testing.assert_allclose(model.true_theta, [0, 3])


def test_logistic_names_match_stan_program_and_simulate():
    """Logistic model releases alpha and beta like stan_models/logistic.stan; simulate() has an intercept."""
    model = LogisticRegressionModel.simulate(100, 4, seed=9)
    assert model.dim == 5 and model.param_shapes() == {"alpha": (), "beta": (4,)}
    theta = np.arange(5.0) / 10
    out = model.constrain(theta)
    assert float(out["alpha"]) == 0.0 and out["beta"].tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4])
    eta = theta[0] + model.X @ theta[1:]
    p = 1 / (1 + np.exp(-eta))
    expected = np.where(model.y == 1, np.log(p), np.log1p(-p))
    np.testing.assert_allclose(model.row_log_lik(theta), expected, rtol=1e-10)
    assert np.isfinite(model.row_log_lik(np.full(5, 300.0))).all()
    with pytest.raises(ValueError):
        LogisticRegressionModel(model.X, model.y + 1)


def test_mixture_transform_prior_and_truncation():
    """Mixture: constrain maps R^2 into the box, the prior is flat on the box, data are truncated to [-3, 3]."""
    model = TruncatedGaussianMixtureModel.simulate(5000, seed=2)
    assert model.n_rows == 5000 and np.abs(model.x).max() <= 3.0
    assert model.temperature == 500.0 and model.sigma_x_sq == 2.0
    rng = np.random.default_rng(0)
    u = rng.normal(0, 3, size=(100, 2))
    thetas = np.stack([model.constrain(v)["theta"] for v in u])
    assert (np.abs(thetas) < 3).all()
    np.testing.assert_allclose(np.stack([model.unconstrain(t) for t in thetas]), u, rtol=1e-8)
    # prior pushed forward: exp(log_prior(u)) = J(u_1) J(u_2) and each J integrates to the box width 6
    grid = np.linspace(-30, 30, 4001)
    jac_at_0 = 6.0 * 0.25
    density = np.exp([model.log_prior(np.array([g, 0.0])) for g in grid]) / jac_at_0
    assert np.trapezoid(density, grid) == pytest.approx(6.0, rel=1e-4)
    # the log-likelihood is the paper's energy divided by the temperature
    t = model.constrain(np.array([0.3, -0.2]))["theta"]
    x = model.x[:5]
    s = np.sqrt(2.0)
    U = np.log(2 * np.sqrt(2 * np.pi) * s) - np.log(
        np.exp(-(x - t[0]) ** 2 / (2 * s**2)) + np.exp(-(x - t[0] - t[1]) ** 2 / (2 * s**2)))
    np.testing.assert_allclose(model.row_log_lik(np.array([0.3, -0.2]), np.arange(5)), -U / 500)
    with pytest.raises(ValueError):
        TruncatedGaussianMixtureModel(np.array([0.0, 3.5]))


def test_mixture_row_bound_holds():
    """row_bound(): the uniform appendix-E bound bounds every row's log-likelihood change per unit distance."""
    model = TruncatedGaussianMixtureModel.simulate(2000, seed=4, temperature=1.0)
    c_theta = model.row_bound("constrained")
    assert c_theta == pytest.approx(np.sqrt(15.0**2 + 9.0**2) / 2.0)
    c = model.row_bound()
    assert c == pytest.approx(1.5 * c_theta)
    rng = np.random.default_rng(1)
    worst = 0.0
    for _ in range(200):
        u = rng.normal(0, 2, size=2)
        v = u + rng.normal(0, 0.5, size=2)
        ratio = np.abs(model.row_log_lik(v) - model.row_log_lik(u)) / np.linalg.norm(v - u)
        worst = max(worst, ratio.max())
        _, g = model.row_log_lik_grad(u)
        assert np.linalg.norm(g, axis=1).max() <= c
    assert worst <= c
    # the appendix-E bound is conservative (a sum where a convex combination would do, and the transform's
    # largest slope at u = 0) but not vacuous
    assert worst > c / 6
    # the temperature divides the bound
    hot = TruncatedGaussianMixtureModel(model.x, temperature=500.0)
    assert hot.row_bound() == pytest.approx(c / 500)
    with pytest.raises(ValueError):
        model.row_bound("theta")
