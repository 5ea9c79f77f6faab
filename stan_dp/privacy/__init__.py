"""Privacy machinery of stan-dp.

``accounting``: budget <-> noise for whole runs (dp-accounting PLD, closed form of seed 004 Theorem 2.4,
RDP cross-check) and the privacy report stored in InferenceData attrs.
"""
from stan_dp.privacy.accounting import (
    ALGORITHMS,
    NEIGHBOURING_RELATION,
    PrivacyPlan,
    PrivacyReport,
    account,
    calibrate,
    gaussian_delta,
    gaussian_epsilon,
    gaussian_mu,
    subsampled_gaussian_epsilon,
    subsampled_gaussian_report,
)

__all__ = [
    "ALGORITHMS",
    "NEIGHBOURING_RELATION",
    "PrivacyPlan",
    "PrivacyReport",
    "account",
    "calibrate",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_mu",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]
