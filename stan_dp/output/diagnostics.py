"""Convergence diagnostics of released draws: R-hat and bulk / tail ESS per scalar quantity, with a verdict.

After every private run ``sample_private`` calls :func:`attach_convergence`, which computes the rank-normalised
split R-hat and the bulk and tail effective sample sizes (Vehtari et al. 2021, as implemented by ArviZ) of every
scalar in the ``posterior`` group, stores a compact verdict as JSON in ``attrs["convergence"]`` and, when the
thresholds fail, emits a :class:`ConvergenceWarning` that says what to try. The fit is returned either way:
the warning never hides it.

Thresholds (Stan's and ArviZ's usual ones, Vehtari et al. 2021 section 4):

* R-hat must be at most ``RHAT_MAX = 1.01`` for every scalar; a NaN R-hat (draws that do not vary) fails;
* bulk and tail ESS must be at least ``ESS_PER_CHAIN_MIN = 100`` per chain (400 for the default 4 chains).

When they fail, the verdict also says what the draws show (``stan_dp.output.drift``): chains still drifting from
where they started (the two halves of every chain disagree), chains sitting on their inits (the run passes which
chains stay near their public starting points) or chains that did not move; the message then leads with that, in
those words, since such draws look confident and are not the posterior.

Privacy: this is post-processing of the released draws only (no private row, log density or clipping count
is read), so it costs no privacy budget and the verdict may be published with the draws.
"""
from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..user_warnings import warn as warn_user
from .arviz_compat import get_group, rhat_ess
from .drift import Drift, drift

__all__ = ["ConvergenceWarning", "Convergence", "RHAT_MAX", "ESS_PER_CHAIN_MIN", "convergence",
           "attach_convergence", "convergence_text", "stored_convergence"]

#: largest acceptable rank-normalised split R-hat
RHAT_MAX = 1.01
#: smallest acceptable bulk and tail ESS per chain
ESS_PER_CHAIN_MIN = 100
#: fewer draws per chain than this cannot be judged (split R-hat needs two halves of two draws)
MIN_DRAWS = 4

ADVICE = (
    "The draws are kept, but do not report them as the posterior yet. What to try: more rows (the private "
    "noise weighs less as N grows), a larger epsilon, more iterations (iter_warmup / iter_sampling), public inits "
    "closer to plausible values, or another algorithm; `stan-dp advise` / `stan_dp.advise` (on public data) suggests settings."
)


STUCK_ADVICE = (
    "Do not report these draws: their spread is that of a stretch of the way from the inits (scaled, in the "
    "released posterior group of a noise-aware run), not posterior uncertainty, and may be far narrower or "
    "wider than the posterior's."
)


class ConvergenceWarning(UserWarning):
    """The released draws fail the usual convergence thresholds (R-hat > 1.01 or ESS < 100 per chain)."""


@dataclass
class Convergence:
    """Verdict on the released draws (all fields are functions of the released draws only)."""

    chains: int
    draws_per_chain: int
    max_rhat: float
    min_ess_bulk: float
    min_ess_tail: float
    rhat_max: float = RHAT_MAX
    ess_min: float = 0.0
    converged: bool = False
    #: scalar names failing a threshold, worst first (at most 10)
    failing: list[str] = field(default_factory=list)
    #: the halves test (``stan_dp.output.drift``): every chain's smallest-case disagreement, its worst scalar,
    #: and the chains whose draws never changed
    drift: float = float("nan")
    drift_at: str = ""
    frozen_chains: list[int] = field(default_factory=list)
    #: the chains whose draws stay near their inits (``stan_dp.output.drift.near_start_chains``)
    near_start_chains: list[int] = field(default_factory=list)

    @property
    def drift_finding(self) -> Drift:
        """The drift finding stored in this verdict."""
        return Drift(self.drift, self.drift_at, list(self.frozen_chains), self.chains, list(self.near_start_chains),
                     self.max_rhat)

    @property
    def stuck(self) -> bool:
        """Not converged, and the draws show chains still on their way from the inits (or not moving at all)."""
        return not self.converged and self.drift_finding.stuck

    def to_json(self) -> str:
        """Compact JSON (NaN written as null)."""
        data = asdict(self)
        for key, value in data.items():
            if isinstance(value, float) and not np.isfinite(value):
                data[key] = None
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> "Convergence":
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        for key in ("max_rhat", "min_ess_bulk", "min_ess_tail", "drift"):
            if data.get(key) is None:
                data[key] = float("nan")
        return cls(**data)

    def message(self) -> str:
        """One paragraph: the verdict, the numbers and the thresholds (and what to try when it fails)."""
        numbers = (f"max R-hat {_fmt(self.max_rhat, 3)} (want <= {self.rhat_max}), min bulk ESS "
                   f"{_fmt(self.min_ess_bulk, 0)} and min tail ESS {_fmt(self.min_ess_tail, 0)} (want >= "
                   f"{self.ess_min:.0f} = {ESS_PER_CHAIN_MIN} per chain x {self.chains} chains)")
        if self.converged:
            return f"Convergence: the chains look converged: {numbers}."
        if self.draws_per_chain < MIN_DRAWS:
            return (f"Convergence: cannot be judged from {self.draws_per_chain} draw(s) per chain (need at least "
                    f"{MIN_DRAWS}, and {ESS_PER_CHAIN_MIN} effective draws per chain to pass). {ADVICE}")
        worst = f" Worst: {', '.join(self.failing)}." if self.failing else ""
        finding = self.drift_finding.sentence()
        if self.stuck:  # say first what the draws show
            return (f"Convergence: {finding}. The chains have NOT converged: {numbers}."
                    f"{worst} {STUCK_ADVICE} {ADVICE}")
        also = f" Also, {finding}." if finding else ""
        return f"Convergence: the chains have NOT converged: {numbers}.{worst}{also} {ADVICE}"


def _fmt(value: float, digits: int) -> str:
    return "undefined (too few or constant draws)" if not np.isfinite(value) else f"{value:.{digits}f}"


def _scalars(dataset: Any) -> dict[str, np.ndarray]:
    """Scalar name ("beta[1]") -> draws (chain, draw) of every variable of a posterior Dataset."""
    out: dict[str, np.ndarray] = {}
    for name, var in dataset.data_vars.items():
        values = np.asarray(var.values, dtype=float)
        if values.ndim < 2:
            continue
        values = values.reshape(values.shape[0], values.shape[1], int(np.prod(var.shape[2:], dtype=int)))
        extra = var.shape[2:]
        for flat, index in enumerate(np.ndindex(*extra) if extra else [()]):
            label = f"{name}[{','.join(str(i) for i in index)}]" if index else str(name)
            out[label] = values[:, :, flat]
    return out


def _rhat_ess(draws: np.ndarray) -> tuple[float, float, float]:
    """(R-hat, bulk ESS, tail ESS) of one scalar's (chain, draw) array, computed by ArviZ."""
    if not np.all(np.isfinite(draws)) or np.ptp(draws) == 0:
        return float("nan"), float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return rhat_ess(draws)


def convergence(fit: Any, group: str = "posterior", *, near_start: list[int] | None = None) -> Convergence:
    """R-hat and bulk / tail ESS of every scalar of ``fit``'s posterior group (or ``group``), and the verdict (with
    the drift findings of ``stan_dp.output.drift``; ``near_start``: the chains found near their inits, when known)."""
    posterior = get_group(fit, group)
    scalars = _scalars(posterior)
    chains = int(posterior.sizes.get("chain", 0))
    draws = int(posterior.sizes.get("draw", 0))
    ess_min = float(ESS_PER_CHAIN_MIN * chains)
    moving = drift(scalars)
    found = dict(drift=moving.disagreement, drift_at=moving.worst, frozen_chains=moving.frozen,
                 near_start_chains=list(near_start or []))
    if not scalars or draws < MIN_DRAWS:  # e.g. a run interrupted during warmup
        nan = float("nan")
        return Convergence(chains=chains, draws_per_chain=draws, max_rhat=nan, min_ess_bulk=nan, min_ess_tail=nan,
                           ess_min=ess_min, converged=False, failing=[], **found)
    rows = {name: _rhat_ess(values) for name, values in scalars.items()}
    rhats = np.array([r[0] for r in rows.values()])
    bulks = np.array([r[1] for r in rows.values()])
    tails = np.array([r[2] for r in rows.values()])

    def badness(r: tuple[float, float, float]) -> float:
        if not all(np.isfinite(r)):
            return np.inf
        return max(r[0] - RHAT_MAX, 0) * 100 + max(ess_min - min(r[1], r[2]), 0) / ess_min

    failing = sorted((n for n, r in rows.items() if badness(r) > 0), key=lambda n: -badness(rows[n]))
    nan_all = lambda a, f: float(f(a)) if np.all(np.isfinite(a)) else float("nan")  # noqa: E731
    return Convergence(
        chains=chains, draws_per_chain=draws,
        max_rhat=nan_all(rhats, np.max), min_ess_bulk=nan_all(bulks, np.min), min_ess_tail=nan_all(tails, np.min),
        ess_min=ess_min, converged=not failing, failing=failing[:10], **found,
    )


def attach_convergence(fit: Any, *, warn: bool = True, group: str = "posterior",
                       near_start: list[int] | None = None) -> Convergence:
    """Compute :func:`convergence` of ``group``, store it in ``fit.attrs["convergence"]`` (JSON) and warn when it
    fails (at the caller's line, ``stan_dp.user_warnings.warn``).

    Post-processing of released draws (and, through ``near_start``, of the public inits): no privacy cost.
    """
    verdict = convergence(fit, group, near_start=near_start)
    fit.attrs["convergence"] = verdict.to_json()
    if warn and not verdict.converged:
        warn_user(verdict.message(), ConvergenceWarning)
    return verdict


def stored_convergence(fit: Any) -> Convergence | None:
    """The verdict stored in ``fit.attrs["convergence"]``, or None when the fit carries none."""
    text = dict(fit.attrs).get("convergence")
    return Convergence.from_json(str(text)) if text else None


def convergence_text(fit: Any) -> str | None:
    """The stored verdict of ``fit`` as a readable paragraph, or None when the fit carries none."""
    verdict = stored_convergence(fit)
    return verdict.message() if verdict is not None else None
