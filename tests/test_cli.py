"""The stan-dp command line end to end: sample -> netCDF -> summary -> compare, and bad-input exits.

Runs the real console entry point (``stan_dp.cli.main``) in-process for the fast paths and the installed
``stan-dp`` script once in a subprocess, on the bundled logistic program with simulated public data.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stan_dp.cli import main
from stan_dp.tools.demo import simulate_logistic

pytestmark = pytest.mark.stan
ROOT = Path(__file__).resolve().parent.parent
LOGISTIC = ROOT / "stan_models" / "logistic.stan"


@pytest.fixture(scope="module")
def data_file(tmp_path_factory, stan_model):
    stan_model("logistic")  # compile once, shared with other tests
    path = tmp_path_factory.mktemp("cli") / "data.json"
    path.write_text(json.dumps(simulate_logistic(500, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)))
    return path


def test_sample_summary_compare_end_to_end(data_file, tmp_path, capsys):
    """sample writes a private netCDF (and with --csv one Stan CSV file per chain holding the same draws) and says
    its guarantee in one line with where the full report is; reference writes a non-private one; summary prints
    az.summary and the privacy report (printed once in the workflow: by summary, not by sample); compare prints
    one row per scalar parameter and writes the PNG."""
    from stan_dp.output.arviz_compat import from_netcdf
    from stan_dp.output.stan_csv import read_stan_csv

    fit, ref, png = tmp_path / "fit.nc", tmp_path / "ref.nc", tmp_path / "m.png"
    assert main(["sample", str(LOGISTIC), "--data", str(data_file), "--algorithm", "penalty", "--epsilon", "2",
                 "--delta", "1e-5", "--chains", "2", "--iter-warmup", "100", "--iter-sampling", "100",
                 "--seed", "3", "--option", "ratio_clip=2.0", "--output", str(fit), "--quiet",
                 "--csv", str(tmp_path / "fit.csv")]) == 0
    out = capsys.readouterr().out
    assert fit.exists() and "beta[2]" in out and "epsilon" in out.lower()
    assert "Privacy: everything released in this fit is (epsilon = 2, delta = 1e-05)-differentially private" in out
    assert f"stan-dp summary {fit}" in out and "Seeded:" in out
    assert "Privacy in plain words" not in out and "Accountant details" not in out
    csv = [tmp_path / "fit_1.csv", tmp_path / "fit_2.csv"]
    assert "fit_2.csv" in out
    beta = from_netcdf(fit).posterior["beta"].values
    assert (read_stan_csv(csv)["beta"] == beta.reshape(-1, 3)).all()
    assert main(["reference", str(LOGISTIC), "--data", str(data_file), "--chains", "2", "--iter-warmup", "200",
                 "--iter-sampling", "200", "--seed", "3", "--output", str(ref), "--quiet"]) == 0
    assert "NOT private" in capsys.readouterr().out
    assert main(["summary", str(fit)]) == 0
    out = capsys.readouterr().out
    assert "alpha" in out and "substitute one row" in out
    assert out.count("Privacy in plain words") == 1 and "Accountant details" in out
    assert main(["compare", str(fit), str(ref), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for name in ("alpha", "beta[0]", "beta[1]", "beta[2]"):
        assert name in out
    assert "MMD" in out and png.exists() and png.stat().st_size > 1000


def test_sample_with_an_sg_kernel(data_file, tmp_path, capsys):
    """stan-dp sample --algorithm dp-sgld --option grad_clip=2.5 writes a private fit with the SG fields."""
    import arviz as az

    fit = tmp_path / "sgld.nc"
    assert main(["sample", str(LOGISTIC), "--data", str(data_file), "--algorithm", "dp-sgld", "--epsilon", "2",
                 "--delta", "1e-5", "--chains", "2", "--iter-warmup", "100", "--iter-sampling", "100", "--seed", "3",
                 "--option", "grad_clip=2.5", "--output", str(fit), "--quiet"]) == 0
    idata = az.from_netcdf(fit)
    assert idata.attrs["algorithm"] == "dp-sgld" and "temperature" in idata.sample_stats
    assert "beta[2]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["sample", "missing.stan", "--data", "{data}", "--epsilon", "1", "--delta", "1e-5", "--output", "x.nc"],
         "Stan program not found"),
        (["sample", "{model}", "--data", "nowhere.json", "--epsilon", "1", "--delta", "1e-5", "--output", "x.nc"],
         "Data file not found"),
        (["sample", "{model}", "--data", "{data}", "--algorithm", "nuts", "--epsilon", "1", "--delta", "1e-5",
          "--output", "x.nc"], "valid algorithms"),
        (["sample", "{model}", "--data", "{data}", "--epsilon", "1", "--delta", "1e-5", "--option", "clipp=3",
          "--output", "x.nc"], "ratio_clip"),
        (["sample", "{model}", "--data", "{data}", "--epsilon", "-1", "--delta", "1e-5", "--output", "x.nc"],
         "epsilon"),
        (["sample", "{model}", "--data", "{data}", "--epsilon", "1", "--delta", "2", "--output", "x.nc"], "delta"),
        (["sample", "{model}", "--data", "{data}", "--algorithm", "dp-sgld", "--epsilon", "1", "--delta", "1e-5",
          "--output", "x.nc"], "option 'grad_clip' of algorithm 'dp-sgld' is required"),
        (["sample", "{model}", "--data", "{data}", "--epsilon", "1", "--delta", "1e-5", "--output", "x.nc"],
         "no literal bounds are declared on x: declare them in the data block"),
        (["summary", "nothing.nc"], "not found"),
    ],
)
def test_bad_input_exits_with_a_short_reason(args, message, data_file, tmp_path, capsys, monkeypatch):
    """Bad input exits with status 2 and a short reason on stderr naming the problem, no traceback."""
    monkeypatch.chdir(tmp_path)
    args = [a.format(model=LOGISTIC, data=data_file) for a in args]
    assert main(args + (["--quiet"] if args[0] == "sample" else [])) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) <= 3


def test_stan_syntax_error_is_reported_with_its_line(tmp_path, capsys, data_file):
    """A Stan syntax error gives stanc's located message in at most two lines, exit status 2."""
    bad = tmp_path / "bad.stan"
    bad.write_text("data { int<lower=0> N; }\nparameters { real mu }\nmodel { mu ~ normal(0, 1); }\n")
    assert main(["sample", str(bad), "--data", str(data_file), "--epsilon", "1", "--delta", "1e-5",
                 "--option", "ratio_clip=2", "--output", str(tmp_path / "x.nc"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_installed_console_script_runs():
    """The `stan-dp` console script is installed and answers --help."""
    exe = shutil.which("stan-dp") or str(Path(sys.executable).parent / "stan-dp")
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and "sample" in proc.stdout and "demo" in proc.stdout


@pytest.mark.slow
def test_sigterm_mid_run_saves_the_partial_draws_with_the_budget_and_exits_143(data_file, tmp_path):
    """SIGTERM (a batch scheduler's time limit) sent to `stan-dp sample` while its chains run: the process says so,
    writes the draws made so far to --output with the privacy report of the budget they spent, and exits 143."""
    import os
    import signal
    import time

    from stan_dp.output.arviz_compat import from_netcdf

    out = tmp_path / "partial.nc"
    err_path = tmp_path / "stderr.txt"
    argv = [sys.executable, "-m", "stan_dp.cli", "sample", str(LOGISTIC), "--data", str(data_file), "--epsilon",
            "1", "--delta", "1e-5", "--chains", "2", "--iter-warmup", "100", "--iter-sampling", "1000000",
            "--seed", "5", "--option", "ratio_clip=2.5", "--output", str(out)]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=dict(os.environ))
        deadline = time.monotonic() + 300
        while "(2 chains)" not in err_path.read_text():  # the progress bar's first line: the chains run
            assert proc.poll() is None and time.monotonic() < deadline, err_path.read_text()
            time.sleep(0.2)
        time.sleep(2.0)  # past warmup (100 iterations take well under a second here)
        proc.send_signal(signal.SIGTERM)
        stdout, _ = proc.communicate(timeout=300)
    stderr = err_path.read_text()
    assert proc.returncode == 143, stderr
    assert "interrupted by SIGTERM" in stderr and "stopped by SIGTERM" in stderr and "Traceback" not in stderr
    assert f"Private draws written to {out} (the run was stopped early" in stdout
    fit = from_netcdf(out)
    a = fit.attrs
    assert a["interrupted"] == 1 and 0 < a["iterations_completed"] < 2 * 1_000_100
    assert 0 < a["epsilon_spent"] < a["epsilon"] == 1.0 and a["delta"] == 1e-5
    assert fit.posterior["beta"].shape[1] >= 1  # sampling draws were kept
    assert "privacy_report" in a and "Privacy: everything released in this fit is (epsilon = " in stdout


def _posterior(path):
    from stan_dp.output.arviz_compat import from_netcdf

    fit = from_netcdf(path)
    return fit.posterior["beta"].values, fit.attrs


SEEDED_RUN = ["--epsilon", "2", "--delta", "1e-5", "--chains", "2", "--seed", "3", "--algorithm", "dp-sghmc",
              "--option", "grad_clip=3"]


def test_resume_with_no_flag_writes_the_commands_own_outputs(data_file, tmp_path, monkeypatch, capsys):
    """`stan-dp sample --checkpoint DIR --output A --csv B` killed after its second checkpoint: `stan-dp resume DIR
    --data changed.json` (one value of x changed) exits 2 naming 'x' and no value; `stan-dp resume DIR` with no flag
    finishes the command as it was given, writing A and B (the uninterrupted run's draws, bit for bit); --output
    overrides; a DIR that already holds a checkpoint is refused by `sample` before the run (exit 2), and a
    checkpoint without recorded outputs asks for --output (exit 2)."""
    from checkpoint_crash import crash_after_writes

    lengths = ["--iter-warmup", "60", "--iter-sampling", "60"]
    full = tmp_path / "full.nc"
    assert main(["sample", str(LOGISTIC), "--data", str(data_file), *SEEDED_RUN, *lengths, "--output", str(full),
                 "--quiet"]) == 0
    out, csv, ck = tmp_path / "fit.nc", tmp_path / "fit.csv", tmp_path / "ck"
    command = ["sample", str(LOGISTIC), "--data", str(data_file), *SEEDED_RUN, *lengths, "--output", str(out),
               "--csv", str(csv), "--checkpoint", str(ck), "--checkpoint-every", "25", "--quiet"]
    with crash_after_writes(monkeypatch, 2):
        main(command)
    assert not out.exists() and json.loads((ck / "command.json").read_text())["output"] == str(out.resolve())
    capsys.readouterr()
    assert main(command) == 2  # the directory holds a checkpoint: refused before anything runs
    assert "already holds a checkpoint" in capsys.readouterr().err
    changed = json.loads(data_file.read_text())
    changed["x"][3][2] += 0.25
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    assert main(["resume", str(ck), "--data", str(tmp_path / "changed.json"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the values of 'x' differ" in err and repr(changed["x"][3][2]) not in err and not out.exists()
    assert main(["resume", str(ck), "--quiet"]) == 0
    np.testing.assert_array_equal(_posterior(out)[0], _posterior(full)[0])
    assert (tmp_path / "fit_1.csv").exists() and (tmp_path / "fit_2.csv").exists()
    assert int(_posterior(out)[1]["resumed"]) == 1
    (ck / "command.json").unlink()
    for name in list(ck.iterdir()):
        name.unlink()
    with crash_after_writes(monkeypatch, 1):
        main(command)
    (ck / "command.json").unlink()  # as a checkpoint written from Python: no outputs recorded
    capsys.readouterr()
    assert main(["resume", str(ck), "--quiet"]) == 2
    assert "--output" in capsys.readouterr().err
    other = tmp_path / "other.nc"
    assert main(["resume", str(ck), "--output", str(other), "--quiet"]) == 0 and other.exists()


def test_sigint_is_left_alone_when_the_process_started_with_it_ignored():
    """A job put in the background by a non-interactive shell starts with SIGINT ignored: the command's signal
    guard leaves it ignored (such a run is stopped with SIGTERM), and handles SIGTERM; otherwise it handles both and
    restores the previous handlers afterwards."""
    import signal

    from stan_dp.cli import _Signals

    previous = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with _Signals() as guard:
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == guard._handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with _Signals() as guard:
            assert signal.getsignal(signal.SIGINT) == guard._handler
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_sigint_mid_run_exits_130_and_the_resume_finishes_the_command(data_file, tmp_path):
    """The reviewer's scenario on the command line: `stan-dp sample ... --checkpoint DIR` interrupted by SIGINT while
    its chains run exits 130, writes the draws made so far and a line saying how to resume, and checkpoints the
    published iterations; `stan-dp resume DIR --data changed.json` (one value of x changed) exits 2 naming 'x' and
    no value; `stan-dp resume DIR` with no flag then writes the original --output: the uninterrupted seeded run's
    draws, bit for bit."""
    import os
    import signal
    import time

    from stan_dp.phases.checkpoint import HEADER, load_checkpoint

    lengths = ["--iter-warmup", "500", "--iter-sampling", "5000"]  # long enough that the signal lands mid-run
    full, out, ck = tmp_path / "full.nc", tmp_path / "fit.nc", tmp_path / "ck"
    argv = [sys.executable, "-m", "stan_dp.cli", "sample", str(LOGISTIC), "--data", str(data_file), *SEEDED_RUN,
            *lengths, "--output", str(out), "--checkpoint", str(ck), "--checkpoint-every", "400", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # Ctrl-C in a terminal: the command starts with SIGINT at its default action, whatever the test runner was
    # started with (a runner launched in the background of a non-interactive shell has SIGINT ignored, and a
    # command started with SIGINT ignored rightly keeps it ignored)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    while not ((ck / HEADER).exists() and load_checkpoint(ck).done >= 400):  # the chains are running
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130, stderr
    assert f"stan-dp resume {ck}" in stderr and "stopped by Ctrl-C" in stderr and "Traceback" not in stderr
    partial, attrs = _posterior(out)
    assert int(attrs["interrupted"]) == 1
    assert load_checkpoint(ck).chain_done == json.loads(attrs["iterations_per_chain"])
    changed = json.loads(data_file.read_text())
    changed["x"][11][0] += 0.5
    changed_file = tmp_path / "changed.json"
    changed_file.write_text(json.dumps(changed))
    proc = subprocess.run([sys.executable, "-m", "stan_dp.cli", "resume", str(ck), "--data", str(changed_file),
                           "--quiet"], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "the values of 'x' differ" in proc.stderr, proc.stderr
    assert repr(changed["x"][11][0]) not in proc.stderr
    assert main(["sample", str(LOGISTIC), "--data", str(data_file), *SEEDED_RUN, *lengths, "--output", str(full),
                 "--quiet"]) == 0
    assert main(["resume", str(ck), "--quiet"]) == 0
    np.testing.assert_array_equal(_posterior(out)[0], _posterior(full)[0])
    np.testing.assert_array_equal(partial, _posterior(full)[0][:, :partial.shape[1]])  # an exact prefix


def test_the_privacy_report_is_printed_once_per_workflow(capsys):
    """What `sample` prints after writing FILE (``written``): the guarantee in one line and where the rest is; what
    `summary FILE` prints: how auto chose (its full reason, which the run's stderr only summarised) and the whole
    privacy report. Together the report appears once."""
    from stan_dp.cli import _print_summary
    from stan_dp.models.reference_models import GaussianMeanModel
    from stan_dp.run.pipeline import sample_private

    model = GaussianMeanModel.simulate(n=400, dim=2, seed=0)
    fit = sample_private(model, algorithm="auto", epsilon=5.0, delta=1e-5, chains=2, iter_warmup=30,
                         iter_sampling=20, seed=1, show_progress=False, ratio_clip=3.0)
    _print_summary(fit, written="fit.nc")
    after_sample = capsys.readouterr().out
    assert "Privacy: everything released in this fit is (epsilon = 5, delta = 1e-05)" in after_sample
    assert "stan-dp summary fit.nc" in after_sample and "Privacy in plain words" not in after_sample
    assert fit.attrs["auto_reason"] not in after_sample
    _print_summary(fit)
    summary = capsys.readouterr().out
    assert "Algorithm (auto): penalty MH" in summary and "ratio_clip = 3" in summary
    assert "Privacy in plain words" in summary and "Accountant details" in summary
    assert (after_sample + summary).count("Accountant details") == 1
    setup = summary.split("Algorithm (auto): ")[1].split("\n\n")[0]
    assert max(len(line) for line in setup.splitlines()) <= 100  # wrapped for a terminal
