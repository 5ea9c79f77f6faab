"""algorithm="dp-glm": the score and curvature mechanism (coordinates, sensitivities, noise), the Newton points,
the plan (bounds, shares, refusals), the price, and (slow) the noise-aware program and a whole run."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from stan_dp.likelihood import GLMSpec, RegressionTerms
from stan_dp.models.reference_models import LogisticRegressionModel, PoissonRegressionModel
from stan_dp.privacy.glm_statistics import (GLMBox, curvature_entry_weights, glm_design, glm_score_curvature,
                                            release_glm_statistics)
from stan_dp.methods.dp_glm.glm_release import GLMPlan, glm_price, newton_point, plan_glm
from stan_dp.run.plan import PublicFacts, plan_run


def _logistic(n=800, k=2, seed=0, coef=(0.4, 1.0, -0.7)):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 3.0, size=(n, k))
    eta = coef[0] + x @ np.asarray(coef[1:k + 1]) * 0.5
    return LogisticRegressionModel(x, (rng.uniform(size=n) < 1 / (1 + np.exp(-eta))).astype(int), prior_sd=2.5)


def _pair_gap(box, v1, y1, v2, y2, theta):
    """|| statistic(row 1) - statistic(row 2) || for the score and (weighted upper triangle) curvature."""
    g1, h1 = glm_score_curvature(v1[None, :], np.array([y1]), theta, box)
    g2, h2 = glm_score_curvature(v2[None, :], np.array([y2]), theta, box)
    iu = np.triu_indices(theta.size)
    w = curvature_entry_weights(theta.size)
    return np.linalg.norm(g1 - g2), np.linalg.norm(w * (h1[iu] - h2[iu]))


@pytest.mark.parametrize("family, y_max", [("logistic", 1.0), ("poisson", 7.0)])
def test_sensitivities_bound_every_pair_of_rows_and_are_attained(family, y_max):
    """For rows anywhere in the box (covariates pushed to its faces) and any outcome, at random points theta, the
    change of the score never exceeds 2 a B and of the curvature (weighted upper triangle = Frobenius norm) never
    sqrt(2) w B^2. Both bounds are reached: the score's in the limit of two rows at one corner, one coordinate
    apart, with theta sending their means to opposite ends (within 1 %); the curvature's by two orthogonal corner
    rows at full weight (exactly, three covariates)."""
    box = GLMBox(lower=np.array([-2.0, 0.0, 1.0]), upper=np.array([2.0, 5.0, 3.0]), intercept=True, family=family,
                 y_max=y_max)
    rng = np.random.default_rng(1)
    for _ in range(3000):
        theta = rng.normal(0, 1.5, box.dim)
        x = np.where(rng.random((2, 3)) < 0.7, np.where(rng.random((2, 3)) < 0.5, box.lower, box.upper),
                     rng.uniform(box.lower, box.upper, (2, 3)))
        v = glm_design(x, box)
        ys = rng.integers(0, 2, 2) if family == "logistic" else rng.choice([0.0, y_max], 2)
        gap_g, gap_h = _pair_gap(box, v[0], ys[0], v[1], ys[1], theta)
        assert gap_g <= box.score_sensitivity * (1 + 1e-12)
        assert gap_h <= box.curvature_sensitivity * (1 + 1e-12)
    top = 1.0 if family == "logistic" else y_max
    v1, v2 = np.ones(4), np.array([1.0, 1.0, 1.0, 0.99])  # one corner, the last coordinate 0.01 apart
    a = -2 * 40.0 / 0.01  # theta . v1 = -40, theta . v2 = +40
    theta = np.array([-40.0 - a, 0.0, 0.0, a])
    gap_g, _ = _pair_gap(box, v1, top, v2, 0.0, theta)
    assert gap_g >= 0.99 * box.score_sensitivity
    at_full_weight = np.zeros(4) if family == "logistic" else np.array([math.log(y_max) + 1, 0.0, 0.0, 0.0])
    _, gap_h = _pair_gap(box, np.ones(4), 0.0, np.array([1.0, -1.0, -1.0, 1.0]), 0.0, at_full_weight)
    assert gap_h == pytest.approx(box.curvature_sensitivity, rel=1e-12)


def test_the_design_maps_the_box_to_the_unit_cube_and_the_map_back_is_exact():
    """Covariates clamped to the box (a NaN to its centre) map into [-1, 1] with the intercept first, B =
    sqrt(1 + K); the user's coefficients are to_user() times the release's, so both give one linear predictor."""
    box = GLMBox(lower=np.array([0.0, 10.0]), upper=np.array([4.0, 20.0]), intercept=True, family="logistic")
    x = np.array([[0.0, 20.0], [5.0, 15.0], [np.nan, 9.0]])
    v = glm_design(x, box)
    assert np.allclose(v, [[1, -1, 1], [1, 1, 0], [1, 0, -1]])
    assert box.design_bound == pytest.approx(math.sqrt(3))
    theta = np.array([0.3, -0.5, 1.2])
    user = box.to_user() @ theta
    clamped = np.clip(np.nan_to_num(x, nan=2.0), box.lower, box.upper)
    assert np.allclose(v @ theta, user[0] + clamped @ user[1:])


def test_the_release_adds_the_planned_noise_to_each_entry():
    """Over 3,000 releases on fixed rows the score's noise sd is tau 2 a B per coordinate, the curvature's
    diagonal tau sqrt(2) w B^2 and its off-diagonal entries that over sqrt(2) (within 5 %: 3,000 draws give a
    relative sd of about 1.3 %), and the released curvature is symmetric."""
    model = _logistic(n=50)
    box = GLMBox(lower=np.array([-1.0, -1.0]), upper=np.array([3.0, 3.0]), intercept=True, family="logistic")
    design = glm_design(model.X, box)
    theta = np.array([0.1, 0.2, -0.3])
    exact_g, exact_h = glm_score_curvature(design, model.y, theta, box)
    rng = np.random.default_rng(2)
    releases = [release_glm_statistics(design, model.y, theta, box, tau_score=0.5, tau_curvature=2.0, rng=rng)
                for _ in range(3000)]
    g = np.array([r.score for r in releases]) - exact_g
    h = np.array([r.curvature for r in releases]) - exact_h[np.triu_indices(3)]
    assert np.allclose(g.std(0), 0.5 * box.score_sensitivity, rtol=0.05)
    expected = 2.0 * box.curvature_sensitivity / curvature_entry_weights(3)
    assert np.allclose(h.std(0), expected, rtol=0.05)
    assert np.allclose(releases[0].curvature_matrix(), releases[0].curvature_matrix().T)


def test_the_first_newton_point_moves_the_intercept_to_the_outcomes_mean():
    """With no noise, the first point from the public start puts the intercept where the outcome's mean is and
    takes a Newton step from there: closer to the mode than a plain Newton step from 0, and the next point lands
    on the mode within 0.05 (logistic and Poisson alike)."""
    for family, model in (("logistic", _logistic(n=3000, seed=3)),
                          ("poisson", PoissonRegressionModel.simulate(3000, 2, seed=4))):
        lo, hi = model.X.min(0) - 0.1, model.X.max(0) + 0.1
        box = GLMBox(lower=lo, upper=hi, intercept=True, family=family, y_max=float(model.y.max()) + 1)
        design = glm_design(model.X, box)
        mode = np.zeros(box.dim)
        for _ in range(50):  # the exact mode in the release's coordinates
            g, h = glm_score_curvature(design, model.y, mode, box)
            mode = mode + np.linalg.solve(h, g)
        theta = np.zeros(box.dim)
        points = []
        for _ in range(2):
            release = release_glm_statistics(design, model.y, theta, box, tau_score=0.0, tau_curvature=0.0,
                                             rng=np.random.default_rng(0))
            theta = newton_point(release, box, model.n_rows)
            points.append(theta)
        assert np.max(np.abs(points[1] - mode)) < 0.05, family


def _spec(family="logistic", k=2, x_bounds=None, y_bounds=None):
    return GLMSpec(family=family, n_covariates=k, column_names=tuple(f"x{j}" for j in range(k)) + ("y",),
                   outcome_name="y", terms=RegressionTerms(intercept=("alpha",), slopes=(("beta", True),)),
                   x_bounds=x_bounds, y_bounds=y_bounds)


def test_the_plan_spends_the_whole_budget_on_its_releases_in_the_stated_shares():
    """The plan's releases compose to the budget (one accounting), the noise multipliers follow the shares
    (tau^-2 proportional to each release's share of rho), and the description names the bounds' source."""
    spec = _spec(x_bounds=(np.array([-1.0, 0.0]), np.array([1.0, 4.0])))
    plan = plan_glm(1000, 3, glm=spec, epsilon=3.0, delta=1e-5)
    p = plan.privacy.parameters
    total = 2 / p["tau_point_score"] ** 2 + 1 / p["tau_score"] ** 2 + 1 / p["tau_curvature"] ** 2
    shares = {"anchor": 2 / p["tau_point_score"] ** 2 / total, "curvature": 1 / p["tau_curvature"] ** 2 / total}
    assert shares["anchor"] == pytest.approx(0.15, rel=1e-6)
    assert shares["curvature"] == pytest.approx(0.35, rel=1e-6)
    assert float(plan.privacy.report().epsilon) == pytest.approx(3.0, rel=1e-3)
    assert "declared bounds" in plan.bounds_source and "declared bounds" in str(plan)
    assert plan.describe()["score_noise_sd"] == pytest.approx(p["tau_score"] * plan.box.score_sensitivity)


def test_refusals_name_the_problem():
    """No bounds, a Poisson count without a cap, a program that is no GLM, shares that leave nothing for the
    score and chain-tuning options: each refused in words before any row is read."""
    with pytest.raises(ValueError, match="needs public bounds for every covariate"):
        plan_glm(500, 3, glm=_spec(), epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="public cap on the count"):
        plan_glm(500, 3, glm=_spec("poisson"), epsilon=1.0, delta=1e-5, x_bounds=(0, 1))
    with pytest.raises(ValueError, match="logistic or Poisson regression"):
        plan_run(500, 3, algorithm="dp-glm", epsilon=1.0, delta=1e-5, facts=PublicFacts(glm=None))
    with pytest.raises(ValueError, match="must leave a share"):
        plan_glm(500, 3, glm=_spec(), epsilon=1.0, delta=1e-5, x_bounds=(0, 1), anchor_share=0.6,
                 curvature_share=0.5)
    with pytest.raises(ValueError, match="step_size"):
        plan_run(500, 3, algorithm="dp-glm", epsilon=1.0, delta=1e-5, facts=PublicFacts(glm=_spec()),
                 x_bounds=(0, 1), step_size=0.1)
    plan = plan_run(500, 3, algorithm="dp-glm", epsilon=1.0, delta=1e-5, facts=PublicFacts(glm=_spec("poisson")),
                    x_bounds=(0, 1), y_bounds=(0, 20))
    assert isinstance(plan, GLMPlan) and plan.box.y_max == 20.0


def test_newton_points_and_the_price_sentence_follow_the_family():
    """Without newton_points a logistic plan takes one Newton point and a Poisson plan three (a given number wins);
    a Poisson plan's price sentence says what it assumes about the mean and how far it fared off (a logistic one
    does not)."""
    logistic = plan_glm(500, 3, glm=_spec(), epsilon=3.0, delta=1e-5, x_bounds=(0, 1))
    poisson = plan_glm(500, 3, glm=_spec("poisson"), epsilon=3.0, delta=1e-5, x_bounds=(0, 1), y_bounds=(0, 20))
    assert (logistic.points, poisson.points) == (1, 3)
    assert plan_glm(500, 3, glm=_spec("poisson"), epsilon=3.0, delta=1e-5, x_bounds=(0, 1), y_bounds=(0, 20),
                    newton_points=1).points == 1
    assert "a quarter of the count's cap" in str(poisson) and "mean_cap" in str(poisson)
    assert "count's cap" not in str(logistic)


def test_the_price_is_public_and_falls_with_the_budget():
    """The expected error depends on N, the box and the noise only; it falls as epsilon grows and as N grows."""
    spec = _spec(x_bounds=(np.array([-1.0, 0.0]), np.array([1.0, 4.0])))
    prices = [plan_glm(1000, 3, glm=spec, epsilon=e, delta=1e-5).price for e in (1, 3, 10)]
    assert prices[0] > prices[1] > prices[2] > 0
    box = plan_glm(1000, 3, glm=spec, epsilon=3, delta=1e-5).box
    assert glm_price(4000, box, 10.0) < glm_price(1000, box, 10.0)


@pytest.mark.slow
@pytest.mark.stan
def test_a_logistic_run_converges_covers_and_says_what_it_released():
    """dp-glm on 3,000 simulated logistic rows at epsilon 10: the released draws converge (R-hat <= 1.01, bulk and
    tail ESS >= 400), every draw is finite, each coefficient's 90 % interval holds the non-private posterior mean
    (at this budget the intervals are at most a few reference sds wide), and the attrs carry the releases, the
    program, the sampling record and the price."""
    from stan_dp.models.numpy_reference import reference_draws
    from stan_dp.run.pipeline import sample_private

    model = _logistic(n=3000, seed=5)
    ref = reference_draws(model, chains=4, draws=1000, seed=0).reshape(-1, model.dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="dp-glm", epsilon=10.0, delta=1e-5, seed=6, show_progress=False,
                             x_bounds=(-1.0, 3.0))
    verdict = json.loads(fit.attrs["convergence"])
    assert verdict["converged"] and verdict["max_rhat"] <= 1.01 and verdict["min_ess_bulk"] >= 400
    draws = np.concatenate([np.asarray(fit.posterior["alpha"]).reshape(-1, 1),
                            np.asarray(fit.posterior["beta"]).reshape(-1, 2)], axis=1)
    assert np.all(np.isfinite(draws))
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    assert np.all((lo <= ref.mean(0)) & (ref.mean(0) <= hi))
    assert np.all(draws.std(0) < 4 * ref.std(0))
    assert len(json.loads(fit.attrs["glm_releases"])) == 2
    assert "dpglm_g ~ multi_normal" in fit.attrs["noise_aware_program"]
    assert json.loads(fit.attrs["posterior_sampling"])["converged"] == 1
    assert fit.attrs["expected_error_sd"] > 0


def test_a_unit_of_k_rows_moves_the_statistics_by_at_most_k_rows_bounds():
    """With a privacy unit of at most k rows the box's sensitivities are k times a row's, and replacing a random
    unit (1..k rows anywhere in the box, any outcomes, random points) by another never moves the summed score or
    curvature further; the summed statistics of the kept rows are what the mechanism sees."""
    k = 3
    box = GLMBox(lower=np.array([-1.0, 0.0]), upper=np.array([1.0, 2.0]), intercept=True, family="poisson",
                 y_max=4.0, rows_per_unit=k)
    row = GLMBox(lower=box.lower, upper=box.upper, intercept=True, family="poisson", y_max=4.0)
    assert box.score_sensitivity == pytest.approx(k * row.score_sensitivity)
    assert box.curvature_sensitivity == pytest.approx(k * row.curvature_sensitivity)
    rng = np.random.default_rng(7)
    w = curvature_entry_weights(3)
    iu = np.triu_indices(3)
    for _ in range(2000):
        theta = rng.normal(0, 1.0, 3)
        units = []
        for _ in range(2):
            size = rng.integers(1, k + 1)
            x = np.where(rng.random((size, 2)) < 0.6, np.where(rng.random((size, 2)) < 0.5, box.lower, box.upper),
                         rng.uniform(box.lower, box.upper, (size, 2)))
            units.append(glm_score_curvature(glm_design(x, box), rng.choice([0.0, 4.0], size), theta, box))
        (g1, h1), (g2, h2) = units
        assert np.linalg.norm(g1 - g2) <= box.score_sensitivity * (1 + 1e-12)
        assert np.linalg.norm(w * (h1[iu] - h2[iu])) <= box.curvature_sensitivity * (1 + 1e-12)
