"""A small NumPy No-U-Turn sampler for densities given as ``value_and_grad(theta)`` (used inside OPS).

Multinomial NUTS (Hoffman and Gelman 2014, with the multinomial trajectory sampling and the biased
progressive sampling at the top level that Stan uses; Betancourt 2017), a diagonal inverse metric and a
leapfrog integrator. Warmup adapts the step size by dual averaging on the mean acceptance statistic of each
trajectory and the diagonal metric from the second half of the warmup draws (one window, then a short
step-size-only phase). After warmup the step size and metric are fixed.

Everything here is internal to the OPS mechanism: the density it is given is computed from private rows,
and nothing except the final draws may leave the sampler (no step sizes, tree depths, divergences or
acceptance statistics are returned by :meth:`NUTS.draws`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .adaptation import DualAveraging, regularized_variance

__all__ = ["NUTS"]

#: a trajectory whose energy error exceeds this is divergent and stops growing (Stan's value)
MAX_ENERGY_ERROR = 1000.0


@dataclass
class _Point:
    theta: np.ndarray
    r: np.ndarray
    logp: float
    grad: np.ndarray


@dataclass
class _Tree:
    left: _Point
    right: _Point
    proposal: _Point
    log_weight: float  # log sum over the tree's points of exp(H0 - H)
    rho: np.ndarray  # sum of momenta
    accept_sum: float
    n_leapfrog: int
    valid: bool


def _logaddexp(a: float, b: float) -> float:
    return float(np.logaddexp(a, b))


class NUTS:
    """Multinomial NUTS on ``value_and_grad`` (theta -> (log density, gradient)).

    max_depth: the largest tree depth (2^max_depth leapfrog steps at most per iteration).
    target_accept: dual-averaging target of the mean acceptance statistic during warmup.
    """

    def __init__(self, value_and_grad: Callable[[np.ndarray], tuple[float, np.ndarray]], dim: int, *,
                 max_depth: int = 10, target_accept: float = 0.8):
        self.f = value_and_grad
        self.dim = int(dim)
        self.max_depth = int(max_depth)
        self.target_accept = float(target_accept)
        self.step_size = 0.1
        self.inv_metric = np.ones(self.dim)

    # -------------------------------------------------------------------------------- one trajectory
    def _point(self, theta: np.ndarray, r: np.ndarray) -> _Point:
        logp, grad = self.f(theta)
        return _Point(theta, r, float(logp), np.asarray(grad, dtype=float))

    def _energy(self, p: _Point) -> float:
        return -p.logp + 0.5 * float(np.dot(p.r, self.inv_metric * p.r))

    def _leapfrog(self, p: _Point, eps: float) -> _Point:
        r = p.r + 0.5 * eps * p.grad
        theta = p.theta + eps * self.inv_metric * r
        with np.errstate(all="ignore"):
            q = self._point(theta, r)
        q.r = q.r + 0.5 * eps * q.grad
        return q

    def _no_uturn(self, rho: np.ndarray, left: _Point, right: _Point) -> bool:
        return (float(np.dot(rho, self.inv_metric * left.r)) > 0.0
                and float(np.dot(rho, self.inv_metric * right.r)) > 0.0)

    def _build(self, rng: np.random.Generator, edge: _Point, direction: int, depth: int, eps: float,
               h0: float) -> _Tree:
        if depth == 0:
            q = self._leapfrog(edge, direction * eps)
            h = self._energy(q)
            if not math.isfinite(h):
                h = math.inf
            delta_h = h - h0
            valid = delta_h <= MAX_ENERGY_ERROR
            accept = math.exp(min(0.0, -delta_h)) if math.isfinite(delta_h) else 0.0
            log_w = -delta_h if math.isfinite(delta_h) else -math.inf
            return _Tree(q, q, q, log_w, q.r.copy(), accept, 1, valid)
        first = self._build(rng, edge, direction, depth - 1, eps, h0)
        if not first.valid:
            return first
        start = first.right if direction > 0 else first.left
        second = self._build(rng, start, direction, depth - 1, eps, h0)
        n = first.n_leapfrog + second.n_leapfrog
        acc = first.accept_sum + second.accept_sum
        if not second.valid:
            return _Tree(first.left, first.right, first.proposal, first.log_weight, first.rho, acc, n, False)
        log_w = _logaddexp(first.log_weight, second.log_weight)
        # multinomial sampling within the subtree: pick the second half with its share of the weight
        proposal = first.proposal
        if math.log(rng.uniform()) < second.log_weight - log_w:
            proposal = second.proposal
        left, right = (first.left, second.right) if direction > 0 else (second.left, first.right)
        rho = first.rho + second.rho
        return _Tree(left, right, proposal, log_w, rho, acc, n, self._no_uturn(rho, left, right))

    def transition(self, rng: np.random.Generator, theta: np.ndarray, eps: float | None = None
                   ) -> tuple[np.ndarray, float]:
        """One NUTS iteration from ``theta``: (next theta, mean acceptance statistic of the trajectory)."""
        eps = self.step_size if eps is None else float(eps)
        r0 = rng.standard_normal(self.dim) / np.sqrt(self.inv_metric)
        p0 = self._point(np.asarray(theta, dtype=float), r0)
        h0 = self._energy(p0)
        left = right = proposal = p0
        log_w = 0.0
        rho = r0.copy()
        accept_sum, n_leapfrog = 0.0, 0
        for depth in range(self.max_depth):
            direction = 1 if rng.uniform() < 0.5 else -1
            edge = right if direction > 0 else left
            sub = self._build(rng, edge, direction, depth, eps, h0)
            accept_sum += sub.accept_sum
            n_leapfrog += sub.n_leapfrog
            if not sub.valid:
                break
            # biased progressive sampling: move to the new subtree with probability min(1, w_new / w_old)
            if math.log(rng.uniform()) < sub.log_weight - log_w:
                proposal = sub.proposal
            log_w = _logaddexp(log_w, sub.log_weight)
            if direction > 0:
                right = sub.right
            else:
                left = sub.left
            rho = rho + sub.rho
            if not self._no_uturn(rho, left, right):
                break
        return proposal.theta.copy(), accept_sum / max(n_leapfrog, 1)

    # -------------------------------------------------------------------------------- warmup and draws
    def _initial_step_size(self, rng: np.random.Generator, theta: np.ndarray) -> None:
        """Stan's heuristic: double or halve the step until one leapfrog step's acceptance crosses 0.8."""
        p0 = self._point(theta, rng.standard_normal(self.dim) / np.sqrt(self.inv_metric))
        h0 = self._energy(p0)
        eps = self.step_size

        def log_ratio(e: float) -> float:
            h = self._energy(self._leapfrog(p0, e))
            return h0 - h if math.isfinite(h) else -math.inf

        direction = 1.0 if log_ratio(eps) > math.log(0.8) else -1.0
        for _ in range(60):
            new = eps * (2.0 ** direction)
            if (direction > 0) != (log_ratio(new) > math.log(0.8)):
                if direction > 0:
                    eps = new
                break
            eps = new
        self.step_size = min(max(eps, 1e-10), 1e3)

    def warmup(self, rng: np.random.Generator, theta: np.ndarray, iterations: int) -> np.ndarray:
        """Adapt the step size and diagonal metric over ``iterations`` iterations; returns the last point."""
        theta = np.asarray(theta, dtype=float).copy()
        iterations = int(iterations)
        if iterations <= 0:
            return theta
        self._initial_step_size(rng, theta)
        start = int(0.15 * iterations)
        end = max(start, int(0.85 * iterations))
        window: list[np.ndarray] = []
        da = DualAveraging(self.target_accept, self.step_size)
        for it in range(iterations):
            theta, accept = self.transition(rng, theta, da.current)
            da.update(accept)
            if start <= it < end:
                window.append(theta)
            if it == end - 1 and len(window) >= 10:
                self.inv_metric = regularized_variance(np.asarray(window))  # Stan's regularised variance
                self.step_size = da.current
                self._initial_step_size(rng, theta)
                da.restart(self.step_size)
        self.step_size = da.final
        return theta

    def draws(self, rng: np.random.Generator, theta: np.ndarray, n: int, thin: int = 1) -> np.ndarray:
        """``n`` draws, keeping every ``thin``-th iteration, from ``theta`` at the adapted settings."""
        out = np.empty((int(n), self.dim))
        theta = np.asarray(theta, dtype=float)
        for i in range(int(n)):
            for _ in range(int(thin)):
                theta, _ = self.transition(rng, theta)
            out[i] = theta
        return out
