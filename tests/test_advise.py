"""stan_dp.advise on NumPy models: per-algorithm scores, clip fractions on public data, no hidden reads."""
import argparse

import numpy as np
import pytest

from stan_dp.tools.advise import add_advise_parser, advise, clip_fractions
from stan_dp.models.reference_models import GaussianMeanModel


@pytest.fixture(scope="module")
def public():
    """A public 2-d Gaussian data set with unit observation noise (per-row gradients x_i - theta, rarely above 5)."""
    x = np.random.default_rng(3).normal(size=(2000, 2)) + np.array([0.5, -0.3])
    return GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)


def test_clip_fractions_count_rows_above_the_bound(public):
    """At the posterior mean the per-row gradients are obs_prec (x_i - theta); the fraction above a bound equals
    the direct count, and a huge bound clips nothing."""
    theta = public.posterior_mean()
    draws = np.tile(theta, (1, 3, 1))
    _, grads = public.row_log_lik_grad(theta)
    b = float(np.median(np.linalg.norm(grads, axis=1)))
    out = clip_fractions(public, draws, {"ratio_clip": b, "grad_clip": 1e9}, points=3)
    assert out["ratio_clip"] == pytest.approx(np.mean(np.linalg.norm(grads, axis=1) > b))
    assert out["grad_clip"] == 0.0


def test_advise_scores_candidates_and_says_it_costs_no_privacy(public):
    """A short advise run scores penalty and auto against the analytic posterior; at epsilon 50 on a 2-d
    Gaussian with ratio_clip 5 (rarely binding) the best candidate is accurate: max error < 1 reference sd
    (penalty MH at this budget moves about 0.1 posterior sd per iteration, so 300 draws per chain give a Monte
    Carlo error of a few tenths of an sd; the bound leaves a wide margin)."""
    advice = advise(public, epsilon=50.0, delta=1e-5, chains=2, iter_warmup=300, iter_sampling=300,
                    algorithms=["penalty"], ratio_clip=5.0)
    names = [r["algorithm"] for r in advice.rows]
    assert names == ["penalty", "auto"] and advice.auto_choice == "penalty"
    assert advice.recommended == "penalty"
    best = min(r["max_mean_err_sd"] for r in advice.rows)
    assert best < 1.0
    assert set(advice.clip_fractions) == {"ratio_clip"}
    assert "costs no privacy" in str(advice)
    assert (advice.settings["iter_warmup"], advice.settings["iter_sampling"]) == (300, 300)  # the lengths run


def test_advise_rejects_bad_bounds(public):
    with pytest.raises(ValueError, match="clip bounds"):
        advise(public, epsilon=1.0, delta=1e-5, leapfrog_steps=3)
    with pytest.raises(ValueError, match="at least one public clip bound"):
        advise(public, epsilon=1.0, delta=1e-5)


def test_advise_parser_registers():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_advise_parser(sub)
    args = parser.parse_args(["advise", "m.stan", "--data", "d.json", "--epsilon", "3", "--delta", "1e-5",
                              "--option", "ratio_clip=2"])
    assert args.func.__name__ == "run_advise" and args.option == ["ratio_clip=2"]
    assert args.iter_warmup is None and args.iter_sampling is None  # each algorithm's default run lengths
