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
        fit = _run(algorithm="penalty", ratio_clip=1.0, epsilon=0.05, iter_warmup=30, iter_sampling=30)
    text = str(record[0].message)
    for hint in ("more rows", "larger epsilon", "another algorithm", "stan-dp advise"):
        assert hint in text
    assert len(text) <= 360  # at most about three lines; the evidence is in details() and the attrs
    verdict = json.loads(fit.attrs["convergence"])
    assert verdict["converged"] is False and verdict["max_rhat"] > 1.5 and verdict["ess_min"] == 400
    assert set(verdict["failing"]) == {"theta[0]", "theta[1]"}
    assert fit.posterior["theta"].shape == (4, 30, 2)  # the fit is not hidden
    assert "NOT converged" in convergence_text(fit)


@pytest.mark.slow
def test_converged_private_fit_does_not_warn():
    """dp-hmc at epsilon 1000 (almost no noise) with 1000 + 1000 iterations mixes well: R-hat about 1.003 and
    bulk / tail ESS above 1,000 (thresholds 1.01 and 400). No ConvergenceWarning; the attrs say converged."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = _run(algorithm="dp-hmc", ratio_clip=1.0, epsilon=1e3, iter_warmup=1000, iter_sampling=1000)
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


# ------------------------------------------------------------------------------------------ stuck chains
STUCK = "Convergence: NOT converged: the chains are still"
NEAR = "the chains are still near their inits and disagree with each other"


def test_a_run_started_far_away_at_epsilon_0_1_is_called_stuck_in_those_words():
    """Penalty MH at epsilon 0.1 (4 chains x 200 + 200, seed 1) started at the public init (3, -3), about 150
    posterior sds from the posterior mean (-0.02, 2.97): at least three of the four chains stay within 10 of their
    own sds of their start while R-hat is far above 1, so the warning leads with the stuck verdict, in those words:
    the chains are still near their inits (and it does not also call them drifting: one finding, consistent with
    itself), in at most about three lines. The same run near the posterior at epsilon 1000 is not called stuck
    (its chains end 100-140 own sds away from their uniform(-2, 2) inits)."""
    with pytest.warns(ConvergenceWarning) as record:
        fit = _run(algorithm="penalty", ratio_clip=1.0, epsilon=0.1, iter_warmup=200, iter_sampling=200,
                   inits=np.array([3.0, -3.0]))
    text = str(record[0].message)
    # a stuck verdict with one finding (near the inits, or still drifting away from them: which one depends on the
    # seeded noise stream), never both, in at most about three lines
    assert text.startswith("Convergence: NOT converged: the chains are still") and len(text) <= 360
    assert (NEAR in text) != ("drifting" in text)
    verdict = json.loads(fit.attrs["convergence"])
    assert len(verdict["near_start_chains"]) >= 3 and verdict["max_rhat"] > 1.1  # (seed 1: chains 1, 2 and 4)
    assert convergence_text(fit).startswith(STUCK)
    far = np.abs(fit.posterior["theta"].values.mean(axis=1) - np.array([-0.02, 2.97]))
    assert np.all(far > 1.0)  # the draws are nowhere near the posterior
    with pytest.warns(ConvergenceWarning) as record:
        moved = _run(algorithm="penalty", ratio_clip=1.0, epsilon=1e3, iter_warmup=200, iter_sampling=200)
    assert STUCK not in str(record[0].message)
    assert json.loads(moved.attrs["convergence"])["near_start_chains"] == []


def test_halves_that_disagree_in_every_chain_are_drifting_and_stationary_chains_are_not():
    """Known draws: four chains on straight paths (halves 3.5 within-half sds apart) drift; the same paths plus
    one stationary chain do not (not every chain drifts); independent draws never do; all-identical draws are
    frozen and called stuck; the JSON round trip keeps the finding."""
    rng = np.random.default_rng(0)
    paths = np.linspace(0.0, 1.0, 300)[None, :] + 0.01 * rng.normal(size=(4, 300))
    drifting = convergence(fit_from_dict({"posterior": {"mu": paths}}))
    assert drifting.stuck and drifting.drift == pytest.approx(np.sqrt(12), rel=0.05) and drifting.drift_at == "mu"
    assert drifting.message().startswith(STUCK) and "drifting away from their inits" in drifting.message()
    assert "two halves" in drifting.message() and "first and second halves" in drifting.details()
    mixed = paths.copy()
    mixed[3] = rng.normal(size=300)
    assert not convergence(fit_from_dict({"posterior": {"mu": mixed}})).stuck
    iid = convergence(fit_from_dict({"posterior": {"mu": rng.normal(size=(4, 300))}}))
    assert iid.drift < 1.0 and not iid.stuck
    frozen = convergence(fit_from_dict({"posterior": {"mu": np.ones((2, 50))}}))
    assert frozen.stuck and frozen.frozen_chains == [1, 2] and "did not move" in frozen.message()
    again = stan_dp.output.diagnostics.Convergence.from_json(drifting.to_json())
    assert again.stuck and again.message() == drifting.message()


def test_the_summary_command_prints_a_stuck_verdict_before_the_table(tmp_path, capsys):
    """`stan-dp summary` of a stuck fit starts with the verdict (stdout), before az.summary's table."""
    from stan_dp.cli import main

    with pytest.warns(ConvergenceWarning):
        fit = _run(algorithm="penalty", ratio_clip=1.0, epsilon=0.1, iter_warmup=200, iter_sampling=200,
                   inits=np.array([3.0, -3.0]))
    fit.to_netcdf(tmp_path / "fit.nc")
    assert main(["summary", str(tmp_path / "fit.nc")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"WARNING: {STUCK}")
    assert out.index(STUCK) < out.index("mean") < out.index("Privacy in plain words")


def test_an_anchored_verdict_says_anchor_and_one_finding_only():
    """A verdict of an anchored run names the anchor, not the inits; chains both near their start and drifting get
    one finding (near the start), never both; details() holds the evidence of both tests."""
    from stan_dp.output.diagnostics import Convergence

    both = Convergence(chains=2, draws_per_chain=500, max_rhat=1.8, min_ess_bulk=5.0, min_ess_tail=6.0, ess_min=200.0,
                       failing=["a"], drift=3.2, drift_at="a", near_start_chains=[1, 2], start="anchor")
    text = both.message()
    assert "near the anchor" in text and "inits" not in text and "drifting" not in text
    assert "narrow" not in text and len(text) <= 360
    assert "first and second halves" in both.details() and "of the anchor" in both.details()
    again = Convergence.from_json(both.to_json())
    assert again.start == "anchor" and again.message() == text


def test_the_sample_command_prints_the_convergence_warning_once(tmp_path, capsys):
    """`stan-dp sample` of an unconverged run prints the verdict once (in the summary), not again as a warning."""
    from stan_dp.cli import _emit_warnings, _print_summary
    from stan_dp.output.diagnostics import ConvergenceWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit = _run(algorithm="penalty", ratio_clip=1.0, epsilon=0.1, iter_warmup=200, iter_sampling=200,
                   inits=np.array([3.0, -3.0]))
    assert any(issubclass(w.category, ConvergenceWarning) for w in caught)
    _print_summary(fit)
    _emit_warnings("sample", caught, skip=(ConvergenceWarning,))
    captured = capsys.readouterr()
    assert (captured.out + captured.err).count("NOT converged") == 1
