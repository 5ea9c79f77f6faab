"""``algorithm="auto"``: choose the algorithm and its options from PUBLIC quantities only.

Inputs: the number of rows N and the dimension (public in this package: the accountant uses N too), the
budget (epsilon, delta), the number of chains and WHICH clip bounds the caller gave (``ratio_clip``,
``grad_clip``, ``row_bound``, ``loglik_bounds``; any of them together). Nothing here reads a row, a
log-likelihood or anything computed from the data, so the choice is a function of public inputs and costs no
privacy. ``resolve_auto`` returns the chosen algorithm, the options it uses (the others are dropped) and a one-line
reason, which ``sample_private`` stores in the attrs (``auto_choice``, ``auto_reason``) and prints on stderr.

The rule (evidence: ``benchmarks/bench_utility.py --quick`` and ``benchmarks/bench_high_epsilon.py``, issue 13):

1. DP-SGNHT when ``grad_clip`` is given (whatever else is): in the battery the SG kernels are the only ones
   that reach the posterior from data-free inits at epsilon 10 on N = 10,000 (logistic: max error 0.12 sd vs
   15 sd for penalty MH; Poisson: 0.06 vs 52) and on wells / linear regressions at epsilon 100 (0.2-0.36 sd vs
   5-130 sd); among them the thermostat was best or within Monte Carlo error of the best in most cells and never
   hot (DP-SGLD's sd ratio reached 5.7 on the logistic model at epsilon 100). No warm start: DP-SGNHT from a
   DP-GD warm start (half the budget) was measured on the same quick battery and was better in 8 of 21 cells
   and worse in 13 (better on the logistic cases at epsilon 1, e.g. 4.6 vs 33 sd on logistic-10k; much worse
   on the Gaussian regressions, e.g. earnings 164 vs 26 sd), so it stays an explicit option. The hybrid (OPS
   starts) is not chosen either: on the README logistic model at N = 10,000, epsilon 1 its starts come from a
   posterior tempered to rho ~ 0.01, about 9 posterior sds wide, and it ended 6.5-7.3 sd off;
2. penalty MH when only a per-row log-likelihood bound is given (``ratio_clip``, else ``row_bound``, which
   is a Lipschitz bound per row and therefore a ratio clip that never binds): it needs no gradient bound and is
   accurate once the noise is small (logistic N = 10,000 at epsilon 100: 0.17 sd);
3. only ``loglik_bounds``: no choice; an error explains why. OPS is the algorithm that uses them alone, but
   each released draw costs a share of the budget, so it needs few draws (``iter_sampling`` of 1-10 per chain:
   4 x 1000 draws were 3,313 sd off on the README logistic model at epsilon 1, one per chain 2.9 sd), and
   ``auto`` does not change the run's lengths.
The rule assumes the given bounds rarely clip (as their documentation asks): the SG kernels follow the clipped
gradient field, so heavy clipping widens them a lot (2-d Gaussian, 68% of rows clipped at grad_clip 5,
epsilon 50: DP-SGNHT sd ratio 185 vs penalty MH 1.25). ``stan_dp.advise`` measures the clipping on public data.

Each branch is one entry of ``RULES``; adding an algorithm (or a ``warm_start`` option) is one more entry.
Run lengths left unset are then chosen for the chosen algorithm by ``stan_dp.run.run_lengths`` (public quantities
only, like this choice; recorded in ``run_lengths_reason``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["AutoChoice", "CLIP_OPTIONS", "RULES", "resolve_auto"]

#: the clip-bound options ``auto`` accepts together
CLIP_OPTIONS = ("ratio_clip", "grad_clip", "row_bound", "loglik_bounds")


@dataclass
class AutoChoice:
    """The outcome of ``resolve_auto``: algorithm, its options, and why."""

    algorithm: str
    options: dict[str, Any]
    reason: str
    dropped: list[str] = field(default_factory=list)

    def annotate(self, fit: Any) -> Any:
        """Record the choice in the root attrs of an ArviZ result (``auto_choice``, ``auto_reason``)."""
        fit.attrs["auto_choice"] = self.algorithm
        fit.attrs["auto_reason"] = self.reason
        return fit


@dataclass
class Public:
    """The public quantities a rule may look at."""

    n_rows: int
    dim: int
    epsilon: float
    delta: float
    chains: int
    given: dict[str, Any]


def _penalty(p: Public) -> tuple[str, dict[str, Any], str] | None:
    if "ratio_clip" in p.given:
        return "penalty", {"ratio_clip": p.given["ratio_clip"]}, "ratio_clip given: penalty MH"
    if "row_bound" in p.given:
        return ("penalty", {"ratio_clip": p.given["row_bound"]},
                "row_bound given: penalty MH with ratio_clip = row_bound (a per-row Lipschitz bound never clips)")
    return None


def _sg(p: Public) -> tuple[str, dict[str, Any], str] | None:
    if "grad_clip" in p.given:
        return ("dp-sgnht", {"grad_clip": p.given["grad_clip"]},
                "grad_clip given: DP-SGNHT (gradient-driven, reaches the posterior from data-free inits)")
    return None


#: rules tried in order; the first that returns a choice wins
RULES: list[Callable[[Public], tuple[str, dict[str, Any], str] | None]] = [_sg, _penalty]


def resolve_auto(*, n_rows: int, dim: int, epsilon: float, delta: float, chains: int, options: dict[str, Any],
                 quiet: bool = False) -> AutoChoice:
    """Choose an algorithm and its options from public quantities (see the module docstring).

    options: the options the caller passed with ``algorithm="auto"``; only the clip bounds in ``CLIP_OPTIONS``
        are accepted. Raises ``ValueError`` for other options or when no clip bound is given.
    quiet: False prints one line ``auto: <algorithm> (<reason>)`` on stderr.
    """
    unknown = sorted(k for k in options if k not in CLIP_OPTIONS)
    if unknown:
        raise ValueError(
            f"algorithm='auto' accepts only the clip bounds {', '.join(CLIP_OPTIONS)} as algorithm options; got "
            f"{', '.join(unknown)}. Name an algorithm explicitly to set other options."
        )
    given = {k: v for k, v in options.items() if v is not None}
    if not given:
        raise ValueError(
            "algorithm='auto' needs at least one public clip bound: ratio_clip or row_bound (a per-row "
            "log-likelihood bound per unit move), grad_clip (a per-row gradient bound) or loglik_bounds. Set them "
            "from public knowledge of the model, never from the private rows."
        )
    public = Public(int(n_rows), int(dim), float(epsilon), float(delta), int(chains), given)
    for rule in RULES:
        picked = rule(public)
        if picked is not None:
            algorithm, chosen, why = picked
            break
    else:  # only loglik_bounds
        raise ValueError(
            "algorithm='auto' got only loglik_bounds. Give grad_clip (or ratio_clip / row_bound) as well, or run "
            "algorithm='ops' yourself with a few draws per chain (e.g. iter_sampling=5): every OPS draw costs a "
            "share of the budget."
        )
    dropped = sorted(k for k in given if k not in chosen)
    reason = f"{why} (N={public.n_rows}, dim={public.dim}, epsilon={public.epsilon:g}, chains={public.chains})"
    if dropped:
        reason += f"; unused: {', '.join(dropped)}"
    if not quiet:
        print(f"auto: {algorithm} ({reason})", file=sys.stderr)
    return AutoChoice(algorithm, chosen, reason, dropped)
