"""A simulated crash right after a checkpoint write, shared by the checkpoint tests."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from stan_dp.phases import checkpoint as ck


@contextmanager
def crash_after_writes(monkeypatch: pytest.MonkeyPatch, after_writes: int = 1) -> Iterator[None]:
    """Within the block, the ``after_writes``-th checkpoint write (counted from the block's start) raises
    ``RuntimeError("simulated crash")`` once the checkpoint is on disk, and the block expects that error; the
    writer is restored on leaving."""
    original = ck.Checkpointer._write
    count = {"n": 0}

    def failing_write(self, done, snapshots):
        original(self, done, snapshots)
        count["n"] += 1
        if count["n"] == after_writes:
            raise RuntimeError("simulated crash")

    monkeypatch.setattr(ck.Checkpointer, "_write", failing_write)
    try:
        with pytest.raises(RuntimeError, match="simulated crash"):
            yield
    finally:
        monkeypatch.setattr(ck.Checkpointer, "_write", original)
