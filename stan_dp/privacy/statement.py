"""The privacy statement of a fit in plain words first, the accountant's details after.

``privacy_text(fit)`` is what ``stan-dp summary`` and the demo print; ``stan-dp sample`` prints ``guarantee_line``
and says where the full report is (once per workflow). It reads only the fit's
attrs (public metadata of the released object).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from .report import PrivacyReport, gaussian_strength, run_mu
from .units import unit_noun

__all__ = ["details_glossary", "guarantee_line", "plain_privacy_text", "privacy_text", "is_conditional"]

#: (applies to the report?, what the term means): the glossary printed after a report names only its own terms
_TERMS: tuple[tuple[Callable[[PrivacyReport], bool], str], ...] = (
    (lambda r: any(m.get("noise_multiplier") is not None for m in r.mechanisms),
     "'noise multiplier' is the noise standard deviation divided by how much one row can change the noised "
     "quantity (its sensitivity)."),
    (lambda r: any(gaussian_strength(m) is not None for m in r.mechanisms),
     "'Gaussian-DP mu' (1 / noise multiplier) is the strength of one such noisy release in Gaussian differential "
     "privacy: smaller is more private, and k releases of mu each compose to sqrt(k) mu. 'zCDP rho' (mu^2 / 2) is "
     "the same release in zero-concentrated DP (the DP-HMC paper calls it mu); rho's add up over releases."),
    (lambda r: run_mu(r.mechanisms) is not None,
     "'Gaussian-DP mu of the whole run' composes every release: a run of mu is as hard to attack as telling "
     "N(0, 1) from N(mu, 1) apart from one draw."),
    (lambda r: any(m.get("epsilon") is not None for m in r.mechanisms),
     "'(epsilon, delta)-DP each' is the guarantee of one such step on its own."),
    (lambda r: any(m.get("sampling_probability") is not None for m in r.mechanisms),
     "'sampling probability' is the chance that a row takes part in one minibatch step; a step a row may miss "
     "costs it less privacy (amplification by subsampling), which the accountant composes exactly."),
    (lambda r: any(m.get("paper_epsilon") is not None for m in r.mechanisms),
     "'the DP-SGLD paper's bound' is the epsilon that paper's own formula would certify for the same noise: "
     "looser, shown for comparison only."),
    (lambda r: r.closed_form_epsilon is not None or r.rdp_epsilon is not None,
     "A 'cross-check' epsilon (closed form, RDP) is the same run accounted by another method: it may be larger "
     "than the budget without voiding the guarantee, which is the first line."),
)


def details_glossary(report: PrivacyReport) -> str:
    """What the terms of ``report``'s details mean, for the terms that report shows (printed after it)."""
    known = " ".join(text for applies, text in _TERMS if applies(report))
    return ("Reading the details: " + known + " The accountant adds up every noisy step of the run into the one "
            "(epsilon, delta) above.")


def _num(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return str(value)


def is_conditional(attrs: Mapping[str, Any]) -> bool:
    """Whether the fit's guarantee is conditional on exact sampling (OPS draws, Wang, Fienberg and Smola (2015) Proposition 3)."""
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
    unit = str(attrs.get("privacy_unit", "row") or "row")
    who = ("any one row of the private data by any other" if unit == "row" else
           f"all rows of any one {unit} in the private data (however many rows it has) by any other rows for that "
           f"{unit}")
    lines.append(
        f"Privacy in plain words: everything released here (the draws, their sample stats and this metadata) is "
        f"(epsilon = {_num(eps)}, delta = {_num(delta)})-differentially private"
        f"{', conditional on exact sampling,' if is_conditional(attrs) else ''}. Replacing {who} changes the "
        f"probability of any result by at most a factor {factor} (e^epsilon), except with probability at most "
        "delta.")
    if chains is not None and completed is not None:
        lines.append(f"The budget covers all {chains} chains and all {completed} iterations (warmup included) and "
                     "every noisy step; running again spends a new budget.")
    counted = (f"the number of rows (N = {attrs.get('N', '?')})" if unit == "row" else
               f"the number of {unit_noun(unit, plural=True)} (N = {attrs.get('n_units', attrs.get('N', '?'))}; the "
               "number of rows and "
               f"how many rows each {unit} has are protected and not released)")
    lines.append(f"Not protected: {counted}, the public data and the Stan "
                 "program, and what leaves outside the released values: how long the run took (and hence how many "
                 "iterations an interrupted run completed), whether it stopped with an error, and what the program's "
                 "own print or reject statements write (the stan-dp docs, privacy-notes.md, list these channels).")
    if int(attrs.get("seeded", 0) or 0):
        lines.append("This run was seeded: anyone who knows the seed can reproduce its noise; publish only runs "
                     "whose seed stays secret, or run unseeded.")
    return " ".join(lines)


def guarantee_line(attrs: Mapping[str, Any]) -> str:
    """The guarantee of a fit in one sentence (the budget spent, whom it protects, conditional or not, seeded or
    not), or its NOT PRIVATE warning: what ``stan-dp sample`` prints, leaving the full report to ``stan-dp
    summary``. Reads only the fit's attrs."""
    if int(attrs.get("private", 0)) != 1:
        return str(attrs.get("privacy_warning", "NOT PRIVATE: this object carries no privacy guarantee."))
    eps, delta = attrs.get("epsilon_spent", attrs.get("epsilon")), attrs.get("delta_spent", attrs.get("delta"))
    unit = str(attrs.get("privacy_unit", "row") or "row")
    conditional = ", CONDITIONAL on exact OPS draws," if is_conditional(attrs) else ""
    seeded = (" Seeded: anyone who knows the seed can reproduce its noise." if int(attrs.get("seeded", 0) or 0)
              else "")
    return (f"Privacy: everything released in this fit is (epsilon = {_num(eps)}, delta = {_num(delta)})-"
            f"differentially private{conditional} for any one {unit}.{seeded}")


def privacy_text(fit: Any) -> str:
    """The privacy statement of a fit's attrs: plain words, then the accountant's report and a glossary."""
    attrs = dict(fit.attrs)
    if int(attrs.get("private", 0)) != 1:
        return attrs.get("privacy_warning", "NOT PRIVATE: this object carries no privacy guarantee.")
    report = attrs.get("privacy_report")
    if not report:
        return plain_privacy_text(attrs)
    details = PrivacyReport.from_json(report)
    return "\n\n".join([plain_privacy_text(attrs), "Accountant details:\n" + str(details), details_glossary(details)])
