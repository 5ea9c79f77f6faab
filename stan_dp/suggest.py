"""Name suggestions for typos in user input ("did you mean income?"), shared by every stage.

A suggestion names only candidates the program or the package declares (variable, parameter and option names
are public), never a data value. A seam below every stage: it imports nothing of the package.
"""
from __future__ import annotations

import difflib
from typing import Iterable

__all__ = ["closest", "did_you_mean"]

#: how similar a name must be to count as a likely typo (difflib's ratio; 0.6 is its default)
CUTOFF = 0.6


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (a likely typo of it), or None when none is close enough. Case is
    ignored (``Y`` suggests ``y``); a candidate equal to ``name`` but for case comes first."""
    originals = [str(c) for c in candidates]
    lowered: dict[str, str] = {}
    for c in originals:
        lowered.setdefault(c.lower(), c)
    key = str(name).lower()
    if key in lowered and lowered[key] != str(name):
        return lowered[key]
    matches = difflib.get_close_matches(key, list(lowered), n=1, cutoff=CUTOFF)
    return lowered[matches[0]] if matches else None


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """``" (did you mean income?)"`` for the candidate closest to ``name``, or ``""`` when none is close."""
    match = closest(name, candidates)
    return f" (did you mean {match}?)" if match is not None and match != name else ""
