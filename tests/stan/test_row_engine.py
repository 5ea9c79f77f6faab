"""The fast row engine: the row program's dependency analysis, the factorization check as its proof,
rows whose evaluation throws, and the small-call path of the ctypes bindings."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from stan_dp.stan import row_program
from stan_dp.model import DPStanModel, ModelError

#: the bundled logistic program (stan_models/logistic.stan) as text without its comment line (the derivations read
#: stanc's canonical form, which has no comments); these tests derive from it, never compile it
LOGISTIC = "".join(line for line in (Path(__file__).resolve().parents[2] / "stan_models" / "logistic.stan")
                   .read_text().splitlines(keepends=True) if not line.startswith("//"))

MIXED = """
functions {
  real shrink_lp(real v) {
    target += -v ^ 2;
    return v;
  }
}
data {
  int<lower=0> N;
  vector[N] y;
  real scale;
}
transformed data {
  real twice = 2 * scale;
  vector[N] y2 = y * twice;
  real y_sum = sum(y);
}
parameters {
  real mu;
  real<lower=0> s;
}
transformed parameters {
  real m2 = mu * twice;
}
model {
  real z = shrink_lp(mu);
  vector[N] centred = y2 - mu;
  for (k in 1 : 3) {
    mu ~ normal(0, twice);
  }
  if (mu > 0) {
    target += 1;
  } else {
    target += -1;
  }
  s ~ exponential(1);
  target += y_sum * 0;
  print("mu = ", mu);
  target += target() * 0;
  real t;
  t = mu;
  centred ~ normal(0, s);
}
"""


def _canonical(text: str) -> str:
    """What stanc's canonical printing of these programs is (they are already in canonical form)."""
    return text.strip() + "\n"


def test_row_program_removes_only_data_free_target_statements():
    """Priors that read only public data are removed; the likelihood and the generated quantities are not kept."""
    rp = row_program.derive(_canonical(LOGISTIC), "N", ["x", "y"])
    assert rp.removed == ("alpha ~ normal(0, prior_sd);", "beta ~ normal(0, prior_sd);")
    assert "y ~ bernoulli_logit(alpha + x * beta);" in rp.text
    assert "alpha ~" not in rp.text and rp.matches("N", ["y", "x"]) and not rp.matches("N", ["y"])


def test_row_program_keeps_everything_that_may_depend_on_rows_or_has_effects():
    """Transformed data computed from rows (y_sum), locals, prints, target() and assignments are kept."""
    rp = row_program.derive(_canonical(MIXED), "N", ["y"])
    removed = set(rp.removed)
    assert "s ~ exponential(1);" in removed
    assert any(r.startswith("for (k in 1 : 3)") for r in removed)
    assert any(r.startswith("if (mu > 0)") for r in removed)
    for kept in ("real z = shrink_lp(mu);", "target += y_sum * 0;", 'print("mu = ", mu);',
                 "target += target() * 0;", "t = mu;", "centred ~ normal(0, s);", "real m2 = mu * twice;"):
        assert kept in rp.text, kept


def test_row_program_is_none_when_nothing_can_be_removed():
    program = LOGISTIC.replace("  alpha ~ normal(0, prior_sd);\n  beta ~ normal(0, prior_sd);\n", "")
    assert row_program.derive(_canonical(program), "N", ["x", "y"]) is None


@pytest.mark.slow  # compiles a deliberately wrong library every run (never a cache hit)
@pytest.mark.stan
def test_factorization_check_catches_a_wrong_row_program(tmp_path, monkeypatch):
    """A row program that also drops a statement reading rows gives wrong l_i; the check at load rejects it."""
    import uuid

    # a unique comment keeps the deliberately wrong library out of the cache entry of any other program
    source = f"// {uuid.uuid4().hex}\n" + """
data {
  int<lower=0> N;
  vector[N] y;
  vector[N] w;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, 1);
  w ~ normal(mu, 2);
}
"""
    path = tmp_path / "two_terms.stan"
    path.write_text(source)
    real_derive = row_program.derive

    def wrong(canonical, count_name, row_variables):
        rp = real_derive(canonical, count_name, row_variables)
        return row_program.RowProgram(rp.text.replace("w ~ normal(mu, 2);", ""), rp.count_name,
                                      rp.row_variables, rp.removed + ("w ~ normal(mu, 2);",))

    monkeypatch.setattr(row_program, "derive", wrong)
    model = DPStanModel(path)
    assert model.row_program.removed[-1] == "w ~ normal(mu, 2);"
    rng = np.random.default_rng(1)
    data = {"N": 20, "y": rng.normal(size=20), "w": rng.normal(size=20)}
    with pytest.raises(ModelError, match="does not factorise over rows"):
        model.row_likelihood(data, engine="per-row")
    # without the check the instances build: the check is what catches it
    assert model.row_likelihood(data, check=False, engine="per-row").n_rows == 20


@pytest.mark.stan
def test_a_row_that_throws_gives_nan_and_a_domain_error_gives_minus_inf(stan_model):
    """R3: an index out of range in one row gives that row NaN (value and gradient) instead of failing the call;
    a domain error (negative scale) stays -inf with a zero gradient; the other rows are unchanged."""
    model = stan_model("throwing_rows")
    good = {"N": 5, "j": [1, 2, 3, 1, 2], "s": [1.0, 1.5, 2.0, 1.0, 0.5], "y": [0.1, -0.3, 0.8, 0.9, -0.4],
            "z": [0.0, 0.5, -0.5]}
    bad = dict(good, j=[1, 4, 3, 1, 2], s=[1.0, 1.5, 2.0, -1.0, 0.5])
    ref = model.row_likelihood(good, check=False, threads=1)
    lik = model.row_likelihood(bad, check=False, threads=1)
    theta = np.array([0.3])
    values, grads = lik.row_log_lik_grad(theta)
    ref_values, ref_grads = ref.row_log_lik_grad(theta)
    assert np.isnan(values[1]) and np.all(np.isnan(grads[1]))
    assert values[3] == -np.inf and np.all(grads[3] == 0.0)
    for k in (0, 2, 4):
        assert values[k] == ref_values[k] and np.array_equal(grads[k], ref_grads[k])
    only_values = lik.row_log_lik(theta)
    assert np.isnan(only_values[1]) and only_values[3] == -np.inf
    np.testing.assert_array_equal(only_values[[0, 2, 4]], ref_values[[0, 2, 4]])
    np.testing.assert_array_equal(lik.row_log_lik(theta, [4, 1]), only_values[[4, 1]])


@pytest.mark.stan
def test_small_and_large_calls_and_threads_agree(stan_model):
    """Calls below and above the scratch-buffer size, from several Python threads, give the same arrays, and
    the returned arrays are not overwritten by later calls."""
    from stan_dp.stan import engine

    rng = np.random.default_rng(3)
    n, k = 300, 3
    x = rng.normal(size=(n, k))
    data = {"N": n, "K": k, "x": x, "y": (rng.uniform(size=n) < 0.5).astype(np.int64), "prior_sd": 2.5}
    lik = stan_model("logistic").row_likelihood(data, threads=1)
    theta = rng.normal(size=k + 1)
    all_values, all_grads = lik.row_log_lik_grad(theta)
    rows = rng.integers(0, n, size=200)
    small_values, small_grads = lik.row_log_lik_grad(theta, rows)
    lik.row_log_lik_grad(theta + 1.0, rows)  # must not change the arrays returned before
    np.testing.assert_array_equal(small_values, all_values[rows])
    np.testing.assert_array_equal(small_grads, all_grads[rows])
    old = engine.SCRATCH_ROWS
    try:
        engine.SCRATCH_ROWS = 16  # the allocating path for the same call
        big_values, big_grads = lik.row_log_lik_grad(theta, rows)
        np.testing.assert_array_equal(big_values, small_values)
        np.testing.assert_array_equal(big_grads, small_grads)
        np.testing.assert_array_equal(lik.row_log_lik(theta, rows), all_values[rows])
    finally:
        engine.SCRATCH_ROWS = old
    results = {}

    def work(i):
        results[i] = lik.row_log_lik_grad(theta, rows[: 10 + i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, (values, grads) in results.items():
        np.testing.assert_array_equal(values, all_values[rows[: 10 + i]])
        np.testing.assert_array_equal(grads, all_grads[rows[: 10 + i]])
    with pytest.raises(ValueError, match=r"theta must have shape \(4,\)"):
        lik.row_log_lik(np.zeros(3))
