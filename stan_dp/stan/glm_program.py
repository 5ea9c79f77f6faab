"""Per-row gradient and curvature bounds from the program text, for the regressions whose family makes them exact.

A clipped private kernel needs L, a bound on the norm of one row's log-likelihood gradient, and the anchored run
also K, a bound on one row's curvature. Where the family and the declared data bounds determine them exactly, the
package derives them from the program text (public) instead of asking; elsewhere it says which assumption remains:

* **logistic** (``y ~ bernoulli_logit(alpha + X * beta)``, ``bernoulli_logit_glm(y | X, alpha, beta)``, or the
  sum of vector covariates times scalars): a row's gradient with respect to the coefficients is (y - p)(1, x),
  |y - p| < 1, so with every covariate bounded by literal ``lower=`` / ``upper=`` in the data block,
  L = max over the box of ||(1, x)|| (the 1 once per intercept parameter, none without one) is exact, and so is
  K = L^2 / 4 (the row Hessian is p (1 - p) (1, x)(1, x)', p (1 - p) <= 1/4). Exact needs the coefficients to
  be unconstrained parameters: a constrained one (``real<lower=0> b``) or a transformed parameter adds the
  transform's derivative, which no data bound limits.
* **Poisson** (``poisson_log``, ``poisson_log_glm``): the gradient (y - exp(eta))(1, x) and the curvature
  exp(eta) ||(1, x)||^2 need a cap on the outcome (a declared ``upper=`` on y) AND a bound on the linear predictor
  eta, which data bounds cannot give (the coefficients are unbounded). Nothing is derived; the message says what
  to give.
* **normal** (the programs ``stan_dp.stan.linear_program`` recognises): dp-ssp needs only the declared bounds of
  y and x; the kernels' bounds rest on a residual scale (the gradient is (y - mu) / sigma^2 (1, x)), which the
  caller must assume.

Everything here reads the program text and, for the number of columns of a matrix covariate, its declared size
(a public data integer); never a row.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Mapping

from . import toolchain
from .data import parse_declarations
from .linear_program import NotLinear, NUMBER_LITERAL, declared_bounds, read_regression, recognise_linear_program
from .row_program import program_blocks, tokenize

__all__ = ["GLMProgram", "NotGLM", "RowBounds", "recognise_glm_program", "row_bounds", "program_row_bounds",
           "box_norm", "unit_row_bounds"]

#: the families recognised here: distribution -> family
_MEAN_FORMS = {"bernoulli_logit": 0, "poisson_log": 0}
_GLM_FORMS = {"bernoulli_logit_glm": 0, "poisson_log_glm": 0}
_FAMILY = {"bernoulli_logit": "logistic", "bernoulli_logit_glm": "logistic", "poisson_log": "poisson",
           "poisson_log_glm": "poisson"}


class NotGLM(ValueError):
    """The program is not a logistic or Poisson regression row program; the message says why (no data)."""


@dataclasses.dataclass(frozen=True)
class GLMProgram:
    """The public structure of a logistic or Poisson regression row program.

    family: "logistic" or "poisson"; covariates: the row variables of the linear predictor with their kind
    ("vector" or "matrix") and their declared sizes; intercept / slopes: the coefficient references (or numbers);
    bounds: declared (lower, upper) literals by variable (None where absent); coefficient_problem: why the
    coefficients are not plain unconstrained parameters (then no bound is exact), else None."""

    family: str
    outcome: str
    covariates: tuple[tuple[str, str], ...]
    sizes: dict
    intercept: tuple[str, ...]
    slopes: tuple[str, ...]
    bounds: dict
    coefficient_problem: str | None


@dataclasses.dataclass(frozen=True)
class RowBounds:
    """What the program text says about the per-row bounds of a recognised regression (public).

    family: "logistic", "poisson" or "normal"; derivable: the bounds follow exactly from the declared data
    bounds; grad_clip (L) and curvature_clip (K): the derived values, None when not derivable (or when a matrix
    covariate's column count is not known yet); coefficients: the number of coefficients a row's gradient moves
    (the dimension of the price in advance); source: where L comes from, in words ("the declared bounds of x");
    note: the assumption that remains, or what to give, in words; rows_per_unit: k when the bounds are those of one
    privacy unit of at most k rows (``unit_row_bounds``), else None; unit: the privacy unit's name when the bounds
    are a unit's (``unit_row_bounds``, with or without k), else None."""

    family: str
    derivable: bool
    grad_clip: float | None
    curvature_clip: float | None
    coefficients: int | None
    source: str
    note: str
    rows_per_unit: int | None = None
    unit: str | None = None

    def reason(self) -> str:
        """``grad_clip = 3.2 from the declared bounds of x (exact for a logistic row)``, or for a unit of at most k
        rows ``... (exact for a unit of at most 3 logistic rows)``."""
        what = (f"a {self.family} row" if self.rows_per_unit is None
                else f"a unit of at most {self.rows_per_unit} {self.family} rows")
        return f"grad_clip = {self.grad_clip:.4g} from {self.source} (exact for {what})"


def _base(ref: str) -> str:
    return ref.split("[", 1)[0]


def _coefficient_problem(canonical: str, refs: list[str]) -> str | None:
    """Why the references are not distinct, unconstrained parameters (their gradient would not be (1, x)), or
    None. Numbers are fine (they take no gradient)."""
    tokens = tokenize(canonical)
    block = program_blocks(tokens).get("parameters")
    body = "" if block is None else canonical[tokens[block[0]].end:tokens[block[1]].start]
    params = {d.name: d.type_text for d in parse_declarations(f"parameters {{\n{body}\n}}", "parameters")}
    named = [r for r in refs if not NUMBER_LITERAL.match(r)]
    if len(set(named)) != len(named) or any(r in named for r in {_base(r) for r in named if "[" in r}):
        return "a coefficient appears twice in the linear predictor"
    for ref in named:
        base = _base(ref)
        if base not in params:
            return (f"the coefficient {base} is not declared in the parameters block (a transformed parameter's "
                    "gradient carries its transform's derivative, which no data bound limits)")
        if "<" in params[base]:
            return (f"the coefficient {base} is declared with a constraint ('{params[base]} {base}'): the gradient "
                    "on the unconstrained scale carries the transform's derivative, which no data bound limits")
    return None


def recognise_glm_program(canonical: str, count_name: str = "N") -> GLMProgram:
    """The :class:`GLMProgram` of stanc's canonical printing (or a program text), or :class:`NotGLM` naming the
    reason."""
    found = read_regression(canonical, count_name, mean_forms=_MEAN_FORMS, glm_forms=_GLM_FORMS, error=NotGLM,
                            purpose="a derived gradient bound")
    data = found.declarations
    outcome_type = data[found.outcome].type_text
    if not (outcome_type.startswith("array") and re.search(r"\bint\b", outcome_type)):
        raise NotGLM(f"the outcome of '{found.text}' must be a data array[{count_name}] int")
    used = [found.outcome, *(c for c, _ in found.covariates)]
    return GLMProgram(family=_FAMILY[found.dist], outcome=found.outcome, covariates=found.covariates,
                      sizes={c: data[c].sizes for c, _ in found.covariates}, intercept=found.intercept,
                      slopes=found.slopes, bounds={name: declared_bounds(data[name].type_text) for name in used},
                      coefficient_problem=_coefficient_problem(canonical, [*found.intercept, *found.slopes]))


def box_norm(intercepts: int, columns: list[tuple[float, float]]) -> float:
    """max over the box of ||(1, x)||: sqrt(intercepts + sum_j max(lower_j^2, upper_j^2)) (public)."""
    return math.sqrt(intercepts + sum(max(lo * lo, hi * hi) for lo, hi in columns))


def _columns(program: GLMProgram, sizes: Mapping[str, Any] | None) -> dict[str, int] | None:
    """The number of columns of each covariate whose slope takes a gradient (a vector: 1; a matrix: its second
    declared size, a literal or a public data integer from ``sizes``), or None when one is not known."""
    out = {}
    for (name, kind), slope in zip(program.covariates, program.slopes):
        if NUMBER_LITERAL.match(slope):
            continue
        if kind == "vector":
            out[name] = 1
            continue
        size = program.sizes[name][1].strip() if len(program.sizes[name]) > 1 else ""
        if re.fullmatch(r"\d+", size):
            out[name] = int(size)
        elif sizes is not None and size in sizes:
            out[name] = int(sizes[size])
        else:
            return None
    return out


def _example(program: GLMProgram, name: str) -> str:
    kind = dict(program.covariates)[name]
    shape = f"matrix<lower=-3, upper=3>[N, {program.sizes[name][1]}]" if kind == "matrix" else \
        "vector<lower=-3, upper=3>[N]"
    return f"'{shape} {name};'"


def _glm_bounds(program: GLMProgram, sizes: Mapping[str, Any] | None) -> RowBounds:
    names = [name for name, _ in program.covariates]
    intercepts = sum(1 for ref in program.intercept if not NUMBER_LITERAL.match(ref))
    unbounded = [n for n in names if None in program.bounds[n]]
    columns = _columns(program, sizes)
    covariate_words = ", ".join(names) or "no covariate"
    source = f"the declared bounds of {covariate_words}" if names else "the intercept alone (no covariate)"
    norm = None
    if not unbounded and columns is not None:
        per_column = [program.bounds[n] for n in names if n in columns for _ in range(columns[n])]
        norm = box_norm(intercepts, per_column)
    count = None if columns is None else intercepts + sum(columns.values())
    if program.family == "poisson":
        y_cap = program.bounds[program.outcome][1]
        cap = (f"{program.outcome} is declared with upper = {y_cap:g}" if y_cap is not None
               else f"{program.outcome} declares no upper bound")
        box = (f"; the declared bounds give max ||(1, x)|| = {norm:.4g}" if norm is not None
               else f"; declare literal bounds on {', '.join(unbounded)} for max ||(1, x)||" if unbounded else "")
        return RowBounds(
            family="poisson", derivable=False, grad_clip=None, curvature_clip=None, coefficients=count, source="",
            note=(f"a Poisson row's gradient (y - exp(eta)) (1, x) and curvature exp(eta) ||(1, x)||^2 need a cap "
                  f"on the outcome ({cap}) and a public bound eta_max on the linear predictor, which no data bound "
                  f"gives (the coefficients are unbounded), so no bound is derived{box}: give grad_clip = "
                  "(y_max + exp(eta_max)) max ||(1, x)|| and curvature_clip = exp(eta_max) max ||(1, x)||^2 from "
                  "public knowledge"))
    if program.coefficient_problem is not None:
        return RowBounds(family="logistic", derivable=False, grad_clip=None, curvature_clip=None, coefficients=count,
                         source="", note=f"no bound is derived: {program.coefficient_problem}; give grad_clip")
    if unbounded:
        return RowBounds(
            family="logistic", derivable=False, grad_clip=None, curvature_clip=None, coefficients=count, source="",
            note=(f"a logistic row's gradient is (y - p) (1, x), so literal bounds declared on every covariate give "
                  f"the exact L = max ||(1, x)||; no literal bounds are declared on {', '.join(unbounded)}: declare them in the data "
                  f"block (e.g. {_example(program, unbounded[0])}) or give grad_clip"))
    return RowBounds(family="logistic", derivable=True, grad_clip=norm,
                     curvature_clip=None if norm is None else norm * norm / 4.0, coefficients=count, source=source,
                     note=("L = max ||(1, x)|| over the declared box and K = L^2 / 4 are exact for a logistic row "
                           "(|y - p| < 1, p (1 - p) <= 1/4)"))


#: what remains for a normal linear program's kernels (dp-ssp needs only the declared bounds)
NORMAL_NOTE = ("a normal row's gradient is (y - mu) / sigma^2 (1, x) and its curvature ||(1, x)||^2 / sigma^2: the "
               "kernels' bounds assume a residual scale (a public lower bound on sigma and a cap on |y - mu|), which "
               "no data bound gives; dp-ssp needs only declared bounds on y and every covariate")


def row_bounds(canonical: str, count_name: str = "N", sizes: Mapping[str, Any] | None = None) -> RowBounds | None:
    """The :class:`RowBounds` of a recognised logistic, Poisson or normal regression program, else None.

    sizes: public data integers by name (the column count K of ``matrix[N, K] x``); without them a matrix
    covariate of data-sized width leaves ``grad_clip`` None while ``derivable`` already says whether it will be."""
    try:
        program = recognise_glm_program(canonical, count_name)
    except NotGLM:
        try:
            recognise_linear_program(canonical, count_name)
        except NotLinear:
            return None
        return RowBounds(family="normal", derivable=False, grad_clip=None, curvature_clip=None, coefficients=None,
                         source="", note=NORMAL_NOTE)
    return _glm_bounds(program, sizes)


def unit_row_bounds(bounds: RowBounds | None, unit: str | None, rows_per_unit: int | None) -> RowBounds | None:
    """The bounds of one privacy unit's total from a row's (public: the program's bounds, the unit's name and the
    public cap k = ``max_rows_per_unit``). A unit's gradient is the sum of at most k row gradients and its
    curvature the sum of at most k row curvatures, so k L and k K are exact when L and K are; without a cap nothing
    is derived and the note says which option gives it. ``unit`` None (a row-level run) returns ``bounds``, and
    None stays None (no recognised regression)."""
    if bounds is None or unit is None:
        return bounds
    if not bounds.derivable:
        return dataclasses.replace(bounds, unit=unit, note=(
            f"{bounds.note} (with privacy_unit '{unit}' a bound covers all rows of one {unit}: max_rows_per_unit "
            "times a row's bound)"))
    if rows_per_unit is None:
        row_value = "" if bounds.grad_clip is None else f" = {bounds.grad_clip:.4g}"
        return dataclasses.replace(
            bounds, derivable=False, grad_clip=None, curvature_clip=None, source="", unit=unit,
            note=(f"the declared bounds give one row's bound L{row_value}, and with privacy_unit '{unit}' a bound "
                  f"covers all rows of one {unit}: give max_rows_per_unit=k (--max-rows-per-unit K), a public cap on the rows of one "
                  f"{unit}, and grad_clip = k L is derived, or give grad_clip for one {unit}'s total yourself"))
    k = int(rows_per_unit)
    return dataclasses.replace(
        bounds, grad_clip=None if bounds.grad_clip is None else k * bounds.grad_clip,
        curvature_clip=None if bounds.curvature_clip is None else k * bounds.curvature_clip,
        source=f"{bounds.source} times max_rows_per_unit = {k}", rows_per_unit=k, unit=unit,
        note=f"{bounds.note}; one {unit}'s total of at most {k} rows: k L and k K")


def program_row_bounds(stan_file: Any, count_name: str = "N", stanc_args: tuple[str, ...] = (),
                       sizes: Mapping[str, Any] | None = None) -> RowBounds | None:
    """:func:`row_bounds` of a Stan file, from stanc's canonical printing (stanc only, no C++ compile); None when
    stanc fails (the compile reports that) or the program is no recognised regression."""
    try:
        canonical = toolchain.canonical_program(stan_file, stanc_args)
    except Exception:  # noqa: BLE001 - any stanc failure: nothing derived (the compile reports it)
        return None
    return row_bounds(canonical, count_name, sizes)
