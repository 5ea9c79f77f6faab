"""Privacy accounting for stan-dp: budget <-> noise for a whole planned run.

The user's ``(epsilon, delta)`` covers the **whole run**: every chain, every warmup and sampling iteration,
every mechanism invocation. This module turns a budget into noise levels
(:func:`calibrate`, budget-first) and noise levels into the budget spent (:func:`account`, noise-first), and
describes the result in a :class:`PrivacyReport` that serialises to JSON for InferenceData attrs.

Generic accounting (no algorithm is known here by name)
    Each kernel declares the ``dp_accounting`` DpEvents of one iteration as a function of its noise
    parameters (``stan_dp.privacy.events.NoiseDeclaration``, built by the kernel class's
    ``noise_declaration``). :func:`calibrate` composes them over chains x iterations and inverts the budget
    by a one-dimensional root search on a noise scale (:func:`calibrate_phases`, which also composes several
    phases, e.g. a warm start and a main phase, into one budget); :func:`account` composes them at given
    noise parameters.  The accountant is chosen by the kinds of events, never by the algorithm.

The closed forms are in ``stan_dp.privacy.gaussian``, the PLD / RDP evaluation in ``stan_dp.privacy.evaluation``
and the report object in ``stan_dp.privacy.report``.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, ClassVar, Protocol

import numpy as np

from . import events
from .checks import check_count, check_delta, check_epsilon, check_positive, no_finite_noise_error, check_real
from .evaluation import RDP_ACCOUNTANT, KIND_GAUSSIAN, describe_release, evaluate_mechanisms, phase_mechanisms, rdp_accountant_epsilon
from .gaussian import bracket_and_solve, solve_gaussian_rho
from .report import NEIGHBOURING_RELATION, PrivacyReport, make_report

__all__ = [
    "PrivacyPlan",
    "account",
    "calibrate",
    "calibrate_phases",
    "check_run",
    "subsampled_gaussian_epsilon",
    "subsampled_gaussian_report",
]

# Calibration must spend at least this fraction of the budget.
_MIN_SPENT_FRACTION = 0.99
# Calibration aims this relative amount below the budget, so that other discretisations of the same PLD
# (e.g. dp-accounting's PLDAccountant at its default interval, which lands ~1e-12 above the closed form)
# also stay within the budget.  Costs a relative 1e-6 of noise.
_CALIBRATION_MARGIN = 1e-6


# --------------------------------------------------------------------------------------------------
# plan (budget-first) and the generic calibration
# --------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PrivacyPlan:
    """Noise levels that make a planned run spend (at most, and at least 99 % of) its budget.

    ``chains`` x ``iterations`` (warmup + sampling per chain) is the run of the phase whose parameters the plan
    carries (the kernel's); ``other_iterations`` counts the iterations of every other phase (an anchor's or a
    warm start's releases), summed over their chains, and ``phase_runs`` holds each phase's (chains, iterations)
    in order, so ``total_iterations = chains * iterations + other_iterations``.  ``parameters`` holds the noise
    parameters (and fixed shape values) the kernel reads; each is also an attribute (``plan.tau_l``), and a name
    the kernel does not use reads as None. ``releases`` are the DpEvents of one iteration at those parameters,
    per phase (one phase for a plain run); ``noise_scale`` is the calibrated root of the search (None for
    noise-first plans).
    """

    algorithm: str
    epsilon: float
    delta: float
    chains: int
    iterations: int
    parameters: dict
    releases: tuple = ()
    noise_scale: float | None = None
    other_iterations: int = 0
    phase_runs: tuple = ()

    #: names that read as None when a kernel's plan does not carry them (the parameters of the built-in kernels)
    KNOWN_PARAMETERS: ClassVar[tuple[str, ...]] = (
        "tau_l", "tau_g", "leapfrog_steps", "gradient_share", "epsilon_iteration", "delta_iteration",
        "sampling_rate", "batch_size", "batch_sampling")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        parameters = self.__dict__.get("parameters", {})
        if name in parameters:
            return parameters[name]
        if name in PrivacyPlan.KNOWN_PARAMETERS:
            return None
        raise AttributeError(f"the privacy plan of {self.__dict__.get('algorithm')!r} has no {name!r}")

    @property
    def total_iterations(self) -> int:
        return self.chains * self.iterations + int(self.other_iterations)

    def _phases(self, completed_iterations: int | None) -> list[tuple[list[events.Release], int]]:
        phases = [(list(rel), int(n)) for rel, n in self.releases]
        if completed_iterations is None:
            return phases
        # iterations that ran are assigned to the phases in order (a chain finishes a phase before the next)
        left, out = int(completed_iterations), []
        for rel, n in phases:
            take = min(left, n)
            out.append((rel, take))
            left -= take
        return out

    def mechanisms(self, completed_iterations: int | None = None) -> list[dict]:
        return phase_mechanisms(self._phases(completed_iterations))

    def report(self, completed_iterations: int | None = None) -> PrivacyReport:
        """Budget spent at the plan's delta.

        ``completed_iterations``: iterations run in total, summed over chains (an interrupted run); an
        iteration counts as soon as any of its mechanisms ran.  None means the whole plan.
        """
        if completed_iterations is None:
            count = self.total_iterations
        else:
            count = check_count(completed_iterations, "completed_iterations", minimum=0)
            if count > self.total_iterations:
                raise ValueError(f"completed_iterations={count} exceeds the plan's chains * iterations = "
                                 f"{self.total_iterations}; the budget does not cover more iterations")
        mech = self.mechanisms(None if completed_iterations is None else count)
        return make_report(mech, self.delta, self.algorithm, count)

    def to_dict(self) -> dict:
        """JSON-able description (for InferenceData attrs): budget, run size and noise parameters."""
        out = {"algorithm": self.algorithm, "epsilon": self.epsilon, "delta": self.delta,
               "chains": self.chains, "iterations": self.iterations, **self.parameters}
        if len(self.phase_runs) > 1:  # what each phase ran: its releases, chains and iterations per chain
            out["phases"] = [{"releases": sorted({r.name for r in rel}), "chains": int(c), "iterations": int(n)}
                             for (rel, _), (c, n) in zip(self.releases, self.phase_runs)]
        return out


def check_run(*, delta: Any, chains: Any, iterations: Any, epsilon: Any = None) -> tuple:
    """The checked ``(epsilon, delta, chains, iterations)`` of a planned run, checked in that order (epsilon is
    None for noise-first accounting); a ``ValueError`` names the first bad input. :func:`calibrate` and
    :func:`account` start with it; so does a caller that looks the kernel up by name first
    (``stan_dp.phases.calibration``), so that a bad budget is reported before a bad name, whatever the layer."""
    if epsilon is not None:
        epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    chains = check_count(chains, "chains")
    iterations = check_count(iterations, "iterations")
    return epsilon, delta, chains, iterations


class NoiseDeclaring(Protocol):
    """What the accountant reads of a kernel class (``stan_dp.samplers.base.Kernel`` declares it): the name in the
    report, the option spec (which options shape the releases) and the releases of a run."""

    accounting_name: str
    option_spec: Any

    def noise_declaration(self, shape: dict[str, Any], *, n_rows: int | None, total_iterations: int,
                          delta: float) -> events.NoiseDeclaration:
        """The DpEvents of the run as functions of the noise parameters."""


def _declaring(kernel: NoiseDeclaring) -> NoiseDeclaring:
    if isinstance(kernel, str):
        raise TypeError(f"the accountant takes the kernel class that declares the noise, not a name (got "
                        f"{kernel!r}); for an algorithm name use stan_dp.calibrate or stan_dp.phases.calibration")
    return kernel


def _declaration(kernel: NoiseDeclaring, *, chains: int, iterations: int, delta: float, n_rows: int | None,
                 shape: dict) -> events.NoiseDeclaration:
    return _declaring(kernel).noise_declaration(shape, n_rows=n_rows, total_iterations=chains * iterations,
                                                delta=delta)


def _label(kernel: NoiseDeclaring, algorithm: str | None) -> str | None:
    """The name in the report: the one given, else the kernel's declared ``accounting_name`` (None when empty)."""
    return algorithm if algorithm is not None else (kernel.accounting_name or None)


def calibrate(kernel: NoiseDeclaring, *, epsilon: float, delta: float, chains: int, iterations: int,
              n_rows: int | None = None, prefix_phases: tuple = (), algorithm: str | None = None,
              **shape: Any) -> PrivacyPlan:
    """Noise levels for a run of ``chains`` x ``iterations`` (warmup + sampling) within (epsilon, delta).

    ``kernel`` declares the DpEvents of one iteration: a kernel class of ``stan_dp.samplers`` (anything with
    ``noise_declaration(shape, *, n_rows, total_iterations, delta)``); this function inverts the budget
    generically (:func:`calibrate_phases`) and never looks a kernel up by name (``stan_dp.calibrate`` takes a
    name and resolves it one layer up). ``algorithm``: the name recorded in the plan (default the kernel's
    ``accounting_name``). ``shape`` holds the kernel options that shape its releases (e.g.
    ``leapfrog_steps`` and ``gradient_share`` for DP-HMC, ``delta_split`` for DP-Fast MH, ``sampling_rate`` /
    ``batch_size`` / ``batch_sampling`` for the SG-MCMC kernels; defaults from the kernel's option spec);
    ``n_rows`` (public N) is needed by kernels that draw minibatches.

    The plan spends at most the budget, per dp-accounting's PLD (pessimistic) and, for Gaussian
    compositions, per the closed form of the DP-HMC paper Theorem 2.4 (RDP for fixed-size minibatches), and at
    least 99 % of it.

    ``prefix_phases``: phases that run before the kernel (e.g. a warm start, ``stan_dp.phases.warm_start``) whose
    releases are fixed (independent of the search scale); the kernel's noise is calibrated so that the
    composition of the prefix and the kernel's run spends the budget, and the plan's parameters are the
    kernel's.
    """
    epsilon, delta, chains, iterations = check_run(epsilon=epsilon, delta=delta, chains=chains,
                                                   iterations=iterations)
    decl = _declaration(kernel, chains=chains, iterations=iterations, delta=delta, n_rows=n_rows, shape=shape)
    prefix = list(prefix_phases)
    plan = calibrate_phases([*prefix, events.Phase(decl, chains, iterations)], epsilon=epsilon, delta=delta,
                            algorithm=_label(kernel, algorithm), parameter_phase=len(prefix))
    if decl.check is not None:
        decl.check(plan.parameters)
    return plan


def calibrate_phases(phases: list[events.Phase], *, epsilon: float, delta: float,
                     algorithm: str | None = None, parameter_phase: int = 0) -> PrivacyPlan:
    """The generic budget inversion: one noise scale ``s`` shared by every phase's declaration, chosen by a
    one-dimensional root search so that the composition of all releases over all chains and iterations
    spends the budget (at most ``epsilon``, at least 99 % of it).

    Gaussian-only compositions are solved on the closed form (the DP-HMC paper Theorem 2.4) and confirmed with
    dp-accounting's PLD; anything else is solved on the accountant's epsilon directly (PLD, or RDP for
    fixed-size minibatches). The returned plan carries the parameters of phase ``parameter_phase`` (default
    the first); ``chains`` and ``iterations`` are that phase's (what the kernel runs), ``other_iterations`` the
    other phases' iterations summed over their chains, and ``releases`` and ``phase_runs`` list every phase in
    order.
    """
    epsilon = check_epsilon(epsilon)
    delta = check_delta(delta)
    if not phases:
        raise ValueError("calibrate_phases needs at least one phase")
    total = sum(p.total_iterations for p in phases)

    def at(s: float) -> tuple[list[dict], list]:
        params = [p.declaration.parameters(s) for p in phases]
        rel = [(list(p.declaration.releases(pp)), p.total_iterations) for p, pp in zip(phases, params)]
        return params, rel

    def build(s: float) -> PrivacyPlan:
        params, rel = at(s)
        for pp in params:
            for name in phases[parameter_phase].declaration.noise_names:
                value = pp.get(name)
                if value is not None and not (isinstance(value, float) and math.isfinite(value) and value > 0):
                    raise no_finite_noise_error(epsilon, delta, "the required noise overflows double precision")
        own = phases[parameter_phase]
        return PrivacyPlan(algorithm=algorithm or "custom", epsilon=epsilon, delta=delta, chains=own.chains,
                           iterations=own.iterations, other_iterations=total - own.total_iterations,
                           parameters=params[parameter_phase],
                           releases=tuple((tuple(r), n) for r, n in rel),
                           noise_scale=s, phase_runs=tuple((p.chains, p.iterations) for p in phases))

    if not 0 <= parameter_phase < len(phases):
        raise ValueError(f"parameter_phase must index one of the {len(phases)} phases, got {parameter_phase!r}")
    start = float(phases[parameter_phase].declaration.start)
    _, rel0 = at(start)
    kinds = {m["kind"] for m in phase_mechanisms(rel0)}
    if kinds == {KIND_GAUSSIAN}:
        return _calibrate_gaussian(build, at, start, epsilon, delta, total)
    return _calibrate_generic(build, start, epsilon, delta)


def _total_rho(rel: list[tuple[list[events.Release], int]]) -> float:
    """The zCDP rho of a Gaussian-only composition (rho's add up)."""
    return math.fsum(m["count"] * m["rho"] for m in phase_mechanisms(rel))


def _calibrate_gaussian(build: Callable[[float], PrivacyPlan], at: Callable[[float], tuple[list[dict], list]],
                        start: float, epsilon: float, delta: float, total: int) -> PrivacyPlan:
    target = epsilon * (1.0 - _CALIBRATION_MARGIN)
    for _ in range(20):
        rho = solve_gaussian_rho(target, delta)
        if not (rho > 0.0 and math.isfinite(rho)):
            raise no_finite_noise_error(epsilon, delta, "the required noise overflows double precision")
        def rho_excess(x: float, rho: float = rho) -> float:
            return _total_rho(at(x)[1]) - rho

        # root of total_rho(s) = rho, decreasing in s (more noise, less rho)
        s = bracket_and_solve(rho_excess, start, increasing=False)
        if not (s > 0.0 and math.isfinite(s)):
            raise no_finite_noise_error(epsilon, delta, "the required noise overflows double precision")
        for _ in range(200):  # safe side of the root: total rho at most the target rho
            if _total_rho(at(s)[1]) <= rho:
                break
            s *= 1.0 + 2.0 ** -50
        plan = build(s)
        acc = evaluate_mechanisms(plan.mechanisms(), delta)
        closed = acc.closed_form_epsilon  # set for the Gaussian-only compositions calibrated here
        spent = acc.epsilon if closed is None else max(acc.epsilon, closed)
        if spent <= epsilon:
            if spent < _MIN_SPENT_FRACTION * epsilon:  # only at budgets beyond double precision
                raise no_finite_noise_error(epsilon, delta, f"the accountants cannot resolve this budget: "
                                                       f"the closest noise level spends {spent!r}")
            return plan
        # The PLD's pessimistic discretisation overshoots the closed form slightly: aim lower by twice the
        # overshoot and try again (one retry is the norm).
        target -= 2.0 * (spent - epsilon) + 4.0 * np.finfo(float).eps * epsilon
        if target <= 0.0:
            break
    raise no_finite_noise_error(epsilon, delta, "the PLD accountant could not confirm any noise level")


def _calibrate_generic(build: Callable[[float], PrivacyPlan], start: float, epsilon: float, delta: float) -> PrivacyPlan:
    target = epsilon * (1.0 - _CALIBRATION_MARGIN)

    def spent(s: float) -> float:
        return evaluate_mechanisms(build(s).mechanisms(), delta).epsilon

    s = bracket_and_solve(lambda x: spent(x) - target, start, increasing=False)
    if not (s > 0.0 and math.isfinite(s)):
        raise no_finite_noise_error(epsilon, delta, "the required noise is beyond double precision")
    # The accountant's epsilon is a step function on its grid (and the grid moves with s): move to the safe
    # side with relative steps that double from 1e-9, so that a step of any size is crossed in a few tries.
    step = 1e-9
    for _ in range(60):
        if spent(s) <= epsilon * (1.0 - 0.5 * _CALIBRATION_MARGIN):
            break
        s *= 1.0 + step
        step *= 2.0
    plan = build(s)
    got = spent(s)
    if not _MIN_SPENT_FRACTION * epsilon <= got <= epsilon:
        raise no_finite_noise_error(epsilon, delta, f"the accountant cannot resolve this budget: the closest noise "
                                               f"level spends {got!r}")
    return plan


# --------------------------------------------------------------------------------------------------
# noise-first
# --------------------------------------------------------------------------------------------------

def account(kernel: NoiseDeclaring, *, delta: float, chains: int, iterations: int, n_rows: int | None = None,
            algorithm: str | None = None, **given: Any) -> PrivacyReport:
    """Budget spent (epsilon at ``delta``) by a run with explicit noise levels.

    ``kernel``: the kernel class that declares the noise (as for :func:`calibrate`; its ``option_spec`` tells
    shape options from noise parameters); ``algorithm``: the name in the report (default its
    ``accounting_name``). ``given`` holds the kernel's noise parameters (``noise_declaration(...).noise_names``:
    e.g. ``tau_l`` for penalty MH; ``tau_l`` and ``tau_g`` for DP-HMC; ``epsilon_iteration`` and
    ``delta_iteration`` for DP-Fast MH; ``tau_g`` for the SG-MCMC kernels) and any shape options (e.g.
    ``leapfrog_steps``). Every noise parameter is required; names the kernel does not use are refused.
    """
    _, delta, chains, iterations = check_run(delta=delta, chains=chains, iterations=iterations)
    key = _label(kernel, algorithm)
    spec_names = set(_declaring(kernel).option_spec.names)
    shape = {k: v for k, v in given.items() if k in spec_names}
    noise = {k: v for k, v in given.items() if k not in spec_names}
    decl = _declaration(kernel, chains=chains, iterations=iterations, delta=delta, n_rows=n_rows, shape=shape)
    for name in noise:
        if name not in decl.noise_names:
            raise ValueError(f"{name} does not apply to algorithm {key!r} (its noise parameters: "
                             f"{', '.join(decl.noise_names)}); leave it out")
    params = dict(decl.parameters(decl.start))
    for name in decl.noise_names:
        if noise.get(name) is None:
            raise ValueError(f"algorithm {key!r} needs {name}")
        params[name] = _check_noise_parameter(name, noise[name])
    releases = list(decl.releases(params))
    total = chains * iterations
    for r in releases:
        if isinstance(r.event, events.EpsilonDeltaDpEvent) and total * r.count * r.event.delta >= delta:
            raise ValueError(f"{r.name}: its delta ({r.event.delta!r}, from delta_iteration) times the "
                             f"{total * r.count} releases is not below delta={delta!r}: no epsilon is "
                             f"reachable; lower delta_iteration or raise delta")
    return make_report(phase_mechanisms([(releases, total)]), delta, key, total)


def _check_noise_parameter(name: str, value: Any) -> float:
    if name.startswith("delta"):
        v = check_real(value, name)
        if not 0.0 <= v < 1.0:
            raise ValueError(f"{name} must lie in [0, 1) (got {v!r})")
        return v
    return check_positive(value, name)


# --------------------------------------------------------------------------------------------------
# subsampled Gaussian mechanisms on their own (for stochastic-gradient samplers and tests)
# --------------------------------------------------------------------------------------------------

def subsampled_gaussian_report(noise_multiplier: float, sampling_probability: float, count: int,
                               delta: float, *, sampling: str = "poisson",
                               name: str = "subsampled clipped gradient",
                               value_discretization_interval: float | None = None) -> PrivacyReport:
    """Budget spent by ``count`` subsampled Gaussian mechanisms (substitute-one-row relation).

    ``noise_multiplier`` = sigma / Delta with Delta = 2 b the substitution sensitivity of a sum of
    per-row terms clipped to norm b (the module-wide convention).
    ``sampling="poisson"``: each row enters each batch independently with ``sampling_probability``;
    accounted with dp-accounting's PLD (interval ``value_discretization_interval``, default 1e-4).
    ``sampling="uniform"``: a fixed-size batch drawn without replacement, ``sampling_probability`` =
    batch size / N (as an exact fraction); accounted with dp-accounting's RDP accountant (no PLD for it in
    dp-accounting 0.6).
    """
    noise_multiplier = check_positive(noise_multiplier, "noise_multiplier")
    q = check_real(sampling_probability, "sampling_probability")
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling_probability must lie in (0, 1] (got {q!r})")
    count = check_count(count, "count")
    delta = check_delta(delta)
    if sampling not in ("poisson", "uniform"):
        raise ValueError(f"sampling must be 'poisson' or 'uniform' (got {sampling!r})")
    interval = None
    if value_discretization_interval is not None:
        interval = check_positive(value_discretization_interval, "value_discretization_interval")
    note = "sigma = noise_multiplier * 2 b for per-row terms clipped to norm b"
    if sampling == "poisson":
        release = events.subsampled_gaussian_release(name, noise_multiplier, sampling="poisson", n_rows=0,
                                                     sampling_rate=q, note=note)
    else:
        frac = Fraction(q).limit_denominator(10 ** 12)
        if q == 1.0:
            release = events.gaussian_release(name, noise_multiplier, note=note)
        else:
            release = events.subsampled_gaussian_release(name, noise_multiplier, sampling="uniform",
                                                         n_rows=frac.denominator, batch_size=frac.numerator,
                                                         note=note)
    mechanisms = [describe_release(release, count)]
    if sampling == "uniform" and mechanisms[0]["kind"] == KIND_GAUSSIAN:
        eps = rdp_accountant_epsilon(mechanisms, delta)  # fixed-size sampling is RDP-accounted, also at q = 1
        return PrivacyReport(epsilon=eps, delta=delta, accountant=RDP_ACCOUNTANT,
                             neighbouring_relation=NEIGHBOURING_RELATION, mechanisms=mechanisms,
                             rdp_epsilon=eps)
    if sampling == "poisson" and q == 1.0:
        mechanisms[0]["sampling_probability"] = 1.0
    return make_report(mechanisms, delta, None, None, interval)


def subsampled_gaussian_epsilon(noise_multiplier: float, sampling_probability: float, count: int,
                                delta: float, sampling: str = "poisson") -> float:
    """Epsilon at ``delta`` of ``count`` subsampled Gaussian mechanisms; see subsampled_gaussian_report."""
    return subsampled_gaussian_report(noise_multiplier, sampling_probability, count, delta,
                                      sampling=sampling).epsilon
