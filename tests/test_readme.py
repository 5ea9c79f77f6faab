"""The README: short, its links resolve, its Python example runs as written (fresh interpreter, repository root)."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()

#: references to documents that are not in the repository (no page a user reads may cite one)
OUTSIDE = re.compile(r"DESIGN\.md|\bseed 0\d\d\b|\bissues? #?\d+\b", re.I)


def test_readme_fits_on_a_screen_and_has_its_sections():
    """At most 250 lines, with the two commands, both examples, the versions table and the expectations table
    (rows, the method that ran, and the error at three budgets)."""
    assert len(README.splitlines()) <= 250
    for heading in ("## Two commands", "## In Python", "## On the command line", "## Supported versions",
                    "## What to expect", "## Documentation"):
        assert heading in README, heading
    assert "make demo" in README and "make test" in README and "make docs" in README
    assert re.search(r"^\| rows N \| method \| epsilon 1 \| epsilon 3 \| epsilon 10 \|$", README, re.M)


def test_readme_links_resolve():
    """Every relative link of the README names a file of the repository (the documentation's Markdown sources)."""
    links = [target for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README) if "://" not in target]
    assert links, "the README links into the documentation"
    missing = [target for target in links if not (ROOT / target).exists()]
    assert not missing, missing


def test_readme_and_docs_cite_nothing_outside_the_repository():
    """The README and the documentation pages cite no document, paper number or issue that is not in the
    repository, and name no absolute path of a machine."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "docs").glob("*.py"))]
    pages = [p for p in pages if "_build" not in p.parts and "_generated" not in p.parts]
    hits = [(p.relative_to(ROOT), m.group(0)) for p in pages for m in OUTSIDE.finditer(p.read_text())]
    assert not hits, hits
    machine_paths = [(p.relative_to(ROOT), m.group(0)) for p in pages
                     for m in re.finditer(r"(?<![\w.])/(?:work|home|root|Users)/\S+", p.read_text())]
    assert not machine_paths, machine_paths


@pytest.mark.slow
@pytest.mark.stan
def test_readme_python_example_runs(stan_model):
    """The first ```python block of README.md runs without error and prints a summary, auto's choice and the
    budget of a private fit. It runs on 1,000 simulated rows instead of the README's 100,000: every line of the
    example runs as written and auto makes the same choice (dp-sgnht, as a gradient bound is given), but the run
    lengths auto plans for 1,000 rows (1,000 + 1,000 per chain, against 5,000 + 5,000 from 2,000 rows up) and the
    non-private reference on every row take seconds instead of minutes."""
    stan_model("logistic")  # compile once in this session's cache
    code = re.search(r"```python\n(.*?)```", README, re.S).group(1)
    assert code.count("n_rows=100_000") == 1, "the README example's row count moved: update this test"
    code = code.replace("n_rows=100_000", "n_rows=1_000")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "beta[2]" in proc.stdout and "5.0 1e-06 1" in proc.stdout
    assert "dp-sgnht" in proc.stdout  # auto's choice with a gradient bound


def _tracked_text_files() -> list[Path]:
    """The repository's tracked text files (``git ls-files``; every file under the root when git is absent)."""
    try:
        names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        paths = [ROOT / name for name in names.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    out = []
    for path in paths:
        if not path.is_file() or path.suffix in (".png", ".nc", ".whl", ".so", ".o"):
            continue
        try:
            path.read_text()
        except UnicodeDecodeError:
            continue
        out.append(path)
    return out


def test_no_tracked_file_cites_a_document_outside_the_repository():
    """No code, test, benchmark, example or doc cites a document, paper number or issue that is not in the
    repository, or names a machine's absolute path (the two files that define these patterns excepted)."""
    own = {Path(__file__).resolve(), (ROOT / "docs" / "_gen.py").resolve()}
    files = [p for p in _tracked_text_files() if p.resolve() not in own]
    assert len(files) > 100  # the whole repository was read
    hits = [(str(p.relative_to(ROOT)), m.group(0)) for p in files for m in OUTSIDE.finditer(p.read_text())]
    assert not hits, hits[:20]
    machine_paths = [(str(p.relative_to(ROOT)), m.group(0)) for p in files
                     for m in re.finditer(r"(?<![\w.])/(?:work|home|Users)/[\w.-]+", p.read_text())]
    assert not machine_paths, machine_paths[:20]


#: what the documentation pages, their generator and the benchmark results must not contain: a work item (its
#: word followed by its number, with or without a space, '_' or '#'), a stage of the work rather than the thing
#: itself, or a temporary or machine path
STAGE_OR_PATH = re.compile(r"(?:\b|_)issue[\s_-]*#?\d+|/tmp/|/work/|\.\./shared|previous\ssession|this stop|last stop"
                           r"|the previous ", re.I)


def test_the_hygiene_pattern_catches_what_it_is_for():
    """The examples are built from pieces so that this file itself cites no work item or machine path."""
    issue, work, shared = "is" + "sue", "/wo" + "rk/", "../sha" + "red/"
    for bad in (f"see {issue} 25", f"{issue.title()} #26", f"coverage_{issue}25.txt", "in the previous " + "session",
                "Not changed in this stop", "at the last stop", "the previous sampler", "/tmp/x", f"{work}main",
                f"{shared}notes"):
        assert STAGE_OR_PATH.search(bad), bad
    for fine in ("an issue of scale", "tissue 3", "the earlier checkpoint", "stan_dp/tmp_files"):
        assert not STAGE_OR_PATH.search(fine), fine


def test_docs_and_results_name_no_work_item_stage_of_the_work_or_temporary_path():
    """The README, benchmarks/README.md, the documentation pages (docs/**/*.md but the built site and the
    generated pages, whose sources are docs/_gen.py and the package's docstrings), docs/_gen.py and every file in
    benchmarks/results (its name too) name no issue number, no stage of the work ("the previous ...", "this
    stop") and no temporary path."""
    docs = [p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts and "_generated" not in p.parts]
    results = sorted(p for p in (ROOT / "benchmarks" / "results").iterdir() if p.is_file())
    assert len(docs) > 20 and len(results) > 20
    hits = [(str(p.relative_to(ROOT)), "name") for p in results if STAGE_OR_PATH.search(p.name)]
    for path in [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *docs, ROOT / "docs" / "_gen.py", *results]:
        if path.suffix in (".png", ".svg"):
            continue
        hits += [(str(path.relative_to(ROOT)), m.group(0)) for m in STAGE_OR_PATH.finditer(path.read_text())]
    assert not hits, hits[:20]
