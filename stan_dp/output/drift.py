"""Are the chains still on their way from where they started? A check of the released draws alone.

A private chain whose noise allows only small steps can spend its whole run travelling from its inits towards the
posterior. Its draws then look narrow and confident (the sd of a short stretch of a path) while they describe the
path, not the posterior. R-hat and ESS flag such runs as unconverged; this module says what the draws show:

* **drifting**: in every chain, the means of the first and of the second half of the draws disagree, for at
  least one scalar, by more than ``DRIFT_MIN`` (2) within-half standard deviations. A stationary chain gives
  about sqrt(2 / ESS of a half) (measured: 0.25 median and 1.0 at the 99th percentile for AR(1) chains with
  autocorrelation 0.9 and 500 draws; never above 2), a straight path gives sqrt(12) = 3.5 and a random walk,
  which has not settled either, exceeds 2 in about a third of its chains;
* **on their inits**: every chain's mean lies within ``NEAR_START`` (10) of its own standard deviations of the
  point where the chain started (its init, a public input), coordinate by coordinate on the unconstrained scale,
  while the chains disagree with each other (R-hat above ``NEAR_START_RHAT``, 1.1). A chain that travelled to the
  posterior from a start outside it ends tens to hundreds of its sds away (measured: penalty MH from
  uniform(-2, 2) inits on a 2-d Gaussian posterior of sd 0.02, 89-226 at epsilon 10), a stuck one stays within
  a few (3-8 at epsilon 0.1 and 1, from random inits and from a far public init alike);
* **frozen**: a chain whose draws are all identical (no move was accepted while sampling): it sits where it
  started sampling, on its inits when there was no warmup.

Privacy: post-processing of released draws only (no row is read), so it costs no budget and may be published.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from .run_result import RunResult

__all__ = ["DRIFT_MIN", "NEAR_START", "NEAR_START_RHAT", "Drift", "drift", "near_start_chains"]

#: a chain drifts when its two halves disagree by more than this many within-half standard deviations
DRIFT_MIN = 2.0
#: fewer draws per chain than this are not judged (each half needs a few draws)
MIN_DRAWS = 8
#: stands for an infinite disagreement (a half whose draws are all equal, the other elsewhere)
_LARGE = 1e6
#: a chain sits on its init when its mean lies within this many of its own sds of it, in every coordinate
NEAR_START = 10.0
#: ... and the chains count as sitting on their inits only while they disagree (R-hat above this)
NEAR_START_RHAT = 1.1


@dataclass
class Drift:
    """What the halves test and the frozen-chain test found (functions of the released draws only)."""

    #: the smallest, over chains, of each chain's largest half-disagreement (in within-half sds); NaN if unjudged
    disagreement: float = float("nan")
    #: the scalar that disagrees most in most chains
    worst: str = ""
    #: 1-based numbers of the chains whose draws are all identical
    frozen: list[int] = field(default_factory=list)
    chains: int = 0
    #: 1-based numbers of the chains whose draws stay near their start (``near_start_chains``)
    near_start: list[int] = field(default_factory=list)
    #: the largest R-hat of the released scalars (NaN when undefined)
    max_rhat: float = float("nan")

    @property
    def on_inits(self) -> bool:
        """Every chain stays within ``NEAR_START`` own sds of its start while the chains disagree."""
        disagree = not np.isfinite(self.max_rhat) or self.max_rhat > NEAR_START_RHAT
        return self.chains > 0 and len(self.near_start) == self.chains and disagree

    @property
    def drifting(self) -> bool:
        """Every chain's halves disagree by more than ``DRIFT_MIN`` within-half sds."""
        return bool(np.isfinite(self.disagreement) and self.disagreement > DRIFT_MIN)

    @property
    def all_frozen(self) -> bool:
        """Every chain's draws are identical: no chain moved while sampling."""
        return self.chains > 0 and len(self.frozen) == self.chains

    @property
    def stuck(self) -> bool:
        """The draws show chains still on their way (drifting), on their inits, or not moving at all."""
        return self.drifting or self.on_inits or self.all_frozen

    def sentence(self, start: str = "inits") -> str:
        """The finding in a few plain words, or "" when there is none. One finding only, the strongest: chains that
        did not move, then chains still near their start, then chains still drifting (so that "near the start" and
        "drifting" are never said together). ``start`` names where the chains started: "inits", or "anchor" for an
        anchored run (``stan_dp.phases.anchor``)."""
        where = "the anchor" if start == "anchor" else "their inits"
        if self.all_frozen:
            return "the chains did not move while sampling (every draw of each chain is the same)"
        if self.on_inits:
            return f"the chains are still near {where} and disagree with each other"
        if self.drifting:
            return f"the chains are still drifting away from {where} (the two halves of every chain disagree)"
        if self.frozen:
            return f"chain(s) {', '.join(map(str, self.frozen))} did not move while sampling"
        return ""

    def evidence(self, start: str = "inits") -> str:
        """The numbers behind :meth:`sentence` (for ``--verbose`` and the attrs), or "" when there is none."""
        where = "the anchor" if start == "anchor" else "its init"
        parts = []
        if self.drifting:
            parts.append(f"the first and second halves of every chain disagree by {self.disagreement:.3g} or more "
                         f"within-half standard deviations (most at {self.worst}; {DRIFT_MIN:g} is the threshold)")
        if self.on_inits:
            parts.append(f"every chain's mean stays within {NEAR_START:g} of its own standard deviations of {where} "
                         f"while R-hat exceeds {NEAR_START_RHAT:g}")
        if self.frozen:
            parts.append(f"chain(s) {', '.join(map(str, self.frozen))} repeat one draw")
        return "; ".join(parts)


def _half_disagreement(draws: np.ndarray) -> float:
    """|mean(second half) - mean(first half)| over the within-half sd of one chain's draws of one scalar."""
    half = draws.shape[0] // 2
    first, second = draws[:half], draws[half:2 * half]
    gap = abs(float(second.mean() - first.mean()))
    spread = float(np.sqrt(0.5 * (first.var(ddof=1) + second.var(ddof=1))))
    if spread > 0:
        return gap / spread
    return float("inf") if gap > 0 else 0.0


def near_start_chains(result: RunResult) -> list[int]:
    """1-based numbers of the chains of ``result`` whose mean stays within ``NEAR_START`` of their own sds of their
    (data-free) init in every unconstrained coordinate; chains with fewer than ``MIN_DRAWS`` draws are not judged."""
    near = []
    for c, chain in enumerate(result.chains):
        draws = np.asarray(chain.draws, dtype=float)
        if draws.shape[0] < MIN_DRAWS or not np.all(np.isfinite(draws)):
            continue
        gap = np.abs(draws.mean(axis=0) - np.asarray(chain.init, dtype=float))
        if np.all(gap <= NEAR_START * draws.std(axis=0, ddof=1)):
            near.append(c + 1)
    return near


def drift(scalars: dict[str, np.ndarray], *, near_start: list[int] | None = None,
          max_rhat: float = float("nan")) -> Drift:
    """The drift findings of released draws: ``scalars`` maps each scalar's label to its (chain, draw) array (as
    ``stan_dp.output.diagnostics`` collects them); ``near_start`` lists the chains found near their inits
    (``near_start_chains``; not known for a fit read from a file) and ``max_rhat`` is the verdict's R-hat."""
    found = dict(near_start=list(near_start or []), max_rhat=float(max_rhat))
    if not scalars:
        return Drift(**found)
    arrays = [np.asarray(values, dtype=float) for values in scalars.values()]
    chains, draws = arrays[0].shape
    frozen = [c + 1 for c in range(chains) if draws > 1 and all(np.ptp(a[c]) == 0 for a in arrays)]
    if draws < MIN_DRAWS or not all(np.all(np.isfinite(a)) for a in arrays):
        return Drift(frozen=frozen, chains=chains, **found)
    names = list(scalars)
    table = np.array([[_half_disagreement(a[c]) for a in arrays] for c in range(chains)])  # (chain, scalar)
    per_chain = table.max(axis=1)
    worst = Counter(names[int(j)] for j in table.argmax(axis=1)).most_common(1)[0][0]
    # a half that never moved gives an infinite ratio: keep it finite, so that it survives JSON
    return Drift(disagreement=float(min(per_chain.min(), _LARGE)), worst=worst, frozen=frozen, chains=chains,
                 **found)
