"""The row program: a Stan program without the model block's data-free statements.

A row instance evaluates l_i(theta) = lp_i(theta) - lp_0(theta): the log density of the program on row i minus
that on no rows. Every model-block statement that reads no row data (the priors, typically) adds the same
value to both and cancels, yet costs as much as the likelihood of the row itself. The row program is the
user's program with those statements removed (and without generated quantities, which log densities never
run); row instances are built from it, and the factorization check at load (sum_i l_i == lp_full - lp_0 with
the user's unchanged program) is what proves the removal right for the data at hand.

The analysis is deliberately conservative and works on stanc's canonical printing (comments stripped, braces
on every branch and loop):

* **row-dependent names**: the row count, the row variables, and, to a fixed point, every transformed data,
  transformed parameter or top-level model-block local declared or assigned by a statement that mentions a
  row-dependent name;
* a top-level model-block statement is **removed** only if it increments the target (``~`` or ``target +=``),
  mentions no row-dependent name, assigns nothing, declares nothing, and does not print, reject, stop, or read
  ``target()``. Everything else is kept as written.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from .data import parse_declarations

_TOKEN = re.compile(
    r'"(?:[^"\\]|\\.)*"'  # string literal (print / reject / profile names)
    r"|[A-Za-z_][A-Za-z0-9_]*"  # identifier or keyword
    r"|\d+\.?\d*(?:[eE][+-]?\d+)?i?|\.\d+(?:[eE][+-]?\d+)?i?"  # number
    r"|\.\*=|\./=|\+=|-=|\*=|/=|==|!=|<=|>=|&&|\|\||%/%|\.\*|\./|\.\^"  # multi-character operators
    r"|\S"  # any other single character
)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
ASSIGN_OPERATORS = {"=", "+=", "-=", "*=", "/=", ".*=", "./="}
_OPEN, _CLOSE = "([{", ")]}"
_COMPOUND_START = {"for", "while", "if", "profile", "{"}
_FORBIDDEN = {"print", "reject", "fatal_error"}
_TYPES = {
    "int", "real", "complex", "vector", "row_vector", "matrix", "complex_vector", "complex_row_vector",
    "complex_matrix", "array", "tuple", "simplex", "unit_vector", "sum_to_zero_vector", "sum_to_zero_matrix",
    "ordered", "positive_ordered", "cholesky_factor_corr", "cholesky_factor_cov", "corr_matrix", "cov_matrix",
    "column_stochastic_matrix", "row_stochastic_matrix",
}
_BLOCK_NAMES = (
    ("functions",), ("data",), ("transformed", "data"), ("parameters",), ("transformed", "parameters"),
    ("model",), ("generated", "quantities"),
)


@dataclass(frozen=True)
class RowProgram:
    """A derived row program and the row split it was derived for."""

    text: str
    count_name: str
    row_variables: tuple[str, ...]
    removed: tuple[str, ...]  # the removed statements, as printed by stanc (for messages and tests)

    def matches(self, count_name: str, row_variables: Iterable[str]) -> bool:
        """Whether the program was derived for this split (same count and the same set of row variables)."""
        return count_name == self.count_name and set(row_variables) == set(self.row_variables)


@dataclass(frozen=True)
class Token:
    text: str
    start: int
    end: int


def tokenize(program: str) -> list[Token]:
    return [Token(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(program)]


def program_blocks(tokens: list[Token]) -> dict[str, tuple[int, int]]:
    """Block name -> (index of its '{', index of its matching '}') for the program's top-level blocks."""
    out: dict[str, tuple[int, int]] = {}
    pos = 0
    while pos < len(tokens):
        for words in _BLOCK_NAMES:
            n = len(words)
            if tuple(t.text for t in tokens[pos:pos + n]) == words and pos + n < len(tokens) \
                    and tokens[pos + n].text == "{":
                close = matching_bracket(tokens, pos + n)
                out[" ".join(words)] = (pos + n, close)
                pos = close + 1
                break
        else:
            raise ValueError(f"unexpected token {tokens[pos].text!r} at the top level of the program")
    return out


def matching_bracket(tokens: list[Token], open_pos: int) -> int:
    depth = 0
    for pos in range(open_pos, len(tokens)):
        if tokens[pos].text in _OPEN:
            depth += 1
        elif tokens[pos].text in _CLOSE:
            depth -= 1
            if depth == 0:
                return pos
    raise ValueError("unbalanced brackets in the program")


def statements_in(tokens: list[Token], open_pos: int, close_pos: int) -> list[tuple[int, int]]:
    """Top-level statements of a block body as inclusive token ranges."""
    out = []
    pos = open_pos + 1
    while pos < close_pos:
        start = pos
        compound = tokens[pos].text in _COMPOUND_START
        depth = 0
        while pos < close_pos:
            text = tokens[pos].text
            if text in _OPEN:
                depth += 1
            elif text in _CLOSE:
                depth -= 1
                if depth == 0 and text == "}" and compound and not (
                        pos + 1 < close_pos and tokens[pos + 1].text == "else"):
                    break
            elif text == ";" and depth == 0:
                break
            pos += 1
        if pos >= close_pos:
            raise ValueError("a statement of the program does not end inside its block")
        out.append((start, pos))
        pos += 1
    return out


def declared_name(tokens: list[Token], start: int, end: int) -> str | None:
    """The variable a declaration statement declares (None if the statement is not a declaration)."""
    if tokens[start].text not in _TYPES:
        return None
    depth = angle = 0  # brackets; a constraint's angle brackets (<lower=0>) at bracket depth 0
    last = None
    for pos in range(start, end + 1):
        text = tokens[pos].text
        if text in _OPEN:
            depth += 1
        elif text in _CLOSE:
            depth -= 1
        elif depth == 0 and text == "<":
            angle += 1
        elif depth == 0 and text == ">":
            angle -= 1
        elif depth == 0 and angle == 0 and text in ("=", ";"):
            break
        elif depth == 0 and angle == 0 and IDENTIFIER.match(text):
            last = text
    return last


def names_in(tokens: list[Token], start: int, end: int) -> set[str]:
    return {t.text for t in tokens[start:end + 1] if IDENTIFIER.match(t.text)}


def _written(tokens: list[Token], start: int, end: int, declared: set[str]) -> set[str]:
    """Names of ``declared`` that a statement declares or assigns to (all of them it mentions when an
    assignment target cannot be read off, to stay conservative)."""
    out = set()
    name = declared_name(tokens, start, end)
    if name is not None:
        out.add(name)
    for pos in range(start, end + 1):
        if tokens[pos].text not in ASSIGN_OPERATORS or (pos > start and tokens[pos - 1].text == "target"):
            continue
        j = pos - 1
        depth = 0
        while j >= start and (depth > 0 or tokens[j].text == "]"):
            if tokens[j].text in _CLOSE:
                depth += 1
            elif tokens[j].text in _OPEN:
                depth -= 1
            j -= 1
        if j >= start and IDENTIFIER.match(tokens[j].text):
            out.add(tokens[j].text)
        else:
            return names_in(tokens, start, end) & declared
    return out & declared


def spread_taint(tokens, statements, declared: set[str], tainted: set[str]) -> None:
    """Mark the names of ``declared`` written by a statement that mentions a tainted name (to a fixed point)."""
    changed = True
    while changed:
        changed = False
        for start, end in statements:
            if names_in(tokens, start, end) & tainted:
                new = _written(tokens, start, end, declared) - tainted
                if new:
                    tainted |= new
                    changed = True


def removable_statement(tokens: list[Token], start: int, end: int, tainted: set[str]) -> bool:
    texts = [t.text for t in tokens[start:end + 1]]
    if texts[0] in _TYPES or names_in(tokens, start, end) & (tainted | _FORBIDDEN):
        return False
    increments = False
    for pos, text in enumerate(texts):
        if text == "target" and pos + 1 < len(texts):
            if texts[pos + 1] == "(":
                return False  # reads the accumulated target
            if texts[pos + 1] == "+=":
                increments = True
                continue
        if text == "~":
            increments = True
        if text in ASSIGN_OPERATORS and not (text == "+=" and pos > 0 and texts[pos - 1] == "target"):
            return False
    return increments


def derive(canonical: str, count_name: str, row_variables: Iterable[str]) -> RowProgram | None:
    """The row program of ``canonical`` (stanc's canonical printing, comments stripped) for a row split, or None
    when no statement can be removed."""
    tokens = tokenize(canonical)
    blocks = program_blocks(tokens)
    if "model" not in blocks:
        return None
    tainted = {count_name, *row_variables}
    for block in ("transformed data", "transformed parameters"):
        if block in blocks:
            statements = statements_in(tokens, *blocks[block])
            declared = {name for s in statements if (name := declared_name(tokens, *s))}
            spread_taint(tokens, statements, declared, tainted)
    model = statements_in(tokens, *blocks["model"])
    locals_ = {name for s in model if (name := declared_name(tokens, *s))}
    spread_taint(tokens, model, locals_, tainted)
    removed = [(start, end) for start, end in model if removable_statement(tokens, start, end, tainted)]
    if not removed:
        return None
    cuts = [(tokens[start].start, tokens[end].end) for start, end in removed]
    if "generated quantities" in blocks:
        gq_open, gq_close = blocks["generated quantities"]
        name_start = gq_open - 2  # the block name is two tokens
        cuts.append((tokens[name_start].start, tokens[gq_close].end))
    text, last = [], 0
    for begin, end in sorted(cuts):
        text.append(canonical[last:begin])
        last = end
    text.append(canonical[last:])
    return RowProgram(
        text="".join(text),
        count_name=count_name,
        row_variables=tuple(row_variables),
        removed=tuple(canonical[b:e] for b, e in cuts[:len(removed)]),
    )


def default_row_program(canonical: str) -> RowProgram | None:
    """The row program for the default split (row count ``N``, row variables the data declared with leading
    size N), or None. Other splits use the program itself."""
    declarations = parse_declarations(canonical, "data")
    if not any(d.name == "N" for d in declarations):
        return None
    row_variables = [d.name for d in declarations if d.first_size is not None and d.first_size.strip() == "N"]
    return derive(canonical, "N", row_variables)
