"""The shard program: a Stan program rewritten so that one instance holds many rows and returns their terms.

A shard instance holds a shard's rows once (the data as Stan holds them) and, in one log density evaluation,
computes l_i(theta) and its gradient for any set of its rows. It is generated from stanc's canonical printing
of the user's program (as ``stan_dp.stan.row_program`` is):

* the model block's **row statements** (those that read the rows, found by the same dependency analysis as the
  row program) move into a Stan function ``sdp_row_lp(int sdp_i, <their free variables>)`` that evaluates them
  for the single row ``sdp_i``: a vectorised statement has every row variable ``v`` replaced by ``v[sdp_i]``
  (``y ~ normal(mu + x * b, s)`` becomes ``y[sdp_i] ~ normal(mu + x[sdp_i] * b, s)``), a loop
  ``for (n in 1 : N) { ... }`` becomes its body with ``n = sdp_i``, and a model-block local sized by the row
  count (``vector[N] mu = ...``) becomes a per-row local (``real mu = ...``);
* transformed data that read the rows become per-row locals too, computed from the row's own data as a row
  instance computes them: pooling (a mean over the rows) cannot hide inside a shard;
* they are replaced by one call of the external function ``sdp_shard_rows(<free variables>)``, defined in C++
  (``stan_dp/stan/native/shard_hooks.hpp``) as the loop over the requested rows;
* everything else (parameter transforms, transformed parameters, the model block's data-free statements) is
  unchanged and now runs **once per evaluation instead of once per row**: it is hoisted out of the row loop.
  The data-free statements that only increment the target (the priors) are dropped, as in the row program;
* per-row kernels (``stan_dp/stan/native/shard_kernels.hpp``) replace common likelihoods: the GLM forms
  ``bernoulli_logit``, ``poisson_log`` and ``normal`` of ``a + X[i] * b`` (one autodiff node per row, or none:
  the kernel writes the row's gradient itself) and ``multi_normal_cholesky`` / ``multi_normal`` with a
  data-free covariance (prepared once per evaluation, where Stan's functions redo that work for every row).

When the element form does not type-check (e.g. a GLM function, which takes a matrix), the build retries with
one-row slices (``v[sdp_i:sdp_i]``, the row count read as 1): every expression keeps its type, and the row
function computes exactly what a row instance (N = 1) computes. The rewrite refuses (and the engine falls back
to one instance per row) whatever it cannot prove row-local by syntax: a row variable indexed inside a
vectorised statement, the row count inside a row statement (element form), pooled transformed data,
transformed parameters that read rows, other statements that read rows, or a data-free statement wedged between
two row statements. stanc type-checks the result, and the factorization check at load (against the user's
unchanged program) is the proof that the rewrite is right for the data at hand.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from .data import parse_declarations
from .row_program import (
    ASSIGN_OPERATORS,
    IDENTIFIER,
    Token,
    program_blocks,
    declared_name,
    matching_bracket,
    names_in,
    removable_statement,
    spread_taint,
    statements_in,
    tokenize,
)

#: Prefix of every name the rewrite introduces; a program that already uses it is refused.
PREFIX = "sdp_"
ROW_INDEX = "sdp_i"
ROW_FUNCTION = "sdp_row_lp"
HOOK = "sdp_shard_rows"

_VECTOR_BASES = {"vector", "simplex", "unit_vector", "ordered", "positive_ordered", "sum_to_zero_vector"}
_MATRIX_BASES = {"matrix", "cov_matrix", "corr_matrix", "cholesky_factor_cov", "cholesky_factor_corr",
                 "column_stochastic_matrix", "row_stochastic_matrix", "sum_to_zero_matrix"}
_UNSIZED = {
    "int": "int", "real": "real", "complex": "complex", "row_vector": "row_vector",
    "complex_vector": "complex_vector", "complex_row_vector": "complex_row_vector",
    "complex_matrix": "complex_matrix",
    **{b: "vector" for b in _VECTOR_BASES}, **{b: "matrix" for b in _MATRIX_BASES},
}

#: Per-row kernels: distribution -> (kernel function, index of the argument that must be data-free, argument
#: types the kernel is declared for). The kernel prepares that argument once per evaluation.
KERNELS = {
    "multi_normal_cholesky": ("sdp_multi_normal_cholesky_row", 2, ("vector", "vector", "matrix")),
    "multi_normal": ("sdp_multi_normal_row", 2, ("vector", "vector", "matrix")),
}


#: GLM row kernels: distribution -> (kernel function, type of the outcome's row, whether it takes a scale). The
#: linear predictor a + X[i] * b and the distribution become one autodiff node per row.
GLM_KERNELS = {
    "bernoulli_logit": ("sdp_glm_bernoulli_logit_row", "int", False),
    "poisson_log": ("sdp_glm_poisson_log_row", "int", False),
    "normal": ("sdp_glm_normal_row", "real", True),
}


class ShardRefusal(ValueError):
    """The rewrite cannot handle the program; the message says which statement and why (no data)."""


@dataclass(frozen=True)
class ShardProgram:
    """A derived shard program and the row split it was derived for."""

    text: str
    count_name: str
    row_variables: tuple[str, ...]
    hook_arguments: tuple[str, ...]  # the free variables passed to sdp_shard_rows (and sdp_row_lp after sdp_i)
    kernels: tuple[str, ...] = field(default=())  # per-row kernels used, by distribution name
    slice_rows: bool = False  # rows written as one-row slices (see derive)

    def matches(self, count_name: str, row_variables: Iterable[str]) -> bool:
        """Whether the program was derived for this split (same count and the same set of row variables)."""
        return count_name == self.count_name and set(row_variables) == set(self.row_variables)


# ----------------------------------------------------------------------------------------------- types


@dataclass(frozen=True)
class _Type:
    """A declared Stan type: array dimensions and base type with their size expressions (as text)."""

    array_sizes: tuple[str, ...]
    base: str
    base_sizes: tuple[str, ...]

    @property
    def unsized(self) -> str:
        base = _UNSIZED.get(self.base)
        if base is None:
            raise ShardRefusal(f"type {self.base} is not supported by the shard rewrite")
        if self.array_sizes:
            return f"array[{',' * (len(self.array_sizes) - 1)}] {base}"
        return base

    @property
    def leading_size(self) -> str | None:
        sizes = self.array_sizes + self.base_sizes
        return sizes[0] if sizes else None

    def row_element(self, slice_rows: bool = False) -> str:
        """The sized type of one row of a variable whose leading size is the row count (a local: constraints
        dropped); in slice mode the variable's own type with the row count replaced by 1."""
        if slice_rows:
            base = _UNSIZED.get(self.base)
            if base is None or self.base in ("cov_matrix", "corr_matrix", "cholesky_factor_cov",
                                             "cholesky_factor_corr"):
                raise ShardRefusal(f"a row-sized local of type {self.base} is not supported by the shard rewrite")
            sizes = list(self.array_sizes + self.base_sizes)
            sizes[0] = "1"
            k = len(self.array_sizes)
            base_text = base + (f"[{', '.join(sizes[k:])}]" if sizes[k:] else "")
            return f"array[{', '.join(sizes[:k])}] {base_text}" if k else base_text
        if self.array_sizes:
            rest = self.array_sizes[1:]
            base = self.base + (f"[{', '.join(self.base_sizes)}]" if self.base_sizes else "")
            return f"array[{', '.join(rest)}] {base}" if rest else base
        if self.base in ("vector", "row_vector"):
            return "real"
        if self.base == "matrix":
            return f"row_vector[{self.base_sizes[1]}]"
        if self.base in ("complex_vector", "complex_row_vector"):
            return "complex"
        if self.base == "complex_matrix":
            return f"complex_row_vector[{self.base_sizes[1]}]"
        raise ShardRefusal(f"a row-sized local of type {self.base} is not supported by the shard rewrite")


def _split_top(tokens: list[Token], start: int, end: int) -> list[str]:
    """Texts of the comma-separated items of tokens[start:end] (brackets balanced)."""
    items, current, depth = [], [], 0
    for tok in tokens[start:end]:
        if tok.text in "([{":
            depth += 1
        elif tok.text in ")]}":
            depth -= 1
        if tok.text == "," and depth == 0:
            items.append(" ".join(current))
            current = []
        else:
            current.append(tok.text)
    items.append(" ".join(current))
    return [i.strip() for i in items]


def _parse_type(tokens: list[Token], start: int, end: int) -> _Type:
    """The declared type of the declaration tokens[start..end] (the statement's tokens)."""
    pos = start
    array_sizes: tuple[str, ...] = ()
    if tokens[pos].text == "array":
        close = matching_bracket(tokens, pos + 1)
        array_sizes = tuple(_split_top(tokens, pos + 2, close))
        pos = close + 1
    base = tokens[pos].text
    if base == "tuple":
        raise ShardRefusal("tuple types are not supported by the shard rewrite")
    pos += 1
    if pos <= end and tokens[pos].text == "<":  # constraint: skip to the matching '>' at bracket depth 0
        depth, angle = 0, 0
        while pos <= end:
            text = tokens[pos].text
            if text in "([{":
                depth += 1
            elif text in ")]}":
                depth -= 1
            elif text == "<" and depth == 0:
                angle += 1
            elif text == ">" and depth == 0:
                angle -= 1
                if angle == 0:
                    pos += 1
                    break
            elif text in (">=", "<=") and depth == 0:
                pass
            pos += 1
    base_sizes: tuple[str, ...] = ()
    if pos <= end and tokens[pos].text == "[":
        close = matching_bracket(tokens, pos)
        base_sizes = tuple(_split_top(tokens, pos + 1, close))
    return _Type(array_sizes, base, base_sizes)


@dataclass
class _Var:
    name: str
    type: _Type
    data: bool  # declared in data or transformed data


def _declarations(tokens: list[Token], statements, data: bool) -> dict[str, _Var]:
    out = {}
    for start, end in statements:
        name = declared_name(tokens, start, end)
        if name is not None:
            out[name] = _Var(name, _parse_type(tokens, start, end), data)
    return out


# ----------------------------------------------------------------------------------------------- rewriting


def _text(tokens: list[Token], start: int, end: int) -> str:
    """Tokens start..end (inclusive) as Stan text."""
    return _join([tok.text for tok in tokens[start:end + 1]])


def _join(texts: list[str]) -> str:
    """Token texts as Stan text: single spaces, none inside brackets' edges, before ',' ';' or after a name
    that is called or indexed."""
    out = ""
    previous = ""
    for text in texts:
        tight = (not out or text in (",", ";", ")", "]") or previous in ("(", "[")
                 or (text in ("(", "[") and bool(IDENTIFIER.match(previous)) and previous not in _KEYWORDS))
        out += text if tight else " " + text
        previous = text
    return out


_KEYWORDS = {"for", "while", "if", "in", "return", "target"}  # followed by '(' without being called


class _Rewriter:
    """Rewrite the row statements of one program (see the module docstring)."""

    def __init__(self, tokens: list[Token], count: str, row_arrays: set[str], tainted: set[str],
                 variables: dict[str, _Var], slice_rows: bool = False):
        self.tokens = tokens
        self.count = count
        self.slice_rows = slice_rows
        self.row_arrays = row_arrays
        self.tainted = tainted
        self.variables = variables
        self.row_locals: dict[str, _Var] = {}
        self.kernels: list[str] = []
        self.sites = 0

    # -- expressions of vectorised statements ----------------------------------------------------------
    def vectorised(self, start: int, end: int, what: str) -> list[str]:
        """Texts of tokens start..end with each row variable v replaced by its row: v[sdp_i], or in slice mode
        the one-row slice v[sdp_i:sdp_i] with the row count replaced by 1 (what a row instance computes)."""
        toks = self.tokens
        names = names_in(toks, start, end)
        glm = any(n.endswith("_glm") or n.endswith("_glm_lpmf") or n.endswith("_glm_lpdf") for n in names)
        out: list[str] = []
        for pos in range(start, end + 1):
            text = toks[pos].text
            follows = toks[pos + 1].text if pos + 1 <= end else ""
            if text == self.count:
                if not self.slice_rows:
                    raise ShardRefusal(f"the row count {self.count} appears in {what}")
                out.append("1")
            elif text in self.row_arrays:
                if follows == "[":
                    raise ShardRefusal(f"the row variable {text} is indexed in {what}")
                out.append(f"{text}[{ROW_INDEX}:{ROW_INDEX}]" if glm or self.slice_rows else f"{text}[{ROW_INDEX}]")
            elif text in self.row_locals:
                if follows == "[" and not self.slice_rows:
                    raise ShardRefusal(f"the row-sized local {text} is indexed in {what}")
                out.append(text)
            elif text in self.tainted:
                raise ShardRefusal(f"{text}, which pools the rows, appears in {what}")
            else:
                out.append(text)
        return out

    # -- loop bodies -------------------------------------------------------------------------------------
    def loop_body(self, var: str, start: int, end: int, what: str) -> list[str]:
        """Texts of a loop body (tokens start..end) over the rows with loop variable ``var``: row variables must
        be indexed first by ``var``; a row-sized local ``mu[var]`` becomes ``mu`` (``mu[var, k]``: ``mu[k]``)."""
        toks = self.tokens
        declared_inside = {n for s, e in _all_statements(toks, start, end) if (n := declared_name(toks, s, e))}
        for s, e in _all_statements(toks, start, end):
            for pos in range(s, e + 1):
                if toks[pos].text in ASSIGN_OPERATORS and not (pos > s and toks[pos - 1].text == "target"):
                    target = _assignment_target(toks, s, pos)
                    if target is None or target not in declared_inside:
                        raise ShardRefusal(f"{what} assigns to a variable declared outside the loop")
        out: list[str] = []
        pos = start
        while pos <= end:
            text = toks[pos].text
            follows = toks[pos + 1].text if pos + 1 <= end else ""
            first_is_var = (follows == "[" and pos + 2 <= end and toks[pos + 2].text == var
                            and pos + 3 <= end and toks[pos + 3].text in (",", "]"))
            if text == self.count:
                if not self.slice_rows:
                    raise ShardRefusal(f"the row count {self.count} appears in {what}")
                out.append("1")
            elif text in self.row_arrays:
                if not first_is_var:
                    raise ShardRefusal(f"the row variable {text} is not indexed by the loop variable in {what}")
                out.append(text)
            elif text in self.row_locals:
                if not first_is_var:
                    raise ShardRefusal(f"the row-sized local {text} is not indexed by the loop variable in {what}")
                if self.slice_rows:  # the local has one row: its row var is row 1
                    out.extend([text, "[", "1"])
                    pos += 3
                    continue
                if toks[pos + 3].text == "]":
                    out.append(text)
                    pos += 4
                    continue
                out.extend([text, "["])
                pos += 4  # skip 'name [ var ,'
                continue
            elif text in self.tainted:
                raise ShardRefusal(f"{text}, which pools the rows, appears in {what}")
            else:
                out.append(text)
            pos += 1
        return out

    # -- per-row kernels ----------------------------------------------------------------------------------
    def kernel(self, texts: list[str], body_locals: set[str] = frozenset(), index: str = ROW_INDEX) -> list[str]:
        """A statement (texts, ending in ';') with its distribution replaced by a per-row kernel when one applies:
        ``y ~ dist(args);`` or ``target += dist_lpdf(y | args);`` with

        * a multivariate normal kernel (KERNELS): a data-free covariance argument, arguments of the declared types;
        * a GLM row kernel (GLM_KERNELS): the linear predictor ``a + X[i] * b`` (or ``X[i] * b + a``, ``X[i] * b``)
          with X a data matrix of rows, b a data-free vector variable, a (and a normal's scale) a data-free scalar
          variable or a number.

        ``index`` is the row's index variable (sdp_i, or the loop variable in a loop over the rows)."""
        if self.slice_rows:
            return texts
        toks = tokenize(" ".join(texts))
        words = [t.text for t in toks]
        if "~" in words:
            tilde = words.index("~")
            if len(words) < tilde + 4 or words[tilde + 2] != "(" or words[-2] != ")" or words[-1] != ";":
                return texts
            close = matching_bracket(toks, tilde + 2)
            if close != len(words) - 2:
                return texts  # truncation or trailing text
            dist = words[tilde + 1]
            args = [_join(words[:tilde])] + _split_top(toks, tilde + 3, close)
        elif words[:2] == ["target", "+="] and len(words) > 4 and words[3] == "(" and words[-2] == ")":
            call = words[2]
            if matching_bracket(toks, 3) != len(words) - 2:
                return texts
            if not call.endswith(("_lpdf", "_lupdf", "_lpmf", "_lupmf")) or "|" not in words:
                return texts
            dist = call.rsplit("_", 1)[0]
            bar = words.index("|")
            args = [_join(words[4:bar])] + _split_top(toks, bar + 1, len(words) - 2)
        else:
            return texts
        excluded = self.tainted | set(self.row_locals) | set(body_locals) | {ROW_INDEX, index}
        if dist in GLM_KERNELS:
            return self._glm(dist, args, excluded, index) or texts
        if dist not in KERNELS:
            return texts
        function, prepared, types = KERNELS[dist]
        if len(args) != len(types):
            return texts
        for arg, expected in zip(args, types):
            if self._type_of(arg, index) != expected:
                return texts
        prepared_names = {t.text for t in tokenize(args[prepared]) if IDENTIFIER.match(t.text)}
        if prepared_names & excluded:
            return texts
        # fixed: y and mu are data or data-free, the same autodiff variables for every row (direct gradients)
        fixed = all(self._data_or_data_free(arg, excluded, index) for arg in args[:prepared])
        self.sites += 1
        if dist not in self.kernels:
            self.kernels.append(dist)
        return ["target", "+=", f"{function}({self.sites}, {int(fixed)}, {', '.join(args)})", ";"]

    def _data_or_data_free(self, arg: str, excluded: set[str], index: str) -> bool:
        """Whether an expression reads only data (with the row index) or no row-dependent name at all."""
        names = {t.text for t in tokenize(arg) if IDENTIFIER.match(t.text)}
        if not names & excluded:
            return True
        return all(n in (ROW_INDEX, index) or (n in self.variables and self.variables[n].data
                                               and n not in self.row_locals) for n in names)

    def _glm(self, dist: str, args: list[str], excluded: set[str], index: str) -> list[str] | None:
        function, outcome, scale = GLM_KERNELS[dist]
        if len(args) != (3 if scale else 2) or self._type_of(args[0], index) != outcome:
            return None
        words = [t.text for t in tokenize(args[1])]
        rows = [w for w in words if w in self.row_arrays]
        if len(rows) != 1:
            return None
        x = rows[0]
        at = words.index(x)
        if words[at:at + 5] != [x, "[", index, "]", "*"] or at + 5 >= len(words):
            return None
        b = words[at + 5]
        rest = words[:at] + words[at + 6:]
        if rest == []:
            a = "0"
        elif len(rest) == 2 and rest[0] == "+":
            a = rest[1]
        elif len(rest) == 2 and rest[1] == "+" and at == 2:
            a = rest[0]
        else:
            return None
        if self._type_of(f"{x}[{index}]", index) != "row_vector" or self._type_of(b, index) != "vector" \
                or b in excluded or not self._scalar(a, excluded):
            return None
        if scale and not self._scalar(args[2], excluded):
            return None
        if dist not in self.kernels:
            self.kernels.append(dist)
        self.sites += 1
        call = [str(self.sites), args[0], f"{x}[{index}]", a, b] + ([args[2]] if scale else [])
        return ["target", "+=", f"{function}({', '.join(call)})", ";"]

    def _scalar(self, arg: str, excluded: set[str]) -> bool:
        """Whether ``arg`` is a number or a data-free scalar variable."""
        toks = [t.text for t in tokenize(arg)]
        if len(toks) == 2 and toks[0] == "-":
            toks = toks[1:]
        if len(toks) != 1:
            return False
        if not IDENTIFIER.match(toks[0]):
            return toks[0][0].isdigit() or toks[0][0] == "."
        var = self.variables.get(toks[0])
        return (var is not None and toks[0] not in excluded and not var.type.array_sizes
                and var.type.base in ("real", "int"))

    def _type_of(self, arg: str, index: str = ROW_INDEX) -> str | None:
        """The unsized type of a kernel argument when it is a plain variable, or a row of a row array."""
        toks = [t.text for t in tokenize(arg)]
        if len(toks) == 1 and toks[0] in self.variables:
            return _UNSIZED.get(self.variables[toks[0]].type.base) if not self.variables[toks[0]].type.array_sizes \
                else None
        if len(toks) == 4 and toks[1:] == ["[", index, "]"] and toks[0] in self.row_arrays:
            t = self.variables[toks[0]].type
            if len(t.array_sizes) == 1:
                return _UNSIZED.get(t.base)
            if not t.array_sizes and t.base == "matrix":
                return "row_vector"
            if not t.array_sizes and t.base in ("vector", "row_vector"):
                return "real"
        return None


def _is_increment(words: list[str]) -> bool:
    """Whether a statement only increments the target: ``lhs ~ dist(...)`` or ``target += expr`` with no other
    assignment and no read of target()."""
    if words[0] in ("if", "while", "for", "profile", "{", "print", "reject", "fatal_error"):
        return False
    if words[:2] == ["target", "+="]:
        rest = words[2:]
    elif "~" in words:
        rest = words
    else:
        return False
    return not any(w in ASSIGN_OPERATORS for w in rest) and "target" not in rest


def _all_statements(tokens: list[Token], start: int, end: int) -> list[tuple[int, int]]:
    """Every simple statement inside tokens start..end, descending into braces (approximate, for assignments)."""
    out = []
    pos = start
    while pos <= end:
        s = pos
        while pos <= end and tokens[pos].text not in (";", "{", "}"):
            if tokens[pos].text in "([":
                pos = matching_bracket(tokens, pos)
            pos += 1
        if pos <= end and tokens[pos].text == ";":
            out.append((s, pos))
        pos += 1
    return out


def _assignment_target(tokens: list[Token], start: int, op: int) -> str | None:
    j = op - 1
    depth = 0
    while j >= start and (depth > 0 or tokens[j].text == "]"):
        if tokens[j].text in ")]}":
            depth += 1
        elif tokens[j].text in "([{":
            depth -= 1
        j -= 1
    return tokens[j].text if j >= start and IDENTIFIER.match(tokens[j].text) else None


# ----------------------------------------------------------------------------------------------- derive


def derive(canonical: str, count_name: str, row_variables: Iterable[str], slice_rows: bool = False
           ) -> ShardProgram:
    """The shard program of ``canonical`` (stanc's canonical printing, comments stripped) for a row split.

    ``slice_rows``: write each row as a one-row slice (``y[sdp_i:sdp_i]``, the row count as 1) instead of an
    element (``y[sdp_i]``): every expression keeps the type it has in the program, so this form type-checks
    where the element form does not (e.g. the GLM functions, which take a matrix), at some cost in speed.

    Raises ShardRefusal (a message naming the statement and the reason, never data) when the rewrite does not
    apply; the caller then uses one instance per row.
    """
    row_variables = tuple(row_variables)
    tokens = tokenize(canonical)
    blocks = program_blocks(tokens)
    if "model" not in blocks:
        raise ShardRefusal("the program has no model block")
    if any(t.text.startswith(PREFIX) for t in tokens if IDENTIFIER.match(t.text)):
        raise ShardRefusal(f"the program uses names starting with {PREFIX}, which the rewrite reserves")

    def block_statements(name: str) -> list[tuple[int, int]]:
        return statements_in(tokens, *blocks[name]) if name in blocks else []

    tdata_st = block_statements("transformed data")
    tparam_st = block_statements("transformed parameters")
    variables = {**_declarations(tokens, block_statements("data"), True), **_declarations(tokens, tdata_st, True),
                 **_declarations(tokens, block_statements("parameters"), False),
                 **_declarations(tokens, tparam_st, False)}
    if count_name not in variables:
        raise ShardRefusal(f"the row count {count_name} is not declared")
    tainted = _rows_reach(tokens, tdata_st, tparam_st, {count_name, *row_variables})
    rewriter = _Rewriter(tokens, count_name, set(row_variables), tainted, variables, slice_rows)
    td = _row_transformed_data(rewriter, tdata_st)
    split = _split_model(rewriter, block_statements("model"))
    rows = [declaration for name, declaration in td.per_row.items() if name in td.needed_by(split.rows)] + split.rows
    for span in split.outer[split.first_row:split.last_row]:
        if declared_name(tokens, *span) is None:
            raise ShardRefusal(f"the data-free statement '{_text(tokens, *span)[:57]}' lies between two row "
                               "statements")
    # Free variables of the row statements, in order of first use.
    arguments: list[str] = []
    for statement in rows:
        for tok in tokenize(statement):
            if tok.text in variables and tok.text not in rewriter.row_locals and tok.text not in arguments:
                arguments.append(tok.text)
    params = [("data " if variables[name].data else "") + f"{variables[name].type.unsized} {name}"
              for name in arguments]
    functions = [_KERNEL_DECLARATIONS[k] for k in rewriter.kernels]
    functions.append(f"void {ROW_FUNCTION}(int {ROW_INDEX}{''.join(', ' + p for p in params)}) {{")
    functions += ["  " + s for s in rows]
    functions.append("}")
    functions.append(f"void {HOOK}({', '.join(params)});")
    text = _assemble(canonical, tokens, blocks, functions, split, td.kept, f"{HOOK}({', '.join(arguments)});")
    return ShardProgram(text=text, count_name=count_name, row_variables=row_variables,
                        hook_arguments=tuple(arguments), kernels=tuple(rewriter.kernels), slice_rows=slice_rows)


#: the C++ per-row kernels' Stan declarations, by the likelihood they replace
_KERNEL_DECLARATIONS = {
    "multi_normal_cholesky": "real sdp_multi_normal_cholesky_row(int site, int fixed, vector y, vector mu, "
                             "matrix L);",
    "multi_normal": "real sdp_multi_normal_row(int site, int fixed, vector y, vector mu, matrix Sigma);",
    "bernoulli_logit": "real sdp_glm_bernoulli_logit_row(int site, int y, row_vector x, real alpha, vector beta);",
    "poisson_log": "real sdp_glm_poisson_log_row(int site, int y, row_vector x, real alpha, vector beta);",
    "normal": "real sdp_glm_normal_row(int site, real y, row_vector x, real alpha, vector beta, real sigma);",
}


def _rows_reach(tokens: list[Token], tdata_st: list[tuple[int, int]], tparam_st: list[tuple[int, int]],
                tainted: set[str]) -> set[str]:
    """The names that read the rows: the row count, the row variables and the transformed data computed from
    them. Refuses transformed parameters that read the rows."""
    td_declared = {n for s in tdata_st if (n := declared_name(tokens, *s))}
    spread_taint(tokens, tdata_st, td_declared, tainted)
    tp_declared = {n for s in tparam_st if (n := declared_name(tokens, *s))}
    tp_before = set(tainted)
    spread_taint(tokens, tparam_st, tp_declared, tainted)
    if tainted - tp_before:
        raise ShardRefusal(f"the transformed parameter(s) {', '.join(sorted(tainted - tp_before))} read the rows")
    for start, end in tparam_st:
        if names_in(tokens, start, end) & tainted:
            raise ShardRefusal("a transformed parameters statement reads the rows")
    return tainted


@dataclass
class _RowTransformedData:
    """The transformed data statements kept as they are, and those computed per row in the row function."""

    kept: list[tuple[int, int]]
    per_row: dict[str, str]  # name -> its per-row declaration
    uses: dict[str, set[str]]  # name -> the per-row transformed data its value reads

    def needed_by(self, rows: list[str]) -> set[str]:
        """The per-row transformed data the row statements read, directly or through one another."""
        needed = {tok.text for statement in rows for tok in tokenize(statement)} & set(self.per_row)
        while True:
            more = set().union(*(self.uses[n] for n in needed)) - needed if needed else set()
            if not more:
                return needed
            needed |= more


def _row_transformed_data(rewriter: _Rewriter, tdata_st: list[tuple[int, int]]) -> _RowTransformedData:
    """Transformed data that read the rows are computed per row in the row function (from the row's own data, as
    a row instance would), never over the shard's rows: what pools rows cannot pool them there. Each must be
    declared with its value and sized by the row count; the others that read rows are dropped from the
    transformed data, and a row statement that uses one is refused later. Registers the per-row ones as row
    locals of ``rewriter``."""
    tokens, variables = rewriter.tokens, rewriter.variables
    out = _RowTransformedData([], {}, {})
    for start, end in tdata_st:
        if not names_in(tokens, start, end) & rewriter.tainted:
            out.kept.append((start, end))
            continue
        name = declared_name(tokens, start, end)
        words = [t.text for t in tokens[start:end + 1]]
        if name is None or variables[name].type.leading_size != rewriter.count or "=" not in words:
            continue
        eq = start + words.index("=")
        try:
            init = rewriter.vectorised(eq + 1, end - 1, f"the transformed data of {name}")
        except ShardRefusal:
            continue
        out.per_row[name] = _join([variables[name].type.row_element(rewriter.slice_rows), name, "="] + init + [";"])
        out.uses[name] = names_in(tokens, eq + 1, end - 1) & set(out.per_row)
        rewriter.row_locals[name] = variables[name]
    return out


@dataclass
class _ModelSplit:
    """The model block split: the statements kept outside the row function (in order), the row function's
    statements, and where the row statements began and ended among the kept ones."""

    outer: list[tuple[int, int]]
    rows: list[str]
    first_row: int
    last_row: int


def _split_model(rewriter: _Rewriter, model_st: list[tuple[int, int]]) -> _ModelSplit:
    """Separate the model statements that read the rows (rewritten for one row) from the data-free ones."""
    tokens, variables, count_name = rewriter.tokens, rewriter.variables, rewriter.count
    outer: list[tuple[int, int]] = []
    rows: list[str] = []
    first_row = last_row = None
    for start, end in model_st:
        words = [t.text for t in tokens[start:end + 1]]
        name = declared_name(tokens, start, end)
        row_dependent = bool(names_in(tokens, start, end) & (rewriter.tainted | set(rewriter.row_locals)))
        statement = _text(tokens, start, end)
        short = statement if len(statement) <= 60 else statement[:57] + "..."
        if not row_dependent:
            if removable_statement(tokens, start, end, rewriter.tainted):
                continue
            outer.append((start, end))
            if name is not None:
                variables[name] = _Var(name, _parse_type(tokens, start, end), False)
            continue
        if first_row is None:
            first_row = len(outer)
        if name is not None:  # a row-sized local: vector[N] mu = ...;
            var = _Var(name, _parse_type(tokens, start, end), False)
            if var.type.leading_size != count_name or "=" not in words:
                raise ShardRefusal(f"the model statement '{short}' reads the rows but is not a row-sized local "
                                   "with an initial value")
            eq = start + words.index("=")
            element = var.type.row_element(rewriter.slice_rows)
            rewriter.row_locals[name] = var
            init = rewriter.vectorised(eq + 1, end - 1, f"'{short}'")
            rows.append(_join([element, name, "="] + init + [";"]))
        elif words[0] == "for":
            rows.append(_row_loop(rewriter, words, start, end, short))
        elif _is_increment(words):
            texts = rewriter.vectorised(start, end, f"'{short}'")
            rows.append(_join(rewriter.kernel(texts)))
        else:
            raise ShardRefusal(f"the model statement '{short}' reads the rows in a way the rewrite does not handle")
        last_row = len(outer)
    if first_row is None or last_row is None:
        raise ShardRefusal("no model statement reads the rows")
    return _ModelSplit(outer, rows, first_row, last_row)


def _row_loop(rewriter: _Rewriter, words: list[str], start: int, end: int, short: str) -> str:
    """``for (n in 1 : N) { body }`` as the body for the single row ``n = sdp_i``."""
    tokens = rewriter.tokens
    if not (len(words) > 9 and words[1] == "(" and words[3] == "in"
            and words[4:8] == ["1", ":", rewriter.count, ")"] and words[8] == "{"):
        raise ShardRefusal(f"the loop '{short}' reads the rows but is not a loop over 1 : {rewriter.count}")
    var = words[2]
    body_start, body_end = start + 9, end - 1
    body_locals = {n for s, e in _all_statements(tokens, body_start, body_end) if (n := declared_name(tokens, s, e))}
    body = rewriter.loop_body(var, body_start, body_end, f"'{short}'")
    body_text = _kernels_in(rewriter, body, body_locals | {var}, var)
    return _join(["{", "int", var, "=", ROW_INDEX, ";"]) + " " + body_text + " }"


def _assemble(canonical: str, tokens: list[Token], blocks: dict, functions: list[str], split: _ModelSplit,
              td_kept: list[tuple[int, int]], hook_call: str) -> str:
    """The shard program's text: the functions (with the row function), the blocks up to the model block
    unchanged except the transformed data that read rows, and the model block with the hook call where the row
    statements were."""
    model_lines = []
    for pos, span in enumerate(split.outer):
        if pos == split.last_row:
            model_lines.append(hook_call)
        model_lines.append(canonical[tokens[span[0]].start:tokens[span[1]].end])
    if split.last_row == len(split.outer):
        model_lines.append(hook_call)
    head_end = tokens[blocks["model"][0] - 1].start  # the 'model' keyword
    head = canonical[:head_end]
    if "transformed data" in blocks:  # keep only the statements that do not read the rows
        td_open, td_close = blocks["transformed data"]
        td_text = "".join("  " + canonical[tokens[a].start:tokens[b].end] + "\n" for a, b in td_kept)
        head = (canonical[:tokens[td_open].end] + "\n" + td_text + canonical[tokens[td_close].start:head_end])
    if "functions" in blocks:
        insert = tokens[blocks["functions"][1]].start
        head = head[:insert] + "".join("  " + line + "\n" for line in functions) + head[insert:]
    else:
        head = "functions {\n" + "".join("  " + line + "\n" for line in functions) + "}\n" + head
    return head + "model {\n" + "".join("  " + line + "\n" for line in model_lines) + "}\n"


def _kernels_in(rewriter: _Rewriter, body: list[str], body_locals: set[str], index: str) -> str:
    """A loop body's texts with per-row kernels applied to its simple statements (in braces)."""
    out: list[str] = []
    statement: list[str] = []
    depth = 0
    for text in body:
        statement.append(text)
        if text in "([{":
            depth += 1
        elif text in ")]}":
            depth -= 1
        if (text == ";" and depth == 0) or (text == "}" and depth == 0):
            if text == ";" and statement[0] not in ("for", "while", "if", "{", "profile"):
                statement = rewriter.kernel(statement, body_locals, index)
            out.append(_join(statement))
            statement = []
    if statement:
        out.append(_join(statement))
    return " ".join(out)


def default_shard_program(canonical: str, slice_rows: bool = False) -> ShardProgram:
    """The shard program for the default split (row count ``N``, row variables the data declared with leading
    size N). Raises ShardRefusal when the rewrite does not apply."""
    declarations = parse_declarations(canonical, "data")
    if not any(d.name == "N" for d in declarations):
        raise ShardRefusal("the program declares no row count N")
    row_variables = [d.name for d in declarations if d.first_size is not None and d.first_size.strip() == "N"]
    return derive(canonical, "N", row_variables, slice_rows)
