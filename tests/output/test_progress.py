"""Signs of progress a user sees while waiting: bars written to a log file, and the compile notice and heartbeat."""
from __future__ import annotations

import io
import time

import numpy as np

from stan_dp.output import progress
from stan_dp.stan import compile_clock


def test_bar_off_a_terminal_writes_a_whole_line_per_tenth(monkeypatch):
    """With stderr not a terminal, a bar writes one line (ending in a newline) at the start and at every 10 % of
    the total, counts only: no line is glued to the next, no time or rate appears."""
    log = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", log)
    with progress.progress_bar(total=4000, desc="penalty (2 chains)", unit="it") as bar:
        for _ in range(4000):
            bar.update(1)
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert len(lines) == 11, lines
    assert lines[0].startswith("penalty (2 chains):   0%") and lines[-1].endswith("4000/4000 it")
    assert [line.split("|")[-1].strip() for line in lines[1:4]] == ["400/4000 it", "800/4000 it", "1200/4000 it"]
    assert not any(word in log.getvalue() for word in ("s/it", "it/s", "<", "00:"))


def _lines_for(chunks: list[int], total: int) -> list[str]:
    """The lines a bar off a terminal writes when its count advances by ``chunks`` (a caller polling at its own
    pace: the sizes are what a speed-dependent poll would see)."""
    log = io.StringIO()
    stderr = progress.sys.stderr
    progress.sys.stderr = log
    try:
        with progress.progress_bar(total=total, desc="penalty (2 chains)", unit="it") as bar:
            for chunk in chunks:
                bar.update(chunk)
    finally:
        progress.sys.stderr = stderr
    return log.getvalue().splitlines()


def test_lines_off_a_terminal_come_at_whole_tenths_whatever_the_pace():
    """The chain loop advances the bar by whatever count it finds at each 0.1 s poll, which depends on the speed
    of the run (and so on the rows). Off a terminal the lines must not: for polls of 1, of 7, of 280-372 and of
    1,500 iterations (several tenths at once) and an uneven mix, the bar writes the same 11 lines, at exactly
    0, 400, 800, ..., 4000 of 4000; a run stopped at 2,350 writes the lines up to 2,000 only."""
    total = 4000
    expected = [f"{k * 400}/{total} it" for k in range(11)]
    rng = np.random.default_rng(5)
    paces = {"one at a time": [1] * total, "sevens": [7] * (total // 7 + 1),
             "polls of 280-372": list(rng.integers(280, 373, size=15)),
             "polls of 1500": [1500, 1500, 1500], "uneven": list(rng.integers(1, 900, size=6)) + [4000]}
    seen = {}
    for name, chunks in paces.items():
        lines = _lines_for(chunks, total)
        assert [line.split("|")[-1].strip() for line in lines] == expected, (name, lines)
        seen[name] = lines
    assert len({tuple(lines) for lines in seen.values()}) == 1  # the log is the same at every pace
    stopped = _lines_for([1000, 1000, 350], total)
    assert [line.split("|")[-1].strip() for line in stopped] == expected[:6]


def test_a_run_writes_one_line_per_tenth_of_its_planned_iterations(monkeypatch):
    """Through the chain loop (one chain of 200 iterations, a kernel slow enough for several 0.1 s polls): the
    bar off a terminal writes exactly the lines at 0, 20, 40, ..., 200 iterations, and nothing else."""
    from stan_dp.phases.chains import run_chains
    from stan_dp.samplers.base import ChainState, KernelBase, StepInfo

    class _Slow(KernelBase):
        def init_state(self, theta):
            return ChainState(np.asarray(theta, dtype=float), {})

        def step(self, rng, state, step_size, metric):
            time.sleep(0.002)
            return ChainState(state.theta + 0.0, {}), StepInfo(True, 1.0, {})

    class _Toy:
        n_rows, dim = 3, 1

    log = io.StringIO()
    monkeypatch.setattr(progress.sys, "stderr", log)
    run_chains(_Toy(), _Slow(None, None), chains=1, iter_warmup=100, iter_sampling=100, seed=1, inits=0.0,
               show_progress=True, adapt_engaged=False)
    counts = [line.split("|")[-1].strip() for line in log.getvalue().splitlines() if "/200 it" in line]
    assert counts == [f"{k * 20}/200 it" for k in range(11)], log.getvalue()


def test_compile_notice_quotes_the_last_compile_recorded_in_the_cache(tmp_path):
    """The compile notice quotes how long the last compile of that kind took with this cache (recorded in
    compile_times.json), and says that none is recorded before the first one."""
    first = compile_clock.compile_notice("m.stan", tmp_path, "program and package")
    assert "no earlier compile is recorded" in first and "package's C++" in first
    compile_clock.record_compile(tmp_path, "program", 74.4)
    assert compile_clock.last_compile(tmp_path, "program") == 74.4
    notice = compile_clock.compile_notice("m.stan", tmp_path, "program")
    assert "took 74 s" in notice and notice.startswith("Compiling m.stan")
    (tmp_path / compile_clock.RECORD).write_text("not json")  # a damaged record is ignored, not an error
    assert compile_clock.last_compile(tmp_path, "program") is None


def test_heartbeat_prints_lines_while_working_and_nothing_when_hidden():
    """Off a terminal the heartbeat writes a 'still working' line every interval while the block runs, and stops
    when it ends; show=False writes nothing."""
    log = io.StringIO()
    with compile_clock.Heartbeat("compiling m.stan", interval=0.05, stream=log):
        time.sleep(0.3)
    written = log.getvalue()
    time.sleep(0.15)
    assert log.getvalue() == written  # stopped with the block
    lines = written.splitlines()
    assert len(lines) >= 2 and all("compiling m.stan" in line and "s so far" in line for line in lines)
    quiet = io.StringIO()
    with compile_clock.Heartbeat("compiling m.stan", show=False, interval=0.05, stream=quiet):
        time.sleep(0.15)
    assert quiet.getvalue() == ""
