"""stan_dp.advise on NumPy models: per-algorithm scores, clip fractions on public data, no hidden reads."""
import argparse
import math
from pathlib import Path

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
    """A short advise run scores penalty against the analytic posterior; auto would pick penalty with the same
    options, so that one run stands for both. At epsilon 50 on a 2-d Gaussian with ratio_clip 5 (rarely binding)
    the candidate is accurate: max error < 1 reference sd (penalty MH at this budget moves about 0.1 posterior sd
    per iteration, so 300 draws per chain give a Monte Carlo error of a few tenths of an sd; the bound leaves a
    wide margin)."""
    advice = advise(public, epsilon=50.0, delta=1e-5, chains=2, iter_warmup=300, iter_sampling=300,
                    algorithms=["penalty"], ratio_clip=5.0)
    names = [r["algorithm"] for r in advice.rows]
    assert names == ["penalty (auto's choice)"] and advice.auto_choice == "penalty"
    best = min(r["max_mean_err_sd"] for r in advice.rows)
    assert best < 1.0
    if advice.recommended == "none":  # a few tenths of an sd of Monte Carlo error may miss the 0.3 target
        assert "no candidate reached the target; expect" in advice.verdict
    else:
        assert advice.recommended == "penalty" and "reached the target" in advice.verdict
    assert set(advice.clip_fractions) == {"ratio_clip"}
    assert "costs no privacy" in str(advice)
    assert (advice.settings["iter_warmup"], advice.settings["iter_sampling"]) == (300, 300)  # the lengths run


def test_advise_rejects_bad_options(public):
    """An option no algorithm takes is named with the closest valid one; options without a clip bound, and an
    unknown candidate, are refused before any run."""
    with pytest.raises(ValueError, match=r"ratio_clp \(did you mean ratio_clip\?\)"):
        advise(public, epsilon=1.0, delta=1e-5, ratio_clp=3)
    with pytest.raises(ValueError, match="at least one public clip bound"):
        advise(public, epsilon=1.0, delta=1e-5, leapfrog_steps=3)
    with pytest.raises(ValueError, match="at least one public clip bound"):
        advise(public, epsilon=1.0, delta=1e-5)
    with pytest.raises(ValueError, match="unknown algorithm 'penalti'"):
        advise(public, epsilon=1.0, delta=1e-5, algorithms=["penalti"], ratio_clip=3)


class _FakeRuns:
    """Stands in for ``run_and_score``: records each call and returns the scores given per algorithm name."""

    def __init__(self, scores: dict[str, tuple[float, float]]):
        self.scores = scores
        self.calls: list[dict] = []

    def __call__(self, likelihood, name, options, reference, run, **kw):
        from stan_dp.tools.utility import options_for, split_variant

        self.calls.append({"name": name, "options": dict(options), **vars(run), **kw})
        err, rhat = self.scores[name]
        return {"max_mean_err_sd": err, "median_sd_ratio": 1.0, "rhat": rhat, "mmd": 0.0, "wall_s": 0.0,
                "options": options_for(split_variant(name)[0], options), "chosen": name, "iter_warmup": 10, "iter_sampling": 10}


def _reference(public) -> np.ndarray:
    """Draws of the public posterior (chains, draws, dim), standing in for the NUTS reference."""
    mean, cov = public.posterior_mean(), public.posterior_cov()
    return np.random.default_rng(0).multivariate_normal(mean, cov, size=(2, 50))


def test_advise_runs_each_candidate_once_and_passes_every_option(public, monkeypatch, capsys):
    """With grad_clip auto would pick dp-sgnht with the same options: dp-sgnht runs once, marked as auto's
    choice, although auto is named as a candidate too; penalty runs once. Each run gets the inits, the run-level
    and warm-start options and the kernel options it takes (leapfrog_steps is dp-hmc's: neither gets it);
    progress names each candidate (k of n) and its score on stderr."""
    fake = _FakeRuns({"dp-sgnht": (0.1, 1.01), "penalty": (0.5, 1.2)})
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    inits = np.zeros(public.dim)
    advice = advise(public, epsilon=2.0, delta=1e-5, chains=2, algorithms=["dp-sgnht", "auto", "penalty"],
                    reference=_reference(public), inits=inits, show_progress=True, ratio_clip=5.0, grad_clip=3.0,
                    step_size=0.05, warm_start="dp-gd", leapfrog_steps=4)
    assert [c["name"] for c in fake.calls] == ["dp-sgnht", "penalty"]
    assert all(c["inits"] is inits and c["show_progress"] for c in fake.calls)
    used = {r["name"]: r["options"] for r in advice.rows}
    assert used["dp-sgnht"] == {"grad_clip": 3.0, "step_size": 0.05, "warm_start": "dp-gd"}
    assert used["penalty"] == {"ratio_clip": 5.0, "step_size": 0.05, "warm_start": "dp-gd"}
    assert [r["algorithm"] for r in advice.rows] == ["dp-sgnht (auto's choice)", "penalty"]
    assert advice.recommended == "dp-sgnht" and advice.auto_choice == "dp-sgnht"
    assert advice.settings == {"chains": 2, "iter_warmup": 10, "iter_sampling": 10, **used["dp-sgnht"]}
    err = capsys.readouterr().err
    assert "advise: candidate 1 of 2: dp-sgnht (auto's choice) ..." in err
    assert "advise: candidate 2 of 2: penalty ..." in err
    assert "advise: penalty: max error 0.5 reference sd, R-hat 1.2" in err


def test_advise_runs_auto_on_its_own_when_its_run_differs(public, monkeypatch):
    """With a dp-sgnht option that auto does not pass on (diffusion), the dp-sgnht candidate is not auto's run:
    auto runs once more, by itself; without progress nothing is printed."""
    fake = _FakeRuns({"dp-sgnht": (0.1, 1.01), "auto": (0.2, 1.01)})
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    advice = advise(public, epsilon=2.0, delta=1e-5, chains=2, algorithms=["dp-sgnht"],
                    reference=_reference(public), grad_clip=3.0, diffusion=0.5)
    assert [c["name"] for c in fake.calls] == ["dp-sgnht", "auto"]
    # auto's row says what it runs, so that it is not mistaken for the unanchored dp-sgnht row
    assert [r["algorithm"] for r in advice.rows] == ["dp-sgnht", "auto (dp-sgnht from a private anchor)"]
    assert "diffusion" not in advice.rows[1]["options"]


def test_advise_says_when_no_candidate_reached_the_target(public, monkeypatch):
    """Every candidate 30-46 sd off: no recommendation, the verdict says what to expect from the best converged
    one."""
    fake = _FakeRuns({"penalty": (46.0, 1.08), "dp-sgnht": (30.0, 1.07), "auto": (35.0, 1.09)})  # auto: anchored
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    advice = advise(public, epsilon=0.1, delta=1e-5, chains=2, algorithms=["penalty", "dp-sgnht"],
                    reference=_reference(public), ratio_clip=5.0, grad_clip=3.0)
    assert advice.recommended == "none"
    assert advice.verdict.startswith("no candidate reached the target; expect the private fit to be about 30 "
                                     "reference sds off")
    assert "the best here: dp-sgnht" in advice.verdict
    text = str(advice)
    assert "no candidate reached the target; expect" in text and "settings of the best candidate" in text


def test_advise_never_calls_an_unconverged_run_the_best(public, monkeypatch):
    """A plain kernel whose chains did not converge (R-hat 4.3) is not called the best although its error is the
    smallest: auto's converged anchored run is, under a name that tells it from the plain dp-sgnht row. When no
    candidate converged the verdict says so and gives no forecast."""
    fake = _FakeRuns({"dp-sgnht": (1.5, 4.3), "penalty": (9.0, 1.05), "auto": (2.5, 1.06)})
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    advice = advise(public, epsilon=0.5, delta=1e-5, chains=2, algorithms=["dp-sgnht", "penalty"],
                    reference=_reference(public), grad_clip=3.0, ratio_clip=5.0)
    assert advice.recommended == "none"
    assert "the best here: auto (dp-sgnht from a private anchor)" in advice.verdict
    assert "about 2.5 reference sds off" in advice.verdict
    assert "dp-sgnht came closer (1.5 reference sds), but its chains did not converge (R-hat 4.3)" in advice.verdict
    assert "auto would choose dp-sgnht from a private anchor" in str(advice)
    fake.scores.update({"penalty": (9.0, 2.0), "auto": (2.5, 1.9)})
    advice = advise(public, epsilon=0.5, delta=1e-5, chains=2, algorithms=["dp-sgnht", "penalty"],
                    reference=_reference(public), grad_clip=3.0, ratio_clip=5.0)
    assert advice.verdict.startswith("no candidate reached the target, and none converged (R-hat 1.9 at best")
    assert "expect the private fit" not in advice.verdict and "the best here" not in advice.verdict


def test_advise_with_inits_runs_from_them(public, capsys):
    """A real (tiny) run through sample_private with zero inits and progress on: it runs, scores, and says
    which candidate it runs."""
    advice = advise(public, epsilon=20.0, delta=1e-5, chains=2, iter_warmup=30, iter_sampling=30,
                    algorithms=["penalty"], reference=_reference(public), inits=0, show_progress=True,
                    include_auto=False, ratio_clip=5.0, step_size=0.1)
    row, = advice.rows
    assert "error" not in row, row
    assert math.isfinite(row["max_mean_err_sd"]) and row["options"]["step_size"] == 0.1
    assert "advise: candidate 1 of 1: penalty" in capsys.readouterr().err


def test_advise_parser_registers():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    add_advise_parser(sub)
    args = parser.parse_args(["advise", "m.stan", "--data", "d.json", "--epsilon", "3", "--delta", "1e-5",
                              "--option", "ratio_clip=2"])
    assert args.func.__name__ == "run_advise" and args.option == ["ratio_clip=2"]
    assert args.iter_warmup is None and args.iter_sampling is None  # each algorithm's default run lengths


@pytest.mark.stan
def test_stan_dp_advise_takes_inits_and_sample_options(stan_model, tmp_path, capsys):
    """`stan-dp advise` on the bundled logistic program with 60 public rows takes --inits 0 and run-level,
    row-engine and output-only options as `stan-dp sample` does, says which candidate it runs, runs penalty once
    as auto's choice and prints the table and a verdict."""
    import json

    from stan_dp.cli import main
    from stan_dp.tools.demo import simulate_logistic

    stan_model("logistic")  # compiled once per session
    data = tmp_path / "public.json"
    data.write_text(json.dumps(simulate_logistic(60, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)))
    program = str(Path(__file__).resolve().parents[2] / "stan_models" / "logistic.stan")
    status = main(["advise", program, "--data", str(data), "--epsilon", "5", "--delta", "1e-4", "--chains", "2",
                   "--iter-warmup", "20", "--iter-sampling", "20", "--algorithm", "penalty", "--inits", "0",
                   "--option", "ratio_clip=2", "--option", "step_size=0.1", "--option", "threads=1",
                   "--option", "save_warmup=true"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "| penalty (auto's choice) |" in out and out.count("| penalty") == 1
    assert "no candidate reached the target" in out or "penalty reached the target" in out
    assert "costs no privacy" in out
    assert "advise: candidate 1 of 1: penalty (auto's choice) ..." in err


def test_advise_passes_anchor_options_to_kernels_that_take_them(public, monkeypatch):
    """anchor='dp-gd' (stan_dp.phases.anchor) goes to penalty, which can be anchored, and not to auto, which does
    not take it; so auto's run differs from the candidate's and runs by itself. '+anchor' names are candidates."""
    fake = _FakeRuns({"penalty": (0.1, 1.01), "auto": (0.2, 1.01), "penalty+anchor": (0.1, 1.01)})
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    advice = advise(public, epsilon=2.0, delta=1e-5, chains=2, algorithms=["penalty"], reference=_reference(public),
                    ratio_clip=5.0, anchor="dp-gd")
    assert [c["name"] for c in fake.calls] == ["penalty", "auto"]
    assert advice.rows[0]["options"] == {"ratio_clip": 5.0, "anchor": "dp-gd"}
    assert "anchor" not in advice.rows[1]["options"]
    advise(public, epsilon=2.0, delta=1e-5, chains=2, algorithms=["penalty+anchor"], reference=_reference(public),
           include_auto=False, ratio_clip=5.0)
    assert fake.calls[-1]["name"] == "penalty+anchor"


def test_advise_lists_dp_laplace_beside_the_kernels_when_grad_clip_is_given():
    """dp-laplace needs only grad_clip: it is a default candidate whenever grad_clip is given (whether or not auto
    would choose it), never without it; the name is accepted as an explicit candidate."""
    from stan_dp.tools.advise import _candidates, _check_algorithms

    with_grad = _candidates({"grad_clip": 3.0, "ratio_clip": 2.0})
    assert "dp-laplace" in with_grad and "dp-sgnht" in with_grad and "penalty" in with_grad
    assert "dp-laplace" not in _candidates({"ratio_clip": 2.0})
    _check_algorithms(["dp-laplace", "dp-laplace+adaptive"])  # no error


def test_advise_runs_dp_laplace_with_the_options_it_takes(public, capsys):
    """A real dp-laplace candidate through run_and_score: the planned warmup and the chain options (step_size)
    do not apply to closed-form draws and are not passed (the run is not refused); its laplace options are; the
    run reports 0 warmup and the planned number of draws. On this 2-d Gaussian at epsilon 20 (L = 5, rarely
    binding) it is accurate: max error < 1 reference sd (the release noise at this budget is about 0.1 posterior
    sd; the reference is only 100 draws, whose own Monte Carlo error is ~0.1 sd, so the bound has a wide margin)."""
    advice = advise(public, epsilon=20.0, delta=1e-5, chains=2, iter_warmup=30, iter_sampling=200,
                    algorithms=["dp-laplace"], reference=_reference(public), include_auto=False, show_progress=True,
                    grad_clip=5.0, step_size=0.1, laplace_anchor_share=0.2, laplace_gradient_share=0.4,
                    laplace_curvature_share=0.4)
    row, = advice.rows
    assert "error" not in row, row
    assert row["options"] == {"grad_clip": 5.0, "laplace_anchor_share": 0.2, "laplace_gradient_share": 0.4,
                              "laplace_curvature_share": 0.4}
    assert (row["iter_warmup"], row["iter_sampling"]) == (0, 200)
    assert row["max_mean_err_sd"] < 1.0
    assert "advise: candidate 1 of 1: dp-laplace" in capsys.readouterr().err


def test_advise_says_why_auto_does_not_choose_dp_laplace(public, monkeypatch):
    """With grad_clip, dp-laplace runs as a default candidate beside the kernels; auto picks the anchored kernel,
    and the advice says why dp-laplace was not auto's choice (the battery's evidence, stan_dp.run.auto), while
    still recommending dp-laplace when it scored best on the public data."""
    from stan_dp.run.auto import LAPLACE_NOT_CHOSEN

    class Scores(dict):
        def __missing__(self, name):  # every other candidate: 0.4 sd
            return (0.4, 1.01)

    fake = _FakeRuns(Scores({"dp-laplace": (0.1, 1.0)}))
    monkeypatch.setattr("stan_dp.tools.advise.run_and_score", fake)
    advice = advise(public, epsilon=2.0, delta=1e-5, chains=2, reference=_reference(public), grad_clip=3.0)
    names = [c["name"] for c in fake.calls]
    assert "dp-laplace" in names and "auto" in names  # auto's anchored run differs from the plain dp-sgnht's
    assert advice.auto_choice == "dp-sgnht" and advice.recommended == "dp-laplace"
    assert advice.laplace_note == LAPLACE_NOT_CHOSEN and LAPLACE_NOT_CHOSEN in str(advice)
    assert "| dp-laplace | 0.10 |" in advice.table()


@pytest.mark.stan
def test_stan_dp_advise_on_a_declared_bound_linear_program_needs_no_clip_option(stan_model, tmp_path, capsys):
    """`stan-dp advise` on the bundled linear program whose data block declares the bounds of y and x, with no
    --option at all: not refused; dp-ssp is the (only) candidate, auto's choice, with its price in advance; the clip
    line says no clip bound is needed (and none is reported clipping rows)."""
    import json

    from stan_dp.cli import main

    stan_model("linear_bounded")  # compiled once per session
    rng = np.random.default_rng(5)
    x = rng.uniform(-2, 2, size=(300, 2))
    y = np.clip(0.5 + x @ np.array([1.0, -0.5]) + rng.normal(size=300), -6, 6)
    data = tmp_path / "public.json"
    data.write_text(json.dumps({"N": 300, "K": 2, "x": x.tolist(), "y": y.tolist()}))
    program = str(Path(__file__).resolve().parents[2] / "stan_models" / "linear_bounded.stan")
    status = main(["advise", program, "--data", str(data), "--epsilon", "3", "--delta", "1e-5", "--chains", "2",
                   "--iter-warmup", "200", "--iter-sampling", "100", "--quiet"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "| dp-ssp (auto's choice) |" in out and out.count("\n| ") == 1  # one row after the header
    assert "dp-ssp price in advance: at these bounds and this budget" in out
    assert "clip bounds on the public data: none given (none needed: dp-ssp takes the bounds" in out
    assert "grad_clip" not in out and "% of rows clipped" not in out
