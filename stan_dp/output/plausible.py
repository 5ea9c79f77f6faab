"""Which chains' draws may be published: one public rule against non-finite and absurd released values.

A private chain can diverge: noisy gradients push it where the log density overflows (a draw of sigma near
1e272, or NaN). Such draws are not posterior draws, and published beside an R-hat they make every summary
meaningless (a mean of 1e270, an sd of infinity). Before anything is published, every chain's unconstrained draws
go through :func:`screen_chains`; a draw is **absurd** when

* a coordinate is not finite, or its constrained value is not (Stan's bound transforms leave double precision
  near |u| = 709: exp(710) overflows; only draws with a coordinate beyond ``UNCONSTRAINED_MAX`` (700) in
  absolute value are constrained to check, so that an ordinary run constrains nothing twice); or
* the prior's log density there (the data-free prior instance, Jacobian included) is not finite, or lies more
  than ``PRIOR_DROP`` (5000) below the highest prior log density a bounded, data-free search finds
  (:func:`prior_reference`). For a normal prior that is 100 prior sds from its mean; for a half-normal prior on
  sigma, sigma above 100 prior scales. A flat (improper) prior bounds nothing here: only the first test applies.

A chain with any absurd sampling draw is **diverged** and is left out of every released draw group (its
sampling statistics too); the attrs list it with the reason, and a warning says so. When every chain diverged, the
chains are kept up to the first absurd draw of any of them (the longest prefix that all chains share); the fit
then holds that many draws, possibly none.

Why this rule. It depends only on the released draws and the prior instance (public), never on a row: it is
post-processing and costs no budget. The search for the prior's highest density runs from the unconstrained
origin within a public box; finding less than the true maximum only makes the rule more lenient, so the rule
never drops a chain whose draws stay within ``PRIOR_DROP`` of the prior's true highest density.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Sequence

import numpy as np
from scipy.optimize import minimize

from ..likelihood import RowLikelihood
from ..user_warnings import warn
from .diagnostics import ConvergenceWarning

__all__ = ["PRIOR_DROP", "UNCONSTRAINED_MAX", "Screen", "attach_screen", "prior_reference", "screen_chains"]

#: a draw whose prior log density lies more than this below the prior's highest is absurd
PRIOR_DROP = 5000.0
#: a draw with an unconstrained coordinate beyond this (in absolute value) is constrained to check that its
#: constrained values are finite (exp(u) overflows from u = 709.8)
UNCONSTRAINED_MAX = 700.0
#: the public box |u_j| <= SEARCH_BOX in which the prior's highest density is searched for
SEARCH_BOX = 50.0


@dataclasses.dataclass(frozen=True)
class Screen:
    """What :func:`screen_chains` decided (a function of released draws and the prior instance only)."""

    chains: int  # chains screened
    kept: list[int]  # 0-based chains released
    draws: int  # draws per released chain (all of them unless every chain diverged)
    total_draws: int  # draws per chain before screening
    reasons: dict[int, str]  # 0-based diverged chain -> why (its first absurd draw)
    reference: float  # the highest prior log density found

    @property
    def everything_kept(self) -> bool:
        """No chain diverged: the release is the chains' draws as they are."""
        return not self.reasons

    def select(self, array: np.ndarray) -> np.ndarray:
        """``array`` (chains, draws, ...) restricted to the released chains and draws."""
        array = np.asarray(array)
        return array[np.asarray(self.kept, dtype=np.intp), :self.draws]

    def describe(self) -> dict[str, Any]:
        """Public summary for the attrs (1-based chain numbers)."""
        return {"released_chains": [c + 1 for c in self.kept], "released_draws_per_chain": int(self.draws),
                "diverged_chains": {str(c + 1): why for c, why in sorted(self.reasons.items())},
                "rule": f"a chain is left out when a sampling draw is not finite, constrains to a non-finite value, "
                        f"or has a prior log density more than {PRIOR_DROP:g} below the prior's highest found "
                        f"({self.reference:.6g})"}

    def sentence(self) -> str:
        """The finding in words, or "" when every chain was released whole."""
        if self.everything_kept:
            return ""
        which = "; ".join(f"chain {c + 1}: {why}" for c, why in sorted(self.reasons.items()))
        if self.draws == self.total_draws:  # some chains kept whole
            return (f"{len(self.reasons)} of {self.chains} chains diverged and are left out of the released draws "
                    f"({which}). The released groups hold chain(s) {', '.join(str(c + 1) for c in self.kept)} only; "
                    "a diverged chain means the run failed somewhere, so treat the others with suspicion too.")
        return (f"every chain diverged ({which}). The released groups keep only the first {self.draws} of "
                f"{self.total_draws} draws per chain, up to the first absurd draw of any chain: they are not "
                "posterior draws.")


def prior_reference(likelihood: RowLikelihood, dim: int) -> float:
    """The highest prior log density found by a bounded, data-free search (L-BFGS-B on the prior instance from the
    unconstrained origin, within |u_j| <= ``SEARCH_BOX``); at least the prior's log density at the origin.
    -inf when the prior is not finite anywhere the search looked."""

    def log_prior(u: np.ndarray) -> float:
        try:
            value = float(likelihood.log_prior(np.asarray(u, dtype=float)))
        except Exception:  # a prior that throws there (e.g. outside its support) counts as -inf
            return -math.inf
        return value if not math.isnan(value) else -math.inf

    start = np.zeros(int(dim))
    best = log_prior(start)
    if not math.isfinite(best):  # no usable reference: the prior-drop test is off (-inf), the others stay
        return -math.inf

    def objective(u: np.ndarray) -> tuple[float, np.ndarray]:
        try:
            lp, grad = likelihood.log_prior_grad(np.asarray(u, dtype=float))
            lp, grad = float(lp), np.asarray(grad, dtype=float)
        except Exception:
            return 1e300, np.zeros(int(dim))
        if not (math.isfinite(lp) and np.all(np.isfinite(grad))):
            return 1e300, np.zeros(int(dim))
        return -lp, -grad

    try:
        found = minimize(objective, start, jac=True, method="L-BFGS-B",
                         bounds=[(-SEARCH_BOX, SEARCH_BOX)] * int(dim), options={"maxiter": 200})
        value = log_prior(found.x)
        if math.isfinite(value):
            best = max(best, value)
    except (ValueError, FloatingPointError):  # keep the origin's value
        pass
    return best


def _constrains_finite(likelihood: RowLikelihood, draw: np.ndarray) -> bool:
    """Whether every constrained value of one unconstrained draw is finite (a draw that fails to constrain is not)."""
    try:
        values = likelihood.constrain(draw)
    except Exception:
        return False
    return all(np.all(np.isfinite(np.asarray(v, dtype=float))) for v in values.values())


def _first_absurd(draws: np.ndarray, likelihood: RowLikelihood, floor: float) -> tuple[int, str]:
    """(index of the first absurd draw of one chain's (n, dim) draws, or n; why)."""
    n = draws.shape[0]
    finite = np.isfinite(draws).all(axis=1)
    large = np.abs(np.where(np.isfinite(draws), draws, 0.0)).max(axis=1, initial=0.0) > UNCONSTRAINED_MAX
    for i in range(n):
        if not finite[i]:
            return i, f"draw {i + 1} is not finite"
        if large[i] and hasattr(likelihood, "constrain") and not _constrains_finite(likelihood, draws[i]):
            return i, f"draw {i + 1} constrains to a non-finite value (an unconstrained coordinate beyond +-700)"
        try:
            lp = float(likelihood.log_prior(draws[i]))
        except Exception:
            lp = -math.inf
        if not math.isfinite(lp):
            return i, f"draw {i + 1} has a non-finite prior log density"
        if lp < floor:
            return i, (f"draw {i + 1} has a prior log density {lp:.6g}, more than {PRIOR_DROP:g} below the "
                       "prior's highest")
    return n, ""


def screen_chains(candidates: Sequence[np.ndarray], likelihood: RowLikelihood, reference: float | None = None) -> Screen:
    """Screen the unconstrained draws about to be released: ``candidates`` is one or more (chains, draws, dim)
    arrays of the same chains (the chains' own draws, and the noise-aware draws made from them); a chain is kept
    only when every candidate's draws of it are plausible (module doc). ``reference``: the prior's highest log
    density found (default :func:`prior_reference`)."""
    arrays = [np.asarray(a, dtype=float) for a in candidates]
    if not arrays:
        raise ValueError("screen_chains needs at least one (chains, draws, dim) array")
    chains, n, dim = arrays[0].shape
    if any(a.shape != arrays[0].shape for a in arrays):
        raise ValueError(f"candidate arrays must share one shape; got {[a.shape for a in arrays]}")
    if reference is None:
        reference = prior_reference(likelihood, dim)
    floor = reference - PRIOR_DROP if math.isfinite(reference) else -math.inf
    first = np.full(chains, n, dtype=np.int64)
    reasons: dict[int, str] = {}
    for c in range(chains):
        for which, a in enumerate(arrays):
            index, why = _first_absurd(a[c], likelihood, floor)
            if index < first[c]:
                first[c] = index
                label = "" if len(arrays) == 1 or which == 0 else " (of its noise-aware draws)"
                reasons[c] = why + label
    kept = [c for c in range(chains) if first[c] == n]
    draws = n
    if not kept:  # every chain diverged: the prefix they all share
        kept, draws = list(range(chains)), int(first.min())
    return Screen(chains=chains, kept=kept, draws=draws, total_draws=n, reasons=reasons, reference=float(reference))


def attach_screen(fit: Any, screen: Screen) -> None:
    """Record which chains and draws were released (attrs ``released_draws``, JSON) and warn, at the user's line,
    with a ``ConvergenceWarning`` when a chain was left out."""

    fit.attrs["released_draws"] = json.dumps(screen.describe())
    if not screen.everything_kept:
        warn(f"Released draws: {screen.sentence()}", ConvergenceWarning)
