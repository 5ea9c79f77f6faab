"""The shard engine: the rewrite of a program into a shard program (stan_dp.stan.shard_program), its
refusals, agreement with the per-row engine, index sets over several shards, the non-finite rule, the fallback
taken and named. No timings here (benchmarks/bench_engine.py).

Compiling a program takes about a minute, and CI runs the suite twice on a fresh cache, so the compiled tests run
by default on programs that together reach every code path of the engine and that other test files compile
anyway, plus two of its own: the GLM row kernel (logistic: bernoulli_logit), the multivariate normal kernel
(gaussian_mean, of its own), Stan's own functions on a row's elements (regression_gq; constrained, whose
covariance reads parameters; sum_to_zero_groups), the one-row slice form (nes_logit, of its own), posteriordb
data (kidiq_momiq, sblri_blr, earnings_logearn_height) and the per-row fallback of a refused program (test_rows'
pooled_centred, same source and name, so compiled once). The rest of the agreement sweep (poisson_regression:
the poisson_log kernel; posteriordb's wells; a program refused for a transformed parameter read by the rows) is
skipped here and runs with every other test of this file through one command,
``python benchmarks/check_shard_agreement.py`` (it sets STAN_DP_SHARD_SWEEP=all).
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from stan_dp.stan import shard_program
from stan_dp.model import DPStanModel, ModelError

#: the bundled logistic program (stan_models/logistic.stan) as text without its comment line (the derivations read
#: stanc's canonical form, which has no comments); these tests derive from it, never compile it
LOGISTIC = "".join(line for line in (Path(__file__).resolve().parents[2] / "stan_models" / "logistic.stan")
                   .read_text().splitlines(keepends=True) if not line.startswith("//"))


#: STAN_DP_SHARD_SWEEP=all (benchmarks/check_shard_agreement.py) also runs the tests marked with SWEEP
FULL_SWEEP = os.environ.get("STAN_DP_SHARD_SWEEP") == "all"
SWEEP = pytest.mark.skipif(not FULL_SWEEP, reason="compiles a program no other test needs; in the full sweep: "
                                                   "python benchmarks/check_shard_agreement.py")


def _derive(text: str, rows=("x", "y"), slice_rows: bool = False) -> shard_program.ShardProgram:
    return shard_program.derive(text.strip() + "\n", "N", list(rows), slice_rows)


def _row_function(program: shard_program.ShardProgram) -> str:
    text = program.text
    return text[text.index("void sdp_row_lp"):text.index("void sdp_shard_rows")]


# ------------------------------------------------------------------------------------------------ the rewrite


def test_vectorised_likelihood_becomes_a_per_row_term_and_priors_leave():
    program = _derive(LOGISTIC)
    row = _row_function(program)
    # the linear predictor and the distribution fuse into the GLM row kernel
    assert "target += sdp_glm_bernoulli_logit_row(1, y[sdp_i], x[sdp_i], alpha, beta);" in row
    assert program.kernels == ("bernoulli_logit",)
    assert "alpha ~ normal" not in program.text and "sdp_shard_rows(y, x, alpha, beta);" in program.text
    assert program.hook_arguments == ("y", "x", "alpha", "beta") and program.matches("N", ["y", "x"])
    # a predictor of another form keeps Stan's functions, on the row's elements
    other = _derive(LOGISTIC.replace("alpha + x * beta", "alpha + x * beta + 0.5"))
    assert "y[sdp_i] ~ bernoulli_logit(alpha + x[sdp_i] * beta + 0.5);" in _row_function(other)
    assert other.kernels == ()


def test_loops_row_sized_locals_and_row_wise_transformed_data():
    text = """
data {
  int<lower=0> N;
  vector[N] y;
  matrix[N, 2] X;
  array[N] int<lower=1, upper=3> g;
}
transformed data {
  vector[N] ly = log(y);
  real c = 2;
}
parameters {
  vector[2] b;
  real<lower=0> s;
  vector[3] e;
}
model {
  vector[N] mu = X * b + e[g];
  real s2 = c * s;
  for (n in 1 : N) {
    y[n] ~ normal(mu[n], s2);
  }
  ly ~ normal(X * b, s);
}
"""
    program = _derive(text, rows=("y", "X", "g"))
    row = _row_function(program)
    assert "real ly = log(y[sdp_i]);" in row  # transformed data from the row's own data, never pooled
    assert "real mu = X[sdp_i] * b + e[g[sdp_i]];" in row
    assert "{ int n = sdp_i; y[n] ~ normal(mu, s2); }" in row
    assert "ly ~ normal(X[sdp_i] * b, s);" in row
    assert "real s2 = c * s;" in program.text.split("model {")[1]  # data-free: hoisted, runs once
    assert "vector[N] ly" not in program.text and "real c = 2;" in program.text


def test_multivariate_normal_with_a_data_free_factor_gets_its_kernel():
    text = """
data {
  int<lower=0> N;
  array[N] vector[3] x;
  cov_matrix[3] Sigma;
}
transformed data {
  matrix[3, 3] L = cholesky_decompose(Sigma);
}
parameters {
  vector[3] theta;
}
model {
  x ~ multi_normal_cholesky(theta, L);
  x ~ multi_normal(theta, Sigma);
}
"""
    program = _derive(text, rows=("x",))
    row = _row_function(program)
    assert "target += sdp_multi_normal_cholesky_row(1, 1, x[sdp_i], theta, L);" in row
    assert "target += sdp_multi_normal_row(2, 1, x[sdp_i], theta, Sigma);" in row
    assert program.kernels == ("multi_normal_cholesky", "multi_normal")
    # a factor that reads the rows keeps Stan's own function
    per_row = text.replace("x ~ multi_normal_cholesky(theta, L);", "").replace(
        "x ~ multi_normal(theta, Sigma);",
        "for (n in 1 : N) {\n    x[n] ~ multi_normal(theta, diag_matrix(x[n]));\n  }")
    assert _derive(per_row, rows=("x",)).kernels == ()


@pytest.mark.parametrize("model_block, reason", [
    ("y ~ normal(mu, 1);\n  target += -N * 0.5;", "row count N appears"),
    ("y[1] ~ normal(mu, 1);", "row variable y is indexed"),
    ("y ~ normal(mu, 1);\n  mu2 = mu;\n  w ~ normal(mu2, 1);", "lies between two row statements"),
    ("for (n in 2 : N) {\n    y[n] ~ normal(y[n - 1], 1);\n  }", "not a loop over 1 : N"),
])
def test_refusals_name_the_statement_and_reason(model_block, reason):
    text = f"""
data {{
  int<lower=0> N;
  vector[N] y;
  vector[N] w;
}}
parameters {{
  real mu;
}}
model {{
  real mu2;
  {model_block}
}}
"""
    with pytest.raises(shard_program.ShardRefusal, match=reason):
        _derive(text, rows=("y", "w"))


def test_pooled_transformed_data_and_row_transformed_parameters_are_refused():
    pooled = """
data {
  int<lower=0> N;
  vector[N] y;
}
transformed data {
  real m = mean(y);
}
parameters {
  real mu;
}
model {
  y ~ normal(mu + m, 1);
}
"""
    with pytest.raises(shard_program.ShardRefusal, match="m, which pools the rows"):
        _derive(pooled, rows=("y",))
    tp = pooled.replace("transformed data {\n  real m = mean(y);\n}\n", "").replace(
        "model {", "transformed parameters {\n  vector[N] nu = mu + y;\n}\nmodel {").replace("mu + m", "nu")
    with pytest.raises(shard_program.ShardRefusal, match="transformed parameter"):
        _derive(tp, rows=("y",))


def test_slice_form_keeps_types_and_sets_the_row_count_to_one():
    text = """
data {
  int<lower=0> N;
  vector[N] income;
  array[N] int<lower=0, upper=1> vote;
}
transformed data {
  matrix[N, 1] x = to_matrix(income);
}
parameters {
  real alpha;
  vector[1] beta;
}
model {
  vote ~ bernoulli_logit_glm(x, alpha, beta);
  target += -0.001 * N;
}
"""
    row = _row_function(_derive(text, rows=("income", "vote"), slice_rows=True))
    assert "matrix[1, 1] x = to_matrix(income[sdp_i:sdp_i]);" in row
    assert "vote[sdp_i:sdp_i] ~ bernoulli_logit_glm(x, alpha, beta);" in row
    assert "target += - 0.001 * 1;" in row


def test_reserved_prefix_is_refused():
    with pytest.raises(shard_program.ShardRefusal, match="sdp_"):
        _derive(LOGISTIC.replace("prior_sd", "sdp_scale"))


# ------------------------------------------------------------------------------------------------ compiled


def _simulated(name: str, n: int = 60, seed: int = 7) -> dict:
    rng = np.random.default_rng(seed)
    if name == "logistic":
        return {"N": n, "K": 3, "x": rng.normal(size=(n, 3)), "y": rng.integers(0, 2, n), "prior_sd": 2.5}
    if name == "poisson_regression":
        return {"N": n, "K": 3, "x": rng.uniform(-1, 1, size=(n, 3)), "y": rng.poisson(3.0, n), "prior_sd": 2.5}
    if name == "gaussian_mean":
        a = rng.normal(size=(4, 4))
        return {"N": n, "d": 4, "x": rng.normal(size=(n, 4)), "Sigma": a @ a.T + 4 * np.eye(4),
                "prior_mean": np.zeros(4), "prior_sd": 10.0}
    if name == "regression_gq":
        x = rng.normal(size=n)
        return {"N": n, "x": x, "y": 1 + 2 * x + rng.normal(size=n)}
    if name == "constrained":
        return {"N": n, "K": 3, "z": rng.normal(size=(n, 3))}
    if name == "sum_to_zero_groups":
        return {"N": n, "K": 3, "group": rng.integers(1, 4, n), "y": rng.normal(size=n)}
    raise KeyError(name)


def _points(lik, count: int = 3, seed: int = 11) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, size=lik.dim) for _ in range(count)]


def _assert_agree(shard, per_row, rows=None):
    """Values and gradients of the two engines agree to 1e-12 relative (scale: the largest magnitude)."""
    for theta in _points(shard):
        v1, g1 = shard.row_log_lik_grad(theta, rows)
        v0, g0 = per_row.row_log_lik_grad(theta, rows)
        np.testing.assert_allclose(v1, v0, rtol=1e-12, atol=1e-12 * max(1.0, np.max(np.abs(v0))))
        np.testing.assert_allclose(g1, g0, rtol=1e-12, atol=1e-12 * max(1.0, np.max(np.abs(g0))))
        # value-only passes may take Stan's other code path (e.g. a constant covariance): last bits only
        np.testing.assert_allclose(shard.row_log_lik(theta, rows), v1, rtol=1e-13,
                                   atol=1e-13 * max(1.0, np.max(np.abs(v0))))


def _both(model: DPStanModel, data, **kw):
    shard = model.row_likelihood(data, threads=2, **kw)
    per_row = model.row_likelihood(data, threads=2, engine="per-row", **kw)
    assert shard.row_engine == "shard", shard.row_engine_reason
    assert per_row.row_engine == "per-row" and per_row.row_engine_reason
    return shard, per_row


@pytest.mark.stan
@pytest.mark.parametrize("name", ["logistic", pytest.param("poisson_regression", marks=SWEEP), "gaussian_mean",
                                  "regression_gq", "constrained", "sum_to_zero_groups"])
def test_bundled_programs_agree_with_the_per_row_engine(stan_model, name):
    """Bundled row programs (simulated data; the posteriordb ones below) take the shard engine, pass the
    factorization check against the unchanged program, and agree with the per-row engine (all of them in the
    full sweep)."""
    if name == "sum_to_zero_groups":
        from stan_dp.stan import toolchain

        if toolchain.find_toolchain().stan_version < (2, 36, 0):
            pytest.skip("sum_to_zero_vector needs Stan >= 2.36")
    shard, per_row = _both(stan_model(name), _simulated(name))
    _assert_agree(shard, per_row)
    _assert_agree(shard, per_row, rows=np.array([5, 3, 3, 59, 0]))


POSTERIORDB_PROGRAMS = {
    "wells": ("wells_data.json", """
data {
  int<lower=0> N;
  array[N] int<lower=0, upper=1> switched;
  vector[N] dist;
}
parameters {
  vector[2] beta;
}
model {
  switched ~ bernoulli_logit(beta[1] + beta[2] * dist);
}
"""),
    "nes_logit": ("nes_logit_data.json", """
data {
  int<lower=0> N;
  vector[N] income;
  array[N] int<lower=0, upper=1> vote;
}
transformed data {
  matrix[N, 1] x = to_matrix(income);
}
parameters {
  real alpha;
  vector[1] beta;
}
model {
  vote ~ bernoulli_logit_glm(x, alpha, beta);
}
"""),
}


@pytest.mark.stan
@pytest.mark.parametrize("case", ["kidiq_momiq:kidiq.json", "sblri_blr:sblri.json",
                                  "earnings_logearn_height:earnings.json", pytest.param("wells", marks=SWEEP),
                                  "nes_logit"])
def test_posteriordb_programs_agree_with_the_per_row_engine(stan_model, posteriordb, tmp_path_factory, case):
    if ":" in case:
        name, data_file = case.split(":")
        model = stan_model(name)
    else:
        data_file, source = POSTERIORDB_PROGRAMS[case]
        path = tmp_path_factory.mktemp("pdb") / f"{case}.stan"
        path.write_text(source)
        model = DPStanModel(path)
    data = json.loads((posteriordb / data_file).read_text())
    shard, per_row = _both(model, data)
    if case == "nes_logit":
        assert model.shard_program.slice_rows  # the GLM needs a matrix: rows as one-row slices
    _assert_agree(shard, per_row)


@pytest.mark.stan
def test_index_sets_over_several_shards(stan_model):
    """One call serves any index set (unsorted, repeated, spanning shards) and equals the per-row engine, with
    one or two threads and any number of shards."""
    from stan_dp.stan.engine import RowData, ShardInstances

    model = stan_model("logistic")
    data = _simulated("logistic", n=301)
    shard, per_row = _both(model, data)
    split = shard.split
    rng = np.random.default_rng(5)
    theta = rng.normal(size=shard.dim)
    v0, g0 = per_row.row_log_lik_grad(theta)
    for shards, threads in ((1, 1), (3, 1), (7, 2)):
        instances = ShardInstances(str(model.library_path), RowData(str(model.library_path), data, split),
                                   threads=threads, shards=shards)
        assert instances.shards == shards
        for rows in (None, rng.integers(0, 301, size=500), np.arange(300, -1, -3), np.array([], dtype=int)):
            values, grads = instances.log_lik_grad(theta, rows)
            expected = slice(None) if rows is None else rows
            np.testing.assert_allclose(values, v0[expected], rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(grads, g0[expected], rtol=1e-13, atol=1e-13)
    with pytest.raises(RuntimeError, match=r"row index 301 is outside \[0, 301\)"):
        shard.row_log_lik(theta, [0, 301])


@pytest.mark.stan
def test_non_finite_rule_is_the_per_row_engines(stan_model):
    """A row whose evaluation throws (index out of range) gives NaN and NaN gradient, a domain error -inf and a
    zero gradient, in both engines alike; the other rows are unchanged."""
    model = stan_model("throwing_rows")
    bad = {"N": 5, "j": [1, 4, 3, 1, 2], "s": [1.0, 1.5, 2.0, -1.0, 0.5], "y": [0.1, -0.3, 0.8, 0.9, -0.4],
           "z": [0.0, 0.5, -0.5]}
    shard = model.row_likelihood(bad, check=False, threads=1)
    per_row = model.row_likelihood(bad, check=False, threads=1, engine="per-row")
    assert shard.row_engine == "shard"
    theta = np.array([0.3])
    v1, g1 = shard.row_log_lik_grad(theta)
    v0, g0 = per_row.row_log_lik_grad(theta)
    assert np.isnan(v1[1]) and np.all(np.isnan(g1[1])) and v1[3] == -np.inf and np.all(g1[3] == 0.0)
    np.testing.assert_array_equal(v1, v0)
    np.testing.assert_array_equal(g1, g0)
    np.testing.assert_array_equal(shard.row_log_lik(theta), v0)


@pytest.mark.stan
def test_refused_program_takes_the_per_row_engine_and_names_the_refusal(tmp_path):
    """A program the rewrite refuses (transformed data that pool the rows) is built with one instance per row and
    the likelihood says why; engine='shard' is an error. This is test_rows' pooled_centred under the same name
    (one compilation for the suite); its pooling is caught by the factorization check there, so here the per-row
    engine is loaded without the check."""
    from test_rows import PROGRAMS, _xy

    path = tmp_path / "pooled_centred.stan"
    path.write_text(PROGRAMS["pooled_centred"])
    model = DPStanModel(path)
    assert model.shard_program is None and "x_c, which pools the rows" in model.shard_refusal
    lik = model.row_likelihood(_xy(), check=False)
    assert lik.row_engine == "per-row" and "x_c, which pools the rows" in lik.row_engine_reason
    with pytest.raises(ModelError, match="shard engine is not available.*pools the rows"):
        model.row_likelihood(_xy(), engine="shard")
    with pytest.raises(ModelError, match="does not factorise"):
        model.row_likelihood(_xy())  # the fallback still runs the check


@pytest.mark.stan
@SWEEP
def test_refused_valid_program_takes_the_per_row_engine_and_says_why(tmp_path):
    """A valid program refused for a transformed parameter that reads the rows loads (check included) on the
    per-row engine."""
    source = """
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
parameters {
  real a;
  real b;
}
transformed parameters {
  vector[N] mu = a + b * x;
}
model {
  a ~ normal(0, 5);
  b ~ normal(0, 5);
  y ~ normal(mu, 1);
}
"""
    path = tmp_path / "row_tp.stan"
    path.write_text(source)
    model = DPStanModel(path)
    assert model.shard_program is None and "transformed parameter(s) mu read the rows" in model.shard_refusal
    rng = np.random.default_rng(2)
    data = {"N": 30, "x": rng.normal(size=30), "y": rng.normal(size=30)}
    lik = model.row_likelihood(data)
    assert lik.row_engine == "per-row" and "transformed parameter" in lik.row_engine_reason
    with pytest.raises(ModelError, match="shard engine is not available"):
        model.row_likelihood(data, engine="shard")


@pytest.mark.stan
def test_a_wrong_shard_engine_fails_the_check_and_falls_back(stan_model, monkeypatch):
    """The factorization check runs on the shard engine: wrong per-row terms make the load fall back to the
    per-row engine WITHOUT a warning (the check reads the rows, so a warning would tell neighbouring data sets
    apart; the reason stays on the likelihood), and fail with engine='shard'."""
    from stan_dp.stan import engine

    model = stan_model("logistic")
    data = _simulated("logistic")
    real = engine.ShardInstances.log_lik

    def shifted(self, theta, rows=None):
        return real(self, theta, rows) + 1e-3

    monkeypatch.setattr(engine.ShardInstances, "log_lik", shifted)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lik = model.row_likelihood(data)
    assert lik.row_engine == "per-row" and "failed the factorization check" in lik.row_engine_reason
    assert not [str(w.message) for w in caught]
    with pytest.raises(ModelError, match="does not factorise"):
        model.row_likelihood(data, engine="shard")
    # the fall-back depends on the rows, so a fit records the engine the program selects, not the one taken
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.sample(data, algorithm="penalty", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=5,
                           iter_sampling=5, seed=1, show_progress=False, ratio_clip=1.0)
    assert fit.attrs["row_engine"] == "shard"


@pytest.mark.stan
def test_fit_attrs_name_the_engine(stan_model):
    model = stan_model("logistic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = model.sample(_simulated("logistic"), algorithm="penalty", epsilon=1.0, delta=1e-5, chains=1,
                           iter_warmup=5, iter_sampling=5, seed=1, show_progress=False, ratio_clip=1.0)
    assert fit.attrs["row_engine"] == "shard"


def test_check_range_straddles_the_first_shard_boundary():
    """The factorization check's rows: all of them up to the bound; beyond it ``size`` contiguous rows inside
    [0, N) that contain the rows either side of the first shard boundary (so never exactly one shard, which would
    hide rows pooled within a shard), or the first ``size`` rows without shards; the layout mirrors the native
    one (shard s holds rows [N s / S, N (s + 1) / S))."""
    from stan_dp.stan.engine import shard_boundaries
    from stan_dp.stan.factorization import check_range

    assert shard_boundaries(10, 3) == [3, 6] and shard_boundaries(2, 5) == [1] and shard_boundaries(0, 2) == []
    assert check_range(5, [2], size=8) == range(5) and check_range(100, (), size=8) == range(8)
    for n in (9, 10, 17, 33, 64, 1000):
        for shards in (1, 2, 3, 4, 7, 64):
            for size in (2, 3, 8, 16):
                bounds = shard_boundaries(n, shards)
                checked = check_range(n, bounds, size=size)
                assert len(checked) == min(n, size) and 0 <= checked.start and checked.stop <= n
                edges = [0, *bounds, n]
                whole_shards = {range(a, b) for a, b in zip(edges, edges[1:])}
                if n > size:
                    assert checked not in whole_shards or len(whole_shards) == 1 and checked == range(n)
                    if bounds:
                        assert checked.start < bounds[0] < checked.stop


@pytest.mark.stan
def test_the_check_builds_the_program_on_a_bounded_range_of_rows(stan_model, monkeypatch):
    """With more rows than ``CHECK_ROWS`` the user's program is built on that many rows around the first shard
    boundary only; a wrong shard engine is still caught there (fall-back), and a row outside the range that breaks
    a declared bound is still refused, with the same message as a row inside the range; a program that rejects the
    range is built on all rows instead."""
    from stan_dp.stan import engine, factorization
    from stan_dp.stan.data import DataError

    monkeypatch.setattr(factorization, "CHECK_ROWS", 16)
    built = []
    real_program = engine.RowData.program

    def recording(self, program="user", first=0, count=None, seed=0):
        built.append((program, first, count))
        return real_program(self, program, first, count, seed)

    monkeypatch.setattr(engine.RowData, "program", recording)
    model = stan_model("logistic")
    data = _simulated("logistic")  # 60 rows: two shards [0, 30) and [30, 60) on two threads
    lik = model.row_likelihood(data, threads=2)
    assert lik.row_engine == "shard" and lik.n_rows == 60 and built == [("user", 22, 16)]
    messages = []
    for row in (59, 22):  # outside the checked range [22, 38), then inside it: the same message
        bad = dict(data, y=data["y"].copy())
        bad["y"][row] = 2
        with pytest.raises(DataError, match=r"Stan rejected the data for logistic.stan: y \(declared [^)]*\) must be "
                                            r"less than or equal to its declared bound \(values and positions "
                                            r"withheld") as info:
            model.row_likelihood(bad, threads=2)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    real = engine.ShardInstances.log_lik
    monkeypatch.setattr(engine.ShardInstances, "log_lik", lambda self, theta, rows=None: real(self, theta, rows) + 1e-3)
    lik = model.row_likelihood(data, threads=2)
    assert lik.row_engine == "per-row" and "failed the factorization check" in lik.row_engine_reason
    monkeypatch.setattr(engine.ShardInstances, "log_lik", real)
    # a program that rejects the range (e.g. a public variable bounded by N) is checked on all rows instead

    def rejecting(self, program="user", first=0, count=None, seed=0):
        if count is not None and count < self.split.n_rows:
            raise engine.NativeError("k is 40, but must be less than or equal to N")
        return recording(self, program, first, count, seed)

    monkeypatch.setattr(engine.RowData, "program", rejecting)
    built.clear()
    assert model.row_likelihood(data, threads=2).row_engine == "shard" and built == [("user", 0, 60)]
