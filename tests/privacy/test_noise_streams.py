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
from stan_dp.phases.chains import run_chains
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


def test_accepted_proposals_come_from_the_proposal_stream_never_from_the_noise_stream():
    """A seeded penalty run (fixed step, unit metric): replaying each chain's "proposals" stream (a normal per
    coordinate, then the accept draw, per iteration) reproduces every released draw exactly (accepted: the
    proposal; rejected: the point before), so the released proposals are draws of that stream alone; the
    mechanism-noise stream's first normals are not the first proposal."""
    from types import SimpleNamespace

    from stan_dp.samplers.penalty import PenaltyMH

    model = LogisticRegressionModel.simulate(n=200, dim=2, seed=4)
    kernel = PenaltyMH(model, SimpleNamespace(tau_l=0.5), ratio_clip=2.0)
    result = run_chains(model, kernel, chains=2, iter_warmup=0, iter_sampling=60, seed=9, inits=0.0, step_size=0.05,
                        adapt_engaged=False, show_progress=False)
    proposals = noise_source.streams(9, "proposals", "chains", 2)
    noise = noise_source.streams(9, "mechanism noise", "chains", 2)
    for c, chain in enumerate(result.chains):
        theta, accepted = np.zeros(model.dim), chain.stats["accepted"]
        assert 0 < accepted.sum() < accepted.size
        first = None
        for t in range(chain.draws.shape[0]):
            candidate = theta + 0.05 * proposals[c].standard_normal(model.dim)
            proposals[c].standard_exponential()  # the accept draw
            if accepted[t]:
                first = candidate if first is None else first
                theta = candidate
            np.testing.assert_array_equal(chain.draws[t], theta)
        assert not np.allclose(first, 0.05 * noise[c].standard_normal(model.dim))


class _Recording:
    """A generator that records which of its methods a kernel step calls."""

    def __init__(self, seed):
        self._rng, self.calls = np.random.default_rng(seed), set()

    def __getattr__(self, name):
        self.calls.add(name)
        return getattr(self._rng, name)


def test_kernels_draw_proposals_momenta_and_accept_draws_from_their_own_stream():
    """Every kernel that takes a proposal stream (penalty, DP-HMC, DP-Fast MH, DP-SGHMC, DP-SGNHT) draws its accept
    uniforms (an exponential), step jitter, momentum and public batch count from it: the mechanism-noise generator
    of a step sees no accept draw, no Poisson count and no integer of the jitter; a step's proposal changes with
    the proposal stream and not with the noise stream (penalty)."""
    from types import SimpleNamespace

    from stan_dp.samplers.fast_mh import DPFastMH
    from stan_dp.samplers.hmc import DPHMC
    from stan_dp.samplers.base import takes_proposal_stream
    from stan_dp.samplers.penalty import PenaltyMH
    from stan_dp.samplers.sgmcmc import DPSGHMC, DPSGLD, DPSGNHT

    model = LogisticRegressionModel.simulate(n=200, dim=2, seed=4)
    plan = SimpleNamespace(tau_l=0.5, tau_g=5.0, leapfrog_steps=2, epsilon_iteration=0.5, delta_iteration=1e-7,
                           sampling_rate=0.2, batch_sampling="poisson", batch_size=None)
    kernels = [PenaltyMH(model, plan, ratio_clip=2.0), DPHMC(model, plan, ratio_clip=2.0, leapfrog_steps=2)]
    kernels += [DPFastMH(model, plan, row_bound=2.0)]
    kernels += [cls(model, plan, grad_clip=2.0, sampling_rate=0.2) for cls in (DPSGHMC, DPSGNHT)]
    for kernel in kernels:
        assert takes_proposal_stream(kernel), type(kernel).__name__
        noise, own = _Recording(1), _Recording(2)
        state = kernel.init_state(np.zeros(model.dim))
        for _ in range(3):
            state, _ = kernel.step(noise, state, 0.05, np.ones(model.dim), proposal_rng=own)
        assert not noise.calls & {"standard_exponential", "poisson"}, (type(kernel).__name__, noise.calls)
        assert own.calls, type(kernel).__name__
        if not isinstance(kernel, (DPSGHMC, DPSGNHT)):
            assert "standard_exponential" in own.calls, type(kernel).__name__
    assert not takes_proposal_stream(DPSGLD(model, plan, grad_clip=2.0, sampling_rate=0.2))  # noise and batches only
    hmc = kernels[1]
    hmc.step(noise := _Recording(1), hmc.init_state(np.zeros(model.dim)), 0.05, np.ones(model.dim),
             proposal_rng=_Recording(2))
    assert "integers" not in noise.calls  # the jitter's flips come from the proposal stream
    penalty = kernels[0]

    def proposal(noise_seed, proposal_seed):
        state = penalty.init_state(np.zeros(model.dim))
        noise_rng, proposal_rng = np.random.default_rng(noise_seed), np.random.default_rng(proposal_seed)
        for _ in range(20):  # until a proposal is accepted
            state, info = penalty.step(noise_rng, state, 0.05, np.ones(model.dim), proposal_rng=proposal_rng)
            if info.accepted:
                return state.theta
        raise AssertionError("no proposal accepted")

    np.testing.assert_array_equal(proposal(1, 2), proposal(3, 2))
    assert not np.array_equal(proposal(1, 2), proposal(1, 4))
