"""Private MCMC kernels over the row-likelihood interface (DESIGN.md section 4).

``ALGORITHMS`` maps the user-facing algorithm name (``DPStanModel.sample(algorithm=...)``) to the kernel class;
each class is constructed as ``KernelClass(likelihood, plan, **options)`` (see ``stan_dp.samplers.base``).
"""
from __future__ import annotations

from .base import ChainState, Kernel, StepInfo
from .fast_mh import DPFastMH, DPFastMHFull
from .hmc import DPHMC
from .penalty import PenaltyMH
from .sgmcmc import DPSGHMC, DPSGLD, DPSGNHT

ALGORITHMS: dict[str, type] = {
    "penalty": PenaltyMH,
    "dp-hmc": DPHMC,
    "dp-fast-mh": DPFastMH,
    "dp-fast-mh-full": DPFastMHFull,
    "dp-sgld": DPSGLD,
    "dp-sghmc": DPSGHMC,
    "dp-sgnht": DPSGNHT,
}

__all__ = ["ALGORITHMS", "ChainState", "Kernel", "StepInfo", "PenaltyMH", "DPHMC", "DPFastMH", "DPFastMHFull",
           "DPSGLD", "DPSGHMC", "DPSGNHT"]
