"""One random stream per purpose (stan_dp.privacy.noise_source.stream / streams): a seeded run is reproducible,
and the generator that draws a mechanism's noise never draws the public randomness whose results are released
(chain starts, noise-aware shifts, probe points, dp-laplace's draws), so changing one purpose's stream leaves
every other purpose's draws as they were."""
from __future__ import annotations

import json
import threading
import warnings

import numpy as np
import pytest

from stan_dp import sample_private
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.audit.targets import memoized_calibration
from stan_dp.privacy import noise_source
from stan_dp.run.chains import run_chains
from stan_dp.samplers.base import ChainState, KernelBase, StepInfo


def test_streams_are_reproducible_distinct_and_stable_in_the_chain_count():
    """Same seed, purpose and phase: identical draws; another purpose or phase: other draws; chain c's stream
    does not depend on how many chains there are; unseeded streams are ChaCha20 and differ; a typo is refused."""
    def first(gen):
        return gen.standard_normal(4)

    a = noise_source.stream(7, "mechanism noise", "anchor")
    b = noise_source.stream(7, "mechanism noise", "anchor")
    np.testing.assert_array_equal(first(a), first(b))
    seen = [first(noise_source.stream(7, p, ph)).tobytes() for p in noise_source.PURPOSES
            for ph in noise_source.PHASES]
    assert len(set(seen)) == len(seen)  # every (purpose, phase) pair has its own stream
    two = noise_source.streams(7, "chain starts", "chains", 2)
    four = noise_source.streams(7, "chain starts", "chains", 4)
    for c in range(2):
        np.testing.assert_array_equal(first(two[c]), first(four[c]))
    assert not np.array_equal(first(noise_source.stream(7, "chain starts", "chains")),
                              first(noise_source.stream(8, "chain starts", "chains")))
    u, v = noise_source.stream(None, "mechanism noise", "chains"), noise_source.stream(None, "mechanism noise", "chains")
    assert type(u.bit_generator).__name__ == "ChaCha" and not np.array_equal(first(u), first(v))
    with pytest.raises(KeyError, match="unknown random-stream purpose"):
        noise_source.stream(7, "chain start", "chains")
    with pytest.raises(ValueError, match="non-negative"):
        noise_source.stream(-1, "chain starts", "chains")


class _Toy:
    n_rows, dim = 5, 2

    def param_shapes(self):
        return {"theta": (2,)}

    def constrain(self, theta):
        return {"theta": np.asarray(theta)}


class _RecordingKernel(KernelBase):
    """Records the first normal each chain's kernel generator gives at every step (what a mechanism would draw)."""

    def __init__(self):
        self.seen: dict[int, list[float]] = {}
        self._lock = threading.Lock()

    def init_state(self, theta):
        return ChainState(np.asarray(theta, dtype=float), {})

    def step(self, rng, state, step_size, metric):
        z = float(rng.standard_normal())
        with self._lock:
            self.seen.setdefault(threading.get_ident(), []).append(z)
        return ChainState(state.theta + 0.1 * z, {}), StepInfo(True, 1.0, {})


def test_kernel_noise_is_the_same_however_the_chain_starts_are_drawn():
    """run_chains with the same seed and random starts (radius 2), other random starts (radius 0.5) or given
    starts: the kernels' generators give the same draws in every case (the starts come from their own stream),
    while the starts themselves differ."""
    def run(inits):
        kernel = _RecordingKernel()
        result = run_chains(_Toy(), kernel, chains=1, iter_warmup=0, iter_sampling=20, seed=3, inits=inits,
                            show_progress=False)
        (noise,) = kernel.seen.values()
        return np.asarray(noise), result.chains[0].init

    ref_noise, ref_start = run(None)
    for inits in (0.5, np.array([0.3, -0.2])):
        noise, start = run(inits)
        np.testing.assert_array_equal(noise, ref_noise)
        assert not np.array_equal(start, ref_start)


_CALIBRATIONS: dict = {}  # the PLD calibration of identical budgets is computed once (same noise as unmemoized)


def _anchored_fit(model, seed=5, **extra):
    with warnings.catch_warnings(), memoized_calibration(_CALIBRATIONS):
        warnings.simplefilter("ignore")
        return sample_private(model, algorithm="dp-sgld", epsilon=2.0, delta=1e-5, chains=2, iter_warmup=20,
                              iter_sampling=20, seed=seed, show_progress=False, grad_clip=3.0, anchor="dp-gd",
                              anchor_steps=10, inits=np.zeros(model.dim), **extra)


@pytest.mark.slow
def test_anchored_run_mechanism_noise_does_not_depend_on_the_public_streams(monkeypatch):
    """A seeded anchored run is reproducible; with the "chain starts" stream changed (another purpose key) the
    released anchor values (theta_hat, G~ and C) are identical and only the chains' starts (hence draws) move;
    the noise-aware map is deterministic post-processing of the chains' draws, so with the "noise-aware shifts"
    stream changed both the chains' draws and the released (shifted) posterior are identical, and the released
    posterior differs from the chains' draws (the widening was applied)."""
    model = LogisticRegressionModel.simulate(n=300, dim=2, seed=3)
    a, b = _anchored_fit(model), _anchored_fit(model)
    for group in ("posterior", "chain_posterior"):
        np.testing.assert_array_equal(a[group]["beta"].values, b[group]["beta"].values)
    released = ("anchor_theta", "anchor_gradient", "diff_clip")

    monkeypatch.setitem(noise_source.PURPOSES, "chain starts", 0x12345)
    c = _anchored_fit(model)
    assert all(a.attrs[k] == c.attrs[k] for k in released)
    assert not np.array_equal(a.chain_posterior["beta"].values, c.chain_posterior["beta"].values)
    monkeypatch.undo()

    monkeypatch.setitem(noise_source.PURPOSES, "noise-aware shifts", 0x12345)
    d = _anchored_fit(model)
    assert all(a.attrs[k] == d.attrs[k] for k in released)
    np.testing.assert_array_equal(a.chain_posterior["beta"].values, d.chain_posterior["beta"].values)
    np.testing.assert_array_equal(a.posterior["beta"].values, d.posterior["beta"].values)
    assert not np.array_equal(a.posterior["beta"].values, a.chain_posterior["beta"].values)


def test_diff_quantile_probe_points_have_their_own_stream(monkeypatch):
    """With the anchor-difference quantile (clip='adaptive', diff_clip_steps > 0), changing the "probe points"
    stream moves the public probe points (and so C) but not theta_hat or G~, whose noise has its own stream."""
    model = LogisticRegressionModel.simulate(n=300, dim=2, seed=3)
    opts = dict(clip="adaptive", diff_clip_steps=10)
    a = _anchored_fit(model, **opts)
    monkeypatch.setitem(noise_source.PURPOSES, "probe points", 0x12345)
    b = _anchored_fit(model, **opts)
    for key in ("anchor_theta", "anchor_gradient", "clip_bound"):
        assert a.attrs[key] == b.attrs[key], key
    assert "private quantile" in a.attrs["diff_clip_reason"]


def test_dp_laplace_draws_and_releases_have_separate_streams(monkeypatch):
    """dp-laplace: changing the "posterior draws" stream leaves every release identical and moves the draws."""
    model = LogisticRegressionModel.simulate(n=300, dim=2, seed=3)

    def fit():
        with memoized_calibration(_CALIBRATIONS):
            return sample_private(model, algorithm="dp-laplace", epsilon=2.0, delta=1e-5, chains=2, iter_sampling=50,
                                  seed=9, show_progress=False, grad_clip=3.0, inits=np.zeros(model.dim))

    a = fit()
    monkeypatch.setitem(noise_source.PURPOSES, "posterior draws", 0x12345)
    b = fit()
    for key in ("laplace_theta_hat", "laplace_gradient", "laplace_curvature"):
        assert json.loads(a.attrs[key]) == json.loads(b.attrs[key]), key
    assert not np.array_equal(a.posterior["beta"].values, b.posterior["beta"].values)
