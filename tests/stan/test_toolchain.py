"""Building Stan programs into cached libraries: cache hits, cache keys, the cache override, concurrent
builds, stanc errors and a missing compiler.

Only one test builds in a fresh cache (the package's native objects are recompiled there, about a minute):
two processes build the same program into it at the same time. Everything else uses the session cache.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from stan_dp.stan import toolchain
from stan_dp.stan.toolchain import StanCompileError, ToolchainError

ROOT = Path(__file__).resolve().parents[2]
STAN_MODELS = ROOT / "stan_models"
NO_DATA = STAN_MODELS / "no_data.stan"

# A child process that builds (or loads from the cache) one program and reports the time the construction
# took, measured inside the child, and the library path.
BUILD_CHILD = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    from stan_dp import DPStanModel
    t1 = time.perf_counter()
    model = DPStanModel(sys.argv[1])
    t2 = time.perf_counter()
    print(json.dumps({"library": str(model.library_path), "construct": t2 - t1, "total": t2 - t0}))
    """
)


def child_env(**overrides: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(overrides)
    return env


def run_child(code: str, *args: str, env: dict | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env or child_env(),
        cwd=str(ROOT),
        timeout=timeout,
    )


@pytest.fixture
def clear_toolchain_caches():
    """Clear the lru caches around tests that change the compiler environment."""
    toolchain.find_toolchain.cache_clear()
    toolchain._compiler_version.cache_clear()
    yield
    toolchain.find_toolchain.cache_clear()
    toolchain._compiler_version.cache_clear()


# --------------------------------------------------------------------------------------------- cache hits


@pytest.mark.stan
def test_cached_model_is_not_recompiled_and_loads_fast(stan_model):
    from stan_dp import DPStanModel

    stan_model("no_data")  # built (or found) once for the session
    library = DPStanModel(NO_DATA).library_path  # now a cache hit (re-read in case native sources were edited)
    mtime = library.stat().st_mtime_ns
    # In a fresh process every compiler entry point is sabotaged: a cache hit must not reach any of them.
    code = textwrap.dedent(
        """
        import json, sys, time
        t0 = time.perf_counter()
        from stan_dp import DPStanModel
        from stan_dp.stan import toolchain
        def refuse(*args, **kwargs):
            raise AssertionError("the compiler was invoked for a cached model")
        toolchain._run_compiler = refuse
        toolchain.run_stanc = refuse
        toolchain.native_objects = refuse
        t1 = time.perf_counter()
        model = DPStanModel(sys.argv[1])
        t2 = time.perf_counter()
        print(json.dumps({"library": str(model.library_path), "construct": t2 - t1, "total": t2 - t0}))
        """
    )
    proc = run_child(code, str(NO_DATA), timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["library"] == str(library)
    assert report["construct"] < 1.0, report
    assert library.stat().st_mtime_ns == mtime
    print(f"cached DPStanModel(): {report['construct']:.3f} s (with imports {report['total']:.3f} s)")


def _fake_cxx(monkeypatch, cache: Path) -> None:
    """Point the cache at ``cache`` and fake the C++ compile and link (stanc still runs): only the choice of
    cache entry is under test."""
    monkeypatch.setenv("STAN_DP_CACHE", str(cache))

    def fake_compile(tc, source, output, extra=()):
        Path(output).write_bytes(b"object")

    def fake_link(cmd, what):
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"library")

    monkeypatch.setattr(toolchain, "native_objects", lambda tc=None: [])
    monkeypatch.setattr(toolchain, "precompiled_header", lambda tc=None: None)
    monkeypatch.setattr(toolchain, "_compile_object", fake_compile)
    monkeypatch.setattr(toolchain, "_run_compiler", fake_link)


@pytest.mark.stan
def test_cache_key_follows_the_source(stan_model, monkeypatch, tmp_path):
    """The entry's key is the program's text, not its path: the same text elsewhere on disk gets the bundled
    program's key; a comment added changes the key, and the old entry stays. (The bundled program is really
    compiled; the copies are built with a faked C++ compile in a cache of their own.)"""
    bundled = stan_model("no_data").library_path
    source = NO_DATA.read_text()
    copy = tmp_path / "no_data.stan"
    copy.write_text(source)
    _fake_cxx(monkeypatch, tmp_path / "cache")
    same = toolchain.build_model_library(copy)
    assert same.parent.name == bundled.parent.name
    copy.write_text(source + "\n// edited: this comment changes the source text and thus the cache key\n")
    edited = toolchain.build_model_library(copy)
    assert edited.parent.name != bundled.parent.name and edited.parent.name.startswith("no_data_model-")
    assert edited.is_file() and same.is_file() and bundled.is_file()


def test_cache_key_follows_included_files(monkeypatch, tmp_path):
    """Editing a file that the program #includes changes the cache entry (the C++ compile is faked: only the
    choice of cache entry is under test; stanc still checks the program)."""
    _fake_cxx(monkeypatch, tmp_path / "cache")
    program = _write(
        tmp_path,
        "with_include.stan",
        """
        functions {
        #include helper.stanfunctions
        }
        parameters {
          real mu;
        }
        model {
          mu ~ normal(shift(0.5), 1);
        }
        """,
    )
    helper = tmp_path / "helper.stanfunctions"
    args = ("--include-paths=.",)  # relative to the program's folder
    helper.write_text("real shift(real x) { return 2 * x; }\n")
    first = toolchain.build_model_library(program, args)
    assert toolchain.build_model_library(program, args) == first
    helper.write_text("real shift(real x) { return 3 * x; }\n")
    second = toolchain.build_model_library(program, args)
    assert second != first and first.is_file() and second.is_file()
    helper.write_text("real shift(real x) { return 2 * x; }\n")
    assert toolchain.build_model_library(program, args) == first


@pytest.mark.stan
def test_models_start_from_the_precompiled_model_header(stan_model, tmp_path):
    """With GCC, a model build leaves Stan's model header precompiled in the cache, and the compiler really reads
    that precompiled form (GCC's -H marks a used .gch with '!') when a unit is compiled with the arguments the
    model build passes; with STAN_DP_PRECOMPILED_HEADER=0 no header is used."""
    stan_model("no_data")
    tc = toolchain.find_toolchain()
    if not toolchain.precompiled_header_enabled(tc):
        pytest.skip(f"precompiled headers are used with GCC only; the compiler here is {tc.cxx}")
    header = toolchain.precompiled_header(tc)
    assert header is not None and header.with_name(header.name + ".gch").is_file()
    unit = tmp_path / "unit.cpp"
    unit.write_text("#include <stan/model/model_header.hpp>\nint main() { return 0; }\n")
    cmd = [tc.cxx, *toolchain.cxx_flags(tc.cxx), *toolchain._header_arguments(header), "-H", "-fsyntax-only"]
    for inc in tc.include_dirs:
        cmd += ["-isystem", str(inc)]
    proc = subprocess.run([*cmd, str(unit)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    used = [line for line in proc.stderr.splitlines() if line.startswith("! ")]
    assert used and used[0].endswith(".gch"), proc.stderr[:2000]


def test_a_first_build_compiles_the_header_beside_the_package_objects(monkeypatch, tmp_path):
    """A first build compiles the precompiled model header side by side with the package's C++ sources: the
    largest source compiles while the header is being built, without the header arguments (it parses Stan's
    headers itself), every other one waits for the header and gets them, and the model's own object starts from the
    header beside the remaining sources. With the header already cached every source starts from it; without a
    header (other compilers) none does. The compiler and the header build are replaced by recorders: which
    arguments make GCC really read the .gch is the test above."""
    import threading

    header = tmp_path / "header" / toolchain.MODEL_HEADER
    first_compiled = threading.Event()
    calls: list[tuple[str, tuple[str, ...], bool]] = []
    state = {"header_built": False}

    def record(tc, source, output, extra=()):
        calls.append((source.name, tuple(extra), state["header_built"]))
        first_compiled.set()
        time.sleep(0.05)
        output.write_bytes(b"")

    def build_header(tc=None):
        assert first_compiled.wait(timeout=60)  # a source compiles while the header is being built
        time.sleep(0.1)
        state["header_built"] = True
        return header

    monkeypatch.setattr(toolchain, "_compile_object", record)
    monkeypatch.setattr(toolchain, "compile_jobs", lambda: 2)
    tc = toolchain.find_toolchain()
    with_header = ("-include", str(header))
    monkeypatch.setenv("STAN_DP_CACHE", str(tmp_path / "fresh"))
    monkeypatch.setattr(toolchain, "precompiled_header", build_header)
    monkeypatch.setattr(toolchain, "precompiled_header_ready", lambda tc: state["header_built"])
    toolchain._objects_and_model(tc, lambda h: record(tc, Path("model_unit.cpp"), tmp_path / "model.o",
                                                      toolchain._header_arguments(h)))
    assert sorted(name for name, _, _ in calls if name != "model_unit.cpp") == sorted(toolchain.NATIVE_SOURCES)
    assert calls[0][0] == toolchain.BUILD_ORDER[0] and calls[0][1] == ()  # the largest first, without the header
    assert all(built and extra == with_header for _, extra, built in calls[1:])  # the others waited for it
    assert [extra for name, extra, _ in calls if name == "model_unit.cpp"] == [with_header]
    for built, expected in ((header, with_header), (None, ())):  # a cached header; no header at all
        calls.clear()
        monkeypatch.setenv("STAN_DP_CACHE", str(tmp_path / f"cache-{built is None}"))
        monkeypatch.setattr(toolchain, "precompiled_header", lambda tc=None, built=built: built)
        monkeypatch.setattr(toolchain, "precompiled_header_ready", lambda tc: True)
        toolchain.native_objects(tc)
        assert sorted(name for name, _, _ in calls) == sorted(toolchain.NATIVE_SOURCES)
        assert {extra for _, extra, _ in calls} == {expected}


def test_at_most_compile_jobs_compilers_run_at_once(monkeypatch):
    """Whichever threads start them (the package's sources on a pool, the model's unit on the caller's thread), no
    more than compile_jobs() compilers run at once: more than cores measured more compiler time in all."""
    import threading

    running, most = [0], [0]
    lock = threading.Lock()

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(cmd, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return Done()

    monkeypatch.setattr(toolchain.subprocess, "run", fake_run)
    threads = [threading.Thread(target=toolchain._run_compiler, args=(["c++"], "x")) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] <= toolchain.compile_jobs()  # eight threads asked at once
    assert most[0] >= min(2, toolchain.compile_jobs())  # ... and they did run side by side


def test_the_shard_row_loop_prefetches_scattered_rows(stan_model):
    """The shard program's row loop asks the processor for the data of rows a few requests ahead (a minibatch's
    scattered rows otherwise wait on memory: 2x slower at 20 million rows). GCC at -O3 once dropped these
    prefetches silently, so the compiled library of a program whose rows are a matrix and an array is checked for
    the instructions (x86-64 with objdump only)."""
    import platform
    import shutil

    if platform.machine() not in ("x86_64", "AMD64") or shutil.which("objdump") is None:
        pytest.skip("the prefetch instruction is checked on x86-64 with objdump only")
    model = stan_model("logistic")
    assert model.shard_program is not None
    listing = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(model.library_path)], capture_output=True,
                             text=True, timeout=300)
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert listing.stdout.count("prefetch") >= 2  # the covariate matrix's columns and the outcome array


def test_precompiled_header_can_be_turned_off(monkeypatch):
    """STAN_DP_PRECOMPILED_HEADER=0 turns the precompiled header off: no header, no extra compiler arguments."""
    monkeypatch.setenv("STAN_DP_PRECOMPILED_HEADER", "0")
    tc = toolchain.find_toolchain()
    assert not toolchain.precompiled_header_enabled(tc)
    assert toolchain.precompiled_header(tc) is None
    assert toolchain._header_arguments(None) == ()
    assert toolchain.precompiled_header_ready(tc)


def test_library_key_components():
    tc = toolchain.find_toolchain()
    source = NO_DATA.read_text()
    key = toolchain.library_key(tc, source, ())
    assert key == toolchain.library_key(tc, source, ())
    assert key != toolchain.library_key(tc, source + " ", ())
    assert key != toolchain.library_key(tc, source, ("--O1",))
    assert len(key) == 16 and int(key, 16) >= 0
    assert tc.key() == tc.key()


def test_model_name_is_a_cpp_identifier():
    assert toolchain.model_name_for(Path("logistic.stan")) == "logistic_model"
    assert toolchain.model_name_for(Path("my-model.v2.stan")) == "my_model_v2_model"
    assert toolchain.model_name_for(Path("8schools.stan")) == "m_8schools_model"


def test_cache_root_honours_env(monkeypatch, tmp_path):
    target = tmp_path / "cache-here"
    monkeypatch.setenv("STAN_DP_CACHE", str(target))
    assert toolchain.cache_root() == target
    assert target.is_dir()
    monkeypatch.delenv("STAN_DP_CACHE")
    assert toolchain.cache_root() == Path.home() / ".cache" / "stan_dp"


def test_missing_stan_file(tmp_path):
    from stan_dp import DPStanModel

    with pytest.raises(FileNotFoundError):
        DPStanModel(tmp_path / "absent.stan")


# --------------------------------------------------------------------------------------------- fresh cache


@pytest.fixture(scope="module")
def fresh_cache_concurrent_build(tmp_path_factory, stan_model):
    """Two processes build no_data.stan into one fresh STAN_DP_CACHE at the same time.

    The fresh cache holds only a copy of the package's native objects and of the precompiled model header (from
    the session's cache: building them here would cost about three CPU minutes; their concurrent first build is
    tested with a faked compiler below, and every CI run builds them for real in its empty cache, from two test
    processes at once). The model is compiled here, by both processes at once."""
    stan_model("no_data")  # the session's cache has the native objects and the header
    tc = toolchain.find_toolchain()
    cache = tmp_path_factory.mktemp("fresh-cache")
    for kept in (f"native-{tc.key()}", f"header-{tc.header_key()}"):
        if (toolchain.cache_root() / kept).is_dir():  # no header folder when precompiled headers are off
            shutil.copytree(toolchain.cache_root() / kept, cache / kept)
    env = child_env(STAN_DP_CACHE=str(cache))
    start = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", BUILD_CHILD, str(NO_DATA)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(ROOT),
        )
        for _ in range(2)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        results.append((proc.returncode, out, err))
    elapsed = time.perf_counter() - start
    times = []
    for _, out, _ in results:
        try:
            times.append(round(json.loads(out.strip().splitlines()[-1])["construct"], 1))
        except (ValueError, IndexError, KeyError):
            times.append(None)
    print(f"two concurrent builds in a fresh cache: {elapsed:.1f} s wall; DPStanModel() in each child: {times} s")
    return cache, results, elapsed


@pytest.mark.slow
@pytest.mark.stan
def test_cache_override_is_honoured(fresh_cache_concurrent_build):
    cache, results, _ = fresh_cache_concurrent_build
    for returncode, out, err in results:
        assert returncode == 0, err
        library = Path(json.loads(out.strip().splitlines()[-1])["library"])
        assert library.is_relative_to(cache)
    native = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("native-")]
    headers = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("header-")]
    assert len(native) == 1  # no second set was built ...
    kept = [*native[0].glob("*.o")]
    if toolchain.precompiled_header_enabled(toolchain.find_toolchain()):  # GCC: one precompiled model header
        assert len(headers) == 1
        kept.append(headers[0] / (toolchain.MODEL_HEADER + ".gch"))
    else:
        assert headers == []
    for path in kept:  # ... and the copies were used as they were (copies keep mtimes)
        original = toolchain.cache_root() / path.parent.name / path.name
        assert path.stat().st_mtime_ns == original.stat().st_mtime_ns
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no staging folder left


@pytest.mark.slow
@pytest.mark.stan
def test_concurrent_builds_leave_one_valid_entry(fresh_cache_concurrent_build):
    cache, results, _ = fresh_cache_concurrent_build
    assert [r[0] for r in results] == [0, 0], [r[2][-2000:] for r in results]
    libraries = {json.loads(out.strip().splitlines()[-1])["library"] for _, out, _ in results}
    assert len(libraries) == 1
    models = cache / "models"
    entries = [p for p in models.iterdir() if p.is_dir()]
    assert [p.name for p in entries if p.name.startswith("no_data_model-")] == [entries[0].name]
    assert len(entries) == 1, [p.name for p in entries]  # no staging directories left behind
    entry = entries[0]
    assert str(entry / "model.so") in libraries
    assert sorted(p.name for p in entry.iterdir()) == ["build.json", "model.so", "no_data.stan"]
    build = json.loads((entry / "build.json").read_text())
    assert entry.name.endswith(build["key"])
    import bridgestan
    import numpy as np

    model = bridgestan.StanModel(str(entry / "model.so"), warn=False)
    assert model.name() == "no_data_model"
    assert np.isfinite(model.log_density(np.zeros(3)))


NATIVE_CHILD = textwrap.dedent(
    """
    import json, time
    from pathlib import Path
    from stan_dp.stan import toolchain

    def slow_fake_compile(tc, source, output, extra=()):
        time.sleep(0.3)  # long enough for the other process to arrive while this one builds
        Path(output).write_bytes(b"object of " + source.name.encode())

    def slow_fake_compiler(cmd, what):
        time.sleep(0.3)
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"precompiled header")

    toolchain._compile_object = slow_fake_compile
    toolchain._run_compiler = slow_fake_compiler
    objects = toolchain.native_objects()
    print(json.dumps({"objects": [str(o) for o in objects], "header": str(toolchain.precompiled_header())}))
    """
)


@pytest.mark.stan
def test_concurrent_first_builds_of_the_package_objects_leave_one_set(tmp_path):
    """Two processes build the package's native objects and the precompiled header into one empty cache at the
    same time (the compiler faked, each compile 0.3 s: the lock and the staging are under test, not GCC): both get
    the same five objects and one header, and no staging folder is left behind."""
    cache = tmp_path / "cache"
    env = child_env(STAN_DP_CACHE=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", NATIVE_CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, cwd=str(ROOT)) for _ in range(2)]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert reports[0] == reports[1]
    objects = [Path(o) for o in reports[0]["objects"]]
    assert sorted(o.name for o in objects) == sorted(Path(s).stem + ".o" for s in toolchain.NATIVE_SOURCES)
    assert all(o.read_bytes().startswith(b"object of ") for o in objects)
    assert len({o.parent for o in objects}) == 1 and sorted(objects[0].parent.iterdir()) == sorted(objects)
    entries = sorted(p.name for p in cache.iterdir() if p.is_dir())
    if toolchain.precompiled_header_enabled(toolchain.find_toolchain()):
        assert [e.split("-")[0] for e in entries] == ["header", "native"], entries  # no staging folder left
        assert Path(reports[0]["header"]).with_name(toolchain.MODEL_HEADER + ".gch").read_bytes() == b"precompiled header"
    else:
        assert [e.split("-")[0] for e in entries] == ["native"], entries


# --------------------------------------------------------------------------------------------- stanc errors


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _assert_stanc_message_only(message: str) -> None:
    """The message is stanc's, not the C++ compiler's."""
    assert not re.search(r"\.(hpp|cpp|h):\d+:\d+: (error|note|warning):", message), message
    for cxx_marker in ("#include", "In file included", "instantiation of", "g++", "std::"):
        assert cxx_marker not in message, message
    assert len(message) < 2000, message


def test_syntax_error_raises_stan_compile_error(tmp_path):
    from stan_dp import DPStanModel

    path = _write(
        tmp_path,
        "syntax_bad.stan",
        """
        parameters {
          real mu;
        }
        model {
          mu ~ normal(0, 1)
        }
        """,
    )
    with pytest.raises(StanCompileError) as info:
        DPStanModel(path)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "Syntax error" in message
    assert "line 6" in message  # the missing ';' is detected at the closing brace
    assert "syntax_bad.stan" in message
    _assert_stanc_message_only(message)
    models = toolchain.cache_root() / "models"
    assert not list(models.glob("syntax_bad_model-*"))


def test_type_error_raises_stan_compile_error(tmp_path):
    from stan_dp import DPStanModel

    path = _write(
        tmp_path,
        "type_bad.stan",
        """
        data {
          int<lower=0> N;
        }
        parameters {
          real mu;
        }
        model {
          int k = mu;
          mu ~ normal(0, 1);
        }
        """,
    )
    with pytest.raises(StanCompileError) as info:
        DPStanModel(path)
    message = str(info.value)
    assert "Semantic error" in message
    assert "line 8" in message
    assert "int" in message and "real" in message  # stanc's explanation of the type mismatch
    _assert_stanc_message_only(message)


def test_undeclared_variable_raises_stan_compile_error(tmp_path):
    from stan_dp import DPStanModel

    path = _write(tmp_path, "undeclared.stan", "parameters {\n  real mu;\n}\nmodel {\n  nu ~ normal(0, 1);\n}\n")
    with pytest.raises(StanCompileError, match=r"(?s)line 5.*nu"):
        DPStanModel(path)


# --------------------------------------------------------------------------------------------- compiler


def test_missing_compiler_raises_toolchain_error(monkeypatch, clear_toolchain_caches):
    monkeypatch.setenv("CXX", "/nonexistent/bin/g++")
    with pytest.raises(ToolchainError) as info:
        toolchain.find_toolchain()
    message = str(info.value)
    assert "No C++ compiler" in message
    assert "apt-get install g++" in message and "CXX" in message


def test_no_compiler_on_path_raises_toolchain_error(monkeypatch, clear_toolchain_caches):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(toolchain.shutil, "which", lambda name: None)
    with pytest.raises(ToolchainError, match="install.*g\\+\\+"):
        toolchain.find_toolchain()


def test_broken_compiler_raises_toolchain_error(monkeypatch, clear_toolchain_caches):
    monkeypatch.setenv("CXX", "false")  # exists, but '--version' fails
    with pytest.raises(ToolchainError, match=r"does not run.*apt-get install g\+\+"):
        toolchain.find_toolchain()


def test_missing_compiler_in_fresh_process(tmp_path):
    """End to end: DPStanModel in a new process with CXX pointing nowhere and an empty cache."""
    env = child_env(CXX=str(tmp_path / "no-such-compiler"), STAN_DP_CACHE=str(tmp_path / "empty-cache"))
    proc = run_child(BUILD_CHILD, str(NO_DATA), env=env, timeout=120)
    assert proc.returncode != 0
    assert "ToolchainError" in proc.stderr
    assert "install g++" in proc.stderr
    assert not (tmp_path / "empty-cache" / "models").exists()
