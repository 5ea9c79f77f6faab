"""One list of run-level options (stan_dp.run_options): sample_private, the kernels' option specs and the CLI read
it (the CLI adds only its own extras), and the error messages name every entry."""
from __future__ import annotations

import argparse
import warnings

import numpy as np
import pytest

import stan_dp.run.pipeline as sampling
import stan_dp.run.plan as run_plan
from stan_dp import cli
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run_options import RUN_LEVEL_OPTIONS
from stan_dp.samplers import options as kernel_options
from stan_dp.samplers.penalty import PenaltyMH


def test_one_list():
    """The package's names are the same object; the CLI's list is that list plus its declared extras only."""
    assert run_plan.RUN_OPTIONS is RUN_LEVEL_OPTIONS
    assert kernel_options.RUN_LEVEL_OPTIONS is RUN_LEVEL_OPTIONS
    assert cli.RUN_LEVEL_OPTIONS == (*RUN_LEVEL_OPTIONS, *cli.CLI_RUN_EXTRAS)
    assert not set(cli.CLI_RUN_EXTRAS) & set(RUN_LEVEL_OPTIONS)


def test_every_run_level_option_is_a_sample_private_keyword():
    """Each listed name is a keyword of sample_private (so the list cannot name an option nobody takes)."""
    import inspect

    params = inspect.signature(sampling.sample_private).parameters
    assert all(name in params for name in RUN_LEVEL_OPTIONS)


def test_kernel_hint_and_sample_private_error_use_the_list():
    """A run-level name given to a kernel's spec gets the 'run-level option' hint (pool_metric included, which the
    old kernel-side list lacked); sample_private's unknown-option error lists every run-level option."""
    spec = kernel_options.spec_of(PenaltyMH, "penalty")
    for name in RUN_LEVEL_OPTIONS:
        assert "is a run-level option" in str(spec.unknown_error([name]))
    x = np.random.default_rng(0).normal(size=(50, 1))
    model = GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=10.0)
    with pytest.raises(ValueError) as info:
        sampling.sample_private(model, algorithm="penalty", epsilon=1.0, delta=1e-5, ratio_clip=2.0, clipp=3.0,
                                show_progress=False)
    assert all(name in str(info.value) for name in RUN_LEVEL_OPTIONS)


def test_cli_preflight_routes_every_run_level_option(tmp_path):
    """`--option pool_metric=false` (and every other run-level option) is routed to the run, not to the
    algorithm's option check (the CLI's old hand-written list lacked pool_metric and refused it); an unknown
    option's error lists the run-level options and the CLI extras."""
    model, data = tmp_path / "m.stan", tmp_path / "d.json"
    model.write_text("data { int N; } parameters { real mu; } model { }")
    data.write_text('{"N": 1}')
    args = argparse.Namespace(model=str(model), data=str(data), output=str(tmp_path / "fit.nc"), csv=None,
                              epsilon=1.0, delta=1e-5, chains=2, iter_sampling=10, iter_warmup=10,
                              algorithm="penalty", inits=None)
    values = {"step_size": 0.1, "target_accept": 0.3, "metric": "unit", "adapt_engaged": True,
              "pool_metric": False}
    assert set(values) == set(RUN_LEVEL_OPTIONS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cli._preflight_sample(args, {"ratio_clip": 2.0, **values})
        with pytest.raises(cli.UsageError) as info:
            cli._preflight_sample(args, {"ratio_clip": 2.0, "clipp": 3.0})
    assert all(name in str(info.value) for name in (*RUN_LEVEL_OPTIONS, *cli.CLI_RUN_EXTRAS))
