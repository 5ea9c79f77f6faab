"""How long a new user's first `make demo` takes: a fresh copy of the repository (no .venv), an empty model cache
and no pip cache, so that the venv is created, the package and its dependencies are downloaded and installed, the
package's C++ and the precompiled header are built with the demo's program, and the demo runs.

It prints one line per run: the total wall time, the CPU time of every process `make` started, and its parts read
from the output (the compile as the compile notice reports it; the demo's own run, which includes the compile;
the install: the rest), with the machine's load average before and after (other processes on the machine slow
every part down; say the load with the figure).

Usage (a few minutes per run; the downloads need the package registry):
    python benchmarks/bench_first_demo.py [--runs 2] [--commit HEAD] [--out FILE]

``--commit`` copies that commit of this repository (``git archive``); the default copies HEAD. Nothing here reads
data beyond the demo's simulated rows.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from provenance import header_for

ROOT = Path(__file__).resolve().parent.parent


def one_run(commit: str) -> dict:
    """One cold `make demo` of ``commit`` in a temporary folder; the parts in seconds and the load."""
    with tempfile.TemporaryDirectory(prefix="first-demo-") as tmp:
        source, cache = Path(tmp) / "src", Path(tmp) / "cache"
        source.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
        env = dict(os.environ, STAN_DP_CACHE=str(cache), PIP_NO_CACHE_DIR="1")
        env.pop("VIRTUAL_ENV", None)
        load = os.getloadavg()[0]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        proc = subprocess.run(["make", "demo"], cwd=source, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise RuntimeError(f"make demo failed:\n{proc.stderr[-3000:]}")
        compiled = re.search(r"Compiled logistic\.stan in (\d+) s", proc.stderr)
        demo = re.search(r"Demo took (\d+) s", proc.stdout)
        compile_s = float(compiled.group(1)) if compiled else float("nan")
        demo_s = float(demo.group(1)) if demo else float("nan")
        return {"wall": wall, "cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
                "compile": compile_s, "demo_after_compile": demo_s - compile_s, "install": wall - demo_s,
                "load_before": load, "load_after": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path, default=None, help="also append the lines to this file")
    args = parser.parse_args()
    if shutil.which("make") is None:
        raise SystemExit("make is needed")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.commit], capture_output=True,
                            text=True, check=True).stdout.strip()
    lines = [f"# cold make demo of {commit}: {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M')}"]
    print(lines[0], flush=True)
    for _ in range(args.runs):
        r = one_run(commit)
        line = (f"total {r['wall']:6.0f} s (CPU {r['cpu']:4.0f} s): install {r['install']:4.0f} s, compile "
                f"{r['compile']:4.0f} s, demo after the compile {r['demo_after_compile']:3.0f} s; load "
                f"{r['load_before']:.1f} -> {r['load_after']:.1f}")
        print(line, flush=True)
        lines.append(line)
    if args.out is not None:
        with open(args.out, "a") as handle:
            handle.write(header_for(args.out) + "\n".join(lines) + "\n\n")


if __name__ == "__main__":
    main()
