"""The package layout (README "Layout"): folders by stage, imports only downward, no import that dodges a cycle.

Every module's imports are read from its source (ast), module-level and function-level alike, and checked
against the order of the stages:

    privacy                        (the seams only: the row-likelihood protocol it takes)
    samplers  -> privacy           (and the seams)
    models                         (the seams only)
    output    -> privacy           (never run/: a run's result type lives in output/run_result.py)
    stan      -> output, privacy   (never samplers/ or run/)
    phases    -> samplers, privacy, output, stan          (the anchor, warm starts, the chain loop, checkpoints)
    methods   -> phases, samplers, privacy, output, stan  (one sub-folder per method, and their registry)
    run       -> methods, phases, samplers, privacy, output, stan   (planning and the pipeline)
    model.py  -> stan, run, methods, phases, output, samplers, privacy
    tools/, audit/ -> all of the above and model.py
    cli.py, stan_dp/__init__.py -> anything

The seams (``likelihood``, ``run_options``, ``_version``, ``_moved``, ``suggest``, ``user_warnings``) sit below every stage and import nothing of
the package. A function-level import of a package module is a lazy import for start-up speed at most, on top
only (model.py, cli.py, tools/, audit/): it must obey the same order and close no cycle. In privacy/, samplers/
and stan/ there is no function-level import at all (only optional third-party packages whose absence is handled
may be imported inside a function there); run/, methods/, phases/, output/ and models/ import package modules at
module level.
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from stan_dp._moved import REMOVED_IN

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stan_dp"

FOLDERS = ("privacy", "samplers", "models", "output", "stan", "phases", "methods", "run", "tools", "audit")
SEAMS = ("likelihood", "run_options", "_version", "_moved", "suggest", "user_warnings")
#: stage -> the stages it may import (besides itself)
ALLOWED: dict[str, set[str]] = {
    "seam": set(),
    "privacy": {"seam"},
    "samplers": {"privacy", "seam"},
    "models": {"seam"},
    "output": {"privacy", "seam"},
    "stan": {"output", "privacy", "seam"},
    "phases": {"samplers", "privacy", "output", "stan", "seam"},
    "methods": {"phases", "samplers", "privacy", "output", "stan", "seam"},
    "run": {"methods", "phases", "samplers", "privacy", "output", "stan", "seam"},
    "model": {"stan", "run", "methods", "phases", "output", "samplers", "privacy", "seam"},
    "tools": {"model", "run", "methods", "phases", "stan", "output", "samplers", "models", "privacy", "seam"},
    "audit": {"model", "run", "methods", "phases", "stan", "output", "samplers", "models", "privacy", "seam"},
    "cli": {"model", "tools", "audit", "run", "methods", "phases", "stan", "output", "samplers", "models", "privacy",
            "seam"},
    "package": {"cli", "model", "tools", "audit", "run", "methods", "phases", "stan", "output", "samplers", "models",
                "privacy", "seam"},
}
#: folders with no function-level import at all
STRICT = ("privacy", "samplers", "stan")
#: folders with no function-level import of a package module (third-party libraries may load late, for start-up)
NO_LATE_PACKAGE_IMPORTS = ("run", "methods", "phases", "output", "models")
#: optional third-party packages whose absence is handled where they are imported (allowed inside functions)
OPTIONAL = ("cmdstanpy", "httpstan", "ray", "pyarrow")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def stage(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    if parts[1] in FOLDERS:
        return parts[1]
    if parts[1] in SEAMS:
        return "seam"
    if parts[1] in ("model", "cli"):
        return parts[1]
    if parts[1] == "recipe":  # how DPStanModel builds a run's likelihood: model.py's stage
        return "model"
    raise AssertionError(f"{module}: a module at the top of stan_dp/ that belongs to no stage (README 'Layout')")


def _imports(module: str, path: Path) -> list[tuple[str, bool, int]]:
    """(imported name, inside a function?, line) for every import statement of the module."""
    tree = ast.parse(path.read_text())
    is_package = path.name == "__init__.py"
    found: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function, child.lineno) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:  # "from . import x" imports the module x when there is one
                    sub = f"{target}.{alias.name}"
                    found.append((sub if sub in MODULES else target, in_function, child.lineno))
            visit(child, inside)

    visit(tree, False)
    return found


def _package_target(name: str) -> str | None:
    """The package module an imported name refers to (the longest known prefix), or None outside the package."""
    if name != "stan_dp" and not name.startswith("stan_dp."):
        return None
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) if parts else None


EDGES = [(module, target, in_function, line)
         for module, path in MODULES.items()
         for name, in_function, line in _imports(module, path)
         for target in [_package_target(name)] if target is not None and target != module]


def test_every_module_has_a_stage_and_folders_say_what_they_take_and_give():
    for module in MODULES:
        stage(module)
    for folder in FOLDERS:
        doc = ast.get_docstring(ast.parse((PACKAGE / folder / "__init__.py").read_text())) or ""
        assert "Takes:" in doc and "Gives:" in doc, f"stan_dp/{folder}/__init__.py: say what the stage takes and gives"


def test_the_stage_order_is_acyclic():
    order: list[str] = []
    pending = dict(ALLOWED)
    while pending:
        ready = [s for s, below in pending.items() if below <= set(order)]
        assert ready, f"the allowed imports between stages form a cycle among {sorted(pending)}"
        order.extend(sorted(ready))
        for s in ready:
            del pending[s]


def test_imports_run_downward_only():
    upward = [f"{module}:{line} imports {target} ({stage(module)} -> {stage(target)}"
              f"{', inside a function' if in_function else ''})"
              for module, target, in_function, line in EDGES
              if stage(target) != stage(module) and stage(target) not in ALLOWED[stage(module)]]
    assert upward == []


def test_no_function_level_imports_in_privacy_samplers_stan():
    late = []
    for module, path in MODULES.items():
        if stage(module) not in STRICT:
            continue
        for name, in_function, line in _imports(module, path):
            if in_function and name.split(".")[0] not in OPTIONAL:
                late.append(f"{module}:{line} imports {name} inside a function")
    assert late == []


def test_no_late_package_imports_in_run_output_models():
    """Package modules are imported at module level in run/, output/ and models/ too; only the top (model.py,
    cli.py, tools/, audit/) keeps lazy imports of package modules, for start-up speed."""
    late = [f"{module}:{line} imports {target} inside a function" for module, target, in_function, line in EDGES
            if in_function and stage(module) in NO_LATE_PACKAGE_IMPORTS]
    assert late == []


def test_no_import_cycle_even_counting_function_level_imports():
    """With every function-level import counted as if it ran at import time, the module graph has no cycle:
    no late import is there to dodge one."""
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, target, _, _ in EDGES:
        graph[module].add(target)
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(trail[trail.index(nxt):] + [nxt] if nxt in trail else [node, nxt])
            elif nxt not in state:
                visit(nxt, trail + [nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_the_named_rules_of_the_layout():
    """The named rules of the layout, spelled out: privacy imports only the seams, samplers import privacy only,
    stan imports neither samplers nor run, output does not import run."""
    bad = [(module, target) for module, target, _, _ in EDGES
           if (stage(module) == "privacy" and stage(target) not in ("privacy", "seam"))
           or (stage(module) == "samplers" and stage(target) not in ("samplers", "privacy", "seam"))
           or (stage(module) == "stan" and stage(target) in ("samplers", "run"))
           or (stage(module) == "output" and stage(target) == "run")]
    assert bad == []


def test_accounting_knows_no_algorithm_by_name():
    """Calibration takes the kernel's declaration: nothing in privacy/ reads the sampler registry."""
    for path in (PACKAGE / "privacy").glob("*.py"):
        assert "ALL_ALGORITHMS" not in path.read_text() and "ALGORITHMS[" not in path.read_text(), path.name


_OLD_PATHS_SCRIPT = r"""
import importlib, json, sys, warnings
import stan_dp
from stan_dp._moved import MOVED
out = {}
for old, new in MOVED.items():
    news = (new,) if isinstance(new, str) else tuple(new)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    targets = [importlib.import_module(n) for n in news]
    names = sorted({n for t in targets for n in getattr(t, "__all__", ()) if not n.startswith("_")})
    out[old] = {
        "warned": [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)],
        "same": module is targets[0],
        "exports": all(getattr(module, n) is getattr(next(t for t in targets if hasattr(t, n)), n) for n in names),
        "names": len(names),
    }
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from stan_dp.run import run_chains, RunResult, DualAveraging
from stan_dp.phases.chains import run_chains as new_run_chains
out["stan_dp.run (old module names)"] = {
    "warned": [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)],
    "same": run_chains is new_run_chains, "exports": True, "names": 3}
out["callable"] = [callable(stan_dp.compare), callable(stan_dp.advise)]
print(json.dumps(out))
"""


def test_old_module_paths_warn_and_give_the_new_objects():
    """Each old top-level module path (and the names of the old module stan_dp.run) still imports, with a
    DeprecationWarning naming the new path, and gives the same objects; stan_dp.compare and stan_dp.advise stay
    callable after their old module paths are imported. Run in a fresh interpreter: the aliases change
    sys.modules and the stan_dp package attributes."""
    proc = subprocess.run([sys.executable, "-c", _OLD_PATHS_SCRIPT], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result.pop("callable") == [True, True]
    for old, info in result.items():
        assert info["warned"] and all("deprecated" in w and "moved to stan_dp." in w for w in info["warned"]), old
        assert all(f"removed in version {REMOVED_IN}" in w for w in info["warned"]), old
        forwarding = old in ("stan_dp.sampling", "stan_dp.compare", "stan_dp.advise")  # aliases, not the module
        assert info["same"] if not forwarding else (info["exports"] and info["names"] > 0), old


def test_the_changelog_names_every_shim_and_the_version_that_removes_it():
    """docs/changelog.md's "Deprecations and their removal" lists each compatibility shim with the version the
    warnings name (stan_dp._moved.REMOVED_IN), and that version is the next minor release after the current one."""
    from stan_dp._version import __version__

    major, minor, _ = (int(part) for part in __version__.split("."))
    assert REMOVED_IN == f"{major}.{minor + 1}.0"
    changelog = (ROOT / "docs" / "changelog.md").read_text()
    section = changelog.split("### Deprecations and their removal", 1)[1].split("\n### ", 1)[0]
    for shim in ("stan_dp/_moved.py", "stan_dp/run/__init__.py", "stan_dp.privacy.calibrate", "`thin`"):
        row = next((line for line in section.splitlines() if shim in line), None)
        assert row is not None and row.rstrip(" |").endswith(REMOVED_IN), shim


@pytest.mark.parametrize("old", ["stan_dp.sampling", "stan_dp.reference_models"])
def test_the_two_user_facing_old_paths_keep_their_names(old):
    """The paths users import most keep their public names: sample_private / resolve_algorithm / run_defaults /
    RUN_OPTIONS from stan_dp.sampling, the model classes from stan_dp.reference_models."""
    names = {"stan_dp.sampling": "sample_private, resolve_algorithm, run_defaults, RUN_OPTIONS, RUN_DEFAULTS",
             "stan_dp.reference_models": "GaussianMeanModel, LogisticRegressionModel, BananaModel"}[old]
    code = (f"import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            f"try:\n    from {old} import {names}\nexcept DeprecationWarning as w:\n    print('warned', w)\n"
            f"warnings.simplefilter('ignore')\nfrom {old} import {names}\nprint('ok')")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warned" in proc.stdout and proc.stdout.strip().endswith("ok")


def test_paths_relative_to_moved_modules_still_resolve():
    """Files that moved modules find next to themselves: the C++ sources and the demo's bundled program."""
    from stan_dp.stan.toolchain import NATIVE_DIR, NATIVE_SOURCES
    from stan_dp.tools.demo import BUNDLED

    assert all((NATIVE_DIR / name).is_file() for name in NATIVE_SOURCES)
    assert (BUNDLED / "logistic.stan").is_file()


#: the public entry points whose keyword lists are the documented API (their parameters are the user's options)
WIDE_PUBLIC_ENTRY_POINTS = {"stan_dp.run.pipeline.sample_private", "stan_dp.model.DPStanModel.sample",
                            "stan_dp.audit.runner.audit", "stan_dp.tools.advise.advise"}


def _functions() -> list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method of the package."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((name, child))
                visit(child, name)

    for module, path in MODULES.items():
        visit(ast.parse(path.read_text()), module)
    return found


def test_no_function_is_longer_than_one_reading_or_takes_too_many_parameters():
    """The house rules a maintainer relies on: no function body over 100 lines (its docstring aside), and no
    function over 12 parameters (self / cls aside) except the public entry points whose keywords are the API."""
    long, wide = [], []
    for name, node in _functions():
        body = node.body
        docstring = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
            isinstance(body[0].value.value, str)
        first = body[1].lineno if docstring and len(body) > 1 else body[0].lineno
        if node.end_lineno - first + 1 > 100:
            long.append(f"{name}: {node.end_lineno - first + 1} lines")
        args = node.args
        positional = [a.arg for a in (*args.posonlyargs, *args.args)]
        count = len(positional) + len(args.kwonlyargs) - (positional[:1] in (["self"], ["cls"]))
        if count > 12 and name not in WIDE_PUBLIC_ENTRY_POINTS:
            wide.append(f"{name}: {count} parameters")
    assert long == [] and wide == [], (long, wide)


#: functions still over the length limit below, each being rewritten (path:name); take a name out once its
#: function is short: the test fails for a name listed here whose function is no longer too long
PENDING_LONG_FUNCTIONS: set[str] = set()


def test_no_function_is_over_100_lines_docstring_and_signature_included():
    """Every function of the package, nested ones included, spans at most 100 lines from its ``def`` to its last
    line (signature and docstring count), apart from the pending ones, which must still be too long."""
    long = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 100:
                long.add(f"{path.relative_to(ROOT).as_posix()}:{node.name}")
    too_long, short_now = sorted(long - PENDING_LONG_FUNCTIONS), sorted(PENDING_LONG_FUNCTIONS - long)
    assert too_long == [], f"functions over 100 lines: {too_long}"
    assert short_now == [], f"no longer over 100 lines, take them out of PENDING_LONG_FUNCTIONS: {short_now}"


def test_the_tests_mirror_the_package_folders():
    """tests/ has one folder per folder of the package that has tests of its own (and support/ for shared helpers);
    a test folder names a package folder, and every test folder is on pytest's import path (pyproject.toml)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and later
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    assert folders - {"support"} <= set(FOLDERS), sorted(folders - {"support"} - set(FOLDERS))
    assert {"privacy", "samplers", "stan", "output", "phases", "methods", "run", "audit"} <= folders
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert set(config["pythonpath"]) == {"tests", *(f"tests/{name}" for name in folders)}
