"""Tests of the SG-MCMC kernels (DP-SGLD, DP-SGHMC, DP-SGNHT) and their accounting.

Exactness runs call ``kernel.step`` in a plain loop on a conjugate Gaussian model (NumPy reference model) with
a fixed metric equal to the posterior variance, a small step, a clip bound that never binds and fixed seeds.
Tolerances come from Monte Carlo standard errors (ESS by Geyer's initial monotone sequence, as in
test_kernels.py) plus the kernels' own O(step) discretisation bias, stated per test.
"""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

import dp_accounting
from dp_accounting import NeighboringRelation
from dp_accounting.rdp import RdpAccountant

from stan_dp.privacy import calibrate_phases
from stan_dp.phases.calibration import account, calibrate
from stan_dp.privacy import events
from stan_dp.models.reference_models import GaussianMeanModel, LogisticRegressionModel
from stan_dp.samplers import ALGORITHMS, DPSGHMC, DPSGLD, DPSGNHT
from stan_dp.samplers.sgmcmc import default_sampling_rate

from test_kernels import ess

SG = [DPSGLD, DPSGHMC, DPSGNHT]


def sg_plan(tau_g, sampling_rate=1.0, batch_sampling="poisson", batch_size=None):
    """A stand-in for the accountant's plan (only the attributes the SG kernels read)."""
    return types.SimpleNamespace(tau_g=tau_g, sampling_rate=sampling_rate, batch_sampling=batch_sampling,
                                 batch_size=batch_size)


def gaussian_model(n=40, seed=11):
    rng = np.random.default_rng(seed)
    x = rng.normal([1.0, -2.0], [1.0, 2.0], size=(n, 2))
    return GaussianMeanModel(x, obs_cov=np.diag([1.0, 4.0]), prior_mean=0.0, prior_cov=np.eye(2) * 100.0)


def run(kernel, theta0, n_iter, step, metric, seed):
    rng = np.random.default_rng(seed)
    state = kernel.init_state(np.asarray(theta0, dtype=float))
    draws = np.empty((n_iter, kernel.dim))
    infos = []
    for i in range(n_iter):
        state, info = kernel.step(rng, state, step, metric)
        draws[i] = state.theta
        infos.append(info)
    return draws, infos


def moment_z(draws, mean, var):
    """z-scores of the sample mean and variance per coordinate against the targets (MCSE from the ESS; the
    variance's MCSE uses the ESS of the squared deviations and var * sqrt(2) for a Gaussian)."""
    n_ess = np.array([ess(draws[:, j]) for j in range(draws.shape[1])])
    z_mean = (draws.mean(0) - mean) / (np.sqrt(var / n_ess))
    sq = (draws - mean) ** 2
    n_ess2 = np.array([ess(sq[:, j]) for j in range(draws.shape[1])])
    z_var = (sq.mean(0) - var) / (var * math.sqrt(2.0) / np.sqrt(n_ess2))
    return z_mean, z_var, n_ess


# --------------------------------------------------------------------------------------------- exactness
@pytest.mark.slow
@pytest.mark.parametrize("cls,step", [(DPSGLD, 0.05), (DPSGHMC, 0.1), (DPSGNHT, 0.1)])
def test_exactness_on_conjugate_gaussian(cls, step):
    """Noise on, no clipping (L = 1e4 never binds), full batch, posterior-variance metric, small step: the
    draws' mean and variance match the conjugate posterior. The O(step) bias is at most ~step/8 relative on
    the variance (Euler on an OU process), far below the 4-MCSE tolerance at these ESS (~1000)."""
    model = gaussian_model()
    mean, var = model.posterior_mean(), np.diag(model.posterior_cov())
    # tau_g small enough that the privacy term is below the dynamics term (privacy for free), but not zero
    kernel = cls(model, sg_plan(tau_g=1e-6), grad_clip=1e4, free_steps=False)
    draws, infos = run(kernel, mean, 30_000, step, var, seed=5)
    z_mean, z_var, n_ess = moment_z(draws[1000:], mean, var)
    assert n_ess.min() > 150
    assert np.all(np.abs(z_mean) < 4.0), z_mean
    assert np.all(np.abs(z_var) < 4.0), z_var
    assert all(info.extra["temperature"] == 1.0 for info in infos[:10])


class PrintedSGLD(DPSGLD):
    """Wang, Fienberg and Smola (2015) Algorithm 2 as printed: drift eta g with noise variance eta (targets pi^2)."""

    langevin_drift = 1.0


@pytest.mark.slow
def test_factor_two_typo_is_caught():
    """The same exactness check rejects the printed Algorithm 2 (drift eta, variance eta): its stationary
    variance is half the posterior's, tens of MCSEs away."""
    model = gaussian_model()
    mean, var = model.posterior_mean(), np.diag(model.posterior_cov())
    kernel = PrintedSGLD(model, sg_plan(tau_g=1e-6), grad_clip=1e4, free_steps=False)
    draws, _ = run(kernel, mean, 20_000, 0.05, var, seed=5)
    _, z_var, _ = moment_z(draws[1000:], mean, var)
    assert np.all(z_var < -6.0), z_var
    assert np.allclose(draws[1000:].var(0) / var, 0.5, atol=0.12)


@pytest.mark.slow
def test_sghmc_raised_friction_keeps_the_target():
    """With privacy noise above the dynamics noise (free_steps=False, a large tau_g) SGHMC raises the friction
    so that the injected noise is balanced: the target stays the posterior (mean and variance within 4 MCSE),
    and the released friction exceeds the option's."""
    model = gaussian_model()
    mean, var = model.posterior_mean(), np.diag(model.posterior_cov())
    # privacy variance P = (2 tau L h sqrt(m) / q)^2 with m = var: choose tau so P ~ 0.5 (> 1 - exp(-2 C h) ~ 0.18)
    h, L = 0.1, 1e4
    tau = math.sqrt(0.5) / (2 * L * h * math.sqrt(var.max()))
    kernel = DPSGHMC(model, sg_plan(tau_g=tau), grad_clip=L, free_steps=False, friction=1.0)
    draws, infos = run(kernel, mean, 40_000, h, var, seed=9)
    z_mean, z_var, n_ess = moment_z(draws[1000:], mean, var)
    assert n_ess.min() > 150
    assert np.all(np.abs(z_mean) < 4.0) and np.all(np.abs(z_var) < 4.0), (z_mean, z_var)
    assert infos[-1].extra["friction"] > 3.0 and infos[-1].extra["temperature"] == pytest.approx(1.0)


@pytest.mark.slow
def test_sgld_privacy_term_runs_hotter_by_the_released_temperature():
    """When the privacy variance wins, SGLD's stationary variance is the released temperature times the
    posterior variance (small step), i.e. the chain is hotter by exactly what sample_stats says."""
    model = gaussian_model()
    mean, var = model.posterior_mean(), np.diag(model.posterior_cov())
    eta, L = 0.05, 1e4
    # privacy variance (tau L eta m / q)^2 = 2 eta m for the coordinate with the larger m: temperature 2
    tau = math.sqrt(2.0 / (eta * var.max())) / L
    kernel = DPSGLD(model, sg_plan(tau_g=tau), grad_clip=L, free_steps=False)
    draws, infos = run(kernel, mean, 30_000, eta, var, seed=4)
    temp = infos[-1].extra["temperature"]
    assert temp == pytest.approx(2.0, rel=1e-9)
    j = int(np.argmax(var))
    _, z_var, _ = moment_z(draws[1000:, [j]], mean[[j]], np.array([temp * var[j]]))
    assert abs(z_var[0]) < 4.0


# ---------------------------------------------------------------------------------------------- releases
def test_minibatches_and_released_fields():
    """Poisson batches have Binomial sizes (mean q N); fixed-size batches are exactly B distinct rows; the
    released fields are exactly step size, noise sd, temperature and friction (momentum kernels), never the
    realised batch size, and none of them is a forbidden name."""
    from stan_dp.output.inference_data import check_releasable

    model = LogisticRegressionModel.simulate(n=2000, dim=2, seed=1)
    k = DPSGLD(model, sg_plan(tau_g=1.0, sampling_rate=0.05), grad_clip=2.0, sampling_rate=0.05)
    rng = np.random.default_rng(0)
    sizes = [k._batch(rng).size for _ in range(400)]
    assert abs(np.mean(sizes) - 100) < 4 * math.sqrt(100 * 0.95 / 400)
    ku = DPSGHMC(model, sg_plan(tau_g=1.0, sampling_rate=0.025, batch_sampling="uniform", batch_size=50),
                 grad_clip=2.0, batch_sampling="uniform", batch_size=50)
    rows = ku._batch(rng)
    assert rows.size == 50 and np.unique(rows).size == 50
    for kernel in (k, ku):
        draws, infos = run(kernel, np.zeros(3), 5, kernel.default_step_size, kernel.initial_metric(), 1)
        check_releasable(infos[0].extra)
        # no realised batch size: the Poisson-subsampled accounting holds only while |B| is hidden
        expected = {"step_size", "noise_sd", "temperature"} | (set() if kernel is k else {"friction"})
        assert set(infos[0].extra) == expected


def test_poisson_minibatches_include_every_row_independently_with_the_rate():
    """``mechanisms.poisson_minibatch`` (the accountant's Poisson subsampling): sorted distinct indices in [0, N);
    over 4,000 batches of N = 50 rows at q = 0.3 every row's inclusion frequency is q (each within 4.5 Monte Carlo
    sds of q, so about 1 in 1e4 fails by chance per row at this seed), the batch size has the Binomial(N, q) mean and
    variance (4 and 5 sds: the variance's sd from its own sampling distribution), and two rows are included together
    with probability q^2 (adjacent rows and rows 25 apart: the gaps of the draw are independent). q = 1 gives every
    row; an empty data set no row; a rate outside (0, 1] is refused."""
    from stan_dp.privacy import mechanisms

    n, q, reps = 50, 0.3, 4000
    rng = np.random.default_rng(4)
    hits = np.zeros((reps, n), dtype=bool)
    for r in range(reps):
        rows = mechanisms.poisson_minibatch(rng, n, q)
        assert rows.dtype.kind == "i" and np.all(np.diff(rows) > 0) and (rows.size == 0 or 0 <= rows[0] <= rows[-1] < n)
        hits[r, rows] = True
    sd = math.sqrt(q * (1 - q) / reps)
    assert np.all(np.abs(hits.mean(axis=0) - q) < 4.5 * sd)
    sizes = hits.sum(axis=1)
    assert abs(sizes.mean() - n * q) < 4 * math.sqrt(n * q * (1 - q) / reps)
    var = n * q * (1 - q)
    assert abs(sizes.var() - var) < 5 * var * math.sqrt(2 / reps)
    for a, b in ((10, 11), (0, 25), (48, 49)):
        both = np.mean(hits[:, a] & hits[:, b])
        assert abs(both - q * q) < 4.5 * math.sqrt(q * q * (1 - q * q) / reps)
    np.testing.assert_array_equal(mechanisms.poisson_minibatch(rng, 7, 1.0), np.arange(7))
    assert mechanisms.poisson_minibatch(rng, 0, 0.5).size == 0
    with pytest.raises(ValueError, match="rate"):
        mechanisms.poisson_minibatch(rng, 7, 0.0)


def test_plan_must_match_sampling_options():
    """A plan calibrated for another minibatch rule is refused, naming the mismatch."""
    model = LogisticRegressionModel.simulate(n=1000, dim=2, seed=1)
    with pytest.raises(ValueError, match="sampling_rate"):
        DPSGLD(model, sg_plan(tau_g=1.0, sampling_rate=0.5), grad_clip=2.0, sampling_rate=0.1)
    with pytest.raises(ValueError, match="grad_clip.*required"):
        DPSGLD(model, sg_plan(tau_g=1.0, sampling_rate=0.5))
    with pytest.raises(ValueError, match="option 'batch_sampling' of algorithm 'dp-sgld' must be one of"):
        DPSGLD(model, sg_plan(tau_g=1.0), grad_clip=1.0, batch_sampling="shuffle")


# --------------------------------------------------------------------------------------------- accounting
def pld_reference(tau, q, count, delta):
    acc = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE)
    # dp-accounting's REPLACE_ONE PLD: GaussianDpEvent(nm) shifts by 2, i.e. nm = sigma / L = 2 tau
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(2 * tau)), count)
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("algorithm", ["dp-sgld", "dp-sghmc", "dp-sgnht"])
def test_poisson_calibration_against_independent_pld(algorithm):
    """Calibrated tau_g re-accounted by dp-accounting's own PLDAccountant (Poisson-sampled Gaussian,
    REPLACE_ONE, its default discretisation) spends within [0.99, 1.0] of the budget; the report names PLD and
    gives the papers' looser bound beside it."""
    n, eps, delta, chains, iters = 100_000, 1.0, 1e-5, 4, 2000
    plan = calibrate(algorithm, epsilon=eps, delta=delta, chains=chains, iterations=iters, n_rows=n)
    q = default_sampling_rate(n)
    assert plan.sampling_rate == q and plan.batch_sampling == "poisson"
    ref = pld_reference(plan.tau_g, q, chains * iters, delta)
    assert 0.99 * eps <= ref <= eps
    report = plan.report()
    assert report.accountant == "PLD (dp-accounting)" and 0.99 * eps <= report.epsilon <= eps
    m = report.mechanisms[0]
    assert m["kind"] == "poisson-subsampled-gaussian" and m["count"] == chains * iters
    assert m["paper_epsilon"] > 3 * eps  # the papers' C_epsilon bound is far looser
    assert "DP-SGLD paper's bound" in str(report)  # named in words, not by seed number


@pytest.mark.slow
def test_uniform_calibration_uses_rdp():
    """Fixed-size batches without replacement are calibrated with dp-accounting's RDP accountant (no PLD for
    them in 0.6); an independent RdpAccountant computation gives epsilon within [0.99, 1.0] of the budget."""
    n, b, eps, delta, T = 20_000, 400, 1.0, 1e-5, 3000
    plan = calibrate("dp-sgld", epsilon=eps, delta=delta, chains=1, iterations=T, n_rows=n,
                     batch_sampling="uniform", batch_size=b)
    acc = RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.SampledWithoutReplacementDpEvent(n, b, dp_accounting.GaussianDpEvent(plan.tau_g)), T)
    assert 0.99 * eps <= acc.get_epsilon(delta) <= eps
    assert plan.report().accountant == "RDP (dp-accounting)"


def test_subsampling_amplifies_and_noise_first_round_trip():
    """At a fixed noise multiplier a smaller sampling rate spends less; the calibrated noise grows with the
    rate; noise-first accounting at the calibrated tau_g gives the plan's epsilon back."""
    n, delta = 50_000, 1e-5
    plans = [calibrate("dp-sgld", epsilon=1.0, delta=delta, chains=2, iterations=1000, n_rows=n, sampling_rate=q)
             for q in (0.01, 0.1, 1.0)]
    taus = [p.tau_g for p in plans]
    assert taus[0] < taus[1] < taus[2]
    spent = [account("dp-sgld", delta=delta, chains=2, iterations=1000, n_rows=n, sampling_rate=q, tau_g=5.0).epsilon
             for q in (0.01, 0.1, 1.0)]
    assert spent[0] < spent[1] < spent[2]
    back = account("dp-sgld", delta=delta, chains=2, iterations=1000, n_rows=n, sampling_rate=0.1, tau_g=taus[1])
    assert back.epsilon == pytest.approx(plans[1].report().epsilon, rel=1e-9)
    with pytest.raises(ValueError, match="n_rows"):
        calibrate("dp-sgld", epsilon=1.0, delta=delta, chains=2, iterations=10)


@pytest.mark.slow
def test_two_phases_share_one_budget():
    """calibrate_phases composes a warm-start phase and a main phase into one budget: the composition of both
    (re-accounted independently) spends within [0.99, 1] of it, and more than either phase alone."""
    n, delta = 100_000, 1e-5
    main = DPSGLD.noise_declaration({}, n_rows=n, total_iterations=4000, delta=delta)
    warm = events.NoiseDeclaration(parameters=lambda s: {"tau_l": s / 20},
                                   releases=lambda p: [events.gaussian_release("warm start", p["tau_l"])],
                                   noise_names=("tau_l",))
    plan = calibrate_phases([events.Phase(main, 2, 2000), events.Phase(warm, 1, 10)], epsilon=1.0, delta=delta)
    q, tau = plan.sampling_rate, plan.tau_g
    acc = dp_accounting.pld.PLDAccountant(NeighboringRelation.REPLACE_ONE)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(2 * tau)), 4000)
    acc.compose(dp_accounting.GaussianDpEvent(2 * tau / 20), 10)
    assert 0.99 <= acc.get_epsilon(delta) <= 1.0
    assert pld_reference(tau, q, 4000, delta) < 0.99
    assert [m["count"] for m in plan.report().mechanisms] == [4000, 10]


def test_sg_kernels_are_registered():
    """The three kernels are in the registry under their accounting names."""
    for cls in SG:
        assert ALGORITHMS[cls.accounting_name] is cls and cls.adapts_step_size is False


# --------------------------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_sample_private_runs_sg_kernels_end_to_end():
    """sample_private with an SG kernel: default step and metric rule, InferenceData with the SG fields, the
    calibrated plan and a PLD report in the attrs; the posterior mean is within a few reference sds on a
    small logistic model at a generous budget."""
    from stan_dp.run.pipeline import sample_private

    model = LogisticRegressionModel.simulate(n=5000, dim=2, seed=3)
    fit = sample_private(model, algorithm="dp-sghmc", epsilon=20.0, delta=1e-5, chains=2, iter_warmup=300,
                         iter_sampling=300, seed=1, show_progress=False, grad_clip=4.0)
    assert {"step_size", "noise_sd", "temperature", "friction"} <= set(fit.sample_stats.data_vars)
    assert "batch_size" not in fit.sample_stats.data_vars
    assert fit.attrs["accountant"] == "PLD (dp-accounting)" and fit.attrs["metric"] == "diag"
    assert 0.99 * 20.0 <= fit.attrs["epsilon_spent"] <= 20.0
    draws = np.concatenate([fit.posterior[v].values.reshape(2, 300, -1) for v in fit.posterior.data_vars], axis=2)
    assert np.all(np.isfinite(draws))


def test_decreasing_schedule_and_free_step_cap():
    """step_schedule='decreasing' releases step_t = step (1 + t / t0)^(-gamma); with free_steps the effective
    preconditioner never exceeds the privacy-for-free limit (temperature stays 1) even with a huge metric."""
    model = LogisticRegressionModel.simulate(n=1000, dim=2, seed=2)
    k = DPSGLD(model, sg_plan(tau_g=3.0, sampling_rate=0.5), grad_clip=2.0, sampling_rate=0.5,
               step_schedule="decreasing", decay_offset=10.0, decay_exponent=0.5)
    _, infos = run(k, np.zeros(3), 30, 0.1, np.full(3, 1e3), seed=1)
    steps = [i.extra["step_size"] for i in infos]
    assert steps[0] == pytest.approx(0.1) and steps[20] == pytest.approx(0.1 * 3.0 ** -0.5)
    assert all(i.extra["temperature"] == pytest.approx(1.0) for i in infos)
    hot = DPSGLD(model, sg_plan(tau_g=3.0, sampling_rate=0.5), grad_clip=2.0, sampling_rate=0.5, free_steps=False)
    _, infos = run(hot, np.zeros(3), 3, 0.1, np.full(3, 1e3), seed=1)
    assert infos[0].extra["temperature"] > 1.0


# ------------------------------------------------------------------------------- over-relaxed warmup windows
def euler_ar1(s2, m, eta, chains, n, seed):
    """Draws of DP-SGLD's Euler step on a 1-d N(0, s2) target with preconditioner m and step eta: the AR(1)
    x' = (1 - (eta / 2) m / s2) x + sqrt(eta m) z, started at stationarity."""
    rng = np.random.default_rng(seed)
    a = 1.0 - 0.5 * eta * m / s2
    stationary_sd = math.sqrt(eta * m / (1.0 - a * a))
    x = np.empty((chains, n))
    x[:, 0] = rng.normal(0.0, stationary_sd, chains)
    for t in range(1, n):
        x[:, t] = a * x[:, t - 1] + math.sqrt(eta * m) * rng.normal(size=chains)
    return [x[c][:, None] for c in range(chains)]


def test_sgld_refine_metric_reads_the_curvature_off_an_over_relaxed_window():
    """With m = 20 s2 and eta = 0.17 the Euler chain alternates sides (lag-1 autocorrelation -0.7) and its
    variance is eta m / (1 - a^2) ~ 6.7 s2; refine_metric must return s2 (tolerance: the lag-1 estimate from 4 x 400 draws has
    sd ~ sqrt((1 - a^2) / 1600) ~ 0.018 on 1 - a = 1.7, i.e. ~1 %; 10 % allowed). On a window at the right
    scale (m = s2, autocorrelation 0.915) the variance estimate must pass through unchanged."""
    from stan_dp.samplers.adaptation import lag1_autocorrelation, regularized_variance

    model = LogisticRegressionModel.simulate(n=100, dim=1, seed=1)
    kernel = DPSGLD(model, sg_plan(tau_g=0.0), grad_clip=1.0)
    s2, eta = 0.01, 0.17
    hot = euler_ar1(s2, 20 * s2, eta, chains=4, n=400, seed=5)
    estimate = regularized_variance(np.concatenate(hot))
    assert estimate[0] > 5 * s2  # the plain estimate is far too wide
    lag1 = lag1_autocorrelation(hot)
    assert lag1[0] < -0.5
    refined = kernel.refine_metric(estimate, lag1, np.full(1, 20 * s2), eta)
    assert refined[0] == pytest.approx(s2, rel=0.1)
    calm = euler_ar1(s2, s2, eta, chains=4, n=400, seed=6)
    estimate = regularized_variance(np.concatenate(calm))
    assert kernel.refine_metric(estimate, lag1_autocorrelation(calm), np.full(1, s2), eta) == pytest.approx(estimate)


@pytest.mark.slow
def test_sgld_at_high_epsilon_is_not_over_relaxed_after_warmup():
    """End to end: the README logistic model (N = 10,000, alpha = -0.5, beta = (1, -1, 0.5)) at epsilon 100 from
    uniform(-2, 2) inits. Before refine_metric the transient inflated the first window's variance, the chain
    locked into over-relaxation and the released draws were ~5.7 posterior sds wide (lag-1 autocorrelation
    -0.75 to -0.96). Checks: the sampling draws' lag-1 autocorrelation is positive in every coordinate, and
    their sd is within a factor 1.6 of the Laplace-approximation sd (observed after the fix: 1.04-1.21)."""
    from stan_dp.samplers.adaptation import lag1_autocorrelation
    from stan_dp.run.pipeline import sample_private

    rng = np.random.default_rng(1)
    x = rng.normal(size=(10_000, 3))
    y = (rng.uniform(size=10_000) < 1 / (1 + np.exp(-(-0.5 + x @ np.array([1.0, -1.0, 0.5]))))).astype(int)
    model = LogisticRegressionModel(x, y, prior_sd=2.5)
    fit = sample_private(model, algorithm="dp-sgld", epsilon=100.0, delta=1e-5, chains=2, iter_warmup=500,
                         iter_sampling=300, seed=1, show_progress=False, grad_clip=5.0)
    draws = np.concatenate([fit.posterior["alpha"].values[..., None], fit.posterior["beta"].values], axis=2)
    assert np.all(lag1_autocorrelation([draws[0], draws[1]]) > 0)
    # Laplace sd at the pooled mean: the inverse Hessian of the negative log posterior
    theta = draws.reshape(-1, 4).mean(axis=0)
    design = np.column_stack([np.ones(len(y)), x])
    p = 1 / (1 + np.exp(-(design @ theta)))
    hessian = (design * (p * (1 - p))[:, None]).T @ design + np.eye(4) / 2.5 ** 2
    laplace_sd = np.sqrt(np.diag(np.linalg.inv(hessian)))
    ratio = draws.reshape(-1, 4).std(axis=0) / laplace_sd
    assert np.all(ratio < 1.6) and np.all(ratio > 0.6), ratio


@pytest.mark.parametrize("cls", SG)
def test_anchored_default_step_uses_the_difference_clip_up_to_its_cap(cls):
    """The default step rule (module doc): plain 2 rho C q / (1 - q) (C = 2 for SGLD); anchored ((L / C_d)^2 > 1),
    raised by (L / C_d)^2 / d but not past ANCHORED_STEP_CAP, and never below the plain rule; a kernel built on
    an anchored run's options (diff_clip given) uses it, and so does the run-length rule's T* (through the same
    classmethod: its T* is inversely proportional to the step)."""
    from stan_dp.samplers.sgmcmc import ANCHORED_STEP_CAP

    opts = cls.option_spec.validate({"grad_clip": 4.0}, require=False)
    friction = 2.0 if cls.friction_option is None else opts[cls.friction_option]
    for q in (0.002, 0.02):
        plain = 2.0 * opts["gradient_noise_ratio"] * friction * q / (1.0 - q)
        assert cls.minibatch_step(q, opts) == pytest.approx(plain)
        assert cls.minibatch_step(q, opts, clip_ratio=1.0, dim=5) == pytest.approx(plain)
        assert cls.minibatch_step(q, opts, clip_ratio=10.0, dim=5) == pytest.approx(2.0 * plain)
        assert cls.minibatch_step(q, opts, clip_ratio=1e6, dim=5) == pytest.approx(ANCHORED_STEP_CAP)
        assert cls.minibatch_step(q, opts, clip_ratio=0.5, dim=5) == pytest.approx(plain)
    big = 0.5  # a plain step above the cap is kept (small N: q near 1)
    assert cls.minibatch_step(big, opts, clip_ratio=1e6, dim=5) == pytest.approx(
        min(1.0, 2.0 * opts["gradient_noise_ratio"] * friction * big / (1.0 - big)))
    assert cls.minibatch_step(1.0, opts, clip_ratio=1e6, dim=5) == 1.0

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2000, 2))
    model = LogisticRegressionModel(x, (rng.random(2000) < 0.5).astype(int))
    q = 0.01
    anchored = cls(model, sg_plan(tau_g=1.0, sampling_rate=q), grad_clip=4.0, diff_clip=0.04, sampling_rate=q)
    plain_kernel = cls(model, sg_plan(tau_g=1.0, sampling_rate=q), grad_clip=4.0, sampling_rate=q)
    assert plain_kernel.default_step_size == pytest.approx(cls.minibatch_step(q, opts))
    assert anchored.default_step_size == pytest.approx(
        cls.minibatch_step(q, opts, clip_ratio=(4.0 / 0.04) ** 2, dim=model.dim))
