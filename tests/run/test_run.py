"""Run machinery (stan_dp.run): adaptation, seeding, inits, parallel chains, interruption.

The stand-in kernel is an ordinary (non-private) Gaussian random walk on a NumPy Gaussian: the run machinery is
algorithm-agnostic, so a trivially simple kernel exercises it fully and fast.
"""
from __future__ import annotations

import _thread
import dataclasses
import signal
import threading
import time

import numpy as np
import pytest

from stan_dp.phases.chains import RunInterruptedWarning, initial_points, run_chains
from stan_dp.samplers.adaptation import DualAveraging, MetricWindows, regularized_variance
from stan_dp.samplers.base import ChainState, KernelBase, StepInfo


class ToyGaussian:
    """N(0, diag(scales^2)) as a RowLikelihood stand-in (only dim / constrain matter to the run machinery)."""

    n_rows = 10

    def __init__(self, scales):
        self.scales = np.asarray(scales, dtype=float)
        self.dim = self.scales.size

    def log_density(self, theta):
        return -0.5 * float(np.sum((theta / self.scales) ** 2))

    def param_shapes(self):
        return {"theta": (self.dim,)}

    def constrain(self, theta):
        return {"theta": np.asarray(theta)}


class RandomWalk(KernelBase):
    """Gaussian random walk MH with proposal step_size * sqrt(metric) * z (metric = inverse metric)."""

    accounting_name = "toy"
    option_defaults: dict = {}

    def __init__(self, likelihood, plan=None, **options):
        self.lik = likelihood
        self.calls = 0
        self._lock = threading.Lock()

    @classmethod
    def accounting_shape(cls, options):
        return {}

    def init_state(self, theta):
        return ChainState(np.asarray(theta, float), {"logp": self.lik.log_density(theta)})

    def step(self, rng, state, step_size, metric):
        with self._lock:
            self.calls += 1
        prop = state.theta + step_size * np.sqrt(metric) * rng.standard_normal(state.theta.size)
        logp = self.lik.log_density(prop)
        log_ratio = logp - state.cache["logp"]
        accept = bool(np.log(rng.uniform()) < log_ratio)
        stat = float(min(1.0, np.exp(min(log_ratio, 0.0))))
        if accept:
            state = ChainState(prop, {"logp": logp})
        return state, StepInfo(accept, stat, {"n_steps": 1, "noise_sd": 0.0})


class StopAfter(RandomWalk):
    """Sets ``event`` once ``limit`` steps (over all chains) have been taken."""

    def __init__(self, likelihood, event, limit):
        super().__init__(likelihood)
        self.event, self.limit = event, limit

    def step(self, rng, state, step_size, metric):
        out = super().step(rng, state, step_size, metric)
        if self.calls >= self.limit:
            self.event.set()
        return out


def quiet_run(lik, kernel, **kw):
    kw.setdefault("show_progress", False)
    return run_chains(lik, kernel, **kw)


# --------------------------------------------------------------------------------------------- adaptation
def test_dual_averaging_solves_a_known_acceptance_curve():
    # acceptance exp(-eps) reaches 0.5 at eps = log 2
    da = DualAveraging(0.5, 1.0)
    eps = 1.0
    for _ in range(2000):
        eps = da.update(np.exp(-eps))
    assert da.final == pytest.approx(np.log(2.0), rel=0.02)


def test_dual_averaging_treats_nan_as_rejection_and_validates_target():
    nan_step = DualAveraging(0.8, 1.0).update(float("nan"))
    assert nan_step == DualAveraging(0.8, 1.0).update(0.0) < DualAveraging(0.8, 1.0).update(1.0)
    with pytest.raises(ValueError, match="target_accept"):
        DualAveraging(1.0, 1.0)


@pytest.mark.parametrize("target", [0.3, 0.7])
def test_step_size_adaptation_reaches_target_acceptance(target):
    lik = ToyGaussian([1.0, 1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=1000, iter_sampling=1500, seed=11,
                    step_size=5.0, target_accept=target)
    stats = res.stats_arrays()
    mean_accept = float(stats["acceptance_rate"].mean())
    assert abs(mean_accept - target) < 0.1  # seeds 0..19 all land within 0.08
    # the step size is fixed after warmup, at the adapted value
    assert np.all(stats["step_size"] == res.step_sizes[:, None])
    assert not np.allclose(res.step_sizes, 5.0)


def test_no_adaptation_without_warmup_or_when_disengaged():
    lik = ToyGaussian([1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=0, iter_sampling=50, seed=1, step_size=0.7)
    assert np.all(res.stats_arrays()["step_size"] == 0.7)
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=50, iter_sampling=10, seed=1, step_size=0.7,
                    adapt_engaged=False, metric="diag", save_warmup=True)
    assert np.all(res.stats_arrays(warmup=True)["step_size"] == 0.7)
    assert np.all(res.metrics == 1.0)


def test_metric_windows_follow_stan():
    assert MetricWindows(1000).ends == [99, 149, 249, 449, 949]
    assert MetricWindows(150).ends == [99]
    assert MetricWindows(100).ends == [89]  # 15% / 75% / 10%
    assert MetricWindows(20).ends == [17]
    assert MetricWindows(19).ends == []
    w = MetricWindows(1000)
    assert not w.collects(74) and w.collects(75) and w.collects(949) and not w.collects(950)


@pytest.mark.parametrize("metric", ["unit", "diag"])
def test_dual_averaging_restarts_at_window_ends(metric):
    # a restart re-centres the shrinkage point at 10x the current step: the next step size jumps up
    lik = ToyGaussian([1.0, 1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=1000, iter_sampling=1, seed=2, metric=metric,
                    save_warmup=True, target_accept=0.3)
    eps = res.stats_arrays(warmup=True)["step_size"][0]
    jumps = eps[1:] / eps[:-1]  # jumps[i] = eps[i + 1] / eps[i]
    for end in (99, 149, 249, 449):
        assert jumps[end + 1] > 3.0, (end, jumps[end + 1])
    # the last window end restarts only when the metric changed there
    assert (jumps[950] > 3.0) == (metric == "diag"), jumps[950]


def test_regularized_variance_formula():
    x = np.array([[0.0, 1.0], [2.0, 1.0], [4.0, 1.0]])
    n = 3
    expected = n / (n + 5) * np.array([4.0, 0.0]) + 1e-3 * 5 / (n + 5)
    np.testing.assert_allclose(regularized_variance(x), expected)


def test_diag_metric_recovers_known_scales():
    scales = np.array([0.05, 1.0, 8.0])
    lik = ToyGaussian(scales)
    res = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=1500, iter_sampling=200, seed=5,
                    metric="diag", target_accept=0.3)
    ratio = res.metrics / scales**2
    assert np.all((ratio > 0.4) & (ratio < 2.5)), ratio
    # with a unit metric the metric stays one
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=100, iter_sampling=10, seed=5)
    assert np.all(res.metrics == 1.0)


def test_fixed_metric_array_is_used_and_validated():
    lik = ToyGaussian([1.0, 1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=30, iter_sampling=10, seed=2,
                    metric=np.array([2.0, 3.0]))
    np.testing.assert_array_equal(res.metrics[0], [2.0, 3.0])
    with pytest.raises(ValueError, match="positive"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=1, iter_sampling=1, metric=np.array([1.0, -1.0]))
    with pytest.raises(ValueError, match="metric"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=1, iter_sampling=1, metric="dense")


def test_short_warmup_warns_that_the_metric_is_not_adapted():
    lik = ToyGaussian([1.0])
    with pytest.warns(UserWarning, match="no metric adaptation"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=10, iter_sampling=5, metric="diag")


# ---------------------------------------------------------------------------------------------------- seeds
def test_same_seed_same_draws_different_seed_different_draws():
    lik = ToyGaussian([1.0, 2.0])
    kw = dict(chains=3, iter_warmup=100, iter_sampling=100, metric="diag", save_warmup=True)
    a = quiet_run(lik, RandomWalk(lik), seed=123, **kw)
    b = quiet_run(lik, RandomWalk(lik), seed=123, **kw)
    c = quiet_run(lik, RandomWalk(lik), seed=124, **kw)
    np.testing.assert_array_equal(a.draws_array(), b.draws_array())
    np.testing.assert_array_equal(a.draws_array(warmup=True), b.draws_array(warmup=True))
    for name in a.stat_names:
        np.testing.assert_array_equal(a.stats_arrays()[name], b.stats_arrays()[name])
    assert not np.array_equal(a.draws_array(), c.draws_array())
    # chains differ from each other
    assert not np.array_equal(a.draws_array()[0], a.draws_array()[1])
    assert a.seeded and c.seeded


def test_unseeded_runs_differ_and_say_so():
    lik = ToyGaussian([1.0])
    a = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=5, iter_sampling=20)
    b = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=5, iter_sampling=20)
    assert not a.seeded
    assert not np.array_equal(a.draws_array(), b.draws_array())


def test_seed_validation():
    lik = ToyGaussian([1.0])
    with pytest.raises(ValueError, match="non-negative"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=1, iter_sampling=1, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=1, iter_sampling=1, seed="7")


# ---------------------------------------------------------------------------------------------------- inits
def test_default_inits_are_uniform_minus_two_two_per_chain():
    rngs = [np.random.default_rng(i) for i in range(4)]
    points, how = initial_points(None, 4, 3, rngs)
    assert points.shape == (4, 3)
    assert np.all(np.abs(points) <= 2.0) and "uniform(-2, 2)" in how
    assert len({tuple(p) for p in points}) == 4
    zeros, _ = initial_points(0, 4, 3, rngs)
    assert np.all(zeros == 0)
    small, _ = initial_points(0.5, 4, 3, rngs)
    assert np.all(np.abs(small) <= 0.5)


def test_user_inits_are_used_and_validated():
    lik = ToyGaussian([1.0, 1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=[0.5, -0.5], seed=0)
    np.testing.assert_array_equal([c.init for c in res.chains], [[0.5, -0.5], [0.5, -0.5]])
    per_chain = np.array([[1.0, 2.0], [3.0, 4.0]])
    res = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=per_chain, seed=0)
    np.testing.assert_array_equal([c.init for c in res.chains], per_chain)
    assert res.init_description == "user-given"
    with pytest.raises(ValueError, match=r"expected \(2,\) .* or \(2, 2\)"):
        quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=np.zeros(3))
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=np.zeros((3, 2)))
    with pytest.raises(ValueError, match="finite"):
        quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=[0.0, np.nan])
    with pytest.raises(TypeError, match="unconstrained"):
        quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits={"theta": [0.0, 0.0]})
    with pytest.raises(ValueError, match="non-negative"):
        quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=0, iter_sampling=1, inits=-1.0)


def test_run_argument_validation():
    lik = ToyGaussian([1.0])
    with pytest.raises(ValueError, match="chains"):
        quiet_run(lik, RandomWalk(lik), chains=0)
    with pytest.raises(ValueError, match="iter_sampling"):
        quiet_run(lik, RandomWalk(lik), chains=1, iter_sampling=-1)
    with pytest.raises(ValueError, match="step_size"):
        quiet_run(lik, RandomWalk(lik), chains=1, step_size=0.0)
    with pytest.raises(ValueError, match="target_accept"):
        quiet_run(lik, RandomWalk(lik), chains=1, target_accept=1.5)


# ------------------------------------------------------------------------------------------- result layout
def test_result_shapes_and_stats():
    lik = ToyGaussian([1.0, 1.0, 1.0])
    res = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=40, iter_sampling=30, seed=3, save_warmup=True)
    assert res.draws_array().shape == (2, 30, 3)
    assert res.draws_array(warmup=True).shape == (2, 40, 3)
    stats = res.stats_arrays()
    assert list(stats) == ["accepted", "acceptance_rate", "step_size", "n_steps", "noise_sd"]
    assert stats["accepted"].dtype == bool and stats["n_steps"].dtype.kind == "i"
    assert stats["accepted"].shape == (2, 30)
    assert res.stats_arrays(warmup=True)["acceptance_rate"].shape == (2, 40)
    assert res.completed_iterations == res.planned_iterations == 140 and not res.interrupted
    # acceptance flags agree with the chain's moves
    d = res.draws_array()
    moved = np.any(d[:, 1:] != d[:, :-1], axis=2)
    np.testing.assert_array_equal(moved, stats["accepted"][:, 1:])
    # without save_warmup no warmup draws are kept, warmup stats still are
    res = quiet_run(lik, RandomWalk(lik), chains=1, iter_warmup=10, iter_sampling=5, seed=3)
    assert res.chains[0].warmup_draws is None
    with pytest.raises(ValueError, match="save_warmup"):
        res.draws_array(warmup=True)


def test_extra_may_not_redefine_core_stats():
    class Bad(RandomWalk):
        def step(self, rng, state, step_size, metric):
            state, info = super().step(rng, state, step_size, metric)
            info.extra["accepted"] = 1
            return state, info

    lik = ToyGaussian([1.0])
    with pytest.raises(ValueError, match="core statistic"):
        quiet_run(lik, Bad(lik), chains=1, iter_warmup=1, iter_sampling=1)


def test_kernel_error_propagates_and_names_the_chain():
    class Boom(RandomWalk):
        def step(self, rng, state, step_size, metric):
            if self.calls > 20:
                raise RuntimeError("kernel exploded")
            return super().step(rng, state, step_size, metric)

    lik = ToyGaussian([1.0])
    with pytest.raises(RuntimeError, match="kernel exploded") as info:
        quiet_run(lik, Boom(lik), chains=2, iter_warmup=50, iter_sampling=50)
    assert any("chain" in note for note in getattr(info.value, "__notes__", []))


# ------------------------------------------------------------------------------------------- interruption
def test_stop_event_returns_partial_draws_and_counts_iterations():
    lik = ToyGaussian([1.0, 1.0])
    event = threading.Event()
    kernel = StopAfter(lik, event, limit=130)
    with pytest.warns(RunInterruptedWarning, match="interrupted"):
        res = quiet_run(lik, kernel, chains=2, iter_warmup=50, iter_sampling=200, seed=4, stop_event=event)
    assert res.interrupted
    assert res.completed_iterations == kernel.calls  # every step that ran is counted, none more
    assert res.completed_iterations < res.planned_iterations
    per_chain = res.iterations_per_chain
    assert per_chain.sum() == res.completed_iterations
    n = res.n_draws()
    assert 0 <= n < 200
    assert res.draws_array().shape == (2, n, 2)
    assert np.all(np.isfinite(res.draws_array()))
    assert all(c.n_sampling == c.iterations - 50 for c in res.chains if c.iterations >= 50)


@pytest.fixture
def python_sigint_handler():
    """Python's own SIGINT handler for the test's duration. Python turns SIGINT into KeyboardInterrupt only if
    the process did not inherit SIGINT as ignored; a background job of a non-interactive shell (``make test &``)
    inherits it ignored, and ``_thread.interrupt_main`` then does nothing. An interactive user, whose Ctrl-C
    the test simulates, has the handler."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_ctrl_c_stops_cleanly_with_partial_result(python_sigint_handler):
    """Ctrl-C (KeyboardInterrupt in the main thread) stops every chain after its current iteration and returns
    the completed iterations with a RunInterruptedWarning."""
    fire_lock, fired = threading.Lock(), []

    class InterruptMain(RandomWalk):
        def step(self, rng, state, step_size, metric):
            time.sleep(0.001)
            # two chain threads can both step past exactly 60 between checks: fire once at or after it
            with fire_lock:
                if self.calls >= 60 and not fired:
                    fired.append(True)
                    _thread.interrupt_main()  # what Ctrl-C does: KeyboardInterrupt in the main thread
            return super().step(rng, state, step_size, metric)

    lik = ToyGaussian([1.0])
    kernel = InterruptMain(lik)
    with pytest.warns(RunInterruptedWarning, match="Ctrl-C"):
        res = quiet_run(lik, kernel, chains=2, iter_warmup=20, iter_sampling=5000, seed=9)
    assert res.interrupted
    assert res.completed_iterations == kernel.calls < res.planned_iterations


def test_progress_bar_goes_to_stderr(capsys):
    lik = ToyGaussian([1.0])
    run_chains(lik, RandomWalk(lik), chains=2, iter_warmup=10, iter_sampling=10, seed=0, show_progress=True,
               progress_desc="toy-bar")
    err = capsys.readouterr().err
    assert "toy-bar" in err and "40/40" in err
    run_chains(lik, RandomWalk(lik), chains=2, iter_warmup=10, iter_sampling=10, seed=0, show_progress=False,
               progress_desc="toy-bar")
    assert "toy-bar" not in capsys.readouterr().err


def test_settings_object_and_keywords_give_the_same_draws_and_unknown_names_are_refused():
    """run_chains takes its loop settings as one frozen RunSettings or as keywords on top of it: both spell the
    same run (identical seeded draws); a keyword that is no setting is a TypeError naming it."""
    from stan_dp.run_options import RunSettings

    lik = ToyGaussian([1.0, 2.0])
    settings = RunSettings(chains=2, iter_warmup=30, iter_sampling=20, step_size=0.5, target_accept=0.6,
                           metric="diag", show_progress=False)
    a = run_chains(lik, RandomWalk(lik), settings, seed=4)
    b = quiet_run(lik, RandomWalk(lik), chains=2, iter_warmup=30, iter_sampling=20, step_size=0.5,
                  target_accept=0.6, metric="diag", seed=4)
    np.testing.assert_array_equal(a.draws_array(), b.draws_array())
    with pytest.raises(TypeError, match="step_sise"):
        quiet_run(lik, RandomWalk(lik), step_sise=0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.chains = 3  # type: ignore[misc]
