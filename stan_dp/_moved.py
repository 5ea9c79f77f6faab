"""The module paths of the old flat layout, kept working with a ``DeprecationWarning`` until their removal in
version 0.2.0 (``REMOVED_IN``; docs/changelog.md, "Deprecations and their removal").

Every module of the package used to sit at the top of ``stan_dp/``; it now lives in its stage's folder
(README "Layout"). ``MOVED`` maps each old path to the new one. ``install`` (called by ``stan_dp/__init__``)
adds an import finder that answers the old paths, so ``import stan_dp.reference_models`` or
``from stan_dp.reference_models import GaussianMeanModel`` warns once and gives the very same module object as
the new path (no file stands at the old path, so git sees every move as a rename). An old module whose contents
went to several new modules (``stan_dp.sampling``), or whose name is also a function of ``stan_dp``
(``compare``, ``advise``), is a forwarding alias instead. Imports only the standard library: any module may use it.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings
from typing import Any, Mapping

__all__ = ["MOVED", "forward_names", "install"]

#: the release that removes the old paths (and the old names of ``stan_dp.run``, which forward through here)
REMOVED_IN = "0.2.0"
#: old module path -> new module path (several: an old module split in parts, looked up in this order)
MOVED: dict[str, str | tuple[str, ...]] = {
    "stan_dp.reference_models": "stan_dp.models.reference_models",
    "stan_dp.numpy_reference": "stan_dp.models.numpy_reference",
    **{f"stan_dp.{name}": f"stan_dp.stan.{name}" for name in (
        "toolchain", "row_program", "engine", "data", "inits", "stan_messages", "reference")},
    **{f"stan_dp.{name}": f"stan_dp.output.{name}" for name in (
        "arviz_compat", "inference_data", "stan_csv", "diagnostics", "compare", "files", "progress")},
    **{f"stan_dp.{name}": f"stan_dp.tools.{name}" for name in ("advise", "utility", "demo")},
    "stan_dp.auto": "stan_dp.run.auto",
    "stan_dp.run_lengths": "stan_dp.methods.kernels.run_lengths",
    **{f"stan_dp.{name}": f"stan_dp.phases.{name}" for name in ("warm_start", "threads")},
    # the modules of stan_dp/run/ that moved into the folders of phases and of methods
    **{f"stan_dp.run.{name}": f"stan_dp.phases.{name}" for name in (
        "adaptive_clip", "anchor", "dp_gd", "public_scale", "warm_start", "noise_aware", "chains", "checkpoint",
        "threads", "calibration")},
    **{f"stan_dp.run.{name}": f"stan_dp.methods.{name}" for name in ("registry", "method", "release_posterior")},
    **{f"stan_dp.run.{name}": f"stan_dp.methods.kernels.{name}" for name in (
        "kernel_plan", "kernel_run", "run_lengths", "forecast")},
    **{f"stan_dp.run.{name}": f"stan_dp.methods.dp_laplace.{name}" for name in ("laplace", "laplace_posterior")},
    **{f"stan_dp.run.{name}": f"stan_dp.methods.dp_ssp.{name}" for name in ("ssp", "ssp_program", "ssp_design")},
    **{f"stan_dp.run.{name}": f"stan_dp.methods.dp_glm.{name}" for name in (
        "glm_release", "glm_posterior", "glm_price")},
    "stan_dp.report": "stan_dp.privacy.statement",
    "stan_dp.sampling": ("stan_dp.run.pipeline", "stan_dp.run.plan", "stan_dp.methods.kernels.kernel_run"),
}
#: old module paths that are also functions of ``stan_dp``: the alias is callable (see _ForwardingAlias)
FUNCTIONS: dict[str, str] = {"stan_dp.compare": "compare", "stan_dp.advise": "advise"}


def _warn(old: str, new: str, stacklevel: int) -> None:
    """``stacklevel`` counts from the caller of ``_warn``; importlib's own frames are skipped by the warnings
    module, so the warning names the line that imports the old path."""
    warnings.warn(f"{old} is deprecated: it moved to {new}; the old path is removed in version {REMOVED_IN}.",
                  DeprecationWarning, stacklevel=stacklevel + 1)


class _ForwardingAlias(types.ModuleType):
    """An old module path that is not simply one new module: its attributes are looked up in the new modules in
    order, and when its name is also a function of ``stan_dp`` (``compare``, ``advise``) it is callable, so that
    importing the old path cannot leave a plain module where ``stan_dp.compare(...)`` is called (its docstring
    and signature are then the function's)."""

    def __init__(self, name: str, targets: list[types.ModuleType], function: str | None):
        super().__init__(name, targets[0].__doc__)
        self.__dict__["_targets"] = targets
        self.__dict__["_function"] = function
        self.__dict__["__all__"] = [n for t in targets for n in getattr(t, "__all__", ())]
        if function is not None:
            self.__dict__["__doc__"] = getattr(targets[0], function).__doc__
            self.__dict__["__wrapped__"] = getattr(targets[0], function)  # inspect.signature follows it

    def __getattr__(self, name: str) -> Any:
        for target in self.__dict__["_targets"]:
            if hasattr(target, name):
                return getattr(target, name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        function = self.__dict__["_function"]
        if function is None:
            raise TypeError(f"module {self.__name__!r} is not callable")
        return getattr(self.__dict__["_targets"][0], function)(*args, **kwargs)


class _Alias(importlib.abc.Loader):
    """Loads an old path by putting the new module (or a forwarding alias) in ``sys.modules`` under the old name."""

    def __init__(self, new: str | tuple[str, ...]):
        self.new = (new,) if isinstance(new, str) else tuple(new)

    def create_module(self, spec: Any) -> None:
        return None  # a placeholder module; exec_module replaces it

    def exec_module(self, module: types.ModuleType) -> None:
        old = module.__name__
        _warn(old, " and ".join(self.new), stacklevel=2)  # 1: here, 2: the import statement
        targets = [importlib.import_module(name) for name in self.new]
        function = FUNCTIONS.get(old)
        simple = len(targets) == 1 and function is None
        sys.modules[old] = targets[0] if simple else _ForwardingAlias(old, targets, function)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = MOVED.get(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Answer the old paths (idempotent)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def forward_names(package: str, table: Mapping[str, str], name: str) -> Any:
    """For a package's module ``__getattr__``: the attribute ``name`` that moved to the module ``table[name]``
    (with a ``DeprecationWarning``); ``AttributeError`` for any other name."""
    if name not in table:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{table[name]}.{name}", stacklevel=3)  # 2: the package's __getattr__
    return getattr(importlib.import_module(table[name]), name)
