"""Progress bars on stderr that show counts only and do not flood logs.

What a bar shows is a count of iterations (or steps, or draws) against the planned total: public. It shows no
elapsed time, rate or time remaining, because the speed of a private run can depend on the private rows (OPS's
internal NUTS, for one, takes data-dependent tree depths; the number of rows under a privacy unit sets the cost of
an iteration), and a terminal capture or a redirected log is something a user may publish.

When stderr is not a terminal (a log file, a pipe, CI) the bar writes exactly ``STEPS + 1`` whole lines for a run
that completes: one at the start (0 %) and one at each whole tenth of the planned total (the count
``k * total // STEPS`` for k = 1 .. 10), each ending in a newline. The count a line shows is always such a tenth,
never the count reached when the caller happened to look (the chain loop polls every 0.1 s: a line at whatever
count a poll saw would measure the speed between two polls, which depends on the rows). A run stopped early writes
the lines of the tenths it passed and nothing else. So a log file holds a function of the planned total and of how
far the run got, no time and no speed.
"""
from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["progress_bar", "BAR_FORMAT", "STEPS", "TenthsBar", "tenths"]

#: counts only: no elapsed time, rate or estimate of the time left (see the module doc)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}"
#: off a terminal: no redraw driven by time (seconds; longer than any run)
_NEVER = 1e12
#: off a terminal: a line at every 1 / STEPS of the total
STEPS = 10


def tenths(total: int) -> list[int]:
    """The counts at which a bar off a terminal writes a line: ``k * total // STEPS`` for k = 1 .. ``STEPS`` (equal
    counts, for a total under ``STEPS``, give one line)."""
    return [k * int(total) // STEPS for k in range(1, STEPS + 1)]


class _Lines:
    """A stream for a bar off a terminal: every redraw (tqdm starts it with a carriage return) becomes one whole
    line ending in a newline, and a line equal to the previous one is dropped."""

    def __init__(self, stream: IO[str]):
        self.stream = stream
        self.last = ""

    def write(self, text: str) -> int:
        for piece in text.replace("\r", "\n").split("\n"):
            piece = piece.strip()
            if piece and piece != self.last:
                self.stream.write(piece + "\n")
                self.last = piece
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


class TenthsBar:
    """A bar off a terminal that moves only at whole tenths of its total (``tenths``), one line per tenth.

    ``n`` is the count the caller has reported so far (callers advance with ``update(count - bar.n)``); the
    ``tqdm`` bar underneath is advanced to each tenth that count has passed, one tenth at a time, so that every
    tenth gets its own line however many the caller's count jumped over at once."""

    def __init__(self, bar: Any, total: int):
        self._bar = bar
        self._marks = tenths(total)
        self._next = 0  # index of the next tenth to show
        self.n = 0

    def update(self, count: int = 1) -> None:
        """Add ``count`` to the reported count and show every tenth it passed."""
        self.n += int(count)
        while self._next < len(self._marks) and self._marks[self._next] <= self.n:
            self._bar.update(self._marks[self._next] - self._bar.n)
            self._bar.refresh()
            self._next += 1

    def set_description_str(self, desc: str, refresh: bool = True) -> None:
        """The label of the lines still to come (no line is written for it)."""
        self._bar.set_description_str(desc, refresh=False)

    def write(self, text: str, file: IO[str] | None = None) -> None:
        """A message on its own line (``tqdm.write``)."""
        self._bar.write(text, file=file)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> "TenthsBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def progress_bar(*, total: int, desc: str, unit: str, show: bool = True, **kwargs: Any) -> Any:
    """A ``tqdm`` bar on stderr with counts only (``BAR_FORMAT``); disabled when ``show`` is False. On a terminal
    it redraws live; when stderr is not a terminal (a file, a pipe, CI logs) it is a ``TenthsBar``: one line at the
    start and one at each whole tenth of ``total`` (``STEPS``), each a whole line, ``STEPS + 1`` lines in all for a
    run that completes. Callers use ``update``, ``n``, ``write``, ``set_description_str``, ``close`` and ``with``."""
    from tqdm.auto import tqdm

    stream = sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    options: dict[str, Any] = {"file": stream, "disable": not show, "dynamic_ncols": is_tty,
                               "bar_format": BAR_FORMAT}
    if is_tty:
        options.update(kwargs)
        return tqdm(total=total, desc=desc, unit=unit, **options)
    options.update(file=_Lines(stream), mininterval=0.0, maxinterval=_NEVER, ascii=True, miniters=1)
    options.update(kwargs)
    return TenthsBar(tqdm(total=total, desc=desc, unit=unit, **options), int(total))
