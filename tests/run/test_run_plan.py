"""The run plan (stan_dp.run.plan): decided from public inputs alone, frozen, printable before any row is read;
``sample_private`` is plan_run -> execute -> publish, and the CLI's pre-run check is the plan's first stage."""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest

from stan_dp import cli
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.phases.calibration import calibrate
from stan_dp.run.pipeline import execute, publish, sample_private
from stan_dp.run.plan import RunPlan, plan_run


def test_a_plan_needs_no_likelihood_and_says_what_will_run():
    """Only N and the dimension go in (no likelihood exists here): the noise is the calibration of the whole run,
    the plan cannot be changed afterwards, and its text names the algorithm, the run and the noise."""
    plan = plan_run(500, 2, algorithm="penalty", epsilon=1.0, delta=1e-5, chains=2, iter_warmup=50,
                    iter_sampling=70, quiet=True, ratio_clip=2.0)
    assert isinstance(plan, RunPlan)
    assert plan.privacy.tau_l == calibrate("penalty", epsilon=1.0, delta=1e-5, chains=2, iterations=120,
                                           n_rows=500).tau_l
    assert (plan.run_warmup, plan.iter_sampling, plan.settings.target_accept, plan.settings.metric) == (50, 70, 0.3, "unit")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.chains = 3  # type: ignore[misc]
    text = str(plan)
    for words in ("Run plan: penalty", "2 chains x (50 warmup + 70 sampling)", "N = 500 rows", "epsilon = 1,",
                  "ratio_clip=2.0", f"tau_l = {plan.privacy.tau_l:.6g}", "x 240"):
        assert words in text, words
    # the one choice made: a ratio clip alone does not anchor by default, and the reason says how to anchor
    assert plan.anchor is None and plan.reasons == (f"anchor: {plan.anchor_default.reason}",)


def test_plan_records_the_choices_it_made():
    """auto, the run lengths and a warm start are planned before any row is read, with their reasons."""
    plan = plan_run(10_000, 3, algorithm="auto", epsilon=1.0, delta=1e-5, chains=2, quiet=True, grad_clip=3.0)
    assert plan.algorithm == "dp-sgnht" and plan.auto is not None and plan.lengths is not None
    assert [r.split(":")[0] for r in plan.reasons] == ["auto", "run lengths"]
    assert "why:         auto: DP-SGNHT" in str(plan) and "grad_clip given" in plan.auto.evidence

    hybrid = plan_run(200, 2, algorithm="hybrid", epsilon=1.0, delta=1e-5, chains=2, iter_warmup=40,
                      iter_sampling=40, quiet=True, loglik_bounds=(-60, 0), grad_clip=20.0)
    text = str(hybrid)
    assert hybrid.label == "hybrid" and hybrid.algorithm == "dp-sgnht" and hybrid.warm.kind == "ops"
    assert "(dp-sgnht kernel)" in text and "warm start:  ops, 0.5 of epsilon" in text
    assert "OPS warm start draw" in text and "conditional on exact sampling" in hybrid.conditional_guarantee.lower()
    assert hybrid.described_options["warm_start_epsilon_draw"] == pytest.approx(0.25)


def test_sample_private_is_plan_execute_publish():
    """The three stages called one by one give the same seeded draws, statistics and attrs as sample_private."""
    model = GaussianMeanModel.simulate(n=300, dim=2, seed=4)
    args = dict(algorithm="penalty", epsilon=3.0, delta=1e-5, chains=2, iter_warmup=40, iter_sampling=30,
                ratio_clip=3.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        whole = sample_private(model, seed=7, show_progress=False, **args)
        plan = plan_run(model.n_rows, model.dim, quiet=True, **args)
        staged = publish(execute(plan, model, seed=7, show_progress=False), plan, model)
    for group in ("posterior", "sample_stats"):
        for name in whole[group].data_vars:
            np.testing.assert_array_equal(whole[group][name].values, staged[group][name].values)
    drop = {"created_at"}
    assert {k: v for k, v in whole.attrs.items() if k not in drop} == \
        {k: v for k, v in staged.attrs.items() if k not in drop}


def test_every_method_plan_runs_and_publishes_itself():
    """The pipeline holds no per-method branch: every method's plan (kernels, dp-laplace, dp-ssp) implements the
    MethodPlan interface (execute, publish, its refusals), and pipeline.py names no method's plan or functions."""
    import ast
    from pathlib import Path

    import stan_dp.run.pipeline as pipeline
    from stan_dp.methods.dp_laplace.laplace import LaplacePlan
    from stan_dp.methods.method import MethodPlan
    from stan_dp.methods.dp_ssp.ssp import SSPPlan

    for cls in (RunPlan, LaplacePlan, SSPPlan):
        for member in ("label", "algorithm", "privacy", "debug_refusal", "checkpoint_refusal", "execute", "publish"):
            assert member in {*dir(cls), *getattr(cls, "__dataclass_fields__", {})}, (cls.__name__, member)
    assert {"execute", "publish", "debug_refusal", "checkpoint_refusal"} <= set(dir(MethodPlan))
    assert LaplacePlan.debug_refusal and SSPPlan.checkpoint_refusal and RunPlan.debug_refusal is None
    names = {node.id for node in ast.walk(ast.parse(Path(pipeline.__file__).read_text()))
             if isinstance(node, ast.Name)}
    assert not names & {"LaplacePlan", "SSPPlan", "execute_laplace", "publish_laplace", "execute_ssp",
                        "publish_ssp", "run_chains", "run_anchor"}


def test_a_new_method_plugs_into_execute_and_publish_without_a_branch():
    """A method the pipeline has never heard of (a plan object with execute / publish) goes through
    pipeline.execute (under the private floating-point context) and pipeline.publish (which stamps the privacy
    unit), with the arguments it was given."""
    import stan_dp.run.pipeline as pipeline

    model = GaussianMeanModel.simulate(n=50, dim=2, seed=1)
    calls = {}

    class ToyPlan:
        label = algorithm = "toy"
        privacy = None
        debug_refusal = checkpoint_refusal = None

        def execute(self, likelihood, **how):
            calls["execute"] = (likelihood, how["seed"], np.geterr()["over"])
            return "executed"

        def publish(self, executed, likelihood, **how):
            calls["publish"] = (executed, how["model_name"])

            class Fit:
                attrs: dict = {}
            return Fit()

    fit = pipeline.publish(pipeline.execute(ToyPlan(), model, seed=3), ToyPlan(), model, model_name="m")
    assert calls["execute"][:2] == (model, 3) and calls["execute"][2] == "ignore"
    assert calls["publish"] == ("executed", "m") and fit.attrs["privacy_unit"] == "row"


def test_plan_errors_come_before_any_row_is_read():
    """Bad options, lengths and budgets fail in the plan (no likelihood involved)."""
    with pytest.raises(ValueError, match="'clip'"):
        plan_run(100, 1, algorithm="penalty", epsilon=1.0, delta=1e-5, quiet=True, clip=3.0)
    with pytest.raises(ValueError, match="iter_sampling"):
        plan_run(100, 1, algorithm="penalty", epsilon=1.0, delta=1e-5, iter_warmup=1, iter_sampling=0, quiet=True,
                 ratio_clip=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        plan_run(100, 1, algorithm="penalty", epsilon=-1.0, delta=1e-5, iter_warmup=1, iter_sampling=1, quiet=True,
                 ratio_clip=1.0)
    with pytest.raises(ValueError, match="'ratio_clip' of algorithm 'penalty' is required"):  # no silent default
        plan_run(100, 1, algorithm="penalty", epsilon=1.0, delta=1e-5, iter_warmup=1, iter_sampling=1, quiet=True)


def test_cli_check_runs_the_plans_first_stage(tmp_path, capsys):
    """stan-dp sample checks the algorithm and its options with the registered method's own check (the one
    ``plan_run`` relies on), before the program is compiled, not with a second resolution of its own (a stand-in
    method registered under the name records the call and stops the command there)."""
    import dataclasses

    from stan_dp.methods import registry

    program, data = tmp_path / "m.stan", tmp_path / "d.json"
    program.write_text("data { int N; } parameters { real mu; } model { }")
    data.write_text('{"N": 1}')
    calls = []

    @dataclasses.dataclass(frozen=True)
    class Spy:
        name: str = "hybrid"
        reads: frozenset = frozenset()
        tunes_chains: bool = True
        unit_needs_cap: bool = False

        def check(self, options, *, row_bounds=None):
            calls.append((self.name, sorted(options)))
            raise cli.UsageError("stopped by the test before compiling")

        def plan(self, inputs):
            raise AssertionError("never planned")

    with registry.registered(Spy(), replace=True):
        status = cli.main(["sample", str(program), "--data", str(data), "--epsilon", "1", "--delta", "1e-5",
                           "--algorithm", "hybrid", "--option", "loglik_bounds=[-5, 0]", "--option", "grad_clip=1",
                           "--output", str(tmp_path / "fit.nc")])
    assert status == 2 and "stopped by the test" in capsys.readouterr().err
    assert calls == [("hybrid", ["grad_clip", "loglik_bounds"])]


def test_plan_run_names_where_the_programs_facts_go():
    """The program's linear form, row bounds and a unit's cap reach plan_run as one PublicFacts; given as the
    keywords they once were, the TypeError says where they go."""
    from stan_dp.run.plan import PublicFacts

    with pytest.raises(TypeError, match=r"linear, rows_per_unit in facts=PublicFacts"):
        plan_run(100, 1, algorithm="penalty", epsilon=1.0, delta=1e-5, quiet=True, linear=None, rows_per_unit=2)
    plan = plan_run(100, 1, algorithm="penalty", epsilon=1.0, delta=1e-5, iter_warmup=1, iter_sampling=1, quiet=True,
                    ratio_clip=1.0, facts=PublicFacts())
    assert plan.settings.iter_sampling == 1
