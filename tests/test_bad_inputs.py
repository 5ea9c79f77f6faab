"""Bad input to the ``stan-dp`` command: every row of BAD_INPUTS exits with status 2, prints no traceback and
says what is wrong (the fragment) in the package's own words.

Each row is (id, argv, fragment). argv may use the placeholders of ``_files`` ({model}, {data}, {dir}, ...).
The lead adds rows here after merges. Rows run the real entry point ``stan_dp.cli.main`` in-process; argparse
errors (unknown flag, bad int) exit through SystemExit(2), which counts as the same outcome.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from stan_dp.cli import main
from stan_dp.tools.demo import simulate_logistic
from test_rows import PROGRAMS, _xy

pytestmark = pytest.mark.stan
ROOT = Path(__file__).resolve().parent.parent
LOGISTIC = ROOT / "stan_models" / "logistic.stan"

RUN = ["--epsilon", "1", "--delta", "1e-5", "--output", "{dir}/fit.nc", "--chains", "2", "--iter-warmup", "20",
       "--iter-sampling", "20", "--quiet"]


def sample(*extra: str, model: str = "{model}", data: str = "{data}", run: list[str] | None = None) -> list[str]:
    """argv of `stan-dp sample` on ``model`` / ``data`` with the short run settings, then ``extra``; with neither
    ``--algorithm`` nor ``--option`` in ``extra``, the bound the default algorithm (auto) needs (ratio_clip), so that
    the row reaches the check it is about."""
    bound = [] if {"--algorithm", "--option"} & set(extra) else ["--option", "ratio_clip=2"]
    return ["sample", model, "--data", data, *(RUN if run is None else run), *extra, *bound]


ADVISE = ["advise", "{model}", "--data", "{data}", "--epsilon", "1", "--delta", "1e-5", "--chains", "2", "--quiet"]


def _run_with(**changes: str) -> list[str]:
    """RUN with some flags' values replaced, e.g. _run_with(**{"--epsilon": "-1"})."""
    out = list(RUN)
    for flag, value in changes.items():
        out[out.index(flag) + 1] = value
    return out


BAD_INPUTS: list[tuple[str, list[str], str]] = [
    # files and paths
    ("missing program", sample(model="{dir}/missing.stan"), "Stan program not found"),
    ("missing data", sample(data="{dir}/nowhere.json"), "Data file not found"),
    ("data is a directory", sample(data="{dir}"), "It is a directory"),
    ("output dir missing", sample(run=_run_with(**{"--output": "{dir}/no/such/dir/fit.nc"})), "does not exist"),
    ("output suffix", sample(run=_run_with(**{"--output": "{dir}/fit.txt"})), "does not end in .nc"),
    ("output is a directory", sample(run=_run_with(**{"--output": "{dir}/sub.nc"})), "is a directory"),
    ("csv suffix", sample("--csv", "{dir}/fit.nc"), "--csv"),
    ("reference output suffix", ["reference", "{model}", "--data", "{data}", "--output", "{dir}/ref.json",
                                 "--quiet"], "does not end in .nc"),
    ("summary missing file", ["summary", "{dir}/nothing.nc"], "not found"),
    ("summary not netCDF", ["summary", "{data}"], "not a netCDF file"),
    ("compare missing csv", ["compare", "{dir}/a.csv", "{dir}/b.csv"], "Stan CSV file not found"),
    ("compare plot suffix", ["compare", "{data}", "{data}", "--plot", "{dir}/m.txt"], "--plot"),
    ("demo dir is a file", ["demo", "--output-dir", "{data}"], "not a directory"),
    # Stan programs
    ("stan syntax error", sample(model="{bad}"), "line 2"),
    ("N declared lower=1", sample(model="{lower1}", data="{ydata}"), "rejects N = 0"),
    ("standardising transformed data", sample(model="{std}", data="{xydata}"), "summarises the rows"),
    # data
    ("data not JSON", sample(data="{notjson}"), "not valid JSON"),
    ("data missing a variable", sample(data="{missing_y}"), "missing from the data"),
    ("row variable wrong length", sample(data="{short_y}"), "has leading dimension"),
    ("N not an integer", sample(data="{n_float}"), "must be a single integer"),
    ("N is zero", sample(data="{n_zero}"), "at least one row"),
    ("unknown --rows", sample("--rows", "M"), "declares no data variable 'M'"),
    ("undeclared --row-variables", sample("--row-variables", "y,x,z"), "undeclared data"),
    ("--row-variables leaves one out", sample("--row-variables", "y"), "leaves out x"),
    # budget, algorithm, options
    ("negative epsilon", sample(run=_run_with(**{"--epsilon": "-1"})), "--epsilon must be a positive"),
    ("nan epsilon", sample(run=_run_with(**{"--epsilon": "nan"})), "--epsilon must be a positive"),
    ("delta above 1", sample(run=_run_with(**{"--delta": "2"})), "--delta must lie strictly between 0 and 1"),
    ("impossible budget", sample("--algorithm", "dp-fast-mh", "--option", "row_bound=1",
                                 run=_run_with(**{"--delta": "5e-324"})), "no finite noise level meets the budget"),
    ("zero chains", sample(run=_run_with(**{"--chains": "0"})), "--chains must be at least 1"),
    ("negative warmup", sample(run=_run_with(**{"--iter-warmup": "-1"})), "--iter-warmup must be at least 0"),
    ("unknown algorithm", sample("--algorithm", "nuts"), "valid algorithms"),
    ("unknown option", sample("--option", "clipp=3"), "ratio_clip"),
    ("option without =", sample("--option", "ratio_clip"), "--option expects key=value"),
    ("required option missing", sample("--algorithm", "dp-sgld"), "option 'grad_clip' of algorithm 'dp-sgld' is required"),
    ("auto without a bound", sample("--algorithm", "auto"), "Give grad_clip=L"),
    ("penalty without ratio_clip", sample("--algorithm", "penalty"), "option 'ratio_clip' of algorithm 'penalty' is "
                                                                      "required"),
    ("bad option value", sample("--option", "ratio_clip=-2"), "ratio_clip"),
    ("batch larger than N", sample("--algorithm", "dp-sgld", "--option", "grad_clip=1", "--option",
                                   "batch_sampling=uniform", "--option", "batch_size=100000"), "batch_size"),
    # inits
    ("inits file missing", sample("--inits", "{dir}/inits.json"), "Inits file not found"),
    ("inits bad JSON", sample("--inits", "{{alpha: 0"), "not valid JSON"),
    ("inits missing parameter", sample("--inits", '{{"alpha": 0}}'), "no value for parameter(s) beta"),
    ("inits wrong size", sample("--inits", '{{"alpha": 0, "beta": [0, 0]}}'), "dims declared=(3)"),
    ("inits unknown name", sample("--inits", '{{"alpha": 0, "beta": [0, 0, 0], "gamma": 1}}'), "gamma"),
    ("inits out of support", sample("--inits", '{{"beta": [0, 0], "sigma": -1}}', model="{sig}", data="{kidiq}"),
     "greater than or equal to 0"),
    ("inits per chain count", sample("--inits", '[{{"alpha": 0, "beta": [0, 0, 0]}}]'), "list of 1 dicts"),
    ("inits twice", sample("--inits", "{dir}/x.json", "--option", "inits=1"), "inits given twice"),
    # advise (checked before compiling, except the inits' names, which need the program)
    ("advise option typo", [*ADVISE, "--option", "ratio_clp=2"], "ratio_clp (did you mean ratio_clip?)"),
    ("advise without clip bound", [*ADVISE, "--option", "step_size=0.1"], "at least one public clip bound"),
    ("advise unknown algorithm", [*ADVISE, "--option", "ratio_clip=2", "--algorithm", "penalti"],
     "unknown algorithm 'penalti' (did you mean penalty?)"),
    ("advise inits twice", [*ADVISE, "--option", "ratio_clip=2", "--option", "inits=0", "--inits", "0"],
     "inits given twice"),
    ("advise inits file missing", [*ADVISE, "--option", "ratio_clip=2", "--inits", "{dir}/inits.json"],
     "Inits file not found"),
    ("advise inits unknown name", [*ADVISE, "--option", "ratio_clip=2", "--inits",
                                   '{{"alpha": 0, "betta": [0, 0, 0]}}'], "betta"),
    # argparse
    ("unknown subcommand", ["fit", "{model}"], "invalid choice"),
    ("unknown flag", sample("--epsilonn", "1"), "unrecognized arguments"),
    ("chains not an int", sample(run=_run_with(**{"--chains": "two"})), "invalid int value"),
    ("audit data without program", ["audit", "--data", "{data}"], "need a Stan program"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory, stan_model) -> dict[str, str]:
    """Placeholder -> path of the inputs the table refers to (valid and broken programs and data)."""
    stan_model("logistic")  # compile once, shared with other tests
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "sub.nc").mkdir()
    data = simulate_logistic(60, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)
    out = {"model": str(LOGISTIC), "dir": str(d)}

    def write(name: str, text: str) -> str:
        (d / name).write_text(text)
        return str(d / name)

    out["data"] = write("data.json", json.dumps(data))
    out["missing_y"] = write("missing_y.json", json.dumps({k: v for k, v in data.items() if k != "y"}))
    out["short_y"] = write("short_y.json", json.dumps({**data, "y": data["y"][:-3]}))
    out["n_float"] = write("n_float.json", json.dumps({**data, "N": 2.5}))
    out["n_zero"] = write("n_zero.json", json.dumps({**data, "N": 0, "x": [], "y": []}))
    out["notjson"] = write("notjson.json", "{N: 3,")
    out["ydata"] = write("y.json", json.dumps({"N": 50, "y": [float(i) for i in range(1, 51)]}))
    out["bad"] = write("bad.stan", "data { int<lower=0> N; }\nparameters { real mu }\nmodel { mu ~ normal(0, 1); }\n")
    out["lower1"] = write("lower1.stan", "data { int<lower=1> N; vector[N] y; }\nparameters { real mu; }\n"
                                         "model { mu ~ normal(0, 5); y ~ normal(mu, 1); }\n")
    # Programs that other test files compile as well (the library cache is keyed by file name and source, so these
    # cost no compile of their own): test_rows' standardising program, under its name there, and the bundled
    # kidiq_momiq, whose sigma is declared <lower=0>.
    out["std"] = write("pooled_standardised.stan", PROGRAMS["pooled_standardised"])
    xy = _xy()
    out["xydata"] = write("xy.json", json.dumps({"N": xy["N"], "x": xy["x"].tolist(), "y": xy["y"].tolist()}))
    out["sig"] = str(ROOT / "stan_models" / "kidiq_momiq.stan")
    kidiq = json.loads((ROOT / "data" / "posteriordb" / "kidiq.json").read_text())
    out["kidiq"] = write("kidiq.json", json.dumps({"N": 50, "kid_score": kidiq["kid_score"][:50],
                                                   "mom_iq": kidiq["mom_iq"][:50]}))
    return out


def test_the_table_has_at_least_25_rows():
    """The issue asks for at least 25 bad inputs."""
    assert len(BAD_INPUTS) >= 25 and len({row[0] for row in BAD_INPUTS}) == len(BAD_INPUTS)


@pytest.mark.parametrize("name, argv, fragment", BAD_INPUTS, ids=[row[0] for row in BAD_INPUTS])
def test_bad_input_exits_2_with_the_package_message(name, argv, fragment, files, tmp_path, monkeypatch, capsys):
    """Exit status 2, no traceback, the fragment on stderr; package errors (not argparse usage) start with
    'stan-dp CMD: error:', have at most 3 lines and repeat no line; nothing is written to --output."""
    monkeypatch.chdir(tmp_path)
    args = [a.format(**files) for a in argv]
    try:
        status = main(args)
    except SystemExit as exc:  # argparse usage errors
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    assert fragment in err, err
    if "usage:" not in err:
        lines = [line for line in err.strip().splitlines() if line.strip()]
        assert lines[0].startswith(f"stan-dp {args[0]}: error: "), err
        assert len(lines) <= 3 and len(set(lines)) == len(lines), err
        assert "row_variables=[...] without" not in err  # never suggests declaring a private column public
    assert not (Path(files["dir"]) / "fit.nc").exists()


def test_a_row_count_declared_above_zero_is_refused_before_compiling(files, tmp_path, monkeypatch, capsys):
    """`int<lower=1> N` is refused from the program text alone: with the compiler made to fail, the command still
    exits 2 with the zero-rows refusal (it never reached the compile)."""
    from stan_dp.stan import toolchain

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled although the program text already settles the refusal")

    monkeypatch.setattr(toolchain, "build_model_library", no_compile)
    monkeypatch.chdir(tmp_path)
    status = main([a.format(**files) for a in sample(model="{lower1}", data="{ydata}")])
    err = capsys.readouterr().err
    assert status == 2 and "rejects N = 0" in err and "int<lower=0> N" in err, err
