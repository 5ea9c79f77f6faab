"""Privacy: the mechanics of every guarantee, in one place (imports nothing else of the package).

Takes: what one kernel iteration releases (DpEvents declared by the kernel), a budget or noise levels, a seed.
Gives: clipped and noised statistics (``mechanisms``), calibrated noise and the privacy report, noise generators.

Modules: ``mechanisms`` (the clip / noise / penalty arithmetic the samplers use), ``events`` (DpEvents of one
iteration), ``gaussian`` (closed form of Gaussian compositions, the DP-HMC paper Theorem 2.4), ``evaluation``
(PLD / RDP evaluation of a composition), ``report`` (the report object), ``accounting`` (budget <-> noise:
calibrate, account), ``statement`` (the guarantee in plain words), ``noise_source`` (one generator per chain),
``fast_mh_bounds`` (DP-Fast MH's test calibration and subsampling bound).
"""
import functools
import importlib
import warnings
from pathlib import Path
from typing import Any

#: the names this package re-exports, each imported from its module on first use (``stan_dp.privacy.mechanisms``,
#: which a Ray actor imports, then does not pull in dp-accounting and SciPy's signal and stats modules)
_LAZY = {
    "PrivacyPlan": "accounting", "account": "accounting", "calibrate_phases": "accounting", "check_run": "accounting",
    "subsampled_gaussian_epsilon": "accounting", "subsampled_gaussian_report": "accounting",
    "gaussian_delta": "gaussian", "gaussian_epsilon": "gaussian", "gaussian_mu": "gaussian", "gaussian_rho": "gaussian",
    "NEIGHBOURING_RELATION": "report", "PrivacyReport": "report",
}

__all__ = [
    "NEIGHBOURING_RELATION",
    "PrivacyPlan",
    "PrivacyReport",
    "account",
    "calibrate",
    "calibrate_phases",
    "check_run",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "gaussian_rho",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]


def _calibrate_taking_names() -> Any:
    """``stan_dp.privacy.calibrate``: the accountant's ``calibrate`` (same signature and docstring), which also
    takes an algorithm name, as it did before it took a kernel class."""
    accounting = importlib.import_module("stan_dp.privacy.accounting")

    @functools.wraps(accounting.calibrate)
    def calibrate(kernel: Any, **options: Any) -> Any:
        # A name still works, with a DeprecationWarning, until version 0.2.0 removes it: it is handed to
        # ``stan_dp.calibrate`` (stan_dp.phases.calibration), which resolves names in the sampler registry. The import
        # is by name at call time, so this layer still imports nothing else of the package; the kernel-class path
        # never leaves it.
        if isinstance(kernel, str):
            warnings.warn("stan_dp.privacy.calibrate with an algorithm name is deprecated: call stan_dp.calibrate("
                          f"{kernel!r}, ...) (names) or pass the kernel class; names are refused from version 0.2.0.",
                          DeprecationWarning, stacklevel=2)
            return importlib.import_module("stan_dp.phases.calibration").calibrate(kernel, **options)
        return accounting.calibrate(kernel, **options)

    return calibrate


def __getattr__(name: str) -> Any:
    """Import the re-exported names on first use."""
    if name == "calibrate":
        value = _calibrate_taking_names()
    elif name in _LAZY:
        value = getattr(importlib.import_module(f"stan_dp.privacy.{_LAZY[name]}"), name)
    elif (Path(__file__).parent / f"{name}.py").is_file() and name.isidentifier():
        return importlib.import_module(f"stan_dp.privacy.{name}")  # a module of this folder, e.g. accounting
    else:
        raise AttributeError(f"module 'stan_dp.privacy' has no attribute {name!r}")
    globals()[name] = value
    return value
