"""InferenceData of private runs (stan_dp.output.inference_data) and the public entry point (stan_dp.run.pipeline).

Stand-ins for the algorithm registry, the kernel and the accountant keep these tests independent of the
real samplers; tests at the end run the real ones when they are installed.
"""
from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")

import arviz as az
import numpy as np
import pytest

import stan_dp.run.pipeline as sampling
import stan_dp.run.plan as run_plan
from stan_dp.methods import registry
from stan_dp.methods.kernels.kernel_plan import KernelMethod
from stan_dp.output.arviz_compat import group_names, uses_datatree
from stan_dp.output.inference_data import (FORBIDDEN_PATTERNS, RunRecord, build_inference_data, check_releasable,
                                          constrain_draws)
from stan_dp.phases.chains import RunInterruptedWarning, run_chains
from stan_dp.samplers import ALL_ALGORITHMS
from stan_dp.samplers.base import ChainState, KernelBase, StepInfo

FORBIDDEN = [re.compile(p, re.IGNORECASE) for p in FORBIDDEN_PATTERNS] + [
    re.compile(p, re.IGNORECASE) for p in (r"^lp", r"log_?lik", r"likelihood", r"clip", r"energy", r"grad(ient)?_?norm", r"^lp__$")
]


# ------------------------------------------------------------------------------------------------ stand-ins
class ToyModel:
    """Rows x_i ~ N(mu, sigma^2); unconstrained (mu, log sigma, b[2]); released mu, sigma, b (shape (2,))."""

    def __init__(self, n=50, seed=0):
        self.x = np.random.default_rng(seed).normal(1.0, 2.0, size=n)
        self.n_rows = n
        self.dim = 4
        self.constrain_calls = 0

    def log_prior(self, theta):
        return -0.5 * float(theta @ theta)

    def log_prior_grad(self, theta):
        return self.log_prior(theta), -theta

    def row_log_lik(self, theta, rows=None):
        x = self.x if rows is None else self.x[rows]
        return -0.5 * ((x - theta[0]) / np.exp(theta[1])) ** 2 - theta[1]

    def row_log_lik_grad(self, theta, rows=None):
        raise NotImplementedError

    def log_density(self, theta):
        return self.log_prior(theta) + float(self.row_log_lik(theta).sum())

    def param_shapes(self):
        return {"mu": (), "sigma": (), "b": (2,)}

    def constrain(self, theta):
        self.constrain_calls += 1
        return {"mu": theta[0], "sigma": np.exp(theta[1]), "b": theta[2:4]}


class ToyKernel(KernelBase):
    """Random-walk MH releasing ordinary (non-private) acceptance statistics: a schema stand-in only."""

    accounting_name = "toy"
    option_defaults = {"ratio_clip": 1.0, "leapfrog_steps": 3}

    def __init__(self, likelihood, plan, **options):
        unknown = set(options) - set(self.option_defaults)
        if unknown:
            raise ValueError(f"unknown options {unknown}")
        self.lik, self.plan = likelihood, plan
        self.options = {**self.option_defaults, **options}

    @classmethod
    def accounting_shape(cls, options):
        return {"leapfrog_steps": options["leapfrog_steps"]}

    def init_state(self, theta):
        return ChainState(np.asarray(theta, float), {"logp": self.lik.log_density(theta)})

    def step(self, rng, state, step_size, metric):
        prop = state.theta + step_size * np.sqrt(metric) * rng.standard_normal(state.theta.size)
        logp = self.lik.log_density(prop)
        log_ratio = logp - state.cache["logp"]
        accept = bool(np.log(rng.uniform()) < log_ratio)
        if accept:
            state = ChainState(prop, {"logp": logp})
        extra = {"n_steps": 1, "noise_sd": 0.5 * step_size, "batch_size": self.lik.n_rows, "full_batch": True,
                 "noise_free": False}
        return state, StepInfo(accept, float(min(1.0, np.exp(min(log_ratio, 0.0)))), extra)


@dataclass
class ToyReport:
    epsilon: float
    delta: float
    accountant: str = "toy PLD accountant"
    neighbouring_relation: str = "substitution of one row (N public)"

    @property
    def mechanisms(self):
        return [{"name": "gaussian", "noise_multiplier": 2.0, "count": 10}]

    def to_json(self):
        return json.dumps({"epsilon": self.epsilon, "delta": self.delta, "mechanisms": self.mechanisms})


@dataclass
class ToyPlan:
    algorithm: str
    epsilon: float
    delta: float
    chains: int
    iterations: int
    tau_l: float = 3.0
    tau_g: float | None = None
    leapfrog_steps: int | None = None
    epsilon_iteration: float | None = None
    delta_iteration: float | None = None

    def report(self, completed_iterations=None):
        total = self.chains * self.iterations
        done = total if completed_iterations is None else completed_iterations
        # Gaussian composition scales like sqrt(count): enough to tell spent from planned
        return ToyReport(self.epsilon * np.sqrt(done / total), self.delta)


calibrate_calls: list = []


def toy_calibrate(algorithm, *, epsilon, delta, chains, iterations, **shape):
    calibrate_calls.append(dict(algorithm=algorithm, epsilon=epsilon, delta=delta, chains=chains,
                                iterations=iterations, **shape))
    if epsilon < 0.01:
        raise ValueError("budget too small for this many iterations")
    return ToyPlan(algorithm, epsilon, delta, chains, iterations, leapfrog_steps=shape.get("leapfrog_steps"))


@pytest.fixture
def toy_registry():
    """Two toy kernels registered as methods (with the toy calibration) for the test's duration."""
    calibrate_calls.clear()
    with registry.registered(KernelMethod("toy", ToyKernel, calibrate=toy_calibrate),
                             KernelMethod("other", ToyKernel, calibrate=toy_calibrate)):
        yield calibrate_calls


def run_toy(**kw):
    args = dict(algorithm="toy", epsilon=1.0, delta=1e-5, chains=2, iter_warmup=60, iter_sampling=80,
                show_progress=False, seed=3)
    args.update(kw)
    lik = args.pop("likelihood", None) or ToyModel()
    return sampling.sample_private(lik, **args)


def assert_no_forbidden(idata):
    for group in group_names(idata):
        for name in list(idata[group].data_vars) + list(idata[group].coords):
            assert not any(p.search(str(name)) for p in FORBIDDEN), f"{group}/{name} must not be released"


# --------------------------------------------------------------------------------------------------- schema
def test_schema_posterior_names_shapes_and_stats(toy_registry):
    idata = run_toy()
    assert group_names(idata) == ["posterior", "sample_stats"]
    post = idata.posterior
    assert list(post.data_vars) == ["mu", "sigma", "b"]  # release order of param_shapes
    assert post["mu"].dims == ("chain", "draw")
    assert post["b"].dims == ("chain", "draw", "b_dim_0") and post["b"].shape == (2, 80, 2)
    assert np.all(post["sigma"] > 0)
    stats = idata.sample_stats
    assert set(stats.data_vars) == {"accepted", "acceptance_rate", "step_size", "n_steps", "noise_sd",
                                    "batch_size", "full_batch", "noise_free"}
    assert stats["accepted"].dtype == bool and stats["n_steps"].dtype.kind == "i"
    assert stats["acceptance_rate"].shape == (2, 80)
    assert_no_forbidden(idata)


def test_calibrate_gets_whole_run_and_accounting_shape(toy_registry):
    run_toy(chains=3, iter_warmup=20, iter_sampling=30, leapfrog_steps=7)
    assert toy_registry[-1] == dict(algorithm="toy", epsilon=1.0, delta=1e-5, chains=3, iterations=50,
                                    n_rows=ToyModel().n_rows, leapfrog_steps=7)


def test_summary_and_plot_trace_work(toy_registry):
    """az.summary labels every scalar; the installed line's trace plot draws every released variable
    (one row of axes per variable on arviz 0.x, one trace per variable in the PlotCollection on 1.x);
    az.plot_pair runs."""
    import matplotlib.pyplot as plt

    idata = run_toy()
    summary = az.summary(idata)
    assert {"mu", "sigma", "b[0]", "b[1]"} <= set(summary.index)
    plot = az.plot_trace(idata)
    if uses_datatree():
        assert set(plot.viz["trace"].data_vars) == {"mu", "sigma", "b"}
    else:
        assert plot.shape[0] == 3
    plt.close("all")
    az.plot_pair(idata, var_names=["mu", "sigma"])
    plt.close("all")


def test_attrs_are_netcdf_safe_and_survive_round_trip(toy_registry, tmp_path):
    idata = run_toy(save_warmup=True, model_name="toy_model", source_hash="abc123")
    attrs = dict(idata.attrs)
    for key, value in attrs.items():
        assert isinstance(value, (str, int, float)) and not isinstance(value, bool), (key, value)
    path = tmp_path / "fit.nc"
    idata.to_netcdf(path)
    back = az.from_netcdf(path)
    assert set(group_names(back)) == {"posterior", "sample_stats", "warmup_posterior", "warmup_sample_stats"}
    for key, value in attrs.items():
        got = back.attrs[key]
        assert (got == value) if not isinstance(value, float) else got == pytest.approx(value), key
    np.testing.assert_array_equal(back.sample_stats["accepted"].values, idata.sample_stats["accepted"].values)
    assert back.sample_stats["accepted"].dtype == bool


def test_privacy_attrs_content(toy_registry):
    idata = run_toy(model_name="toy_model", source_hash="abc123", ratio_clip=2.5)
    a = idata.attrs
    assert a["private"] == 1 and "privacy_warning" not in a
    assert a["algorithm"] == "toy"
    assert json.loads(a["algorithm_options"]) == {"ratio_clip": 2.5, "leapfrog_steps": 3}
    assert a["epsilon"] == 1.0 and a["delta"] == 1e-5
    assert a["epsilon_spent"] == pytest.approx(1.0) and a["interrupted"] == 0
    assert a["accountant"] == "toy PLD accountant"
    assert a["neighbouring_relation"].startswith("substitution")
    assert "differential" in a["guarantee_type"]
    assert json.loads(a["privacy_report"])["epsilon"] == pytest.approx(1.0)
    assert json.loads(a["privacy_mechanisms"])[0]["count"] == 10
    assert json.loads(a["released_variables"]) == ["mu", "sigma", "b"]
    assert "accepted" in json.loads(a["released_sample_stats"])
    assert json.loads(a["noise_calibration"])["tau_l"] == 3.0
    assert a["N"] == 50 and a["model_name"] == "toy_model" and a["stan_source_hash"] == "abc123"
    assert a["seeded"] == 1 and "reproducible by anyone who knows the seed" in a["seed_note"]
    assert a["iterations_completed"] == a["iterations_planned"] == 2 * 140
    assert a["stan_dp_version"]
    # the seed itself is never stored: publishing it would void the guarantee
    assert "seed" not in a
    assert not any(str(v) == "3" for k, v in a.items() if "seed" in k)
    run_opts = json.loads(a["run_options"])
    assert run_opts["target_accept"] == 0.5 and run_opts["metric"] == "unit"


def test_unseeded_run_attrs_and_absent_optional_keys(toy_registry):
    idata = run_toy(seed=None)
    assert idata.attrs["seeded"] == 0 and "seed_note" not in idata.attrs
    assert "model_name" not in idata.attrs and "stan_source_hash" not in idata.attrs


def test_run_defaults_per_algorithm_and_overrides(toy_registry, monkeypatch):
    assert run_plan.run_defaults("penalty")["target_accept"] == 0.3
    assert run_plan.run_defaults("dp-hmc")["target_accept"] == 0.65

    class Tuned(ToyKernel):
        run_defaults = {"target_accept": 0.42}

    assert run_plan.run_defaults("toy", Tuned)["target_accept"] == 0.42
    idata = run_toy(target_accept=0.55, step_size=0.2, metric="diag")
    opts = json.loads(idata.attrs["run_options"])
    assert opts == {"step_size": 0.2, "target_accept": 0.55, "metric": "diag", "adapt_engaged": True,
                    "pool_metric": True}
    assert idata.attrs["metric"] == "diag" and len(json.loads(idata.attrs["inv_metric"])) == 2


def test_warmup_groups_only_when_asked(toy_registry):
    idata = run_toy(save_warmup=True)
    assert idata.warmup_posterior["b"].shape == (2, 60, 2)
    assert idata.warmup_sample_stats["acceptance_rate"].shape == (2, 60)
    assert_no_forbidden(idata)
    assert "warmup_posterior" not in group_names(run_toy())


def test_seeded_runs_are_reproducible_end_to_end(toy_registry):
    a, b, c = run_toy(seed=8), run_toy(seed=8), run_toy(seed=9)
    np.testing.assert_array_equal(a.posterior["b"].values, b.posterior["b"].values)
    assert not np.array_equal(a.posterior["b"].values, c.posterior["b"].values)


# ---------------------------------------------------------------------------------------------- validation
def test_unknown_algorithm_lists_valid_ones(toy_registry):
    with pytest.raises(ValueError, match=r"Unknown algorithm 'nuts'.*other, .*toy"):
        run_toy(algorithm="nuts")


def test_unknown_option_lists_valid_ones(toy_registry):
    with pytest.raises(ValueError, match=r"'grad_clipp'.*leapfrog_steps, ratio_clip.*target_accept"):
        run_toy(grad_clipp=1.0)


def test_budget_too_small_propagates(toy_registry):
    with pytest.raises(ValueError, match="budget too small"):
        run_toy(epsilon=0.001)


def test_refuses_non_private_stat_names(toy_registry):
    class Leaky(ToyKernel):
        def step(self, rng, state, step_size, metric):
            state, info = super().step(rng, state, step_size, metric)
            info.extra["lp"] = state.cache["logp"]
            return state, info

    with registry.registered(KernelMethod("toy", Leaky, calibrate=toy_calibrate), replace=True), \
            pytest.raises(ValueError, match="refusing to release"):
        run_toy()
    for name in ("lp", "lp__", "log_likelihood", "loglik", "energy", "clip_fraction", "n_clipped", "grad_norm"):
        with pytest.raises(ValueError):
            check_releasable([name])
    check_releasable(["accepted", "acceptance_rate", "step_size", "n_steps", "noise_sd", "batch_size",
                      "full_batch", "noise_free"])


# -------------------------------------------------------------------------------------------------- debug
def test_debug_marks_object_not_private(toy_registry, tmp_path):
    idata = run_toy(debug=True)
    assert idata.attrs["private"] == 0
    assert "NOT PRIVATE" in idata.attrs["privacy_warning"]
    assert "debug_diagnostics" in group_names(idata)
    lp = idata["debug_diagnostics"]["lp"]
    assert lp.shape == (2, 80)
    model = ToyModel()
    theta = np.array([idata.posterior["mu"].values[0, 0], np.log(idata.posterior["sigma"].values[0, 0]),
                      *idata.posterior["b"].values[0, 0]])
    assert float(lp[0, 0]) == pytest.approx(model.log_density(theta))
    # the standard groups stay clean even in debug mode
    for group in ("posterior", "sample_stats"):
        assert "lp" not in idata[group]
    path = tmp_path / "debug.nc"
    idata.to_netcdf(path)
    assert az.from_netcdf(path).attrs["private"] == 0


def test_diagnostics_require_debug():
    lik = ToyModel()
    res = run_chains(lik, ToyKernel(lik, None), chains=1, iter_warmup=5, iter_sampling=5, show_progress=False)
    with pytest.raises(ValueError, match="debug=True"):
        build_inference_data(res, lik, RunRecord("toy", {}, ToyReport(1.0, 1e-5)),
                             diagnostics={"debug_diagnostics": {"lp": np.zeros((1, 5))}})


# -------------------------------------------------------------------------------------------- interruption
def test_interrupted_run_reports_smaller_spent_budget(toy_registry):
    event = threading.Event()

    class Stopping(ToyKernel):
        count = 0
        lock = threading.Lock()

        def step(self, rng, state, step_size, metric):
            time.sleep(0.0005)  # let the two chain threads interleave, as native kernels do
            with Stopping.lock:
                Stopping.count += 1
                if Stopping.count >= 300:
                    event.set()
            return super().step(rng, state, step_size, metric)

    with registry.registered(KernelMethod("toy", Stopping, calibrate=toy_calibrate), replace=True), \
            pytest.warns(RunInterruptedWarning):
        idata = run_toy(stop_event=event, iter_warmup=50, iter_sampling=500)
    a = idata.attrs
    assert a["interrupted"] == 1
    assert a["iterations_completed"] == Stopping.count < a["iterations_planned"] == 1100
    assert a["epsilon_spent"] < a["epsilon"] == 1.0
    assert a["epsilon_spent"] == pytest.approx(np.sqrt(Stopping.count / 1100))
    assert json.loads(a["privacy_report"])["epsilon"] == pytest.approx(a["epsilon_spent"])
    n = idata.posterior.sizes["draw"]
    assert 0 < n < 500
    assert az.summary(idata).shape[0] == 4


# ------------------------------------------------------------------------------------------- constraining
def test_constrain_many_is_used_when_offered():
    class Batched(ToyModel):
        def constrain_many(self, thetas):
            self.batched = thetas.shape
            return {"mu": thetas[:, 0], "sigma": np.exp(thetas[:, 1]), "b": thetas[:, 2:4]}

    lik = Batched()
    draws = np.random.default_rng(0).normal(size=(3, 7, 4))
    out = constrain_draws(lik, draws)
    assert lik.batched == (21, 4) and lik.constrain_calls == 0
    np.testing.assert_allclose(out["sigma"], np.exp(draws[:, :, 1]))
    assert out["b"].shape == (3, 7, 2)
    plain = constrain_draws(ToyModel(), draws)
    for name in out:
        np.testing.assert_allclose(out[name], plain[name])


# ------------------------------------------------------------------------------------- real samplers
REAL_RUN = dict(epsilon=2.0, delta=1e-5, chains=2, iter_warmup=150, iter_sampling=100, show_progress=False)


@pytest.fixture(scope="module")
def gaussian():
    from stan_dp.models.reference_models import GaussianMeanModel

    return GaussianMeanModel.simulate(n=2000, dim=2, seed=4)


@pytest.mark.parametrize(
    "algorithm, options, stats",
    [
        ("penalty", {"ratio_clip": 3.0}, {"noise_sd"}),
        ("dp-hmc", {"ratio_clip": 3.0, "grad_clip": 3.0, "leapfrog_steps": 3, "anchor": "none"},
         {"n_steps", "noise_sd", "grad_noise_sd", "diverging"}),
    ],
)
def test_real_samplers_end_to_end(gaussian, algorithm, options, stats, tmp_path):
    import matplotlib.pyplot as plt

    from stan_dp.privacy import NEIGHBOURING_RELATION, PrivacyReport

    idata = sampling.sample_private(gaussian, algorithm=algorithm, seed=1, save_warmup=True, **REAL_RUN, **options)
    assert {"accepted", "acceptance_rate", "step_size"} | stats == set(idata.sample_stats.data_vars)
    assert idata.posterior["theta"].shape == (2, 100, 2)
    assert_no_forbidden(idata)
    a = idata.attrs
    assert a["private"] == 1 and a["algorithm"] == algorithm and a["neighbouring_relation"] == NEIGHBOURING_RELATION
    report = PrivacyReport.from_json(a["privacy_report"])
    assert report.epsilon == pytest.approx(a["epsilon_spent"]) and a["epsilon_spent"] <= 2.0
    assert a["epsilon_spent"] >= 0.99 * 2.0 and report.total_iterations == 2 * 250
    assert json.loads(a["noise_calibration"])["tau_l"] > 0
    kernel_options = {k: v for k, v in options.items() if k != "anchor"}  # anchor='none': no anchor options
    assert json.loads(a["algorithm_options"]) == {**ALL_ALGORITHMS[algorithm].option_defaults, **kernel_options}
    az.summary(idata)
    az.plot_trace(idata)
    plt.close("all")
    idata.to_netcdf(tmp_path / "fit.nc")
    back = az.from_netcdf(tmp_path / "fit.nc")
    assert back.attrs["privacy_report"] == a["privacy_report"]


def test_real_run_from_posterior_mean_stays_near_it(gaussian):
    # public inits at the posterior mean (a test-only shortcut): the chain must sample around it
    mean, sd = gaussian.posterior_mean(), np.sqrt(np.diag(gaussian.posterior_cov()))
    idata = sampling.sample_private(gaussian, algorithm="penalty", seed=2, inits=mean, ratio_clip=3.0,
                                    metric="diag", **{**REAL_RUN, "epsilon": 10.0, "iter_sampling": 300})
    draws = idata.posterior["theta"].values.reshape(-1, 2)
    assert np.all(np.abs(draws.mean(0) - mean) < 3 * sd)
    assert np.all(draws.std(0) < 5 * sd)


def test_real_interrupted_run_reports_spent_budget(gaussian):
    from stan_dp.phases.calibration import calibrate

    event = threading.Event()
    penalty = ALL_ALGORITHMS["penalty"]
    steps = []

    class Interrupting(penalty):
        def step(self, rng, state, step_size, metric):
            steps.append(1)
            if len(steps) >= 120:
                event.set()
            return super().step(rng, state, step_size, metric)

    with registry.registered(KernelMethod("penalty", Interrupting), replace=True), \
            pytest.warns(RunInterruptedWarning):
        idata = sampling.sample_private(gaussian, algorithm="penalty", ratio_clip=1.0, seed=3, stop_event=event,
                                        **REAL_RUN)
    a = idata.attrs
    assert a["interrupted"] == 1 and a["iterations_completed"] == len(steps) < 500
    plan = calibrate("penalty", epsilon=2.0, delta=1e-5, chains=2, iterations=250)
    assert a["epsilon_spent"] == pytest.approx(plan.report(completed_iterations=len(steps)).epsilon)
    assert a["epsilon_spent"] < 2.0 and a["epsilon"] == 2.0


def test_real_registry_errors(gaussian):
    with pytest.raises(ValueError, match=r"valid algorithms: dp-fast-mh, dp-fast-mh-full, dp-glm, dp-hmc, dp-laplace, dp-sghmc, dp-sgld, dp-sgnht, dp-ssp, hybrid, ops, penalty"):
        sampling.sample_private(gaussian, algorithm="nuts", **REAL_RUN)
    with pytest.raises(ValueError, match=r"'grad_clip'.*algorithm 'penalty'.*ratio_clip"):
        sampling.sample_private(gaussian, algorithm="penalty", grad_clip=1.0, **REAL_RUN)
    with pytest.raises(ValueError, match="delta"):
        sampling.sample_private(gaussian, algorithm="penalty", **{**REAL_RUN, "delta": 0.0})
