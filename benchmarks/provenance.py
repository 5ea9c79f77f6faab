"""Where a result came from: the command, the commit and the machine, for the files in ``benchmarks/results``.

Every file there carries three records, one a line (``tests/test_results_provenance.py`` checks them):

    command: <the invocation that wrote it>
    commit: <git rev-parse --short HEAD>, plus "with uncommitted changes" when the work tree differs from it
    machine: <operating system and architecture, logical CPUs, total memory, Python version>

In text and CSV files they are comment lines (``# command: ...``); in Markdown files they sit inside an HTML
comment (``<!-- ... -->``, invisible when rendered); in PNG files they are text chunks with the keys
``command``, ``commit`` and ``machine`` (``png_metadata``, for matplotlib's ``savefig(metadata=...)``).
A script that appends to a results file writes the records before each block it appends.
"""
from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _command(argv: list[str] | None) -> str:
    argv = list(sys.argv if argv is None else argv)
    if argv:
        try:  # the script relative to the repository root, as a user would type it from there
            argv[0] = str(Path(argv[0]).resolve().relative_to(ROOT))
        except ValueError:
            pass
    for i, arg in enumerate(argv[1:], start=1):  # absolute paths inside the checkout, relative to it too
        if arg.startswith(str(ROOT) + os.sep):
            argv[i] = str(Path(arg).relative_to(ROOT))
    return "python " + " ".join(shlex.quote(a) for a in argv)


def _commit() -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout, or git is missing)"
    return head + (" with uncommitted changes" if dirty else "")


def _memory() -> str:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / 2**20:.1f} GiB memory"
    except OSError:
        pass
    return "memory unknown"


def _machine() -> str:
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} logical CPUs, {_memory()}, "
            f"Python {platform.python_version()}")


def records(argv: list[str] | None = None) -> dict[str, str]:
    """The three records as a dict (keys ``command``, ``commit``, ``machine``); ``argv`` defaults to sys.argv."""
    return {"command": _command(argv), "commit": _commit(), "machine": _machine()}


def header_lines(argv: list[str] | None = None) -> list[str]:
    """The records as ``key: value`` lines, without a comment marker."""
    return [f"{key}: {value}" for key, value in records(argv).items()]


def comment_header(argv: list[str] | None = None) -> str:
    """The records as ``#`` comment lines (text and CSV files), ending with a newline."""
    return "".join(f"# {line}\n" for line in header_lines(argv))


def markdown_header(argv: list[str] | None = None) -> str:
    """The records inside an HTML comment (Markdown files), ending with a newline."""
    return "<!--\n" + "".join(f"{line}\n" for line in header_lines(argv)) + "-->\n"


def png_metadata(argv: list[str] | None = None) -> dict[str, str]:
    """The records as PNG text chunks, for ``Figure.savefig(path, metadata=png_metadata())``."""
    return records(argv)


def header_for(path: str | os.PathLike, argv: list[str] | None = None) -> str:
    """The records in the comment style of ``path``'s kind: an HTML comment for ``.md``, ``#`` lines otherwise."""
    return markdown_header(argv) if Path(path).suffix == ".md" else comment_header(argv)
