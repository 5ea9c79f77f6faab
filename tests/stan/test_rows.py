"""Per-row log-likelihoods and gradients of unchanged Stan programs (the row API).

Evidence for the issue "Per-row log-likelihoods and gradients of an unchanged Stan model, in compiled code":

* data as a dict, a Stan JSON string or a path; undeclared variables ignored; every rejection of bad data or
  of a program outside the row contract raises its explanatory message;
* on three posteriordb models (data and thinned reference draws shipped in data/posteriordb): factorization against BridgeStan's
  full and prior instances, per-row gradients against finite differences, subsets against all rows,
  constrained names and shapes against the posteriordb reference draws, the prior gradient, and thread-count
  invariance;
* on logistic regression: values and gradients against the closed form.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from stan_dp.stan.data import DataError, prior_data
from stan_dp.stan.engine import NativeError
from stan_dp.model import ModelError

pytestmark = pytest.mark.stan

# (bundled program, data file in posteriordb/data, reference draws in posteriordb/reference_draws)
CASES = {
    "sblri": ("sblri_blr", "sblri.json", "sblri-blr.reference.json"),
    "kidiq": ("kidiq_momiq", "kidiq.json", "kidiq-kidscore_momiq.reference.json"),
    "earnings": ("earnings_logearn_height", "earnings.json", "earnings-logearn_height.reference.json"),
}

_likelihoods: dict[str, object] = {}


def _data_path(posteriordb: Path, case: str) -> Path:
    return posteriordb / CASES[case][1]


def _likelihood(stan_model, posteriordb, case: str):
    """The row likelihood of a posteriordb case, built once per session (threads restored to 2)."""
    if case not in _likelihoods:
        _likelihoods[case] = stan_model(CASES[case][0]).row_likelihood(_data_path(posteriordb, case), threads=2)
    lik = _likelihoods[case]
    lik.set_threads(2)
    return lik


def _reference_draws(posteriordb: Path, case: str) -> list[dict[str, list[float]]]:
    """Thinned reference draws (10 chains x 4 draws, at iterations 0, 250, 500, 750 of each chain)."""
    return json.loads((posteriordb / CASES[case][2]).read_text())["draws_thinned"]


def _full_and_prior(stan_model, posteriordb, case: str, lik):
    """BridgeStan models of all rows and of the prior instance (N = 0), on the same declared data."""
    model = stan_model(CASES[case][0])
    data = json.loads(_data_path(posteriordb, case).read_text())
    kept = {name: data[name] for name in (d.name for d in model.data_declarations)}
    return model.bridgestan(kept), model.bridgestan(prior_data(lik.split, kept))


def _points(stan_model, posteriordb, case: str, lik, n_random: int = 2) -> list[np.ndarray]:
    """Unconstrained test points: two posteriordb reference draws and a few uniform(-1, 1) points."""
    full, _ = _full_and_prior(stan_model, posteriordb, case, lik)
    draws = _reference_draws(posteriordb, case)
    names = list(draws[0])
    points = []
    for chain, it in ((0, 0), (3, 2)):
        constrained = np.array([draws[chain][name][it] for name in names])
        points.append(full.param_unconstrain(constrained))
    rng = np.random.default_rng(7)
    points += [rng.uniform(-1, 1, size=lik.dim) for _ in range(n_random)]
    return points


# ------------------------------------------------------------------------------------------------ data input
def test_data_as_dict_json_string_and_path_agree(stan_model, posteriordb):
    model = stan_model("kidiq_momiq")
    path = _data_path(posteriordb, "kidiq")
    text = path.read_text()
    theta = np.array([20.0, 0.6, np.log(18.0)])
    values = []
    for data in (json.loads(text), text, str(path), path):
        lik = model.row_likelihood(data, threads=1)
        assert lik.n_rows == 434 and lik.dim == 3
        values.append(lik.row_log_lik(theta))
    for other in values[1:]:
        np.testing.assert_array_equal(values[0], other)


def test_undeclared_variables_are_ignored(stan_model, posteriordb):
    data = json.loads(_data_path(posteriordb, "kidiq").read_text())
    assert {"mom_hs", "mom_iq_new", "mom_hs_new"} <= set(data)  # in the file, not declared by the program
    data["unrelated"] = [1.0, 2.0, 3.0]  # wrong length for a row variable, but undeclared: ignored
    lik = stan_model("kidiq_momiq").row_likelihood(data, threads=1)
    assert lik.split.count_name == "N" and lik.split.n_rows == 434
    assert lik.split.row_variables == ("kid_score", "mom_iq")
    assert lik.split.public_variables == ()


def test_missing_variable_is_named(stan_model, posteriordb):
    data = json.loads(_data_path(posteriordb, "kidiq").read_text())
    del data["mom_iq"]
    with pytest.raises(DataError, match=r"Data variable\(s\) mom_iq declared by the program are missing"):
        stan_model("kidiq_momiq").row_likelihood(data)


def test_row_variable_with_wrong_leading_dimension(stan_model, posteriordb):
    data = json.loads(_data_path(posteriordb, "kidiq").read_text())
    data["mom_iq"] = data["mom_iq"][:-1]
    with pytest.raises(DataError, match=r"Row variable 'mom_iq' has leading dimension 433, but N = 434"):
        stan_model("kidiq_momiq").row_likelihood(data)


@pytest.mark.parametrize("n", [0, -1])
def test_fewer_than_one_row_is_rejected(stan_model, n):
    data = {"N": n, "kid_score": [], "mom_iq": []}
    with pytest.raises(DataError, match=rf"The row count 'N' is {n}; a private run needs at least one row"):
        stan_model("kidiq_momiq").row_likelihood(data)


def test_non_integer_row_count_is_rejected(stan_model):
    with pytest.raises(DataError, match=r"The row count 'N' must be a single integer"):
        stan_model("kidiq_momiq").row_likelihood({"N": 2.0, "kid_score": [1.0, 2.0], "mom_iq": [3.0, 4.0]})


def test_unknown_row_count_name(stan_model, posteriordb):
    with pytest.raises(DataError, match=r"declares no data variable 'M' for the row count"):
        stan_model("kidiq_momiq").row_likelihood(_data_path(posteriordb, "kidiq"), rows="M")


def test_bad_json_and_missing_file(stan_model, tmp_path):
    model = stan_model("kidiq_momiq")
    with pytest.raises(DataError, match=r"The data string is not valid JSON"):
        model.row_likelihood('{"N": 3,')
    with pytest.raises(DataError, match=r"Data file not found"):
        model.row_likelihood(tmp_path / "absent.json")
    with pytest.raises(DataError, match=r"Data must be a dict, a Stan JSON string or a path, not int"):
        model.row_likelihood(3)


def test_data_violating_declared_constraints(stan_model, posteriordb):
    data = json.loads(_data_path(posteriordb, "sblri").read_text())
    data["D"] = -1
    with pytest.raises(DataError, match=r"Stan rejected the data for sblri_blr.stan: D \(declared [^)]*\) must be "
                                         r"greater than or equal to its declared bound \(values and positions "
                                         r"withheld") as info:
        stan_model("sblri_blr").row_likelihood(data)
    assert "-1" not in str(info.value) and info.value.__cause__ is None


# ------------------------------------------------------------------------------------------ row_variables
def test_row_variables_override_matches_inferred_split(stan_model, posteriordb):
    model = stan_model("sblri_blr")
    path = _data_path(posteriordb, "sblri")
    inferred = _likelihood(stan_model, posteriordb, "sblri")
    explicit = model.row_likelihood(path, rows="N", row_variables=["y", "X"], threads=1)
    assert explicit.split.row_variables == ("y", "X")
    assert explicit.split.public_variables == ("D",)
    theta = np.linspace(-0.5, 0.5, inferred.dim)
    np.testing.assert_array_equal(inferred.row_log_lik(theta), explicit.row_log_lik(theta))


def test_row_variables_override_rejections(stan_model, posteriordb):
    model = stan_model("kidiq_momiq")
    path = _data_path(posteriordb, "kidiq")
    with pytest.raises(DataError, match=r"row_variables names undeclared data: mom_hs"):
        model.row_likelihood(path, row_variables=["kid_score", "mom_iq", "mom_hs"])
    with pytest.raises(DataError, match=r"row_variables leaves out mom_iq, declared with leading size N"):
        model.row_likelihood(path, row_variables=["kid_score"])
    with pytest.raises(DataError, match=r"row_variables lists the row count 'N' itself"):
        model.row_likelihood(path, row_variables=["N", "kid_score", "mom_iq"])


# ------------------------------------------------------------------------------ programs outside the contract
PROGRAMS = {
    # the prior instance (N = 0) is not a valid data set for this program
    "rejects_zero": """
data {
  int<lower=1> N;
  vector[N] y;
}
parameters {
  real mu;
}
model {
  mu ~ normal(0, 10);
  y ~ normal(mu, 1);
}
""",
    # one latent parameter per row
    "latent_per_row": """
data {
  int<lower=0> N;
  vector[N] y;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[N] z;
}
model {
  mu ~ normal(0, 5);
  tau ~ normal(0, 1);
  z ~ normal(mu, tau);
  y ~ normal(z, 1);
}
""",
    # transformed data centred by the data mean (valid with N = 0, so only the factorization check sees it)
    "pooled_centred": """
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
transformed data {
  vector[N] x_c = x - (N > 0 ? mean(x) : 0.0);
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, 10);
  beta ~ normal(0, 10);
  sigma ~ normal(0, 5);
  y ~ normal(alpha + beta * x_c, sigma);
}
""",
    # the usual way of writing it: standardise with mean and sd (mean() of no rows is a Stan error)
    "pooled_standardised": """
data {
  int<lower=0> N;
  vector[N] x;
  vector[N] y;
}
transformed data {
  vector[N] x_std = (x - mean(x)) / sd(x);
}
parameters {
  real alpha;
  real beta;
  real<lower=0> sigma;
}
model {
  alpha ~ normal(0, 10);
  beta ~ normal(0, 10);
  sigma ~ normal(0, 5);
  y ~ normal(alpha + beta * x_std, sigma);
}
""",
}


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    """Factory: compile one of PROGRAMS (written to a temporary folder; the library cache is keyed by source)."""
    from stan_dp.model import DPStanModel

    folder = tmp_path_factory.mktemp("programs")
    built: dict[str, DPStanModel] = {}

    def make(name: str) -> DPStanModel:
        if name not in built:
            path = folder / f"{name}.stan"
            path.write_text(PROGRAMS[name])
            built[name] = DPStanModel(path)
        return built[name]

    return make


def _xy(n: int = 40, seed: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(5.0, 2.0, size=n)
    return {"N": n, "x": x, "y": 1.0 + 0.5 * x + rng.normal(size=n)}


def test_program_rejecting_zero_rows(program):
    """A row count declared with a lower bound above 0: the message blames the declaration and quotes Stan."""
    with pytest.raises(ModelError, match=r"(?s)The program rejects N = 0.*int<lower=0> N;") as info:
        program("rejects_zero").row_likelihood({"N": 5, "y": [0.1, 0.2, 0.3, 0.4, 0.5]})
    assert "Stan said" in str(info.value) and "is declared 'int<lower=1> N'" in str(info.value)


def test_program_with_parameters_sized_by_rows(program):
    with pytest.raises(ModelError, match=r"parameters are sized by the row count 'N' \(unconstrained dimension 2 "
                                         r"with no rows, 12 with all rows\).*Per-row latent parameters"):
        program("latent_per_row").row_likelihood({"N": 10, "y": np.arange(10.0)})


def test_program_pooling_rows_fails_the_factorization_check(program):
    model = program("pooled_centred")
    data = _xy()
    with pytest.raises(ModelError, match=r"does not factorise over rows.*transformed data that pools rows") as info:
        model.row_likelihood(data)
    # the sums are functions of the private rows: the message says they differ, not what they are
    assert not re.search(r"\d\.\d{3,}", str(info.value)) and info.value.__cause__ is None
    # Without the check the instances build: the check is what catches it.
    lik = model.row_likelihood(data, check=False)
    assert lik.n_rows == 40


def test_pooling_is_caught_on_a_bounded_range_of_rows(program, monkeypatch):
    """The factorization check on CHECK_ROWS = 8 of the 40 rows (the user's program built on those rows only)
    still catches transformed data that pool the rows."""
    from stan_dp.stan import factorization

    monkeypatch.setattr(factorization, "CHECK_ROWS", 8)
    with pytest.raises(ModelError, match=r"does not factorise over rows"):
        program("pooled_centred").row_likelihood(_xy())


def test_program_pooling_rows_with_mean_of_no_rows(program):
    # mean()/sd() of the prior instance's empty column fail in transformed data: the error names pooling as a
    # likely cause and carries Stan's message with the program line.
    with pytest.raises(ModelError, match=r"(?s)The program fails with N = 0.*Stan said: .*(sd|mean): .* must have a "
                                         r"non-zero size.*line 8.*transformed data that summarises the rows.*pools rows"
                       ) as info:
        program("pooled_standardised").row_likelihood(_xy())
    # the program already declares int<lower=0> N: the message does not tell the user to declare it
    assert "Declare it as" not in str(info.value) and "int<lower=0>" not in str(info.value)
    # the CLI's two lines keep Stan's message (it names the cause) without --verbose
    from stan_dp.cli import short_reason

    assert "must have a non-zero size" in short_reason(info.value).splitlines()[0]


# --------------------------------------------------------------------------------------- posteriordb models
@pytest.mark.parametrize("case", list(CASES))
def test_factorization_against_bridgestan(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    full, prior = _full_and_prior(stan_model, posteriordb, case, lik)
    assert full.param_unc_num() == prior.param_unc_num() == lik.dim
    for theta in _points(stan_model, posteriordb, case, lik):
        lp_full, g_full = full.log_density_gradient(theta, propto=False, jacobian=True)
        lp_prior, g_prior = prior.log_density_gradient(theta, propto=False, jacobian=True)
        assert lp_full == pytest.approx(full.log_density(theta, propto=False, jacobian=True), rel=1e-14)
        values, grads = lik.row_log_lik_grad(theta)
        assert values.shape == (lik.n_rows,) and grads.shape == (lik.n_rows, lik.dim)
        np.testing.assert_allclose(lik.row_log_lik(theta), values, rtol=1e-13, atol=0)
        scale = np.abs(values).sum() + abs(lp_full)
        assert abs(values.sum() - (lp_full - lp_prior)) <= 1e-10 * scale
        prior_value, prior_grad = lik.log_prior_grad(theta)
        assert prior_value == pytest.approx(lp_prior, rel=1e-12, abs=1e-12)
        assert lik.log_prior(theta) == pytest.approx(lp_prior, rel=1e-12, abs=1e-12)
        np.testing.assert_allclose(prior_grad, g_prior, rtol=1e-12, atol=1e-12)
        gscale = np.abs(grads).sum(axis=0) + np.abs(g_full) + 1.0
        assert np.all(np.abs(grads.sum(axis=0) + prior_grad - g_full) <= 1e-10 * gscale)


def _central_differences(f, theta: np.ndarray, step: float) -> np.ndarray:
    """(output size, dim) central finite differences of a vector function."""
    columns = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = step * max(1.0, abs(theta[j]))
        columns.append((f(theta + e) - f(theta - e)) / (2 * e[j]))
    return np.stack(columns, axis=-1)


@pytest.mark.parametrize("case", list(CASES))
def test_row_gradients_match_finite_differences(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    for theta in _points(stan_model, posteriordb, case, lik):
        values, grads = lik.row_log_lik_grad(theta)
        assert np.all(np.isfinite(values)) and np.all(np.isfinite(grads))
        fd = _central_differences(lik.row_log_lik, theta, 1e-5)
        # rounding error of the differences ~ eps |l_i| / step; truncation ~ step^2 |l_i'''|
        tol = 1e-7 * (1.0 + np.abs(values)[:, None] + np.abs(grads))
        assert np.all(np.abs(fd - grads) <= tol), np.max(np.abs(fd - grads) / tol)


@pytest.mark.parametrize("case", list(CASES))
def test_prior_gradient_matches_finite_differences(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    for theta in _points(stan_model, posteriordb, case, lik):
        value, grad = lik.log_prior_grad(theta)
        assert np.isfinite(value)
        fd = _central_differences(lambda t: np.array([lik.log_prior(t)]), theta, 1e-6)[0]
        np.testing.assert_allclose(fd, grad, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", list(CASES))
def test_subset_rows_equal_entries_of_all_rows(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    theta = _points(stan_model, posteriordb, case, lik)[1]
    all_values, all_grads = lik.row_log_lik_grad(theta)
    rng = np.random.default_rng(11)
    subsets = [
        rng.choice(lik.n_rows, size=min(97, lik.n_rows), replace=False),  # unsorted
        rng.integers(0, lik.n_rows, size=150),  # with repeats, > 64 so it runs threaded
        np.array([lik.n_rows - 1]),
        [0, 5, 5, 2],  # a plain list
        np.array([], dtype=np.int64),
    ]
    for rows in subsets:
        idx = np.asarray(rows, dtype=np.int64)
        np.testing.assert_array_equal(lik.row_log_lik(theta, rows), all_values[idx])
        values, grads = lik.row_log_lik_grad(theta, rows)
        np.testing.assert_array_equal(values, all_values[idx])
        np.testing.assert_array_equal(grads, all_grads[idx])
    for bad in ([lik.n_rows], [-1], [0, lik.n_rows + 10]):
        with pytest.raises(NativeError, match=r"row index -?\d+ is outside \[0, \d+\)"):
            lik.row_log_lik(theta, bad)
        with pytest.raises(NativeError, match=r"is outside"):
            lik.row_log_lik_grad(theta, bad)


def _shapes_of_reference(names: list[str]) -> dict[str, tuple[int, ...]]:
    """'beta[1]', 'beta[2]', 'sigma' -> {'beta': (2,), 'sigma': ()} (1-based indices, max per dimension)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for name in names:
        base, _, rest = name.partition("[")
        idx = tuple(int(i) for i in rest.rstrip("]").split(",")) if rest else ()
        old = shapes.get(base)
        shapes[base] = idx if old is None else tuple(max(a, b) for a, b in zip(old, idx))
    return shapes


@pytest.mark.parametrize("case", list(CASES))
def test_constrain_gives_reference_names_and_shapes(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    draws = _reference_draws(posteriordb, case)
    names = list(draws[0])
    expected = _shapes_of_reference(names)
    assert lik.param_shapes() == expected
    full, _ = _full_and_prior(stan_model, posteriordb, case, lik)
    draw = {name: draws[2][name][1] for name in names}
    theta = full.param_unconstrain(np.array([draw[n] for n in names]))
    released = lik.constrain(theta)
    assert list(released) == list(expected)
    for base, shape in expected.items():
        assert np.shape(released[base]) == shape
    for name, value in draw.items():
        base, _, rest = name.partition("[")
        idx = tuple(int(i) - 1 for i in rest.rstrip("]").split(",")) if rest else ()
        assert released[base][idx] == pytest.approx(value, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", list(CASES))
def test_one_and_two_threads_give_identical_results(stan_model, posteriordb, case):
    lik = _likelihood(stan_model, posteriordb, case)
    theta = _points(stan_model, posteriordb, case, lik)[0]
    rows = np.random.default_rng(5).integers(0, lik.n_rows, size=200)
    results = {}
    for threads in (1, 2):
        lik.set_threads(threads)
        results[threads] = (lik.row_log_lik(theta), *lik.row_log_lik_grad(theta), *lik.row_log_lik_grad(theta, rows))
    lik.set_threads(2)
    for one, two in zip(results[1], results[2]):
        np.testing.assert_array_equal(one, two)


def test_concurrent_calls_from_python_threads(stan_model, posteriordb):
    """Chains run in Python threads call the same instances at once (ctypes releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    lik = _likelihood(stan_model, posteriordb, "earnings")
    rng = np.random.default_rng(9)
    thetas = [np.array([5.8, 0.06, -0.1]) + rng.normal(scale=0.05, size=3) for _ in range(8)]
    expected = [lik.row_log_lik_grad(theta) for theta in thetas]
    with ThreadPoolExecutor(max_workers=4) as pool:
        got = list(pool.map(lambda theta: lik.row_log_lik_grad(theta), thetas * 3))
    for i, (values, grads) in enumerate(got):
        np.testing.assert_array_equal(values, expected[i % 8][0])
        np.testing.assert_array_equal(grads, expected[i % 8][1])


def test_thread_count_at_construction_does_not_change_results(stan_model, posteriordb):
    model = stan_model("earnings_logearn_height")
    path = _data_path(posteriordb, "earnings")
    theta = np.array([5.8, 0.06, np.log(0.9)])
    one = model.row_likelihood(path, threads=1, check=False)
    two = model.row_likelihood(path, threads=2, check=False)
    assert one.n_rows == two.n_rows == 1192
    for a, b in zip(one.row_log_lik_grad(theta), two.row_log_lik_grad(theta)):
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------------------------- logistic regression
def _logistic_data(n: int, k: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k))
    eta = 0.3 + x @ rng.normal(scale=0.5, size=k)
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
    return {"N": n, "K": k, "x": x, "y": y, "prior_sd": 2.5}


def test_logistic_rows_match_closed_form(stan_model):
    data = _logistic_data(300, 4, seed=1)
    lik = stan_model("logistic").row_likelihood(data, threads=2)
    assert lik.split.row_variables == ("x", "y")
    assert lik.split.public_variables == ("K", "prior_sd")
    assert lik.param_shapes() == {"alpha": (), "beta": (4,)}
    rng = np.random.default_rng(2)
    for _ in range(3):
        theta = rng.normal(size=5)
        eta = theta[0] + data["x"] @ theta[1:]
        expected = data["y"] * eta - np.logaddexp(0.0, eta)
        resid = data["y"] - 1.0 / (1.0 + np.exp(-eta))
        expected_grad = resid[:, None] * np.column_stack([np.ones(300), data["x"]])
        values, grads = lik.row_log_lik_grad(theta)
        np.testing.assert_allclose(values, expected, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grads, expected_grad, rtol=1e-12, atol=1e-12)
        sd = data["prior_sd"]
        prior = np.sum(-0.5 * (theta / sd) ** 2 - np.log(sd) - 0.5 * np.log(2 * np.pi))
        value, grad = lik.log_prior_grad(theta)
        assert value == pytest.approx(prior, rel=1e-12)
        np.testing.assert_allclose(grad, -theta / sd**2, rtol=1e-12)


def test_logistic_rows_match_numpy_reference_model(stan_model):
    """The engine and the NumPy reference model implement the same row-likelihood interface identically."""
    from stan_dp.models.reference_models import LogisticRegressionModel

    data = _logistic_data(500, 9, seed=4)
    lik = stan_model("logistic").row_likelihood(data, threads=2)
    reference = LogisticRegressionModel(data["x"], data["y"], prior_sd=data["prior_sd"])
    assert (lik.n_rows, lik.dim) == (reference.n_rows, reference.dim) == (500, 10)
    assert lik.param_shapes() == reference.param_shapes()
    theta = np.random.default_rng(6).normal(scale=0.5, size=10)
    rows = np.array([3, 499, 0, 3])
    for subset in (None, rows):
        values, grads = lik.row_log_lik_grad(theta, subset)
        ref_values, ref_grads = reference.row_log_lik_grad(theta, subset)
        np.testing.assert_allclose(values, ref_values, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grads, ref_grads, rtol=1e-12, atol=1e-12)
    value, grad = lik.log_prior_grad(theta)
    ref_value, ref_grad = reference.log_prior_grad(theta)
    assert value == pytest.approx(ref_value, rel=1e-12)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-12)
    for name, released in lik.constrain(theta).items():
        np.testing.assert_allclose(released, reference.constrain(theta)[name], rtol=1e-14)
