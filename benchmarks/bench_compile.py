"""How long compiling a Stan program takes, with and without the precompiled model header.

Each measurement runs in a fresh child process with its own empty cache folder, so nothing is found in a cache:

1. ``first use``: the package's C++ objects, the precompiled model header and the program, as a new user's first
   build does (the header side by side with the largest package source, the other sources and the program
   starting from the header as soon as it is there);
2. ``header``: the precompiled model header alone (its own timing, in the cache of step 1's layout);
3. ``program, header``: a new program once the objects and the header exist (what every later program costs);
4. ``program, no header``: the same with ``STAN_DP_PRECOMPILED_HEADER=0`` (what it cost before the header).

Steps 3 and 4 copy the package objects built in step 1 into their caches, so they time the program alone.
The times include stanc and the link. Nothing here reads data.

``--parts`` instead times each part of a first build alone, one after the other in one fresh cache: the header,
each package source with and without the header, and the program; it reports the compiler's CPU seconds (which
other work on the machine changes little) beside the wall time, so that a first build's length on an idle machine
can be worked out from them when the machine is shared.

``--first N`` times only the first use, N times, each in a fresh cache.

Usage (about 5-8 minutes on an idle 2-core machine):
    python benchmarks/bench_compile.py [--program stan_models/logistic.stan] [--parts | --first N] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from provenance import header_for

ROOT = Path(__file__).resolve().parent.parent

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from stan_dp.stan import toolchain
    tc = toolchain.find_toolchain()
    what, program = sys.argv[1], sys.argv[2]
    t0 = time.perf_counter()
    if what == "header":
        toolchain.precompiled_header(tc)
    else:
        toolchain.build_model_library(program)
    print(json.dumps({"seconds": time.perf_counter() - t0}))
    """
)

#: one child that times each part of a first build alone (``--parts``): wall and the compiler's CPU seconds
PARTS_CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, time
    from pathlib import Path
    from stan_dp.stan import toolchain as t
    tc = t.find_toolchain()

    def timed(label, run):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        run()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        print(json.dumps({"part": label, "wall": time.perf_counter() - t0, "cpu": cpu}), flush=True)

    header = {}
    timed("header", lambda: header.setdefault("path", t.precompiled_header(tc)))
    out = t.cache_root() / "parts"
    out.mkdir()
    for source in t.BUILD_ORDER:
        for label, arguments in (("with the header", t._header_arguments(header["path"])), ("without", ())):
            timed(f"{source} {label}", lambda: t._compile_object(tc, t.NATIVE_DIR / source, out / "x.o", arguments))
        os.replace(out / "x.o", out / (Path(source).stem + ".o"))
    native = t.cache_root() / f"native-{tc.key()}"
    os.replace(out, native)
    timed("program (stanc, compile, link)", lambda: t.build_model_library(Path(sys.argv[1])))
    """
)


def timed(what: str, program: Path, cache: Path, **env_changes: str) -> float:
    """Seconds the child took for ``what`` in the cache folder ``cache``."""
    env = dict(os.environ, STAN_DP_CACHE=str(cache), PYTHONPATH=str(ROOT), **env_changes)
    proc = subprocess.run([sys.executable, "-c", CHILD, what, str(program)], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])


def parts(program: Path, cache: Path) -> list[tuple[str, float, float]]:
    """(part, wall seconds, compiler CPU seconds) of each part of a first build, one after the other."""
    env = dict(os.environ, STAN_DP_CACHE=str(cache), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", PARTS_CHILD, str(program)], capture_output=True, text=True,
                          env=env, cwd=str(ROOT), timeout=7200)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return [(r["part"], r["wall"], r["cpu"]) for r in rows]


def copy_objects(source: Path, target: Path) -> None:
    """Copy the package's compiled objects (``native-*``) from one cache folder to another."""
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.glob("native-*"):
        if entry.is_dir():
            shutil.copytree(entry, target / entry.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", type=Path, default=ROOT / "stan_models" / "logistic.stan")
    parser.add_argument("--out", type=Path, default=None, help="also append the table to this file")
    parser.add_argument("--parts", action="store_true", help="time each part of a first build alone instead")
    parser.add_argument("--first", type=int, default=0, metavar="N",
                        help="time only the first use, N times (each in a fresh cache)")
    args = parser.parse_args()
    program = args.program.resolve()
    if args.first:
        lines = []
        for _ in range(args.first):
            load = os.getloadavg()[0]
            with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
                seconds = timed("program", program, Path(tmp) / "first")
            lines.append(f"first use (objects, header, program)                    {seconds:7.1f} s   (load "
                         f"{load:.1f} before, {os.getloadavg()[0]:.1f} after, {time.strftime('%Y-%m-%d %H:%M')})")
            print(lines[-1], flush=True)
        if args.out is not None:
            with open(args.out, "a") as handle:
                handle.write(header_for(args.out) + f"# first use only: {program.name}, {os.cpu_count()} cores\n"
                             + "\n".join(lines) + "\n\n")
        return
    if args.parts:
        with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
            measured = parts(program, Path(tmp))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        lines = [f"# compile parts: {program.name}, {os.cpu_count()} cores, load {load:.1f} at the end, "
                 f"{time.strftime('%Y-%m-%d %H:%M')}",
                 *[f"{label:<55s} {wall:7.1f} s wall {cpu:7.1f} s CPU" for label, wall, cpu in measured]]
        text = "\n".join(lines) + "\n"
        print(text, end="")
        if args.out is not None:
            with open(args.out, "a") as handle:
                handle.write(header_for(args.out) + text + "\n")
        return
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as tmp:
        base = Path(tmp)
        rows = [("first use (objects, header, program)", timed("program", program, base / "first"))]
        header_cache = base / "header"
        copy_objects(base / "first", header_cache)
        rows.append(("header alone", timed("header", program, header_cache)))
        rows.append(("program, header built", timed("program", program, header_cache)))
        plain_cache = base / "plain"
        copy_objects(base / "first", plain_cache)
        rows.append(("program, no header (STAN_DP_PRECOMPILED_HEADER=0)",
                     timed("program", program, plain_cache, STAN_DP_PRECOMPILED_HEADER="0")))
        sizes = [p.stat().st_size for p in (base / "first").glob("header-*/*.gch")]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"# compile times: {program.name}, {os.cpu_count()} cores, {platform.machine()}, "
             f"load {load:.1f} at the end, {time.strftime('%Y-%m-%d %H:%M')}",
             *[f"{label:<55s} {seconds:7.1f} s" for label, seconds in rows],
             f"precompiled header size: {sizes[0] / 2**20:.0f} MiB" if sizes else "no precompiled header was built"]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out is not None:
        with open(args.out, "a") as handle:
            handle.write(header_for(args.out) + text + "\n")


if __name__ == "__main__":
    main()
