"""The registry of private methods: one entry for every name ``sample_private`` takes as ``algorithm``.

A method is an object with the attributes of :class:`Method`: its name, what public structure of the program it
reads, whether the run-level chain options apply to it, whether a privacy unit needs a public row cap, and two
steps: :meth:`Method.check` refuses a request from the name and options alone (before any compile or row) and
:meth:`Method.plan` decides the run from public inputs (:class:`PlanInputs`) and returns its plan
(``stan_dp.methods.method.MethodPlan``: execute on the rows, then publish).

Every kernel, the hybrid, dp-laplace, dp-ssp and dp-glm register themselves where they are defined; the planner
(``stan_dp.run.plan.plan_run``), ``DPStanModel.sample``, the command line, advise, the utility benchmark and the
audit ask the registry instead of comparing names. A new method is one module that defines such an object and
calls :func:`register` (the docs' design page shows a toy one, which a test registers). ``auto`` is not a
method: it is the chooser (``stan_dp.run.auto``) that picks one from public inputs; :func:`is_auto` is the one
place that recognises its name.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Protocol

from ..privacy.noise_source import register_phase

__all__ = ["AUTO", "Method", "PlanInputs", "PlannedMethod", "get", "is_auto", "names", "needs_unit_cap", "reads", "register",
           "registered"]

#: the chooser's name (``algorithm="auto"``): not a registered method
AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class PlanInputs:
    """Everything a method plans from: public inputs only (``stan_dp.run.plan.plan_run`` builds it once).

    algorithm: the method's name as requested; n_rows: N (or the number of privacy units); dim: the unconstrained dimension; epsilon, delta: the whole run's
    budget; chains, iter_warmup, iter_sampling: the run lengths (None: the method chooses); quiet: False prints the
    plan's choices on stderr; facts: what the likelihood declares about its rows (``stan_dp.run.plan.PublicFacts``);
    run_level: the run-level options given (``stan_dp.run_options.RUN_LEVEL_OPTIONS``); options: the method's own
    options; choice: ``auto``'s choice when the chooser picked this method, else None.
    """

    algorithm: str
    n_rows: int
    dim: int
    epsilon: float
    delta: float
    chains: Any
    iter_warmup: Any
    iter_sampling: Any
    quiet: bool
    facts: Any
    run_level: dict[str, Any]
    options: dict[str, Any]
    choice: Any = None

    @property
    def by_name(self) -> bool:
        """The caller named the method (``auto`` did not pick it)."""
        return self.choice is None


class Method(Protocol):
    """A private method as the registry holds it."""

    @property
    def name(self) -> str:
        """The name ``sample_private`` takes as ``algorithm``."""

    @property
    def reads(self) -> frozenset[str]:
        """The public program structure the method plans from: "linear" (a normal linear regression's covariates
        and declared bounds), "glm" (a logistic or Poisson regression's); empty for a method that needs only the
        row likelihood."""

    @property
    def tunes_chains(self) -> bool:
        """Whether the run-level chain options (step size, acceptance target, metric) apply to it."""

    @property
    def warms_up(self) -> bool:
        """Whether its draws come after warmup iterations (False for closed-form draws)."""

    @property
    def option_names(self) -> frozenset[str]:
        """Every option it takes: its own, the run-level ones that apply, and the phases' it may run."""

    @property
    def unit_needs_cap(self) -> bool:
        """Whether a privacy unit needs the public cap ``max_rows_per_unit`` (a method that releases sums of a
        unit's rows once)."""

    def check(self, options: dict[str, Any], *, row_bounds: Any = None) -> None:
        """Raise ``ValueError`` for options that can never run (an unknown option, a bad value, a missing bound),
        from the options alone: no N, no dimension, no row, no compiled program."""

    def plan(self, inputs: PlanInputs) -> Any:
        """The run's plan (a ``stan_dp.methods.method.MethodPlan``) from public inputs alone."""


@dataclasses.dataclass(frozen=True)
class PlannedMethod:
    """A method given by its two steps as functions (the shape of every method that is not a kernel)."""

    name: str
    check_options: Callable[[Any], object]
    planner: Callable[[PlanInputs], Any]
    option_names: frozenset[str] = frozenset()
    reads: frozenset[str] = frozenset()
    tunes_chains: bool = False
    unit_needs_cap: bool = False
    warms_up: bool = True

    def check(self, options: dict[str, Any], *, row_bounds: Any = None) -> None:
        """``check_options(options)``."""
        self.check_options(options)

    def plan(self, inputs: PlanInputs) -> Any:
        """``planner(inputs)``."""
        return self.planner(inputs)


_METHODS: dict[str, Method] = {}


def register(method: Method) -> Method:
    """Add ``method`` under its name (a name already taken, or ``auto``, is refused); returns it."""
    if is_auto(method.name):
        raise ValueError(f"{AUTO!r} is the chooser's name, not a method's")
    if method.name in _METHODS and _METHODS[method.name] is not method:
        raise ValueError(f"a method named {method.name!r} is already registered")
    register_phase(method.name)  # its own random streams, should it draw in a phase of its name
    _METHODS[method.name] = method
    return method


@contextlib.contextmanager
def registered(*methods: Method, replace: bool = False) -> Iterator[None]:
    """``methods`` registered for the duration of a ``with`` block (tests register toy methods this way);
    ``replace``: a method may stand in for one of the same name, which is restored afterwards."""
    previous = {m.name: _METHODS[m.name] for m in methods if m.name in _METHODS}
    if previous and not replace:
        raise ValueError(f"{', '.join(sorted(previous))} already registered; replace=True to stand in for it")
    for method in methods:
        _METHODS.pop(method.name, None)
        register(method)
    try:
        yield
    finally:
        for method in methods:
            _METHODS.pop(method.name, None)
        _METHODS.update(previous)


def is_auto(name: Any) -> bool:
    """Whether ``name`` asks the chooser (``algorithm="auto"``) rather than a method."""
    return name == AUTO


def names() -> list[str]:
    """Every registered method's name, sorted (``auto`` is not among them)."""
    return sorted(_METHODS)


def get(name: Any) -> Method:
    """The method registered as ``name``; ``ValueError`` naming every valid name otherwise."""
    method = _METHODS.get(name) if isinstance(name, str) else None
    if method is None:
        raise ValueError(f"Unknown algorithm {name!r}; valid algorithms: {', '.join(names())}.")
    return method


def needs_unit_cap(name: Any) -> bool:
    """Whether a request for ``name`` with a privacy unit needs the public cap ``max_rows_per_unit`` (False for
    ``auto`` and an unknown name: the chooser and the refusal of the name say what applies)."""
    method = _METHODS.get(name) if isinstance(name, str) else None
    return method is not None and method.unit_needs_cap


def reads(name: Any) -> frozenset[str]:
    """The public program structure a request for ``name`` plans from: the method's, or every method's for
    ``auto`` (the chooser considers them all); empty for an unknown name (refused elsewhere)."""
    if is_auto(name):
        return frozenset().union(*(m.reads for m in _METHODS.values()))
    method = _METHODS.get(name) if isinstance(name, str) else None
    return method.reads if method is not None else frozenset()
