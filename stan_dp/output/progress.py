"""Progress bars on stderr that show counts only and do not flood logs.

What a bar shows is a count of iterations (or steps, or draws) against the planned total: public. It shows no
elapsed time, rate or time remaining, because the speed of a private run can depend on the private rows (OPS's
internal NUTS, for one, takes data-dependent tree depths), and a terminal capture or a redirected log is
something a user may publish. When stderr is not a terminal (a log file, a pipe, CI) the bar writes one whole line
(ending in a newline) at the start and at every tenth of the total: a cadence in counts, not in time. A line every
N seconds would record the count reached at known times, which is the speed again; a line per tenth carries no
time, so a log file holds no more than the counts a terminal shows.
"""
from __future__ import annotations

import sys
from typing import IO, Any

__all__ = ["progress_bar", "BAR_FORMAT", "STEPS"]

#: counts only: no elapsed time, rate or estimate of the time left (see the module doc)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}"
#: off a terminal: no redraw driven by time (seconds; longer than any run)
_NEVER = 1e12
#: off a terminal: a line at every 1 / STEPS of the total
STEPS = 10


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


def progress_bar(*, total: int, desc: str, unit: str, show: bool = True, **kwargs: Any):
    """A ``tqdm`` bar on stderr with counts only (``BAR_FORMAT``); disabled when ``show`` is False. On a terminal
    it redraws live; when stderr is not a terminal (a file, a pipe, CI logs) it writes one line at the start and
    one at every tenth of ``total`` (``STEPS``), each a whole line."""
    from tqdm.auto import tqdm

    stream = sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    options: dict[str, Any] = {"file": stream, "disable": not show, "dynamic_ncols": is_tty,
                               "bar_format": BAR_FORMAT}
    if not is_tty:
        options.update(file=_Lines(stream), mininterval=0.0, maxinterval=_NEVER, ascii=True,
                       miniters=max(1, int(total) // STEPS))
    options.update(kwargs)
    return tqdm(total=total, desc=desc, unit=unit, **options)
