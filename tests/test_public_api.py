"""The public API is a promise: every public signature is pinned in tests/public_api.json.

Public means: every callable named in ``stan_dp.__all__`` and ``stan_dp.privacy.__all__``, the public methods
of public classes (``DPStanModel``), and ``stan_dp.audit`` (a callable package: ``stan_dp.audit(...)`` is
``stan_dp.audit.audit(...)``). Two checks:

* compatibility: every pinned parameter still exists with the same kind and default, and no parameter was added
  that an existing call would have to give (a new parameter needs a default or ``**kwargs`` to absorb it);
* the pin itself: the signatures equal the file, so that any change to the public API is deliberate. After a
  deliberate, compatible change, refresh the file with ``python tests/test_public_api.py --update``.
"""
from __future__ import annotations

import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

PIN = Path(__file__).with_name("public_api.json")
_MISSING = "<no default>"


def _parameters(obj: Any) -> list[dict[str, str]]:
    sig = inspect.signature(obj)
    return [{"name": p.name, "kind": p.kind.name,
             "default": _MISSING if p.default is inspect.Parameter.empty else repr(p.default)}
            for p in sig.parameters.values()]


def public_signatures() -> dict[str, list[dict[str, str]]]:
    """Qualified name -> parameters of every public callable (see the module docstring)."""
    import stan_dp
    import stan_dp.privacy

    found: dict[str, list[dict[str, str]]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for package in (stan_dp, stan_dp.privacy):
            for name in package.__all__:
                obj = getattr(package, name)
                if inspect.ismodule(obj) and hasattr(obj, "__wrapped__"):
                    # an old module path that is also a function (``stan_dp.compare`` once ``import
                    # stan_dp.compare`` ran: a callable forwarding alias, stan_dp._moved): its function
                    obj = obj.__wrapped__
                if inspect.isclass(obj):
                    if issubclass(obj, BaseException):
                        continue
                    found[f"{package.__name__}.{name}"] = _parameters(obj)
                    for attr, member in vars(obj).items():
                        if not attr.startswith("_") and inspect.isfunction(member):
                            found[f"{package.__name__}.{name}.{attr}"] = _parameters(member)
                elif callable(obj) and not inspect.ismodule(obj):
                    found[f"{package.__name__}.{name}"] = _parameters(obj)
        found["stan_dp.audit"] = _parameters(stan_dp.audit.audit)  # stan_dp.audit(...) calls it
    return found


def _breaks(old: list[dict[str, str]], new: list[dict[str, str]]) -> list[str]:
    """What an existing call written against ``old`` would no longer do with ``new``."""
    problems = []
    by_name = {p["name"]: p for p in new}
    absorbs = any(p["kind"] in ("VAR_KEYWORD",) for p in new)
    for p in old:
        q = by_name.get(p["name"])
        if q is None:
            if not (absorbs and p["kind"] in ("KEYWORD_ONLY", "POSITIONAL_OR_KEYWORD") and p["default"] != _MISSING):
                problems.append(f"parameter {p['name']!r} was removed")
            continue
        if q["default"] != p["default"]:
            problems.append(f"the default of {p['name']!r} changed from {p['default']} to {q['default']}")
        if p["kind"] == "POSITIONAL_OR_KEYWORD" and q["kind"] == "KEYWORD_ONLY":
            problems.append(f"{p['name']!r} can no longer be given by position")
    old_names = {p["name"] for p in old}
    for q in new:
        if q["name"] not in old_names and q["default"] == _MISSING and q["kind"] not in ("VAR_POSITIONAL",
                                                                                         "VAR_KEYWORD"):
            problems.append(f"new required parameter {q['name']!r}")
    old_positional = [p["name"] for p in old if p["kind"].startswith("POSITIONAL")]
    new_positional = [q["name"] for q in new if q["kind"].startswith("POSITIONAL")]
    if new_positional[:len(old_positional)] != old_positional and old_positional:
        problems.append(f"positional order changed: {old_positional} -> {new_positional[:len(old_positional)]}")
    return problems


def test_every_pinned_signature_still_accepts_the_calls_it_accepted():
    """No public callable disappeared, lost a parameter, changed a default or gained a required parameter."""
    pinned = json.loads(PIN.read_text())
    now = public_signatures()
    problems = [f"{name}: gone" for name in pinned if name not in now]
    problems += [f"{name}: {p}" for name, old in pinned.items() if name in now for p in _breaks(old, now[name])]
    assert problems == [], "\n".join(problems)


def test_the_public_signatures_equal_the_pinned_file():
    """Any change of the public API is deliberate: the file is refreshed with `python tests/test_public_api.py
    --update` after a compatible change (the test above keeps it compatible)."""
    pinned = json.loads(PIN.read_text())
    now = public_signatures()
    changed = sorted(n for n in set(pinned) | set(now) if pinned.get(n) != now.get(n))
    assert changed == [], f"public signatures changed: {changed}; if deliberate, run python tests/test_public_api.py --update"


def test_the_compatibility_check_can_fail():
    """The check sees a removed parameter, a changed default, a new required parameter and a lost position."""
    old = [{"name": "x", "kind": "POSITIONAL_OR_KEYWORD", "default": _MISSING},
           {"name": "k", "kind": "KEYWORD_ONLY", "default": "1"}]
    assert _breaks(old, old) == []
    assert any("removed" in p for p in _breaks(old, old[:1]))
    assert any("default" in p for p in _breaks(old, [old[0], {**old[1], "default": "2"}]))
    assert any("required" in p for p in _breaks(old, [*old, {"name": "z", "kind": "KEYWORD_ONLY",
                                                               "default": _MISSING}]))
    assert any("position" in p for p in _breaks(old, [{**old[0], "kind": "KEYWORD_ONLY"}, old[1]]))


def test_privacy_calibrate_still_takes_an_algorithm_name_with_a_deprecation_warning():
    """The name form of stan_dp.privacy.calibrate (its first argument before it took a kernel class) warns and
    gives the same plan as stan_dp.calibrate with that name and as the kernel-class form."""
    import stan_dp
    import stan_dp.privacy
    from stan_dp.samplers import ALL_ALGORITHMS

    budget = dict(epsilon=1.0, delta=1e-5, chains=2, iterations=100)
    with pytest.warns(DeprecationWarning, match=r"algorithm name is deprecated.*refused from version 0\.2\.0"):
        by_name = stan_dp.privacy.calibrate("penalty", **budget)
    assert by_name.to_dict() == stan_dp.calibrate("penalty", **budget).to_dict()
    by_class = stan_dp.privacy.calibrate(ALL_ALGORITHMS["penalty"], **budget)
    assert by_class.to_dict()["tau_l"] == by_name.to_dict()["tau_l"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python tests/test_public_api.py --update")
    PIN.write_text(json.dumps(public_signatures(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PIN}")


def _in_a_fresh_interpreter(code: str) -> str:
    """What ``code`` prints when run by a new Python process (nothing of the package imported yet)."""
    import subprocess

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_import_stan_dp_loads_no_accountant_and_every_public_name_and_folder_resolves():
    """A bare ``import stan_dp`` (a fresh interpreter) loads neither dp-accounting nor pandas, nor does importing the
    Ray actors' module ``stan_dp.stan.ray_rows`` load dp-accounting; afterwards every name in ``stan_dp.__all__`` and
    ``stan_dp.privacy.__all__`` resolves, as do the package's folders and the modules of stan_dp/privacy
    (``stan_dp.privacy.accounting``) as attributes, and a name that is neither is an AttributeError."""
    code = """
import sys, warnings
warnings.simplefilter("error", DeprecationWarning)
import stan_dp
loaded = sorted(m for m in ("dp_accounting", "pandas", "scipy.signal") if m in sys.modules)
import stan_dp.stan.ray_rows
loaded_by_actor = "dp_accounting" in sys.modules
import stan_dp.privacy as privacy
names = [getattr(stan_dp, n) for n in stan_dp.__all__] + [getattr(privacy, n) for n in privacy.__all__]
folders = [stan_dp.output.__name__, stan_dp.tools.__name__, privacy.accounting.__name__, privacy.evaluation.__name__]
missing = [hasattr(stan_dp, "no_such_name"), hasattr(privacy, "no_such_name"), hasattr(stan_dp, "engine")]
print(loaded, loaded_by_actor, all(n is not None for n in names), folders, missing)
"""
    out = _in_a_fresh_interpreter(code)
    assert out == ("[] False True ['stan_dp.output', 'stan_dp.tools', 'stan_dp.privacy.accounting', "
                   "'stan_dp.privacy.evaluation'] [False, False, False]"), out


def test_the_command_starts_without_the_accountant():
    """Building the ``stan-dp`` parser, every subcommand's arguments included (what ``stan-dp --help`` and every
    ``stan-dp`` process do first), loads neither dp-accounting nor pandas in a fresh interpreter; the accountant
    comes only with a subcommand that runs. The advise subcommand keeps its arguments (--epsilon, --algorithm)."""
    code = """
import sys
from stan_dp.cli import build_parser
parser = build_parser()
args = parser.parse_args(["advise", "m.stan", "--data", "d.json", "--epsilon", "1", "--delta", "1e-6",
                          "--algorithm", "dp-ssp"])
print(sorted(m for m in ("dp_accounting", "pandas") if m in sys.modules), args.command, args.algorithm)
"""
    out = _in_a_fresh_interpreter(code)
    assert out == "[] advise ['dp-ssp']", out
