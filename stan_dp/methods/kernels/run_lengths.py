"""Default run lengths (warmup and sampling iterations per chain) per algorithm, from PUBLIC quantities only.

``choose_run_lengths`` is what ``sample_private`` (and so ``StanDPModel.sample``, the CLI and ``auto``) uses when
the caller leaves ``iter_warmup`` / ``iter_sampling`` as None; explicit values are always honoured. Its inputs
are the algorithm, N, the dimension, the budget (epsilon, delta), the number of chains and the algorithm's
options (grad_clip, sampling_rate, loglik_bounds, ...): the same public quantities the accountant uses. It never
reads a row, so the choice costs no privacy. The reason is stored in the attrs (``run_lengths_reason``).

Rules (T = iter_warmup + iter_sampling per chain, split half and half unless said otherwise):

* SG kernels (dp-sgld, dp-sghmc, dp-sgnht; also the kernel after a warm start or inside "hybrid", with the
  kernel's share of epsilon). With ``free_steps=True`` the preconditioner is capped at
  m_cap = C q^2 / (2 tau_g^2 L^2 h), and tau_g ~ q sqrt(chains T) / mu_g (mu_g: the Gaussian-DP mu of the
  whole budget; the CLT form of the subsampled Gaussian composition, within 10 % of the calibrated noise,
  ``tests/methods/test_run_lengths.py``). The cap stops binding at the public start metric d / (N L^2) when
  T <= T* = C mu_g^2 N / (2 chains h d); with the kernel's minibatch step h = 2 rho C q / (1 - q) (SGLD:
  eta = 4 rho q / (1 - q), C = 1) this is T* = mu_g^2 N (1 - q) / (4 rho q chains d) for every SG kernel
  (with the kernel's cap of the step at 1, e.g. q = 1: T* = C mu_g^2 N / (2 chains d), SGLD
  mu_g^2 N / (chains d)). Beyond T* every extra iteration shrinks the absolute step so that
  the total Langevin time a chain travels stays ~ mu_g^2 / (chains L^2): compute without accuracy. Below T*
  the chain travels less than the budget allows. Rule: T = clamp(T*, MIN_TOTAL, SG_MAX). d / (N L^2) is a
  lower bound on the posterior variance (row gradients are usually well below L), so T* is an upper bound on
  the length where the cap starts to bind; the measurements below show the cap binding earlier at epsilon 10
  on N <= 10,000 (more iterations helped only a little) and not at epsilon 100 on N = 10,000 (R-hat fell from
  1.05 to 1.01-1.02). Compute: T iterations of q N = 30 sqrt(N) rows each per chain (SG_MAX = 10,000 at
  N = 10,000: about 25-30 s for 4 chains on the NumPy models here, vs 4-7 s for 1000 + 1000).
* penalty MH and DP-HMC: the total diffusion over the run is budget-limited whatever T to first order (the
  noise per iteration grows like sqrt(T), the adapted step shrinks with it), but longer runs measured a
  shorter transient from data-free inits (a lot for DP-HMC), and T = 400 was the worst in almost every cell.
  Rule: T = clamp(LONG_RUN_ROWS / N, LONG_RUN_TOTAL): 8000 per chain up to N = 10,000, 2000 from N = 40,000
  on. Compute at N = 10,000 for 4 chains, measured here: penalty MH about 5-8 s (2 s for 1000 + 1000), DP-HMC
  (L = 10) 60-170 s (15-35 s for 1000 + 1000).
* DP-Fast MH: its length measured no effect (every cell 38-234 sd off whatever T); 1000 + 1000 (ACCEPT_TEST).
* OPS: every released draw costs a share of the budget and widens every draw (rho = epsilon_draw / (2 Delta)
  halves when the number of draws doubles under basic composition; sd ratio ~ 1 / sqrt(rho)), while the mean
  of the released draws gets no closer (its variance ~ 1 / (rho k) stays put). The rule releases OPS_DRAWS
  draw per chain, more only while every draw stays untempered (rho = 1: epsilon_draw >= 2 (b - a)), up to
  OPS_MAX_DRAWS; its ``iter_warmup`` runs inside the mechanism (no budget) and stays OPS_WARMUP.
* any other kernel: the CmdStan default 1000 + 1000.
Chains stay 4 (not measured here).

Evidence (``benchmarks/bench_run_lengths.py``, 4 chains, delta 1e-5, seed 1; max |mean error| in reference
sds / R-hat at T = 400 / 2000 (the old default) / 8000 / the rule's T):

* DP-SGNHT, epsilon 1 (T* < 400 on all four cases): logistic-10k 36.7 / 36.7 / 36.1 sd, poisson-10k
  209.9 / 209.6 / 209.5, wells 16.5 / 16.4 / 16.3, kidiq 16.0 / 15.9 / 16.0: the length buys nothing, the
  rule's 200 + 200 is the cheapest (logistic-10k 2 s vs 4 s for 1000 + 1000).
* DP-SGNHT, epsilon 10: logistic-10k 0.37 / 0.15 / 0.34 / 0.36 sd, R-hat 1.29 / 1.39 / 1.18 / 1.22 (rule
  10,000); poisson-10k 1.56 / 0.51 / 0.30 / 0.28 sd, R-hat 3.48 / 2.53 / 2.55 / 2.25 (rule 10,000); wells
  6.0 / 5.35 / 5.29 / 5.42 sd (rule 1256); kidiq 14.8 / 14.1 / 14.4 (rule 400).
* DP-SGNHT, epsilon 100: logistic-10k 0.08 / 0.09 / 0.06 / 0.07 sd, R-hat 1.06 / 1.05 / 1.01 / 1.02;
  poisson-10k 0.15 / 0.07 / 0.06 / 0.05, R-hat 1.04 / 1.05 / 1.01 / 1.01; wells 0.42 / 0.31 / 0.40 / 0.50,
  R-hat 2.76 / 1.66 / 1.72 / 2.05 (N = 3,020: no gain from length); kidiq (N = 434, q = 1) 4.5 / 1.10 / 1.74,
  rule 2017: 1.09.
* DP-SGNHT, seed 2, old / 8000 / rule (max error sd, R-hat): logistic-10k epsilon 10 0.29 / 0.28 / 0.21,
  1.36 / 1.17 / 1.32; poisson-10k epsilon 10 1.65 / 1.10 / 1.29, 2.09 / 1.69 / 1.56; epsilon 100
  0.07 / 0.06 / 0.07, 1.03 / 1.02 / 1.01; wells epsilon 100 0.23 / 0.21 / 0.19, 1.58 / 1.45 / 1.49; wells
  epsilon 10 (rule 1256) 5.59 / 5.35 / 5.67. Over both seeds the rule's R-hat was at or below the old
  default's in 8 of the 9 cells at epsilon >= 10 where it runs longer (the exception: wells epsilon 100,
  seed 1), at 3-6 times the compute.
* penalty MH, T = 400 / 2000 / 8000: logistic-10k epsilon 10 22.9 / 15.3 / 12.8 sd, epsilon 100
  0.21 / 0.12 / 0.10 (R-hat 1.26 / 1.15 / 1.16); poisson-10k epsilon 10 139.7 / 123.5 / 102.2, epsilon 100
  0.66 / 0.13 / 0.27 (R-hat 1.96 / 1.29 / 1.16); wells epsilon 10 14.7 / 14.1 / 13.7, epsilon 100
  5.45 / 4.66 / 4.25; kidiq epsilon 100 12.8 / 13.5 / 12.6; at epsilon 1 equal within 1 %.
* DP-HMC, T = 400 / 2000 / 8000: logistic-10k epsilon 10 42.9 / 41.4 / 38.9 sd, epsilon 100
  21.9 / 7.84 / 1.75 (R-hat 4.17 / 3.72 / 2.00); poisson-10k epsilon 10 226.8 / 219.2 / 211.4, epsilon 100
  184.1 / 122.1 / 50.3. DP-Fast MH: logistic-10k epsilon 10 47.1 / 47.1 / 47.2, epsilon 100
  38.6 / 41.7 / 45.5; poisson-10k epsilon 10 233.5 / 233.9 / 234.2.
* OPS on logistic-10k, ``loglik_bounds = (-10, 0)``, sd ratio at 1 / 2 / 5 / 25 draws per chain: epsilon 1
  6.8 / 12.6 / 16.7 / 35.4 (seed 2: 6.3 / 13.8 / 19.0 for 1 / 2 / 5), epsilon 10 2.4 / 3.2 / 7.1 / 10.2,
  epsilon 100 0.79 / 1.06 / 1.96 / 4.21 (the 1 / sqrt(rho) growth); max error 8.3 / 2.9 / 11.1 / 16.0
  (seed 2: 6.6 / 8.5 / 6.1), 2.4 / 2.0 / 2.0 / 3.8 and 0.92 / 1.26 / 0.74 / 0.60 sd: no consistent gain in
  the mean to pay for the wider draws.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ...privacy import gaussian_mu
from ...samplers import ALGORITHMS
from ...samplers.ops import ops_temperature
from ...phases.calibration import calibrate

__all__ = ["RunLengths", "choose_run_lengths", "fill_run_lengths", "SG_ALGORITHMS", "ACCEPT_TEST_ALGORITHMS"]

SG_ALGORITHMS = ("dp-sgld", "dp-sghmc", "dp-sgnht")
ACCEPT_TEST_ALGORITHMS = ("penalty", "dp-hmc", "dp-fast-mh", "dp-fast-mh-full")
#: kernels whose every released draw is one exact-sampling mechanism (OPS)
ONE_DRAW_ALGORITHMS = ("ops",)
#: smallest total per chain for any rule (200 warmup + 200 sampling: enough for split R-hat and a metric window)
MIN_TOTAL = 400
#: largest total per chain of the SG rule
SG_MAX = 10_000
#: penalty MH and DP-HMC: iterations x N per chain the rule may spend, and the (min, max) total per chain
LONG_RUN_ROWS = 80_000_000
LONG_RUN_TOTAL = (2000, 8000)
LONG_RUN_ALGORITHMS = ("penalty", "dp-hmc")
#: DP-Fast MH (its length measured no effect): (warmup, sampling)
ACCEPT_TEST = (1000, 1000)
#: OPS: internal warmup, default draws per chain and the most draws per chain
OPS_WARMUP = 1000
OPS_DRAWS = 1
OPS_MAX_DRAWS = 100
DEFAULT = (1000, 1000)
#: SG kernels in an anchored run (they start near the posterior and run on the small clip C): at least this total
ANCHORED_MIN_TOTAL = 2000


@dataclass(frozen=True)
class RunLengths:
    """Chosen lengths per chain and a one-line reason in plain words, with the rule's numbers after it in
    parentheses ("(details: ...)"; ``plain`` is the reason without them, what stderr shows); ``break_even``: the SG
    rule's T*, the length beyond which the budget caps how far a chain travels (None for the other rules)."""

    iter_warmup: int
    iter_sampling: int
    reason: str
    break_even: float | None = None
    plain: str = ""

    def __post_init__(self) -> None:
        if not self.plain:
            object.__setattr__(self, "plain", self.reason)


def _split(total: int) -> tuple[int, int]:
    warmup = total // 2
    return warmup, total - warmup


def _sg(algorithm: str, n_rows: int, dim: int, epsilon: float, delta: float, chains: int,
        options: dict[str, Any], clip_ratio: float = 1.0) -> RunLengths:
    kernel_cls: Any = ALGORITHMS[algorithm]  # an SG-MCMC kernel class: its minibatch rules are read below
    spec = kernel_cls.option_spec
    opts = spec.validate({k: v for k, v in options.items() if k in spec.names}, require=False)
    q = kernel_cls._sampling(opts, n_rows)["sampling_rate"]  # the kernel's own minibatch rule
    step = kernel_cls.minibatch_step(q, opts, clip_ratio=clip_ratio, dim=dim)  # its own default step (z units)
    friction_name = kernel_cls.friction_option
    c = float(opts[friction_name]) if friction_name else None
    # free-step cap on m: SGLD mu_g^2 / (chains T L^2 eta), momentum kernels C mu_g^2 / (2 chains T L^2 h);
    # it equals the start metric d / (N L^2) at T*
    mu_g = gaussian_mu(epsilon, delta)  # the budget's Gaussian-DP mu
    scale = 1.0 if c is None else c / 2.0
    # an anchored run's cap uses C (clip_ratio = (L / C)^2 larger) while the start metric keeps L's scale
    t_star = clip_ratio * scale * mu_g ** 2 * n_rows / (chains * max(dim, 1) * step)
    floor = ANCHORED_MIN_TOTAL if clip_ratio > 1.0 else MIN_TOTAL
    total = int(min(max(t_star, floor), SG_MAX))
    shortest = "the shortest run the rule makes for an anchored chain" if clip_ratio > 1.0 else \
        "the shortest run the rule makes"
    if not opts.get("free_steps", True):
        total = sum(DEFAULT)
        why = "CmdStan's default: with free_steps=False the budget does not cap the step"
    elif t_star >= SG_MAX:
        why = (f"the longest run the rule makes; at this budget a chain would still travel further with more "
               f"iterations, up to about {t_star:,.0f}")
    elif t_star <= floor:
        why = (f"{shortest}, enough for R-hat and the adaptation windows; beyond about {max(t_star, 1.0):,.0f} "
               "iterations the privacy noise caps how far a chain travels, so a longer run would only cost time")
    else:
        why = ("about the length beyond which the privacy noise caps how far a chain travels, so that more "
               "iterations would only cost time")
    warmup, sampling = _split(total)
    plain = f"{algorithm}: {warmup} + {sampling} iterations per chain, {why}"
    anchored = f", anchored: (L / C)^2 = {clip_ratio:.3g}" if clip_ratio > 1.0 else ""
    details = (f"details: break-even length T* = {t_star:.3g}, minibatch rate q = {q:.3g}, Gaussian-DP mu of the "
               f"budget {mu_g:.3g}{anchored}")
    return RunLengths(warmup, sampling, f"{plain} ({details})", break_even=float(t_star), plain=plain)


def _ops(n_rows: int, dim: int, epsilon: float, delta: float, chains: int, options: dict[str, Any]) -> RunLengths:
    bounds = options.get("loglik_bounds")
    draws = OPS_DRAWS
    why = f"{OPS_DRAWS} released draw(s) per chain: each more draw widens every draw"
    if bounds is not None:
        bounds = (float(bounds[0]), float(bounds[1]))

        def untempered(s: int) -> bool:
            plan = calibrate("ops", epsilon=epsilon, delta=delta, chains=chains, iterations=s, n_rows=n_rows)
            return ops_temperature(plan.parameters["epsilon_draw"], bounds) >= 1.0

        if untempered(draws):
            lo, hi = draws, OPS_MAX_DRAWS
            if untempered(hi):
                lo = hi
            while hi - lo > 1:  # largest s with rho = 1 (epsilon_draw decreases in s)
                mid = (lo + hi) // 2
                lo, hi = (mid, hi) if untempered(mid) else (lo, mid)
            draws = lo
            why = f"{draws} draws per chain keep every draw untempered (rho = 1)"
    return RunLengths(OPS_WARMUP, draws, f"ops: {OPS_WARMUP} internal warmup + {draws} ({why})")


def choose_run_lengths(algorithm: str, *, n_rows: int, dim: int, epsilon: float, delta: float, chains: int,
                       options: dict[str, Any] | None = None, quiet: bool = True,
                       clip_ratio: float = 1.0) -> RunLengths:
    """Default ``(iter_warmup, iter_sampling)`` per chain for ``algorithm`` (a kernel name in
    ``stan_dp.samplers.ALGORITHMS``) and a reason, from public quantities only (see the module docstring).

    options: the algorithm's options as the caller gave them (only public settings such as grad_clip,
        sampling_rate, batch_size, loglik_bounds are read). Raises ``ValueError`` for a non-positive N, dim or
        chains.
    clip_ratio: (L / C)^2 of an anchored run (``stan_dp.phases.anchor``; 1: not anchored): the SG kernels' privacy
        cap scales with C while their start metric keeps L's scale, so T* grows by that factor, floored at
        ANCHORED_MIN_TOTAL.
    quiet: False prints one line ``run lengths: <reason>`` on stderr.
    """
    for name, value in (("n_rows", n_rows), ("dim", dim), ("chains", chains)):
        if int(value) < 1:
            raise ValueError(f"choose_run_lengths: {name} must be at least 1, got {value!r}.")
    n_rows, dim, chains = int(n_rows), int(dim), int(chains)
    options = dict(options or {})
    if algorithm in SG_ALGORITHMS:
        chosen = _sg(algorithm, n_rows, dim, float(epsilon), float(delta), chains, options, float(clip_ratio))
    elif algorithm in ONE_DRAW_ALGORITHMS:
        chosen = _ops(n_rows, dim, float(epsilon), float(delta), chains, options)
    elif algorithm in LONG_RUN_ALGORITHMS:
        total = int(min(max(LONG_RUN_ROWS // n_rows, LONG_RUN_TOTAL[0]), LONG_RUN_TOTAL[1]))
        w, s = _split(total)
        chosen = RunLengths(w, s, f"{algorithm}: {w}+{s} (longer runs shorten the transient from data-free "
                                  f"inits; at most {LONG_RUN_ROWS:.0e} / N iterations per chain, N={n_rows})")
    elif algorithm in ACCEPT_TEST_ALGORITHMS:
        w, s = ACCEPT_TEST
        chosen = RunLengths(w, s, f"{algorithm}: {w}+{s} (the budget limits its total diffusion whatever T)")
    else:
        w, s = DEFAULT
        chosen = RunLengths(w, s, f"{algorithm}: {w}+{s} (CmdStan's default; no rule for this kernel)")
    if not quiet:
        print(f"run lengths: {chosen.plain}", file=sys.stderr)
    return chosen


def fill_run_lengths(algorithm: str, iter_warmup: int | None, iter_sampling: int | None, *, quiet: bool = True,
                     **public: Any) -> RunLengths:
    """``choose_run_lengths`` for the lengths the caller left as None; a given value is kept and named in the
    reason. ``public``: the keyword arguments of ``choose_run_lengths`` (n_rows, dim, epsilon, delta, chains,
    options)."""
    rule = choose_run_lengths(algorithm, quiet=True, **public)
    warmup = rule.iter_warmup if iter_warmup is None else int(iter_warmup)
    sampling = rule.iter_sampling if iter_sampling is None else int(iter_sampling)
    given = [f"{name}={value} given" for name, value in (("iter_warmup", iter_warmup),
                                                          ("iter_sampling", iter_sampling)) if value is not None]
    tail = f"; {', '.join(given)}" if given else ""
    if not quiet:
        print(f"run lengths: {rule.plain}{tail}", file=sys.stderr)
    return RunLengths(warmup, sampling, rule.reason + tail, rule.break_even, rule.plain + tail)
