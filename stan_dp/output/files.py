"""Output files that are checked before a run and never lost after it.

A private run spends its budget once: a second run to recover draws lost to a bad path spends it again. So
:func:`check_output_path` validates a path (suffix, parent directory exists and is writable, not a directory)
before any private row is read, and :func:`write_or_fallback` saves to a fallback file when writing still fails
after the run, and says where.
"""
from __future__ import annotations

import os
import sys
import tempfile
import secrets
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["OutputPathError", "check_output_path", "fallback_path", "write_or_fallback"]


class OutputPathError(ValueError):
    """An output path that cannot be written (the message says why and what to do)."""


def check_output_path(path: str | os.PathLike, *, suffixes: Sequence[str] = (".nc",), what: str = "--output",
                      ) -> Path:
    """``path`` as a Path after checking it can be written; ``OutputPathError`` naming the problem otherwise.

    Checks: the suffix is one of ``suffixes`` (case-insensitive; empty ``suffixes`` accepts any), the path is
    not an existing directory, its parent directory exists and is a directory, and a file can be created there
    (a probe file is created and removed; an existing file at ``path`` is left untouched).
    """
    p = Path(path).expanduser()
    if not str(path).strip():
        raise OutputPathError(f"{what} is empty.\nGive a file name, e.g. {what} fit{suffixes[0] if suffixes else ''}.")
    if suffixes and p.suffix.lower() not in {s.lower() for s in suffixes}:
        raise OutputPathError(
            f"{what} {path} does not end in {' or '.join(suffixes)}.\n"
            f"Use a file name ending in {suffixes[0]}, e.g. {p.with_suffix(suffixes[0]).name}."
        )
    if p.is_dir():
        raise OutputPathError(f"{what} {path} is a directory.\nGive a file name inside it, e.g. {p / ('fit' + (suffixes[0] if suffixes else ''))}.")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.exists():
        raise OutputPathError(f"{what} {path}: the directory {parent} does not exist.\nCreate it first (mkdir -p {parent}) or choose another path.")
    if not parent.is_dir():
        raise OutputPathError(f"{what} {path}: {parent} is not a directory.\nChoose a path inside an existing directory.")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputPathError(f"{what} {path} exists and is not writable.\nChoose another file name or fix its permissions.")
    try:
        fd, probe = tempfile.mkstemp(prefix=".stan-dp-probe-", dir=parent)
    except OSError as exc:
        raise OutputPathError(
            f"{what} {path}: cannot create files in {parent} ({exc.strerror or exc}).\n"
            "Choose a writable directory."
        ) from exc
    os.close(fd)
    os.unlink(probe)
    return p


def fallback_path(path: str | os.PathLike) -> Path:
    """A fresh file name for output that could not be written to ``path``: in the current directory if it is
    writable, else in the system temporary directory."""
    p = Path(path)
    # a random token, not the time: when a run ended can depend on its private rows
    name = f"{p.stem or 'stan-dp'}-saved-{secrets.token_hex(4)}{p.suffix or '.nc'}"
    for directory in (Path.cwd(), Path(tempfile.gettempdir())):
        if os.access(directory, os.W_OK):
            return directory / name
    return Path(tempfile.gettempdir()) / name


def write_or_fallback(write: Callable[[Path], object], path: str | os.PathLike, *, what: str = "draws") -> Path:
    """Call ``write(path)``; if it fails with ``OSError``, call ``write`` on :func:`fallback_path` instead,
    tell stderr where the ``what`` went, and return the path actually written."""
    target = Path(path)
    try:
        write(target)
        return target
    except (OSError, RuntimeError) as exc:
        backup = fallback_path(target)
        write(backup)
        print(f"stan-dp: could not write {target} ({exc.strerror or exc}); the {what} were saved to {backup} "
              "instead (nothing is lost: do not run again).", file=sys.stderr)
        return backup
