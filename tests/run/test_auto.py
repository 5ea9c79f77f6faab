"""algorithm="auto" (stan_dp.run.auto): the choice uses public quantities only and is recorded in the attrs."""
import numpy as np
import pytest

from stan_dp.run.auto import resolve_auto
from stan_dp.models.reference_models import GaussianMeanModel
from stan_dp.run.pipeline import sample_private


class RowsForbidden:
    """A likelihood whose public shape is known but whose every data method raises."""

    def __init__(self, n_rows=1000, dim=3):
        self.n_rows, self.dim = n_rows, dim

    def __getattr__(self, name):
        raise AssertionError(f"read the likelihood: {name}")


def _choose(**options):
    lik = RowsForbidden()
    return resolve_auto(n_rows=lik.n_rows, dim=lik.dim, epsilon=1.0, delta=1e-5, chains=4, options=options, quiet=True)


def test_auto_reads_no_rows_and_keeps_only_used_bounds():
    """All clip bounds are accepted together; the chosen algorithm keeps the ones it uses, the rest are named."""
    choice = _choose(ratio_clip=2.0, grad_clip=3.0, row_bound=4.0, loglik_bounds=(-5.0, 0.0))
    assert choice.algorithm == "dp-sgnht"
    assert choice.options == {"grad_clip": 3.0, "anchor": "dp-gd"}
    assert choice.dropped == ["loglik_bounds", "ratio_clip", "row_bound"]
    assert "not used: loglik_bounds, ratio_clip, row_bound" in choice.reason
    assert "unused" in choice.evidence


def test_auto_rules_per_bound():
    assert _choose(row_bound=4.0).options == {"ratio_clip": 4.0}
    assert _choose(ratio_clip=2.0, row_bound=4.0).options == {"ratio_clip": 2.0}
    only_grad = _choose(grad_clip=3.0)
    assert only_grad.algorithm == "dp-sgnht" and only_grad.options == {"grad_clip": 3.0, "anchor": "dp-gd"}
    assert "anchored" in only_grad.evidence and "L^2 / 4" in only_grad.evidence  # says what the default C assumes
    assert _choose(grad_clip=3.0, anchor="none").options == {"grad_clip": 3.0}
    tuned = _choose(grad_clip=3.0, curvature_clip=2.0, anchor_share=0.3)
    assert tuned.options == {"grad_clip": 3.0, "anchor": "dp-gd", "curvature_clip": 2.0, "anchor_share": 0.3}
    assert "L^2 / 4" not in tuned.evidence
    assert "anchor" not in _choose(ratio_clip=2.0).options  # the anchor comes with a gradient bound only
    with pytest.raises(ValueError, match="got only loglik_bounds"):
        _choose(loglik_bounds=(-4.0, 0.0))
    with pytest.raises(ValueError, match="needs a public bound .* Give grad_clip=L"):
        _choose()
    with pytest.raises(ValueError, match="does not take leapfrog_steps.*the anchor options"):
        _choose(ratio_clip=1.0, leapfrog_steps=3)
    warm = _choose(grad_clip=3.0, warm_start="dp-gd")  # a warm start sets the starts: no anchor added
    assert warm.options == {"grad_clip": 3.0, "warm_start": "dp-gd"} and "not anchored" in warm.evidence
    assert "without an anchor" in warm.reason and "dp-gd warm start you asked for" in warm.reason


@pytest.mark.parametrize("options", [
    {"grad_clip": 2.5}, {"ratio_clip": 2.5}, {"row_bound": 2.0}, {"grad_clip": 2.5, "ratio_clip": 1.0},
    {"grad_clip": 2.5, "anchor": "none"},
])
def test_auto_reason_is_one_plain_sentence(options):
    """The printed reason is one short sentence in plain words: it names the algorithm and the bound that decided,
    and none of the internal terms (design notes, battery cells, formulas, benchmark paths); those stay in the
    evidence (attrs ``auto_evidence``)."""
    choice = _choose(**options)
    reason = choice.reason
    assert reason.endswith(".") and reason.count(". ") == 0 and len(reason) < 240, reason
    for internal in ("4b", "battery", "^2", "G~", "benchmarks/", "N=", "epsilon="):
        assert internal not in reason, (internal, reason)
    used = "grad_clip" if "grad_clip" in options else ("ratio_clip" if "ratio_clip" in options else "row_bound")
    assert f"{used} = {options[used]:g}" in reason
    assert "N=1000" in choice.evidence


def test_auto_check_refuses_before_any_row():
    """check_auto_options (run by the CLI before compiling and by DPStanModel.sample before reading the data)
    refuses a bad bound value and a missing bound from the options alone."""
    from stan_dp.run.auto import check_auto_options

    with pytest.raises(ValueError, match="'grad_clip' of algorithm 'auto' must be a finite number > 0"):
        check_auto_options({"grad_clip": -1.0})
    with pytest.raises(ValueError, match=r"loglik_bounds.*a < b"):
        check_auto_options({"grad_clip": 1.0, "loglik_bounds": (0.0, -1.0)})
    with pytest.raises(ValueError, match="never from the private rows"):
        check_auto_options({})
    check_auto_options({"grad_clip": 2.5})  # fine


@pytest.mark.parametrize("bounds, n_rows, epsilon, expected", [
    ({"ratio_clip": 1.0}, 1000, 1.0, "penalty"),
    pytest.param({"grad_clip": 2.5}, 1000, 3.0, "dp-sgnht", marks=pytest.mark.slow),  # its calibration: ~25 s
])
def test_auto_choice_happens_before_any_row_is_read(monkeypatch, bounds, n_rows, epsilon, expected):
    """sample_private resolves 'auto' before touching the likelihood's rows: with a likelihood whose row methods
    raise, the choice is made (penalty MH, or the anchored DP-SGNHT with dp-laplace considered and
    not chosen) and the first failure comes from the run that follows (the kernel's first step, or the anchor's first
    prior gradient), never from the choice, which is complete (returned) by then."""
    import stan_dp.run.auto as auto_mod

    calls, choices = [], []
    real = auto_mod.resolve_auto

    def spy(**kw):
        calls.append(kw)
        choices.append(real(**kw))
        return choices[-1]

    monkeypatch.setattr(auto_mod, "resolve_auto", spy)
    with pytest.raises(AssertionError, match="read the likelihood: "):  # the run's first read, after the choice
        sample_private(RowsForbidden(n_rows=n_rows), algorithm="auto", epsilon=epsilon, delta=0.1 / n_rows,
                       chains=1, iter_warmup=0, iter_sampling=1, seed=0, show_progress=False,
                       inits=np.zeros((1, 3)), **bounds)
    assert len(calls) == 1 and calls[0]["n_rows"] == n_rows
    assert choices[0].algorithm == expected


def test_auto_records_choice_in_attrs(capsys):
    model = GaussianMeanModel.simulate(n=500, dim=2, seed=0)
    fit = sample_private(model, algorithm="auto", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=True, ratio_clip=3.0)
    assert fit.attrs["auto_choice"] == "penalty"
    assert "ratio_clip = 3" in fit.attrs["auto_reason"] and "ratio_clip given" in fit.attrs["auto_evidence"]
    assert fit.attrs["algorithm"] == "penalty"
    assert "auto: penalty" in capsys.readouterr().err


@pytest.mark.parametrize("bounds, expected", [
    ({"grad_clip": 4.0}, "dp-sgnht"),
    ({"grad_clip": 4.0, "loglik_bounds": (-30.0, 0.0), "ratio_clip": 2.0}, "dp-sgnht"),
])
def test_auto_runs_its_choice_end_to_end(bounds, expected):
    """auto with gradient bounds (alone or with the others) runs through sample_private on one budget."""
    model = GaussianMeanModel.simulate(n=400, dim=2, seed=0)
    fit = sample_private(model, algorithm="auto", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=False, **bounds)
    assert fit.attrs["auto_choice"] == expected
    assert fit.attrs["epsilon"] == pytest.approx(5.0)


@pytest.mark.parametrize("n_rows", [500, 10_000, 1_000_000])
@pytest.mark.parametrize("epsilon", [0.5, 3.0, 100.0])
def test_auto_considers_dp_laplace_and_does_not_choose_it(n_rows, epsilon):
    """The battery put dp-laplace behind the anchored kernel in every cell measured (stan_dp.run.auto), so with
    grad_clip auto keeps the anchored DP-SGNHT across the public inputs (N, epsilon; dp-laplace's public noise
    ratio 16 sqrt(d) tau_F / N spans far beyond the measured 0.0003-0.075 here) and says why in its reason;
    without grad_clip dp-laplace is not a candidate and the reason does not mention it."""
    from stan_dp.run.auto import LAPLACE_NOT_CHOSEN

    choice = resolve_auto(n_rows=n_rows, dim=4, epsilon=epsilon, delta=0.1 / n_rows, chains=4,
                          options={"grad_clip": 2.5, "ratio_clip": 2.5}, quiet=True)
    assert choice.algorithm == "dp-sgnht" and choice.options["anchor"] == "dp-gd"
    assert LAPLACE_NOT_CHOSEN in choice.evidence
    assert "dp-laplace" not in _choose(ratio_clip=2.0).evidence


def _logistic_bounds(columns: int = 12):
    """Derived bounds of a logistic program with many bounded vector covariates (a long source in words)."""
    from stan_dp.stan.glm_program import row_bounds

    names = [f"covariate_number_{j}" for j in range(columns)]
    data = "\n".join(f"  vector<lower=-2, upper=2>[N] {n};" for n in names)
    mean = " + ".join(f"b[{j + 2}] * {n}" for j, n in enumerate(names))
    return row_bounds(f"data {{\n  int<lower=0> N;\n{data}\n  array[N] int y;\n}}\nparameters {{\n"
                      f"  vector[{columns + 1}] b;\n}}\nmodel {{\n  y ~ bernoulli_logit(b[1] + {mean});\n}}\n")


@pytest.mark.parametrize("case", ["grad_clip", "ratio_clip", "row_bound", "derived", "derived unit", "dp-ssp"])
def test_auto_says_its_choice_in_one_short_line_and_keeps_the_detail(case, capsys):
    """What auto prints on stderr is one line of at most 200 characters (the algorithm, the bound it runs with and
    where that came from, and where the full reason is), for a given bound, a bound derived from a program with a
    long list of covariates (with and without a privacy unit), and dp-ssp; the full reason, with the price in
    advance where there is one, is longer and is kept for the attrs (auto_reason) and `stan-dp summary`."""
    from stan_dp.models.reference_models import LinearRegressionModel
    from stan_dp.run.auto import SHORT_LINE_MAX
    from stan_dp.run.plan import PublicFacts, plan_run
    from stan_dp.stan.glm_program import unit_row_bounds

    if case == "dp-ssp":
        rng = np.random.default_rng(0)
        x = rng.uniform(-1.5, 1.5, size=(300, 1))
        model = LinearRegressionModel(x, 0.3 + 0.5 * x[:, 0] + rng.standard_normal(300), prior_sd=10.0,
                                      sigma_prior_sd=10.0)
        plan = plan_run(300, model.dim, algorithm="auto", epsilon=1.0, delta=1e-5, chains=4, quiet=False,
                        facts=PublicFacts(linear=model.linear_spec), x_bounds=(-2, 2), y_bounds=(-4, 4))
        choice = plan.auto
    else:
        bounds = _logistic_bounds()
        options = {"derived": {}, "derived unit": {}}.get(case, {case: 2.5})
        if case == "derived unit":
            bounds = unit_row_bounds(bounds, "household_of_the_respondent", 12)
        choice = resolve_auto(n_rows=5000, dim=13, epsilon=1.0, delta=1e-6, chains=4, options=options, quiet=False,
                              row_bounds=bounds, rows_per_unit=12 if case == "derived unit" else None)
    lines = capsys.readouterr().err.splitlines()
    assert lines == [choice.short] and len(lines[0]) <= SHORT_LINE_MAX, lines
    if lines[0] != f"auto: {choice.reason}":  # a reason that does not fit: what runs, and where the reason is
        assert lines[0].startswith("auto: ") and "fit.attrs['auto_reason']" in lines[0]
        assert "stan-dp summary" in lines[0] and len(choice.reason) > SHORT_LINE_MAX
    if case.startswith("derived"):
        assert "from the declared bounds" in choice.reason and "price in advance" in choice.reason
