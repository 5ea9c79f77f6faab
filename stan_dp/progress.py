"""Progress bars on stderr that do not flood logs: a live bar on a terminal, a line every 30 s otherwise."""
from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar", "NON_TTY_INTERVAL"]

#: seconds between progress lines when stderr is not a terminal (a file, a pipe, CI logs)
NON_TTY_INTERVAL = 30.0


def progress_bar(*, total: int, desc: str, unit: str, show: bool = True, **kwargs: Any):
    """A ``tqdm`` bar on stderr; disabled when ``show`` is False. When stderr is not a terminal the bar redraws
    at most every ``NON_TTY_INTERVAL`` seconds (instead of ten times a second), so a redirected log gets a few
    lines rather than thousands of carriage-return updates."""
    from tqdm.auto import tqdm

    stream = sys.stderr
    is_tty = bool(getattr(stream, "isatty", lambda: False)())
    options: dict[str, Any] = {"file": stream, "disable": not show, "dynamic_ncols": is_tty}
    if not is_tty:
        options.update(mininterval=NON_TTY_INTERVAL, maxinterval=NON_TTY_INTERVAL * 4, ascii=True)
    options.update(kwargs)
    return tqdm(total=total, desc=desc, unit=unit, **options)
