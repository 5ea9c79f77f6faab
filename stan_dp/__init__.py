"""stan-dp: differentially private MCMC for existing Stan programs.

Public API::

    from stan_dp import DPStanModel, compare, calibrate
    model = DPStanModel(stan_file="logistic.stan")
    fit = model.sample(data="data.json", algorithm="dp-hmc", epsilon=1.0, delta=1e-5)
    ref = model.reference(data="data.json")
    compare(fit, ref)
    stan_dp.audit(runs=20000)       # empirical lower bounds on epsilon next to the claims
    stan_dp.advise(public_likelihood, epsilon=1.0, delta=1e-5, ratio_clip=2.0)  # expected error, PUBLIC data
    to_stan_csv(fit, "fit.csv")     # fit_1.csv, fit_2.csv, ... (Stan CSV, one per chain)
    model.sample(..., checkpoint="ckpt/")   # then, after a kill: stan_dp.resume("ckpt/", data="data.json")
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import Any

from . import _moved
from ._version import __version__

_moved.install()  # the module paths of the old flat layout keep working until 0.2.0 (stan_dp._moved)

_LAZY = {
    "DPStanModel": ("stan_dp.model", "DPStanModel"),
    "ModelError": ("stan_dp.model", "ModelError"),
    "ConvergenceWarning": ("stan_dp.output.diagnostics", "ConvergenceWarning"),
    "DataError": ("stan_dp.stan.data", "DataError"),
    "BackendError": ("stan_dp.stan.backend_error", "BackendError"),
    "StanCompileError": ("stan_dp.stan.toolchain", "StanCompileError"),
    "ToolchainError": ("stan_dp.stan.toolchain", "ToolchainError"),
    "plot_compare": ("stan_dp.output.compare", "plot_compare"),
    "calibrate": ("stan_dp.phases.calibration", "calibrate"),
    "sample_private": ("stan_dp.run.pipeline", "sample_private"),
    "resume": ("stan_dp.model", "resume"),
    "CheckpointError": ("stan_dp.phases.checkpoint", "CheckpointError"),
    "to_stan_csv": ("stan_dp.output.stan_csv", "to_stan_csv"),
    "compare": ("stan_dp.output.compare", "compare"),
    "advise": ("stan_dp.tools.advise", "advise"),
}

# compare and advise are imported on first use like the rest (importing them pulls in pandas, dp-accounting and
# SciPy). Their old module paths (stan_dp.compare, stan_dp.advise) are callable aliases (stan_dp._moved), so
# importing one cannot leave a plain module where the function is called.
__all__ = ["__version__", "audit", *_LAZY]


def __getattr__(name: str) -> Any:
    """Import public names on first use, so that ``import stan_dp`` stays fast."""
    if name == "audit":  # the subpackage, which is callable: stan_dp.audit(...) runs the audit
        return import_module("stan_dp.audit")
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(import_module(module), attr)
        globals()[name] = value
        return value
    if _is_submodule(name):  # e.g. stan_dp.stan or stan_dp.output after a bare ``import stan_dp``, as before
        return import_module(f"stan_dp.{name}")
    raise AttributeError(f"module 'stan_dp' has no attribute {name!r}")


def _is_submodule(name: str) -> bool:
    """Whether ``name`` is a module or folder of the package itself (not an old path that stan_dp._moved answers)."""
    here = Path(__file__).parent
    return name.isidentifier() and ((here / name / "__init__.py").is_file() or (here / f"{name}.py").is_file())
