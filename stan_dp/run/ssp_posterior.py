"""The noise-aware posterior of ``algorithm="dp-ssp"``: post-processing of the released moment matrix only.

Released: Z = s + E, with s the upper triangle (without the constant N) of the moment matrix M of the clamped,
centred rows v_i = (1, x_i - c_x, y_i - c_y) and E ~ N(0, diag(noise_sd^2)) (``stan_dp.privacy.moments``: one sd
for the linear entries, another for the quadratic ones when the release weights them).

Model (in the spirit of Bernstein and Sheldon, "Differentially private Bayesian linear regression", NeurIPS
2019): the true statistics s are latent. Write M = [[S_xx, T], [T^T, yy]] with S_xx the (K + 1) x (K + 1)
moments of (1, x), T = sum_i (1, x_i) y_i and yy = sum_i y_i^2, and R = yy - T^T S_xx^-1 T the residual sum of
squares. Conditionally on the design (the regression's usual stance; S_xx gets its own prior, ``design_prior``:
flat on the positive definite matrices, or that of normal covariate rows, ``stan_dp.run.ssp_design``) and on
theta = (a, b, sigma),

    T | S_xx, theta ~ N(S_xx c, sigma^2 S_xx)  and  R / sigma^2 ~ chi^2(N - K - 1), independent of T,

with c = (a + b . c_x - c_y, b) the coefficients in centred coordinates. Both are exact for normal rows (no
normal approximation of the statistics is needed once the design is conditioned on), and their product is,
as a function of theta, exactly the Gaussian likelihood sigma^-N exp(-w^T M w / (2 sigma^2)), w = (-c, 1):
with no release noise the sampler targets the non-private posterior given the (clamped) rows.

The joint target over (theta on the program's unconstrained scale, s) is

    log p0(theta) + log p(S_xx) + log p(T, R | S_xx, theta) - sum_k (Z_k - s_k)^2 / (2 noise_sd_k^2)

(p0: the program's data-free prior; p(S_xx) the design prior, a constant when flat). It is sampled by several
chains of random-walk Metropolis with a covariance from the Laplace approximation at the joint mode (found by
optimisation from a data-free start) refined on the pooled warmup draws, and a step scale adapted during warmup, alternated with independence
proposals from a multivariate t (5 degrees of freedom) fitted the same way (both steps keep the target; the
independence steps let a chain cross the posterior in one move when the fit is good). Everything here reads only Z and
public inputs: the chains, their starts and their tuning are post-processing, and their R-hat / ESS are those of
real Markov chains.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from scipy import optimize
from scipy.special import gammaln


__all__ = ["SSPTarget", "sample_ssp_posterior"]


@dataclasses.dataclass
class SSPTarget:
    """The joint log density of (theta, s) given the released entries (see the module doc).

    log_prior: theta -> log p0(theta) (data-free, unconstrained scale);
    coefficients: theta -> (a, b (K,), sigma) on the data's original scale (data-free map)."""

    released: np.ndarray
    n_rows: int
    #: the release noise sd of each released entry (one number: the same for all)
    noise_sd: float | np.ndarray
    x_centre: np.ndarray
    y_centre: float
    dim: int
    log_prior: Callable[[np.ndarray], float]
    coefficients: Callable[[np.ndarray], tuple[float, np.ndarray, float]]
    #: None: chosen from Z (``choose_centred``); True: the latent is s itself; False: non-centred
    centred: bool | None = None
    #: log prior of the latent design moments S_xx ((K + 1) x (K + 1), -inf outside its support); None: flat
    design_prior: Callable[[np.ndarray], float] | None = None

    def __post_init__(self) -> None:
        self.released = np.asarray(self.released, dtype=float)
        self.x_centre = np.asarray(self.x_centre, dtype=float).ravel()
        self.p = self.x_centre.size + 1  # (1, x)
        self.df = int(self.n_rows) - self.p
        if self.df < 1:
            raise ValueError(f"dp-ssp needs more rows than coefficients: N = {self.n_rows}, {self.p} coefficients")
        self.n_latent = self.released.size
        sds = np.broadcast_to(np.asarray(self.noise_sd, dtype=float), (self.n_latent,)).copy()
        if not np.all(np.isfinite(sds) & (sds > 0)):
            raise ValueError(f"noise_sd must be finite and positive for every released entry, got {sds.tolist()}")
        self.entry_sds: np.ndarray = sds
        self.largest_noise_sd = float(sds.max())
        self.log_chi_const = -(self.df / 2.0) * math.log(2.0) - float(gammaln(self.df / 2.0))
        q = self.p + 1
        iu = np.triu_indices(q)
        self._iu = (iu[0][1:], iu[1][1:])  # the released entries' places (row-major upper triangle)
        self._template = np.zeros((q, q))
        self._template[0, 0] = float(self.n_rows)
        # the latent's S_xx part: upper triangle of the p x p design moments without the constant
        sxx_iu = np.triu_indices(self.p)
        self._sxx_iu = (sxx_iu[0][1:], sxx_iu[1][1:])
        self.n_sxx = self._sxx_iu[0].size
        self._sxx_template = np.zeros((self.p, self.p))
        self._sxx_template[0, 0] = float(self.n_rows)
        # released layout from (S_xx entries, T, yy): positions of each released entry in that concatenation
        place = {}
        for n, (i, j) in enumerate(zip(*self._sxx_iu)):
            place[(i, j)] = n
        for i in range(self.p):
            place[(i, self.p)] = self.n_sxx + i
        place[(self.p, self.p)] = self.n_sxx + self.p
        self._order = np.array([place[(i, j)] for i, j in zip(*self._iu)])
        self._sxx_pos = np.argsort(self._order)[: self.n_sxx]  # where the S_xx entries sit in the released layout
        if self.centred is None:
            self.centred = self.choose_centred()

    def choose_centred(self) -> bool:
        """Centred latent when the release noise is small beside the spread of the residual sum of squares that
        Z implies (sd sqrt(2 (N - p)) sigma^2 with sigma^2 = R(Z) / (N - p)): then s is pinned near Z and the
        centred form mixes; otherwise the non-centred form (no spike at sigma -> 0). A function of Z only."""
        m = self._template.copy()
        m[self._iu] = self.valid_statistics()
        m[self._iu[1], self._iu[0]] = m[self._iu]
        p = self.p
        t = m[:p, p]
        rss = float(m[p, p] - t @ np.linalg.solve(m[:p, :p], t))
        spread = math.sqrt(2.0 * self.df) * rss / self.df
        return self.largest_noise_sd < 0.05 * spread

    def split(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return u[: self.dim], u[self.dim:]

    def loglik_given_stats(self, theta: np.ndarray, stats: np.ndarray) -> float:
        """log p(T, R | S_xx, theta) for true statistics ``stats`` (released layout); -inf outside the support."""
        a, b, sigma = self.coefficients(theta)
        if not (math.isfinite(sigma) and sigma > 0.0) or not math.isfinite(a) or not np.all(np.isfinite(b)):
            return -math.inf
        m = self._template.copy()
        m[self._iu] = stats
        m[self._iu[1], self._iu[0]] = stats
        p = self.p
        sxx, t, yy = m[:p, :p], m[:p, p], m[p, p]
        try:
            chol = np.linalg.cholesky(sxx)
        except np.linalg.LinAlgError:
            return -math.inf
        c = np.concatenate([[a + float(np.dot(b, self.x_centre)) - self.y_centre], np.asarray(b, dtype=float)])
        both = np.linalg.solve(chol, np.column_stack([t - sxx @ c, t]))
        resid, proj = both[:, 0], both[:, 1]
        rss = yy - float(proj @ proj)
        if not rss > 0.0:
            return -math.inf
        log_sigma = math.log(sigma)
        inv_var = 1.0 / (sigma * sigma)
        log_t = -p * log_sigma - float(np.sum(np.log(np.diag(chol)))) - 0.5 * float(resid @ resid) * inv_var
        log_r = (self.log_chi_const + (self.df / 2.0 - 1.0) * math.log(rss) - 0.5 * rss * inv_var
                 - self.df * log_sigma)
        return log_t + log_r

    def statistics(self, theta: np.ndarray, latent: np.ndarray) -> np.ndarray | None:
        """The true statistics s (released layout) implied by theta and the latent (S_xx entries, u, log q):
        T = S_xx c + sigma L u (L L^T = S_xx), R = sigma^2 q, yy = R + T^T S_xx^-1 T; None outside the support."""
        a, b, sigma = self.coefficients(theta)
        if not (math.isfinite(sigma) and sigma > 0.0) or not math.isfinite(a) or not np.all(np.isfinite(b)):
            return None
        p, k = self.p, self.n_sxx
        sxx = self._sxx_template.copy()
        sxx[self._sxx_iu] = latent[:k]
        sxx[self._sxx_iu[1], self._sxx_iu[0]] = latent[:k]
        try:
            chol = np.linalg.cholesky(sxx)
        except np.linalg.LinAlgError:
            return None
        u, log_q = latent[k:k + p], latent[k + p]
        if log_q > 700.0:
            return None
        c = np.concatenate([[a + float(np.dot(b, self.x_centre)) - self.y_centre], np.asarray(b, dtype=float)])
        t = sxx @ c + sigma * (chol @ u)
        white = chol.T @ c + sigma * u  # L^-1 T = L^T c + sigma u
        yy = sigma * sigma * math.exp(log_q) + float(white @ white)
        return np.concatenate([latent[:k], t, [yy]])[self._order]

    def __call__(self, u: np.ndarray) -> float:
        """The joint log density: with ``centred`` the latent is s itself, else (S_xx entries, u ~ N(0, I), log q
        with q ~ chi^2(N - p)), the non-centred form that has no spike at sigma -> 0 when the noise is large."""
        u = np.asarray(u, dtype=float)
        theta, latent = u[: self.dim], u[self.dim:]
        lp0 = float(self.log_prior(theta))
        if not math.isfinite(lp0):
            return -math.inf
        if self.design_prior is not None:
            lp0 += self._design_log_prior(latent[: self.n_sxx] if not self.centred else
                                          latent[self._sxx_pos])
            if not math.isfinite(lp0):
                return -math.inf
        if self.centred:
            ll = self.loglik_given_stats(theta, latent)
            if not math.isfinite(ll):
                return -math.inf
            diff = (self.released - latent) / self.entry_sds
            return lp0 + ll - 0.5 * float(diff @ diff)
        stats = self.statistics(theta, latent)
        if stats is None or not np.all(np.isfinite(stats)):
            return -math.inf
        k, p = self.n_sxx, self.p
        z, log_q = latent[k:k + p], latent[k + p]
        log_chi = self.log_chi_const + (self.df / 2.0) * log_q - 0.5 * math.exp(log_q)  # density of log q
        diff = (self.released - stats) / self.entry_sds
        return lp0 - 0.5 * float(z @ z) + log_chi - 0.5 * float(diff @ diff)

    def _design_log_prior(self, entries: np.ndarray) -> float:
        """The design prior at the S_xx entries (upper triangle without the constant, row-major)."""
        assert self.design_prior is not None
        sxx = self._sxx_template.copy()
        sxx[self._sxx_iu] = entries
        sxx[self._sxx_iu[1], self._sxx_iu[0]] = entries
        return float(self.design_prior(sxx))

    def valid_statistics(self) -> np.ndarray:
        """Z moved inside the support (S_xx positive definite with S_xx[0, 0] = N, R > 0): a start for the
        optimiser (post-processing of Z)."""
        m = self._template.copy()
        m[self._iu] = self.released
        m[self._iu[1], self._iu[0]] = self.released
        p = self.p
        floor = max(self.largest_noise_sd, 1e-6 * self.n_rows)
        sxx = m[:p, :p]
        for _ in range(2):  # PD projection, then the constant back to N (repeat once)
            vals, vecs = np.linalg.eigh(sxx)
            sxx = (vecs * np.maximum(vals, floor)) @ vecs.T
            sxx[0, 0] = self.n_rows
        if np.linalg.eigvalsh(sxx).min() <= 0:
            sxx = np.diag(np.diag(sxx).clip(min=floor))
            sxx[0, 0] = self.n_rows
        m[:p, :p] = sxx
        t = m[:p, p]
        explained = float(t @ np.linalg.solve(sxx, t))
        m[p, p] = max(m[p, p], explained + max(self.largest_noise_sd, 1e-3 * self.df))
        return m[self._iu]

    def initial_latent(self) -> np.ndarray:
        """A latent start from Z (post-processing): S_xx projected to positive definite, u = 0, q = N - p."""
        stats = self.valid_statistics()
        if self.centred:
            return stats
        m = self._template.copy()
        m[self._iu] = stats
        m[self._iu[1], self._iu[0]] = stats
        return np.concatenate([m[:self.p, :self.p][self._sxx_iu], np.zeros(self.p), [math.log(self.df)]])


def _maximise(f: Callable[[np.ndarray], float], x0: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """argmax f from x0, in coordinates scaled by ``scale`` (non-finite values are walls)."""
    def neg(z: np.ndarray) -> float:
        value = f(x0 + scale * z)
        return -value if math.isfinite(value) else 1e300

    best = np.zeros_like(x0)
    for method, options in (("BFGS", {"maxiter": 2000}), ("L-BFGS-B", {"maxiter": 2000})):
        res = optimize.minimize(neg, best, method=method, options=options)
        if neg(res.x) <= neg(best):
            best = res.x
    return x0 + scale * best


def _hessian_covariance(f: Callable[[np.ndarray], float], x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Minus the inverse Hessian of f at x by central differences (steps 0.1 of a per-coordinate scale found
    from the diagonal first), projected to a positive definite matrix."""
    f0 = f(x)
    d = x.size
    h = 1e-3 * scale.copy()
    sd = scale.copy()
    for i in range(d):  # the diagonal curvature sets the steps
        e = np.zeros(d)
        e[i] = h[i]
        second = (f(x + e) - 2 * f0 + f(x - e)) / h[i] ** 2
        if math.isfinite(second) and second < 0:
            sd[i] = 1.0 / math.sqrt(-second)
    h = 0.1 * sd
    hess = np.zeros((d, d))
    for i in range(d):
        ei = np.zeros(d)
        ei[i] = h[i]
        hess[i, i] = (f(x + ei) - 2 * f0 + f(x - ei)) / h[i] ** 2
        for j in range(i):
            ej = np.zeros(d)
            ej[j] = h[j]
            v = (f(x + ei + ej) - f(x + ei - ej) - f(x - ei + ej) + f(x - ei - ej)) / (4 * h[i] * h[j])
            hess[i, j] = hess[j, i] = v
    if not np.all(np.isfinite(hess)):
        return np.diag(sd**2)
    # correlation form for conditioning, then PD projection
    scaled = -hess * np.outer(sd, sd)
    vals, vecs = np.linalg.eigh((scaled + scaled.T) / 2)
    vals = np.maximum(vals, 1e-3 * max(float(vals.max()), 1e-12))
    cov_scaled = (vecs / vals) @ vecs.T
    return cov_scaled * np.outer(sd, sd)


@dataclasses.dataclass(frozen=True)
class SSPChains:
    """Draws of theta (chains, iter_sampling, dim), warmup draws, acceptance per draw and the final step scale."""

    draws: np.ndarray
    warmup: np.ndarray
    accepted: np.ndarray
    warmup_accepted: np.ndarray
    scale: np.ndarray
    mode: np.ndarray


def sample_ssp_posterior(target: SSPTarget, *, chains: int, iter_warmup: int, iter_sampling: int,
                         rng: np.random.Generator, theta_start: np.ndarray | None = None,
                         start_spread: float = 2.0, thin: int = 1) -> SSPChains:
    """Chains of adaptive random-walk Metropolis on the joint target (module doc). ``theta_start``: a public,
    data-free start of the optimiser (default zeros on the unconstrained scale). Chains start overdispersed
    (radius about ``start_spread`` Laplace sds) around the joint mode; warmup adapts the step scale (towards acceptance 0.25)
    and, at a quarter, half and three quarters of it, the proposal covariance from the chains' pooled draws.
    ``thin``: keep every thin-th sampling iteration (iter_sampling draws kept, thin * iter_sampling run)."""
    d, m = target.dim, target.n_latent
    theta0 = np.zeros(d) if theta_start is None else np.asarray(theta_start, dtype=float)
    stats0 = target.initial_latent()
    if not math.isfinite(target(np.concatenate([theta0, stats0]))):
        raise FloatingPointError("dp-ssp: the posterior is not finite at the data-free start (zeros on the "
                                 "unconstrained scale); check the program's prior")
    # theta given the (projected) released statistics, then the joint mode
    theta_mode = _maximise(lambda th: target(np.concatenate([th, stats0])), theta0, np.ones(d))
    x0 = np.concatenate([theta_mode, stats0])
    if target.centred:
        scale = np.concatenate([np.full(d, 0.1), target.entry_sds])
    else:
        scale = np.concatenate([np.full(d, 0.1), target.entry_sds[target._sxx_pos], np.ones(target.p),
                                [1.0 / math.sqrt(target.df)]])
    mode = _maximise(target, x0, scale)
    cov = _hessian_covariance(target, mode, scale)
    dim = d + m
    chol = np.linalg.cholesky(cov)

    state = np.empty((chains, dim))
    logp = np.empty(chains)
    for c in range(chains):
        for attempt in range(50):
            shrink = start_spread * 0.7 ** attempt * min(1.0, 2.0 / math.sqrt(dim))  # radius ~ 2 spread sds
            proposal = mode + shrink * chol @ rng.standard_normal(dim)
            value = target(proposal)
            if math.isfinite(value):
                break
        else:
            proposal, value = mode.copy(), target(mode)
        state[c], logp[c] = proposal, value

    thin = max(int(thin), 1)
    total = iter_warmup + thin * iter_sampling
    out = np.empty((chains, total, d))
    acc = np.zeros((chains, total), dtype=bool)
    log_step = np.full(chains, math.log(2.38 / math.sqrt(dim)))
    history = np.empty((chains, total, dim))
    windows = [iter_warmup * k // 4 for k in (1, 2, 3)] if iter_warmup >= 200 else []
    last = 0
    # independence proposals: a multivariate t (df 5) around the mode with the Laplace covariance, refined with
    # the random-walk proposal at each window; alternated with random-walk steps (both keep the target)
    centre, ind_chol = mode.copy(), 1.2 * chol
    df_t = 5.0

    def log_q(x: np.ndarray) -> float:
        w = np.linalg.solve(ind_chol, x - centre)
        return -0.5 * (df_t + dim) * math.log1p(float(w @ w) / df_t)

    def draw_q() -> np.ndarray:
        g = rng.standard_normal(dim) * math.sqrt(df_t / rng.chisquare(df_t))
        return centre + ind_chol @ g

    logq = np.array([log_q(state[c]) for c in range(chains)])
    for t in range(total):
        if t in windows:  # refine both proposals on the pooled draws of the last window (post-processing)
            pooled = history[:, (last + t) // 2:t, :].reshape(-1, dim)
            emp = np.cov(pooled, rowvar=False)
            emp = emp + 1e-10 * np.diag(np.diag(emp).clip(min=1e-300))
            try:
                chol = np.linalg.cholesky(emp)
                ind_chol = 1.2 * chol
                centre = pooled.mean(axis=0)
                logq = np.array([log_q(state[c]) for c in range(chains)])
                log_step[:] = math.log(2.38 / math.sqrt(dim))
            except np.linalg.LinAlgError:
                pass
            last = t
        independent = t % 2 == 1
        for c in range(chains):
            if independent:
                proposal = draw_q()
                value = target(proposal)
                q_new = log_q(proposal)
                accept = math.isfinite(value) and math.log(rng.uniform()) < value - logp[c] + logq[c] - q_new
                if accept:
                    state[c], logp[c], logq[c] = proposal, value, q_new
            else:
                proposal = state[c] + math.exp(log_step[c]) * (chol @ rng.standard_normal(dim))
                value = target(proposal)
                accept = math.isfinite(value) and math.log(rng.uniform()) < value - logp[c]
                if accept:
                    state[c], logp[c] = proposal, value
                    logq[c] = log_q(proposal)
                if t < iter_warmup:
                    rate = 1.0 if accept else 0.0
                    log_step[c] += (rate - 0.25) / ((t - last) / 2 + 10) ** 0.6
            acc[c, t] = accept
            history[c, t] = state[c]
            out[c, t] = state[c, :d]
    return SSPChains(draws=out[:, iter_warmup + thin - 1::thin], warmup=out[:, :iter_warmup],
                     accepted=acc[:, iter_warmup + thin - 1::thin],
                     warmup_accepted=acc[:, :iter_warmup], scale=np.exp(log_step), mode=mode)
