"""Empirical privacy audit: lower bounds on epsilon from many runs on neighbouring
data sets, next to the claimed epsilon.

Takes: algorithms and their options, a model (a Stan program or the synthetic NumPy one), a budget, canary rows.
Gives: an ``AuditReport``: per mechanism, kernel iteration and short run, a lower bound on epsilon and the claim.

``audit(...)`` runs the targets and returns an ``AuditReport``; ``stan-dp audit`` is its command line.
Modules: ``bounds`` (Clopper-Pearson bounds, statistic and threshold selection), ``neighbours`` (canary rows
and substituted data sets), ``targets`` (mechanisms, kernel iterations, whole runs), ``faults`` (planted
faults for testing the audit), ``runner`` (the orchestration and the report).

``stan_dp.audit`` itself is callable (``stan_dp.audit(...)`` calls ``audit``), so the package and the function
share one name without one shadowing the other.
"""
import sys
import types

from .bounds import epsilon_lower_bound
from .faults import FAULTS, planted_fault
from .neighbours import LinearCanary, SubstitutedRows
from .neighbours import RadialCanary
from .runner import TARGET_KINDS, AuditReport, AuditResult, audit, audit_target, default_audit_model

__all__ = ["audit", "audit_target", "RadialCanary", "AuditReport", "AuditResult", "TARGET_KINDS", "FAULTS", "planted_fault", "LinearCanary",
           "SubstitutedRows", "default_audit_model", "epsilon_lower_bound"]


class _AuditModule(types.ModuleType):
    """``stan_dp.audit`` is this package and also callable: ``stan_dp.audit(...)`` is ``audit(...)``."""

    def __call__(self, *args, **kwargs):
        return audit(*args, **kwargs)


sys.modules[__name__].__class__ = _AuditModule
