"""Calibration by algorithm name: the one place that maps a name to the kernel whose declaration is composed.

The accountant (``stan_dp.privacy.accounting``) takes the kernel class, which declares the DpEvents of one
iteration, and never looks a kernel up by name. ``stan_dp.calibrate`` is :func:`calibrate` here: it resolves the
name in the sampler registry (``stan_dp.samplers.ALL_ALGORITHMS``) and passes the kernel down.
"""
from __future__ import annotations

from typing import Any

from ..privacy import accounting
from ..privacy.accounting import PrivacyPlan
from ..privacy.report import PrivacyReport
from ..samplers import ALL_ALGORITHMS
from ..samplers.base import KernelBase

__all__ = ["account", "calibrate", "kernel_class"]


def kernel_class(algorithm: Any) -> tuple[str, type[KernelBase]]:
    """``(registry name, kernel class)`` of an algorithm name (case and ``_`` / ``-`` do not matter)."""
    if isinstance(algorithm, str):
        key = algorithm.strip().lower().replace("_", "-")
        if key in ALL_ALGORITHMS:
            return key, ALL_ALGORITHMS[key]
    raise ValueError(f"algorithm must be one of {', '.join(repr(a) for a in ALL_ALGORITHMS)} (got {algorithm!r})")


def calibrate(algorithm: str, *, epsilon: float, delta: float, chains: int, iterations: int,
              n_rows: int | None = None, prefix_phases: tuple = (), **shape: Any) -> PrivacyPlan:
    """Noise levels for a run of ``chains`` x ``iterations`` (warmup + sampling) within (epsilon, delta).

    ``algorithm`` names a kernel in ``stan_dp.samplers.ALL_ALGORITHMS``; the kernel declares the DpEvents of one
    iteration (``noise_declaration``) and ``stan_dp.privacy.accounting.calibrate`` inverts the budget
    generically. ``shape`` holds the kernel options that shape its releases (e.g. ``leapfrog_steps`` and
    ``gradient_share`` for DP-HMC, ``delta_split`` for DP-Fast MH, ``sampling_rate`` / ``batch_size`` /
    ``batch_sampling`` for the SG-MCMC kernels; defaults from the kernel's option spec); ``n_rows`` (public N) is
    needed by kernels that draw minibatches.

    The plan spends at most the budget, per dp-accounting's PLD (pessimistic) and, for Gaussian
    compositions, per the closed form of the DP-HMC paper Theorem 2.4 (RDP for fixed-size minibatches), and at
    least 99 % of it.

    ``prefix_phases``: phases that run before the kernel (e.g. a warm start, ``stan_dp.phases.warm_start``) whose
    releases are fixed; the kernel's noise is calibrated so that the composition of the prefix and the kernel's
    run spends the budget, and the plan's parameters are the kernel's.
    """
    accounting.check_run(epsilon=epsilon, delta=delta, chains=chains, iterations=iterations)
    key, kernel = kernel_class(algorithm)
    return accounting.calibrate(kernel, epsilon=epsilon, delta=delta, chains=chains, iterations=iterations,
                                n_rows=n_rows, prefix_phases=prefix_phases, algorithm=key, **shape)


def account(algorithm: str, *, delta: float, chains: int, iterations: int, n_rows: int | None = None,
            **given: Any) -> PrivacyReport:
    """Budget spent (epsilon at ``delta``) by a run of ``algorithm`` with explicit noise levels.

    ``given`` holds the kernel's noise parameters (``noise_declaration(...).noise_names``: e.g. ``tau_l`` for
    penalty MH; ``tau_l`` and ``tau_g`` for DP-HMC; ``epsilon_iteration`` and ``delta_iteration`` for DP-Fast
    MH; ``tau_g`` for the SG-MCMC kernels) and any shape options (e.g. ``leapfrog_steps``). Every noise
    parameter is required; names the kernel does not use are refused (``stan_dp.privacy.accounting.account``).
    """
    accounting.check_run(delta=delta, chains=chains, iterations=iterations)
    key, kernel = kernel_class(algorithm)
    return accounting.account(kernel, delta=delta, chains=chains, iterations=iterations, n_rows=n_rows,
                              algorithm=key, **given)
