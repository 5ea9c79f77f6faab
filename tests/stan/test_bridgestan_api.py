"""The compiled libraries export the BridgeStan C API: ``bridgestan.StanModel`` loads them and every method
behaves as bridgestan documents it.

Evidence for "Compile Stan programs into libraries that bridgestan loads". The three bundled programs cover
the cases that matter: ``constrained`` (bounds, simplex, cholesky_factor_corr, cov_matrix, vector bounds),
``regression_gq`` (transformed parameters and generated quantities with an RNG) and ``no_data`` (no data
block). Log densities are checked against hand-written formulas (SciPy), gradients against central finite
differences, Hessians against finite differences of the gradient (and an exact analytic Hessian).
"""
from __future__ import annotations

import ctypes
import itertools
import json
import math

import numpy as np
import pytest
from scipy import stats

bridgestan = pytest.importorskip("bridgestan")

pytestmark = pytest.mark.stan

PROPTO_JACOBIAN = list(itertools.product([True, False], [True, False]))

# --------------------------------------------------------------------------------------------- data


def regression_data(n: int = 20, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    y = 1.0 + 2.0 * x + rng.normal(scale=0.7, size=n)
    return {"N": n, "x": x.tolist(), "y": y.tolist()}


def constrained_data(n: int = 6, k: int = 3, seed: int = 4) -> dict:
    rng = np.random.default_rng(seed)
    return {"N": n, "K": k, "z": rng.normal(size=(n, k)).tolist()}


REG_DATA = regression_data()
CON_DATA = constrained_data()
NO_DATA_MU = np.array([1.0, -1.0])
NO_DATA_COV = np.array([[1.0, 0.5], [0.5, 2.0]])


@pytest.fixture(scope="module")
def libs(stan_model):
    """Library paths of the three bundled programs (each compiled at most once per session)."""
    return {name: str(stan_model(name).library_path) for name in ("constrained", "regression_gq", "no_data")}


@pytest.fixture(scope="module")
def reg(libs):
    return bridgestan.StanModel(libs["regression_gq"], json.dumps(REG_DATA), warn=False)


@pytest.fixture(scope="module")
def con(libs):
    return bridgestan.StanModel(libs["constrained"], json.dumps(CON_DATA), warn=False)


@pytest.fixture(scope="module")
def nod(libs):
    return bridgestan.StanModel(libs["no_data"], warn=False)


@pytest.fixture(scope="module")
def models(reg, con, nod):
    return {"regression_gq": reg, "constrained": con, "no_data": nod}


def points(model, count: int = 3, seed: int = 11, scale: float = 1.0) -> list[np.ndarray]:
    """A few unconstrained points drawn from a fixed seed."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(-scale, scale, size=model.param_unc_num()) for _ in range(count)]


def indexed(name: str, *shape: int) -> list[str]:
    """Stan's indexed names: dot-separated 1-based indices, first index fastest (column major)."""
    if not shape:
        return [name]
    names = []
    for reversed_index in itertools.product(*(range(1, n + 1) for n in reversed(shape))):
        names.append(name + "." + ".".join(str(i) for i in reversed(reversed_index)))
    return names


# --------------------------------------------------------------------------------------------- loading


def test_library_loads_without_version_warning(libs):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a version mismatch is a RuntimeWarning in bridgestan
        model = bridgestan.StanModel(libs["no_data"], warn=False)
    assert model.model_version() == tuple(int(p) for p in bridgestan.__version__.split(".")[:3])


def test_dpstanmodel_bridgestan_face(stan_model):
    m = stan_model("regression_gq")
    bs = m.bridgestan(REG_DATA)
    assert isinstance(bs, bridgestan.StanModel)
    assert bs.param_unc_num() == 3
    assert np.isfinite(bs.log_density(np.zeros(3)))


@pytest.mark.parametrize("empty", [None, "", "{}"])
def test_no_data_model_accepts_no_data(libs, empty):
    model = bridgestan.StanModel(libs["no_data"], empty, warn=False)
    assert model.param_unc_num() == 3


def test_instances_of_one_library_are_independent(libs, reg):
    small = bridgestan.StanModel(libs["regression_gq"], json.dumps(regression_data(n=5, seed=9)), warn=False)
    theta = np.array([0.3, 1.1, -0.2])
    before = reg.log_density(theta)
    assert small.log_density(theta) != pytest.approx(before)
    assert reg.log_density(theta) == before  # the other instance did not disturb the first


# --------------------------------------------------------------------------------------------- names


def test_name(models):
    assert models["constrained"].name() == "constrained_model"
    assert models["regression_gq"].name() == "regression_gq_model"
    assert models["no_data"].name() == "no_data_model"


def test_model_info(models):
    for model in models.values():
        info = model.model_info()
        assert "Stan version: 2." in info
        assert "STAN_THREADS=true" in info
        assert f"--name={model.name()}" in info
        assert "stanc_version" in info


def test_param_names_with_and_without_tp_gq(reg):
    params = ["alpha", "beta", "sigma"]
    tp = ["log_sigma", *indexed("coef", 2)]
    gq = ["y_new", "above"]
    assert indexed("coef", 2) == ["coef.1", "coef.2"]
    assert reg.param_names() == params
    assert reg.param_names(include_tp=True) == params + tp
    assert reg.param_names(include_gq=True) == params + gq
    assert reg.param_names(include_tp=True, include_gq=True) == params + tp + gq
    for tp_flag, gq_flag in itertools.product([False, True], repeat=2):
        names = reg.param_names(include_tp=tp_flag, include_gq=gq_flag)
        assert reg.param_num(include_tp=tp_flag, include_gq=gq_flag) == len(names)
    assert reg.param_unc_names() == params
    assert reg.param_unc_num() == 3


def test_param_names_convention_matches_shapes(con):
    k = CON_DATA["K"]
    expected = (
        ["scale", "bounded"]
        + indexed("weights", k)
        + indexed("L", k, k)
        + indexed("Sigma", 2, 2)
        + indexed("tau", 2)
    )
    names = con.param_names()
    assert names == expected
    # spot checks of the convention itself: 1-based, dot-separated, first index fastest
    assert names[names.index("L.1.1") + 1] == "L.2.1"
    assert "L.0.0" not in names and "L[2,1]" not in names
    assert con.param_num() == 1 + 1 + k + k * k + 4 + 2
    # no tp / gq in this program: flags change nothing
    assert con.param_names(include_tp=True, include_gq=True) == expected
    # unconstrained: simplex K-1, cholesky_factor_corr K(K-1)/2, cov_matrix[2] 3, flattened names
    unc = ["scale", "bounded"] + indexed("weights", k - 1) + indexed("L", k * (k - 1) // 2)
    unc += indexed("Sigma", 3) + indexed("tau", 2)
    assert con.param_unc_names() == unc
    assert con.param_unc_num() == len(unc) == 12


def test_param_names_no_data(nod):
    assert nod.param_names() == ["mu.1", "mu.2", "s"]
    assert nod.param_names(include_tp=True, include_gq=True) == ["mu.1", "mu.2", "s"]
    assert nod.param_unc_names() == ["mu.1", "mu.2", "s"]
    assert nod.param_num() == nod.param_unc_num() == 3


# --------------------------------------------------------------------------------------------- transforms


def test_param_constrain_tp_gq(reg):
    u = np.array([0.4, -1.3, math.log(0.8)])
    assert np.allclose(reg.param_constrain(u), [0.4, -1.3, 0.8])
    with_tp = reg.param_constrain(u, include_tp=True)
    assert with_tp.shape == (6,)
    assert np.allclose(with_tp, [0.4, -1.3, 0.8, math.log(0.8), 0.4, -1.3])
    rng = reg.new_rng(5)
    full = reg.param_constrain(u, include_tp=True, include_gq=True, rng=rng)
    assert full.shape == (8,)
    assert np.allclose(full[:6], with_tp)
    y_new, above = full[6], full[7]
    assert np.isfinite(y_new)
    assert above == float(y_new > 0.4)
    gq_only = reg.param_constrain(u, include_gq=True, rng=rng)
    assert gq_only.shape == (5,) and np.allclose(gq_only[:3], [0.4, -1.3, 0.8])


def test_param_constrain_gq_requires_rng(reg):
    u = np.zeros(3)
    with pytest.raises(ValueError, match="rng"):
        reg.param_constrain(u, include_gq=True)
    # The C function itself refuses a NULL rng with gq (BridgeStan's error convention: -1 and a message).
    out = np.zeros(reg.param_num(include_gq=True))
    err = ctypes.c_char_p()
    rc = reg._param_constrain(reg.model, False, True, u, out, None, ctypes.byref(err))
    assert rc == -1
    assert err.value is not None and b"RNG" in err.value
    reg._free_error(err)


def test_param_constrain_satisfies_constraints(con):
    k = CON_DATA["K"]
    for u in points(con, count=5, scale=2.0):
        theta = con.param_constrain(u)
        scale, bounded = theta[0], theta[1]
        weights = theta[2 : 2 + k]
        L = theta[2 + k : 2 + k + k * k].reshape((k, k), order="F")  # names are column major
        Sigma = theta[2 + k + k * k : 6 + k + k * k].reshape((2, 2), order="F")
        tau = theta[-2:]
        assert scale > 0 and -1 < bounded < 2 and np.all(tau > 0)
        assert np.all(weights > 0) and weights.sum() == pytest.approx(1.0, abs=1e-12)
        assert np.allclose(np.triu(L, 1), 0.0)
        assert np.all(np.diag(L) > 0)
        assert np.allclose((L * L).sum(axis=1), 1.0)  # unit rows: L L' is a correlation matrix
        assert np.allclose(Sigma, Sigma.T) and np.all(np.linalg.eigvalsh(Sigma) > 0)
        assert scale == pytest.approx(math.exp(u[0]))
        assert bounded == pytest.approx(-1 + 3 / (1 + math.exp(-u[1])))
        assert np.allclose(tau, np.exp(u[-2:]))


@pytest.mark.parametrize("name", ["constrained", "regression_gq", "no_data"])
def test_param_unconstrain_round_trip(models, name):
    model = models[name]
    for u in points(model, count=4, scale=1.5):
        theta = model.param_constrain(u)
        back = model.param_unconstrain(theta)
        assert back.shape == (model.param_unc_num(),)
        np.testing.assert_allclose(back, u, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(model.param_constrain(back), theta, rtol=1e-12, atol=1e-12)


def _constrained_values() -> dict:
    corr = np.array([[1.0, 0.3, -0.2], [0.3, 1.0, 0.4], [-0.2, 0.4, 1.0]])
    return {
        "scale": 1.7,
        "bounded": 0.25,
        "weights": [0.2, 0.3, 0.5],
        "L": np.linalg.cholesky(corr),
        "Sigma": np.array([[2.0, 0.3], [0.3, 1.0]]),
        "tau": [0.5, 2.5],
    }


def _flatten(values: dict) -> np.ndarray:
    parts = [np.ravel(np.asarray(values[key], dtype=float), order="F") for key in values]
    return np.concatenate(parts)


def test_param_unconstrain_json(con, reg):
    values = _constrained_values()
    flat = _flatten(values)
    u_json = con.param_unconstrain_json(values)  # dict -> Stan JSON through stanio
    np.testing.assert_allclose(u_json, con.param_unconstrain(flat), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(con.param_constrain(u_json), flat, rtol=1e-10, atol=1e-12)
    # a JSON string works too, and extra variables are ignored
    text = json.dumps({"alpha": 1.5, "beta": -2.0, "sigma": 3.0, "unused": [1, 2]})
    np.testing.assert_allclose(reg.param_unconstrain_json(text), [1.5, -2.0, math.log(3.0)])


def test_param_unconstrain_errors(con, reg):
    with pytest.raises(RuntimeError, match="sigma|lb_free|greater than or equal"):
        reg.param_unconstrain(np.array([0.0, 0.0, -1.0]))  # sigma < 0
    with pytest.raises(RuntimeError, match="sigma"):
        reg.param_unconstrain_json({"alpha": 1.0, "beta": 0.0})  # sigma missing
    bad = _constrained_values()
    bad["weights"] = [0.5, 0.5, 0.5]  # not a simplex
    with pytest.raises(RuntimeError, match="simplex|sum"):
        con.param_unconstrain_json(bad)


def test_param_initialize(reg, con, nod):
    for model in (reg, con, nod):
        u = model.param_initialize(model.new_rng(3))
        assert u.shape == (model.param_unc_num(),)
        assert np.all((u >= -2.0) & (u < 2.0))  # uniform(-init_radius, init_radius) on the unconstrained scale
        assert np.isfinite(model.log_density(u))
    # same seed -> same point; different seeds -> different points
    a = reg.param_initialize(reg.new_rng(21))
    b = reg.param_initialize(reg.new_rng(21))
    c = reg.param_initialize(reg.new_rng(22))
    assert np.array_equal(a, b) and not np.allclose(a, c)
    # init_radius 0 -> the unconstrained origin
    assert np.array_equal(reg.param_initialize(reg.new_rng(1), init_radius=0.0), np.zeros(3))
    # narrower radius is honoured
    u = con.param_initialize(con.new_rng(8), init_radius=0.5)
    assert np.all(np.abs(u) <= 0.5)


def test_param_initialize_keeps_given_values(reg, con):
    for seed in (1, 2, 3):
        u = reg.param_initialize(reg.new_rng(seed), {"sigma": 2.5})
        theta = reg.param_constrain(u)
        assert theta[2] == pytest.approx(2.5, rel=1e-12)
        assert np.all(np.abs(u[:2]) < 2.0)
    u = reg.param_initialize(reg.new_rng(1), json.dumps({"alpha": -0.75}), init_radius=0.0)
    np.testing.assert_allclose(reg.param_constrain(u), [-0.75, 0.0, 1.0], atol=1e-12)
    given = {"weights": [0.2, 0.3, 0.5], "Sigma": [[2.0, 0.3], [0.3, 1.0]]}
    u = con.param_initialize(con.new_rng(4), given)
    theta = con.param_constrain(u)
    k = CON_DATA["K"]
    np.testing.assert_allclose(theta[2 : 2 + k], given["weights"], rtol=1e-10)
    np.testing.assert_allclose(theta[2 + k + k * k : 6 + k + k * k], [2.0, 0.3, 0.3, 1.0], rtol=1e-10)


def test_param_initialize_failure_raises(reg):
    with pytest.raises(RuntimeError):
        reg.param_initialize(reg.new_rng(1), {"sigma": -1.0}, max_tries=3)


# --------------------------------------------------------------------------------------------- log density


def _regression_lp(theta: np.ndarray) -> float:
    """Full log density (no constants dropped, no Jacobian) of regression_gq, by hand."""
    alpha, beta, sigma = theta
    x, y = np.array(REG_DATA["x"]), np.array(REG_DATA["y"])
    return float(
        stats.norm.logpdf(alpha, 0, 5)
        + stats.norm.logpdf(beta, 0, 5)
        + stats.expon.logpdf(sigma)
        + stats.norm.logpdf(y, alpha + beta * x, sigma).sum()
    )


def _no_data_lp(theta: np.ndarray) -> float:
    mu, s = theta[:2], theta[2]
    return float(stats.multivariate_normal.logpdf(mu, NO_DATA_MU, NO_DATA_COV) + stats.gamma.logpdf(s, a=2))


def test_log_density_regression_by_hand(reg):
    n = REG_DATA["N"]
    # propto drops exactly: N + 2 normal constants -log(sqrt(2 pi)) and the two prior -log(5) terms;
    # exponential(1) has no constant. sigma is a parameter, so -N log(sigma) stays.
    dropped = -(n + 2) * 0.5 * math.log(2 * math.pi) - 2 * math.log(5.0)
    for u in points(reg, count=4, scale=1.5):
        theta = reg.param_constrain(u)
        full = _regression_lp(theta)
        lp = {pj: reg.log_density(u, propto=pj[0], jacobian=pj[1]) for pj in PROPTO_JACOBIAN}
        assert lp[(False, False)] == pytest.approx(full, rel=1e-12)
        log_jacobian = u[2]  # sigma = exp(u): log |d sigma / du| = u = log(sigma)
        assert lp[(False, True)] - lp[(False, False)] == pytest.approx(log_jacobian, abs=1e-10)
        assert lp[(True, True)] - lp[(True, False)] == pytest.approx(log_jacobian, abs=1e-10)
        assert lp[(False, False)] - lp[(True, False)] == pytest.approx(dropped, abs=1e-9)
        assert lp[(False, True)] - lp[(True, True)] == pytest.approx(dropped, abs=1e-9)
    # default arguments are propto=True, jacobian=True (bridgestan's documented defaults)
    u = np.array([0.1, 0.2, 0.3])
    assert reg.log_density(u) == reg.log_density(u, propto=True, jacobian=True)


def test_log_density_no_data_by_hand(nod):
    dropped = -math.log(2 * math.pi) - 0.5 * math.log(np.linalg.det(NO_DATA_COV))  # gamma(2, 1): none
    for u in points(nod, count=4, scale=1.5):
        theta = nod.param_constrain(u)
        lp = {pj: nod.log_density(u, propto=pj[0], jacobian=pj[1]) for pj in PROPTO_JACOBIAN}
        assert lp[(False, False)] == pytest.approx(_no_data_lp(theta), rel=1e-12)
        assert lp[(False, True)] - lp[(False, False)] == pytest.approx(u[2], abs=1e-10)  # log(s)
        assert lp[(False, False)] - lp[(True, False)] == pytest.approx(dropped, abs=1e-10)


def test_log_density_constrained(con):
    """Full density against SciPy up to the LKJ normalising constant; propto drops a theta-free constant;
    the Jacobian moves exactly by the hand-computed terms of the scalar and vector bounds."""
    k = CON_DATA["K"]
    z = np.array(CON_DATA["z"])
    eta = 2.0
    lkj_constant, dropped, jac = [], [], []
    for u in points(con, count=5, scale=1.5):
        theta = con.param_constrain(u)
        scale, weights = theta[0], theta[2 : 2 + k]
        L = theta[2 + k : 2 + k + k * k].reshape((k, k), order="F")
        Sigma = theta[2 + k + k * k : 6 + k + k * k].reshape((2, 2), order="F")
        tau = theta[-2:]
        chol = scale * L
        known = (
            stats.lognorm.logpdf(scale, s=1.0)
            + stats.dirichlet.logpdf(weights, np.full(k, 2.0))
            + stats.wishart.logpdf(Sigma, df=4, scale=np.eye(2))
            + stats.expon.logpdf(tau).sum()
            + stats.multivariate_normal.logpdf(z, np.zeros(k), chol @ chol.T).sum()
        )
        # lkj_corr_cholesky(L | eta) = c(K, eta) + sum_{i=2..K} (K - i + 2 eta - 2) log L[i, i]
        lkj_kernel = sum((k - i + 2 * eta - 2) * math.log(L[i - 1, i - 1]) for i in range(2, k + 1))
        full = con.log_density(u, propto=False, jacobian=False)
        lkj_constant.append(full - known - lkj_kernel)
        dropped.append(full - con.log_density(u, propto=True, jacobian=False))
        jac.append(con.log_density(u, propto=False, jacobian=True) - full)
    assert np.ptp(lkj_constant) < 1e-9
    assert np.ptp(dropped) < 1e-9 and abs(dropped[0]) > 1.0  # propto matters here, and only by a constant

    # Jacobian: moving only the coordinates of scale (log), bounded (scaled logit) and tau (log) changes the
    # log-Jacobian by exactly the hand-computed amount; the other blocks' terms do not move.
    def scalar_terms(u):
        logistic = -np.logaddexp(0, -u[1]) - np.logaddexp(0, u[1])  # log(p) + log(1 - p)
        return u[0] + math.log(3.0) + logistic + u[-2] + u[-1]

    base = points(con, count=1, seed=5)[0]
    moved = base.copy()
    moved[[0, 1, -2, -1]] += [0.7, -1.1, 0.4, -0.3]
    jac_base = con.log_density(base, propto=False, jacobian=True) - con.log_density(base, propto=False, jacobian=False)
    jac_moved = con.log_density(moved, propto=False, jacobian=True) - con.log_density(moved, propto=False, jacobian=False)
    assert jac_moved - jac_base == pytest.approx(scalar_terms(moved) - scalar_terms(base), abs=1e-10)


def _central_gradient(f, u: np.ndarray, h: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(u)
    for i in range(u.size):
        step = np.zeros_like(u)
        step[i] = h
        grad[i] = (f(u + step) - f(u - step)) / (2 * h)
    return grad


@pytest.mark.parametrize("name", ["constrained", "regression_gq", "no_data"])
@pytest.mark.parametrize("propto,jacobian", PROPTO_JACOBIAN)
def test_log_density_gradient_vs_finite_differences(models, name, propto, jacobian):
    model = models[name]
    for u in points(model, count=2, scale=1.0):
        lp, grad = model.log_density_gradient(u, propto=propto, jacobian=jacobian)
        assert lp == pytest.approx(model.log_density(u, propto=propto, jacobian=jacobian), rel=1e-13, abs=1e-13)
        fd = _central_gradient(lambda t: model.log_density(t, propto=propto, jacobian=jacobian), u)
        np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(grad).max()))


@pytest.mark.parametrize("name", ["constrained", "regression_gq", "no_data"])
@pytest.mark.parametrize("propto,jacobian", [(True, True), (False, False)])
def test_log_density_hessian_vs_finite_differences(models, name, propto, jacobian):
    model = models[name]
    u = points(model, count=1, seed=17)[0]
    lp, grad, hess = model.log_density_hessian(u, propto=propto, jacobian=jacobian)
    d = model.param_unc_num()
    assert hess.shape == (d, d)
    lp2, grad2 = model.log_density_gradient(u, propto=propto, jacobian=jacobian)
    assert lp == pytest.approx(lp2, rel=1e-13, abs=1e-13)
    np.testing.assert_allclose(grad, grad2, rtol=1e-12, atol=1e-12)
    h = 1e-5
    fd = np.zeros((d, d))
    for j in range(d):
        step = np.zeros(d)
        step[j] = h
        gp = model.log_density_gradient(u + step, propto=propto, jacobian=jacobian)[1]
        gm = model.log_density_gradient(u - step, propto=propto, jacobian=jacobian)[1]
        fd[:, j] = (gp - gm) / (2 * h)
    scale = max(1.0, np.abs(fd).max())
    np.testing.assert_allclose(hess, hess.T, atol=1e-12 * scale)
    np.testing.assert_allclose(hess, fd, rtol=1e-4, atol=1e-5 * scale)


def test_log_density_hessian_exact_for_no_data(nod):
    """no_data is Gaussian in mu and gamma(2, 1) in s = exp(u): with the Jacobian log p = 2u - e^u + const,
    so the Hessian is block-diagonal with -Sigma^{-1} and -exp(u)."""
    u = np.array([0.3, -0.4, 0.5])
    _, _, hess = nod.log_density_hessian(u, propto=False, jacobian=True)
    expected = np.zeros((3, 3))
    expected[:2, :2] = -np.linalg.inv(NO_DATA_COV)
    expected[2, 2] = -math.exp(u[2])
    np.testing.assert_allclose(hess, expected, atol=1e-6)


@pytest.mark.parametrize("name", ["constrained", "regression_gq", "no_data"])
def test_log_density_hessian_vector_product(models, name):
    model = models[name]
    rng = np.random.default_rng(23)
    u = points(model, count=1, seed=29)[0]
    _, _, hess = model.log_density_hessian(u, propto=False, jacobian=True)
    scale = max(1.0, np.abs(hess).max())
    for _ in range(3):
        v = rng.normal(size=model.param_unc_num())
        lp, hvp = model.log_density_hessian_vector_product(u, v, propto=False, jacobian=True)
        assert lp == pytest.approx(model.log_density(u, propto=False, jacobian=True), rel=1e-13, abs=1e-13)
        np.testing.assert_allclose(hvp, hess @ v, rtol=1e-4, atol=1e-5 * scale * np.abs(v).sum())
    _, zero = model.log_density_hessian_vector_product(u, np.zeros(model.param_unc_num()))
    assert np.array_equal(zero, np.zeros(model.param_unc_num()))


# --------------------------------------------------------------------------------------------- RNG


def test_new_rng_reproducible_gq(reg):
    u = np.array([0.5, 1.5, math.log(0.9)])

    def draws(rng, count=5):
        return np.array([reg.param_constrain(u, include_gq=True, rng=rng)[3] for _ in range(count)])

    a, b, c = draws(reg.new_rng(42)), draws(reg.new_rng(42)), draws(reg.new_rng(43))
    assert np.array_equal(a, b)  # same seed -> same sequence of gq draws
    assert not np.allclose(a, c)  # different seed -> different draws
    assert len(set(a.tolist())) == a.size  # one RNG advances between calls
    # the draws follow normal(alpha + 1.5 beta, sigma)
    many = draws(reg.new_rng(7), count=2000)
    assert abs(many.mean() - (0.5 + 1.5 * 1.5)) < 5 * 0.9 / math.sqrt(many.size)
    assert many.std() == pytest.approx(0.9, rel=0.1)


# --------------------------------------------------------------------------------------------- errors


def test_bad_theta_length_raises(reg, con):
    for model in (reg, con):
        wrong = np.zeros(model.param_unc_num() + 1)
        with pytest.raises((ValueError, TypeError, ctypes.ArgumentError)):
            model.log_density(wrong)
        with pytest.raises((ValueError, TypeError, ctypes.ArgumentError)):
            model.log_density_gradient(wrong)
        with pytest.raises((ValueError, TypeError, ctypes.ArgumentError)):
            model.log_density_hessian(wrong)
        with pytest.raises((ValueError, TypeError, ctypes.ArgumentError)):
            model.log_density_hessian_vector_product(wrong, wrong)
        with pytest.raises((ValueError, TypeError, ctypes.ArgumentError)):
            model.param_constrain(wrong)


def test_log_density_domain_error_raises_with_stan_message(reg):
    with pytest.raises(RuntimeError, match=r"bs_log_density.*(nan|NaN|not a number)") as info:
        reg.log_density(np.array([np.nan, 0.0, 0.0]))
    assert "line" in str(info.value)  # Stan's location of the failing statement
    with pytest.raises(RuntimeError, match="bs_log_density_gradient"):
        reg.log_density_gradient(np.array([np.nan, 0.0, 0.0]))


def test_data_violating_constraint_raises(libs, stan_model):
    bad = dict(REG_DATA, N=-1, x=[], y=[])
    with pytest.raises(RuntimeError, match=r"N is -1, but must be greater than or equal to 0") as info:
        bridgestan.StanModel(libs["regression_gq"], json.dumps(bad), warn=False)
    assert "regression_gq.stan', line" in str(info.value)
    with pytest.raises(RuntimeError, match=r"K is 1, but must be greater than or equal to 2"):
        bridgestan.StanModel(libs["constrained"], json.dumps(dict(CON_DATA, K=1)), warn=False)
    from stan_dp.stan.data import DataError

    # the package names the variable and the constraint but withholds the value (it may be a private row's)
    with pytest.raises(DataError, match=r"N \(declared [^)]*\) must be greater than or equal to its declared bound "
                                         r"\(values and positions withheld") as info:
        stan_model("regression_gq").bridgestan(bad)
    assert "-1" not in str(info.value)


def test_missing_or_misshapen_data_raises(libs):
    no_n = {k: v for k, v in REG_DATA.items() if k != "N"}
    with pytest.raises(RuntimeError, match=r"variable does not exist.*variable name=N"):
        bridgestan.StanModel(libs["regression_gq"], json.dumps(no_n), warn=False)
    # a missing container is reported by Stan as found with no dimensions
    no_y = {k: v for k, v in REG_DATA.items() if k != "y"}
    with pytest.raises(RuntimeError, match=r"variable name=y; dims declared=\(20\); dims found=\(\)"):
        bridgestan.StanModel(libs["regression_gq"], json.dumps(no_y), warn=False)
    short = dict(REG_DATA, x=REG_DATA["x"][:-1])
    with pytest.raises(RuntimeError, match=r"mismatch in dimension.*variable name=x"):
        bridgestan.StanModel(libs["regression_gq"], json.dumps(short), warn=False)
    with pytest.raises(RuntimeError, match="JSON"):
        bridgestan.StanModel(libs["regression_gq"], '{"N": 3,', warn=False)


def test_data_from_json_file(libs, tmp_path):
    path = tmp_path / "reg.json"
    path.write_text(json.dumps(REG_DATA))
    from_file = bridgestan.StanModel(libs["regression_gq"], str(path), warn=False)
    from_text = bridgestan.StanModel(libs["regression_gq"], json.dumps(REG_DATA), warn=False)
    u = np.array([0.1, 0.2, 0.3])
    assert from_file.log_density(u) == from_text.log_density(u)
