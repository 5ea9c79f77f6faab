#!/usr/bin/env python
"""Rows from a Parquet file through the command line: memory, time per phase and accuracy.

A logistic regression with five parameters (intercept and K = 4 slopes, stan_models/logistic.stan) is simulated
with N rows (fixed seed) and written to a Parquet file; the public data (prior_sd) go to a JSON file. Then, each in
a fresh process:

1. the command line, ``stan-dp sample --row-data rows.parquet --algorithm auto --option grad_clip=4 --epsilon 1``
   (``stan_dp.cli.main`` in that process, with timers wrapped around the package's own functions): peak resident
   memory (``ru_maxrss``) against the rows' own bytes (N * (K + 1) * 8: float64 covariates and int64 outcomes),
   and the time of each phase: load (reading the Parquet file into the row arrays), build (the row engine and
   the factorization check), anchor (the private anchor, when the plan has one), sampling (warm start and
   chains), output (the ArviZ data and the netCDF file);
2. with ``--compare-inputs``: reading and building only (no run), from the Parquet file and from the same rows
   as a Stan JSON file (``--data``, parsed into Python lists), to compare the peak memory of the two paths.

The accuracy check is the benchmark's own: the maximum over parameters of |posterior mean - MLE| in asymptotic
standard deviations (the MLE by Newton's method in NumPy on the simulated rows, the sds from the inverse Fisher
information there). It reads the private rows, so it is a measurement, never a released number.

With ``--iter-warmup W --iter-sampling S`` (and ``--chains C``) the run is shorter than ``auto``'s default run
lengths: the memory of every phase is the same (the anchor and the sampler's buffers do not grow with the
iterations, bar the draws themselves), only the sampling time and the accuracy change.

Every child also samples its resident memory every 10 ms and reports the largest value seen in each phase. With
``--build-only`` only reading and building from Parquet are measured (no Stan JSON, no run: for sizes whose JSON
or whole run would take too long); ``--option KEY=VALUE`` passes an option to the run (e.g. ``anchor_steps=10``:
a shorter anchor, whose steps each take the memory of the default's).

With ``--ray-workers W`` the rows are evaluated on the Ray backend (``--backend ray --workers W``: a local Ray
cluster started by the child, W actors each holding a contiguous shard); the child then also samples, every 0.5 s,
the proportional set size (PSS: shared pages split among the processes mapping them) summed over itself and every
process it started (Ray's own processes and the actors), and the largest sum (overall and per phase) is printed beside
the driver's peak.

Run: python benchmarks/bench_row_data.py [--n 2000000] [--compare-inputs | --build-only] [--iter-warmup W]
     [--iter-sampling S] [--chains C] [--option KEY=VALUE] [--ray-workers W] [--workdir DIR] [--keep]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from provenance import comment_header

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "stan_models" / "logistic.stan"
ALPHA, BETA, PRIOR_SD, GRAD_CLIP = -0.5, (1.0, -1.0, 0.5, 0.25), 2.5, 4.0


def simulate(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Standard normal covariates and Bernoulli-logit outcomes (alpha, beta above)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, len(BETA)))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(ALPHA + x @ np.array(BETA))))).astype(np.int64)
    return x, y


def mle(x: np.ndarray, y: np.ndarray, steps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """(MLE of (alpha, beta), asymptotic sds) by Newton's method on the logistic log-likelihood."""
    design = np.column_stack([np.ones(len(y)), x])
    theta = np.zeros(design.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        info = (design * (p * (1 - p))[:, None]).T @ design
        step = np.linalg.solve(info, design.T @ (y - p))
        theta += step
        if np.max(np.abs(step)) < 1e-12:
            break
    p = 1.0 / (1.0 + np.exp(-(design @ theta)))
    info = (design * (p * (1 - p))[:, None]).T @ design
    return theta, np.sqrt(np.diag(np.linalg.inv(info)))


# ------------------------------------------------------------------------------------------------ child process
CHILD = r"""
import json, sys, threading, time
mode, argv = sys.argv[1], json.loads(sys.argv[2])
times = {}
stack = []
phases = []  # the phases being timed, innermost last
resident = {}  # phase -> the largest VmRSS seen while it was the innermost one (sampled every 10 ms)

def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))

def sample_rss():
    while True:
        phase, value = (phases[-1] if phases else "other"), rss()
        resident[phase] = max(resident.get(phase, 0), value)
        time.sleep(0.01)

def timed(owner, name, phase):
    # owner.name wrapped: its time, less the time of the wrapped calls inside it, is added to times[phase]
    original = getattr(owner, name)
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        stack.append(0.0)
        phases.append(phase)
        try:
            return original(*args, **kwargs)
        finally:
            phases.pop()
            elapsed = time.perf_counter() - start
            inner = stack.pop()
            times[phase] = times.get(phase, 0.0) + elapsed - inner
            if stack:
                stack[-1] += elapsed
    setattr(owner, name, wrapper)

import stan_dp.cli, stan_dp.model, stan_dp.output.files, stan_dp.methods.kernels.kernel_run, stan_dp.run.pipeline
from stan_dp.model import DPStanModel
timed(DPStanModel, "_with_rows", "load")
timed(DPStanModel, "row_likelihood", "build")
timed(stan_dp.methods.kernels.kernel_run, "run_anchor", "anchor")
timed(stan_dp.run.pipeline, "execute", "sampling")
timed(stan_dp.run.pipeline, "publish", "output")
timed(stan_dp.output.files, "write_or_fallback", "output")
def high_water():
    # VmHWM: the peak resident memory of this process image (ru_maxrss would include the parent's, kept over exec)
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))

def tree_pss():
    # the proportional set size (shared pages split among the processes mapping them) of this process and all its
    # descendants: with the Ray backend, the Ray processes this driver started and the actors holding the shards
    import os
    children = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    parent = int(stat.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(parent, []).append(int(pid))
            except (OSError, ValueError, IndexError):
                pass
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/smaps_rollup") as rollup:
                total += next(int(line.split()[1]) * 1024 for line in rollup if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total

tree = {"peak": 0}
tree_phases = {}  # phase -> the largest PSS sum seen while it was the innermost phase

def sample_tree():
    while True:
        phase, value = (phases[-1] if phases else "other"), tree_pss()
        tree["peak"] = max(tree["peak"], value)
        tree_phases[phase] = max(tree_phases.get(phase, 0), value)
        time.sleep(0.5)

baseline = high_water()
threading.Thread(target=sample_rss, daemon=True).start()
if "--backend" in sys.argv[2]:
    threading.Thread(target=sample_tree, daemon=True).start()
if mode == "cli":
    status = stan_dp.cli.main(argv)
else:  # read and build only
    model = DPStanModel(argv["program"], show_progress=False)
    likelihood = model.row_likelihood(argv["data"], row_data=argv.get("row_data"))
    status = 0 if likelihood.n_rows > 0 else 1
peak = high_water()
print("BENCH " + json.dumps({"status": status, "times": times, "peak": peak, "baseline": baseline,
                            "resident": resident, "tree_peak": tree["peak"], "tree_phases": tree_phases}),
      flush=True)
"""


def run_child(mode: str, argv: object) -> dict:
    """Run CHILD in a fresh interpreter (this checkout's package first on the path); its measurements."""
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, json.dumps(argv)], capture_output=True, text=True,
                          env=env, timeout=3600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("BENCH ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"the child process failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    result = json.loads(lines[-1][len("BENCH "):])
    result["stdout"] = proc.stdout
    return result


def resident_line(result: dict, row_bytes: int) -> str:
    """The largest resident memory seen in each phase (sampled every 10 ms; "other": outside the timed phases),
    in MiB and as a multiple of the rows' bytes."""
    resident = result.get("resident", {})
    order = [p for p in ("load", "build", "anchor", "sampling", "output", "other") if p in resident]
    return ", ".join(f"{p} {resident[p] / 2**20:.0f} MiB ({resident[p] / row_bytes:.2f} x)" for p in order)


def phases(times: dict) -> dict:
    """The phases in order (seconds; each exclusive of the others)."""
    return {phase: times.get(phase, 0.0) for phase in ("load", "build", "anchor", "sampling", "output")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=float, default=2e6, help="rows (default 2e6)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--row-group", type=int, default=250_000, help="rows per Parquet row group")
    parser.add_argument("--compare-inputs", action="store_true",
                        help="also measure read + build from Parquet and from the same rows as Stan JSON")
    parser.add_argument("--chains", type=int, default=None, help="chains (default: the command line's)")
    parser.add_argument("--iter-warmup", type=int, default=None,
                        help="warmup iterations per chain (default: auto's run lengths)")
    parser.add_argument("--iter-sampling", type=int, default=None,
                        help="sampling iterations per chain (default: auto's run lengths)")
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra --option for the run (e.g. anchor_steps=10 for a shorter anchor)")
    parser.add_argument("--build-only", action="store_true",
                        help="measure read + build from Parquet only (no Stan JSON, no run)")
    parser.add_argument("--workdir", default=None, help="folder for the files (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the files")
    parser.add_argument("--ray-workers", type=int, default=None, metavar="W",
                        help="evaluate the rows on the Ray backend with W local actors (--backend ray --workers W)")
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    print(comment_header(), end="")  # command, commit, machine: for a results file made from this output
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = int(args.n)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_row_data_"))
    work.mkdir(parents=True, exist_ok=True)
    x, y = simulate(n, args.seed)
    row_bytes = x.nbytes + y.nbytes
    start = time.perf_counter()
    table = pa.table({**{f"x.{j + 1}": x[:, j] for j in range(x.shape[1])}, "y": y})
    pq.write_table(table, work / "rows.parquet", row_group_size=args.row_group)
    del table
    (work / "public.json").write_text(json.dumps({"prior_sd": PRIOR_SD}))
    print(f"N = {n:,} rows, K = {x.shape[1]} (5 parameters); rows' own bytes {row_bytes / 2**20:.1f} MiB; Parquet "
          f"{(work / 'rows.parquet').stat().st_size / 2**20:.1f} MiB written in {time.perf_counter() - start:.1f} s")
    if args.build_only:
        result = run_child("build", {"program": str(PROGRAM), "data": str(work / "public.json"),
                                     "row_data": str(work / "rows.parquet")})
        times = phases(result["times"])
        print(f"read + build from Parquet: peak {result['peak'] / 2**20:.0f} MiB = {result['peak'] / row_bytes:.2f} x "
              f"rows; above imports {(result['peak'] - result['baseline']) / 2**20:.0f} MiB = "
              f"{(result['peak'] - result['baseline']) / row_bytes:.2f} x; load {times['load']:.1f} s, build "
              f"{times['build']:.1f} s\nresident per phase: {resident_line(result, row_bytes)}")
        remove(work, args)
        return
    if args.compare_inputs:
        (work / "all.json").write_text(json.dumps({"N": n, "K": x.shape[1], "x": x.tolist(), "y": y.tolist(),
                                                   "prior_sd": PRIOR_SD}))
        print("\nread + build only (fresh process each):")
        for label, spec in (("Parquet (row_data)", {"data": str(work / "public.json"),
                                                    "row_data": str(work / "rows.parquet")}),
                            ("Stan JSON (data, Python lists)", {"data": str(work / "all.json")})):
            result = run_child("build", {"program": str(PROGRAM), **spec})
            times = phases(result["times"])
            print(f"  {label:32s} peak {result['peak'] / 2**20:7.0f} MiB = {result['peak'] / row_bytes:5.2f} x rows; "
                  f"above imports {(result['peak'] - result['baseline']) / 2**20:6.0f} MiB; load {times['load']:.1f} s,"
                  f" build {times['build']:.1f} s")
    theta_hat, sds = mle(x, y)
    delta = min(1e-6, 0.1 / n)
    fit = work / "fit.nc"
    argv = ["sample", str(PROGRAM), "--data", str(work / "public.json"), "--row-data", str(work / "rows.parquet"),
            "--algorithm", "auto", "--option", f"grad_clip={GRAD_CLIP}", "--epsilon", str(args.epsilon),
            "--delta", f"{delta:.3g}", "--seed", str(args.seed), "--output", str(fit), "--quiet"]
    for option in args.option:
        argv += ["--option", option]
    if args.ray_workers is not None:
        argv += ["--backend", "ray", "--workers", str(args.ray_workers)]
    for flag, value in (("--chains", args.chains), ("--iter-warmup", args.iter_warmup),
                        ("--iter-sampling", args.iter_sampling)):
        if value is not None:
            argv += [flag, str(value)]
    print("command: stan-dp " + " ".join(argv).replace(str(work), "WORKDIR"))  # WORKDIR: the temporary folder
    start = time.perf_counter()
    result = run_child("cli", argv)
    wall = time.perf_counter() - start
    if result["status"] != 0:
        sys.exit(f"stan-dp exited {result['status']}:\n{result['stdout'][-3000:]}")
    import arviz as az

    released = az.from_netcdf(fit)
    posterior = released.posterior
    means = np.concatenate([np.atleast_1d(posterior["alpha"].mean(("chain", "draw")).values),
                            posterior["beta"].mean(("chain", "draw")).values])
    attrs = dict(released.attrs)
    error = np.abs(means - theta_hat) / sds
    peak = result["peak"]
    print(f"\nalgorithm chosen by auto: {attrs.get('algorithm')} ({posterior.sizes['chain']} chains x "
          f"{posterior.sizes['draw']} draws; run lengths: {attrs.get('run_lengths_reason', '?')})")
    print(f"peak resident memory {peak / 2**20:.0f} MiB = {peak / row_bytes:.2f} x the rows' bytes "
          f"({(peak - result['baseline']) / 2**20:.0f} MiB above the process after its imports "
          f"= {(peak - result['baseline']) / row_bytes:.2f} x)")
    print("resident per phase: " + resident_line(result, row_bytes))
    if args.ray_workers is not None:
        tree_peak = result["tree_peak"]
        print(f"all processes (the driver, the Ray processes it started and the {args.ray_workers} actors; "
              f"proportional set size, sampled every 0.5 s): peak {tree_peak / 2**20:.0f} MiB = "
              f"{tree_peak / row_bytes:.2f} x the rows' bytes")
        print("all processes per phase: " + resident_line({"resident": result.get("tree_phases", {})}, row_bytes))
    print("time per phase (s): " + ", ".join(f"{k} {v:.1f}" for k, v in phases(result["times"]).items())
          + f"; whole process {wall:.1f} (with imports and the cached program's load)")
    print("posterior mean - MLE in asymptotic sds: "
          + ", ".join(f"{name} {e:+.2f}" for name, e in zip(["alpha"] + [f"beta[{j + 1}]" for j in range(4)],
                                                                 (means - theta_hat) / sds))
          + f"; max |error| {error.max():.2f}")
    line = f"R-hat of the released draws (what az.summary prints): max {max_rhat(released, 'posterior'):.3f}"
    chains = max_rhat(released, "chain_posterior")
    if chains is not None:
        line += f"; of the chains themselves (chain_posterior): max {chains:.3f}"
    print(line)
    remove(work, args)


def max_rhat(data: object, group: str) -> float | None:
    """The largest R-hat (ArviZ's) over the variables of ``group`` of an InferenceData or DataTree, or None when
    the group is absent."""
    import arviz as az

    try:
        node = data[group]  # type: ignore[index]
    except (KeyError, TypeError):
        node = getattr(data, group, None)
    if node is None:
        return None
    dataset = node.to_dataset() if hasattr(node, "to_dataset") else node
    rhat = az.rhat(dataset)
    return max(float(rhat[name].max()) for name in rhat.data_vars)


def remove(work: Path, args: argparse.Namespace) -> None:
    """Delete the benchmark's files unless --keep or --workdir was given."""
    if not args.keep and args.workdir is None:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()


if __name__ == "__main__":
    main()
