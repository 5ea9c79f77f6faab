"""The anchor phase's noisy count of the rows whose gradient the bound clips: planned and accounted like every
release, released in the attrs, and turned into a warning with that figure when the bound binds for many rows.

NumPy reference models only; run_anchor directly (no chains), so each test takes about a second.
"""
from __future__ import annotations

import numpy as np
import pytest

from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.phases.anchor import (ANCHOR_CLIPPED_RELEASE, clipped_rows_message, plan_anchor, run_anchor,
                                split_anchor)
from stan_dp.samplers import DPSGLD


def model(n: int = 4000) -> GaussianMeanModel:
    """Rows x_i ~ N(0.5, 1) in 1-d; at theta near 0.5 a row's gradient is x_i - theta, |.| about N(0, 1)."""
    x = np.random.default_rng(5).normal(0.5, 1.0, size=(n, 1))
    return GaussianMeanModel(x, obs_cov=1.0, prior_mean=0.0, prior_cov=100.0)


def anchor_plan(bound: float, **extra):
    cfg = split_anchor({"grad_clip": bound, "anchor": "dp-gd", "curvature_clip": 1.0, **extra}, DPSGLD.option_spec,
                       "dp-sgld")[1]
    return plan_anchor(cfg, epsilon=5.0, delta=1e-5)


def test_the_count_is_planned_as_one_accounted_release_with_its_share():
    """By default the plan holds one count release (sensitivity 1) whose noise sd follows from its 2 % share of
    rho; clipped_count_share=0 removes it."""
    plan = anchor_plan(1.0)
    names = [r.name for phase in plan.phases() for r in phase.declaration.releases({"tau": 1.0})]
    assert ANCHOR_CLIPPED_RELEASE in names
    assert plan.shares == pytest.approx(0.2 + 0.6 + 0.02)
    no_count = anchor_plan(1.0, clipped_count_share=0.0)
    assert no_count.tau_clipped is None
    assert ANCHOR_CLIPPED_RELEASE not in [r.name for phase in no_count.phases()
                                          for r in phase.declaration.releases({"tau": 1.0})]
    assert no_count.iterations() == plan.iterations() - 1


@pytest.mark.parametrize("bound, expected_fraction", [(0.1, 0.92), (50.0, 0.0)])
def test_the_released_count_estimates_the_clipped_rows_and_warns_only_when_large(bound, expected_fraction):
    """At L = 0.1 about 92 % of the rows' gradients (|x_i - theta| > 0.1 for x_i - theta ~ N(0, 1)) are clipped and
    the message gives the released figure; at L = 50 none are and there is no message. Tolerance: 5 noise sds
    plus 4 % of N for where the noisy anchor lands (it shifts the rows' gradients)."""
    m = model()
    plan = anchor_plan(bound)
    release, _ = run_anchor(m, plan, np.random.default_rng(7), np.zeros(1))
    assert release.clipped_rows_sd == pytest.approx(plan.tau_clipped)
    assert abs(release.clipped_rows - expected_fraction * m.n_rows) < 5 * plan.tau_clipped + 0.04 * m.n_rows
    text = clipped_rows_message(release, m.n_rows, adaptive=False)
    if expected_fraction > 0.5:
        assert text is not None and f"{release.clipped_rows:.0f} of the {m.n_rows} rows" in text
        assert clipped_rows_message(release, m.n_rows, adaptive=True) is None  # a quantile bound clips by design
    else:
        assert text is None
