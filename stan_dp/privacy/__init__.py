"""Privacy: the mechanics of every guarantee, in one place (imports nothing else of the package).

Takes: what one kernel iteration releases (DpEvents declared by the kernel), a budget or noise levels, a seed.
Gives: clipped and noised statistics (``mechanisms``), calibrated noise and the privacy report, noise generators.

Modules: ``mechanisms`` (the clip / noise / penalty arithmetic the samplers use), ``events`` (DpEvents of one
iteration), ``gaussian`` (closed form of Gaussian compositions, the DP-HMC paper Theorem 2.4), ``evaluation``
(PLD / RDP evaluation of a composition), ``report`` (the report object), ``accounting`` (budget <-> noise:
calibrate, account), ``statement`` (the guarantee in plain words), ``noise_source`` (one generator per chain).
"""
from stan_dp.privacy.accounting import (  # noqa: F401
    PrivacyPlan,
    account,
    calibrate,
    calibrate_phases,
    check_run,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_report,
)
from stan_dp.privacy.gaussian import gaussian_delta, gaussian_epsilon, gaussian_mu  # noqa: F401
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
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]
