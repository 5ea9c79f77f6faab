"""Checkpoints and resume: a run interrupted (by an exception, or by SIGKILL in a subprocess, also in the middle of a
checkpoint write) and resumed gives the same draws, bit for bit, and the same epsilon as the run that was not
interrupted; a finished run, another program, other data shapes and corrupted or truncated checkpoints are
refused before anything is released; the CLI's refusals exit with status 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest

import stan_dp
from stan_dp.cli import main
from stan_dp.models.reference_models import LogisticRegressionModel
from stan_dp.phases import checkpoint as ck
from stan_dp.phases.checkpoint import CheckpointError, load_checkpoint, parse_cadence
from stan_dp.run.pipeline import resume_private, sample_private

from checkpoint_crash import crash_after_writes

ROOT = Path(__file__).resolve().parents[2]
LOGISTIC = ROOT / "stan_models" / "logistic.stan"

#: the rows of every test here (simulated logistic regression, public test data)
MODEL_CODE = """
import numpy as np
from stan_dp.models.reference_models import LogisticRegressionModel
_rng = np.random.default_rng(11)
_x = _rng.normal(size=(300, 2))
_y = (_rng.uniform(size=300) < 1.0 / (1.0 + np.exp(-_x @ np.array([1.0, -0.5])))).astype(float)
def model(n=300):
    return LogisticRegressionModel(_x[:n], _y[:n])
"""
_namespace: dict = {}
exec(MODEL_CODE, _namespace)
model = _namespace["model"]

RUNS = {
    "dp-sghmc": dict(algorithm="dp-sghmc", grad_clip=3.0),  # momentum in the kernel state
    "dp-sgnht": dict(algorithm="dp-sgnht", grad_clip=3.0),  # momentum and thermostat, pooled diag metric
    "anchored": dict(algorithm="dp-sgld", grad_clip=3.0, anchor="dp-gd", anchor_steps=8),  # anchor reused
    "penalty": dict(algorithm="penalty", ratio_clip=2.0),  # cached per-row values, dual averaging
    # cached per-row values and a noise-free clipped gradient sum, the Halton jitter's state
    "dp-hmc": dict(algorithm="dp-hmc", ratio_clip=2.0, grad_clip=2.0, leapfrog_steps=3, anchor="none"),
    "dp-fast-mh-full": dict(algorithm="dp-fast-mh-full", row_bound=2.0),  # every row's value after a full batch
}
COMMON = dict(epsilon=2.0, delta=1e-5, chains=2, iter_warmup=120, iter_sampling=80, seed=7, show_progress=False)


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def _draws(fit) -> np.ndarray:
    return fit["posterior"].to_dataset().to_array().values if hasattr(fit, "children") else \
        fit.posterior.to_array().values


def _stats(fit) -> dict[str, np.ndarray]:
    group = fit["sample_stats"]
    group = group.to_dataset() if hasattr(group, "to_dataset") else group
    return {name: group[name].values for name in group.data_vars}


_uninterrupted: dict[str, object] = {}


def _reference_fit(name: str):
    if name not in _uninterrupted:
        _uninterrupted[name] = _quiet(sample_private, model(), **COMMON, **RUNS[name])
    return _uninterrupted[name]


def _interrupted_run(directory: Path, name: str, after_writes: int, monkeypatch, every=30) -> None:
    """Start the run with checkpoints and make it fail right after the ``after_writes``-th checkpoint write."""
    with crash_after_writes(monkeypatch, after_writes):
        _quiet(sample_private, model(), checkpoint=directory, checkpoint_every=every, **COMMON, **RUNS[name])


@pytest.mark.parametrize("name", list(RUNS))
def test_resumed_run_gives_the_uninterrupted_draws(name, tmp_path, monkeypatch):
    """Crash after the third checkpoint (iteration 60 of 200, in warmup), resume: the draws, the sampler statistics
    and epsilon equal the uninterrupted run's exactly; the attrs say it was resumed; resuming again is refused."""
    full = _reference_fit(name)
    _interrupted_run(tmp_path, name, 3, monkeypatch)
    assert load_checkpoint(tmp_path).done == 60
    fit = _quiet(resume_private, tmp_path, model(), show_progress=False)
    np.testing.assert_array_equal(_draws(fit), _draws(full))
    expected = _stats(full)
    for key, value in _stats(fit).items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)
    assert fit.attrs["epsilon_spent"] == full.attrs["epsilon_spent"]
    assert fit.attrs["privacy_mechanisms"] == full.attrs["privacy_mechanisms"]
    assert int(fit.attrs["resumed"]) == 1 and "no new budget" in fit.attrs["resumed_note"]
    if name == "anchored":
        assert fit.attrs["anchor_gradient"] == full.attrs["anchor_gradient"]
    with pytest.raises(CheckpointError, match="finished"):
        resume_private(tmp_path, model(), show_progress=False)


def test_resume_from_the_first_checkpoint_and_an_uninterrupted_checkpointed_run(tmp_path, monkeypatch):
    """A crash right after the checkpoint written before the first iteration resumes to the same draws; a run with
    checkpoints that is not interrupted gives the same draws as one without, and marks its checkpoint finished."""
    full = _reference_fit("dp-sghmc")
    _interrupted_run(tmp_path / "a", "dp-sghmc", 1, monkeypatch)
    assert load_checkpoint(tmp_path / "a").done == 0
    np.testing.assert_array_equal(_draws(_quiet(resume_private, tmp_path / "a", model(), show_progress=False)),
                                  _draws(full))
    fit = _quiet(sample_private, model(), checkpoint=tmp_path / "b", checkpoint_every="0.01s", **COMMON,
                 **RUNS["dp-sghmc"])
    np.testing.assert_array_equal(_draws(fit), _draws(full))
    assert "resumed" not in fit.attrs
    assert json.loads((tmp_path / "b" / ck.HEADER).read_text())["status"] == "finished"
    with pytest.raises(CheckpointError, match="finished"):
        load_checkpoint(tmp_path / "b")


SCRIPT = MODEL_CODE + """
import sys, warnings
warnings.simplefilter("ignore")
from stan_dp.run.pipeline import sample_private
sample_private(model(), checkpoint=sys.argv[1], checkpoint_every=40, algorithm="dp-sghmc", grad_clip=3.0,
               epsilon=2.0, delta=1e-5, chains=2, iter_warmup=120, iter_sampling=80, seed=7, show_progress=False)
"""


@pytest.mark.parametrize("moment, done", [("after:3", 80), ("during:3", 40)])
def test_sigkill_in_a_subprocess_then_resume(moment, done, tmp_path):
    """A subprocess running a seeded dp-sghmc run is killed with SIGKILL right after its third checkpoint write, or
    in the middle of it (the new arrays file written, the header not yet replaced); resuming gives the draws and
    epsilon of the uninterrupted run (the mid-write kill resumes from the checkpoint before)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "STAN_DP_CHECKPOINT_KILL": moment, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path / "ck")], env=env, capture_output=True,
                          timeout=300)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert load_checkpoint(tmp_path / "ck").done == done
    fit = _quiet(resume_private, tmp_path / "ck", model(), show_progress=False)
    full = _reference_fit("dp-sghmc")
    np.testing.assert_array_equal(_draws(fit), _draws(full))
    assert fit.attrs["epsilon_spent"] == full.attrs["epsilon_spent"]
    assert len(list((tmp_path / "ck").glob("arrays-*.npz"))) == 1  # the half-written one was cleaned up


@pytest.fixture
def started(tmp_path, monkeypatch):
    """A checkpoint of an interrupted dp-sghmc run (iteration 30)."""
    _interrupted_run(tmp_path, "dp-sghmc", 2, monkeypatch)
    return tmp_path


def test_refuses_other_program_and_other_data_shapes(started):
    """A checkpoint is bound to the program (here the likelihood's class) and to the data's shapes (here N)."""
    class OtherProgram(LogisticRegressionModel):
        pass

    base = model()
    with pytest.raises(CheckpointError, match="another program"):
        resume_private(started, OtherProgram(base.X, base.y), show_progress=False)
    with pytest.raises(CheckpointError, match="other shapes"):
        resume_private(started, model(299), show_progress=False)
    assert load_checkpoint(started).done == 30  # the refusals changed nothing


def test_refuses_corrupted_and_truncated_checkpoints(started, tmp_path_factory):
    """A flipped byte in the arrays file, an edited header value, a truncated header and a missing arrays file are
    refused with an error naming the problem."""
    header = json.loads((started / ck.HEADER).read_text())
    arrays = started / header["arrays"]
    payload = bytearray(arrays.read_bytes())
    payload[len(payload) // 2] ^= 0xFF
    arrays.write_bytes(bytes(payload))
    with pytest.raises(CheckpointError, match="arrays file .* corrupted"):
        resume_private(started, model(), show_progress=False)
    arrays.unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(started)
    edited = dict(header, iterations_done=header["iterations_done"] + 1)
    (started / ck.HEADER).write_text(json.dumps(edited))
    with pytest.raises(CheckpointError, match="header .* corrupted"):
        load_checkpoint(started)
    (started / ck.HEADER).write_text(json.dumps(header)[:200])
    with pytest.raises(CheckpointError, match="corrupted or truncated"):
        load_checkpoint(started)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        load_checkpoint(tmp_path_factory.mktemp("empty"))


def test_refusals_before_a_run(started, tmp_path):
    """A directory that already holds a checkpoint, algorithms without a chain state to store, a bad cadence and
    a Ray run are refused before anything runs."""
    with pytest.raises(CheckpointError, match="already holds a checkpoint"):
        sample_private(model(), checkpoint=started, **COMMON, **RUNS["dp-sghmc"])
    with pytest.raises(CheckpointError, match="not available for algorithm 'ops'"):
        sample_private(model(), checkpoint=tmp_path / "o", algorithm="ops", loglik_bounds=[-5.0, 0.0],
                       epsilon=2.0, delta=1e-5, chains=1, iter_warmup=10, iter_sampling=1, show_progress=False)
    for bad in (0, -3, "often", "0s", True):
        with pytest.raises(CheckpointError, match="checkpoint_every"):
            parse_cadence(bad)
    assert parse_cadence("45s").seconds == 45.0 and parse_cadence(200).iterations == 200
    assert parse_cadence(None).seconds == ck.DEFAULT_SECONDS


def test_cli_refusals_exit_2(started, tmp_path, capsys):
    """`stan-dp resume` of a likelihood-object checkpoint and of an empty directory, and `stan-dp sample
    --checkpoint-every` without --checkpoint, exit with status 2 and write nothing."""
    data = tmp_path / "data.json"
    data.write_text(json.dumps({"N": 1, "K": 1, "x": [[0.0]], "y": [1]}))
    out = tmp_path / "fit.nc"
    assert main(["resume", str(started), "--output", str(out)]) == 2
    assert "likelihood object" in capsys.readouterr().err
    assert main(["resume", str(tmp_path / "nothing"), "--output", str(out)]) == 2
    assert "no checkpoint" in capsys.readouterr().err
    assert main(["sample", str(LOGISTIC), "--data", str(data), "--epsilon", "1", "--delta", "1e-5", "--option",
                 "grad_clip=2", "--checkpoint-every", "5", "--output", str(out)]) == 2
    assert "applies with --checkpoint DIR only" in capsys.readouterr().err
    assert not out.exists()


def test_public_names():
    """stan_dp.resume and stan_dp.CheckpointError are public."""
    assert callable(stan_dp.resume) and issubclass(stan_dp.CheckpointError, ValueError)


@pytest.mark.stan
def test_stan_program_killed_resumed_from_the_cli(stan_model, tmp_path, monkeypatch, capsys):
    """A Stan program's seeded dp-sghmc run is crashed after its second checkpoint; `stan-dp resume DIR` (the data
    file found through the checkpoint) writes the uninterrupted run's draws and epsilon; resuming it again exits 2;
    `stan_dp.resume` with one value of x changed is refused naming 'x' (no value, no digest), with data of another
    row count too. The header holds a digest per variable, not the data."""
    from stan_dp.output.arviz_compat import from_netcdf
    from stan_dp.tools.demo import simulate_logistic

    model_ = stan_model("logistic")
    data = tmp_path / "data.json"
    data.write_text(json.dumps(simulate_logistic(200, -0.5, (1.0, -1.0, 0.5), 2.5, seed=4)))
    run = dict(algorithm="dp-sghmc", grad_clip=3.0, epsilon=2.0, delta=1e-5, chains=2, iter_warmup=60,
               iter_sampling=60, seed=3, show_progress=False)
    full = _quiet(model_.sample, str(data), **run)
    with crash_after_writes(monkeypatch, 2):
        _quiet(model_.sample, str(data), checkpoint=tmp_path / "ck", checkpoint_every=25, **run)
    header_text = (tmp_path / "ck" / ck.HEADER).read_text()
    other = json.loads(data.read_text())
    assert all(repr(float(v)) not in header_text for v in np.ravel(other["x"])[:20])  # no data value is stored
    digests = json.loads(header_text)["row_digests"]
    assert sorted(digests) == sorted(other)  # one private digest per data variable, inside the checkpoint
    changed = {**other, "x": [list(row) for row in other["x"]]}
    changed["x"][17][1] += 0.5
    with pytest.raises(CheckpointError, match="the values of 'x' differ") as refused:
        _quiet(stan_dp.resume, tmp_path / "ck", data=changed, show_progress=False)
    assert repr(changed["x"][17][1]) not in str(refused.value)
    assert not any(d[:12] in str(refused.value) for d in digests.values())
    other = {**other, "N": 199, "x": other["x"][:199], "y": other["y"][:199]}
    with pytest.raises(CheckpointError, match="other shapes"):
        _quiet(stan_dp.resume, tmp_path / "ck", data=other, show_progress=False)
    out = tmp_path / "resumed.nc"
    assert main(["resume", str(tmp_path / "ck"), "--output", str(out), "--quiet"]) == 0
    resumed = from_netcdf(out)
    np.testing.assert_array_equal(resumed.posterior["beta"].values, full.posterior["beta"].values)
    assert resumed.attrs["epsilon_spent"] == full.attrs["epsilon_spent"] and int(resumed.attrs["resumed"]) == 1
    capsys.readouterr()
    assert main(["resume", str(tmp_path / "ck"), "--output", str(tmp_path / "again.nc")]) == 2
    assert "finished" in capsys.readouterr().err and not (tmp_path / "again.nc").exists()


def test_generator_states_round_trip_through_the_header_encoding():
    """The PCG64 (seeded) and ChaCha20 (unseeded) generator states survive encode -> JSON -> decode exactly: the
    restored generator draws the same numbers as the original."""
    from stan_dp.privacy.noise_source import generator_state, restore_generator, secure_generator

    for rng in (np.random.default_rng(3), secure_generator()):
        rng.standard_normal(5)
        stored = json.loads(json.dumps(ck.encode(generator_state(rng))))
        copy = restore_generator(ck.decode(stored))
        np.testing.assert_array_equal(copy.standard_normal(7), rng.standard_normal(7))
        assert copy.integers(0, 2**62) == rng.integers(0, 2**62)


# ------------------------------------------------------------------------------------------------ early stops
def _stopping_model(stop, after_calls: int, fail: bool = False):
    """The test rows, whose evaluations set ``stop`` (or, with ``fail``, raise a backend failure once) at the
    ``after_calls``-th call: a run stopped early at a point of its own."""
    from stan_dp.stan.backend_error import BackendError

    base = model()

    class Stopping(LogisticRegressionModel):
        calls = 0

        def _count(self):
            type(self).calls += 1
            if type(self).calls == after_calls:
                if fail:
                    raise BackendError("test backend: shard 1 lost")
                stop.set()

        def row_log_lik(self, theta, rows=None):
            self._count()
            return super().row_log_lik(theta, rows)

        def row_log_lik_grad(self, theta, rows=None):
            self._count()
            return super().row_log_lik_grad(theta, rows)

    Stopping.__name__ = Stopping.__qualname__ = "LogisticRegressionModel"  # the same program as model()'s
    Stopping.__module__ = LogisticRegressionModel.__module__
    return Stopping(base.X, base.y)


def _changed_rows():
    """The test rows with one value of one row changed."""
    base = model()
    x = base.X.copy()
    x[5, 0] += 0.25
    return LogisticRegressionModel(x, base.y), repr(float(x[5, 0]))


def _attr_text(fit) -> str:
    return json.dumps({k: str(v) for k, v in fit.attrs.items()})


@pytest.mark.parametrize("name", ["penalty", "dp-sgnht"])
def test_an_early_stop_checkpoints_what_it_published_and_other_rows_are_refused(name, tmp_path):
    """The reviewer's scenario: a seeded run with checkpoints is stopped early (a stop event, as Ctrl-C and SIGTERM
    do) and publishes its partial fit. Its checkpoint holds exactly the iterations each chain published (so a
    resume never draws one again); resuming it on rows with one value changed is refused, naming "the row values"
    and no value or digest, and changes nothing; resuming on the same rows gives the uninterrupted run's draws and
    statistics bit for bit. The row digests appear in no attr of either fit."""
    import threading

    full = _reference_fit(name)
    stop = threading.Event()
    partial = _quiet(sample_private, _stopping_model(stop, 150), checkpoint=tmp_path, checkpoint_every=40,
                     stop_event=stop, **COMMON, **RUNS[name])
    assert int(partial.attrs["interrupted"]) == 1
    found = load_checkpoint(tmp_path)
    published = json.loads(partial.attrs["iterations_per_chain"])
    # stopped part-way (a chain that had not started when the stop came, under load, publishes 0 iterations)
    assert found.chain_done == published and 0 < max(published) and min(published) < 200
    digests = list(found.header["row_digests"].values())
    assert list(found.header["row_digests"]) == ["the row values"] and all(len(d) == 64 for d in digests)
    changed, value = _changed_rows()
    with pytest.raises(CheckpointError) as refused:
        resume_private(tmp_path, changed, show_progress=False)
    message = str(refused.value)
    assert "the row values differ" in message and "other data" in message
    assert not any(d in message or d[:12] in message for d in digests) and value not in message
    assert load_checkpoint(tmp_path).chain_done == published  # the refusal changed nothing
    fit = _quiet(resume_private, tmp_path, model(), show_progress=False)
    np.testing.assert_array_equal(_draws(fit), _draws(full))
    expected = _stats(full)
    for key, got in _stats(fit).items():
        np.testing.assert_array_equal(got, expected[key], err_msg=key)
    assert fit.attrs["epsilon_spent"] == full.attrs["epsilon_spent"]
    assert not any(d in _attr_text(f) or d[:12] in _attr_text(f) for d in digests for f in (partial, fit))


def test_a_stop_while_chains_wait_at_a_metric_window_resumes_exactly(tmp_path, monkeypatch):
    """A stop that comes while a chain waits for the other chains' window draws (the pooled diag metric of
    dp-sgnht): the window is abandoned by every chain (``MetricPool.gather_all`` gives None), each chain's
    checkpoint leaves that window's end pending, and the resumed run completes it with the same draws, giving the
    uninterrupted run's draws bit for bit."""
    import threading

    from stan_dp.samplers.adaptation import MetricPool

    full = _reference_fit("dp-sgnht")
    real = MetricPool.gather_all
    first_done = threading.Event()

    def gather_all(self, window, chain, draws):
        if chain == 0:  # chain 0 reaches the first window's end, the run is stopped there
            self.stop.set()
            out = real(self, window, chain, draws)
            first_done.set()
            return out
        first_done.wait(30)
        return real(self, window, chain, draws)

    monkeypatch.setattr(MetricPool, "gather_all", gather_all)
    partial = _quiet(sample_private, model(), checkpoint=tmp_path, checkpoint_every=40, **COMMON,
                     **RUNS["dp-sgnht"])
    monkeypatch.setattr(MetricPool, "gather_all", real)
    assert int(partial.attrs["interrupted"]) == 1
    found = load_checkpoint(tmp_path)
    window = found.snapshots[0].scalars["pending_window"]
    assert window is not None and found.chain_done[0] == window + 1
    assert found.snapshots[1].scalars["pending_window"] in (None, window)
    fit = _quiet(resume_private, tmp_path, model(), show_progress=False)
    np.testing.assert_array_equal(_draws(fit), _draws(full))


def test_a_backend_failure_checkpoints_the_chains_as_before_the_failed_iteration(tmp_path):
    """A backend failure mid-iteration (a lost Ray worker) publishes the partial fit with BackendError; the
    checkpoint holds each chain as it was before the failed iteration, generator state included, so that the run
    resumed on a working backend gives the uninterrupted run's draws bit for bit."""
    from stan_dp.stan.backend_error import BackendError

    full = _reference_fit("penalty")
    with pytest.raises(BackendError, match="shard 1 lost") as failed:
        _quiet(sample_private, _stopping_model(None, 170, fail=True), checkpoint=tmp_path, checkpoint_every=40,
               **COMMON, **RUNS["penalty"])
    partial = failed.value.partial_fit
    assert load_checkpoint(tmp_path).chain_done == json.loads(partial.attrs["iterations_per_chain"])
    fit = _quiet(resume_private, tmp_path, model(), show_progress=False)
    np.testing.assert_array_equal(_draws(fit), _draws(full))


@pytest.mark.parametrize("name", ["penalty", "dp-hmc", "dp-fast-mh-full"])
def test_a_checkpoint_holds_no_per_row_array_and_no_noise_free_sum(name, tmp_path, monkeypatch):
    """The kernels' values at the current point (every row's log-likelihood for penalty, DP-HMC and full-batch
    DP-Fast MH; DP-HMC's noise-free clipped gradient sum) are left out of a checkpoint: no stored array has an axis
    of the row count (300), and no stored number or array equals the noise-free sums at the chain's point
    (computed here from the rows), in the arrays file or the header. The resumed chain computes them again and
    still gives the uninterrupted run's draws bit for bit."""
    from stan_dp.privacy import mechanisms

    _interrupted_run(tmp_path, name, 3, monkeypatch)
    found = load_checkpoint(tmp_path)
    rows = model()
    n = rows.n_rows
    header = json.loads((tmp_path / ck.HEADER).read_text())
    with np.load(tmp_path / header["arrays"], allow_pickle=False) as npz:
        arrays = {key: npz[key] for key in npz.files}
    assert not [key for key, a in arrays.items() if n in a.shape], "an array with a per-row axis"
    numbers = [float(v) for a in arrays.values() for v in np.ravel(a) if np.issubdtype(a.dtype, np.number)]
    numbers += [float(v[1]) for chain in header["chains"] for v in chain["cache"].values()
                if v[0] == "float"]
    for snap in found.snapshots:
        theta = snap.arrays["theta"]
        values, grads = rows.row_log_lik_grad(theta)
        sums = {"log-likelihood sum": [float(np.sum(values))]}
        if name == "dp-hmc":
            sums["clipped gradient sum"] = list(mechanisms.clipped_gradient_sum(grads, 2.0))
        for what, targets in sums.items():
            assert not any(np.isclose(x, t, rtol=1e-9, atol=0.0) for x in numbers for t in targets), what
        kept = {key[len("cache."):] for key in snap.arrays if key.startswith("cache.")}
        assert not kept & {"row_log_lik", "clipped_grad_sum", "log_prior_grad"}, kept
        assert set(snap.scalars["cache_dropped"]) <= set(("theta", "row_log_lik", "clipped_grad_sum", "log_prior",
                                                         "log_prior_grad"))
    fit = _quiet(resume_private, tmp_path, model(), show_progress=False)
    np.testing.assert_array_equal(_draws(fit), _draws(_reference_fit(name)))
