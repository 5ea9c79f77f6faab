"""``algorithm="auto"``: choose the algorithm and its options from PUBLIC quantities only.

Inputs: the number of rows N and the dimension (public in this package: the accountant uses N too), the
budget (epsilon, delta), the number of chains and WHICH clip bounds the caller gave (``ratio_clip``,
``grad_clip``, ``row_bound``, ``loglik_bounds``; any of them together). Nothing here reads a row, a
log-likelihood or anything computed from the data, so the choice is a function of public inputs and costs no
privacy. ``resolve_auto`` returns the chosen algorithm, the options it uses (the others are dropped), the reason in
one plain sentence, which ``sample_private`` stores in ``attrs["auto_reason"]`` (``stan-dp summary`` prints it)
while stderr gets a short line (what runs, with which bound, and where the reason is), and the evidence behind the
rule with the public inputs (``attrs["auto_evidence"]``). Without any clip bound ``auto``
refuses to run, naming the option to give (``grad_clip``) and how to choose it (``NO_BOUND_ERROR``).

The rule (evidence: ``benchmarks/bench_utility.py --quick`` and ``benchmarks/bench_high_epsilon.py``):

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
With ``grad_clip`` given, the pick runs anchored (``anchor='dp-gd'``, ``stan_dp.phases.anchor``): a
private DP-GD anchor and one noisy clipped gradient G~ there, then the kernel's per-row sensitivity relative to the
anchor, so that the budget buys information instead of travel from data-free inits (logistic, N = 10,000,
epsilon 1: 1.5 reference sds with chain R-hat 1.07 instead of 13 sds; ``benchmarks/bench_utility.py --tag
anchored``). The default anchor-relative clip C assumes a per-row curvature bound L^2 / 4 (exact for a logistic
row with ||(1, x)|| <= L); the reason says so unless ``curvature_clip`` or ``diff_clip`` is given, and
``anchor='none'`` keeps the plain kernel. The penalty rule stays unanchored (anchored penalty MH at epsilon 1 did
not converge: R-hat 1.78 on the same case).
``dp-laplace`` (``stan_dp.methods.dp_laplace.laplace``) is considered whenever ``grad_clip`` is given and NOT chosen,
for any public input. The public quantity that would mark where it is ahead is the ratio of its Fisher release's
noise floor to the public curvature scale, r = 2 sqrt(d) sigma_F / (N K) with K = L^2 / 4 (the assumption of the
anchor's C rule), i.e. r = 16 sqrt(d) tau_F / N: a function of N, d and the budget only (L cancels). (The table
below was measured when sigma_F was 2 tau_F L^2; F~'s sensitivity is sqrt(2) L^2, so its noise is now sqrt(2) tau_F
L^2 and every r a factor sqrt(2) smaller, r = 8 sqrt(2 d) tau_F / N; dp-laplace's errors were not re-measured.) Evidence
(``benchmarks/bench_utility.py --cases ... --algorithms dp-laplace dp-laplace+adaptive auto --epsilons 1 3 10``,
seed 1, 4 chains, defaults; ``benchmarks/results/utility_laplace_vs_auto_*.csv``): max |mean error| in reference
sds (median sd ratio), dp-laplace / dp-laplace with clip='adaptive' / auto (anchored DP-SGNHT):

    case (N, d)            eps  r        dp-laplace   +adaptive    auto
    logistic (10,000, 4)   1    0.020    1.4 (1.9)    -            1.5 (1.8)
                           3    0.0075   1.4 (1.4)    -            0.60 (1.1)
                           10   0.0027   0.41 (1.0)   -            0.23 (1.0)
    logistic (100,000, 4)  1    0.0023   1.1 (1.2)    -            0.57 (1.1)
                           3    0.00084  0.46 (1.0)   -            0.23 (1.0)
                           10   0.00029  0.17 (1.0)   -            0.14 (0.98)
    Poisson (10,000, 3)    1    0.018    7.1 (1.6)    -            1.8 (1.9)
                           3    0.0065   1.4 (1.4)    -            0.69 (1.2)
    Gaussian (100,000, 10) 1    0.0036   1.4 (1.3)    -            0.73 (1.1)
                           3    0.0013   0.48 (1.1)   -            0.30 (1.0)
    wells (3,020, 5)       1    0.075    14 (0.27)    3.8 (1.2)    12 (9.3)
                           3    0.028    7.5 (0.34)   3.5 (1.6)    6.2 (3.9)
                           10   0.010    7.1 (0.46)   3.9 (1.3)    1.9 (1.5)
    nes_logit (1,179, 2)   1    0.12     23 (0.40)    3.5 (0.81)   1.8 (62)
                           3    0.045    6.1 (0.41)   0.58 (1.0)   11 (45)
                           10   0.016    1.2 (0.51)   0.68 (1.3)   1.8 (2.6)
    earnings (1,192, 3)    1    0.15     26 (0.49)    17 (7.3)     72 (32)
                           3    0.055    9.8 (0.57)   16 (3.9)     5.4 (4.9)
                           10   0.020    6.0 (0.76)   14 (1.7)     1.1 (1.5)
    kidiq (434, 3)         1    0.40     46 (0.22)    59 (3.7)     270 (4.6)
                           3    0.15     13 (0.26)    16 (7.0)     53 (9.5)
                           10   0.054    12 (0.35)    9.6 (2.0)    5.7 (8.7)

With 10,000 rows or more (r <= 0.02) dp-laplace was behind in every cell, with about twice auto's error (it spends
a third of the budget on the curvature F~, which an anchored chain learns from the rows at no extra cost, and its
G~ gets 35 % of the rho budget against the anchor's 60 %). On the four small real data sets (r 0.01-0.40) the
picture is mixed and no public quantity separates its wins from its losses: with the fixed bound, its smaller
errors (kidiq eps 1 and 3, earnings eps 1, nes_logit eps 10) come with intervals 2-4.5 times too narrow (sd ratio
0.22-0.51: confidently wrong); with clip='adaptive' it was ahead in 7 of 12 cells and behind in 5, and nes_logit
and earnings, of equal N and nearly equal r, went opposite ways at epsilon 3 (0.58 vs 11; 16 vs 5.4). Calibration
(``benchmarks/bench_anchor_coverage.py --rows 1000 --epsilon 3``, 40 simulated logistic data sets;
``benchmarks/results/coverage_small_data.txt``): its noise-aware 90 % intervals covered 0.65 +- 0.04 of the
simulating values (0.68 +- 0.04 with clip='adaptive') where auto's covered 0.93 +- 0.02 (non-private Laplace 0.89); at
N = 10,000, epsilon 1 both cover 0.91. Its draws are closed-form (1-2 s against 3-120 s here), so
``stan_dp.advise`` lists it beside the others whenever ``grad_clip`` is given (public data may show a case it
wins), and ``auto``'s reason names it (``LAPLACE_NOT_CHOSEN``).
The rule assumes the given bounds rarely clip (as their documentation asks): the SG kernels follow the clipped
gradient field, so heavy clipping widens them a lot (2-d Gaussian, 68% of rows clipped at grad_clip 5,
epsilon 50: DP-SGNHT sd ratio 185 vs penalty MH 1.25). ``stan_dp.advise`` measures the clipping on public data.

Bounds from the program (``row_bounds``, ``stan_dp.stan.glm_program``; public: the program text and its declared
sizes): with no clip bound given, a logistic regression whose covariates all declare literal bounds runs with
``grad_clip`` = max ||(1, x)|| over the declared box (exact, as is the default curvature bound L^2 / 4), and the
reason says where it came from (``AutoChoice.bounds_source``); for a recognised Poisson or normal program the
reason says that L^2 / 4 is an assumption there, and a refusal says what to declare or give. When the per-row
curvature bound is public (a logistic program, or a given ``curvature_clip``) the reason ends with the price in
advance (``stan_dp.methods.dp_glm.glm_price``, a lower bound from N, d, L and the budget).

Each branch is one entry of ``RULES``; adding an algorithm is one more entry. A ``warm_start`` the caller asks for
(with its options) is kept for whichever algorithm the rules pick; ``auto`` never adds one.
Run lengths left unset are then chosen for the chosen algorithm by ``stan_dp.methods.kernels.run_lengths`` (public quantities
only, like this choice; recorded in ``run_lengths_reason``).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..samplers.ops import check_loglik_bounds
from ..samplers.options import Option
from ..stan.glm_program import RowBounds
from ..suggest import did_you_mean
from ..methods.method import AutoChoice
from ..phases.anchor import ANCHOR_SPEC, asks_anchor
from ..methods.dp_glm.glm_price import glm_floor
from ..phases.public_scale import public_curvature_bound
from ..phases.warm_start import WARM_START_SPEC, uses_loglik_bounds

__all__ = ["AutoChoice", "CLIP_OPTIONS", "LAPLACE_NOT_CHOSEN", "NO_BOUND_ERROR", "RULES", "check_auto_options",
           "resolve_auto", "short_line"]

#: the clip-bound options ``auto`` accepts together
CLIP_OPTIONS = ("ratio_clip", "grad_clip", "row_bound", "loglik_bounds")


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


#: why ``auto`` does not choose dp-laplace, appended to the reason of a grad_clip choice (module doc: evidence)
LAPLACE_NOT_CHOSEN = ("dp-laplace considered, not chosen: behind the anchored kernel in every battery cell with "
                      ">= 10,000 rows (about twice its error), mixed on small data sets with intervals that "
                      "under-cover (0.65 at N = 1,000, epsilon 3, against 0.93); evidence: the auto page of the documentation "
                      "(docs/algorithms/auto.md); advise runs it on public data")


def _curvature_words(row_bounds: RowBounds | None, k: int = 1) -> str:
    """What the default diff_clip's curvature bound rests on: L^2 / 4 per row, for the program's family when it was
    recognised, or L^2 / (4 k) per unit of at most k rows."""
    if k > 1:
        return (f"; the default diff_clip assumes a per-unit curvature bound of L^2 / (4 k), k = {k} rows per "
                "unit at most, L = k L_row (exact for logistic rows with ||(1, x)|| <= L_row; give "
                "curvature_clip or diff_clip for other likelihoods)")
    if row_bounds is None:
        return ("; the default diff_clip assumes a per-row curvature bound of L^2 / 4 (exact for a logistic row "
                "with ||(1, x)|| <= L; give curvature_clip or diff_clip for other likelihoods)")
    if row_bounds.family == "logistic":
        return "; the default diff_clip's curvature bound L^2 / 4 is exact for this logistic row"
    return (f"; the default diff_clip assumes a per-row curvature bound of L^2 / 4, which this {row_bounds.family} "
            f"program does not guarantee ({row_bounds.note}; or give diff_clip)")


def _anchored(picked: tuple[str, dict[str, Any], str], anchor_options: dict[str, Any],
              rows_per_unit: int | None = None, row_bounds: RowBounds | None = None
              ) -> tuple[str, dict[str, Any], str]:
    """The rule's pick run on anchor-relative rows (``anchor='dp-gd'``, stan_dp.phases.anchor) unless the caller
    said ``anchor='none'``; the evidence says what the default C assumes (per unit of at most ``rows_per_unit``
    rows when that public cap is given; for the program's family when ``row_bounds`` recognised it)."""
    algorithm, chosen, why = picked
    if anchor_options.get("anchor", "dp-gd") in (None, "none"):
        return algorithm, chosen, why + "; not anchored (anchor='none' or a warm start given)"
    chosen = {**chosen, **anchor_options, "anchor": "dp-gd"}
    k = int(rows_per_unit or 1)
    assumed = ("" if anchor_options.get("curvature_clip") is not None or anchor_options.get("diff_clip") is not None
               else _curvature_words(row_bounds, k))
    return (algorithm, chosen, why + ", anchored: a private DP-GD anchor and G~ first, then anchor-relative "
            "sensitivity (measured in benchmarks/bench_utility.py --tag anchored)" + assumed)


#: the longest stderr line of ``auto`` (``auto: ...``, ``AutoChoice.short``): the reason itself when it fits, else
#: what runs with which bound and where the full reason is
SHORT_LINE_MAX = 200
#: where the full reason is, said at the end of the short line
FULL_REASON_AT = "the full reason: fit.attrs['auto_reason'] or `stan-dp summary`"


def short_line(what: str, *bounds: str) -> str:
    """``auto: WHAT (BOUND); the full reason: ...``, at most ``SHORT_LINE_MAX`` characters, with the first of the
    ``bounds`` (ways of saying the bound, longest first) that fits, or none (the full reason keeps them all).
    Public: names of the choice and its public bound."""
    for bound in (*bounds, ""):
        line = f"auto: {what}" + (f" ({bound})" if bound else "") + f"; {FULL_REASON_AT}."
        if len(line) <= SHORT_LINE_MAX:
            return line
    return line[:SHORT_LINE_MAX - 3] + "..."


#: the gradient-based kernels auto may choose, as its reason names them
_GRADIENT_WORDS = {"dp-sgnht": "DP-SGNHT"}


def _short(algorithm: str, chosen: dict[str, Any], given: dict[str, Any], derived: RowBounds | None) -> str:
    """The stderr line of a kernel choice: the algorithm, its start and the bound it runs with, and where it
    came from."""
    what = {"dp-sgnht": "DP-SGNHT", "penalty": "penalty MH"}.get(algorithm, algorithm)
    if asks_anchor(chosen):
        what += " from a private anchor"
    used = next((k for k in ("grad_clip", "ratio_clip", "row_bound") if k in given), None)
    if used is None:
        return short_line(what)
    value = f"{used} = {float(given[used]):.4g}"
    if derived is None:
        return short_line(what, f"{value} as given")
    return short_line(what, f"{value} from {derived.source}", f"{value} derived from the program's declared bounds")


#: how the one-sentence reason names each bound
_BOUND_WORDS = {
    "grad_clip": "a per-row gradient bound",
    "ratio_clip": "a per-row log-likelihood-ratio bound",
    "row_bound": "a per-row bound",
    "loglik_bounds": "log-likelihood bounds",
}

#: the refusal when no bound is given: which option to give, and how to choose it
NO_BOUND_ERROR = (
    "algorithm='auto' needs a public bound on how much one row can move the likelihood, and none was given. "
    "Give grad_clip=L (Python) or --option grad_clip=L (stan-dp sample): L bounds the norm of one row's "
    "log-likelihood gradient for every row that could occur; for a logistic or Poisson regression whose "
    "covariates are scaled so that ||(1, x_i)|| <= R, take L = R (e.g. grad_clip=2.5). Choose it from the model "
    "and the possible range of the data, never from the private rows (ratio_clip=b instead runs penalty MH)."
)
#: added to ``NO_BOUND_ERROR`` when the program's text said nothing (no recognised regression, or no program)
DERIVED_HINT = ("A logistic regression that stan-dp recognises (y ~ bernoulli_logit(alpha + x * beta) or "
                "bernoulli_logit_glm, row by row) needs none when its covariates all declare literal bounds in the "
                "data block: L is derived from them.")

_BOUND_VALUE = Option("bound", "real", None, "a positive bound", low=0.0, low_open=True)


def check_auto_options(options: dict[str, Any], row_bounds: RowBounds | None = None) -> None:
    """Refuse what ``auto`` can never run, from the option names and values alone (no N, no dimension, no row):
    an option ``auto`` does not take (naming the closest valid one), a clip bound that is not a positive number
    (``loglik_bounds``: not a pair a < b), no clip bound at all (``NO_BOUND_ERROR``: which option to give and how
    to choose it), or ``loglik_bounds`` alone. The CLI runs it before compiling, ``DPStanModel.sample`` before
    reading the data. ``row_bounds``: what the program text says (``stan_dp.stan.glm_program.row_bounds``): no
    clip bound is needed when it derives one exactly, and the refusal adds the program's own words otherwise."""
    anchor_names = tuple(k for k in ANCHOR_SPEC.names if k not in CLIP_OPTIONS)
    warm_names = tuple(k for k in WARM_START_SPEC.names if k not in CLIP_OPTIONS)
    accepted = (*CLIP_OPTIONS, *warm_names, *anchor_names)
    unknown = sorted(k for k in options if k not in accepted)
    if unknown:
        raise ValueError(
            f"algorithm='auto' does not take {', '.join(k + did_you_mean(k, accepted) for k in unknown)}: it "
            f"accepts the clip bounds {', '.join(CLIP_OPTIONS)}, the warm-start options ({', '.join(warm_names)}) "
            f"and the anchor options ({', '.join(anchor_names)}). Name an algorithm explicitly to set other options."
        )
    given = {k: v for k, v in options.items() if k in CLIP_OPTIONS and v is not None}
    for key, value in given.items():
        try:
            check_loglik_bounds(value) if key == "loglik_bounds" else _BOUND_VALUE.convert(value)
        except ValueError:
            what = "a pair (a, b) of finite numbers with a < b" if key == "loglik_bounds" else "a finite number > 0"
            raise ValueError(f"option {key!r} of algorithm 'auto' must be {what}, got {value!r}") from None
    if not given:
        if row_bounds is not None and row_bounds.derivable:
            return
        if row_bounds is not None and row_bounds.unit is not None:  # one unit's bound: the unit's words first
            raise ValueError(f"algorithm='auto' with privacy_unit '{row_bounds.unit}' needs a public bound on how much "
                             f"all rows of one {row_bounds.unit} together can move the likelihood, and none was "
                             f"given. This program is a {row_bounds.family} regression: {row_bounds.note}.")
        raise ValueError(f"{NO_BOUND_ERROR} {DERIVED_HINT}" if row_bounds is None else
                         f"{NO_BOUND_ERROR} This program is a {row_bounds.family} regression: {row_bounds.note}.")
    if set(given) == {"loglik_bounds"}:
        raise ValueError(
            "algorithm='auto' got only loglik_bounds. Give grad_clip (or ratio_clip / row_bound) as well, or run "
            "algorithm='ops' yourself with a few draws per chain (e.g. iter_sampling=5): every OPS draw costs a "
            "share of the budget."
        )


def _sentence(algorithm: str, chosen: dict[str, Any], given: dict[str, Any], dropped: list[str],
              warm: dict[str, Any], derived: RowBounds | None = None, assumption: str = "") -> str:
    """The choice in one plain sentence (the evidence goes to ``AutoChoice.evidence``); ``derived``: the bounds
    the program text gave (then the sentence says where grad_clip came from); ``assumption``: what the anchored
    run's default curvature bound assumes for a recognised family that does not guarantee it."""
    used = "grad_clip" if "grad_clip" in given else ("ratio_clip" if "ratio_clip" in given else "row_bound")
    per = "per-row" if derived is None or derived.unit is None else f"per-{derived.unit}"
    because = (f"because the program gives a {per} gradient bound: {derived.reason()}" if derived is not None
               else f"because you gave {_BOUND_WORDS[used]} ({used} = {given[used]:g})")
    gradient = _GRADIENT_WORDS.get(algorithm)
    if gradient is not None:
        how = f"{gradient}, a gradient-based sampler, " + (
            "started from a private anchor near the posterior" if asks_anchor(chosen) else "without an anchor")
    elif used == "row_bound":
        how = "penalty MH with ratio_clip = row_bound"
    else:
        how = "penalty MH (give grad_clip to get the gradient-based DP-SGNHT, usually more accurate)"
    extra = ""
    if asks_anchor(chosen) and assumption:
        extra += f"; {assumption}"
    if warm.get("warm_start") is not None:
        extra += f", with the {warm['warm_start']} warm start you asked for"
    if dropped:
        extra += f"; not used: {', '.join(dropped)}"
    return f"{how}, {because}{extra}."


def _price(public: Public, chosen: dict[str, Any], row_bounds: RowBounds | None, rows_per_unit: int | None = None
           ) -> str:
    """The price in advance (``stan_dp.methods.dp_glm.glm_price``) when a gradient bound is used and the per-row curvature
    bound is public: a logistic program's L^2 / 4 (L^2 / (4 k) for a unit of at most k rows), or a given
    curvature_clip; else ""."""
    if "grad_clip" not in chosen:
        return ""
    curvature = chosen.get("curvature_clip")
    if curvature is None and (row_bounds is None or row_bounds.family != "logistic"):
        return ""
    if curvature is None and rows_per_unit is not None and int(rows_per_unit) > 1:
        curvature = public_curvature_bound(float(chosen["grad_clip"]), rows_per_unit)
    d = row_bounds.coefficients if row_bounds is not None and row_bounds.coefficients else public.dim
    return glm_floor(public.n_rows, d, float(chosen["grad_clip"]), epsilon=public.epsilon, delta=public.delta,
                     curvature_clip=curvature).sentence()


def resolve_auto(*, n_rows: int, dim: int, epsilon: float, delta: float, chains: int, options: dict[str, Any],
                 quiet: bool = False, rows_per_unit: int | None = None,
                 row_bounds: RowBounds | None = None) -> AutoChoice:
    """Choose an algorithm and its options from public quantities (see the module docstring).

    options: the options the caller passed with ``algorithm="auto"``: the clip bounds in ``CLIP_OPTIONS``, the
        anchor options (``ANCHOR_SPEC``; ``anchor='none'`` turns the anchor off) and the warm-start options
        (``warm_start``, ``warm_start_share``, ...; ``stan_dp.phases.warm_start``), which are passed on to the chosen
        algorithm unchanged (``loglik_bounds`` too when ``warm_start="ops"``; a warm start replaces the anchor).
        Raises ``ValueError`` (``check_auto_options``) for other options (naming the closest valid one), a bad
        bound value, or when no clip bound is given (saying which to give and how to choose it).
    quiet: False prints one short line ``auto: <what runs, with which bound>; why ...`` on stderr (at most
        ``SHORT_LINE_MAX`` characters, ``AutoChoice.short``); the full reason is ``AutoChoice.reason``
        (``attrs["auto_reason"]``, printed by ``stan-dp summary``), the evidence behind the rule and the public
        inputs ``AutoChoice.evidence`` (``attrs["auto_evidence"]``).
    rows_per_unit: the public cap k on a privacy unit's rows (``max_rows_per_unit``), or None; it changes only the
        words of what the anchor's default clip assumes (``stan_dp.phases.public_scale``), not the choice.
    row_bounds: what the program text says about its per-row bounds (``stan_dp.stan.glm_program.row_bounds``;
        public). Without a clip bound in ``options``, a derived L (a logistic regression with declared covariate
        bounds) is used as ``grad_clip`` and the reason says so (``AutoChoice.bounds_source``); a given bound is
        always kept. For a recognised family the reason says what the default curvature bound rests on, and for
        a logistic program (or a given ``curvature_clip``) it carries the price in advance
        (``stan_dp.methods.dp_glm.glm_price``).
    """
    check_auto_options(options, row_bounds)
    anchor_names = tuple(k for k in ANCHOR_SPEC.names if k not in CLIP_OPTIONS)
    warm_names = tuple(k for k in WARM_START_SPEC.names if k not in CLIP_OPTIONS)
    given = {k: v for k, v in options.items() if k in CLIP_OPTIONS and v is not None}
    derived = None
    if not given and row_bounds is not None and row_bounds.grad_clip is not None:  # exact, from the program text
        derived = row_bounds
        given = {"grad_clip": row_bounds.grad_clip}
    bounds_source = (derived.source if derived is not None else "grad_clip option" if "grad_clip" in given else "")
    if derived is None and "grad_clip" in given and row_bounds is not None and row_bounds.grad_clip is not None:
        bounds_source += f" (the declared bounds would give {row_bounds.grad_clip:.4g})"
    warm = {k: v for k, v in options.items() if k in warm_names}
    anchor_options = {k: v for k, v in options.items() if k in anchor_names and v is not None}
    if uses_loglik_bounds(warm.get("warm_start")) and "loglik_bounds" in given:  # the OPS warm start's own bounds
        warm["loglik_bounds"] = given["loglik_bounds"]
    if warm.get("warm_start") not in (None, "none") and not anchor_options:
        anchor_options = {"anchor": "none"}  # the caller's warm start sets the chains' starts instead
    public = Public(int(n_rows), int(dim), float(epsilon), float(delta), int(chains), given)
    for rule in RULES:
        picked = rule(public)
        if picked is not None:
            algorithm, chosen, why = (_anchored(picked, anchor_options, rows_per_unit, row_bounds)
                                      if "grad_clip" in picked[1] else picked)
            if "grad_clip" in given:
                why += "; " + LAPLACE_NOT_CHOSEN
            if "grad_clip" not in picked[1] and anchor_options.get("anchor", "none") not in (None, "none"):
                chosen = {**chosen, **anchor_options}  # an anchor asked for explicitly
            break
    else:  # pragma: no cover (check_auto_options refuses loglik_bounds alone, the only case no rule takes)
        raise ValueError("algorithm='auto' found no rule for the bounds given")
    chosen = {**chosen, **warm}
    dropped = sorted(k for k in given if k not in chosen)
    evidence = f"{why} (N={public.n_rows}, dim={public.dim}, epsilon={public.epsilon:g}, chains={public.chains})"
    if warm.get("warm_start") is not None:
        evidence += f"; warm start {warm['warm_start']} as asked"
    if dropped:
        evidence += f"; unused: {', '.join(dropped)}"
    assumption = ""
    if (row_bounds is not None and row_bounds.family != "logistic" and chosen.get("curvature_clip") is None
            and chosen.get("diff_clip") is None):
        assumption = (f"its default curvature bound L^2 / 4 is an assumption for a {row_bounds.family} row (give "
                      "curvature_clip; the attrs' auto_evidence says why)")
    reason = _sentence(algorithm, chosen, given, dropped, warm, derived, assumption)
    price = _price(public, chosen, row_bounds, rows_per_unit)
    if price:
        reason = f"{reason[:-1]}; price in advance: {price}."
    short = f"auto: {reason}" if len(reason) + 6 <= SHORT_LINE_MAX else _short(algorithm, chosen, given, derived)
    if not quiet:
        print(short, file=sys.stderr)
    return AutoChoice(algorithm, chosen, reason, dropped, evidence, bounds_source=bounds_source, price=price,
                      short=short)
