"""Privacy units: all rows of one unit are one "row" to every mechanism (stan_dp.privacy.units), checked on the
pure-Python reference models (one row per unit equals the row-level run; a unit's sum is clipped, not its rows),
on the validation of the unit variable (stan_dp.stan.units) and on the words of the guarantee."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

from stan_dp.likelihood import PartialGradientSums, offers
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.privacy import mechanisms
from stan_dp.privacy.statement import plain_privacy_text
from stan_dp.privacy.units import UnitLikelihood, group_rows, unit_relation
from stan_dp.run.pipeline import sample_private
from stan_dp.run.plan import PublicFacts, plan_run
from stan_dp.stan.data import DataError, Declaration
from stan_dp.stan.units import program_uses, resolve_privacy_unit

from checkpoint_crash import crash_after_writes


def _logistic(n: int = 300, seed: int = 1) -> LogisticRegressionModel:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 2))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.3 + x @ np.array([1.0, -0.5]))))).astype(float)
    return LogisticRegressionModel(x, y)


RUNS = {  # algorithm, options, unit-only options: a ratio test, Poisson-minibatch SG-MCMC, an anchored SG kernel
    "penalty": ("penalty", {"ratio_clip": 2.0}, {}),
    "dp-sgld-poisson": ("dp-sgld", {"grad_clip": 3.0, "batch_sampling": "poisson"}, {}),
    "dp-sgnht-anchored": ("dp-sgnht", {"grad_clip": 3.0, "anchor": "dp-gd"}, {}),
    # k = 1 rows per unit: the unit-aware public scale (K = L^2 / (4 k)) is the row rule
    "dp-sgnht-anchored-k1": ("dp-sgnht", {"grad_clip": 3.0, "anchor": "dp-gd"}, {"max_rows_per_unit": 1}),
}


@pytest.mark.parametrize("case", sorted(RUNS))
def test_one_row_per_unit_reproduces_the_row_level_draws(case):
    """Distinct labels (in an order unrelated to the rows' values) give one row per unit: the unit run is the
    row-level run draw for draw with the same seed (1e-10), also with max_rows_per_unit=1 on an anchored run, and
    its attrs speak of the unit with N = the number of units; the row-level run records privacy_unit 'row'."""
    algorithm, options, unit_only = RUNS[case]
    model = _logistic()
    kwargs = dict(algorithm=algorithm, epsilon=3.0, delta=1e-4, chains=2, iter_warmup=60, iter_sampling=60, seed=7,
                  show_progress=False, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = sample_private(model, **kwargs)
        units = sample_private(model, privacy_unit=3 * np.arange(model.n_rows)[::-1] + 11, **kwargs, **unit_only)
    for name in rows.posterior.data_vars:
        assert_allclose(units.posterior[name].values, rows.posterior[name].values, rtol=0, atol=1e-10)
    assert rows.attrs["privacy_unit"] == "row" and rows.attrs["n_units"] == model.n_rows
    assert rows.attrs["neighbouring_relation"] == "substitute one row; N public"
    assert units.attrs["privacy_unit"] == "unit" and units.attrs["n_units"] == units.attrs["N"] == model.n_rows
    relation = unit_relation("unit")
    assert units.attrs["neighbouring_relation"] == relation
    assert relation in units.attrs["privacy_guarantee"]
    assert json.loads(units.attrs["privacy_report"])["neighbouring_relation"] == relation
    assert "treated one unit as one row" in units.attrs["privacy_unit_note"]
    assert not any("substitute one row" in v for v in units.attrs.values() if isinstance(v, str))


def test_group_rows_orders_units_by_first_row_and_caps_rows():
    """Units are numbered by their first row, rows stay in data order within a unit, and max_rows_per_unit keeps
    each unit's first k rows."""
    labels = np.array([5, 2, 5, 9, 2, 5, 5])
    order, starts, counts = group_rows(labels)
    assert order.tolist() == [0, 2, 5, 6, 1, 4, 3]
    assert starts.tolist() == [0, 4, 6] and counts.tolist() == [4, 2, 1]
    order, starts, counts = group_rows(labels, max_rows_per_unit=2)
    assert order.tolist() == [0, 2, 1, 4, 3]
    assert starts.tolist() == [0, 2, 4] and counts.tolist() == [2, 2, 1]
    with pytest.raises(ValueError, match="max_rows_per_unit"):
        group_rows(labels, max_rows_per_unit=0)
    with pytest.raises(ValueError, match="integers"):
        group_rows(labels.astype(float))


class _RowsAtTheBound:
    """Rows whose gradients all point along the first axis with norm ``bound`` and whose values are 1; a class
    that also offers partial clipped sums (as the Ray backend does), which a unit must never use."""

    def __init__(self, n: int, dim: int, bound: float):
        self.n_rows, self.dim, self.bound = n, dim, bound

    def row_log_lik(self, theta, rows=None):
        return np.ones(self.n_rows if rows is None else len(rows))

    def row_log_lik_grad(self, theta, rows=None):
        n = self.n_rows if rows is None else len(rows)
        grads = np.zeros((n, self.dim))
        grads[:, 0] = self.bound
        return np.ones(n), grads

    def partial_clipped_gradient_sums(self, theta, rows, bound, clip):
        raise AssertionError("a unit's rows must be summed before the clip, never clipped where they live")


def test_a_unit_of_three_rows_at_the_bound_contributes_the_bound_once():
    """Three rows each at the clip bound: clipped one by one they contribute 3 b; as one unit their sum (3 b) is
    clipped to b. The unit's value is the sum of its rows', and a backend's per-row partial clipped sums are not
    used (the unit does not offer them, whatever its base offers)."""
    b, theta = 2.0, np.zeros(2)
    base = _RowsAtTheBound(5, 2, b)
    per_row = mechanisms.clipped_gradient_sum(base.row_log_lik_grad(theta, [0, 1, 2])[1], b)
    assert_allclose(per_row, [3 * b, 0.0])
    unit = UnitLikelihood(base, np.array([7, 7, 1, 7, 1]))
    assert unit.n_rows == 2 and not offers(unit, PartialGradientSums)
    values, grads = unit.row_log_lik_grad(theta, np.array([0]))
    assert values.tolist() == [3.0]
    assert_allclose(grads, [[3 * b, 0.0]])
    assert_allclose(mechanisms.rows_clipped_gradient_sum(unit, theta, np.array([0]), b), [b, 0.0])
    assert_allclose(mechanisms.rows_clipped_gradient_sum(unit, theta, np.array([0, 1]), b), [2 * b, 0.0])
    assert unit.row_log_lik(theta).tolist() == [3.0, 2.0]
    capped = UnitLikelihood(base, np.array([7, 7, 1, 7, 1]), max_rows_per_unit=1)
    assert capped.row_log_lik(theta).tolist() == [1.0, 1.0]
    assert unit.row_log_lik(theta, np.array([], dtype=int)).shape == (0,)


def test_sample_private_refuses_bad_unit_inputs():
    """A label array of the wrong length or not of integers, and max_rows_per_unit without a unit, are refused
    with messages that say what is wrong."""
    model = _logistic(n=50)
    kwargs = dict(algorithm="penalty", ratio_clip=1.0, epsilon=1.0, delta=1e-3, chains=1, iter_warmup=5,
                  iter_sampling=5, seed=1, show_progress=False)
    with pytest.raises(ValueError, match="one label per row"):
        sample_private(model, privacy_unit=np.arange(49), **kwargs)
    with pytest.raises(ValueError, match="integers"):
        sample_private(model, privacy_unit=np.linspace(0, 1, 50), **kwargs)
    with pytest.raises(ValueError, match="give privacy_unit"):
        sample_private(model, max_rows_per_unit=3, **kwargs)


DECLARATIONS = [Declaration("N", "int<lower=0>", None, 0), Declaration("K", "int<lower=1>", None, 0),
                Declaration("x", "matrix", "N", 2), Declaration("y", "array[N] int<lower=0, upper=1>", "N", 1),
                Declaration("person", "array[N] int<lower=1>", "N", 1),
                Declaration("wave", "array[N] int", "N", 1)]
PROGRAM = """data {
  int<lower=0> N;
  int<lower=1> K;
  matrix[N, K] x;
  array[N] int<lower=0, upper=1> y;
  array[N] int<lower=1> person;
  array[N] int wave;
}
parameters {
  vector[K] beta;
}
model {
  print("person");
  y ~ bernoulli_logit(x * beta + 0.1 * to_vector(wave));
}
"""


def test_resolve_privacy_unit_names_the_variable_in_every_error():
    """Unknown names (with a suggestion), wrong length, reals, a wrongly declared variable, the row count and a
    variable the program models are refused with a DataError naming the variable; a declared label that the program
    only mentions inside a string, and an undeclared data entry, are accepted."""
    data = {"N": 4, "K": 1, "x": [[0.0]] * 4, "y": [0, 1, 0, 1], "person": [3, 3, 1, 1], "wave": [1, 2, 1, 2],
            "site": [1, 1, 1, 2], "score": [0.5, 1.0, 2.0, 3.0], "short": [1, 2]}
    labels, name = resolve_privacy_unit("person", data, DECLARATIONS, PROGRAM)
    assert name == "person" and labels.tolist() == [3, 3, 1, 1]
    assert resolve_privacy_unit("site", data, DECLARATIONS, PROGRAM)[1] == "site"
    assert resolve_privacy_unit(np.array([1, 2, 3, 4]), data, DECLARATIONS, PROGRAM)[1] == "unit"
    for unit, fragment in (("persn", "'persn' is not a variable of the data (did you mean person?)"),
                           ("short", "'short' has 2 entries but there are 4 rows"),
                           ("score", "'score' must hold integers"),
                           ("x", "'x' is declared 'matrix x'"),
                           ("N", "'N' is the row count"),
                           ("y", "'y' is used by the program"),
                           ("wave", "'wave' is used by the program")):
        with pytest.raises(DataError, match="privacy_unit") as info:
            resolve_privacy_unit(unit, data, DECLARATIONS, PROGRAM)
        assert fragment in str(info.value), (unit, str(info.value))
    assert not program_uses(PROGRAM, "person") and program_uses(PROGRAM, "wave")


def test_plain_words_speak_of_the_unit():
    """The plain-words statement names the unit, says its count is public and that rows per unit are not."""
    attrs = {"epsilon": 1.0, "delta": 1e-5, "privacy_unit": "person", "n_units": 595, "N": 595, "private": 1}
    text = plain_privacy_text(attrs)
    assert "all rows of any one person" in text and "the number of persons (N = 595" in text
    assert "how many rows each person has are protected" in text
    assert "any one row of the private data" in plain_privacy_text({**attrs, "privacy_unit": "row"})


# ------------------------------------------------------------------------------------ a compiled program
@pytest.fixture(scope="module")
def panel(stan_model):
    """The bundled logistic program with 120 simulated rows, and a label per row ('person', undeclared by the
    program, so it only labels rows): 40 persons of 3 rows each, interleaved."""
    from stan_dp.tools.demo import simulate_logistic

    data = simulate_logistic(120, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)
    data["person"] = [int(i % 40) for i in range(120)]
    data["visit"] = list(range(120))
    return stan_model("logistic"), data


@pytest.mark.stan
def test_stan_program_units_equal_rows_and_several_rows_make_fewer_units(panel, tmp_path):
    """On the native engine: a unit per row ('visit') gives the row-level draws (1e-10); 40 persons of 3 rows
    give a fit whose attrs (and Stan CSV header) record the person unit, n_units = N = 40, and a capped run
    (max_rows_per_unit) runs."""
    from stan_dp.output.stan_csv import read_stan_csv_attrs, to_stan_csv

    model, data = panel
    kwargs = dict(algorithm="penalty", ratio_clip=1.0, epsilon=2.0, delta=1e-3, chains=2, iter_warmup=40,
                  iter_sampling=40, seed=3, show_progress=False, inits={"alpha": 0.0, "beta": [0.0, 0.0, 0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = model.sample(data, **kwargs)
        visits = model.sample(data, privacy_unit="visit", **kwargs)
        persons = model.sample(data, privacy_unit="person", **kwargs)
        capped = model.sample(data, privacy_unit="person", max_rows_per_unit=2, **kwargs)
    assert_allclose(visits.posterior["beta"].values, rows.posterior["beta"].values, rtol=0, atol=1e-10)
    assert visits.attrs["privacy_unit"] == "visit" and visits.attrs["n_units"] == 120
    assert persons.attrs["privacy_unit"] == "person" and persons.attrs["n_units"] == persons.attrs["N"] == 40
    assert "all rows of one person" in persons.attrs["privacy_guarantee"]
    assert capped.attrs["n_units"] == 40 and np.isfinite(capped.posterior["beta"].values).all()
    header = read_stan_csv_attrs(to_stan_csv(persons, tmp_path / "fit.csv")[0])
    assert header["privacy_unit"] == "person" and header["n_units"] == "40"
    assert "substitute all rows of one person" in header["neighbouring_relation"]


@pytest.mark.stan
def test_stan_program_refuses_bad_units_before_the_run(panel, tmp_path, capsys):
    """A modelled variable (y), an unknown name and dp-ssp with a unit are refused in Python; on the command line
    an unknown --privacy-unit exits with status 2, names the variable and writes nothing."""
    from stan_dp.cli import main

    model, data = panel
    kwargs = dict(ratio_clip=1.0, epsilon=2.0, delta=1e-3, chains=1, iter_warmup=5, iter_sampling=5,
                  show_progress=False)
    with pytest.raises(DataError, match="privacy_unit 'y' is used by the program"):
        model.sample(data, algorithm="penalty", privacy_unit="y", **kwargs)
    with pytest.raises(DataError, match="privacy_unit 'persn' is not a variable"):
        model.sample(data, algorithm="penalty", privacy_unit="persn", **kwargs)
    with pytest.raises(ValueError, match="dp-ssp.*privacy unit"):
        model.sample(data, algorithm="dp-ssp", privacy_unit="person", epsilon=1.0, delta=1e-3)
    path, out = tmp_path / "data.json", tmp_path / "fit.nc"
    path.write_text(json.dumps(data))
    status = main(["sample", str(model.stan_file), "--data", str(path), "--algorithm", "penalty", "--epsilon", "2",
                   "--delta", "1e-3", "--option", "ratio_clip=1", "--privacy-unit", "persn", "--output", str(out),
                   "--quiet"])
    assert status == 2 and not out.exists()
    assert "privacy_unit 'persn'" in capsys.readouterr().err


@pytest.mark.stan
def test_stan_program_unit_run_checkpointed_crashed_and_resumed(panel, tmp_path, monkeypatch):
    """A person-unit run (max_rows_per_unit=2) with checkpoints crashes after its second checkpoint write; the
    checkpoint names the unit variable and its cap (never the labels); stan_dp.resume with the same data rebuilds
    the grouping from the data and gives the uninterrupted run's draws and attrs. Labels that make another number
    of units are refused before anything is released; a label array (no name) cannot be checkpointed."""
    import stan_dp
    from stan_dp.phases.checkpoint import CheckpointError, load_checkpoint

    model, data = panel
    run = dict(algorithm="dp-sghmc", grad_clip=6.0, epsilon=2.0, delta=1e-3, chains=2, iter_warmup=30,
               iter_sampling=30, seed=3, show_progress=False, privacy_unit="person", max_rows_per_unit=2,
               inits={"alpha": 0.0, "beta": [0.0, 0.0, 0.0]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = model.sample(data, **run)
        with crash_after_writes(monkeypatch, 2):
            model.sample(data, checkpoint=tmp_path / "ck", checkpoint_every=10, **run)
        context = load_checkpoint(tmp_path / "ck").context
        assert context["privacy_unit"] == "person" and context["max_rows_per_unit"] == 2
        assert not any(isinstance(v, list) and len(v) == len(data["person"]) for v in context.values())
        with pytest.raises(CheckpointError, match="number of units"):
            stan_dp.resume(tmp_path / "ck", data={**data, "person": [i % 30 for i in range(120)]},
                           show_progress=False)
        resumed = stan_dp.resume(tmp_path / "ck", data=data, show_progress=False)
        with pytest.raises(ValueError, match="NAME of an int data variable"):
            model.sample(data, **{**run, "privacy_unit": np.asarray(data["person"])}, checkpoint=tmp_path / "c2")
    assert_allclose(resumed.posterior["beta"].values, full.posterior["beta"].values, rtol=0, atol=0)
    assert resumed.attrs["privacy_unit"] == "person" and resumed.attrs["n_units"] == 40
    assert resumed.attrs["privacy_report"] == full.attrs["privacy_report"] and int(resumed.attrs["resumed"]) == 1


def test_command_line_takes_the_unit_options_for_sample_and_advise():
    """`stan-dp sample` and `stan-dp advise` parse --privacy-unit and --max-rows-per-unit into the keywords of
    sample / advise; without them no keyword is passed."""
    from stan_dp.cli import build_parser
    from stan_dp.run_options import unit_options

    parser = build_parser()
    common = ["m.stan", "--data", "d.json", "--epsilon", "1", "--delta", "1e-6"]
    args = parser.parse_args(["sample", *common, "--output", "f.nc", "--privacy-unit", "person",
                              "--max-rows-per-unit", "8"])
    assert unit_options(args) == {"privacy_unit": "person", "max_rows_per_unit": 8}
    args = parser.parse_args(["advise", *common, "--privacy-unit", "household"])
    assert unit_options(args) == {"privacy_unit": "household"}
    assert unit_options(parser.parse_args(["sample", *common, "--output", "f.nc"])) == {}


def test_the_clipped_count_warning_of_a_unit_run_speaks_of_units():
    """An anchored unit run whose bound clips most units warns with the count of UNITS (the released noisy count
    over the number of units), not of rows."""
    model = LogisticRegressionModel.simulate(n=300, dim=2, seed=3)
    with pytest.warns(UserWarning, match=r"of the 100 units at the anchor"):
        sample_private(model, algorithm="dp-sgld", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=20,
                       iter_sampling=20, seed=1, show_progress=False, grad_clip=0.05, anchor="dp-gd",
                       anchor_steps=10, privacy_unit=np.arange(300) // 3, inits=np.zeros(model.dim))


def test_anchored_unit_plan_scales_the_curvature_bound_by_the_public_rows_per_unit():
    """With max_rows_per_unit = k the anchored plan's default curvature bound is L^2 / (4 k) (a unit's curvature
    is a sum of k rows'), its posterior-scale guess k d / (N L^2) and C = K r sqrt(sum of that guess), all from
    public inputs (N units, k, L, d): the run records them, and the noise of every release is the row rule's
    (only public tuning constants change). Without a cap, or at row level, the rule stays L^2 / 4."""
    model = _logistic()
    L, k, d, n_units = 3.0, 3, model.dim, model.n_rows // 3
    kwargs = dict(algorithm="dp-sgnht", epsilon=3.0, delta=1e-4, chains=2, iter_warmup=20, iter_sampling=20,
                  seed=7, show_progress=False, grad_clip=L, anchor="dp-gd", anchor_steps=10, inits=np.zeros(d))
    labels = np.arange(model.n_rows) // k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        capped = sample_private(model, privacy_unit=labels, max_rows_per_unit=k, **kwargs)
        uncapped = sample_private(model, privacy_unit=labels, **kwargs)
    K = L * L / (4 * k)
    described, plain = (json.loads(fit.attrs["algorithm_options"]) for fit in (capped, uncapped))
    assert described["curvature_clip"] == pytest.approx(K) and described["anchor_rows_per_unit"] == k
    assert capped.attrs["diff_clip"] == pytest.approx(K * 3.0 * math.sqrt(d * k * d / (n_units * L * L)))
    assert f"k = {k}" in capped.attrs["diff_clip_reason"]
    assert plain["curvature_clip"] == pytest.approx(L * L / 4)
    assert "anchor_rows_per_unit" not in plain
    for key in ("anchor_tau_steps", "anchor_tau_gradient", "anchor_gradient_noise_sd", "clipped_count_noise_sd"):
        assert described[key] == plain[key]  # the same noise: only tuning constants differ
    assert capped.attrs["privacy_report"] == uncapped.attrs["privacy_report"]
    lengths = dict(chains=2, iter_warmup=50, iter_sampling=50)
    plan = plan_run(n_units, d, algorithm="auto", epsilon=3.0, delta=1e-4, quiet=True, grad_clip=L,
                    facts=PublicFacts(rows_per_unit=k), **lengths)
    assert plan.anchor is not None and plan.anchor.curvature_clip == pytest.approx(K)
    assert "L^2 / (4 k), k = 3" in plan.auto.evidence
    row = plan_run(n_units, d, algorithm="auto", epsilon=3.0, delta=1e-4, quiet=True, grad_clip=L, **lengths)
    assert row.anchor is not None and row.anchor.curvature_clip == L * L / 4
    assert row.privacy.noise_scale == plan.privacy.noise_scale  # the accounting is the row rule's
