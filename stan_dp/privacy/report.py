"""The privacy report: the (epsilon, delta) guarantee of a run and how it was computed (JSON for the attrs).

Neighbouring relation
    Datasets are neighbours when they differ by **substituting one row**; N is public (all seeds).
    Every ``noise_multiplier`` in this module is ``sigma / Delta`` where ``Delta`` is the l2-sensitivity
    of the released quantity under substitution.  For a sum of per-row terms clipped to norm ``b`` this is
    ``Delta = 2 b``; so the penalty test with ``sigma_l = 2 tau_l b_l ||theta' - theta||`` has noise
    multiplier ``tau_l``, and a gradient with ``sigma_g = 2 tau_g b_g`` has noise multiplier ``tau_g``.

Strength of a Gaussian release (one name each, everywhere in the package)
    ``mu``: its Gaussian-DP mu (Dong, Roth & Su), ``Delta / sigma = 1 / noise_multiplier``; k releases compose
    to ``sqrt(sum mu_i^2)``.  ``rho``: its zCDP rho, ``mu^2 / 2`` (what the DP-HMC paper calls mu); rho's add up.
    Records written before this convention (a ``mu`` that was a rho, no ``rho`` field) are shown from their
    noise multiplier.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from . import events
from .evaluation import KIND_GAUSSIAN, KIND_POISSON, KIND_UNIFORM, evaluate_mechanisms

__all__ = ["GUARANTEE", "NEIGHBOURING_RELATION", "PrivacyReport", "gaussian_strength", "mechanism_text", "run_mu"]

NEIGHBOURING_RELATION = "substitute one row; N public"
GUARANTEE = "approximate differential privacy, (epsilon, delta)-DP"


@dataclasses.dataclass
class PrivacyReport:
    """The (epsilon, delta) guarantee of a run and how it was computed.

    ``epsilon`` is the accountant's value (for PLD: the pessimistic, i.e. upper-bound, estimate) at
    ``delta``.  ``mechanisms`` lists every mechanism with its noise multiplier (sigma / sensitivity under
    substitution), for Gaussian releases their Gaussian-DP ``mu`` and zCDP ``rho``, for others their
    ``(epsilon, delta)`` where relevant, the sampling probability of minibatch mechanisms, and the count over
    the whole run.  ``closed_form_epsilon`` (Gaussian compositions, the DP-HMC paper
    Theorem 2.4) and ``rdp_epsilon`` (dp-accounting's RDP accountant) are cross-checks; None where they do
    not apply.  Minibatch Gaussian mechanisms also carry ``paper_epsilon``: the epsilon that the papers'
    own DP-SGLD bound (the Privacy-for-Free paper Algorithm 2 / Theorem 4, constant 128) certifies for the same noise, steps
    and batch fraction (looser; reported for comparison, never used to calibrate).
    """

    epsilon: float
    delta: float
    accountant: str
    neighbouring_relation: str
    mechanisms: list[dict]
    rdp_epsilon: float | None = None
    closed_form_epsilon: float | None = None
    algorithm: str | None = None
    total_iterations: int | None = None
    guarantee: str = GUARANTEE

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        """A JSON string (strict JSON: no NaN/Infinity) for InferenceData attrs."""
        return json.dumps(self.to_dict(), allow_nan=False)

    @classmethod
    def from_json(cls, s: str) -> "PrivacyReport":
        data = json.loads(s)
        if not isinstance(data, dict):
            raise ValueError("s must be a JSON object produced by PrivacyReport.to_json")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"s has fields PrivacyReport does not know: {unknown}")
        missing = sorted(f.name for f in dataclasses.fields(cls)
                         if f.name not in data and f.default is dataclasses.MISSING)
        if missing:
            raise ValueError(f"s lacks required PrivacyReport fields: {missing}")
        return cls(**data)

    def __str__(self) -> str:
        title = f"Privacy guarantee: ({_fmt(self.epsilon)}, {_fmt(self.delta)})-DP"
        if self.algorithm:
            title += f" for {self.algorithm}"
        lines = [title,
                 f"  guarantee:             {self.guarantee}",
                 f"  neighbouring relation: {self.neighbouring_relation}",
                 f"  accountant:            {self.accountant}"]
        if self.total_iterations is not None:
            lines.append(f"  iterations (all chains and phases, warmup + sampling): {self.total_iterations}")
        checks = []
        if self.closed_form_epsilon is not None:
            checks.append(f"closed form (Gaussian composition) epsilon = {_fmt(self.closed_form_epsilon)}")
        if self.rdp_epsilon is not None:
            checks.append(f"RDP epsilon = {_fmt(self.rdp_epsilon)}")
        if checks:
            lines.append("  cross-checks:          " + "; ".join(checks))
        lines.append("  mechanisms:")
        lines.extend(f"    - {mechanism_text(m)}" for m in self.mechanisms)
        total = run_mu(self.mechanisms)
        if total is not None:
            lines.append(f"  Gaussian-DP mu of the whole run: {_fmt(total)} (sqrt of the sum of count x mu^2)")
        return "\n".join(lines)


def gaussian_strength(m: dict) -> tuple[float, float] | None:
    """(Gaussian-DP mu, zCDP rho) of one release of a Gaussian mechanism record, from its noise multiplier;
    None for other kinds."""
    tau = m.get("noise_multiplier")
    if m.get("kind") != KIND_GAUSSIAN or tau is None:
        return None
    return 1.0 / float(tau), 0.5 / float(tau) ** 2


def run_mu(mechanisms: list[dict]) -> float | None:
    """The Gaussian-DP mu of a composition of Gaussian mechanism records (``sqrt(sum count mu^2)``), or None when
    another kind of mechanism takes part (no closed-form mu then: the accountant composes it)."""
    active = [m for m in mechanisms if m.get("count", 0) > 0]
    strengths = [s for s in map(gaussian_strength, active) if s is not None]
    if not active or len(strengths) < len(active):
        return None
    return math.sqrt(math.fsum(m["count"] * s[0] ** 2 for m, s in zip(active, strengths)))


def mechanism_text(m: dict) -> str:
    """One mechanism record of a report (or of ``PrivacyPlan.mechanisms()``) in words: name, kind, noise, count."""
    parts = [m.get("kind", "?")]
    if m.get("noise_multiplier") is not None:
        parts.append(f"noise multiplier {_fmt(m['noise_multiplier'])}")
    strength = gaussian_strength(m)
    if strength is not None:
        parts.append(f"Gaussian-DP mu {_fmt(strength[0])} each (1 / noise multiplier)")
        parts.append(f"zCDP rho {_fmt(strength[1])} each (mu^2 / 2)")
    if m.get("epsilon") is not None:
        parts.append(f"({_fmt(m['epsilon'])}, {_fmt(m.get('delta', 0.0))})-DP each")
    if m.get("sampling_probability") is not None:
        parts.append(f"sampling probability {_fmt(m['sampling_probability'])}")
    parts.append(f"x {m.get('count', '?')}")
    if m.get("paper_epsilon") is not None:
        parts.append(f"the DP-SGLD paper's bound (Wang, Fienberg & Smola 2015, Theorem 4) would give epsilon "
                     f"{_fmt(m['paper_epsilon'])}")
    return f"{m.get('name', '?')}: " + ", ".join(parts)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    return str(x)


def _with_paper_bound(mechanisms: list[dict], delta: float) -> list[dict]:
    out = []
    for m in mechanisms:
        m = dict(m)
        if m["kind"] in (KIND_POISSON, KIND_UNIFORM) and m["count"] > 0:
            # the papers' noise multiplier is proportional to 1 / epsilon: invert it at our noise multiplier
            m["paper_epsilon"] = events.paper_sgmcmc_noise_multiplier(
                m["sampling_probability"], m["count"], 1.0, delta) / m["noise_multiplier"]
        out.append(m)
    return out


def make_report(mechanisms: list[dict], delta: float, algorithm: str | None,
                 total_iterations: int | None, interval: float | None = None) -> PrivacyReport:
    acc = evaluate_mechanisms(mechanisms, delta, interval)
    return PrivacyReport(epsilon=acc.epsilon, delta=delta, accountant=acc.accountant,
                         neighbouring_relation=NEIGHBOURING_RELATION,
                         mechanisms=_with_paper_bound(mechanisms, delta),
                         rdp_epsilon=acc.rdp_epsilon, closed_form_epsilon=acc.closed_form_epsilon,
                         algorithm=algorithm, total_iterations=total_iterations)
