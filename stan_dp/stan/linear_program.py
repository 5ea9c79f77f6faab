"""Recognise a normal linear regression row program and read its declared data bounds (for ``dp-ssp``).

A program qualifies when the model block has exactly one statement that reads the rows, of one of the forms

    y ~ normal(MU, SIGMA);                      target += normal_lpdf(y | MU, SIGMA);
    y ~ normal_id_glm(X, ALPHA, BETA, SIGMA);   target += normal_id_glm_lpdf(y | X, ALPHA, BETA, SIGMA);

with y a data ``vector[N]``, MU a sum of terms that are either data-free references (the intercept) or a
coefficient times a row variable (``b * x`` / ``x * b`` with x a data ``vector[N]`` and b a scalar, or
``X * beta`` with X a data ``matrix[N, K]`` and beta a vector), and the coefficients, SIGMA and ALPHA plain
references to parameters (``sigma``, ``beta[2]``, ``beta``) or numbers. Every row variable must be y or a
covariate, or one the program never reads beyond its declaration (a label such as a privacy unit's id, which
changes no row's likelihood), no transformed data or transformed parameter may read the rows, and the row count N appears
nowhere else in the statement. Whatever else the program does must be data-free (it is the prior). This is
what makes the rows' log-likelihood depend on them only through the moment matrix of (1, x, y).

Bounds come from the data block's declared constraints (``vector<lower=-4, upper=4>[N] y;``) when both are
numeric literals; Stan rejects data outside them when it loads the rows.
"""
from __future__ import annotations

import dataclasses
import re

from .data import declared_constraint, parse_declarations
from . import toolchain
from .row_program import IDENTIFIER, Token, program_blocks, matching_bracket, names_in, statements_in, tokenize
from .units import program_uses

__all__ = ["LinearProgram", "NotLinear", "RowRegression", "recognise_linear_program", "read_regression",
           "declared_bounds", "has_public_bounds", "ssp_ready"]


class NotLinear(ValueError):
    """The program is not a normal linear regression dp-ssp can use; the message says why (no data)."""


@dataclasses.dataclass(frozen=True)
class LinearProgram:
    """The public structure of a normal linear row program.

    covariates: the row variables of x in column order, with their kind ("vector" or "matrix");
    intercept: references (``"alpha"``, ``"beta[1]"``) or numbers summed into the intercept;
    slopes: one reference per covariate term (a scalar reference for a vector covariate, a vector parameter
    name for a matrix covariate); scale: the reference (or number) of sigma."""

    outcome: str
    covariates: tuple[tuple[str, str], ...]
    intercept: tuple[str, ...]
    slopes: tuple[str, ...]
    scale: str
    bounds: dict


NUMBER_LITERAL = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def _reference(text: str) -> bool:
    text = text.replace(" ", "")
    return bool(NUMBER_LITERAL.match(text) or re.fullmatch(r"[A-Za-z_]\w*(\[\d+\])?", text))


def _split_top(text: str, sep: str) -> list[str]:
    out, depth, current = [], 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            out.append(current.strip())
            current = ""
        else:
            current += ch
    out.append(current.strip())
    return out


def declared_bounds(type_text: str) -> tuple[float | None, float | None]:
    """Numeric lower / upper bounds of a declared type's constraint (None when absent or not a literal), read by
    ``stan_dp.stan.data.declared_constraint``."""
    out: dict[str, float | None] = {"lower": None, "upper": None}
    for key, value in declared_constraint(type_text)[1].items():
        if NUMBER_LITERAL.match(value.replace(" ", "")):
            out[key] = float(value.replace(" ", ""))
    return out["lower"], out["upper"]


@dataclasses.dataclass(frozen=True)
class RowRegression:
    """The one model statement that reads the rows, read as a regression (public: program text only).

    dist: the distribution's name without ``_lpdf`` / ``_lpmf``; outcome: the outcome's name; covariates: the row
    variables of the linear predictor in column order with their kind ("vector" or "matrix"); intercept: the
    data-free references (or numbers) summed into it; slopes: one coefficient reference per covariate; extra: the
    arguments after the linear predictor (normal: the scale); text: the statement as printed; declarations: the
    data block's declarations by name."""

    dist: str
    outcome: str
    covariates: tuple[tuple[str, str], ...]
    intercept: tuple[str, ...]
    slopes: tuple[str, ...]
    extra: tuple[str, ...]
    text: str
    declarations: dict


def read_regression(canonical: str, count_name: str, *, mean_forms: dict[str, int], glm_forms: dict[str, int],
                    error: type[ValueError], purpose: str) -> RowRegression:
    """The :class:`RowRegression` of stanc's canonical printing, or ``error`` naming the reason.

    mean_forms: distributions written with a linear predictor as first argument (``normal``: one more argument,
    the scale); glm_forms: the ``*_glm`` forms (``normal_id_glm``: one more argument after beta); purpose: what the
    recognition is for, in the messages ("dp-ssp")."""
    data = {d.name: d for d in parse_declarations(canonical, "data")}
    rows = {n for n, d in data.items() if d.first_size is not None and d.first_size.strip() == count_name}
    if count_name not in data or not rows:
        raise error(f"the program declares no row count {count_name} with row variables")
    names = " or ".join([*mean_forms, *glm_forms])
    tokens, start, end = _rows_statement(canonical, count_name, rows, error=error, purpose=purpose, names=names)
    text = canonical[tokens[start].start:tokens[end].end]
    dist, outcome, args = _statement_parts(canonical, tokens, start, end, text, error=error, names=names)
    if dist not in mean_forms and dist not in glm_forms:
        raise error(f"the rows' distribution is {dist}, not {names}")
    if outcome not in rows:
        raise error(f"the outcome of '{text}' must be a data variable with {count_name} rows")
    predictor = _Predictor(data, rows, count_name, error)
    if dist in mean_forms:
        extra = predictor.read_mean_form(args, mean_forms[dist], text)
    else:
        extra = predictor.read_glm_form(args, glm_forms[dist], text)
    if not all(predictor.free_of_rows(e) for e in extra):
        raise error(f"the scale in '{text}' must not read the rows")
    covariates = predictor.covariates
    used = {outcome} | {c for c, _ in covariates}
    # a row variable the program never reads (a label, such as a privacy unit's id) changes no row's likelihood
    modelled = {name for name in rows - used if program_uses(canonical, name)}
    if modelled:
        raise error(f"the row variables {', '.join(sorted(modelled))} are not part of the regression")
    if len(set(c for c, _ in covariates)) != len(covariates):
        raise error("a covariate appears twice in the linear predictor")
    return RowRegression(dist=dist, outcome=outcome, covariates=tuple(covariates),
                         intercept=tuple(predictor.intercept), slopes=tuple(predictor.slopes),
                         extra=tuple(e.replace(" ", "") for e in extra), text=text, declarations=data)


def _rows_statement(canonical: str, count_name: str, rows: set[str], *, error: type[ValueError], purpose: str,
                    names: str) -> tuple[list[Token], int, int]:
    """(the program's tokens, the first and last token of the one model statement that reads the rows), or
    ``error``: the transformed data and transformed parameters must not read the rows, and exactly one model
    statement may."""
    tokens = tokenize(canonical)
    blocks = program_blocks(tokens)
    for block in ("transformed data", "transformed parameters"):
        if block in blocks and names_in(tokens, *blocks[block]) & (rows | {count_name}):
            raise error(f"its {block} read the rows ({purpose} needs the outcome and covariates as declared data)")
    if "model" not in blocks:
        raise error("the program has no model block")
    reading = [(s, e) for s, e in statements_in(tokens, *blocks["model"]) if names_in(tokens, s, e) & rows]
    if len(reading) != 1:
        raise error(f"{len(reading)} model statements read the rows; {purpose} needs exactly one {names} "
                    "likelihood statement")
    start, end = reading[0]
    return tokens, start, end


def _statement_parts(canonical: str, tokens: list[Token], start: int, end: int, text: str, *,
                     error: type[ValueError], names: str) -> tuple[str, str, list[str]]:
    """(distribution, outcome, the arguments after the outcome) of ``y ~ dist(...)`` or
    ``target += dist_lpdf(y | ...)``, or ``error``."""
    words = [t.text for t in tokens[start:end + 1]]
    if "~" in words:
        tilde = words.index("~")
        outcome = " ".join(words[:tilde])
        dist = words[tilde + 1]
        if tokens[start + tilde + 2].text != "(" or matching_bracket(tokens, start + tilde + 2) != end - 1:
            raise error(f"'{text}' is not a single distribution statement")
        inner = canonical[tokens[start + tilde + 2].end:tokens[end - 1].start]
        args = _split_top(inner, ",")
    elif words[:2] == ["target", "+="] and len(words) > 4 and words[3] == "(":
        dist = re.sub(r"_(lpdf|lupdf|lpmf|lupmf)$", "", words[2])
        inner = canonical[tokens[start + 3].end:tokens[end - 1].start]
        if "|" not in inner:
            raise error(f"'{text}' is not a density increment of the rows")
        outcome, rest = (s.strip() for s in inner.split("|", 1))
        args = _split_top(rest, ",")
    else:
        raise error(f"'{text}' is not of the form y ~ dist(...) or target += dist_lpdf(y | ...) ({names})")
    return dist, outcome, args


class _Predictor:
    """The linear predictor's terms as they are read: the covariates (name, kind), the intercept terms and the
    slopes (one coefficient reference per covariate); every refusal is ``error`` naming the term."""

    def __init__(self, data: dict, rows: set[str], count_name: str, error: type[ValueError]) -> None:
        self.data, self.rows, self.count_name, self.error = data, rows, count_name, error
        self.covariates: list[tuple[str, str]] = []
        self.intercept: list[str] = []
        self.slopes: list[str] = []

    def free_of_rows(self, expr: str) -> bool:
        """True when ``expr`` names neither a row variable nor the row count."""
        return not ({t.text for t in tokenize(expr) if IDENTIFIER.match(t.text)} & (self.rows | {self.count_name}))

    def covariate(self, name: str, coef: str) -> None:
        """Add the covariate ``name`` (a data vector or matrix of rows) with its coefficient reference ``coef``."""
        kind = self.data[name].type_text.split("<")[0].split("[")[0].strip()
        if kind not in ("vector", "matrix"):
            raise self.error(f"the covariate {name} must be a data vector[{self.count_name}] (times a scalar) or a "
                             f"matrix[{self.count_name}, K] (times a vector)")
        if not _reference(coef) or not self.free_of_rows(coef):
            raise self.error(f"the coefficient of {name} must be a parameter reference, got '{coef}'")
        self.covariates.append((name, kind))
        self.slopes.append(coef.replace(" ", ""))

    def read_mean_form(self, args: list[str], n_extra: int, text: str) -> list[str]:
        """Read ``dist(mu, ...)``: the terms of mu (intercepts, coefficient times covariate); returns the
        ``n_extra`` arguments after mu."""
        if len(args) != 1 + n_extra:
            raise self.error(f"'{text}' must have {1 + n_extra} argument(s) after the outcome")
        mu, extra = args[0], args[1:]
        for term in _split_top(mu, "+"):
            factors = [f.strip() for f in _split_top(term, "*")]
            used = [f for f in factors if f in self.rows]
            if not used:
                if not _reference(term) or not self.free_of_rows(term):
                    raise self.error(f"the intercept term '{term}' must be a parameter reference or a number")
                self.intercept.append(term.replace(" ", ""))
            elif len(factors) == 2 and len(used) == 1:
                x = used[0]
                coef = factors[1] if factors[0] == x else factors[0]
                if self.data[x].type_text.startswith("matrix") and factors[0] != x:
                    raise self.error(f"write the matrix covariate first: {x} * {coef}")
                self.covariate(x, coef)
            else:
                raise self.error(f"the linear predictor's term '{term}' is not a coefficient times one covariate")
        return extra

    def read_glm_form(self, args: list[str], n_extra: int, text: str) -> list[str]:
        """Read ``dist_glm(x, alpha, beta, ...)``: the design matrix and its coefficients; returns the ``n_extra``
        arguments after beta."""
        if len(args) != 3 + n_extra:
            raise self.error(f"'{text}' must have x, alpha, beta{' and the scale' if n_extra else ''}")
        x, alpha, beta, *extra = args
        if x not in self.rows:
            raise self.error(f"the design of '{text}' must be a data matrix of rows")
        if not (_reference(alpha) and self.free_of_rows(alpha)):
            raise self.error(f"alpha in '{text}' must be a parameter reference or a number")
        self.intercept.append(alpha.replace(" ", ""))
        self.covariate(x, beta)
        return extra


def recognise_linear_program(canonical: str, count_name: str = "N") -> LinearProgram:
    """The :class:`LinearProgram` of stanc's canonical printing, or :class:`NotLinear` naming the reason."""
    found = read_regression(canonical, count_name, mean_forms={"normal": 1}, glm_forms={"normal_id_glm": 1},
                            error=NotLinear, purpose="dp-ssp")
    data = found.declarations
    if not data[found.outcome].type_text.startswith("vector"):
        raise NotLinear(f"the outcome of '{found.text}' must be a data vector[{count_name}]")
    scale = found.extra[0]
    if not _reference(scale):
        raise NotLinear(f"the scale in '{found.text}' must be a parameter reference or a number")
    if not found.covariates:
        raise NotLinear("the mean reads no covariate (a normal model of y alone is not a regression dp-ssp serves)")
    used = {found.outcome} | {c for c, _ in found.covariates}
    bounds = {name: declared_bounds(data[name].type_text) for name in used}
    return LinearProgram(outcome=found.outcome, covariates=found.covariates, intercept=found.intercept,
                         slopes=found.slopes, scale=scale, bounds=bounds)


def has_public_bounds(canonical: str, count_name: str = "N", options: dict | None = None) -> bool:
    """Whether ``dp-ssp`` can run on this program with these options: a normal linear row program whose outcome
    and covariates all have numeric bounds, declared in the data block or given as the options ``y_bounds`` /
    ``x_bounds``. Public: reads the program text and the options only (``algorithm="auto"`` then needs no
    gradient bound)."""
    options = options or {}
    try:
        program = recognise_linear_program(canonical, count_name)
    except NotLinear:
        return False

    def bounded(name: str) -> bool:
        low, high = program.bounds.get(name, (None, None))
        return low is not None and high is not None

    y_ok = "y_bounds" in options or bounded(program.outcome)
    x_ok = "x_bounds" in options or all(bounded(name) for name, _ in program.covariates)
    return bool(y_ok and x_ok)


#: options that give ``auto`` a gradient or ratio bound of its own (then it need not look at the program)
_KERNEL_BOUNDS = ("grad_clip", "ratio_clip")


def ssp_ready(stan_file, count_name: str = "N", options: dict | None = None, stanc_args: tuple[str, ...] = ()
              ) -> bool:
    """``has_public_bounds`` for a Stan file, from stanc's canonical printing (stanc only, no C++ compile), asked
    only when ``options`` give no kernel bound; False when stanc fails (the compile reports that)."""
    options = options or {}
    if any(k in options for k in _KERNEL_BOUNDS):
        return False
    try:
        canonical = toolchain.canonical_program(stan_file, stanc_args)
    except Exception:  # noqa: BLE001 - any stanc failure: not ready (the compile reports it with its message)
        return False
    return has_public_bounds(canonical, count_name, options)
