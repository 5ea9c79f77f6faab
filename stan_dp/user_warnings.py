"""Warnings that point at the user's line, not at the package's internals.

``warnings.warn(..., stacklevel=k)`` needs every caller to count its frames, and a public entry point that calls
another (``DPStanModel.sample`` -> ``sample_private`` -> ...) gets the count wrong for one of them. :func:`warn`
instead attributes the warning to the first frame outside the ``stan_dp`` package: the line of the user's
script, notebook cell or test that called into it. A seam below every stage: it imports nothing of the package.
"""
from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _outside_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the package, counted from the caller of this function
    (1 = that caller; the last frame when the whole stack is inside the package)."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE_DIR):
        frame = frame.f_back
        level += 1
    return level


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn(message, category)`` attributed to the user's code (the first frame outside stan_dp)."""
    warnings.warn(message, category, stacklevel=_outside_stacklevel())
