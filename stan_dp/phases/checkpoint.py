"""Checkpoints of a private run: what lets a killed run continue its plan without spending a new budget.

A checkpoint directory holds two files, both PRIVATE material that stays with the data owner, like the rows:

* ``checkpoint.json``: the header. It says what the file is and that it is private, the run's status
  ("running" or "finished"), a SHA-256 of the Stan program (or of the likelihood's class), of the data's shapes
  (variable names, dimensions, the row count) and of the data's VALUES, one per variable (``row_digests``; of the
  rows' evaluations for a likelihood that names no variables), the run's arguments (from which the plan is
  rebuilt and checked against a fingerprint of its calibrated noise), the values the phases before the chains
  released (the anchor's noisy gradient and point, the warm start's iteration count), every chain's counters,
  step-size adaptation and generator state, the name and SHA-256 of the arrays file, and a SHA-256 of the header
  itself.
* ``arrays-NNNNNN.npz``: every chain's position, the kernel's arrays (momentum, thermostat; never a value computed
  from the rows, which a resumed chain computes again), metric, current window draws, and the draws and statistics
  so far.

Neither file can execute code when loaded (JSON, and ``numpy.load`` with ``allow_pickle=False``). A write is
atomic: the arrays go to a new file (written to a temporary name, flushed to disk, renamed), then the header
that names it replaces the old header the same way; an older arrays file is removed only after that. A process
killed at any moment leaves either the previous checkpoint or the new one, whole.

What is in a checkpoint and why it must stay private: the generators' states predict every noise draw still to
come (with them and the released draws one can subtract the noise), the digests of the data's values are
functions of every row, and the seed (stored when the run was seeded) reproduces all noise. Running the same noise
on other data would show the difference of the data without noise, which the budget does not cover: a resume on
data whose values differ is refused (by the name of what differs, never a value or a digest), a run stopped early
checkpoints exactly the iterations it published (so a resume never draws one of them again), and a checkpoint is
marked "finished" once its run has published its whole result; a finished checkpoint is refused.

Test hook: the environment variable ``STAN_DP_CHECKPOINT_KILL`` set to ``during:K`` or ``after:K`` sends SIGKILL to
the process in the middle of (after the arrays file, before the header) or right after the K-th write of this
process; the tests use it to kill a run at a known point.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np

from .._version import __version__
from ..likelihood import ROW_VALUES, DigestsRows, RowLikelihood, evaluation_digests, offers
from ..privacy.mechanisms import private_arithmetic
from .anchor import AnchorRelease
from .chains import ChainSnapshot, ResumeState

__all__ = ["Cadence", "Checkpoint", "CheckpointError", "Checkpointer", "DEFAULT_SECONDS", "HEADER", "load_checkpoint",
           "parse_cadence", "shapes_hash"]

#: the header's file name inside a checkpoint directory
HEADER = "checkpoint.json"
FORMAT = "stan-dp checkpoint"
VERSION = 2
#: default cadence: a checkpoint every this many seconds of run time (and one before the chains' first iteration)
DEFAULT_SECONDS = 60.0
PRIVATE_NOTICE = (
    "PRIVATE: this checkpoint holds the private state of a differentially private run (generator states that "
    "predict the noise still to be drawn, the kernel's momentum and cached per-row values, the seed of a seeded "
    "run). It stays with the data owner, like the rows; never publish or share it. Resume it at most once "
    "(stan_dp.resume / stan-dp resume): its run is then marked finished.")
_KILL_HOOK = "STAN_DP_CHECKPOINT_KILL"


class CheckpointError(ValueError):
    """A checkpoint that cannot be written or resumed (finished, another program or data, corrupted)."""


@dataclass(frozen=True)
class Cadence:
    """When checkpoints are written: every ``iterations`` iterations of every chain, or every ``seconds``."""

    iterations: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return f"every {self.iterations} iterations" if self.iterations else f"every {self.seconds:g} s"


def parse_cadence(every: Any) -> Cadence:
    """``checkpoint_every``: None (every ``DEFAULT_SECONDS`` seconds), an int K >= 1 (every K iterations of each
    chain), or seconds as a float or a string ``"30s"``."""
    if every is None:
        return Cadence(seconds=DEFAULT_SECONDS)
    if isinstance(every, str):
        text = every.strip().lower()
        try:
            if text.endswith("s"):
                return _seconds(float(text[:-1]))
            return parse_cadence(int(text))
        except ValueError:
            raise CheckpointError(f"checkpoint_every must be a number of iterations (e.g. 500) or of seconds "
                                  f"(e.g. '60s'), got {every!r}") from None
    if isinstance(every, (bool, np.bool_)):
        raise CheckpointError(f"checkpoint_every must be a number of iterations or of seconds, got {every!r}")
    if isinstance(every, (int, np.integer)):
        if every < 1:
            raise CheckpointError(f"checkpoint_every must be at least 1 iteration, got {every}")
        return Cadence(iterations=int(every))
    if isinstance(every, (float, np.floating)):
        return _seconds(float(every))
    raise CheckpointError(f"checkpoint_every must be a number of iterations or of seconds, got {every!r}")


def _seconds(value: float) -> Cadence:
    if not (math.isfinite(value) and value > 0):
        raise CheckpointError(f"checkpoint_every in seconds must be positive and finite, got {value!r}")
    return Cadence(seconds=value)


# ------------------------------------------------------------------------------------------------ encoding
def encode(value: Any) -> Any:
    """``value`` as JSON values: arrays tagged with their dtype and shape (exact round trip through ``decode``),
    NumPy scalars as Python numbers. ``CheckpointError`` for anything else JSON cannot hold."""
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v) for v in value]
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str, "shape": list(value.shape)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise CheckpointError(f"a checkpoint cannot hold a {type(value).__name__} ({value!r})")


def decode(value: Any) -> Any:
    """The inverse of ``encode``."""
    if isinstance(value, dict):
        if "__ndarray__" in value:
            return np.array(value["__ndarray__"], dtype=np.dtype(value["dtype"])).reshape(value["shape"])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    return value


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, allow_nan=True).encode()).hexdigest()


def shapes_hash(shapes: dict[str, Any]) -> str:
    """SHA-256 of the data's SHAPES (names and dimensions, e.g. ``{"N": [], "x": [N, K]}``)."""
    return _digest(encode(shapes))


def row_digests(likelihood: RowLikelihood) -> dict[str, str]:
    """What binds a checkpoint to the values of its rows: the likelihood's digests by variable name
    (``stan_dp.likelihood.DigestsRows``, e.g. a Stan program's data), else a digest of every row's log-likelihood
    and gradient at fixed public points under ``ROW_VALUES`` (``evaluation_digests``). PRIVATE (a function of every
    row): kept inside the checkpoint, compared on resume, never released, never quoted in a message."""
    with private_arithmetic():  # per-row evaluations: no warning may depend on them
        if offers(likelihood, DigestsRows):
            return dict(cast(DigestsRows, likelihood).row_digests())
        return evaluation_digests(likelihood)


def rows_refusal(directory: Any, stored: dict[str, str], given: dict[str, str]) -> str | None:
    """None when the digests ``given`` equal those a checkpoint ``stored``; else the refusal, which names what
    differs (the variables, or the row values) and no value or digest."""
    differ = sorted(name for name in set(stored) | set(given) if stored.get(name) != given.get(name))
    if not differ:
        return None
    what = ROW_VALUES if differ == [ROW_VALUES] else "the values of " + ", ".join(f"'{name}'" for name in differ)
    return (f"the checkpoint in {directory} was written for other data: {what} differ from those the run started "
            "with. A resumed run repeats the planned noise; on other values the two results together would show "
            "the difference of the data without noise, which the budget does not cover. Resume it with the data it "
            "was started with")


# ------------------------------------------------------------------------------------------------ files
def _write_atomic(path: Path, payload: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _sync_directory(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a platform without directory handles: the renames are still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _header_bytes(header: dict[str, Any]) -> bytes:
    body = {k: v for k, v in header.items() if k != "header_sha256"}
    return json.dumps({**body, "header_sha256": _digest(body)}, indent=1, allow_nan=True).encode()


def _kill_hook(moment: str, count: int) -> None:
    """The test hook (module docstring): SIGKILL this process at ``moment`` of the ``count``-th write."""
    spec = os.environ.get(_KILL_HOOK, "")
    if spec and spec == f"{moment}:{count}":
        os.kill(os.getpid(), signal.SIGKILL)


def snap_done(snapshot: ChainSnapshot) -> int:
    """The iterations a chain's snapshot has completed (warmup and sampling)."""
    return int(snapshot.scalars["n_warm"]) + int(snapshot.scalars["n_samp"])


# ------------------------------------------------------------------------------------------------ reading
@dataclass
class Checkpoint:
    """A loaded, verified checkpoint: its header (decoded) and every chain's snapshot."""

    directory: Path
    header: dict[str, Any]
    snapshots: list[ChainSnapshot]

    @property
    def run(self) -> dict[str, Any]:
        """The run's arguments (``sample_private``'s keywords and the algorithm's options)."""
        return decode(self.header["run"])

    @property
    def context(self) -> dict[str, Any]:
        """What the caller stored to rebuild the likelihood (``DPStanModel``: the program path, row split, ...)."""
        return decode(self.header["context"])

    @property
    def done(self) -> int:
        """Iterations every chain had completed when the checkpoint was written (the fewest of any chain: after an
        early stop, chains may stand at different iterations, ``chain_done``)."""
        return int(self.header["iterations_done"])

    @property
    def chain_done(self) -> list[int]:
        """Iterations each chain had completed when the checkpoint was written."""
        return [snap_done(snap) for snap in self.snapshots]

    @property
    def anchor(self) -> AnchorRelease | None:
        """What the anchor phase released (reused as it was: no new noise), or None."""
        stored = self.header["phases"].get("anchor")
        return None if stored is None else AnchorRelease(**decode(stored))

    @property
    def warm_iterations(self) -> int:
        return int(self.header["phases"]["warm_iterations"])

    def resume_state(self) -> ResumeState:
        return ResumeState(self.snapshots, str(self.header["init_description"]))


def load_checkpoint(directory: str | os.PathLike, *, allow_finished: bool = False) -> Checkpoint:
    """Read and verify the checkpoint in ``directory``. ``CheckpointError`` when there is none, when it is
    truncated or corrupted (a hash does not match), of another format version, or finished (unless
    ``allow_finished``)."""
    directory = Path(directory)
    path = directory / HEADER
    if not path.is_file():
        raise CheckpointError(f"no checkpoint in {directory} (no {HEADER}); give the directory a run was started "
                              "with checkpoint=... (stan-dp sample --checkpoint DIR)")
    try:
        header = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"the checkpoint header {path} is corrupted or truncated ({exc}); it cannot be "
                              "resumed") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a stan-dp checkpoint")
    if header.get("header_sha256") != _digest({k: v for k, v in header.items() if k != "header_sha256"}):
        raise CheckpointError(f"the checkpoint header {path} is corrupted (its SHA-256 does not match); it cannot "
                              "be resumed")
    if header.get("version") != VERSION:
        raise CheckpointError(f"checkpoint format version {header.get('version')} is not supported (this stan-dp "
                              f"reads version {VERSION})")
    if header.get("status") == "finished" and not allow_finished:
        raise CheckpointError(
            f"the run in {directory} is finished: its result was already published. Resuming it again would run "
            "the same noise a second time (possibly on other data), which its budget does not cover; start a new "
            "run (a new budget) instead")
    arrays_path = directory / str(header.get("arrays"))
    try:
        payload = arrays_path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"the checkpoint's arrays file is missing ({exc}); it cannot be resumed") from None
    if hashlib.sha256(payload).hexdigest() != header.get("arrays_sha256"):
        raise CheckpointError(f"the checkpoint's arrays file {arrays_path} is corrupted or truncated (its SHA-256 "
                              "does not match the header); it cannot be resumed")
    with np.load(io.BytesIO(payload), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    snapshots = []
    for c, scalars in enumerate(header["chains"]):
        prefix = f"c{c}."
        snapshots.append(ChainSnapshot(decode(scalars), {k[len(prefix):]: v for k, v in arrays.items()
                                                          if k.startswith(prefix)}))
    return Checkpoint(directory, header, snapshots)


# ------------------------------------------------------------------------------------------------ writing
class Checkpointer:
    """Writes a run's checkpoints into ``directory`` at ``cadence`` (``stan_dp.phases.chains.ChainCheckpoints``).

    ``header`` holds the run's identity, arguments and plan fingerprint (``stan_dp.run.pipeline``); the phases
    before the chains add their releases with ``set_phases``; the chain loop hands every chain's snapshot over
    (``begin``, then ``due`` / ``deliver``) and the checkpoint is written once every chain has given its snapshot of
    the same iteration, by the thread of the chain that gave the last one. ``finish`` marks the run finished.
    """

    def __init__(self, directory: str | os.PathLike, cadence: Cadence, header: dict[str, Any], *,
                 existing: Checkpoint | None = None) -> None:
        self.directory = Path(directory)
        self.cadence = cadence
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[int, dict[int, ChainSnapshot]] = {}
        self._target: int | None = None
        self._last_time = time.monotonic()
        self._writes = 0
        self._done: list[int] = []
        self._total = 0
        if existing is not None:  # a resumed run keeps writing into its checkpoint
            self.header = dict(existing.header)
            self._sequence = int(self.header["sequence"])
            self._done = [snap_done(snap) for snap in existing.snapshots]
            self._total = int(self.header["total"])
            return
        if (self.directory / HEADER).exists():
            raise CheckpointError(f"{self.directory} already holds a checkpoint; resume it (stan_dp.resume / stan-dp "
                                  "resume) or give an empty directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CheckpointError(f"cannot create the checkpoint directory {self.directory}: {exc}") from None
        if not os.access(self.directory, os.W_OK):
            raise CheckpointError(f"the checkpoint directory {self.directory} is not writable")
        self.header = {"format": FORMAT, "version": VERSION, "notice": PRIVATE_NOTICE, "status": "running",
                       "package_version": __version__, **header, "phases": {"anchor": None, "warm_iterations": 0},
                       "cadence": dataclasses.asdict(cadence), "sequence": 0}
        self._sequence = 0

    def bind_rows(self, digests: dict[str, str]) -> None:
        """Bind the checkpoint to the values of the rows (``row_digests``: PRIVATE, kept in the header only)."""
        self.header["row_digests"] = dict(digests)

    # -- the phases before the chains
    def set_phases(self, anchor: AnchorRelease | None, warm_iterations: int) -> None:
        """Record what the phases before the chains released: reused on resume, never drawn again."""
        self.header["phases"] = {"anchor": None if anchor is None else encode(dataclasses.asdict(anchor)),
                                 "warm_iterations": int(warm_iterations)}

    # -- the chain loop (stan_dp.phases.chains.ChainCheckpoints)
    def begin(self, snapshots: list[ChainSnapshot], init_description: str, total: int) -> None:
        self.header["init_description"] = init_description
        self._total = int(total)
        self._done = [0] * len(snapshots)
        self._write(0, dict(enumerate(snapshots)))

    def due(self, chain: int, done: int) -> bool:
        with self._lock:
            self._done[chain] = done
            if done >= self._total:  # the run ends here: its result, not a checkpoint, comes next
                return False
            if self.cadence.iterations is not None:
                return done % self.cadence.iterations == 0
            if self._target is None and time.monotonic() - self._last_time >= float(self.cadence.seconds or 0.0):
                target = max(self._done) + 1  # no chain has completed it yet (all report under this lock)
                self._target = target if target < self._total else None
            return done == self._target

    def deliver(self, chain: int, done: int, snapshot: ChainSnapshot) -> None:
        with self._lock:
            got = self._pending.setdefault(done, {})
            got[chain] = snapshot
            if len(got) < len(self._done):
                return
            del self._pending[done]
        # written outside the lock: the other chains keep stepping (this chain cannot give a later snapshot
        # before this write ends, so writes come in order)
        with self._write_lock:
            self._write(done, got)
        with self._lock:
            if self._target == done:
                self._target = None
                self._last_time = time.monotonic()

    def stopped(self, snapshots: list[ChainSnapshot]) -> None:
        """The run stopped early and publishes its partial result: write every chain's state where it stopped
        (chains may stand at different iterations; each resumes from its own), replacing any checkpoint of the
        cadence, so that a resumed run never draws a published iteration again."""
        with self._write_lock:
            self._pending.clear()
            self._done = [snap_done(snap) for snap in snapshots]
            self._write(min(self._done), dict(enumerate(snapshots)))

    def finish(self) -> None:
        """Mark the run finished (its result is published): the checkpoint can no longer be resumed."""
        with self._write_lock:
            self.header["status"] = "finished"
            _write_atomic(self.directory / HEADER, _header_bytes(self.header))
            _sync_directory(self.directory)

    def _write(self, done: int, snapshots: dict[int, ChainSnapshot]) -> None:
        arrays: dict[str, np.ndarray] = {}
        chains = []
        for c in sorted(snapshots):
            arrays.update({f"c{c}.{name}": value for name, value in snapshots[c].arrays.items()})
            chains.append(encode(snapshots[c].scalars))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
        payload = buffer.getvalue()
        self._sequence += 1
        self._writes += 1
        name = f"arrays-{self._sequence:06d}.npz"
        _write_atomic(self.directory / name, payload)
        _kill_hook("during", self._writes)
        self.header.update(iterations_done=int(done), total=self._total, chains=chains, arrays=name,
                           arrays_sha256=hashlib.sha256(payload).hexdigest(), sequence=self._sequence)
        _write_atomic(self.directory / HEADER, _header_bytes(self.header))
        _sync_directory(self.directory)
        for old in self.directory.glob("arrays-*.npz"):
            if old.name != name:
                old.unlink(missing_ok=True)
        _kill_hook("after", self._writes)
