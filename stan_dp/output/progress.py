"""Progress bars on stderr that show counts only and do not flood logs.

What a bar shows is a count of iterations (or steps, or draws) against the planned total: public. It shows no
elapsed time, rate or time remaining, because the speed of a private run can depend on the private rows (OPS's
internal NUTS, for one, takes data-dependent tree depths), and a terminal capture or a redirected log is
something a user may publish. When stderr is not a terminal the bar writes its first and last line only: a line
every N seconds would record the count reached at known times, which is the speed again.
"""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar", "BAR_FORMAT"]

#: counts only: no elapsed time, rate or estimate of the time left (see the module doc)
BAR_FORMAT = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} {unit}"
#: off a terminal: no redraw between the first and the last line (seconds; longer than any run)
_NEVER = 1e12


def progress_bar(*, total: int, desc: str, unit: str, show: bool = True, **kwargs: Any):
    """A ``tqdm`` bar on stderr with counts only (``BAR_FORMAT``); disabled when ``show`` is False. On a terminal
    it redraws live; when stderr is not a terminal (a file, a pipe, CI logs) it writes the first and the last
    line only."""
    from tqdm.auto import tqdm

    stream = sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    options: dict[str, Any] = {"file": stream, "disable": not show, "dynamic_ncols": is_tty,
                               "bar_format": BAR_FORMAT}
    if not is_tty:
        options.update(mininterval=_NEVER, maxinterval=_NEVER, ascii=True)
    options.update(kwargs)
    return tqdm(total=total, desc=desc, unit=unit, **options)
