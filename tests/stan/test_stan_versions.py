"""A bundled program that needs Stan >= 2.36 (stan_models/sum_to_zero_groups.stan: a sum_to_zero_vector).

On a toolchain with Stan >= 2.36 (httpstan 4.17 on Python >= 3.12, or a recent CmdStan) the program compiles,
its rows factorise and match the closed form, and a private run releases sum-to-zero effects that agree with
Stan's NUTS at a negligible-noise budget, also through Stan CSV. On an older toolchain (httpstan 4.13 ships
Stan 2.35, the newest for Python 3.10 / 3.11) stanc rejects the program with a located message naming the
toolchain. CI runs the suite on both lines, so each half runs in every CI run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.stan
PROGRAM = Path(__file__).resolve().parents[2] / "stan_models" / "sum_to_zero_groups.stan"
K = 4


def _stan_version() -> tuple[int, int, int]:
    from stan_dp.stan import toolchain

    return toolchain.find_toolchain().stan_version


@pytest.fixture(scope="module")
def new_stan():
    if _stan_version() < (2, 36):
        pytest.skip(f"the toolchain has Stan {_stan_version()}; sum_to_zero_vector needs Stan >= 2.36")


@pytest.fixture(scope="module")
def group_data():
    rng = np.random.default_rng(8)
    n = 400
    group = rng.integers(1, K + 1, size=n)
    effect = np.array([-0.6, 0.1, 0.2, 0.3])
    y = 1.0 + effect[group - 1] + rng.normal(0.0, 0.5, size=n)
    return {"N": n, "K": K, "group": group, "y": y}


def test_stan_235_rejects_the_program():
    """With Stan < 2.36 loading the program raises StanCompileError at the sum_to_zero_vector line, and the
    message says which toolchain rejected it."""
    from stan_dp import DPStanModel, StanCompileError

    if _stan_version() >= (2, 36):
        pytest.skip("the toolchain accepts sum_to_zero_vector (Stan >= 2.36)")
    with pytest.raises(StanCompileError, match=r"(?s)line 11.*toolchain: .*stanc3 v2\.3[0-5]"):
        DPStanModel(PROGRAM)


def test_rows_factorise_and_match_the_closed_form(new_stan, stan_model, group_data):
    """The program loads (factorisation check included); the unconstrained dimension is 1 + (K - 1) + 1; the
    released effects sum to zero; each row's term is the normal log density of its outcome."""
    from scipy import stats

    lik = stan_model("sum_to_zero_groups").row_likelihood(group_data)
    assert lik.dim == 1 + (K - 1) + 1 and lik.n_rows == 400
    theta = np.random.default_rng(1).uniform(-1.0, 1.0, size=lik.dim)
    params = lik.constrain(theta)
    assert params["effect"].shape == (K,) and abs(params["effect"].sum()) < 1e-12
    mean = params["mu"] + params["effect"][group_data["group"] - 1]
    expected = stats.norm.logpdf(group_data["y"], mean, params["sigma"])
    np.testing.assert_allclose(lik.row_log_lik(theta), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.slow
def test_private_sample_agrees_with_nuts_and_writes_stan_csv(new_stan, stan_model, group_data, tmp_path):
    """At epsilon = 1e6 (noise negligible, clip bound above any per-row change) the private means of mu, effect
    and sigma agree with Stan's NUTS within 4 combined Monte Carlo standard errors; every released effect
    vector sums to zero; the attrs name the stanc version; the Stan CSV round trip keeps the draws."""
    import arviz as az

    from stan_dp import compare, to_stan_csv
    from stan_dp.output.stan_csv import read_stan_csv

    model = stan_model("sum_to_zero_groups")
    fit = model.sample(group_data, algorithm="penalty", epsilon=1e6, delta=1e-6, chains=2, iter_warmup=600,
                       iter_sampling=1000, seed=3, show_progress=False, inits=np.zeros(5), ratio_clip=50.0)
    ref = model.reference(group_data, chains=2, iter_warmup=500, iter_sampling=1000, seed=4, show_progress=False)
    effect = fit.posterior["effect"].values
    assert effect.shape == (2, 1000, K)
    np.testing.assert_allclose(effect.sum(axis=-1), 0.0, atol=1e-12)
    assert fit.attrs["stanc_version"].startswith("stanc3 v2.") and fit.attrs["private"] == 1
    table = compare(fit, ref)
    fit_summary, ref_summary = az.summary(fit), az.summary(ref)
    for name, row in table.iterrows():
        mcse = np.hypot(fit_summary.loc[name, "mcse_mean"], ref_summary.loc[name, "mcse_mean"])
        assert abs(row.mean_private - row.mean_reference) < 4 * mcse, name
    paths = to_stan_csv(fit, tmp_path / "groups.csv")
    back = read_stan_csv(paths)
    np.testing.assert_array_equal(back["effect"], effect.reshape(-1, K))
    header = next(line for line in paths[0].read_text().splitlines() if not line.startswith("#"))
    assert header.endswith("mu,effect.1,effect.2,effect.3,effect.4,sigma")
    assert "# stan_version_minor = " in paths[0].read_text()
