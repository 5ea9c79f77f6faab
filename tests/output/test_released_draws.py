"""Released draws that never hide a wrong answer: diverged chains are screened out before anything is published,
the noise-aware correction keeps the chains' R-hat, and the warnings describe what was released.

NumPy reference models and hand-made chains only (no Stan compilation, no sampler run): each test takes well
under a second.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from stan_dp.models.reference_models import GaussianMeanModel, LinearRegressionModel
from stan_dp.output.arviz_compat import rhat_ess
from stan_dp.output.diagnostics import ConvergenceWarning
from stan_dp.output.inference_data import RunRecord, build_inference_data
from stan_dp.output.plausible import PRIOR_DROP, attach_screen, prior_reference, screen_chains
from stan_dp.output.run_result import ChainResult, RunResult
from stan_dp.methods.kernels.kernel_run import released_draws


class Report:
    """The least a privacy report must offer to build_inference_data."""

    epsilon, delta = 10.0, 1e-5
    accountant = "test accountant"
    neighbouring_relation = "substitution of one row (N public)"
    mechanisms: list = []

    def to_json(self) -> str:
        return json.dumps({"epsilon": self.epsilon, "delta": self.delta})


def run_result(draws: np.ndarray) -> RunResult:
    """A RunResult holding the given (chains, n, dim) unconstrained draws and one sample statistic."""
    chains, n, dim = draws.shape
    out = [ChainResult(draws=draws[c], stats={"accepted": np.ones(n)}, warmup_draws=None, warmup_stats={},
                       n_warmup=0, n_sampling=n, step_size=0.1, metric=np.ones(dim), init=np.zeros(dim))
           for c in range(chains)]
    return RunResult(chains=out, dim=dim, iter_warmup=0, iter_sampling=n, save_warmup=False, interrupted=False,
                     seeded=True, metric_kind="unit", target_accept=0.8, initial_step_size=0.1, adapt_engaged=False,
                     init_description="zero", stat_names=["accepted"])


def regression() -> LinearRegressionModel:
    """y ~ N(alpha + x beta, sigma): prior sd 10 on alpha and beta, half-normal(0, 10) on sigma."""
    return LinearRegressionModel.simulate(200, 1, seed=2)


def ar1_chains(chains: int, n: int, dim: int, phi: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    e = rng.standard_normal((chains, n, dim))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for k in range(1, n):
        x[:, k] = phi * x[:, k - 1] + np.sqrt(1 - phi ** 2) * e[:, k]
    return x


def test_diverged_chains_are_never_released_as_non_finite_or_absurd_values():
    """Of four chains on a linear regression, one reaches log sigma = 627 (sigma ~ 1e272), one a NaN and one a
    coefficient 2000 prior sds out: each is left out of posterior and sample_stats with its reason, the kept chain
    is released unchanged, the attrs and a ConvergenceWarning say so."""
    model = regression()
    rng = np.random.default_rng(0)
    draws = 0.1 * rng.standard_normal((4, 60, model.dim))
    draws[1, 30:, -1] = 627.0
    draws[2, 40, 0] = np.nan
    draws[3, 5:, 1] = 20_000.0
    result = run_result(draws)
    screen, shift, share = released_draws(result.draws_array(), model, None)
    assert shift is None and share == 1.0 and screen.kept == [0] and sorted(screen.reasons) == [1, 2, 3]
    assert "draw 31" in screen.reasons[1] and "not finite" in screen.reasons[2]
    assert "below the prior's highest" in screen.reasons[3]
    fit = build_inference_data(result, model, RunRecord("test", {}, Report()), screen=screen)
    with pytest.warns(ConvergenceWarning, match=r"3 of 4 chains diverged and are left out"):
        attach_screen(fit, screen)
    sigma = np.asarray(fit.posterior["sigma"].values)
    assert sigma.shape == (1, 60) and np.all(np.isfinite(sigma))
    np.testing.assert_allclose(sigma, np.exp(draws[0, :, -1])[None])
    assert np.asarray(fit.sample_stats["accepted"].values).shape == (1, 60)
    described = json.loads(fit.attrs["released_draws"])
    assert described["released_chains"] == [1] and set(described["diverged_chains"]) == {"2", "3", "4"}
    assert fit.attrs["chains"] == 4  # the privacy attrs still count every chain that ran


def test_a_draw_that_overflows_when_constrained_is_absurd_and_a_large_unconstrained_value_is_not():
    """With a flat prior nothing bounds a coordinate, but log sigma = 720 constrains to sigma = inf: that chain is
    left out; a flat-prior coefficient of 5000 (an intercept in raw units) constrains finitely and is kept."""

    class FlatRegression:
        """alpha flat, sigma > 0 flat (the Jacobian only), as in a Stan program without prior statements."""
        dim = 2

        def log_prior(self, u):
            return float(u[1])

        def log_prior_grad(self, u):
            return float(u[1]), np.array([0.0, 1.0])

        def constrain(self, u):
            with np.errstate(over="ignore"):
                return {"alpha": np.float64(u[0]), "sigma": np.exp(np.float64(u[1]))}

    draws = np.zeros((2, 10, 2))
    draws[0, :, 0] = 5000.0
    draws[1, 4:, 1] = 720.0
    screen = screen_chains([draws], FlatRegression())
    assert screen.kept == [0] and "constrains to a non-finite value" in screen.reasons[1]


def test_the_prior_rule_drops_a_chain_far_out_in_the_prior_tail_and_keeps_a_plausible_one():
    """A chain whose sigma reaches 150 prior scales (log prior far more than PRIOR_DROP below the prior's highest)
    is dropped; one at 20 prior scales, and one at 1e-8 (a legitimately precise posterior), are kept."""
    model = regression()  # sigma prior half-normal(0, 10)
    draws = np.zeros((3, 20, model.dim))
    draws[0, :, -1] = np.log(1500.0)
    draws[1, :, -1] = np.log(200.0)
    draws[2, :, -1] = np.log(1e-8)
    reference = prior_reference(model, model.dim)
    assert reference == pytest.approx(model.log_prior(np.array([0.0, 0.0, np.log(10.0)])), abs=1e-4)
    screen = screen_chains([draws], model, reference=reference)
    assert screen.kept == [1, 2] and "below the prior's highest" in screen.reasons[0]
    assert model.log_prior(draws[0, 0]) < reference - PRIOR_DROP


def test_when_every_chain_diverged_only_the_shared_plausible_prefix_is_released():
    """Every chain goes non-finite at some draw (12, 30, 45): all chains are kept up to draw 12 (the first absurd
    draw of any), and the warning says that the released draws are not posterior draws."""
    model = GaussianMeanModel(np.zeros((10, 2)), obs_cov=1.0, prior_mean=0.0, prior_cov=1.0)
    draws = np.random.default_rng(1).standard_normal((3, 50, 2))
    for c, k in enumerate((30, 11, 45)):
        draws[c, k:, 0] = np.inf
    screen = screen_chains([draws], model)
    assert screen.kept == [0, 1, 2] and screen.draws == 11
    assert "every chain diverged" in screen.sentence() and "not posterior draws" in screen.sentence()
    assert np.all(np.isfinite(screen.select(draws)))


def test_noise_aware_release_of_non_mixed_chains_keeps_their_rhat_and_drops_a_diverged_chain():
    """Non-mixed chains (AR(1), chain offsets: R-hat > 1.1) plus one diverged chain, released noise-aware with a
    large gradient noise: the diverged chain is left out of both groups, every released value is finite, and
    the az.summary R-hat and ESS of the released posterior equal the chains' (chain_posterior) within 0.02 and 1 %."""
    model = GaussianMeanModel(np.zeros((10, 2)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    x = 0.3 * ar1_chains(5, 400, 2, 0.9, seed=4)
    x[:4, :, 0] += np.array([0.0, 0.3, -0.4, 0.5])[:, None]
    x[4, 200:, 1] = np.nan
    result = run_result(x)
    screen, shift, share = released_draws(result.draws_array(), model, 5.0)
    assert screen.kept == [0, 1, 2, 3] and share == 1.0
    fit = build_inference_data(result, model, RunRecord("test", {}, Report()),
                               noise_aware_draws=result.draws_array() + shift, screen=screen)
    released = np.asarray(fit.posterior["theta"].values)
    chains = np.asarray(fit.chain_posterior["theta"].values)
    assert released.shape == chains.shape == (4, 400, 2) and np.all(np.isfinite(released))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in range(2):
            r_released, bulk_released, tail_released = rhat_ess(released[..., j])
            r_chains, bulk_chains, tail_chains = rhat_ess(chains[..., j])
            assert abs(r_released - r_chains) < 0.02
            assert bulk_released == pytest.approx(bulk_chains, rel=0.01)
            assert tail_released == pytest.approx(tail_chains, rel=0.01)
        assert rhat_ess(chains[..., 0])[0] > 1.1
    assert np.all(released.std(axis=(0, 1)) > 1.2 * chains.std(axis=(0, 1)))


def test_a_noise_aware_widening_that_would_leave_the_prior_is_capped_and_said():
    """Wide, unconverged chains on a regression (coefficient spread about 3, prior sd 10) with a gradient noise sd
    of 50: the first-order widening would multiply deviations by about 150 and put draws hundreds of prior sds
    out. The largest share that keeps every released draw plausible is applied instead (below 1), the chains
    stay released, R-hat is still the chains', and the words say that the intervals do not include all of the
    noise."""
    from stan_dp.methods.kernels.kernel_run import noise_aware_cap_message

    model = regression()
    x = 3.0 * ar1_chains(2, 200, model.dim, 0.9, seed=8)
    x[..., -1] *= 0.1  # log sigma stays moderate
    screen, shift, share = released_draws(x, model, 50.0)
    assert screen.kept == [0, 1] and 0.0 < share < 0.5
    released = x + shift
    assert screen_chains([released], model, reference=screen.reference).everything_kept
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for j in range(model.dim):
            assert rhat_ess(released[..., j])[0] == pytest.approx(rhat_ess(x[..., j])[0], abs=1e-9)
    assert "do NOT include all of the privacy noise" in noise_aware_cap_message(share)


def test_stuck_chain_advice_does_not_claim_a_narrow_spread():
    """The verdict for chains that sit near their start says their spread is not the posterior's without calling
    it narrow (the noise-aware group can be wider than the chains, a diverged run wider still)."""
    from stan_dp.output.diagnostics import Convergence

    for start in ("inits", "anchor"):
        verdict = Convergence(chains=4, draws_per_chain=200, max_rhat=3.0, min_ess_bulk=5.0, min_ess_tail=5.0,
                              ess_min=400.0, failing=["beta[1]"], near_start_chains=[1, 2, 3, 4], start=start)
        assert verdict.stuck
        text = verdict.message()
        assert "narrow" not in text and "spread is not the posterior's" in text


def test_dp_laplace_says_its_draws_are_independent_and_summary_prints_it(capsys):
    """A dp-laplace fit states in attrs that its draws are independent (R-hat and ESS then mean nothing), carries
    the released-draws screen, and `stan-dp summary` prints that line below the az.summary table."""
    from stan_dp import sample_private
    from stan_dp.cli import _print_summary

    x = np.random.default_rng(3).normal(0.4, 1.0, size=(2000, 1))
    model = GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sample_private(model, algorithm="dp-laplace", epsilon=3.0, delta=1e-5, chains=2, iter_sampling=50,
                             seed=1, show_progress=False, grad_clip=5.0)
    assert fit.attrs["draw_dependence"].startswith("independent")
    assert json.loads(fit.attrs["released_draws"])["released_chains"] == [1, 2]
    _print_summary(fit)
    out = capsys.readouterr().out
    assert "Draws: independent" in out and out.index("r_hat") < out.index("Draws: independent")


def test_sample_private_leaves_a_diverged_chain_out_of_the_fit(monkeypatch):
    """The whole path (execute -> publish) with the chains replaced by hand-made ones, chain 2 reaching NaN: the
    fit's posterior and sample_stats hold chains 1 and 3 only, every value finite, the convergence verdict is
    computed on them, and a ConvergenceWarning names chain 2."""
    from stan_dp import sample_private
    from stan_dp.methods.kernels import kernel_run

    model = GaussianMeanModel(np.zeros((500, 2)), obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)
    draws = 0.05 * ar1_chains(3, 100, 2, 0.5, seed=6)
    draws[1, 60:, 0] = np.nan

    def fake_run_chains(likelihood, kernel, settings, **_):
        return run_result(draws)

    monkeypatch.setattr(kernel_run, "run_chains", fake_run_chains)
    with pytest.warns(ConvergenceWarning) as record:
        fit = sample_private(model, algorithm="penalty", epsilon=3.0, delta=1e-5, chains=3, iter_warmup=10,
                             iter_sampling=100, seed=1, show_progress=False, ratio_clip=2.0)
    theta = np.asarray(fit.posterior["theta"].values)
    assert theta.shape == (2, 100, 2) and np.all(np.isfinite(theta))
    np.testing.assert_allclose(theta, draws[[0, 2]])
    assert json.loads(fit.attrs["convergence"])["chains"] == 2
    assert any("chain 2: draw 61 is not finite" in str(w.message) for w in record)
