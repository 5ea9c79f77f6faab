"""Anchored sampling: the anchored rows, exactness of every anchored kernel on
a conjugate Gaussian when nothing clips (the target is the posterior tilted by G~'s noise), the accounting of the
composed phases against an independent dp-accounting composition, the run machinery's anchor phase, and that
nothing in it reads a row before the mechanisms do. Fixed seeds; tolerances from Monte Carlo standard errors."""
from __future__ import annotations

import json
import math
import types
import warnings

import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation

from stan_dp import sample_private
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.phases.anchor import AnchoredLikelihood, plan_anchor, run_anchor, split_anchor
from stan_dp.phases.noise_aware import noise_aware_shifts
from stan_dp.run.plan import plan_run
from stan_dp.samplers import DPHMC, DPSGHMC, DPSGLD, DPSGNHT, DPFastMHFull, PenaltyMH

from test_auto import RowsForbidden
from test_sgmcmc import gaussian_model, moment_z, run, sg_plan


def _anchored(model, theta_hat, xi):
    """The model anchored at theta_hat with G~ = sum_i g_i(theta_hat) + xi (no clipping: L is huge)."""
    _, grads = model.row_log_lik_grad(theta_hat)
    return AnchoredLikelihood(model, grads, grads.sum(axis=0) + xi)


def test_anchored_rows_and_prior():
    """l~_i = l_i - a_i . theta with gradient g_i - a_i; the data-free part gains (G~ - t) . theta."""
    model = gaussian_model()
    theta_hat, theta = np.array([0.9, -1.8]), np.array([1.3, -2.4])
    _, a = model.row_log_lik_grad(theta_hat)
    lik = AnchoredLikelihood(model, a, np.array([5.0, -3.0]), tilt=np.array([1.0, 1.0]))
    rows = np.array([3, 0, 3])
    v, g = lik.row_log_lik_grad(theta, rows)
    v0, g0 = model.row_log_lik_grad(theta, rows)
    np.testing.assert_allclose(v, v0 - a[rows] @ theta)
    np.testing.assert_allclose(g, g0 - a[rows])
    np.testing.assert_allclose(lik.row_log_lik(theta), model.row_log_lik(theta) - a @ theta)
    lp, gp = lik.log_prior_grad(theta)
    lp0, gp0 = model.log_prior_grad(theta)
    assert lp == pytest.approx(lp0 + np.array([4.0, -4.0]) @ theta)
    np.testing.assert_allclose(gp, gp0 + np.array([4.0, -4.0]))
    assert lik.param_shapes() == model.param_shapes()  # data-free attributes are the base's


def test_anchored_rows_without_their_anchor_gradients_compute_them_from_theta_hat():
    """Anchored rows built from the released theta_hat alone (how a resumed run, or rows that keep their anchor
    where they live, build them) compute the anchor gradients on first use: the same values as when they are given;
    neither given is refused."""
    model = gaussian_model()
    theta_hat, theta = np.array([0.9, -1.8]), np.array([1.3, -2.4])
    _, a = model.row_log_lik_grad(theta_hat)
    given = AnchoredLikelihood(model, a, np.array([5.0, -3.0]))
    lazy = AnchoredLikelihood(model, None, np.array([5.0, -3.0]), theta_hat=theta_hat)
    rows = np.array([2, 2, 0])
    for x, y in zip(lazy.row_log_lik_grad(theta, rows), given.row_log_lik_grad(theta, rows)):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(lazy.row_log_lik(theta), given.row_log_lik(theta))
    with pytest.raises(ValueError, match="theta_hat"):
        AnchoredLikelihood(model, None, np.zeros(2))


def _kernels(lik):
    """Every anchored kernel with noise on and a clip bound C that never binds here: a row's anchored gradient
    difference and ratio remainder per unit move are at most ||Sigma_obs^-1|| ||theta - theta_hat|| (<= 1 x about
    2 for every point these chains visit), so C = 4 for the accept tests (whose noise grows with C) and 1e3 for
    the SG kernels (noise far below the dynamics')."""
    c = 1e3
    return {
        "penalty": (PenaltyMH(lik, types.SimpleNamespace(tau_l=0.4), ratio_clip=1.0, diff_clip=4.0), 1.0, 40_000),
        "dp-hmc": (DPHMC(lik, types.SimpleNamespace(tau_l=0.4, tau_g=0.5, leapfrog_steps=5), ratio_clip=1.0,
                         grad_clip=1.0, leapfrog_steps=5, diff_clip=4.0), 0.3, 15_000),
        "dp-fast-mh-full": (DPFastMHFull(lik, types.SimpleNamespace(epsilon_iteration=5.0, delta_iteration=0.2),
                                         row_bound=1.0, diff_clip=4.0), 1.0, 40_000),
        "dp-sgld": (DPSGLD(lik, sg_plan(tau_g=1e-6), grad_clip=1e4, free_steps=False, diff_clip=c), 0.05, 30_000),
        "dp-sghmc": (DPSGHMC(lik, sg_plan(tau_g=1e-6), grad_clip=1e4, free_steps=False, diff_clip=c), 0.1, 30_000),
        "dp-sgnht": (DPSGNHT(lik, sg_plan(tau_g=1e-6), grad_clip=1e4, free_steps=False, diff_clip=c), 0.1, 30_000),
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", ["penalty", "dp-hmc", "dp-fast-mh-full", "dp-sgld", "dp-sghmc", "dp-sgnht"])
def test_anchored_kernels_target_the_tilted_posterior(name):
    """With nothing clipping, every anchored kernel (noise on) targets the posterior tilted by G~'s noise xi:
    N(m + Sigma xi, Sigma) for the conjugate Gaussian. Means and variances within 4 MCSE of that target, and the
    tilt is far outside the MCSE (the test can tell the tilted target from the untilted one)."""
    model = gaussian_model()
    mean, cov = model.posterior_mean(), model.posterior_cov()
    xi = np.array([3.0, -2.0]) / np.sqrt(np.diag(cov))  # a tilt that moves the centre by ~3 and ~2 sds
    lik = _anchored(model, mean + 2.0 * np.sqrt(np.diag(cov)), xi)
    target = mean + cov @ xi
    kernel, step, n = _kernels(lik)[name]
    metric = np.diag(cov)
    draws, _ = run(kernel, target, n, step, metric, seed=8)
    z_mean, z_var, n_ess = moment_z(draws[1000:], target, np.diag(cov))
    assert n_ess.min() > 150, n_ess
    assert np.all(np.abs(z_mean) < 4.0), z_mean
    assert np.all(np.abs(z_var) < 4.0), z_var
    z_untilted, _, _ = moment_z(draws[1000:], mean, np.diag(cov))
    assert np.all(np.abs(z_untilted) > 10.0), z_untilted


def test_composed_phases_match_an_independent_dp_accounting_composition():
    """The anchor phase (DP-GD steps and G~, Gaussian) and an SG main run (Poisson-subsampled Gaussian) composed
    by the package equal dp-accounting's own PLD composition of the same events (noise sd 2 tau against a
    sensitivity 1, dp-accounting's REPLACE_ONE convention, as in test_ops), within [0.99, 1.0] of the budget."""
    n, d, eps, delta = 10_000, 4, 1.0, 1e-5
    plan = plan_run(n, d, algorithm="dp-sgld", epsilon=eps, delta=delta, chains=4, iter_warmup=500,
                    iter_sampling=500, quiet=True, grad_clip=2.5, anchor="dp-gd")
    mechs = json.loads(json.dumps(plan.privacy.mechanisms()))
    assert [m["name"].split(":")[0] for m in mechs[:2]] == ["anchor", "anchor"]
    interval = 1e-4
    total = None
    for m in mechs:
        q = m.get("sampling_probability", 1.0)
        one = pld_lib.from_gaussian_mechanism(standard_deviation=2.0 * m["noise_multiplier"], sensitivity=1.0,
                                              sampling_prob=q, value_discretization_interval=interval,
                                              neighboring_relation=NeighboringRelation.REPLACE_ONE
                                              ).self_compose(m["count"])
        total = one if total is None else total.compose(one)
    independent = total.get_epsilon_for_delta(delta)
    assert 0.99 * eps <= independent <= eps * 1.001, independent


def test_fisher_release_is_chosen_by_a_public_rule_and_accounted():
    """anchor_curvature_share unset: the plan releases a diagonal Fisher with FISHER_SHARE of the budget exactly
    when its noise sd sqrt(2) tau_F L^2 is at most FISHER_PRECISION x N L^2 / d (a million rows at epsilon 1: on;
    3,000 rows: off), says why, and the release is composed with the others (dp-accounting's own
    composition of the plan's mechanisms spends [0.99, 1] of the budget); a given share is kept, 0 included;
    planning reads no row."""
    from stan_dp.privacy import gaussian_rho
    from stan_dp.phases.anchor import ANCHOR_SPEC, FISHER_PRECISION, FISHER_SHARE, fisher_share_rule

    def planned(n, **extra):
        return plan_run(n, 5, algorithm="dp-sgnht", epsilon=1.0, delta=1e-8, chains=2, iter_warmup=50,
                        iter_sampling=50, quiet=True, grad_clip=4.0, anchor="dp-gd", **extra)

    big, small = planned(1_000_000), planned(3000)
    assert big.anchor.options["anchor_curvature_share"] == FISHER_SHARE and big.anchor.tau_curvature is not None
    sd = math.sqrt(2.0) * big.anchor.tau_curvature * 4.0 ** 2
    assert sd <= FISHER_PRECISION * 1_000_000 * 4.0 ** 2 / 5
    assert f"{sd:.3g}" in big.anchor.fisher_reason and "of the budget" in big.anchor.fisher_reason
    assert big.anchor.shares == pytest.approx(0.2 + 0.6 + FISHER_SHARE + 0.02)
    assert small.anchor.options["anchor_curvature_share"] == 0.0 and small.anchor.tau_curvature is None
    assert small.anchor.fisher_reason.startswith("off:")
    cfg = ANCHOR_SPEC.validate({"anchor": "dp-gd", "anchor_grad_clip": 4.0}, require=False)
    rho = gaussian_rho(1.0, 1e-8)
    for given in (0.0, 0.1):  # a given share is kept, at any N
        assert fisher_share_rule({**cfg, "anchor_curvature_share": given}, rho=rho, n_rows=10**9, dim=5) == (
            given, "given")
    assert fisher_share_rule(cfg, rho=rho, n_rows=None, dim=None)[0] == 0.0  # no N: off
    mechs = json.loads(json.dumps(big.privacy.mechanisms()))
    assert sum("curvature" in m["name"] or "Fisher" in m["name"] for m in mechs) == 1, [m["name"] for m in mechs]
    total = None
    for m in mechs:
        one = pld_lib.from_gaussian_mechanism(standard_deviation=2.0 * m["noise_multiplier"], sensitivity=1.0,
                                              sampling_prob=m.get("sampling_probability", 1.0),
                                              value_discretization_interval=1e-3,
                                              neighboring_relation=NeighboringRelation.REPLACE_ONE
                                              ).self_compose(m["count"])
        total = one if total is None else total.compose(one)
    assert 0.99 <= total.get_epsilon_for_delta(1e-8) <= 1.001


def test_anchor_plan_is_public_and_the_run_phase_touches_rows_only_in_mechanisms():
    """Planning an anchored run (noise, shares, run lengths, the public C) reads no row: a likelihood whose row
    methods raise is planned; the plan prints the anchor phase."""
    lik = RowsForbidden()
    plan = plan_run(lik.n_rows, lik.dim, algorithm="dp-sgnht", epsilon=1.0, delta=1e-5, chains=4, quiet=True,
                    grad_clip=2.5, anchor="dp-gd")
    assert plan.anchor is not None and plan.settings.metric == "diag"
    assert "anchor:" in str(plan) and "G~" in str(plan)
    assert plan.anchor.public_diff_clip(lik.n_rows, lik.dim) == pytest.approx(
        2.5 ** 2 / 4 * 3.0 * lik.dim / (math.sqrt(lik.n_rows) * 2.5))


@pytest.mark.slow
def test_anchored_run_end_to_end_releases_only_mechanism_outputs():
    """sample_private with anchor='dp-gd' on a logistic model: the budget is spent exactly once over all phases,
    the attrs carry the anchor's releases (theta_hat, G~), C and what the posterior targets, the chains' own draws
    are kept beside the noise-aware ones, and the noise-aware draws are wider than the chains'."""
    model = LogisticRegressionModel.simulate(n=4000, dim=2, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="dp-sgld", epsilon=2.0, delta=1e-5, chains=2, iter_warmup=300,
                             iter_sampling=300, seed=4, show_progress=False, grad_clip=3.0, anchor="dp-gd")
    assert 0.99 * 2.0 <= fit.attrs["epsilon_spent"] <= 2.0
    names = [m["name"] for m in json.loads(fit.attrs["privacy_mechanisms"])]
    assert names[0].startswith("anchor: DP-GD") and names[1].startswith("anchor: clipped gradient sum G~")
    assert len(json.loads(fit.attrs["anchor_theta"])) == model.dim
    assert len(json.loads(fit.attrs["anchor_gradient"])) == model.dim
    assert fit.attrs["diff_clip"] > 0 and "K r" in fit.attrs["diff_clip_reason"]
    assert fit.attrs["posterior_target"].startswith("noise-aware")
    chains = np.asarray(fit.chain_posterior["beta"].values).reshape(-1, model.dim - 1)
    released = np.asarray(fit.posterior["beta"].values).reshape(-1, model.dim - 1)
    assert released.std(axis=0).min() > chains.std(axis=0).min()
    assert json.loads(fit.attrs["algorithm_options"])["anchor"] == "dp-gd"


def test_noise_aware_shifts_give_each_coordinate_the_noise_aware_mean_and_variance():
    """The noise-aware draws keep the chains' mean and give coordinate j the variance Sigma_jj + sigma^2
    (Sigma^2)_jj (Sigma the draws' covariance): exactly, as a deterministic map of the draws; fewer than two draws
    give None."""
    rng = np.random.default_rng(1)
    cov = np.array([[2.0, 0.6], [0.6, 0.5]])
    draws = rng.multivariate_normal([0, 0], cov, size=(4, 2000))
    released = (draws + noise_aware_shifts(draws, 0.7, np.random.default_rng(2), finite_ess=False)).reshape(-1, 2)
    sigma = np.cov(draws.reshape(-1, 2), rowvar=False)
    np.testing.assert_allclose(released.mean(axis=0), draws.reshape(-1, 2).mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(np.var(released, axis=0, ddof=1), np.diag(sigma + 0.49 * sigma @ sigma), rtol=1e-10)
    assert noise_aware_shifts(draws[:, :1][:1], 0.7, rng) is None


def test_few_effective_draws_widen_the_noise_aware_variance_by_their_monte_carlo_uncertainty():
    """With the default finite_ess=True each coordinate's variance is the noise-aware one plus the Monte Carlo
    error of the mean, raised to its upper confidence value given the coordinate's bulk ESS n (times kappa = n /
    the chi-square 25 % quantile): exactly that, as a map of the draws. Chains with few
    effective draws (AR(1), phi 0.995) are widened by over 20 % in variance beyond the plain map; independent
    draws (n about 8,000) by under 5 %."""
    from scipy.stats import chi2

    from stan_dp.phases.noise_aware import effective_sizes, variance_scales

    rng = np.random.default_rng(5)
    chol = np.linalg.cholesky(np.array([[1.0, 0.5], [0.5, 2.0]]))
    e = rng.standard_normal((4, 2000, 2)) @ chol.T
    slow = np.empty_like(e)
    slow[:, 0] = e[:, 0]
    for k in range(1, e.shape[1]):
        slow[:, k] = 0.995 * slow[:, k - 1] + np.sqrt(1 - 0.995 ** 2) * e[:, k]
    for draws, low, high in ((e, 1.0, 1.05), (slow, 1.2, np.inf)):
        flat = draws.reshape(-1, 2)
        sigma = np.cov(flat, rowvar=False)
        n = effective_sizes(draws)
        kappa = n / chi2.ppf(0.25, n)
        np.testing.assert_allclose(kappa, variance_scales(n))
        expected = kappa * (np.diag(sigma) + 0.49 * np.diag(sigma @ sigma) + np.diag(sigma) / n)
        released = (draws + noise_aware_shifts(draws, 0.7)).reshape(-1, 2)
        np.testing.assert_allclose(released.mean(axis=0), flat.mean(axis=0), atol=1e-12)
        np.testing.assert_allclose(np.var(released, axis=0, ddof=1), expected, rtol=1e-10)
        plain = np.diag(sigma + 0.49 * sigma @ sigma)
        ratio = np.var(released, axis=0, ddof=1) / plain
        assert np.all(ratio > low) and np.all(ratio < high), ratio
    # the scale falls towards 1 as the ESS grows, and is 1 where there is no ESS
    assert list(variance_scales(np.array([7.0, 55.0, 200.0, 2000.0, np.nan]))) == sorted(
        variance_scales(np.array([7.0, 55.0, 200.0, 2000.0, np.nan])), reverse=True)
    assert variance_scales(np.array([np.nan]))[0] == 1.0


def test_noise_aware_draws_keep_the_chains_rhat_and_ess_when_the_chains_do_not_mix():
    """Chains that do not mix (AR(1) draws, one coordinate offset per chain: R-hat about 1.2) keep, after the
    noise-aware correction, exactly their R-hat and bulk / tail ESS per coordinate (the az.summary numbers), while
    the correction widens every coordinate; the first version (independent shifts per draw) hid the problem."""
    from stan_dp.output.arviz_compat import rhat_ess

    rng = np.random.default_rng(3)
    chains, n, d, phi = 4, 600, 3, 0.95
    e = rng.standard_normal((chains, n, d))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for k in range(1, n):
        x[:, k] = phi * x[:, k - 1] + np.sqrt(1 - phi ** 2) * e[:, k]
    x = x @ np.linalg.cholesky(np.array([[1.0, 0.8, 0.3], [0.8, 1.0, 0.5], [0.3, 0.5, 1.0]])).T
    x[..., 0] += np.array([0.0, 0.4, -0.6, 1.0])[:, None]
    y = x + noise_aware_shifts(x, 0.8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        before = [rhat_ess(x[..., j]) for j in range(d)]
        after = [rhat_ess(y[..., j]) for j in range(d)]
    assert before[0][0] > 1.1  # the example does not mix
    np.testing.assert_allclose(after, before, rtol=1e-9)
    assert np.all(y.reshape(-1, d).std(axis=0) > 1.05 * x.reshape(-1, d).std(axis=0))
    # the per-draw independent shift Sigma t would have hidden it (R-hat pulled towards 1)
    sigma = np.cov(x.reshape(-1, d), rowvar=False)
    white = x + (0.8 * rng.standard_normal(x.shape)) @ sigma
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert rhat_ess(white[..., 0])[0] < before[0][0] - 0.02


def test_anchor_options_are_checked():
    """Anchor options without anchor, with a warm start, shares leaving no budget, and a kernel with nothing to
    anchor are refused, each naming the problem."""
    with pytest.raises(ValueError, match="anchor is not set"):
        plan_run(1000, 2, algorithm="penalty", epsilon=1.0, delta=1e-5, quiet=True, ratio_clip=1.0,
                 anchor_share=0.3)
    with pytest.raises(ValueError, match="both set the chains' starts"):
        plan_run(1000, 2, algorithm="dp-sgld", epsilon=1.0, delta=1e-5, quiet=True, grad_clip=1.0,
                 anchor="dp-gd", warm_start="dp-gd")
    with pytest.raises(ValueError, match="below 0.95"):
        plan_run(1000, 2, algorithm="dp-sgld", epsilon=1.0, delta=1e-5, quiet=True, grad_clip=1.0,
                 anchor="dp-gd", anchor_share=0.5, anchor_gradient_share=0.5)
    with pytest.raises(ValueError, match="no clipped per-row mechanism"):
        plan_run(1000, 2, algorithm="ops", epsilon=1.0, delta=1e-5, quiet=True, loglik_bounds=(-5, 0),
                 anchor="dp-gd")


def test_run_anchor_zeroes_rows_that_fail_at_the_anchor():
    """A row whose gradient at the anchor is not finite gets anchor gradient 0 (its rows then stay clipped like
    any other); the release is finite."""
    model = gaussian_model(n=10)

    class OneBadRow:
        n_rows, dim = model.n_rows, model.dim

        def __getattr__(self, name):
            return getattr(model, name)

        def row_log_lik_grad(self, theta, rows=None):
            v, g = model.row_log_lik_grad(theta, rows)
            idx = np.arange(self.n_rows) if rows is None else np.asarray(rows)
            g = np.where((idx == 3)[:, None], np.nan, g)
            return v, g

    cfg = split_anchor({"grad_clip": 5.0, "anchor": "dp-gd"}, DPSGLD.option_spec, "dp-sgld")[1]
    release, grads = run_anchor(OneBadRow(), plan_anchor(cfg, epsilon=5.0, delta=1e-5), np.random.default_rng(0),
                                np.zeros(2))
    assert np.all(grads[3] == 0.0) and np.all(np.isfinite(grads))
    assert np.all(np.isfinite(release.theta_hat)) and np.all(np.isfinite(release.gradient))


def test_noise_calibration_reports_what_the_run_did_and_the_curvature_noise_matches_its_event(monkeypatch):
    """An anchored 2 x (15 + 15) run records ``chains: 2, iterations: 30`` in ``noise_calibration`` (not the
    anchor phase's one chain with every release counted as an iteration), with every phase's releases, chains and
    iterations; the report counts all of them. F~'s noise sd is tau_F sqrt(2) L^2 (its replace-one sensitivity
    times the noise multiplier the accountant composed), not 2 tau_F L^2."""
    from stan_dp.privacy import mechanisms

    sds = []
    real = mechanisms.gaussian_noise

    def recording(rng, sd, size=None):
        sds.append(float(np.max(sd)))
        return real(rng, sd, size)

    monkeypatch.setattr(mechanisms, "gaussian_noise", recording)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(200, 2))
    y = (rng.uniform(size=200) < 0.5).astype(float)
    L = 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(LogisticRegressionModel(x, y), algorithm="dp-sgld", grad_clip=L, anchor="dp-gd",
                             anchor_steps=10, anchor_curvature_share=0.1, epsilon=2.0, delta=1e-5, chains=2,
                             iter_warmup=15, iter_sampling=15, seed=3, show_progress=False)
    calibration = json.loads(fit.attrs["noise_calibration"])
    assert (calibration["chains"], calibration["iterations"]) == (2, 30)
    phases = [(p["chains"], p["iterations"]) for p in calibration["phases"]]
    assert phases[0] == (1, 10) and phases[-1] == (2, 30) and all(p == (1, 1) for p in phases[1:-1]), phases
    released = [name for p in calibration["phases"] for name in p["releases"]]
    assert "anchor: clipped squared-gradient sum (diagonal Fisher) at the anchor" in released
    assert json.loads(fit.attrs["privacy_report"])["total_iterations"] == sum(c * n for c, n in phases)
    tau_f = json.loads(fit.attrs["algorithm_options"])["anchor_tau_curvature"]
    event = [m for m in json.loads(fit.attrs["privacy_mechanisms"]) if "squared-gradient" in m["name"]]
    assert len(event) == 1 and math.isclose(event[0]["noise_multiplier"], tau_f)
    assert any(math.isclose(sd, tau_f * math.sqrt(2.0) * L * L) for sd in sds), sds
    assert not any(math.isclose(sd, 2.0 * tau_f * L * L) for sd in sds), sds


def test_the_attrs_say_where_the_chains_started():
    """attrs["inits"] says "user-given" only for inits the caller gave: an anchored run without inits says that its
    chains started at the private anchor (whose DP-GD started from uniform(-2, 2)), a warm-started run that they
    started at the warm start's released points; with given inits the anchor's start is said to be them."""
    model = LogisticRegressionModel.simulate(n=500, dim=2, seed=3)
    runs = {"anchored": dict(algorithm="dp-sgld", grad_clip=3.0, anchor="dp-gd"),
            "warm": dict(algorithm="penalty", ratio_clip=2.0, warm_start="dp-gd", warm_start_grad_clip=3.0,
                         warm_start_steps=10),
            "given": dict(algorithm="dp-sgld", grad_clip=3.0, anchor="dp-gd", inits=np.zeros(model.dim))}
    said = {}
    for label, options in runs.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = sample_private(model, epsilon=2.0, delta=1e-5, chains=2, iter_warmup=20, iter_sampling=20, seed=4,
                                 show_progress=False, **options)
        said[label] = fit.attrs["inits"]
    assert said["anchored"].startswith("the private anchor (DP-GD)")
    assert said["anchored"].endswith("started from uniform(-2, 2) on the unconstrained scale")
    assert said["warm"] == "the dp-gd warm start's released points, one per chain"
    assert said["given"].endswith("the anchor's DP-GD started from user-given")
    assert not any(text == "user-given" for text in said.values())
