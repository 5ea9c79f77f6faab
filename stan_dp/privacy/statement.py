"""The privacy statement of a fit in plain words first, the accountant's details after.

``privacy_text(fit)`` is what ``stan-dp sample`` / ``summary`` and the demo print. It reads only the fit's
attrs (public metadata of the released object).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

from .report import PrivacyReport

__all__ = ["plain_privacy_text", "privacy_text", "is_conditional", "DETAILS_GLOSSARY"]

#: what the terms of the accountant's report mean (printed after it)
DETAILS_GLOSSARY = (
    "Reading the details: 'noise multiplier' is the noise standard deviation divided by how much one row can "
    "change the noised quantity; 'mu' is the Gaussian-DP strength of one noisy step (smaller is more private). "
    "The accountant adds up every noisy step of the run into the one (epsilon, delta) above. A 'cross-check' "
    "epsilon (closed form, RDP) is the same run accounted by another, looser method: it may be larger than the "
    "budget without voiding the guarantee, which is the first line."
)


def _num(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return str(value)


def is_conditional(attrs: Mapping[str, Any]) -> bool:
    """Whether the fit's guarantee is conditional on exact sampling (OPS draws, seed 003 Proposition 3)."""
    return "CONDITIONAL" in str(attrs.get("guarantee_type", "")).upper()


def plain_privacy_text(attrs: Mapping[str, Any]) -> str:
    """A few sentences saying what the guarantee of a private fit means, from its attrs."""
    eps, delta = attrs.get("epsilon_spent", attrs.get("epsilon")), attrs.get("delta_spent", attrs.get("delta"))
    try:
        factor = f"{math.exp(float(eps)):.3g}"
    except (TypeError, ValueError, OverflowError):
        factor = "e^epsilon"
    chains, completed = attrs.get("chains"), attrs.get("iterations_completed")
    lines = []
    if is_conditional(attrs):
        lines.append(
            "CONDITIONAL GUARANTEE: this run used OPS draws (algorithm ops or hybrid, or an OPS warm start), and the "
            "guarantee below holds ONLY IF every OPS draw is an exact draw from the tempered, clipped posterior. The "
            "internal sampler only approximates that, and no diagnostic can certify it.")
    lines.append(
        f"Privacy in plain words: everything released here (the draws, their sample stats and this metadata) is "
        f"(epsilon = {_num(eps)}, delta = {_num(delta)})-differentially private"
        f"{', conditional on exact sampling,' if is_conditional(attrs) else ''}. Replacing any one row of the "
        f"private data by any other changes the probability of any result by at most a factor {factor} "
        f"(e^epsilon), except with probability at most delta.")
    if chains is not None and completed is not None:
        lines.append(f"The budget covers all {chains} chains and all {completed} iterations (warmup included) and "
                     "every noisy step; running again spends a new budget.")
    lines.append(f"Not protected: the number of rows (N = {attrs.get('N', '?')}), the public data and the Stan "
                 "program.")
    if int(attrs.get("seeded", 0) or 0):
        lines.append("This run was seeded: anyone who knows the seed can reproduce its noise; publish only runs "
                     "whose seed stays secret, or run unseeded.")
    return " ".join(lines)


def privacy_text(fit: Any) -> str:
    """The privacy statement of a fit's attrs: plain words, then the accountant's report and a glossary."""
    attrs = dict(fit.attrs)
    if int(attrs.get("private", 0)) != 1:
        return attrs.get("privacy_warning", "NOT PRIVATE: this object carries no privacy guarantee.")
    report = attrs.get("privacy_report")
    if not report:
        return plain_privacy_text(attrs)
    return "\n\n".join([plain_privacy_text(attrs), "Accountant details:\n" + str(PrivacyReport.from_json(report)),
                        DETAILS_GLOSSARY])
