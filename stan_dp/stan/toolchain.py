"""Locate the Stan toolchain and build one shared library per Stan program, with a cache.

The toolchain comes from the package registry alone: stanc3 and the Stan / Eigen / Boost / TBB / SUNDIALS
headers and libraries shipped in the ``httpstan`` wheel. httpstan 4.17 (Stan 2.39) ships wheels for Python >= 3.12
only; on Python 3.10 / 3.11 the newest wheel is httpstan 4.13 (Stan 2.35), so the Stan version follows the
interpreter (``pyproject.toml`` pins each line). A CmdStan installation is used instead when the ``CMDSTAN``
environment variable points at one. Nothing is downloaded.

A model library is ``stanc`` output compiled into one object and linked with the package's own C++
(``stan_dp/stan/native/*.cpp``: the BridgeStan C API, the row API and the NUTS reference). The package's C++ does
not depend on the model (it is written against ``stan::model::model_base``), so it is compiled once per
toolchain and compiler flags, not once per model.

Cache layout (root: ``$STAN_DP_CACHE`` or ``~/.cache/stan_dp``)::

    native-<key>/<name>.o            package objects, keyed by toolchain, flags and native sources
    header-<key>/stan_dp_model_header.hpp(.gch)
                                     Stan's model header, precompiled once per toolchain and flags (GCC only)
    models/<model>-<key>/model.so    one library per Stan program, keyed additionally by the Stan source

Every model's translation unit starts with Stan's ``model_header.hpp``, whose parsing is about half of a model's
compile time. GCC compiles it once into a precompiled header (about 0.8 GB in the cache) and each model then starts
from it: the machine code is the same, the compile about twice as fast. ``STAN_DP_PRECOMPILED_HEADER=0`` turns it
off (each model then parses the header itself); other compilers do without it.

Entries are built in a private temporary directory and moved into place with an atomic rename while an
exclusive file lock is held, so concurrent processes building the same model both succeed and leave one
valid entry.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from . import compile_clock
from . import row_program as row_programs
from . import shard_program as shard_programs
from .row_program import RowProgram
from .shard_program import GLM_KERNELS, KERNELS, ShardProgram
from .stan_messages import stanc_error_text

NATIVE_DIR = Path(__file__).parent / "native"
NATIVE_SOURCES = ("bridgestan_api.cpp", "rows.cpp", "nuts.cpp", "row_data.cpp", "shards.cpp")

CXX_FLAGS = (
    "-std=c++17",
    "-O3",
    "-fPIC",
    "-pthread",
    "-DSTAN_THREADS",
    "-D_REENTRANT",
    "-DBOOST_DISABLE_ASSERTS",
    "-DBOOST_PHOENIX_NO_VARIADIC_EXPRESSION",
    "-D_GLIBCXX_USE_CXX11_ABI=0",
    "-Wno-deprecated-declarations",
    "-Wno-ignored-attributes",
    "-Wno-sign-compare",
    "-Wno-unused-local-typedefs",
    "-Wno-int-in-bool-context",
    "-Wno-misleading-indentation",
)

#: stanc arguments used for every model (before the user's own). O1 applies stanc's semantics-preserving
#: optimisations (dead code elimination, struct-of-arrays autodiff matrices, GLM fusion): about 15% less
#: time per row evaluation with gradient on the logistic benchmark.
DEFAULT_STANC_ARGS = ("--O1",)


class ToolchainError(RuntimeError):
    """The C++ compiler, stanc or the Stan headers are missing or failed in a way the user must fix."""


class StanCompileError(ValueError):
    """stanc rejected the Stan program; the message carries stanc's text with the Stan line number."""


@dataclass(frozen=True)
class Toolchain:
    """Paths of one Stan toolchain."""

    stanc: Path
    include_dirs: tuple[Path, ...]
    lib_dir: Path
    libraries: tuple[str, ...]
    version: str
    cxx: str
    extra_link_args: tuple[str, ...] = field(default=())

    @property
    def stan_version(self) -> tuple[int, int, int]:
        """(major, minor, patch) of the Stan language that this toolchain's stanc accepts."""
        match = re.search(r"stanc3 v(\d+)\.(\d+)\.(\d+)", self.version)
        if not match:
            raise ToolchainError(f"cannot read a stanc3 version from {self.version!r}")
        return (int(match.group(1)), int(match.group(2)), int(match.group(3)))

    @property
    def stanc_version(self) -> str:
        """stanc's version as CmdStan writes it in Stan CSV (``stanc3 v2.39.0``)."""
        return "stanc3 v{}.{}.{}".format(*self.stan_version)

    def _compiler_hash(self) -> "hashlib._Hash":
        h = hashlib.sha256()
        h.update(self.version.encode())
        h.update(self.cxx.encode())
        h.update(_compiler_version(self.cxx).encode())
        h.update(" ".join(cxx_flags(self.cxx)).encode())
        return h

    def header_key(self) -> str:
        """Hash of everything that changes a compile of Stan's headers: toolchain, compiler and flags."""
        return self._compiler_hash().hexdigest()[:16]

    def key(self) -> str:
        """Hash of everything that changes the compiled package objects."""
        h = self._compiler_hash()
        for name in NATIVE_SOURCES + tuple(sorted(p.name for p in NATIVE_DIR.glob("*.hpp"))):
            h.update(name.encode())
            h.update((NATIVE_DIR / name).read_bytes())
        return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def cxx_flags(cxx: str) -> tuple[str, ...]:
    """CXX_FLAGS plus the optional flags this compiler accepts on this machine.

    On x86-64 the model library (loaded with dlopen) reaches Stan's thread-local autodiff stack through
    ``__tls_get_addr`` some 30 times per row evaluation; TLS descriptors (``-mtls-dialect=gnu2``) make each
    access a short call. It is used when the compiler accepts it (GCC does; older Clang does not).
    """
    flags = list(CXX_FLAGS)
    if platform.machine() in ("x86_64", "AMD64") and _accepts(cxx, "-mtls-dialect=gnu2"):
        flags.append("-mtls-dialect=gnu2")
    return tuple(flags)


def _accepts(cxx: str, flag: str) -> bool:
    try:
        proc = subprocess.run([cxx, flag, "-x", "c++", "-fsyntax-only", "-"], input="int main() { return 0; }\n",
                              capture_output=True, text=True)
    except OSError:
        return False
    return proc.returncode == 0


def cache_root() -> Path:
    """Root of the compiled-library cache (``$STAN_DP_CACHE`` or ``~/.cache/stan_dp``)."""
    root = os.environ.get("STAN_DP_CACHE")
    path = Path(root).expanduser() if root else Path.home() / ".cache" / "stan_dp"
    path.mkdir(parents=True, exist_ok=True)
    return path


@lru_cache(maxsize=None)
def _compiler_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolchainError(
            f"The C++ compiler '{cxx}' does not run ({exc}). Install g++ (Debian/Ubuntu: "
            "'apt-get install g++') or set the CXX environment variable to a working C++17 compiler."
        ) from exc
    return out.stdout.splitlines()[0] if out.stdout else cxx


def _find_cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++") or shutil.which("c++")
    if not cxx or not shutil.which(cxx):
        raise ToolchainError(
            "No C++ compiler was found. stan-dp compiles each Stan program with a C++17 compiler: install "
            "g++ (Debian/Ubuntu: 'apt-get install g++') or set CXX to one."
        )
    _compiler_version(cxx)
    return cxx


@lru_cache(maxsize=None)
def find_toolchain() -> Toolchain:
    """Locate stanc, the Stan headers and TBB: ``$CMDSTAN`` if set, else the ``httpstan`` wheel."""
    cxx = _find_cxx()
    cmdstan = os.environ.get("CMDSTAN")
    if cmdstan:
        return _cmdstan_toolchain(Path(cmdstan), cxx)
    try:
        import httpstan  # noqa: F401  (only its files are used)
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ToolchainError(
            "The Stan toolchain was not found: install the 'httpstan' package (pip install httpstan: 4.17 on Python >= 3.12, 4.13 on 3.10/3.11), "
            "which ships stanc and the Stan C++ headers, or set CMDSTAN to a CmdStan installation."
        ) from exc
    root = Path(httpstan.__file__).parent
    stanc = root / "stanc"
    include = root / "include"
    lib = root / "lib"
    for needed in (stanc, include / "stan" / "model" / "model_base.hpp", lib / "libtbb.so"):
        if not needed.exists():
            raise ToolchainError(
                f"The httpstan installation at {root} is incomplete ({needed} is missing). Reinstall it with "
                "pip install --force-reinstall httpstan (4.17 on Python >= 3.12, 4.13 on 3.10/3.11)."
            )
    version = f"httpstan-{httpstan.__version__}; " + _stanc_version(stanc)
    return Toolchain(
        stanc=stanc,
        include_dirs=(include,),
        lib_dir=lib,
        libraries=("tbb", "sundials_cvodes", "sundials_idas", "sundials_kinsol", "sundials_nvecserial"),
        version=version,
        cxx=cxx,
    )


def _cmdstan_toolchain(root: Path, cxx: str) -> Toolchain:
    stanc = root / "bin" / "stanc"
    math = root / "stan" / "lib" / "stan_math"
    libdir = math / "lib"
    tbb = sorted(libdir.glob("tbb_*"))
    eigen = sorted(libdir.glob("eigen_*"))
    boost = sorted(libdir.glob("boost_*"))
    sundials = sorted(libdir.glob("sundials_*"))
    if not (stanc.exists() and tbb and eigen and boost and sundials):
        raise ToolchainError(
            f"CMDSTAN={root} does not look like a built CmdStan installation (need bin/stanc and "
            "stan/lib/stan_math/lib/{tbb,eigen,boost,sundials}_*). Build it with 'make build' in that folder, "
            "or unset CMDSTAN to use the toolchain shipped with httpstan."
        )
    includes = (
        root / "stan" / "src",
        math,
        eigen[-1],
        boost[-1],
        sundials[-1] / "include",
        sundials[-1] / "src" / "sundials",
        tbb[-1] / "include",
        root / "lib" / "rapidjson_1.1.0",
    )
    tbb_lib = root / "stan" / "lib" / "stan_math" / "lib" / "tbb"
    sundials_lib = sundials[-1] / "lib"
    return Toolchain(
        stanc=stanc,
        include_dirs=includes,
        lib_dir=tbb_lib,
        libraries=("tbb",),
        version="cmdstan " + _stanc_version(stanc),
        cxx=cxx,
        extra_link_args=tuple(str(p) for p in sorted(sundials_lib.glob("libsundials_*.a"))),
    )


@lru_cache(maxsize=None)
def _stanc_version(stanc: Path) -> str:
    try:
        out = subprocess.run([str(stanc), "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolchainError(f"stanc at {stanc} does not run: {exc}") from exc
    return out.stdout.strip()


# ----------------------------------------------------------------------------------------------- locking


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Exclusive advisory lock on ``path`` (a lock file) for the duration of the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def compile_jobs() -> int:
    """How many compilers the first build runs side by side: the machine's cores, at most 3 (a Stan compile
    holds about 1.5-2 GB of memory)."""
    return max(1, min(os.cpu_count() or 1, 3))


#: at most ``compile_jobs()`` compilers at once in this process, whichever threads start them (a first build
#: compiles the header, the package's sources and the model's unit from several threads; more compilers than
#: cores only compete for the cores and their caches)
_COMPILER_SLOTS = threading.BoundedSemaphore(compile_jobs())


def _run_compiler(cmd: list[str], what: str) -> None:
    with _COMPILER_SLOTS:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).splitlines()[-40:])
        raise ToolchainError(f"Compiling {what} failed (command: {' '.join(cmd[:3])} ...):\n{tail}")


def _compile_object(tc: Toolchain, source: Path, output: Path, extra: tuple[str, ...] = ()) -> None:
    cmd = [tc.cxx, *cxx_flags(tc.cxx), *extra]
    for inc in tc.include_dirs:
        cmd += ["-isystem", str(inc)]
    cmd += ["-I", str(NATIVE_DIR), "-c", "-x", "c++", str(source), "-o", str(output)]
    _run_compiler(cmd, str(source.name))


def native_objects_ready(tc: Toolchain | None = None) -> bool:
    """Whether the package's C++ objects for this toolchain are already in the cache."""
    tc = tc or find_toolchain()
    directory = cache_root() / f"native-{tc.key()}"
    return all((directory / (Path(s).stem + ".o")).exists() for s in NATIVE_SOURCES)


#: the order in which the package's sources are compiled on a first build, the largest first (compiler seconds
#: measured with the precompiled header: bridgestan_api 26, nuts 15, rows 10, shards 9, row_data 9; without it
#: 30, 23, 18, 18, 18), so that the compilers finish close together
BUILD_ORDER = ("bridgestan_api.cpp", "nuts.cpp", "rows.cpp", "shards.cpp", "row_data.cpp")


def native_objects(tc: Toolchain | None = None) -> list[Path]:
    """Compile (once per toolchain, flags and native sources) and return the package's C++ objects.

    Every native source includes Stan's math library, whose parsing is most of each compile, so a source starts
    from the precompiled model header when the header is there (about 106 -> 69 s of compiler time for the five).
    On a first build the header is compiled side by side with the sources (``compile_jobs()`` compilers): the
    first, largest source compiles while the header is being built and parses the headers itself (the same
    machine code, 4 s more compiler time), the others wait for the header and start from it (each would cost 5-9 s
    more without it, which a loaded machine feels). Measured on two cores (``benchmarks/bench_compile.py``): 87-90 s
    for the first build of the logistic example against 97-104 s with the header first and the sources after it;
    with the sources after the header and only the model beside them, 110 s."""
    tc = tc or find_toolchain()
    directory = cache_root() / f"native-{tc.key()}"
    objects = [directory / (Path(s).stem + ".o") for s in NATIVE_SOURCES]
    if all(o.exists() for o in objects):
        return objects
    with _locked(cache_root() / f"native-{tc.key()}.lock"):
        if all(o.exists() for o in objects):
            return objects
        directory.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=compile_jobs()) as pool:
            ready = precompiled_header_ready(tc)
            header: Future = pool.submit(precompiled_header, tc)
            if ready:  # a cached header: every source starts from it
                header.result()

            unheaded = [] if ready else [BUILD_ORDER[0]]  # the one source that does not wait for the header

            def build(source: str, obj: Path) -> None:
                arguments = () if source in unheaded and not header.done() else _header_arguments(header.result())
                with tempfile.TemporaryDirectory(dir=directory) as tmp:
                    tmp_obj = Path(tmp) / obj.name
                    _compile_object(tc, NATIVE_DIR / source, tmp_obj, arguments)
                    os.replace(tmp_obj, obj)

            order = sorted(zip(NATIVE_SOURCES, objects), key=lambda pair: BUILD_ORDER.index(pair[0]))
            for done in [pool.submit(build, source, obj) for source, obj in order if not obj.exists()]:
                done.result()
            header.result()  # the header is part of a first build: never left half-built by this process
    return objects


def _objects_and_model(tc: Toolchain, compile_model: Callable[[Path | None], None]) -> list[Path]:
    """The package's objects (``native_objects``) and the model's own object (``compile_model(header)``), the
    model's compile starting as soon as the precompiled header is there, beside the package's sources when they
    are still being compiled (a first build). Returns the package's objects."""
    if native_objects_ready(tc) and precompiled_header_ready(tc):
        compile_model(precompiled_header(tc))
        return native_objects(tc)
    with ThreadPoolExecutor(max_workers=1) as side:
        objects = side.submit(native_objects, tc)
        compile_model(precompiled_header(tc))  # waits for the header, which native_objects builds first
        return objects.result()


# ----------------------------------------------------------------------------------------------- precompiled header

#: the header every model translation unit starts with (Stan's model header), precompiled in the cache
MODEL_HEADER = "stan_dp_model_header.hpp"


def precompiled_header_enabled(tc: Toolchain) -> bool:
    """Whether model compiles start from a precompiled Stan model header: with GCC, unless
    ``STAN_DP_PRECOMPILED_HEADER`` is 0 / false / no / off."""
    setting = os.environ.get("STAN_DP_PRECOMPILED_HEADER", "1").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    version = _compiler_version(tc.cxx).lower()
    return "clang" not in version and ("g++" in version or "gcc" in version)


def precompiled_header_ready(tc: Toolchain) -> bool:
    """Whether the precompiled header is built already (or not used: nothing to build)."""
    if not precompiled_header_enabled(tc):
        return True
    return (cache_root() / f"header-{tc.header_key()}" / (MODEL_HEADER + ".gch")).exists()


def precompiled_header(tc: Toolchain | None = None) -> Path | None:
    """The cached model header whose precompiled form (``.gch``) sits beside it, building both once per
    toolchain and flags; None when precompiled headers are off or the build failed (models then compile
    without one: the same code, more slowly)."""
    tc = tc or find_toolchain()
    if not precompiled_header_enabled(tc):
        return None
    directory = cache_root() / f"header-{tc.header_key()}"
    header = directory / MODEL_HEADER
    if header.with_name(MODEL_HEADER + ".gch").exists():
        return header
    with _locked(cache_root() / f"header-{tc.header_key()}.lock"):
        if header.with_name(MODEL_HEADER + ".gch").exists():
            return header
        staging = Path(tempfile.mkdtemp(dir=cache_root(), prefix=".header-"))
        try:
            (staging / MODEL_HEADER).write_text("#include <stan/model/model_header.hpp>\n")
            cmd = [tc.cxx, *cxx_flags(tc.cxx)]
            for inc in tc.include_dirs:
                cmd += ["-isystem", str(inc)]
            cmd += ["-x", "c++-header", str(staging / MODEL_HEADER), "-o", str(staging / (MODEL_HEADER + ".gch"))]
            try:
                _run_compiler(cmd, "Stan's model header")
            except ToolchainError:
                return None
            shutil.rmtree(directory, ignore_errors=True)
            os.replace(staging, directory)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return header


def _header_arguments(header: Path | None) -> tuple[str, ...]:
    """Compiler arguments that start a model unit from the precompiled header (none without one). The unit's
    own ``#include <stan/model/model_header.hpp>`` then finds the header's include guard already set."""
    return () if header is None else ("-include", str(header))


# ----------------------------------------------------------------------------------------------- stanc

_MODEL_NAME_OK = re.compile(r"[^A-Za-z0-9_]")


def model_name_for(stan_file: Path) -> str:
    """A valid C++ identifier derived from the file name (Stan's own convention: name + '_model')."""
    stem = _MODEL_NAME_OK.sub("_", stan_file.stem)
    if not stem or stem[0].isdigit():
        stem = "m_" + stem
    return stem + "_model"


def run_stanc(tc: Toolchain, stan_file: Path, args: list[str]) -> str:
    """Run stanc with ``args`` on ``stan_file`` and return stdout; stanc errors become StanCompileError. A relative
    path is taken from the caller's working directory (stanc runs in the file's folder)."""
    stan_file = Path(stan_file).resolve()
    proc = subprocess.run(
        [str(tc.stanc), *args, str(stan_file)], capture_output=True, text=True, cwd=stan_file.parent
    )
    if proc.returncode != 0:
        raise StanCompileError(stanc_error_text(proc.stderr or proc.stdout, stan_file.name, tc.version))
    return proc.stdout


def stanc_info(stan_file: Path, stanc_args: tuple[str, ...] = ()) -> dict:
    """stanc's ``--info`` JSON (declared inputs, parameters, transformed parameters, generated quantities, each
    with its element type and number of dimensions); ``stanc_args`` may carry ``--include-paths``."""
    includes = [a for a in stanc_args if a.startswith("--include-paths")]
    return json.loads(run_stanc(find_toolchain(), Path(stan_file), [*includes, "--info"]))


def canonical_program(stan_file: Path, stanc_args: tuple[str, ...] = ()) -> str:
    """stanc's canonical printing of the program (one declaration per line, includes expanded, comments
    removed, braces on every branch and loop); ``stanc_args`` may carry ``--include-paths``."""
    includes = [a for a in stanc_args if a.startswith("--include-paths")]
    return run_stanc(find_toolchain(), Path(stan_file), [
        *includes, "--auto-format", "--canonicalize", "deprecations,includes,parentheses,braces,strip-comments",
    ])


# ----------------------------------------------------------------------------------------------- models


def library_key(tc: Toolchain, source: str, stanc_args: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(source.encode())
    h.update(" ".join(stanc_args).encode())
    h.update(tc.key().encode())
    return h.hexdigest()[:16]


def library_row_program(library: Path) -> "RowProgram | None":
    """The row program compiled into a library built by ``build_model_library`` (None if it has none)."""
    info = json.loads((Path(library).parent / "build.json").read_text()).get("row_program")
    if not info:
        return None
    return RowProgram(info["text"], info["count_name"], tuple(info["row_variables"]), tuple(info["removed"]))


def library_shard_program(library: Path) -> "tuple[ShardProgram | None, str]":
    """The shard program compiled into a library built by ``build_model_library``, or None and the reason why
    the library has none (the rewrite's refusal or stanc's objection)."""
    info = json.loads((Path(library).parent / "build.json").read_text()).get("shard_program") or {}
    if not info.get("text"):
        return None, info.get("refused", "the library was built without a shard program")
    return ShardProgram(info["text"], info["count_name"], tuple(info["row_variables"]),
                        tuple(info["hook_arguments"]), tuple(info["kernels"]), bool(info["slice_rows"])), ""


_ROW_PROGRAM_RENAMES = ("new_model", "get_stan_profile_data", "stan_model")


def kernel_functions() -> tuple[str, ...]:
    """The C++ names of the shard program's per-row kernels (stan_dp/stan/native/shard_kernels.hpp)."""
    return tuple(k[0] for k in KERNELS.values()) + tuple(k[0] for k in GLM_KERNELS.values())


def _shard_glue(name: str, shard: "ShardProgram", shard_hpp: Path) -> list[str]:
    """C++ of the shard program: the row loop ``sdp_shard_rows`` (declared before stanc's code, which calls it,
    and defined after it, as a call of stan_dp::shard::run_rows on the row function), the per-row kernels, and
    the program included with the global names of stanc's boilerplate renamed."""
    space = f"{name}_shard_namespace"
    k = len(shard.hook_arguments)
    types = ", ".join(f"typename T{j}__" for j in range(k))
    params = ", ".join(f"const T{j}__& a{j}" for j in range(k))
    args = ", ".join(f"a{j}" for j in range(k))
    lines = [
        '#include "shard_kernels.hpp"',
        f"namespace {space} {{",
        f"template <{types}>",
        f"void sdp_shard_rows({params}, std::ostream* pstream__);",
        *[f"using stan_dp::shard::{function};" for function in kernel_functions()],
        "}",
    ]
    lines += [f"#define {n} sdp_shard_program_{n}" for n in _ROW_PROGRAM_RENAMES]
    lines += [f'#include "{shard_hpp}"']
    lines += [f"#undef {n}" for n in _ROW_PROGRAM_RENAMES]
    lines += [
        f"namespace {space} {{",
        f"template <{types}>",
        f"void sdp_shard_rows({params}, std::ostream* pstream__) {{",
        "  stan_dp::shard::run_rows(",
        "      [&](int sdp_i, auto& lp, auto& accumulator) {",
        f"        sdp_row_lp<false>(sdp_i, {args}, lp, accumulator, pstream__);",
        "      },",
        f"      {args});",
        "}",
        "}",
    ]
    return lines


def _model_unit(model_hpp: Path, row_hpp: Path | None, shard: "tuple[ShardProgram, Path, str] | None" = None
                ) -> str:
    """The translation unit of a model library: the model, its row program and its shard program (when there are
    ones, with the global names of stanc's boilerplate renamed so that the programs fit in one unit) and the
    factories of the row and shard programs."""
    lines = ["#include <stan/model/model_header.hpp>"]
    factory = "nullptr"
    if row_hpp is not None:
        lines += [f"#define {n} sdp_row_program_{n}" for n in _ROW_PROGRAM_RENAMES]
        lines += [f'#include "{row_hpp}"']
        lines += [f"#undef {n}" for n in _ROW_PROGRAM_RENAMES]
        factory = "&sdp_row_program_new_model(data_context, seed, msg_stream)"
    shard_factory = "nullptr"
    if shard is not None:
        program, shard_hpp, name = shard
        lines += _shard_glue(name, program, shard_hpp)
        shard_factory = "&sdp_shard_program_new_model(data_context, seed, msg_stream)"
    lines += [
        f'#include "{model_hpp}"',
        "stan::model::model_base* sdp_new_row_program_model(stan::io::var_context& data_context, unsigned int seed,",
        "                                                   std::ostream* msg_stream) {",
        "  (void)data_context; (void)seed; (void)msg_stream;",
        f"  return {factory};",
        "}",
        "stan::model::model_base* sdp_new_shard_program_model(stan::io::var_context& data_context,",
        "                                                     unsigned int seed, std::ostream* msg_stream) {",
        "  (void)data_context; (void)seed; (void)msg_stream;",
        f"  return {shard_factory};",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _shard_program_hpp(tc: Toolchain, tmp: Path, name: str, canonical: str, stanc_args: tuple[str, ...]
                       ) -> "tuple[ShardProgram | None, Path | None, str]":
    """Derive the shard program of a program and compile it with stanc: (program, its .hpp, "") or (None, None,
    the reason it has none)."""
    reasons = []
    for slice_rows in (False, True):  # rows as elements (faster); else as one-row slices (types as written)
        try:
            program = shard_programs.default_shard_program(canonical, slice_rows=slice_rows)
        except shard_programs.ShardRefusal as exc:
            return None, None, f"the shard rewrite does not apply: {exc}"
        source = tmp / f"{name}_shard.stan"
        source.write_text(program.text)
        hpp = tmp / f"{name}_shard.hpp"
        try:
            run_stanc(tc, source, [*stanc_args, "--allow-undefined", f"--name={name}_shard", f"--o={hpp}"])
            break
        except StanCompileError as exc:
            reasons.append(" ".join(str(exc).split("\n")[1:])[:300])
    else:
        return None, None, "stanc rejected the shard rewrite: " + " / ".join(reasons)
    return program, hpp, ""


def build_model_library(stan_file: Path, stanc_args: tuple[str, ...] = (), *, progress: bool = False,
                        rows: bool = True) -> Path:
    """Return the cached shared library for ``stan_file``, compiling it if the cache has no entry.

    The program's row program for the default split (``stan_dp.stan.row_program.default_row_program``) is derived
    from stanc's canonical printing and compiled into the same library, in the same translation unit; what was
    derived is recorded in the entry's ``build.json`` (``library_row_program`` reads it back). The analysis code
    is part of the cache key. ``progress`` prints a line to stderr when a compilation starts and its time when
    it ends (nothing is printed for a cached library). ``rows=False``: a program whose rows are never evaluated
    one by one (a noise-aware posterior program): no row or shard program is derived (a shorter compile).
    """
    stan_file = Path(stan_file).resolve()
    if not stan_file.is_file():
        raise FileNotFoundError(f"Stan program not found: {stan_file}")
    stanc_args = (*DEFAULT_STANC_ARGS, *stanc_args)
    tc = find_toolchain()
    source = stan_file.read_text()
    if "#include" in source:
        # Included files are part of the program: key on stanc's expansion of them as well.
        source += run_stanc(tc, stan_file, [*stanc_args, "--print-canonical"])
    if rows:
        source += "\n// row program analysis\n" + Path(row_programs.__file__).read_text()
        source += "\n// shard program rewrite\n" + Path(shard_programs.__file__).read_text()
    else:
        source += "\n// no row program\n"
    name = model_name_for(stan_file)
    key = library_key(tc, source, stanc_args)
    entry = cache_root() / "models" / f"{name}-{key}"
    library = entry / "model.so"
    if library.exists():
        return library
    # Check the program with stanc first: a syntax error must not wait for the package objects, and it comes
    # before the compile notice, so that the error is the first thing the user reads.
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        # Compile a copy so that #include resolution and the file name stay those of the user's program.
        hpp = Path(tmp) / f"{name}.hpp"
        run_stanc(tc, stan_file, [*stanc_args, f"--name={name}", f"--o={hpp}"])
        kind = "program" if native_objects_ready(tc) and precompiled_header_ready(tc) else "program and package"
        if progress:
            print(compile_clock.compile_notice(stan_file.name, cache_root(), kind), file=sys.stderr, flush=True)
        with compile_clock.Heartbeat(f"compiling {stan_file.name}", show=progress):
            built = _build_library(tc, stan_file, stanc_args, Path(tmp), hpp, name, key, entry, library, rows=rows)
    seconds = time.monotonic() - started
    if built:
        compile_clock.record_compile(cache_root(), kind, seconds)
    if progress:
        print(f"Compiled {stan_file.name} in {seconds:.0f} s.", file=sys.stderr, flush=True)
    return library


def _build_library(tc: Toolchain, stan_file: Path, stanc_args: tuple[str, ...], tmp: Path, hpp: Path, name: str,
                   key: str, entry: Path, library: Path, rows: bool = True) -> bool:
    """Compile the checked program (stanc's ``hpp``) with its row and shard programs (``rows``) into the cache
    ``entry``; False when another process built it meanwhile."""
    row_program: RowProgram | None = None
    shard: ShardProgram | None = None
    shard_hpp: Path | None = None
    shard_refused = "not derived: a program whose rows are not evaluated one by one"
    if rows:
        canonical = canonical_program(stan_file, stanc_args)
        row_program = row_programs.default_row_program(canonical)
        shard, shard_hpp, shard_refused = _shard_program_hpp(tc, tmp, name, canonical, stanc_args)
    row_hpp = None
    if row_program is not None:
        row_stan = tmp / f"{name}_rows.stan"
        row_stan.write_text(row_program.text)
        row_hpp = tmp / f"{name}_rows.hpp"
        run_stanc(tc, row_stan, [*stanc_args, f"--name={name}_rows", f"--o={row_hpp}"])
    unit = tmp / f"{name}_unit.cpp"
    glue = None if shard is None or shard_hpp is None else (shard, shard_hpp, name)
    unit.write_text(_model_unit(hpp, row_hpp, glue))
    with _locked(entry.with_suffix(".lock")):
        if library.exists():
            return False
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{name}-"))
        try:
            obj = staging / "model.o"
            # on a first build the model compiles beside the package's objects once the header is there
            objects = _objects_and_model(
                tc, lambda header: _compile_object(tc, unit, obj, _header_arguments(header)))
            lib_tmp = staging / "model.so"
            cmd = [tc.cxx, "-shared", "-pthread", "-o", str(lib_tmp), str(obj), *map(str, objects)]
            cmd += ["-L", str(tc.lib_dir), f"-Wl,-rpath,{tc.lib_dir}"]
            cmd += list(tc.extra_link_args)
            cmd += [f"-l{lib}" for lib in tc.libraries]
            _run_compiler(cmd, f"the library for {stan_file.name}")
            obj.unlink()
            shutil.copy2(stan_file, staging / stan_file.name)
            (staging / "build.json").write_text(
                json.dumps({"stan_file": str(stan_file), "toolchain": tc.version, "key": key,
                            "row_program": None if row_program is None else {
                                "text": row_program.text,
                                "count_name": row_program.count_name,
                                "row_variables": list(row_program.row_variables),
                                "removed": list(row_program.removed)},
                            "shard_program": {"refused": shard_refused} if shard is None else {
                                "text": shard.text,
                                "count_name": shard.count_name,
                                "row_variables": list(shard.row_variables),
                                "hook_arguments": list(shard.hook_arguments),
                                "kernels": list(shard.kernels),
                                "slice_rows": shard.slice_rows}})
            )
            os.replace(staging, entry)  # atomic: the entry appears complete or not at all
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return True
