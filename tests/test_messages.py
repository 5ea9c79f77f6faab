"""Messages a new user reads: each says what is wrong or what happened in plain words, once, and shows what it
promises (names suggested for typos, full tables, titles without repetition)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from stan_dp.model import no_rows_message
from stan_dp.output.arviz_compat import fit_from_dict
from stan_dp.output.compare import _title, compare
from stan_dp.stan.data import DataError, Declaration, split_rows
from stan_dp.suggest import closest


def test_missing_data_name_suggests_the_one_that_differs_in_case():
    """A program declaring y with data holding Y: the error names y as missing and suggests it for Y."""
    declarations = [Declaration("N", "int<lower=0>", None, 0), Declaration("y", "vector[N]", "N", 1)]
    with pytest.raises(DataError, match=r"y declared by the program are missing.*'Y' \(did you mean y\?\)"):
        split_rows(declarations, {"N": 3, "Y": np.zeros(3)}, rows="N")
    assert closest("Income", ["income", "age"]) == "income" and closest("zzz", ["income"]) is None


def test_no_rows_message_blames_the_declaration_only_when_it_is_the_cause():
    """N declared int<lower=1>: the message says so and how to declare it. N declared int<lower=0> and the program
    still fails with no rows: the first line carries Stan's own message (it names the cause) and the user is not
    told to declare what they declared."""
    blamed = no_rows_message("N", "int<lower=1>", "N is 0, but must be greater than or equal to 1")
    assert "is declared 'int<lower=1> N'" in blamed and "Declare it as 'int<lower=0> N;'" in blamed
    pooled = no_rows_message("N", "int<lower=0>", "Exception: sd: vector has size 0 (in 'm.stan', line 8)")
    first, second = pooled.split("\n")
    assert "sd: vector has size 0" in first and "line 8" in first
    assert "int<lower=0>" not in pooled and "Declare" not in pooled and "summarises the rows" in second


def _fits():
    rng = np.random.default_rng(1)
    fit = fit_from_dict({"posterior": {"alpha": rng.normal(size=(2, 200)), "beta": rng.normal(size=(2, 200, 3))}},
                        attrs={"epsilon": 1.0, "delta": 1e-6, "private": 1, "algorithm": "dp-sgnht",
                               "auto_choice": "dp-sgnht"})
    ref = fit_from_dict({"posterior": {"alpha": rng.normal(size=(2, 200)), "beta": rng.normal(size=(2, 200, 3))}},
                        attrs={"private": 0})
    return fit, ref


def test_compare_table_prints_every_column_whatever_the_display_options():
    """print(compare(...)) in Python shows every column (mean_diff_sd among them) and no '...', even with pandas'
    display limited to 3 columns and 40 characters; the table is still a DataFrame with its attrs."""
    fit, ref = _fits()
    table = compare(fit, ref)
    with pd.option_context("display.max_columns", 3, "display.width", 40):
        text, shown = str(table), repr(table)
    assert "..." not in text and text == shown
    for column in table.columns:
        assert column in text
    assert isinstance(table, pd.DataFrame) and "mmd" in table.attrs
    assert "..." not in repr(table.round(3))


def test_plot_title_names_the_algorithm_once():
    """A fit chosen by auto is titled 'auto: dp-sgnht', never 'dp-sgnht (dp-sgnht)'."""
    fit, _ = _fits()
    title = _title(fit)
    assert "auto: dp-sgnht" in title and "dp-sgnht (dp-sgnht)" not in title and title.count("dp-sgnht") == 1


@pytest.mark.slow
@pytest.mark.stan
def test_the_demo_uses_auto_converges_and_prints_no_package_warning(tmp_path, capsys):
    """`stan-dp demo` runs the default algorithm (auto: the anchored DP-SGNHT), its chains and released draws reach
    R-hat <= 1.05, it prints the noise-aware intervals beside the reference's and what each step does, and no
    warning of the package reaches the user."""
    import warnings

    from stan_dp.cli import main

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["demo", "--output-dir", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "auto: DP-SGNHT" in captured.err
    assert not [w for w in caught if "stan_dp" in str(w.filename) or issubclass(w.category, UserWarning)]
    for step in ("Step 1:", "Step 2:", "Step 3:", "Step 4:", "90% intervals"):
        assert step in out, step
    for label in ("chains", "released"):
        line = next(line for line in out.splitlines() if line.strip().startswith(label) and "max R-hat" in line)
        assert float(line.split("max R-hat")[1].split(",")[0]) <= 1.05, line
    assert (tmp_path / "marginals.png").exists() and (tmp_path / "private_fit.nc").exists()


@pytest.mark.stan
def test_a_missing_bound_is_refused_before_any_row_is_read(stan_model, monkeypatch):
    """DPStanModel.sample with the default algorithm (auto) and no bound, or penalty without ratio_clip, raises
    the error naming the option to give before the data are split into rows."""
    from stan_dp.model import DPStanModel

    model = stan_model("logistic")

    def no_rows(*args, **kwargs):
        raise AssertionError("the rows were read")

    monkeypatch.setattr(DPStanModel, "row_likelihood", no_rows)
    with pytest.raises(ValueError, match="Give grad_clip=L"):
        model.sample({"N": 1}, epsilon=1.0, delta=1e-6)
    with pytest.raises(ValueError, match="'ratio_clip' of algorithm 'penalty' is required"):
        model.sample({"N": 1}, algorithm="penalty", epsilon=1.0, delta=1e-6)
