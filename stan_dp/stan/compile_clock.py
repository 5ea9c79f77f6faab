"""How long a compile takes on this machine, and a sign of life while one runs.

A first compile builds the package's C++ objects and the precompiled Stan header and then the program (minutes on
a small machine); a new program later takes under a minute. Rather than a fixed estimate, the cache records how
long its last compiles took (``compile_times.json`` in the cache folder, one entry per kind: ``"program"`` when the
package's objects and header were already built, ``"program and package"`` when they were built too), and the
compile notice quotes the record.
While the compiler runs, :class:`Heartbeat` shows that it is working: a spinner with the seconds so far on a
terminal, and a line every ``INTERVAL`` seconds otherwise (a log file).

Privacy: a compile reads the Stan program and the toolchain, never the data, so its duration says nothing about
any row and may be printed and recorded.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

__all__ = ["INTERVAL", "RECORD", "Heartbeat", "compile_notice", "last_compile", "record_compile"]

#: file in the cache folder holding the last compile time per kind (seconds)
RECORD = "compile_times.json"
#: seconds between two "still compiling" lines when stderr is not a terminal
INTERVAL = 10.0
#: what the notice says when the cache holds no record of this kind yet
_FIRST_GUESS = {"program": "usually under a minute", "program and package": "usually 2-5 minutes"}


def _read(root: Path) -> dict[str, float]:
    try:
        data = json.loads((root / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))} if isinstance(data, dict) else {}


def last_compile(root: Path, kind: str) -> float | None:
    """Seconds the last compile of ``kind`` took with this cache, or None when none is recorded."""
    return _read(root).get(kind)


def record_compile(root: Path, kind: str, seconds: float) -> None:
    """Record that a compile of ``kind`` took ``seconds`` (atomic replace; a failure to write is ignored: the
    record only improves the next notice)."""
    data = _read(root)
    data[kind] = round(float(seconds), 1)
    try:
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".compile_times-")
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle)
        os.replace(tmp, root / RECORD)
    except OSError:
        pass


def compile_notice(file_name: str, root: Path, kind: str) -> str:
    """``Compiling model.stan (the last compile here took 74 s; cached afterwards) ...``"""
    seconds = last_compile(root, kind)
    package = " with the package's C++ (first use)" if kind == "program and package" else ""
    took = (f"the last such compile on this machine took {seconds:.0f} s" if seconds is not None
            else f"{_FIRST_GUESS.get(kind, 'a few minutes')}; no earlier compile is recorded on this machine")
    return f"Compiling {file_name}{package} ({took}; cached afterwards) ..."


class Heartbeat:
    """While the ``with`` block runs, show that ``what`` is still working: on a terminal a spinner with the
    seconds so far (redrawn every second, erased at the end), elsewhere one line every ``interval`` seconds.
    ``show=False`` prints nothing."""

    def __init__(self, what: str, *, show: bool = True, interval: float = INTERVAL, stream: IO[str] | None = None):
        self.what, self.show, self.interval = what, show, float(interval)
        self.stream = stream if stream is not None else sys.stderr
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = 0.0

    def __enter__(self) -> "Heartbeat":
        self.started = time.monotonic()
        if self.show:
            self._thread = threading.Thread(target=self._beat, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def elapsed(self) -> float:
        """Seconds since the block began."""
        return time.monotonic() - self.started

    def _beat(self) -> None:
        tty = bool(getattr(self.stream, "isatty", lambda: False)())
        frames, k = "|/-\\", 0
        while not self._stop.wait(1.0 if tty else self.interval):
            k += 1
            if tty:
                self.stream.write(f"\r  {frames[k % 4]} {self.what}: {self.elapsed:.0f} s ")
            else:
                self.stream.write(f"  ... {self.what}: {self.elapsed:.0f} s so far\n")
            self.stream.flush()
        if tty and k:
            self.stream.write("\r" + " " * (len(self.what) + 16) + "\r")
            self.stream.flush()
