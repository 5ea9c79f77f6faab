"""include_gq's warning about generated quantities sized by the row count is computed from stanc's --info and the
data-free instance's names: no full-data model instance is built (the old code built one only to learn names)."""
from __future__ import annotations

import types

import pytest

from stan_dp.stan import toolchain
from stan_dp.model import DPStanModel

PROGRAM = """data { int<lower=0> N; vector[N] y; int<lower=0> K; }
parameters { real mu; }
transformed parameters { vector[N] fitted = rep_vector(mu, N); }
model { mu ~ normal(0, 5); y ~ normal(mu, 1); }
generated quantities { real mu2 = mu * 2; vector[N] yrep; vector[K] public_k = rep_vector(mu, K);
  for (i in 1:N) yrep[i] = normal_rng(mu, 1); }
"""


def _released(names):
    return types.SimpleNamespace(prior_model=types.SimpleNamespace(
        param_names=lambda include_tp, include_gq: list(names)))


def test_warning_names_only_row_sized_quantities(tmp_path):
    """With the data-free instance listing mu, mu2 and public_k.1..3 (K = 3 is public), the warning names the
    row-sized fitted and yrep and nothing else; no full-data instance is requested."""
    program = tmp_path / "gq.stan"
    program.write_text(PROGRAM)
    fake = types.SimpleNamespace(stan_file=program, stanc_args=())  # no bridgestan(): a full instance would fail
    with pytest.warns(UserWarning, match=r"generated quantities fitted, yrep are sized by the row count"):
        DPStanModel._warn_dropped_quantities(fake, _released(["mu", "mu2", "public_k.1", "public_k.2",
                                                               "public_k.3"]))


def test_no_warning_when_nothing_is_dropped(tmp_path, recwarn):
    """Every declared name released (N-sized ones included, e.g. a program without row-sized quantities): silent."""
    program = tmp_path / "gq.stan"
    program.write_text(PROGRAM)
    fake = types.SimpleNamespace(stan_file=program, stanc_args=())
    DPStanModel._warn_dropped_quantities(fake, _released(["mu", "fitted.1", "mu2", "yrep.1", "public_k.1"]))
    assert not [w for w in recwarn if "sized by the row count" in str(w.message)]
    assert toolchain.stanc_info(program)["generated quantities"]["yrep"]["dimensions"] == 1
