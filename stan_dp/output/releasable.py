"""Names that may never be released: the refusal every private output goes through (ArviZ data, Stan CSV).

A sample statistic whose name looks like a log density, a log-likelihood, an energy, a clipping count or a gradient
norm is computed from the private rows outside any mechanism; ``check_releasable`` refuses it. Kept apart (it
needs nothing but ``re``) so that ``stan_csv`` can use it without importing the whole InferenceData builder.
"""
from __future__ import annotations

import re
from typing import Iterable

__all__ = ["FORBIDDEN_PATTERNS", "check_releasable"]

#: names (case-insensitive regular expressions) that may never appear in a private InferenceData
FORBIDDEN_PATTERNS = (
    r"^lp(__)?$",
    r"log_?p(rob)?$",
    r"log_?lik",
    r"log_?density",
    r"log_?post",
    r"^energy$",
    r"energy_error",
    r"clip",
    r"grad(ient)?_?norm",
)
_FORBIDDEN = [re.compile(p, re.IGNORECASE) for p in FORBIDDEN_PATTERNS]


def check_releasable(names: Iterable[str], where: str = "sample_stats") -> None:
    """Raise ``ValueError`` if any name looks like a non-private quantity (see ``FORBIDDEN_PATTERNS``)."""
    bad = [n for n in names if any(p.search(n) for p in _FORBIDDEN)]
    if bad:
        raise ValueError(
            f"refusing to release {bad} in {where}: names like these denote log densities, log-likelihoods, "
            "energies, clipping counts or gradient norms, which are computed from the private rows outside any "
            "mechanism. A kernel must not put them into StepInfo; use debug=True diagnostics instead."
        )
