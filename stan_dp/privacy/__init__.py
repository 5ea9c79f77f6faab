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
from typing import Any

from stan_dp.privacy import accounting
from stan_dp.privacy.accounting import (  # noqa: F401
    PrivacyPlan,
    account,
    calibrate_phases,
    check_run,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_report,
)
from stan_dp.privacy.gaussian import gaussian_delta, gaussian_epsilon, gaussian_mu, gaussian_rho  # noqa: F401
from stan_dp.privacy.report import NEIGHBOURING_RELATION, PrivacyReport  # noqa: F401

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


@functools.wraps(accounting.calibrate)
def calibrate(kernel: Any, **options: Any) -> PrivacyPlan:
    # ``stan_dp.privacy.calibrate`` took an algorithm name before it took a kernel class. A name still works, with
    # a DeprecationWarning, until version 0.2.0 removes it: it is handed to ``stan_dp.calibrate``
    # (stan_dp.phases.calibration), which resolves names in the sampler registry. The import is by name at call time,
    # so this layer still imports nothing else of the package; the kernel-class path below never leaves it.
    if isinstance(kernel, str):
        warnings.warn("stan_dp.privacy.calibrate with an algorithm name is deprecated: call stan_dp.calibrate("
                      f"{kernel!r}, ...) (names) or pass the kernel class; names are refused from version 0.2.0.",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module("stan_dp.phases.calibration").calibrate(kernel, **options)
    return accounting.calibrate(kernel, **options)
