"""dp-ssp's noise-aware posterior written as Stan (stan_dp.methods.dp_ssp.ssp_program), the program generator
(stan_dp.stan.posterior_program) and the sampling loop that runs until convergence (stan_dp.methods.release_posterior).

The slow tests use the posterior program of the bundled linear program with declared bounds (the one dp-ssp
generates for it in a user's run, so one compile serves them and the end-to-end tests) and check its log density
against the exact likelihood of the rows (the NumPy model with the same priors), its design prior against the
closed form, and its draws against the non-private posterior when the release noise is negligible."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stan_dp.likelihood import PriorProgram
from stan_dp.models.reference_models import LINEAR_REGRESSION_PROGRAM, LinearRegressionModel
from stan_dp.privacy.moments import box_centre_half_width, moment_entries
from stan_dp.methods import release_posterior as rp
from stan_dp.stan.nuts_service import StanDraws
from stan_dp.methods.dp_ssp.ssp import BOUND_SDS, SSP_TITLE
from stan_dp.methods.dp_ssp.ssp_design import design_prior_from_bounds
from stan_dp.methods.dp_ssp.ssp_program import SSP_PREFIX, choose_centred, ssp_data, ssp_inits, ssp_pieces
from stan_dp.stan.posterior_program import PosteriorProgramError, coefficient_expressions, posterior_program_text


MODELS = Path(__file__).resolve().parents[2] / "stan_models"


def _model(n=300, k=2, seed=0, sigma=0.8):
    """Rows inside the bundled program's declared bounds (x in [-2, 2], y in [-6, 6]) and the NumPy model with its
    priors (normal(0, 5) on alpha and beta, half-normal(0, 5) on sigma)."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.5, 1.5, size=(n, k))
    y = 0.3 + x @ np.linspace(0.5, -0.5, k) + sigma * rng.standard_normal(n)
    assert np.all(np.abs(y) <= 6)
    return LinearRegressionModel(x, y, prior_sd=5.0, sigma_prior_sd=5.0)


def _pieces():
    terms = coefficient_expressions(("alpha",), (("beta", True),), "sigma")
    return ssp_pieces(**terms, title=SSP_TITLE)


def test_coefficient_expressions_stack_scalars_and_vectors():
    """Scalar slopes are wrapped into one-element vectors and stacked with vector slopes in column order; the
    intercept's references are summed (0 when there is none)."""
    out = coefficient_expressions(("a", "b[1]"), (("c", False), ("beta", True)), "s")
    assert out == {"intercept": "(a) + (b[1])", "slopes": "append_row(rep_vector(c, 1), beta)", "scale": "(s)"}
    assert coefficient_expressions((), (("beta", True),), "s")["intercept"] == "0"
    with pytest.raises(ValueError, match="at least one covariate"):
        coefficient_expressions(("a",), (), "s")


def test_the_program_keeps_the_users_blocks_adds_the_release_and_drops_generated_quantities():
    """The generated text holds the user's data, parameters and model statements unchanged, the added data and
    parameters (all with the prefix), no generated quantities, and a title; a user name with the prefix is
    refused by name."""
    user = LINEAR_REGRESSION_PROGRAM + "generated quantities {\n  real z = alpha;\n}\n"
    prior = PriorProgram(text=user, data={}, name="lin")
    text = posterior_program_text(prior, _pieces())
    assert text.startswith("// " + SSP_TITLE) and "N = " not in SSP_TITLE  # no row count: the text is the cache key
    for line in ("vector[N] y;", "real<lower=0> sigma;", "y ~ normal(alpha + x * beta, sigma);",
                 "int<lower=1> dpssp_N;", "dpssp_V = multiply_lower_tri_self_transpose(dpssp_V_L);", "dpssp_Z ~ normal(dpssp_s, dpssp_sd);"):
        assert line in text
    assert "generated quantities" not in text and "real z = alpha" not in text
    assert text.index("data {") < text.index("parameters {") < text.index("model {")
    with pytest.raises(PosteriorProgramError, match="dpssp_x"):
        posterior_program_text(PriorProgram(text=user.replace("real alpha;", "real alpha;\n  real dpssp_x;"),
                                            data={}, name="lin"), _pieces())


class _FakeModel:
    """A stand-in for a bridgestan model of a posterior program: two user parameters and one added one."""

    def param_names(self):
        return ["a", "b", f"{SSP_PREFIX}z"]

    def param_unconstrain(self, row):
        return np.asarray(row, dtype=float)


def test_sampling_stops_at_the_first_round_that_passes_and_records_every_round(monkeypatch):
    """Round 1 returns chains stuck at different values (R-hat fails), round 2 well-mixed draws: the loop runs two
    rounds (the second twice as long, thinned by 2 to the same number of kept draws), reports converged and
    records both rounds with their diagnostics and no timing."""
    calls = []
    rng = np.random.default_rng(0)

    def fake(model, library, run, **_):
        calls.append(run)
        n = run.iter_sampling
        if len(calls) == 1:
            values = np.stack([np.full((n, 3), float(c)) + 0.01 * rng.standard_normal((n, 3)) for c in range(4)])
        else:
            values = rng.standard_normal((4, n, 3))
        stats = {k: np.zeros((4, n)) for k in ("lp", "acceptance_rate", "step_size", "tree_depth", "n_steps",
                                               "diverging", "energy")}
        return StanDraws(names=["a", "b", "dpssp_z"], values=values, stats=stats)

    monkeypatch.setattr(rp, "run_stan_nuts", fake)
    policy = rp.ConvergencePolicy(warmup=50, draws=400, max_rounds=4, time_cap=1e6)
    out = rp.sample_until_converged(_FakeModel(), "lib", prefix=SSP_PREFIX, dim=2, chains=4,
                                    rng=np.random.default_rng(1), policy=policy, show_progress=False)
    assert [c.iter_sampling for c in calls] == [400, 800] and [c.iter_warmup for c in calls] == [50, 100]
    assert out.converged and out.stopped_by == "converged" and len(out.rounds) == 2
    assert out.rounds[0].max_rhat > 1.5 and out.rounds[1].max_rhat < 1.01 and out.rounds[1].thin == 2
    assert out.draws.shape == (4, 400, 2)
    assert "time" not in out.record() and '"stopped_by": "converged"' in out.record()


def test_the_compute_cap_stops_before_a_round_that_would_pass_it(monkeypatch):
    """With a cap of zero seconds the loop runs one round only and says it stopped at the cap, not converged."""
    def stuck(model, library, run, **_):
        n = run.iter_sampling
        values = np.stack([np.full((n, 3), float(c)) for c in range(2)]) + np.linspace(0, 1e-3, n)[None, :, None]
        stats = {k: np.zeros((2, n)) for k in ("lp", "acceptance_rate", "step_size", "tree_depth", "n_steps",
                                               "diverging", "energy")}
        return StanDraws(names=["a", "b", "dpssp_z"], values=values, stats=stats)

    monkeypatch.setattr(rp, "run_stan_nuts", stuck)
    out = rp.sample_until_converged(_FakeModel(), "lib", prefix=SSP_PREFIX, dim=2, chains=2,
                                    rng=np.random.default_rng(1),
                                    policy=rp.ConvergencePolicy(warmup=10, draws=50, time_cap=0.0),
                                    show_progress=False)
    assert not out.converged and out.stopped_by == "compute cap" and len(out.rounds) == 1


# ---------------------------------------------------------------------------------------------- compiled
def _exact_statistics(model, lo, hi):
    centre, _ = box_centre_half_width(lo, hi)
    return moment_entries(np.column_stack([model.X, model.y]) - centre).sum(axis=0)


def _bundled_prior(model):
    """The prior program a run of the bundled linear_bounded.stan on ``model``'s rows hands to dp-ssp (its text,
    name and public data): the same generated posterior program, so the same compiled library."""
    from stan_dp import DPStanModel

    program = DPStanModel(MODELS / "linear_bounded.stan", show_progress=False)
    data = {"N": model.n_rows, "K": model.X.shape[1], "x": model.X.tolist(), "y": model.y.tolist()}
    return program.row_likelihood(data).prior_program


def _posterior(model, lo, hi, released, sds, *, centred, design):
    prior = _bundled_prior(model)
    data = {**prior.data, **ssp_data(released=released, noise_sds=sds, n_rows=model.n_rows, lower=lo, upper=hi,
                                     centred=centred, design=design)}
    return rp.load_posterior_program(prior, _pieces(), data, show_progress=False)


def _latent_at(model, lo, hi):
    """The added parameters (centred form, constrained values in Stan's order) that reproduce the rows' exact
    statistics."""
    centre, half = box_centre_half_width(lo, hi)
    z = np.column_stack([model.X, model.y]) - centre
    n, k = model.X.shape
    hx = half[:k]
    mean = z[:, :k].mean(0) / hx
    cov = np.cov(z[:, :k] / hx, rowvar=False, bias=True).reshape(k, k)
    chol = np.linalg.cholesky(cov)
    rows, cols = np.tril_indices(k, -1)
    order = np.lexsort((cols, rows))
    design = np.column_stack([np.ones(n), z[:, :k]])
    t = design.T @ z[:, k]
    rss = float(z[:, k] @ z[:, k] - t @ np.linalg.solve(design.T @ design, t))
    return np.concatenate([mean, t, [math.log(rss)], np.log(np.diag(chol)), chol[rows[order], cols[order]]])


@pytest.mark.slow
@pytest.mark.stan
def test_given_the_exact_statistics_the_program_is_the_rows_likelihood_plus_the_prior():
    """Centred form, latent set to the rows' exact statistics: the program's log density at several theta differs
    from log p0(theta) + sum_i l_i(theta) (the NumPy model's) by one constant: the statistics are sufficient and
    the law of (T, R) given the design is the exact normal likelihood."""
    model = _model(n=80, k=2, seed=3)
    lo, hi = np.array([-2.0, -2.0, -5.0]), np.array([2.0, 2.0, 5.0])
    stats = _exact_statistics(model, lo, hi)
    sds = np.full(stats.size, 0.5)
    stan, _, _ = _posterior(model, lo, hi, stats, sds, centred=True, design=None)
    latent = _latent_at(model, lo, hi)
    rng = np.random.default_rng(4)
    gaps = []
    for _ in range(5):
        theta = rng.normal(0, 0.5, model.dim)
        constrained = model.constrain(theta)
        values = np.concatenate([[constrained["alpha"]], constrained["beta"], [constrained["sigma"]], latent])
        u = stan.param_unconstrain(values)
        assert np.allclose(u[:model.dim], theta)
        expected = model.log_prior(theta) + float(np.sum(model.row_log_lik(theta)))
        gaps.append(stan.log_density(u, propto=False, jacobian=True) - expected)
    assert np.ptp(gaps) < 1e-7


@pytest.mark.slow
@pytest.mark.stan
def test_the_design_prior_enters_once_as_the_closed_form():
    """Between two points of the latent design, the program's log density with the normal design prior changes
    by the change of the closed-form design density (``DesignPrior``, in the release's units) plus the change
    of the flat-prior program: the prior enters once and in the right units."""
    model = _model(n=80, k=2, seed=5)
    lo, hi = np.array([-2.0, -2.0, -5.0]), np.array([2.0, 2.0, 5.0])
    _, half = box_centre_half_width(lo, hi)
    stats = _exact_statistics(model, lo, hi)
    sds = np.full(stats.size, 2.0)
    prior = design_prior_from_bounds(model.n_rows, half[:2], BOUND_SDS)
    normal, _, _ = _posterior(model, lo, hi, stats, sds, centred=False, design=prior)
    flat, _, _ = _posterior(model, lo, hi, stats, sds, centred=False, design=None)
    rng = np.random.default_rng(6)
    theta = np.array([0.1, 0.4, -0.2, math.log(0.8)])
    changes = []
    designs = []
    for _ in range(2):
        mean = rng.normal(0, 0.1, 2)
        a = rng.normal(0, 0.1, (2, 2))
        cov = np.diag([0.3, 0.2]) + a @ a.T
        chol = np.linalg.cholesky(cov)
        values = np.concatenate([[theta[0]], theta[1:3], [math.exp(theta[3])], mean, np.zeros(3),
                                 [math.log(model.n_rows - 3.0)], np.log(np.diag(chol)), [chol[1, 0]]])
        u = normal.param_unconstrain(values)
        changes.append(normal.log_density(u, propto=False) - flat.log_density(u, propto=False))
        sxx = np.empty((3, 3))
        sxx[0, 0] = model.n_rows
        sxx[0, 1:] = sxx[1:, 0] = model.n_rows * half[:2] * mean
        sxx[1:, 1:] = model.n_rows * np.outer(half[:2], half[:2]) * (cov + np.outer(mean, mean))
        designs.append(prior(sxx))
    assert changes[1] - changes[0] == pytest.approx(designs[1] - designs[0], rel=1e-8, abs=1e-8)


def _sample(model, lo, hi, stats, sds, *, centred, seed, warmup=500):
    stan, library, _ = _posterior(model, lo, hi, stats, sds, centred=centred, design=None)
    added = ssp_data(released=stats, noise_sds=sds, n_rows=model.n_rows, lower=lo, upper=hi, centred=centred,
                     design=None)
    return rp.sample_until_converged(
        stan, library, prefix=SSP_PREFIX, dim=model.dim, chains=4, rng=np.random.default_rng(seed),
        policy=rp.ConvergencePolicy(warmup=warmup, draws=500, max_rounds=3),
        inits=lambda r: ssp_inits(added, jitter=r), show_progress=False)


@pytest.mark.slow
@pytest.mark.stan
def test_negligible_noise_gives_the_non_private_posterior():
    """With release noise sd 0.01 on every entry (the centred form, which the rule picks there) the converged
    draws follow the non-private posterior: coefficient means within 4 Monte Carlo standard errors plus 0.05
    posterior sd of the exact flat-prior posterior (N = 1500: the prior sd 5 moves it by far less), sds within
    15 %, sigma's mean within 0.1 of its sd plus 4 Monte Carlo errors; the loop reports convergence.

    Why 0.01 is negligible: the entries are sums over 1,500 rows; a change of 0.01 in X'y moves a coefficient by
    about 0.01 / (N var x) = 1e-5, some 4e-4 of its posterior sd (about 0.02). Far smaller noise (1e-4) pins the
    latent statistics so tightly that NUTS needs three rounds (about 140 s here) for the same answer."""
    model = _model(n=1500, k=2, seed=7)
    lo, hi = np.array([-2.0, -2.0, -6.0]), np.array([2.0, 2.0, 6.0])
    stats = _exact_statistics(model, lo, hi)
    sds = np.full(stats.size, 0.01)
    assert choose_centred(stats, model.n_rows, sds)
    out = _sample(model, lo, hi, stats, sds, centred=True, seed=8)
    assert out.converged
    draws = out.draws.reshape(-1, model.dim)
    design = np.column_stack([np.ones(model.n_rows), model.X])
    coef = np.linalg.solve(design.T @ design, design.T @ model.y)
    resid = model.y - design @ coef
    s2 = resid @ resid / (model.n_rows - 3)
    sd = np.sqrt(np.diag(s2 * np.linalg.inv(design.T @ design)))
    ess = out.rounds[-1].min_ess_bulk
    mcse = sd / math.sqrt(ess)
    assert np.all(np.abs(draws[:, :3].mean(0) - coef) < 4 * mcse + 0.05 * sd)
    assert np.allclose(draws[:, :3].std(0), sd, rtol=0.15)
    sigma_draws = np.exp(draws[:, 3])
    assert abs(sigma_draws.mean() - math.sqrt(s2)) < 0.1 * sigma_draws.std() + 4 * sigma_draws.std() / math.sqrt(ess)


@pytest.mark.slow
@pytest.mark.stan
def test_the_centred_and_non_centred_forms_are_one_posterior():
    """On one noisy release (noise sd 20 on every entry, 300 rows) both latent forms converge and agree: every
    parameter's mean within 4 combined Monte Carlo standard errors, its sd within 15 %."""
    model = _model(n=300, k=2, seed=9)
    lo, hi = np.array([-2.0, -2.0, -6.0]), np.array([2.0, 2.0, 6.0])
    rng = np.random.default_rng(10)
    stats = _exact_statistics(model, lo, hi)
    sds = np.full(stats.size, 20.0)
    released = stats + sds * rng.standard_normal(stats.size)
    runs = [_sample(model, lo, hi, released, sds, centred=c, seed=11) for c in (True, False)]
    assert all(r.converged for r in runs)
    (a, b) = (r.draws.reshape(-1, model.dim) for r in runs)
    ess = min(r.rounds[-1].min_ess_bulk for r in runs)
    se = np.sqrt(a.var(0) / ess + b.var(0) / ess)
    assert np.all(np.abs(a.mean(0) - b.mean(0)) < 4 * se)
    assert np.allclose(a.std(0), b.std(0), rtol=0.15)
