"""algorithm="dp-ssp": the moment-matrix mechanism, its sensitivity and noise, the noise-aware posterior, the
program recogniser, the refusals and (slow) one Stan-engine run."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from stan_dp.models.reference_models import LinearRegressionModel
from stan_dp.privacy.moments import (box_centre_half_width, entry_weights, linear_entries, moment_entries,
                                     moment_sensitivity, release_moments, worst_case_pair)
from stan_dp.run.plan import PublicFacts, plan_run
from stan_dp.methods.dp_ssp.ssp import SSPPlan, choose_linear_weight, plan_ssp, ssp_floor

MODELS = Path(__file__).resolve().parents[2] / "stan_models"


def _model(n=400, k=1, seed=0, sigma=0.8):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, size=(n, k))
    y = 0.3 + x @ np.linspace(0.5, -0.5, k) + sigma * rng.standard_normal(n)
    return LinearRegressionModel(x, y, prior_sd=10.0, sigma_prior_sd=10.0)


@pytest.mark.parametrize("half, weight", [([4.0, 4.0], 1.0), ([3.5, 4.6], 1.0), ([1.0, 2.0, 3.0], 1.0), ([2.0], 1.0),
                                          ([4.0, 4.0], 2.0), ([3.5, 4.6], 2.5), ([1.0, 2.0, 3.0], 1.5),
                                          ([0.5, 0.5], 1.0), ([0.3, 0.2, 0.4], 2.0), ([0.5], 1.5),
                                          ([0.2] * 5, 2.0), ([1.0] * 6, 1.0)])
def test_sensitivity_bounds_every_pair_and_is_attained(half, weight):
    """Delta_w from the bounds (sums weighted w against the products) is never exceeded by random pairs of rows in
    the box (with coordinates pushed to the faces, where the maximum lies) and the worst-case pair reaches it
    within 3 % (10 % with one coordinate)."""
    delta = moment_sensitivity(half, weight)
    m = np.asarray(half)
    weights = entry_weights(m.size, weight)
    rng = np.random.default_rng(1)
    z = rng.uniform(-1, 1, (5000, m.size)) * m
    w = rng.uniform(-1, 1, (5000, m.size)) * m
    z = np.where(rng.random(z.shape) < 0.5, np.sign(z) * m, z)
    gaps = np.linalg.norm(weights * (moment_entries(z) - moment_entries(w)), axis=1)
    assert gaps.max() <= delta * (1 + 1e-12)
    zw, ww, attained = worst_case_pair(half, weight)
    assert np.all(np.abs(zw) <= m) and np.all(np.abs(ww) <= m)
    assert attained <= delta * (1 + 1e-12) and attained >= (0.97 if m.size > 1 else 0.9) * delta


def test_small_boxes_subtract_the_slack_and_ten_covariates_are_bounded():
    """On a box with sum m_j^2 below w^2 every pair has z.u + w^2 >= w^2 - sum m_j^2, so Delta_w^2 is the vertex
    maximum minus that slack squared (here about 10x smaller than without it, and attained); with ten covariates
    and the outcome (p = 11, still enumerated exactly) random pairs pushed to the faces never exceed Delta_w."""
    from stan_dp.privacy.moments import MAX_EXACT_COORDINATES

    import itertools

    half = np.full(4, 0.2)
    w = 2.0
    m2 = half**2
    without = 0.0  # the vertex maximum of Phi_w, by brute force over (a_j, b_j) in {0, m_j^2}^2
    for states in itertools.product(range(4), repeat=half.size):
        a = np.array([m2[j] if s in (1, 3) else 0.0 for j, s in enumerate(states)])
        b = np.array([m2[j] if s in (2, 3) else 0.0 for j, s in enumerate(states)])
        phi = w**2 * (a.sum() + b.sum()) + (a.sum() ** 2 + b.sum() ** 2) / 2 + ((a - b) ** 2).sum() / 2 + w**4
        without = max(without, phi)
    delta = moment_sensitivity(half, w)
    assert delta**2 == pytest.approx(without - (w**2 - m2.sum()) ** 2, rel=1e-9)
    assert delta**2 < 0.2 * without
    assert worst_case_pair(half, w)[2] == pytest.approx(delta, rel=1e-9)
    m = np.linspace(0.5, 2.0, 11)
    assert m.size <= MAX_EXACT_COORDINATES
    delta = moment_sensitivity(m, 1.5)
    weights = entry_weights(m.size, 1.5)
    rng = np.random.default_rng(3)
    z = np.sign(rng.uniform(-1, 1, (4000, m.size))) * m
    u = np.where(rng.random((4000, m.size)) < 0.7, np.sign(rng.uniform(-1, 1, (4000, m.size))) * m, 0.0)
    gaps = np.linalg.norm(weights * (moment_entries(z) - moment_entries(u)), axis=1)
    assert gaps.max() <= delta * (1 + 1e-12) and gaps.max() > 0.8 * delta


def test_the_weighted_entries_are_the_sums():
    """The weight falls on the p sums z_j (the first row of the moment matrix) and on nothing else."""
    z = np.array([2.0, 3.0, 5.0])
    mask = linear_entries(3)
    assert np.array_equal(moment_entries(z)[mask], z)
    assert np.array_equal(entry_weights(3, 2.0), np.where(mask, 2.0, 1.0))


def test_sensitivity_one_coordinate_closed_form():
    """With one coordinate (intercept-only model) the vertex bound is m^2 + 1; the interior pair z = m,
    w = -1/m reaches sqrt((m + 1/m)^2 (1 + (m - 1/m)^2)), below it."""
    for m in (1.0, 2.5, 4.0):
        assert moment_sensitivity([m]) == pytest.approx(m**2 + 1)
        inner = math.sqrt((m + 1 / m) ** 2 * (1 + (m - 1 / m) ** 2))
        direct = np.linalg.norm(moment_entries(np.array([m])) - moment_entries(np.array([-1 / m])))
        assert direct == pytest.approx(inner) and inner <= m**2 + 1 + 1e-12


def test_release_clamps_centres_and_has_the_planned_noise():
    """The released entries are the exact sums of the clamped, centred rows plus noise of the planned sd
    (mean within 4 standard errors, sd within 5 % over 4000 releases); a row outside the box counts as clamped."""
    rng = np.random.default_rng(2)
    z = np.column_stack([rng.uniform(-1, 3, 50), rng.uniform(-2, 6, 50)])
    z[0] = [100.0, -100.0]
    lo, hi = np.array([-1.0, -2.0]), np.array([3.0, 6.0])
    centre, _ = box_centre_half_width(lo, hi)
    exact = moment_entries(np.clip(z, lo, hi) - centre).sum(axis=0)
    draws = np.array([release_moments(z, lo, hi, 3.0, rng) for _ in range(4000)])
    assert np.all(np.abs(draws.mean(0) - exact) < 4 * 3.0 / math.sqrt(4000))
    assert np.allclose(draws.std(0), 3.0, rtol=0.05)
    # weighted sums: their noise sd is 3 / w, the products keep 3
    sds = 3.0 / entry_weights(2, 2.0)
    draws = np.array([release_moments(z, lo, hi, 3.0, rng, linear_weight=2.0) for _ in range(4000)])
    assert np.all(np.abs(draws.mean(0) - exact) < 4 * sds / math.sqrt(4000))
    assert np.allclose(draws.std(0), sds, rtol=0.05)


def test_noise_calibration_matches_the_gaussian_closed_form():
    """The plan's noise multiplier tau is the one Gaussian mechanism that spends the budget: the closed-form
    delta(epsilon) of a Gaussian with mu = 1/tau equals the requested delta (within 2 %), and the noise sd is
    tau times the (weighted) sensitivity from the bounds on the products and that over w on the sums."""
    model = _model()
    plan = plan_ssp(model.n_rows, model.dim, linear=model.linear_spec, epsilon=1.0, delta=1e-5,
                    x_bounds=(-2, 2), y_bounds=(-4, 4))
    tau = plan.privacy.parameters["tau_moments"]
    mu = 1.0 / tau
    delta = norm.cdf(-1.0 / mu + mu / 2) - math.exp(1.0) * norm.cdf(-1.0 / mu - mu / 2)
    assert delta == pytest.approx(1e-5, rel=0.02)
    assert plan.noise_sd == pytest.approx(tau * moment_sensitivity([2.0, 4.0], plan.linear_weight))
    assert plan.entry_noise_sds == pytest.approx(plan.noise_sd / entry_weights(2, plan.linear_weight))
    fixed = plan_ssp(model.n_rows, model.dim, linear=model.linear_spec, epsilon=1.0, delta=1e-5,
                     x_bounds=(-2, 2), y_bounds=(-4, 4), linear_weight=1)
    assert fixed.noise_sd == pytest.approx(tau * moment_sensitivity([2.0, 4.0]))
    assert fixed.entry_noise_sds == pytest.approx(np.full(5, fixed.noise_sd))


def test_the_weight_of_the_sums_minimises_the_public_price():
    """choose_linear_weight depends on the bounds alone (not on N) and no weight of its grid gives a lower price;
    on boxes a few units wide it weights the sums (their noise reaches every parameter through an off-centre
    outcome mean), on a unit box the constant w^4 of the bound makes weighting a loss and it keeps 1."""
    lo, hi = np.array([-4.0, -4.0]), np.array([4.0, 4.0])
    w = choose_linear_weight(434, lo, hi)
    assert w == choose_linear_weight(50_000, lo, hi) and w > 1

    def price(weight):
        delta = moment_sensitivity([4.0, 4.0], weight)
        return ssp_floor(434, lo, hi, delta, delta / weight).max_error

    assert all(price(w) <= price(v) + 1e-12 for v in (1.0, 1.5, 2.5, 3.0, 4.0))
    assert choose_linear_weight(500, np.array([-1.0, -1.0]), np.array([1.0, 1.0])) == 1.0


def test_refusals_name_the_problem():
    """No bounds: the error names the variables that need them; a likelihood that is not linear: dp-ssp refuses
    in words; auto without bounds falls back to the kernels and says why in its reason."""
    model = _model()
    with pytest.raises(ValueError, match=r"needs public bounds for x\[1\], y"):
        plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec))
    with pytest.raises(ValueError, match="normal linear regression"):
        plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=1, delta=1e-5, facts=PublicFacts(linear=None))
    with pytest.raises(ValueError, match="x_bounds must be"):
        plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec),
                 x_bounds=(3, 1), y_bounds=(-1, 1))
    with pytest.raises(ValueError, match="linear_weight must be a number >= 1"):
        plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec),
                 x_bounds=(-3, 3), y_bounds=(-1, 1), linear_weight=0.5)
    with pytest.raises(ValueError, match=r"samples its own posterior with NUTS; 'step_size', 'metric' do not apply"):
        plan_run(model.n_rows, model.dim, algorithm="dp-ssp", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec),
                 x_bounds=(-3, 3), y_bounds=(-1, 1), step_size=0.1, metric="dense")
    plan = plan_run(model.n_rows, model.dim, algorithm="auto", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec),
                    grad_clip=5.0, quiet=True)
    assert not isinstance(plan, SSPPlan)
    assert "dp-ssp not used" in plan.auto.reason and "needs public bounds" in plan.auto.reason
    plan = plan_run(model.n_rows, model.dim, algorithm="auto", epsilon=1, delta=1e-5, facts=PublicFacts(linear=model.linear_spec),
                    x_bounds=(-2, 2), y_bounds=(-4, 4), quiet=True)
    assert isinstance(plan, SSPPlan) and "normal linear regression" in plan.auto.reason
    assert "reference sds" in plan.auto.reason


def test_floor_is_public_and_falls_with_epsilon():
    """The price in advance uses N, the bounds and the noise sd only; it falls as epsilon grows and is about the
    noise-to-posterior-sd ratio of the slope (kidiq-like bounds at epsilon 1: between 5 and 10 sds)."""
    model = _model(n=434)
    floors = [plan_ssp(434, model.dim, linear=model.linear_spec, epsilon=e, delta=1e-5, x_bounds=(-4, 4),
                       y_bounds=(-4, 4)).floor.max_error for e in (1, 3, 10)]
    assert floors[0] > floors[1] > floors[2]
    assert 5 < floors[0] < 10
    assert ssp_floor(434, np.array([-4, -4]), np.array([4, 4]), 1.0).width_ratio > 1


def test_a_loosely_pinned_sigma_is_said_before_and_after_the_run():
    """When the price's ratio for sigma is 4 or more, the price sentence (auto's reason, advise, attrs) says that
    the release pins sigma only loosely, and the finished run warns with the same words, naming no direction (a
    run's sigma may land high or low); at a large budget neither appears. The warning follows from the plan's price
    alone (not from the draws), so each run is one short round of the noise-aware posterior's sampler (a tiny
    time_cap stops it after its first round, 40 + 20 iterations per chain). The runs use the bundled program with
    declared bounds (x in [-2, 2], y in [-6, 6]; its posterior program is the one advise's test compiles); the
    price is planned at the same rows, covariates and bounds."""
    from stan_dp import DPStanModel

    n = 300
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.5, 1.5, size=(n, 1))
    y = 0.3 + 0.5 * x[:, 0] + 0.8 * rng.standard_normal(n)
    planned = LinearRegressionModel(x, y, prior_sd=10.0, sigma_prior_sd=10.0)
    bounds = {"x_bounds": (-2, 2), "y_bounds": (-6, 6)}
    loose = plan_ssp(n, planned.dim, linear=planned.linear_spec, epsilon=1.0, delta=1e-5, **bounds)
    tight = plan_ssp(n, planned.dim, linear=planned.linear_spec, epsilon=30.0, delta=1e-5, **bounds)
    assert loose.floor.per_parameter["sigma"] >= 4 and loose.floor.sigma_leans_low
    assert "pins sigma only loosely" in loose.floor.sentence() and "either way" in loose.floor.sentence()
    assert not any(word in loose.floor.sentence() for word in ("lean", " low,", "towards 0"))
    assert not tight.floor.sigma_leans_low and "pins sigma only loosely" not in tight.floor.sentence()

    model = DPStanModel(MODELS / "linear_bounded.stan", show_progress=False)
    data = {"N": n, "K": 1, "x": x.tolist(), "y": y.tolist()}
    short = dict(delta=1e-5, seed=3, show_progress=False, iter_warmup=40, iter_sampling=20, time_cap=1e-3)
    with pytest.warns(UserWarning, match="pins sigma only loosely"):
        fit = model.sample(data, algorithm="dp-ssp", epsilon=1.0, **short)
    assert "pins sigma only loosely" in fit.attrs["ssp_floor"]
    assert fit.attrs["ssp_floor"] == loose.floor.sentence()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.sample(data, algorithm="dp-ssp", epsilon=30.0, **short)
    assert not any("pins sigma only loosely" in str(w.message) for w in caught)


def test_recogniser_forms():
    """The recogniser finds the intercept, slopes, scale and declared bounds of the bundled programs and refuses
    a logistic one, a transformed outcome and a program with two row statements, in words."""
    from stan_dp.stan.linear_program import NotLinear, recognise_linear_program

    ok = """data { int<lower=0> N; int<lower=0> K; matrix<lower=-2, upper=2>[N, K] x;
    vector<lower=-6, upper=6>[N] y; } parameters { real alpha; vector[K] beta; real<lower=0> sigma; }
    model { alpha ~ normal(0, 5); y ~ normal(alpha + x * beta, sigma); }"""
    prog = recognise_linear_program(ok)
    assert prog.intercept == ("alpha",) and prog.slopes == ("beta",) and prog.scale == "sigma"
    assert prog.bounds == {"x": (-2.0, 2.0), "y": (-6.0, 6.0)}
    glm = ok.replace("y ~ normal(alpha + x * beta, sigma);", "y ~ normal_id_glm(x, alpha, beta, sigma);")
    assert recognise_linear_program(glm).covariates == (("x", "matrix"),)
    scalar = """data { int<lower=0> N; vector[N] s; vector[N] m; } parameters { vector[2] b; real<lower=0> sigma; }
    model { s ~ normal(b[1] + b[2] * m, sigma); }"""
    assert recognise_linear_program(scalar).slopes == ("b[2]",)
    with pytest.raises(NotLinear, match="bernoulli_logit"):
        recognise_linear_program(ok.replace("vector<lower=-6, upper=6>[N] y", "array[N] int y")
                                 .replace("normal(alpha + x * beta, sigma)", "bernoulli_logit(alpha + x * beta)"))
    with pytest.raises(NotLinear, match="transformed data"):
        recognise_linear_program(ok.replace("parameters {", "transformed data { vector[N] ly = y; } parameters {", 1))
    with pytest.raises(NotLinear, match="no covariate"):  # a normal model of y alone (auto must not take dp-ssp)
        recognise_linear_program("""data { int<lower=0> N; vector<lower=-6, upper=6>[N] y; }
        parameters { real mu; real<lower=0> sigma; } model { mu ~ normal(0, 5); y ~ normal(mu, sigma); }""")
    with pytest.raises(NotLinear, match="2 model statements"):
        recognise_linear_program(ok.replace("y ~ normal(alpha + x * beta, sigma);",
                                            "y ~ normal(alpha + x * beta, sigma); y ~ normal(alpha, sigma);"))


@pytest.mark.slow
def test_stan_end_to_end_with_declared_bounds():
    """A bundled linear program with declared bounds runs dp-ssp through DPStanModel.sample: the attrs name the
    declared bounds and the single Gaussian release, the posterior group has the program's parameters, every
    draw is finite, az.summary works and the chains' R-hat is recorded."""
    import arviz as az

    from stan_dp import DPStanModel

    model = DPStanModel(MODELS / "linear_bounded.stan", show_progress=False)
    rng = np.random.default_rng(0)
    n, k = 300, 2
    x = rng.uniform(-2, 2, (n, k))
    y = np.clip(0.5 + x @ np.array([1.0, -0.5]) + rng.normal(0, 1, n), -6, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.sample({"N": n, "K": k, "x": x.tolist(), "y": y.tolist()}, algorithm="dp-ssp", epsilon=10,
                           delta=1e-5, seed=2, show_progress=False, iter_warmup=300, iter_sampling=300)
    assert fit.attrs["algorithm"] == "dp-ssp"
    assert "declared bounds" in fit.attrs["algorithm_options"]
    assert "moment matrix" in fit.attrs["privacy_mechanisms"]
    post = fit.posterior
    assert set(post.data_vars) == {"alpha", "beta", "sigma"}
    assert all(np.all(np.isfinite(post[v].values)) for v in post.data_vars)
    summary = az.summary(fit)
    assert summary.shape[0] == 4
    verdict = json.loads(fit.attrs["convergence"])
    assert verdict["chains"] == 4 and math.isfinite(verdict["max_rhat"])


def test_advise_lists_dp_ssp_with_its_price():
    """advise on a linear model with public bounds: dp-ssp is a candidate, the bounds count as the options it
    needs (no clip bound required), and the Advice carries the price in advance in words."""
    from stan_dp.tools import advise as adv

    model = _model()
    plan = adv._ssp_plan(model, {"x_bounds": (-2, 2), "y_bounds": (-4, 4)}, epsilon=1.0, delta=1e-5, chains=4)
    assert plan is not None and plan.algorithm == "dp-ssp"
    adv._check_options({"x_bounds": (-2, 2), "y_bounds": (-4, 4)}, linear_bounds=True)
    adv._check_algorithms(["dp-ssp"])
    assert adv._ssp_plan(model, {}, epsilon=1.0, delta=1e-5, chains=4) is None  # no bounds: not a candidate
    advice = adv.Advice(rows=[], recommended="none", auto_choice="dp-ssp", clip_fractions={},
                        price=plan.floor.sentence())
    assert "dp-ssp price in advance: at these bounds and this budget" in str(advice)


def test_advise_offers_no_dp_ssp_when_a_privacy_unit_wraps_the_rows():
    """A linear model seen unit by unit declares no linear form (dp-ssp refuses a unit), so advise does not plan
    dp-ssp for it either: it reads the same public facts as the run, not the wrapped rows' attribute."""
    from stan_dp.run.pipeline import as_unit_likelihood
    from stan_dp.tools import advise as adv

    model = _model()
    bounds = {"x_bounds": (-2, 2), "y_bounds": (-4, 4)}
    assert adv._ssp_plan(model, bounds, epsilon=1.0, delta=1e-5, chains=4) is not None
    wrapped = as_unit_likelihood(model, np.arange(model.n_rows) // 2)
    assert adv._ssp_plan(wrapped, bounds, epsilon=1.0, delta=1e-5, chains=4) is None


@pytest.mark.slow
def test_a_stan_likelihood_of_public_data_offers_dp_ssp_to_advise(tmp_path):
    """``DPStanModel.attach_linear`` on a likelihood of (public) data gives advise the program's linear structure
    and declared bounds, so dp-ssp is planned as a candidate with no option given (what ``stan-dp advise``
    does); without it the Stan likelihood has no linear structure and dp-ssp is not planned."""
    from stan_dp import DPStanModel
    from stan_dp.tools import advise as adv

    model = DPStanModel(MODELS / "linear_bounded.stan", show_progress=False)
    rng = np.random.default_rng(1)
    x = rng.uniform(-2, 2, (50, 2))
    data = {"N": 50, "K": 2, "x": x.tolist(), "y": np.clip(x @ [1.0, -0.5] + rng.normal(0, 1, 50), -6, 6).tolist()}
    likelihood = model.row_likelihood(data)
    try:
        assert adv._ssp_plan(likelihood, {}, epsilon=1.0, delta=1e-5, chains=4) is None
        model.attach_linear(likelihood, data)
        plan = adv._ssp_plan(likelihood, {}, epsilon=1.0, delta=1e-5, chains=4)
        assert plan is not None and plan.bounds_source.startswith("declared")
    finally:
        likelihood.close()
    pa = pytest.importorskip("pyarrow", reason="Parquet needs the optional pyarrow (the tables extra)")
    import pyarrow.parquet as pq

    from stan_dp.stan.row_tables import read_row_data

    # rows left in a Parquet file (what a Ray run's driver holds): a local likelihood and dp-ssp's x and y read them
    pq.write_table(pa.table({"x.1": x[:, 0], "x.2": x[:, 1], "y": data["y"]}), tmp_path / "rows.parquet")
    left = {"K": 2, **read_row_data(tmp_path / "rows.parquet", model.data_declarations, {"K": 2}, keep=False)}
    likelihood, eager = model.row_likelihood(left), model.row_likelihood(data)
    try:
        model.attach_linear(likelihood, left)
        got_x, got_y = likelihood.linear_rows()
        np.testing.assert_array_equal(got_x, x)
        np.testing.assert_array_equal(got_y, data["y"])
        theta = np.array([0.1, 0.5, -0.2, 0.3])
        np.testing.assert_array_equal(likelihood.row_log_lik(theta), eager.row_log_lik(theta))
    finally:
        likelihood.close()
        eager.close()


def test_a_unit_of_k_rows_moves_the_moments_and_their_count_by_at_most_the_unit_bound():
    """With a privacy unit of at most k rows the released vector carries the row count (weighted like the sums);
    replacing a unit of 1..k rows by another (rows anywhere in the box, pushed to its faces) never moves the
    weighted vector further than unit_moment_sensitivity, which is k times the larger of the row-pair bound and
    one row's length with its count."""
    from stan_dp.privacy.moments import row_moment_norm, unit_moment_sensitivity

    half, w, k = np.array([2.0, 3.0]), 2.0, 4
    bound = unit_moment_sensitivity(half, w, k, count_weight=w)
    assert bound == pytest.approx(k * max(moment_sensitivity(half, w), row_moment_norm(half, w, w)))
    weights = np.concatenate([[w], entry_weights(2, w)])
    rng = np.random.default_rng(8)
    worst = 0.0
    for _ in range(3000):
        vecs = []
        for _ in range(2):
            size = rng.integers(1, k + 1)
            z = np.where(rng.random((size, 2)) < 0.7, np.sign(rng.uniform(-1, 1, (size, 2))) * half,
                         rng.uniform(-1, 1, (size, 2)) * half)
            vecs.append(np.concatenate([[size], moment_entries(z).sum(axis=0)]))
        worst = max(worst, float(np.linalg.norm(weights * (vecs[0] - vecs[1]))))
    assert worst <= bound * (1 + 1e-12) and worst > 0.5 * bound


def test_a_unit_likelihood_offers_the_regression_only_with_a_row_cap():
    """Through a privacy unit without max_rows_per_unit dp-ssp's and dp-glm's structures are withheld (the refusal
    names the cap); with one they are the base's, and the rows they read are each unit's first k rows."""
    from stan_dp.privacy.units import UnitLikelihood

    model = _model(n=12)
    labels = np.repeat(np.arange(4), 3)
    uncapped = UnitLikelihood(model, labels, name="person")
    assert uncapped.linear_spec is None and "max_rows_per_unit" in uncapped.linear_refusal
    capped = UnitLikelihood(model, labels, name="person", max_rows_per_unit=2)
    assert capped.linear_spec is not None and capped.prior_program is not None
    x, y = capped.linear_rows()
    kept = np.concatenate([np.arange(u * 3, u * 3 + 2) for u in range(4)])
    assert np.array_equal(y, model.y[kept]) and np.array_equal(x, model.X[kept])
