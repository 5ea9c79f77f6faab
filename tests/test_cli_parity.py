"""CLI parity: --verbose/--quiet anywhere, defaults in --help, the subcommand table, compare on Stan CSV,
progress without carriage-return floods off a terminal, and named dropped generated quantities."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from stan_dp.cli import SUBCOMMANDS, build_parser, main

ROOT = Path(__file__).resolve().parent.parent


def test_verbose_and_quiet_are_accepted_before_and_after_the_subcommand():
    """Both positions parse to the same flags; leaving them out gives False."""
    parser = build_parser()
    for argv in (["--verbose", "--quiet", "summary", "f.nc"], ["summary", "f.nc", "--verbose", "--quiet"],
                 ["--verbose", "summary", "f.nc", "--quiet"]):
        args = parser.parse_args(argv)
        assert args.verbose is True and args.quiet is True, argv
    args = parser.parse_args(["summary", "f.nc"])
    assert args.verbose is False and args.quiet is False


def test_help_shows_defaults_and_every_subcommand(capsys):
    """`stan-dp sample --help` lists the defaults (chains 4, algorithm auto, rows N); the top-level help names
    every row of SUBCOMMANDS."""
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for fragment in ("(default: 4)", "(default: auto)", "(default: N)", "--inits", "--row-variables", "--rows"):
        assert fragment in text, fragment
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(c.name in out for c in SUBCOMMANDS)


def test_progress_off_a_terminal_redraws_rarely(monkeypatch):
    """With stderr redirected (not a TTY) 5,000 quick updates give eleven lines (start and every tenth), not
    thousands."""
    from stan_dp.output import progress

    sink = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", sink)
    bar = progress.progress_bar(total=5000, desc="test", unit="it")
    for _ in range(5000):
        bar.update(1)
    bar.close()
    assert sink.getvalue().count("\r") == 0 and len(sink.getvalue().splitlines()) == 11


def test_progress_shows_counts_but_no_times_or_rates(monkeypatch):
    """The bar text is the count against the total only: no elapsed time, rate or time left (the speed of a
    private run can depend on the private rows), and off a terminal one whole line per tenth of the total (no
    carriage returns gluing lines together)."""
    from stan_dp.output import progress

    sink = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", sink)
    bar = progress.progress_bar(total=300, desc="test", unit="it")
    for _ in range(300):
        bar.update(1)
    bar.close()
    out = sink.getvalue()
    assert "300/300" in out and "0/300" in out
    assert not any(mark in out for mark in ("it/s", "s/it", "00:", "<", "?"))
    assert out.count("\r") == 0 and len(out.splitlines()) == 11


def test_quiet_progress_bar_writes_nothing(monkeypatch):
    from stan_dp.output import progress

    sink = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", sink)
    bar = progress.progress_bar(total=10, desc="x", unit="it", show=False)
    bar.update(10)
    bar.close()
    assert sink.getvalue() == ""


@pytest.mark.stan
def test_compare_reads_stan_csv_and_explains_the_columns(tmp_path, capsys):
    """`stan-dp compare a.csv b_1.csv,b_2.csv` reads Stan CSV (as CmdStan writes it) and prints how to read the
    table and the MMD."""
    from stan_dp.output.arviz_compat import fit_from_dict
    from stan_dp.output.stan_csv import to_stan_csv

    rng = np.random.default_rng(3)
    a = fit_from_dict({"posterior": {"mu": rng.normal(size=(1, 300))}})
    b = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 300))}})
    pa = to_stan_csv(a, tmp_path / "a.csv")
    pb = to_stan_csv(b, tmp_path / "b.csv")
    assert main(["compare", ",".join(map(str, pa)), ",".join(map(str, pb))]) == 0
    out = capsys.readouterr().out
    assert "mu" in out and "mean_diff_sd" in out and "How to read this table" in out and "Joint MMD" in out


@pytest.mark.stan
def test_include_gq_names_generated_quantities_sized_by_n(tmp_path):
    """A generated quantity sized by N cannot be released (it is computed with N = 0); the run says which."""
    from stan_dp.model import DPStanModel

    program = tmp_path / "gq.stan"
    program.write_text(
        "data { int<lower=0> N; vector[N] y; }\nparameters { real mu; }\nmodel { mu ~ normal(0, 5); "
        "y ~ normal(mu, 1); }\ngenerated quantities { real mu2 = mu * 2; vector[N] yrep; for (i in 1:N) "
        "yrep[i] = normal_rng(mu, 1); }\n")
    model = DPStanModel(program, show_progress=False)
    data = {"N": 30, "y": np.linspace(-1, 1, 30).tolist()}
    with pytest.warns(UserWarning, match=r"generated quantities yrep are sized by the row count"):
        fit = model.sample(data, epsilon=1.0, delta=1e-5, chains=1, iter_warmup=10, iter_sampling=10, seed=1,
                           include_gq=True, show_progress=False, ratio_clip=1.0)
    assert "mu2" in fit.posterior and "yrep" not in fit.posterior


def test_compare_swaps_a_private_reference_and_refuses_two_private_fits():
    """compare(reference, private) is detected from attrs["private"]: swapped with a warning, same table as
    compare(private, reference); two private fits are refused with a message naming the fix."""
    from stan_dp import compare
    from stan_dp.output.arviz_compat import fit_from_dict

    rng = np.random.default_rng(5)
    private = fit_from_dict({"posterior": {"mu": rng.normal(1.0, 2.0, size=(2, 200))}}, attrs={"private": 1})
    reference = fit_from_dict({"posterior": {"mu": rng.normal(size=(2, 200))}}, attrs={"private": 0})
    right = compare(private, reference)
    with pytest.warns(UserWarning, match="swapped"):
        swapped = compare(reference, private)
    assert swapped.equals(right) and right.loc["mu", "sd_ratio"] > 1.5
    with pytest.raises(ValueError, match="Both arguments are private fits"):
        compare(private, private)


def test_privacy_text_speaks_plainly_first():
    """The privacy report starts with plain words (what epsilon means for one row, what the budget covers) and
    puts the accountant's details after."""
    from stan_dp.models.reference_models import GaussianMeanModel
    from stan_dp.privacy.statement import privacy_text
    from stan_dp.run.pipeline import sample_private

    fit = sample_private(GaussianMeanModel.simulate(200, 1, seed=2), algorithm="penalty", ratio_clip=1.0,
                         epsilon=1.0, delta=1e-5,
                         chains=1, iter_warmup=5, iter_sampling=5, seed=1, show_progress=False)
    text = privacy_text(fit)
    assert text.startswith("Privacy in plain words:") and "any one row" in text and "N = 200" in text
    assert text.index("Privacy in plain words") < text.index("Accountant details") < text.index("noise multiplier")


def test_no_paper_jargon_in_user_facing_strings():
    """No string literal of the package outside docstrings says "seed 00N" (the project's names for papers)."""
    import ast
    import re

    hits = []
    for path in (ROOT / "stan_dp").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docs = {id(node.body[0].value) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
        hits += [f"{path.name}:{node.lineno}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                 and re.search(r"(?i)seed 00\d", node.value)]
    assert hits == []


def test_the_cli_reference_fits_a_code_block_of_the_docs(tmp_path, monkeypatch):
    """The documentation's command line reference (docs/_gen.py, run when the site is built) wraps every help
    text to CLI_COLUMNS = 88 characters: a code block of the site's theme holds about 90 at a 1,280-pixel window
    (measured with headless Chromium; at 100 columns the blocks scrolled sideways). Every subcommand is there."""
    import importlib.util

    from stan_dp.cli import SUBCOMMANDS

    monkeypatch.setenv("COLUMNS", "200")  # restored afterwards: the generator sets its own width
    spec = importlib.util.spec_from_file_location("docs_gen", Path(__file__).resolve().parent.parent / "docs" / "_gen.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = tmp_path / "cli.md"
    gen.write_cli_reference(page)
    text = page.read_text()
    assert gen.CLI_COLUMNS <= 88
    assert max(len(line) for line in text.splitlines()) <= gen.CLI_COLUMNS
    for command in SUBCOMMANDS:
        assert f"## `stan-dp {command.name}`" in text and f"usage: stan-dp {command.name}" in text
