"""From two samples of released outputs to a lower bound on epsilon.

A mechanism M is (epsilon, delta)-DP only if every test that guesses "D1" from one output of M on D0 or on
its neighbour D1 has false-positive rate alpha (guessing D1 on D0) and false-negative rate beta (guessing
D0 on D1) with

    1 - beta <= e^epsilon alpha + delta   and   1 - alpha <= e^epsilon beta + delta,

so epsilon >= max(log((1 - delta - beta) / alpha), log((1 - delta - alpha) / beta)). With upper confidence
bounds on alpha and beta (Clopper-Pearson, ``scipy.stats.beta``; each at level 1 - (1 - confidence) / 2, so
that both hold together with probability >= ``confidence``), the right-hand side is a lower bound on the
mechanism's true epsilon at that confidence (Jagielski, Ullman & Oprea 2020; Nasr et al. 2021).

The test is a threshold on a scalar statistic of the output. Which statistic (a feature, a mean-difference or
a Fisher discriminant projection of the feature vector) and which threshold are chosen on one half of the
runs (``select``); the bound is computed on the other, independent half (``evaluate``), so the choice cannot
bias it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

__all__ = ["clopper_pearson_upper", "epsilon_lower_bound", "Statistic", "select_statistic", "evaluate"]


def clopper_pearson_upper(k, n, level: float):
    """One-sided Clopper-Pearson upper bound at ``level`` on a binomial proportion with k successes in n."""
    k = np.asarray(k, dtype=float)
    with np.errstate(invalid="ignore"):
        upper = stats.beta.ppf(level, k + 1.0, np.maximum(n - k, 1e-300))
    return np.where(k >= n, 1.0, upper)


def epsilon_lower_bound(false_pos, n0: int, false_neg, n1: int, delta: float, confidence: float):
    """Lower bound on epsilon at ``delta`` from the error counts of one threshold test (see module doc).

    ``false_pos`` of ``n0`` runs on D0 guessed D1; ``false_neg`` of ``n1`` runs on D1 guessed D0. Vectorised
    over arrays of counts. Returns 0 where the test shows nothing.
    """
    level = 1.0 - (1.0 - confidence) / 2.0
    alpha = clopper_pearson_upper(false_pos, n0, level)
    beta = clopper_pearson_upper(false_neg, n1, level)
    with np.errstate(divide="ignore", invalid="ignore"):
        one = np.log(np.maximum(1.0 - delta - beta, 0.0) / alpha)
        two = np.log(np.maximum(1.0 - delta - alpha, 0.0) / beta)
    out = np.maximum(np.nan_to_num(one, nan=0.0, neginf=0.0), np.nan_to_num(two, nan=0.0, neginf=0.0))
    return np.maximum(out, 0.0)


@dataclass
class Statistic:
    """A threshold test: guess D1 when ``sign * (features @ weights) > threshold``."""

    description: str
    weights: np.ndarray
    sign: float
    threshold: float

    def guesses_d1(self, features: np.ndarray) -> np.ndarray:
        return self.sign * (np.asarray(features, dtype=float) @ self.weights) > self.threshold

    def text(self) -> str:
        if not math.isfinite(self.threshold):
            return "none (no threshold separated the selection runs; the test always guesses D0)"
        op = ">" if self.sign > 0 else "<"
        return f"{self.description} {op} {self.sign * self.threshold:.6g}"


def _best_threshold(s0: np.ndarray, s1: np.ndarray, delta: float, confidence: float):
    """(epsilon bound, sign, threshold) of the best test ``sign * s > t`` over the observed values."""
    best = (0.0, 1.0, math.inf)
    n0, n1 = s0.size, s1.size
    for sign in (1.0, -1.0):
        a, b = np.sort(sign * s0), np.sort(sign * s1)
        cands = np.unique(np.concatenate([a, b]))
        if cands.size > 4096:  # quantiles of the pooled values are enough to place the threshold
            cands = np.unique(np.quantile(cands, np.linspace(0.0, 1.0, 4096)))
        fp = n0 - np.searchsorted(a, cands, side="right")
        fn = np.searchsorted(b, cands, side="right")
        eps = epsilon_lower_bound(fp, n0, fn, n1, delta, confidence)
        i = int(np.argmax(eps))
        if eps[i] > best[0]:
            best = (float(eps[i]), sign, float(cands[i]))
    return best


def _candidate_projections(x0: np.ndarray, x1: np.ndarray, names: list[str]) -> list[tuple[str, np.ndarray]]:
    p = x0.shape[1]
    out: list[tuple[str, np.ndarray]] = []
    if p <= 64:
        for j in range(p):
            w = np.zeros(p)
            w[j] = 1.0
            out.append((f"feature {names[j]!r}", w))
    diff = x1.mean(axis=0) - x0.mean(axis=0)
    if p > 1 and np.any(diff != 0.0):
        out.append((f"mean-difference projection of {p} features", diff))
        cov = 0.5 * (np.cov(x0, rowvar=False) + np.cov(x1, rowvar=False))
        ridge = 1e-9 * max(float(np.trace(cov)) / p, 1e-300)
        try:
            w = np.linalg.solve(cov + ridge * np.eye(p), diff)
            if np.all(np.isfinite(w)):
                out.append((f"Fisher discriminant projection of {p} features", w))
        except np.linalg.LinAlgError:
            pass
    return out


def select_statistic(x0: np.ndarray, x1: np.ndarray, names: list[str], delta: float,
                     confidence: float) -> tuple[float, Statistic]:
    """The statistic and threshold with the largest epsilon bound on these (selection) runs."""
    x0 = np.nan_to_num(np.asarray(x0, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
    x1 = np.nan_to_num(np.asarray(x1, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
    best_eps, best = -1.0, None
    for description, w in _candidate_projections(x0, x1, names):
        eps, sign, t = _best_threshold(x0 @ w, x1 @ w, delta, confidence)
        if eps > best_eps:
            best_eps, best = eps, Statistic(description, w, sign, t)
    if best is None:  # no feature varies: a test that always guesses D0
        best_eps, best = 0.0, Statistic("constant", np.zeros(x0.shape[1]), 1.0, math.inf)
    return best_eps, best


def evaluate(statistic: Statistic, x0: np.ndarray, x1: np.ndarray, delta: float,
             confidence: float) -> tuple[float, int, int]:
    """(epsilon lower bound, false positives, false negatives) of a fixed test on held-out runs."""
    x0 = np.nan_to_num(np.asarray(x0, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
    x1 = np.nan_to_num(np.asarray(x1, dtype=float), nan=0.0, posinf=1e300, neginf=-1e300)
    fp = int(np.count_nonzero(statistic.guesses_d1(x0)))
    fn = int(np.count_nonzero(~statistic.guesses_d1(x1)))
    eps = float(epsilon_lower_bound(fp, x0.shape[0], fn, x1.shape[0], delta, confidence))
    return eps, fp, fn
