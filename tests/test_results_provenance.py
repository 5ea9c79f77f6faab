"""Every file in benchmarks/results says where it came from: the command, the commit and the machine.

The records are lines ``command: ...``, ``commit: ...`` and ``machine: ...`` (benchmarks/provenance.py writes
them): ``#`` comment lines in text and CSV files, lines inside an HTML comment (``<!-- ... -->``) in Markdown files,
text chunks with those keys in PNG files. A results file of any other kind fails until this test knows where its
records sit.
"""
from __future__ import annotations

import csv
import re
import struct
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
KEYS = ("command", "commit", "machine")


def _png_text(data: bytes) -> dict[str, str]:
    """The tEXt chunks of a PNG file, keyword -> text (the chunks' CRCs checked)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    out: dict[str, str] = {}
    at = 8
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, f"bad CRC in chunk {kind!r}"
        if kind == b"tEXt":
            key, _, text = body.partition(b"\0")
            out[key.decode("latin-1")] = text.decode("latin-1")
        at += 12 + length
    return out


def records(path: Path) -> dict[str, str]:
    """The provenance records of one results file, key -> value (empty values left out)."""
    if path.suffix == ".png":
        return {k: v.strip() for k, v in _png_text(path.read_bytes()).items() if k in KEYS and v.strip()}
    text = path.read_text()
    if path.suffix in (".txt", ".csv"):
        lines = [line[1:] for line in text.splitlines() if line.startswith("#")]
    elif path.suffix == ".md":
        lines = [line for block in re.findall(r"<!--(.*?)-->", text, re.S) for line in block.splitlines()]
    else:
        return {}
    found: dict[str, str] = {}
    for line in lines:
        match = re.match(r"\s*(command|commit|machine):\s*(\S.*)$", line)
        if match:
            found.setdefault(match.group(1), match.group(2))
    return found


RESULT_FILES = sorted(p for p in RESULTS.iterdir() if p.is_file() and not p.name.startswith("."))


def test_there_are_results_files():
    assert len(RESULT_FILES) > 20


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: p.name)
def test_every_results_file_records_its_command_commit_and_machine(path):
    found = records(path)
    missing = [key for key in KEYS if key not in found]
    assert not missing, f"{path.name} does not record its {', '.join(missing)} (see benchmarks/provenance.py)"


def test_a_file_without_the_records_fails(tmp_path):
    """The check can fail: a results file as the benchmark scripts used to write them has no records."""
    plain = tmp_path / "plain.csv"
    plain.write_text("case,epsilon\nwells,1.0\n")
    assert records(plain) == {}
    commented_elsewhere = tmp_path / "plain.md"
    commented_elsewhere.write_text("Command: `python benchmarks/bench_x.py`\n\n| a |\n|---|\n")
    assert records(commented_elsewhere) == {}


def test_the_helper_writes_records_this_test_reads_and_csv_readers_skip(tmp_path):
    """benchmarks/provenance.py's headers are found here, in every comment style; a CSV with them still reads as
    its table once comment lines are skipped (as docs/_gen.py does)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import provenance
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    argv = ["benchmarks/bench_utility.py", "--tag", "x"]
    table = tmp_path / "utility_x.csv"
    table.write_text(provenance.header_for(table, argv) + "case,epsilon\nwells,1.0\n")
    found = records(table)
    assert set(found) == set(KEYS) and found["command"].startswith("python benchmarks/bench_utility.py --tag x")
    assert "logical CPUs" in found["machine"] and "GiB memory" in found["machine"]
    with table.open(newline="") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    assert rows == [{"case": "wells", "epsilon": "1.0"}]
    page = tmp_path / "page.md"
    page.write_text(provenance.header_for(page, argv) + "# A table\n")
    assert set(records(page)) == set(KEYS)
    assert set(provenance.png_metadata(argv)) == set(KEYS)
