"""What a private value can reach outside the mechanisms: Stan's messages about rejected data and floating-point
warnings. Neither is covered by a privacy budget, so neither may depend on a row's values:

* a row that violates its declared constraint gives an error that names the variable and the constraint and
  holds no value or position from the rows (every constrained data type Stan checks, in Python and on the
  command line);
* neighbouring data sets (one row made extreme) give the caller exactly the same list of warnings.
"""
from __future__ import annotations

import copy
import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from stan_dp.privacy import mechanisms
from stan_dp.stan.stan_messages import WITHHELD, withhold_data_values

ROOT = Path(__file__).resolve().parents[2]

# --------------------------------------------------------------------------- Stan's texts, without a compiler
#: Stan's messages as its check functions print them (stan/math/prim/err), each with the values it quotes
STAN_TEXTS = {
    "simplex sum": ("s[3] is not a valid simplex. sum(s[3]) = 1.0737000000, but should be 1", "s", "simplex",
                    ["1.0737", "[3]"]),
    "simplex entry": ("s[3] is not a valid simplex. s[3][2] = -0.1737, but should be greater than or equal to 0",
                      "s", "simplex", ["0.1737", "[3]", "[2]"]),
    "ordered": ("o[3] is not a valid ordered vector. The element at 2 is 0.3131, but should be greater than the "
                "previous element, 0.5737", "o", "ordered", ["0.3131", "0.5737", "at 2"]),
    "positive_ordered": ("po[3] is not a valid positive_ordered vector. The element at 1 is -0.5737, but should be "
                         "positive.", "po", "positive_ordered", ["0.5737", "at 1"]),
    "sorted": ("v is not a valid sorted vector. The element at 3 is 0.25, but should be greater than or equal to "
               "the previous element, 0.75", "v", "sorted", ["0.25", "0.75"]),
    "unit_vector": ("u[3] is not a valid unit vector. The sum of the squares of the elements should be 1, but is "
                    "0.803611", "u", "unit vector", ["0.803611", "[3]"]),
    "lower triangular": ("lcov[3] is not lower triangular; lcov[3][1,2]=0.4242", "lcov", "lower triangular",
                         ["0.4242", "[1,2]"]),
    "cholesky diagonal": ("lcov[3][2] is -0.3131, but must be positive!", "lcov", "positive", ["0.3131", "[2]"]),
    "corr diagonal": ("cr is not a valid correlation matrix. cr(2,2) is 1.7373, but should be near 1.0", "cr",
                      "correlation matrix", ["1.7373", "(2,2)"]),
    "symmetric": ("cr is not symmetric. cr[1,2] = 0.7373, but cr[2,1] = 0.4242", "cr", "symmetric",
                  ["0.7373", "0.4242"]),
    "positive definite": ("cv is not positive definite.", "cv", "positive definite", []),
    "sum_to_zero": ("z does not sum to zero. sum(z) = 0.0731, but should be 0", "z", "sum to zero",
                            ["0.0731"]),
    "stochastic column": ("P is not a valid column stochastic matrix. sum(P[:, 2]) = 0.9131, but should be 1",
                          "P", "column stochastic", ["0.9131"]),
    "lower bound": ("b[3] is -0.7373, but must be greater than or equal to 0.000000", "b",
                    "greater than or equal to", ["0.7373", "[3]"]),
    "bound from a row": ("y[3] is 7, but must be less than or equal to 5", "y", "less than or equal to",
                         ["7", "5", "[3]"]),
    "interval": ("r[3] is 1.7373, but must be in the interval [-1, 1]", "r", "interval", ["1.7373", "[3]"]),
    "not nan": ("x[2, 7] is nan, but must be not nan!", "x", "not nan", ["[2, 7]", " is nan"]),
    "finite": ("sigma is inf, but must be finite!", "sigma", "finite", ["inf,"]),
}


@pytest.mark.parametrize("case", sorted(STAN_TEXTS))
def test_each_stan_data_check_keeps_the_name_and_kind_and_drops_every_value(case):
    """Each of Stan's data-check texts (with its program location, raw and cleaned) comes out with the variable's
    name, the constraint kind and the line, and with none of the values, sums, norms or indices it quoted."""
    text, name, kind, values = STAN_TEXTS[case]
    for raw in (f"Error in bs_model_construct: Exception: m_model_namespace::m_model: {text} (in '/a/m.stan', "
                "line 7, column 2 to column 24)", f"{text} (m.stan, line 7)"):
        out = withhold_data_values(raw)
        assert out.startswith(f"{name} ") and kind in out and out.endswith("(m.stan, line 7)"), out
        assert WITHHELD in out, out
        body = out.replace("(m.stan, line 7)", "")
        assert not any(value in body for value in values), out
        assert not re.search(r"\d", body), out  # no digit at all outside the program location


def test_unrecognised_messages_lose_numbers_and_value_free_ones_stay_whole():
    """A message of no known kind (a reject in transformed data) keeps its words but no number or index; Stan's
    messages about declared sizes and missing variables (names and sizes only) pass unchanged."""
    out = withhold_data_values("Exception: reject: row 17 has y = 2.5e10 and z[4] = -inf (m.stan, line 9)")
    assert "reject: row" in out and out.endswith("(m.stan, line 9)") and WITHHELD in out, out
    assert not re.search(r"\d|inf", out.replace("(m.stan, line 9)", "")), out
    sizes = ("mismatch in dimension declared and found in context; processing stage=data initialization; "
             "variable name=y; position=0; dims declared=(5); dims found=(4)")
    assert withhold_data_values(sizes) == sizes
    missing = "variable does not exist; processing stage=data initialization; variable name=x; base type=double"
    assert withhold_data_values(missing) == missing


def test_declared_type_is_named_when_known():
    """With the program's declarations the message also says the declared type (public program text), so a
    cholesky_factor_corr row reported by Stan as 'not a valid unit vector' still names what the user wrote."""
    out = withhold_data_values("L[3] is not a valid unit vector. The sum of the squares of the elements should be "
                               "1, but is 0.633611", {"L": "array[N] cholesky_factor_corr[2]"})
    assert out.startswith("L (declared array[N] cholesky_factor_corr[2]) is not a valid unit vector"), out
    assert "0.633611" not in out


# ------------------------------------------------------------------------------- every constrained row type
N_ROWS = 4
VALID = {"N": N_ROWS, "b": [0.5] * N_ROWS, "r": [0.1] * N_ROWS, "s": [[0.2, 0.3, 0.5]] * N_ROWS,
         "o": [[-1.0, 0.0, 1.0]] * N_ROWS, "po": [[0.5, 1.0, 2.0]] * N_ROWS, "u": [[1.0, 0.0, 0.0]] * N_ROWS,
         "lcorr": [[[1.0, 0.0], [0.6, 0.8]]] * N_ROWS, "lcov": [[[1.0, 0.0], [0.3, 2.0]]] * N_ROWS,
         "cr": [[[1.0, 0.3], [0.3, 1.0]]] * N_ROWS, "cv": [[[2.0, 0.3], [0.3, 1.0]]] * N_ROWS}
#: variable -> (the third row's violating value, the constraint words the error must contain, digit strings of the
#: row's values (and of what Stan derives from them: sums, norms) that must not appear)
VIOLATIONS = {
    "b": (-0.7373, "greater than or equal to", ["7373"]),
    "r": (1.7373, "less than or equal to", ["7373"]),
    "s": ([0.5, 0.3, 0.2737], "simplex", ["2737", "0737"]),
    "o": ([0.5737, 0.3131, 0.9], "ordered", ["5737", "3131"]),
    "po": ([-0.5737, 1.0, 2.0], "positive_ordered", ["5737"]),
    "u": ([0.7373, 0.5, 0.1], "unit_vector", ["7373", "8036"]),
    "lcorr": ([[1.0, 0.0], [0.7373, 0.3]], "cholesky_factor_corr", ["7373", "6336"]),
    "lcov": ([[1.7373, 0.4242], [0.3, 2.0]], "cholesky_factor_cov", ["7373", "4242"]),
    "cr": ([[1.0, 0.7373], [0.4242, 1.0]], "corr_matrix", ["7373", "4242"]),
    "cv": ([[1.7373, 0.9], [0.9, 0.4242]], "cov_matrix", ["7373", "4242"]),
}


def _violating(name: str) -> dict:
    data = copy.deepcopy(VALID)
    data[name] = list(data[name])
    data[name][2] = VIOLATIONS[name][0]
    return data


def _check_message(message: str, name: str) -> None:
    _, words, digits = VIOLATIONS[name]
    assert re.search(rf"(^|\s){name} \(declared", message), message
    assert words in message and WITHHELD in message, message
    assert not any(d in message for d in digits), message
    said = re.sub(r"\(declared [^)]*\)", "", message)  # the declared type is program text, e.g. corr_matrix[2]
    assert "[3]" not in said and "[2]" not in said and " 3 " not in said, message


@pytest.mark.stan
@pytest.mark.parametrize("name", sorted(VIOLATIONS))
def test_a_violated_row_of_each_constrained_type_names_variable_and_constraint_only(name, stan_model, tmp_path,
                                                                                    capsys):
    """One program declares a row variable of every constrained type; a data set whose third row violates one
    of them is rejected, in Python (DataError) and by ``stan-dp sample`` (exit 2), with an error that names the
    variable and its constraint and quotes no value of the rows (nor sums, norms or positions derived from
    them)."""
    from stan_dp.cli import main
    from stan_dp.stan.data import DataError

    model = stan_model("constrained_rows")
    data = _violating(name)
    with pytest.raises(DataError) as info:
        model.sample(data, algorithm="penalty", epsilon=1.0, delta=1e-5, chains=1, iter_warmup=5, iter_sampling=5,
                     ratio_clip=1.0, show_progress=False)
    _check_message(str(info.value), name)

    path = tmp_path / "data.json"
    path.write_text(json.dumps(data))
    code = main(["sample", str(ROOT / "stan_models" / "constrained_rows.stan"), "--data", str(path), "--epsilon",
                 "1", "--delta", "1e-5", "--chains", "1", "--iter-warmup", "5", "--iter-sampling", "5",
                 "--option", "ratio_clip=1", "--output", str(tmp_path / "fit.nc"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2, err
    _check_message(err, name)


# -------------------------------------------------------------------------------- overflow-free clipping
def test_row_norm_and_clip_are_overflow_free_and_silent():
    """Rows with entries near the largest double give a finite or +inf norm and are clipped to norm b in their
    own direction, with no floating-point warning; ordinary rows are clipped exactly as before (bit for bit)."""
    big = np.finfo(float).max * 0.75  # sqrt(3) big overflows
    grads = np.array([[big, big, big], [3.0, 4.0, 0.0], [1e-300, 0.0, -1e-300], [big, -1.0, 0.0],
                      [np.inf, 0.0, 0.0], [0.0, 0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        norms = mechanisms.row_norms(grads)
        clipped = mechanisms.clip_gradients(grads, 2.0)
        total = mechanisms.clipped_gradient_sum(grads, 2.0)
    assert np.isinf(norms[0]) and norms[1] == 5.0 and math.isclose(norms[3], big)
    assert norms[4] == 0.0 and norms[5] == 0.0
    assert np.all(np.isfinite(clipped))
    np.testing.assert_allclose(np.linalg.norm(clipped[[0, 1, 3]], axis=1), 2.0, rtol=1e-14)
    np.testing.assert_allclose(clipped[0], np.full(3, 2.0 / math.sqrt(3.0)), rtol=1e-14)
    assert np.array_equal(clipped[1], np.array([3.0, 4.0, 0.0]) * (2.0 / 5.0))
    assert np.array_equal(clipped[2], grads[2]) and np.array_equal(clipped[4], np.zeros(3))
    np.testing.assert_allclose(total, clipped.sum(axis=0), rtol=1e-14)


# --------------------------------------------------------------------------- the curvature release F~
def test_curvature_sensitivity_is_sqrt2_L2_attained_by_orthogonal_rows_and_never_exceeded():
    """Replacing one row moves the clipped squared-gradient sum (L2) and the clipped outer-product sum (Frobenius,
    and its upper triangle in L2) by exactly sqrt(2) L^2 when the two rows are orthogonal of norm >= L, and by at
    most sqrt(2) L^2 on random pairs (worst ratio printed in the assertion); the noise sd is tau sqrt(2) L^2."""
    L, d = 1.5, 4
    bound = mechanisms.curvature_sensitivity(L)
    assert bound == math.sqrt(2.0) * L * L
    assert mechanisms.curvature_noise_sd(0.7, L) == 0.7 * bound
    rng = np.random.default_rng(33)
    base = rng.standard_normal((20, d))

    def changes(g: np.ndarray, h: np.ndarray) -> tuple[float, float, float]:
        a, b = base.copy(), base.copy()
        a[5], b[5] = g, h
        sq = mechanisms.clipped_squared_gradient_sum(a, L) - mechanisms.clipped_squared_gradient_sum(b, L)
        outer = mechanisms.clipped_outer_product_sum(a, L) - mechanisms.clipped_outer_product_sum(b, L)
        return (float(np.linalg.norm(sq)), float(np.linalg.norm(outer)),
                float(np.linalg.norm(outer[np.triu_indices(d)])))

    worst = changes(np.array([3.0 * L, 0, 0, 0]), np.array([0, L, 0, 0]))
    np.testing.assert_allclose(worst, bound, rtol=1e-12)
    ratio = 0.0
    for _ in range(2000):
        g, h = rng.standard_normal(d) * rng.uniform(0.1, 5.0), rng.standard_normal(d) * rng.uniform(0.1, 5.0)
        if rng.uniform() < 0.3:  # sparse rows come closest to the worst case
            g[rng.integers(d)] = 0.0
            h[np.abs(g) > 0] *= rng.uniform(0.0, 0.1)
        ratio = max(ratio, max(changes(g, h)) / bound)
    assert ratio <= 1.0 + 1e-12, ratio


# ------------------------------------------------------------------- the same warnings on neighbouring data
def _caller_warnings(run) -> list[tuple[str, str]]:
    """(category, message) of every warning ``run()`` lets reach its caller. A ConvergenceWarning is kept by
    category only: it is computed from the released draws (post-processing), so its wording may differ between
    neighbours without any leak; whether it appears is compared."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [(w.category.__name__, "" if w.category.__name__ == "ConvergenceWarning" else str(w.message))
            for w in caught]


#: one row's covariate made extreme: beyond the square root of the largest double, the largest double, inf, NaN
EXTREMES = (1e300, np.finfo(float).max, -np.inf, np.nan)
REFERENCE_RUNS = {
    "penalty": dict(algorithm="penalty", ratio_clip=3.0),
    "dp-hmc": dict(algorithm="dp-hmc", ratio_clip=3.0, grad_clip=3.0, leapfrog_steps=3, anchor="none"),
    "dp-sgld": dict(algorithm="dp-sgld", grad_clip=3.0),
    "anchored dp-hmc": dict(algorithm="dp-hmc", ratio_clip=3.0, grad_clip=3.0, leapfrog_steps=3, anchor="dp-gd",
                            anchor_steps=10, anchor_curvature_share=0.1),
    "anchored dp-sgld": dict(algorithm="dp-sgld", grad_clip=3.0, anchor="dp-gd", anchor_steps=10),
    "dp-laplace": dict(algorithm="dp-laplace", grad_clip=3.0, anchor_steps=10, iter_warmup=0),
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "anchored dp-hmc" else n
                                  for n in sorted(REFERENCE_RUNS)])
def test_neighbours_with_an_extreme_row_give_the_caller_the_same_warnings(name):
    """A data set and its neighbours whose row 7 has a covariate of 1e300, the largest double, -inf or NaN give
    the caller of sample_private exactly the same warnings (NumPy reference logistic model; the per-row arithmetic
    of the model, the mechanisms, the anchored rows and the kernels overflows on such rows)."""
    from stan_dp.models.reference_models import LogisticRegressionModel
    from stan_dp.run.pipeline import sample_private

    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 2))
    y = (rng.uniform(size=100) < 0.5).astype(float)
    options = dict(REFERENCE_RUNS[name])
    warmup = options.pop("iter_warmup", 10)

    def run(rows: np.ndarray):
        return lambda: sample_private(LogisticRegressionModel(rows, y), epsilon=2.0, delta=1e-5, chains=2,
                                      iter_warmup=warmup, iter_sampling=10, seed=3, show_progress=False, **options)

    expected = _caller_warnings(run(x))
    assert not [m for c, m in expected if c == "RuntimeWarning"], expected
    for value in EXTREMES:
        neighbour = x.copy()
        neighbour[7, 0] = value
        assert _caller_warnings(run(neighbour)) == expected, value


@pytest.mark.stan
def test_stan_engine_neighbours_give_the_same_warnings(stan_model, tmp_path, capsys):
    """The same on a compiled program (logistic.stan, shard engine), in Python and on the command line: a row with
    a covariate of 1e300, inf or NaN gives the caller the warnings its neighbour gives, and
    ``stan-dp sample`` writes the same lines to stderr (compared by their beginnings with numbers masked: the
    summary and the convergence verdict print numbers computed from the released draws, which differ between
    neighbours as any released value does)."""
    from stan_dp.cli import main
    from stan_dp.tools.demo import simulate_logistic

    model = stan_model("logistic")
    data = simulate_logistic(200, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)

    def python_run(rows: dict):
        return lambda: model.sample(rows, algorithm="dp-hmc", epsilon=2.0, delta=1e-5, chains=2, iter_warmup=10,
                                    iter_sampling=10, seed=5, show_progress=False, ratio_clip=2.5, grad_clip=2.5,
                                    leapfrog_steps=2, anchor="none")

    def cli_stderr(rows: dict, name: str) -> str:
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(rows))
        main(["sample", str(ROOT / "stan_models" / "logistic.stan"), "--data", str(path), "--epsilon", "2",
              "--delta", "1e-5", "--chains", "2", "--iter-warmup", "10", "--iter-sampling", "10", "--seed", "5",
              "--algorithm", "penalty", "--option", "ratio_clip=2.5", "--output", str(tmp_path / f"{name}.nc"),
              "--quiet"])
        err = capsys.readouterr().err.replace(name, "DATA")
        masked = (re.sub(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?", "#", line) for line in err.splitlines())
        return [" ".join(line.split())[:40] for line in masked if line.strip()]

    expected = _caller_warnings(python_run(data))
    expected_err = cli_stderr(data, "base")
    assert not [m for c, m in expected if c == "RuntimeWarning"], expected
    assert not [line for line in expected_err if "RuntimeWarning" in line or "encountered" in line], expected_err
    for i, value in enumerate((1e300, np.inf, np.nan)):
        neighbour = copy.deepcopy(data)
        neighbour["x"][7][0] = value
        assert _caller_warnings(python_run(neighbour)) == expected, value
        assert cli_stderr(neighbour, f"n{i}") == expected_err, value


def test_dp_laplace_curvature_noise_is_its_multiplier_times_sqrt2_L2(monkeypatch):
    """dp-laplace releases F~ with noise sd tau_F sqrt(2) L^2 per free entry (recorded at the draw), the attrs say
    so, and the accountant composed a Gaussian of noise multiplier tau_F for it: sd / sensitivity = multiplier."""
    from stan_dp.models.reference_models import LogisticRegressionModel
    from stan_dp.run.pipeline import sample_private

    sds = []
    real = mechanisms.symmetric_gaussian_noise

    def recording(rng, sd, dim, size=None):
        sds.append(float(sd))
        return real(rng, sd, dim, size)

    monkeypatch.setattr(mechanisms, "symmetric_gaussian_noise", recording)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 2))
    y = (rng.uniform(size=200) < 0.5).astype(float)
    L = 2.0
    fit = sample_private(LogisticRegressionModel(x, y), algorithm="dp-laplace", grad_clip=L, anchor_steps=10,
                         epsilon=2.0, delta=1e-5, chains=1, iter_sampling=5, seed=2, show_progress=False,
                         noise_aware=False)
    options = json.loads(fit.attrs["algorithm_options"])
    tau_f = options["tau_curvature"]
    assert math.isclose(options["curvature_noise_sd"], tau_f * math.sqrt(2.0) * L * L)
    assert sds and all(math.isclose(sd, tau_f * math.sqrt(2.0) * L * L) for sd in sds), sds
    event = [m for m in json.loads(fit.attrs["privacy_mechanisms"]) if "outer-product" in m["name"]]
    assert len(event) == 1 and math.isclose(event[0]["noise_multiplier"], tau_f)
