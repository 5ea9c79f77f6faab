"""Samplers: private MCMC kernels over the row-likelihood interface, and their adaptation.

Takes: a row likelihood, the calibrated privacy plan of a run and the algorithm's public options.
Gives: one transition at a time with releasable ``StepInfo``, the DpEvents of one iteration, option specs, adaptation.

``ALGORITHMS`` maps the user-facing algorithm name (``DPStanModel.sample(algorithm=...)``) to the kernel class;
each class is constructed as ``KernelClass(likelihood, plan, **options)`` (see ``stan_dp.samplers.base``).
"""
from __future__ import annotations

from .base import ChainState, Kernel, KernelBase, StepInfo
from .fast_mh import DPFastMH, DPFastMHFull
from .hmc import DPHMC
from .ops import OPS
from .penalty import PenaltyMH
from .sgmcmc import DPSGHMC, DPSGLD, DPSGNHT

ALGORITHMS: dict[str, type[KernelBase]] = {
    "penalty": PenaltyMH,
    "dp-hmc": DPHMC,
    "dp-fast-mh": DPFastMH,
    "dp-fast-mh-full": DPFastMHFull,
    "dp-sgld": DPSGLD,
    "dp-sghmc": DPSGHMC,
    "dp-sgnht": DPSGNHT,
}

#: samplers whose guarantee is conditional on exact sampling (Wang, Fienberg and Smola 2015, Proposition 3). They are kept out of
#: ``ALGORITHMS`` (the per-iteration kernels that the audit checks one iteration at a time): one OPS
#: iteration from a given state is not a DP mechanism by itself. ``sample_private`` accepts both, plus
#: "hybrid" (OPS starts, then an SG-MCMC kernel; ``stan_dp.phases.warm_start``).
CONDITIONAL_ALGORITHMS: dict[str, type[KernelBase]] = {"ops": OPS}

#: every class ``sample_private`` and ``stan_dp.calibrate`` accept by name
ALL_ALGORITHMS: dict[str, type[KernelBase]] = {**ALGORITHMS, **CONDITIONAL_ALGORITHMS}

__all__ = ["ALGORITHMS", "ALL_ALGORITHMS", "CONDITIONAL_ALGORITHMS", "OPS", "ChainState", "Kernel", "KernelBase", "StepInfo", "PenaltyMH", "DPHMC", "DPFastMH", "DPFastMHFull",
           "DPSGLD", "DPSGHMC", "DPSGNHT"]
