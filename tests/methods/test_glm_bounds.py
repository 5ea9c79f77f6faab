"""Bounds from the program text for regressions (stan_dp.stan.glm_program), auto's use of them, and the price in
advance of a logistic program (stan_dp.methods.dp_glm.glm_price). Pure Python on program text, except two stanc-only checks
(no C++ compile)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from stan_dp.privacy import gaussian_mu
from stan_dp.run.auto import NO_BOUND_ERROR, check_auto_options, resolve_auto
from stan_dp.methods.dp_glm.glm_price import glm_floor, one_shot_noise_sd
from stan_dp.stan.glm_program import NotGLM, program_row_bounds, recognise_glm_program, row_bounds

ROOT = Path(__file__).resolve().parents[2]

LOGISTIC = """
data {
  int<lower=0> N;
  int<lower=0> K;
  matrix<lower=-2, upper=3>[N, K] x;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real alpha;
  vector[K] beta;
}
model {
  alpha ~ normal(0, 5);
  y ~ bernoulli_logit(alpha + x * beta);
}
"""

SCALARS = """
data {
  int<lower=0> N;
  vector<lower=0, upper=1>[N] a;
  vector<lower=-4, upper=2>[N] b;
  array[N] int y;
}
parameters {
  vector[3] c;
}
model {
  y ~ bernoulli_logit(c[1] + c[2] * a + b * c[3]);
}
"""


def test_recognises_the_logistic_and_poisson_forms():
    """The three logistic forms and the two Poisson forms are recognised with their family, covariates,
    intercept and declared bounds; a normal program, a real outcome and a transformed covariate are refused with
    the reason in words."""
    glm = LOGISTIC.replace("y ~ bernoulli_logit(alpha + x * beta);", "y ~ bernoulli_logit_glm(x, alpha, beta);")
    lpmf = LOGISTIC.replace("y ~ bernoulli_logit(alpha + x * beta);",
                            "target += bernoulli_logit_glm_lpmf(y | x, alpha, beta);")
    for text in (LOGISTIC, glm, lpmf):
        program = recognise_glm_program(text)
        assert (program.family, program.covariates, program.intercept, program.slopes) == (
            "logistic", (("x", "matrix"),), ("alpha",), ("beta",))
        assert program.bounds == {"y": (0.0, 1.0), "x": (-2.0, 3.0)}
    assert recognise_glm_program(SCALARS).slopes == ("c[2]", "c[3]")
    for text in (LOGISTIC.replace("bernoulli_logit", "poisson_log"), glm.replace("bernoulli_logit", "poisson_log")):
        assert recognise_glm_program(text).family == "poisson"
    normal = LOGISTIC.replace("array[N] int<lower=0, upper=1> y", "vector[N] y").replace(
        "bernoulli_logit(alpha + x * beta)", "normal(alpha + x * beta, 1)")
    with pytest.raises(NotGLM, match="normal, not bernoulli_logit"):
        recognise_glm_program(normal)
    with pytest.raises(NotGLM, match="must be a data array"):
        recognise_glm_program(LOGISTIC.replace("array[N] int<lower=0, upper=1> y", "vector[N] y"))
    with pytest.raises(NotGLM, match="transformed data"):
        recognise_glm_program(LOGISTIC.replace("parameters {", "transformed data {\n  matrix[N, K] x2 = x;\n}\n"
                                               "parameters {", 1))


def test_derived_bounds_of_a_known_box():
    """L = max ||(1, x)|| over the declared box and K = L^2 / 4: sqrt(1 + 3 * 3^2) for three columns in [-2, 3]
    with an intercept (the column count from the public integer K), sqrt(1 + 1 + 16) for two vector covariates,
    sqrt(17) without an intercept, sqrt(1 + 16) when a slope is a number (it takes no gradient)."""
    bounds = row_bounds(LOGISTIC, sizes={"K": 3})
    assert bounds.derivable and bounds.family == "logistic" and bounds.coefficients == 4
    assert bounds.grad_clip == pytest.approx(math.sqrt(28.0))
    assert bounds.curvature_clip == pytest.approx(7.0)
    assert bounds.reason() == "grad_clip = 5.292 from the declared bounds of x (exact for a logistic row)"
    early = row_bounds(LOGISTIC)  # before the data: derivable, value not known yet
    assert early.derivable and early.grad_clip is None
    assert row_bounds(SCALARS).grad_clip == pytest.approx(math.sqrt(18.0))
    assert row_bounds(SCALARS.replace("c[1] + ", "")).grad_clip == pytest.approx(math.sqrt(17.0))
    assert row_bounds(SCALARS.replace("c[2] * a", "0.5 * a")).grad_clip == pytest.approx(math.sqrt(17.0))


def test_refusals_name_the_variable_and_what_to_give():
    """Nothing is derived (and the note says why, naming the variable) for an unbounded covariate, a
    constrained or repeated coefficient, and a Poisson row (outcome cap and linear-predictor bound); a normal
    program says a residual scale is assumed; auto's refusal carries the note, and a derivable program needs no
    grad_clip."""
    unbounded = row_bounds(LOGISTIC.replace("<lower=-2, upper=3>", ""), sizes={"K": 3})
    assert not unbounded.derivable and "no literal bounds are declared on x" in unbounded.note
    assert "matrix<lower=-3, upper=3>[N, K] x;" in unbounded.note
    constrained = row_bounds(LOGISTIC.replace("vector[K] beta", "vector<lower=0>[K] beta"))
    assert not constrained.derivable and "beta is declared with a constraint" in constrained.note
    assert "appears twice" in row_bounds(SCALARS.replace("c[1] +", "c[2] +")).note
    poisson = row_bounds(LOGISTIC.replace("bernoulli_logit", "poisson_log"), sizes={"K": 3})
    assert not poisson.derivable and poisson.grad_clip is None
    assert "cap on the outcome (y is declared with upper = 1)" in poisson.note and "eta_max" in poisson.note
    assert "max ||(1, x)|| = 5.292" in poisson.note
    normal = row_bounds("""
data {
  int<lower=0> N;
  vector<lower=-1, upper=1>[N] x;
  vector[N] y;
}
parameters {
  vector[2] b;
  real<lower=0> sigma;
}
model {
  y ~ normal(b[1] + b[2] * x, sigma);
}
""")
    assert normal.family == "normal" and "residual scale" in normal.note
    with pytest.raises(ValueError, match="no literal bounds are declared on x") as refused:
        check_auto_options({}, unbounded)
    assert str(refused.value).startswith(NO_BOUND_ERROR)
    with pytest.raises(ValueError, match="eta_max"):
        check_auto_options({}, poisson)
    check_auto_options({}, row_bounds(LOGISTIC))  # derivable: no bound needed


def test_auto_uses_the_derived_bound_and_keeps_a_given_one():
    """Without grad_clip, auto runs with the derived L and says where it came from (reason, bounds_source) with
    the price in advance; a given grad_clip is kept (and the derived value named); a Poisson program's reason
    says its curvature bound is an assumption and carries no price."""
    bounds = row_bounds(LOGISTIC, sizes={"K": 3})
    choice = resolve_auto(n_rows=5000, dim=4, epsilon=1.0, delta=1e-6, chains=4, options={}, quiet=True,
                          row_bounds=bounds)
    assert choice.algorithm == "dp-sgnht" and choice.options["grad_clip"] == pytest.approx(math.sqrt(28.0))
    assert "grad_clip = 5.292 from the declared bounds of x (exact for a logistic row)" in choice.reason
    assert choice.bounds_source == "the declared bounds of x"
    assert "price in advance: from the bounds alone" in choice.reason and "at least" in choice.price
    given = resolve_auto(n_rows=5000, dim=4, epsilon=1.0, delta=1e-6, chains=4, options={"grad_clip": 4.0},
                         quiet=True, row_bounds=bounds)
    assert given.options["grad_clip"] == 4.0 and "you gave" in given.reason
    assert given.bounds_source == "grad_clip option (the declared bounds would give 5.292)"
    poisson = resolve_auto(n_rows=5000, dim=4, epsilon=1.0, delta=1e-6, chains=4, options={"grad_clip": 4.0},
                           quiet=True, row_bounds=row_bounds(LOGISTIC.replace("bernoulli_logit", "poisson_log")))
    assert "is an assumption for a poisson row" in poisson.reason and not poisson.price


def test_price_formula_on_a_hand_computed_case():
    """From the bounds alone: s = 2 L / mu, r = s / sqrt(N K) = 4 / (mu sqrt N) for K = L^2 / 4 (L cancels),
    the max error over one coordinate the median of |N(0, r^2)| (0.6745 r, within the Monte Carlo error of 4,000
    draws: 5 %), width sqrt(1 + r^2), said only from 1.5 up, and the sentence says it is a lower bound first and
    where a realistic figure comes from; with a covariance diag(a, b), r_j = s sqrt(Sigma_jj)."""
    n, eps, delta = 1000, 1.0, 1e-5
    mu = gaussian_mu(eps, delta)
    assert one_shot_noise_sd(3.0, eps, delta) == pytest.approx(6.0 / mu)
    for L in (2.0, 6.0):
        floor = glm_floor(n, 1, L, epsilon=eps, delta=delta)
        r = 4.0 / (mu * math.sqrt(n))
        assert floor.per_coordinate[0] == pytest.approx(r)
        assert floor.max_error == pytest.approx(0.6745 * r, rel=0.05)
        assert floor.width_ratio == pytest.approx(math.sqrt(1.0 + r * r))
        assert floor.lower_bound and "at least" in floor.sentence()
        # a lower bound on the width ratio this close to 1 says nothing a user can act on: left out
        assert floor.width_ratio < 1.5 and "times wider" not in floor.sentence()
    few = glm_floor(10, 1, 2.0, epsilon=eps, delta=delta)  # r = 4 / (mu sqrt 10): a width ratio worth saying
    assert few.width_ratio > 1.5 and f"at least about {few.width_ratio:.3g} times wider" in few.sentence()
    assert few.sentence().startswith("from the bounds alone") and "stan-dp advise" in few.sentence()
    sigma = np.diag([0.04, 0.01])
    sharp = glm_floor(n, 2, 3.0, epsilon=eps, delta=delta, covariance=sigma)
    s = 6.0 / mu
    assert sharp.per_coordinate == pytest.approx((s * 0.2, s * 0.1))
    assert not sharp.lower_bound and "at least" not in sharp.sentence()


def test_program_row_bounds_reads_stanc_canonical_text(tmp_path, monkeypatch):
    """stanc's canonical printing of a bundled logistic program (no declared bounds; given by a relative path, as
    the command line passes it) and of a bounded one is read the same way as hand-written text (stanc only, no
    compile)."""
    monkeypatch.chdir(ROOT)
    bundled = program_row_bounds("stan_models/logistic.stan")
    assert bundled.family == "logistic" and not bundled.derivable and "declared on x" in bundled.note
    path = tmp_path / "bounded.stan"
    path.write_text(LOGISTIC)
    derived = program_row_bounds(path, sizes={"K": 3})
    assert derived.derivable and derived.grad_clip == pytest.approx(math.sqrt(28.0))


def test_advise_prices_a_logistic_program_with_public_data():
    """advise's logistic price uses the public data's Laplace covariance (equal to glm_floor with it) beside the
    public-only lower bound, and the Advice prints it with a floor row in its table."""
    from stan_dp.models.numpy_reference import laplace
    from stan_dp.models.reference_models import LogisticRegressionModel
    from stan_dp.tools import advise as adv

    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 3, size=(400, 2))
    y = (rng.uniform(size=400) < 1 / (1 + np.exp(-(0.2 + x @ np.array([0.5, -0.3]))))).astype(int)
    model = LogisticRegressionModel(x, y, prior_sd=2.5)
    bounds = row_bounds(LOGISTIC, sizes={"K": 2})
    public, bound = adv._logistic_price(model, bounds, bounds.grad_clip, epsilon=3.0, delta=1e-5)
    _, cov = laplace(model)
    assert public.max_error == pytest.approx(glm_floor(400, 3, bounds.grad_clip, epsilon=3.0, delta=1e-5,
                                                       covariance=cov).max_error)
    assert bound.lower_bound and bound.max_error < public.max_error
    assert adv._logistic_price(model, None, 3.0, epsilon=3.0, delta=1e-5) is None
    advice = adv.Advice(rows=[], recommended="none", auto_choice="dp-sgnht", clip_fractions={}, price="x",
                        price_label="logistic", floor=(public.max_error, public.width_ratio))
    assert "logistic price in advance: x" in str(advice) and "| floor: one release at the mode |" in advice.table()


def test_advise_derives_grad_clip_from_the_program_when_none_is_given():
    """advise on a public likelihood that carries derivable row bounds (as DPStanModel.row_likelihood attaches
    them) needs no clip bound: the candidates run with the derived L, auto resolves (DP-SGNHT with the derived
    bound), and the Advice carries the logistic price and the floor row; without the bounds the call is refused."""
    from stan_dp.models.numpy_reference import laplace
    from stan_dp.models.reference_models import LogisticRegressionModel
    from stan_dp.tools import advise as adv

    rng = np.random.default_rng(4)
    x = rng.uniform(-2, 3, size=(300, 1))
    y = (rng.uniform(size=300) < 1 / (1 + np.exp(-(0.2 + 0.5 * x[:, 0])))).astype(int)
    model = LogisticRegressionModel(x, y, prior_sd=2.5)
    with pytest.raises(ValueError, match="at least one public clip bound"):
        adv.advise(model, epsilon=3.0, delta=1e-5, algorithms=["dp-laplace"], include_auto=False)
    model.row_bounds = row_bounds(LOGISTIC, sizes={"K": 1})
    mode, cov = laplace(model)
    reference = np.random.default_rng(0).multivariate_normal(mode, cov, size=(2, 200))
    advice = adv.advise(model, epsilon=3.0, delta=1e-5, algorithms=["dp-laplace"], include_auto=False,
                        reference=reference, iter_sampling=100)
    assert advice.rows[0]["options"]["grad_clip"] == pytest.approx(math.sqrt(10.0))
    assert advice.auto_choice == "dp-sgnht"
    assert advice.price_label == "logistic" and advice.floor is not None
    assert "from the bounds alone (no data)" in advice.price


#: a logistic program that declares a privacy unit's labels (one per row) and never reads them
WITH_ID = LOGISTIC.replace("  array[N] int<lower=0, upper=1> y;\n",
                           "  array[N] int<lower=0, upper=1> y;\n  array[N] int<lower=1> person;\n")


#: the bundled bounded linear program without its comments (the recognisers read stanc's comment-free printing)
LINEAR_BOUNDED = "".join(line for line in (ROOT / "stan_models" / "linear_bounded.stan").read_text()
                         .splitlines(keepends=True) if not line.startswith("//"))


def test_an_unused_id_keeps_the_derived_bound_at_row_level():
    """A row variable the program never reads (a unit's id) changes no row's likelihood: the logistic bound is
    still derived, and a linear program with such an id is still dp-ssp's; an id that a generated quantity reads is
    modelled data, and then nothing is derived (the reason names it)."""
    from stan_dp.stan.linear_program import recognise_linear_program

    bounds = row_bounds(WITH_ID, sizes={"K": 3})
    assert bounds.derivable and bounds.grad_clip == pytest.approx(math.sqrt(28.0))
    linear = (LINEAR_BOUNDED.replace("  vector<lower=-6, upper=6>[N] y;\n",
                                     "  vector<lower=-6, upper=6>[N] y;\n  array[N] int person;\n"))
    assert recognise_linear_program(linear).outcome == "y"
    used = WITH_ID + "generated quantities {\n  int first = person[1];\n}\n"
    with pytest.raises(NotGLM, match="the row variables person are not part of the regression"):
        recognise_glm_program(used)
    assert row_bounds(used) is None




def test_a_unit_bound_is_k_times_the_row_bound_or_the_refusal_names_the_unit():
    """With privacy_unit and max_rows_per_unit = k, one unit's gradient is a sum of at most k row gradients: the
    derived bound is k L (curvature k K), said as exact for a unit of at most k rows, and auto runs with it and the
    per-unit price; without k nothing is derived and the refusal names the unit and max_rows_per_unit and never
    says the program needs no bound. A refusal for a program stan-dp does not recognise says what would be
    recognised."""
    from stan_dp.run.auto import DERIVED_HINT
    from stan_dp.stan.glm_program import unit_row_bounds

    row = row_bounds(WITH_ID, sizes={"K": 3})
    three = unit_row_bounds(row, "person", 3)
    assert three.derivable and three.grad_clip == pytest.approx(3 * math.sqrt(28.0))
    assert three.curvature_clip == pytest.approx(3 * 7.0)
    assert three.reason().endswith("(exact for a unit of at most 3 logistic rows)")
    assert "max_rows_per_unit = 3" in three.reason()
    choice = resolve_auto(n_rows=500, dim=4, epsilon=1.0, delta=1e-6, chains=4, options={}, quiet=True,
                          rows_per_unit=3, row_bounds=three)
    assert choice.options["grad_clip"] == pytest.approx(3 * math.sqrt(28.0)) and choice.price
    uncapped = unit_row_bounds(row, "person", None)
    assert not uncapped.derivable and uncapped.grad_clip is None
    with pytest.raises(ValueError) as refused:
        check_auto_options({}, uncapped)
    text = str(refused.value)
    assert "privacy_unit 'person'" in text and "max_rows_per_unit" in text and "5.292" in text
    assert "needs none" not in text and DERIVED_HINT not in text
    assert unit_row_bounds(row, None, None) is row and unit_row_bounds(None, "person", 3) is None
    with pytest.raises(ValueError) as unknown:
        check_auto_options({}, None)
    assert str(unknown.value) == f"{NO_BOUND_ERROR} {DERIVED_HINT}"


def test_the_command_line_derives_a_unit_bound_or_names_what_to_give(tmp_path, capsys):
    """stan-dp sample refuses, before compiling, a unit run of a bounded logistic program without
    --max-rows-per-unit and names the unit and the flag; the same program at row level, and with the cap, passes
    the check (stanc only, no C++ compile)."""
    import argparse
    import json

    from stan_dp.cli import _preflight_sample, main

    program = tmp_path / "panel.stan"
    program.write_text(WITH_ID)
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"N": 2, "K": 3, "x": [[0, 0, 0], [1, 1, 1]], "y": [0, 1], "person": [1, 1]}))
    base = ["sample", str(program), "--data", str(data), "--epsilon", "1", "--delta", "1e-6",
            "--output", str(tmp_path / "fit.nc"), "--privacy-unit", "person"]
    assert main(base) == 2
    err = capsys.readouterr().err
    assert "privacy_unit 'person'" in err and "max_rows_per_unit" in err and "needs none" not in err

    def args(*extra: str) -> argparse.Namespace:
        namespace = argparse.Namespace(model=str(program), data=str(data), row_data=None, output=str(tmp_path / "f.nc"),
                                       csv=None, epsilon=1.0, delta=1e-6, chains=4, iter_warmup=None,
                                       iter_sampling=None, algorithm="auto", rows="N", inits=None,
                                       privacy_unit=None, max_rows_per_unit=None)
        for key, value in zip(extra[::2], extra[1::2]):
            setattr(namespace, key, value)
        return namespace

    _preflight_sample(args(), {})  # row level: the derived bound, no option needed
    _preflight_sample(args("privacy_unit", "person", "max_rows_per_unit", 4), {})


@pytest.mark.slow
@pytest.mark.stan
def test_a_compiled_program_with_an_id_derives_the_row_and_the_unit_bound(tmp_path):
    """End to end on a compiled logistic program with declared covariate bounds and an unused person id: at row level
    (400 rows) auto releases once (dp-glm) with the box from the declared bounds, a score sensitivity of 2 sqrt(3)
    in box coordinates, and forecasts the kernels with the derived L = sqrt(1 + 2 * 3^2); with
    privacy_unit='person' and max_rows_per_unit=4 (100 units) the release's sensitivities are 4 times the row's
    and the kernels' forecast uses 4 L; without the cap it is refused before any row is read, naming the unit and
    max_rows_per_unit."""
    import json
    import warnings

    from stan_dp import DPStanModel

    program = tmp_path / "panel_bounded.stan"
    program.write_text(WITH_ID)
    rng = np.random.default_rng(0)
    n = 400
    x = rng.uniform(-2, 3, size=(n, 2))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(0.2 + x @ np.array([0.5, -0.3]))))).astype(int)
    data = {"N": n, "K": 2, "x": x.tolist(), "y": y.tolist(), "person": (np.arange(n) // 4 + 1).tolist()}
    model = DPStanModel(program, show_progress=False)
    run = dict(epsilon=5.0, delta=1e-6, chains=2, iter_warmup=50, iter_sampling=50, seed=1, show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row = model.sample(data, **run)
        unit = model.sample(data, privacy_unit="person", max_rows_per_unit=4, **run)
    import re

    options_row, options_unit = (json.loads(f.attrs["algorithm_options"]) for f in (row, unit))
    assert row.attrs["auto_choice"] == unit.attrs["auto_choice"] == "dp-glm"
    assert options_row["bounds_source"] == "declared bounds of the covariates"
    assert options_row["score_sensitivity"] == pytest.approx(2 * math.sqrt(3))
    assert options_unit["score_sensitivity"] == pytest.approx(4 * options_row["score_sensitivity"])
    assert options_unit["curvature_sensitivity"] == pytest.approx(4 * options_row["curvature_sensitivity"])
    # the kernels were forecast with a derived bound (L per row, 4 L per person): without one the reason says that
    # no kernel has a gradient bound; the person-level forecast is far below the row-level one
    draws = [float(re.search(r"would reach about ([0-9.e+]+) effective draws", f.attrs["auto_reason"]).group(1))
             for f in (row, unit)]
    assert draws[1] < draws[0] / 4
    with pytest.raises(ValueError, match="privacy_unit 'person'.*max_rows_per_unit"):
        model.sample(data, privacy_unit="person", **run)
