"""Private warm starts (warm_start="ops" | "dp-gd"): budget split, one composed report, starts, errors."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

from dp_accounting import privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib

from stan_dp.audit.targets import memoized_calibration
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run.pipeline import sample_private
from stan_dp.samplers.options import OptionSpec
from stan_dp.phases.warm_start import split_warm_start


def _gaussian(n=2000, seed=0):
    x = np.random.default_rng(seed).normal(1.0, 1.0, size=(n, 2))
    return GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=100.0), x


def _fit(algorithm="penalty", epsilon=1.0, **options):
    if algorithm in ("penalty", "dp-hmc"):
        options.setdefault("ratio_clip", 1.0)  # the bound these kernels need (no default)
    model, _ = _gaussian()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sample_private(model, algorithm=algorithm, epsilon=epsilon, delta=1e-5, chains=2, iter_warmup=30,
                              iter_sampling=30, seed=7, show_progress=False, **options)


def _poisson_pld(m):
    """dp-accounting's own PLD of a Poisson-subsampled Gaussian record (REPLACE_ONE: noise sd 2 tau against
    sensitivity 1), self-composed over the record's count."""
    return pld_lib.from_gaussian_mechanism(
        standard_deviation=2.0 * m["noise_multiplier"], sensitivity=1.0, sampling_prob=m["sampling_probability"],
        value_discretization_interval=1e-4,
        neighboring_relation=privacy_accountant.NeighboringRelation.REPLACE_ONE).self_compose(m["count"])


def test_dp_gd_budget_split_and_single_report():
    """The warm start's noise is set from warm_start_share * epsilon alone (its own PLD spends that share), the
    main kernel's noise from the rest so that the composition of both spends the whole budget; the report lists
    both phases with their counts (chains x steps, chains x (warmup + sampling))."""
    fit = _fit("dp-sgld", grad_clip=30.0, warm_start="dp-gd", warm_start_share=0.3, warm_start_steps=50,
               sampling_rate=0.2)
    warm, main = json.loads(fit.attrs["privacy_mechanisms"])
    assert warm["name"].startswith("DP-GD warm start") and warm["count"] == 2 * 50
    assert main["count"] == 2 * 60
    assert _poisson_pld(warm).get_epsilon_for_delta(1e-5) == pytest.approx(0.3, rel=1e-2)
    total = _poisson_pld(warm).compose(_poisson_pld(main)).get_epsilon_for_delta(1e-5)
    assert fit.attrs["epsilon_spent"] == pytest.approx(total, rel=1e-2)
    assert 0.99 <= fit.attrs["epsilon_spent"] <= 1.0
    assert _poisson_pld(main).get_epsilon_for_delta(1e-5) > 0.7  # tight composition leaves more than 1 - share
    opts = json.loads(fit.attrs["algorithm_options"])
    assert opts["warm_start"] == "dp-gd" and opts["warm_start_share"] == 0.3
    assert opts["warm_start_grad_clip"] == 30.0  # reused from the kernel's grad_clip
    assert "CONDITIONAL" not in fit.attrs["privacy_guarantee"]  # DP-GD is an ordinary (epsilon, delta) mechanism


def test_ops_warm_start_for_penalty_is_conditional():
    """An OPS warm start spends share * epsilon / chains per chain's draw and makes the run conditional."""
    fit = _fit("penalty", ratio_clip=5.0, warm_start="ops", warm_start_share=0.4, loglik_bounds=(-60, 0),
               warm_start_warmup=100)
    warm, main = json.loads(fit.attrs["privacy_mechanisms"])
    assert warm["count"] == 2 and warm["epsilon"] == pytest.approx(0.4 / 2) and warm["delta"] == 0.0
    assert "CONDITIONAL ON EXACT SAMPLING" in fit.attrs["privacy_guarantee"]
    assert 0.99 <= fit.attrs["epsilon_spent"] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("kind, extra", [("dp-gd", {"warm_start_grad_clip": 3.0}),
                                         ("ops", {"loglik_bounds": (-60, 0), "warm_start_warmup": 200})])
def test_warm_starts_land_in_the_posterior(kind, extra):
    """At a generous budget (epsilon 20 for the warm start) both warm starts move every chain from uniform(-2, 2)
    inits (~40 posterior sds away; posterior sd 1 / sqrt(N) = 0.022) into the posterior's neighbourhood: DP-GD
    within 5 posterior sds (its averaged noise is ~0.2 sd here); OPS within 5 sds of its tempered draw, whose
    spread is 1 / sqrt(rho) posterior sds (rho = (20 / 4) / (2 * 60))."""
    model, x = _gaussian()
    opts = {"warm_start": kind, "warm_start_share": 0.5, **extra}
    _, warm = split_warm_start(opts, OptionSpec("penalty", []), "penalty")
    warm.prefix_phase(epsilon=40.0, delta=1e-5, chains=4, n_rows=model.n_rows)
    starts = warm.run(model, chains=4, seed=3, inits=None)
    post_prec = 1.0 / 100.0 + model.n_rows
    mean = x.sum(axis=0) / post_prec
    spread = 1.0 if kind == "dp-gd" else 1.0 / math.sqrt(5.0 / 120.0)
    assert np.all(np.abs(starts - mean) * math.sqrt(post_prec) < 5.0 * spread)
    assert np.all(np.abs(starts - mean) < 0.5)  # and far from where the inits were (|init - mean| ~ 1)
    assert np.unique(starts[:, 0]).size == 4  # dispersed: each chain has its own start


def test_warm_start_is_reproducible_with_a_seed():
    """Two seeded DP-SGLD runs with a DP-GD warm start give identical draws. The calibration (a deterministic
    function of the public budget, run lengths and options; the PLD accountant dominates the cost of these short
    runs) is computed once and shared by both runs: what is compared is everything that draws random numbers."""
    with memoized_calibration():
        a = _fit("dp-sgld", grad_clip=30.0, warm_start="dp-gd", warm_start_steps=20, sampling_rate=0.2)
        b = _fit("dp-sgld", grad_clip=30.0, warm_start="dp-gd", warm_start_steps=20, sampling_rate=0.2)
    np.testing.assert_array_equal(a.posterior["theta"].values, b.posterior["theta"].values)


@pytest.mark.parametrize("options, match", [
    ({"warm_start": "sgld"}, "warm_start.*'ops', 'dp-gd'"),
    ({"warm_start": "dp-gd", "warm_start_share": 0.0}, "warm_start_share"),
    ({"warm_start": "dp-gd", "warm_start_share": 1.0}, "warm_start_share"),
    ({"warm_start": "dp-gd", "warm_start_share": "half"}, "warm_start_share"),
    ({"warm_start_share": 0.3}, "warm_start is not set"),
    ({"warm_start": "ops"}, r"needs loglik_bounds.*\(a, 0\)"),
    ({"warm_start": "dp-gd"}, "warm_start_grad_clip"),
    ({"warm_start": "ops", "loglik_bounds": (-5, 0), "warm_start_steps": 10}, "do not apply"),
])
def test_warm_start_errors(options, match):
    with pytest.raises(ValueError, match=match):
        _fit("penalty", ratio_clip=5.0, **options)
