"""Convergence diagnostics of released draws (stan_dp.output.diagnostics): R-hat / ESS verdict, attrs and warning.

All runs use fixed seeds on the fast NumPy Gaussian-mean reference model, so every outcome is deterministic;
the margins quoted below say how far each run is from the thresholds (R-hat 1.01, ESS 100 per chain).
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import stan_dp
from stan_dp.output.arviz_compat import fit_from_dict
from stan_dp.output.diagnostics import ConvergenceWarning, attach_convergence, convergence, convergence_text
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run.pipeline import sample_private


def _run(**kwargs):
    model = GaussianMeanModel.simulate(2000, 2, seed=5)
    args = dict(delta=1e-5, chains=4, seed=1, show_progress=False)
    args.update(kwargs)
    return sample_private(model, **args)


def test_unconverged_private_fit_warns_and_is_still_returned():
    """epsilon 0.05 with 30 + 30 iterations: the noisy random walk barely leaves its random inits (R-hat about
    3.8, ESS about 5, far beyond either threshold). The run warns with advice, keeps the draws and records the
    verdict in the attrs."""
    with pytest.warns(ConvergenceWarning, match="NOT converged") as record:
        fit = _run(algorithm="penalty", epsilon=0.05, iter_warmup=30, iter_sampling=30)
    text = str(record[0].message)
    for hint in ("more rows", "larger epsilon", "another algorithm", "stan-dp advise"):
        assert hint in text
    verdict = json.loads(fit.attrs["convergence"])
    assert verdict["converged"] is False and verdict["max_rhat"] > 1.5 and verdict["ess_min"] == 400
    assert set(verdict["failing"]) == {"theta[0]", "theta[1]"}
    assert fit.posterior["theta"].shape == (4, 30, 2)  # the fit is not hidden
    assert "NOT converged" in convergence_text(fit)


def test_converged_private_fit_does_not_warn():
    """dp-hmc at epsilon 1000 (almost no noise) with 1000 + 1000 iterations mixes well: R-hat about 1.003 and
    bulk / tail ESS above 1,000 (thresholds 1.01 and 400). No ConvergenceWarning; the attrs say converged."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = _run(algorithm="dp-hmc", epsilon=1e3, iter_warmup=1000, iter_sampling=1000)
    verdict = json.loads(fit.attrs["convergence"])
    assert verdict["converged"] is True and verdict["failing"] == []
    assert verdict["max_rhat"] <= 1.01 and min(verdict["min_ess_bulk"], verdict["min_ess_tail"]) >= 400
    assert "look converged" in convergence_text(fit)


def test_verdict_on_known_draws():
    """Independent normal draws (4 x 500) converge: ESS near 2000, R-hat near 1. Shifting one chain by 3 sd
    breaks R-hat; a constant scalar has no defined R-hat and fails rather than passing silently."""
    rng = np.random.default_rng(0)
    iid = rng.normal(size=(4, 500, 2))
    good = convergence(fit_from_dict({"posterior": {"mu": iid}}))
    assert good.converged and good.min_ess_bulk > 1000 and good.max_rhat < 1.01
    shifted = iid.copy()
    shifted[0, :, 1] += 3.0
    bad = convergence(fit_from_dict({"posterior": {"mu": shifted}}))
    assert not bad.converged and bad.failing == ["mu[1]"] and bad.max_rhat > 1.1
    stuck = convergence(fit_from_dict({"posterior": {"mu": iid[..., 0], "c": np.ones((4, 500))}}))
    assert not stuck.converged and stuck.failing == ["c"] and np.isnan(stuck.max_rhat)


def test_attach_convergence_stores_json_and_warning_class_is_exported():
    """attach_convergence writes attrs["convergence"]; ConvergenceWarning is a UserWarning exported by stan_dp."""
    assert stan_dp.ConvergenceWarning is ConvergenceWarning and issubclass(ConvergenceWarning, UserWarning)
    fit = fit_from_dict({"posterior": {"mu": np.zeros((2, 50)) + np.arange(50)}})
    with pytest.warns(ConvergenceWarning):
        verdict = attach_convergence(fit)
    assert json.loads(fit.attrs["convergence"])["converged"] is verdict.converged is False


def test_too_few_draws_are_judged_unconverged_without_failing():
    """A run with no sampling draws (interrupted in warmup) or with fewer than 4 per chain gets a verdict
    "cannot be judged" instead of an exception."""
    empty = convergence(fit_from_dict({"posterior": {"mu": np.zeros((2, 0, 3))}}))
    assert not empty.converged and empty.draws_per_chain == 0 and "cannot be judged" in empty.message()
    short = convergence(fit_from_dict({"posterior": {"mu": np.arange(6.0).reshape(2, 3)}}))
    assert not short.converged and "cannot be judged" in short.message()
