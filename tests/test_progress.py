"""Signs of progress a user sees while waiting: bars written to a log file, and the compile notice and heartbeat."""
from __future__ import annotations

import io
import time

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
