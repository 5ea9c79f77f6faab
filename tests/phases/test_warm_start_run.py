"""The warm start runs like the chains: inside the BLAS-thread limit, with a progress bar that
show_progress=False silences."""
from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

import stan_dp.methods.kernels.kernel_run as kernel_run
import stan_dp.run.pipeline as sampling
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.phases.warm_start import WarmStart


def _model():
    x = np.random.default_rng(0).normal(1.0, 1.0, size=(500, 2))
    return GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)


def _fit(show_progress: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sampling.sample_private(_model(), algorithm="dp-sgld", epsilon=1.0, delta=1e-5, chains=2,
                                       iter_warmup=10, iter_sampling=10, seed=3, show_progress=show_progress,
                                       grad_clip=10.0, warm_start="dp-gd", warm_start_steps=20)


def test_warm_start_runs_inside_the_blas_limit(monkeypatch):
    """sample_private enters limited_blas_threads before the warm start's first step and leaves it after the
    chains (recorded by wrapping both)."""
    events = []

    @contextlib.contextmanager
    def recording_limit(chains, cores=None):
        events.append("enter")
        yield 1
        events.append("exit")

    original = WarmStart.run

    def recording_run(self, *args, **kwargs):
        events.append("warm start")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(kernel_run, "limited_blas_threads", recording_limit)
    monkeypatch.setattr(WarmStart, "run", recording_run)
    _fit(show_progress=False)
    assert events == ["enter", "warm start", "exit"]


@pytest.mark.parametrize("show", [True, False])
def test_warm_start_progress_follows_show_progress(capfd, show):
    """With show_progress=True stderr carries a warm-start bar labelled like the run's (algorithm, kind, chains)
    that reaches chains x steps = 40; with False nothing about the warm start (or the run) is printed."""
    _fit(show_progress=show)
    err = capfd.readouterr().err
    if show:
        assert "dp-sgld dp-gd warm start (2 chains)" in err and "40/40" in err
    else:
        assert "warm start" not in err and err.strip() == ""
