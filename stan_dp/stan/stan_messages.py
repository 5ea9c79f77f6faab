"""Stan's error text, shortened for people: stanc's compile errors led by the error itself, runtime errors
without C++ function prefixes (the program line kept), and data values withheld from messages about private
rows."""
from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["clean_stan_message", "stanc_error_text", "withhold_data_values"]

_PREFIX = re.compile(r"^.*?Exception:\s*")
_NAMESPACE = re.compile(r"^\w+_model_namespace::\w+:\s*")
_LOCATION = re.compile(r"\s*\(in '([^']*)', line (\d+), column \d+ to (?:line \d+, )?column \d+\)")


#: the first line of a located stanc error: "Syntax error in '/a/m.stan', line 2, column 21 to column 22, ...:"
_STANC_HEAD = re.compile(r"^(?P<kind>[A-Za-z ]*error) in '(?P<path>[^']*)', (?P<where>line \d+, column \d+)[^:]*:?\s*$")


def stanc_error_text(output: str, file_name: str, toolchain: str) -> str:
    """stanc's error ``output`` for ``file_name`` led by one line saying what and where: ``Syntax error in m.stan,
    line 2, column 21: ";" expected after variable declaration.``, then stanc's excerpt of the program, then what
    to do and which toolchain rejected it. Output of another shape is kept whole, after a line naming the file."""
    lines = output.strip().splitlines()
    head = _STANC_HEAD.match(lines[0]) if lines else None
    if head is None:
        return f"stanc rejected {file_name} (toolchain: {toolchain}):\n{output.strip()}"
    rules = [i for i, line in enumerate(lines) if line.strip().startswith("---")]
    after = rules[-1] + 1 if rules else 1
    message = " ".join(line.strip() for line in lines[after:] if line.strip())
    excerpt = "\n".join(lines[rules[0]:rules[-1] + 1]) if len(rules) >= 2 else ""
    first = f"{head['kind']} in {file_name}, {head['where']}: {message}"
    fix = f"Fix the program there and run again (toolchain: {toolchain})."
    return "\n".join(part for part in (first, excerpt, fix) if part)


def clean_stan_message(text: str) -> str:
    """``Error in bs_x: Exception: m_model_namespace::m_model: N is 0, but ... (in '/a/m.stan', line 1, column
    7 to column 22)`` becomes ``N is 0, but ... (m.stan, line 1)``."""
    message = " ".join(str(text).split())
    message = _PREFIX.sub("", message, count=1)
    message = _NAMESPACE.sub("", message)

    def located(match: re.Match) -> str:
        return f" ({match.group(1).rsplit('/', 1)[-1]}, line {match.group(2)})"

    return _LOCATION.sub(located, message).strip()


# ------------------------------------------------------------------------------------------ private data values
#: what replaces the values and positions of a message about data
WITHHELD = "(values and positions withheld: data values may belong to private rows)"

#: the constraint kinds of Stan's data checks, each recognised by a phrase of Stan's text and then said in the
#: package's own fixed words. A recognised message keeps ONLY the variable's name, one of these texts and the
#: program location: Stan's own text around them (values, sums, norms, indices, neighbouring entries, bounds
#: that may be row data themselves) is dropped whole, whatever its shape in this or a later Stan version.
_KINDS: tuple[tuple[re.Pattern, str], ...] = tuple((re.compile(pattern), words) for pattern, words in (
    (r"is not a valid simplex", "is not a valid simplex (entries must be non-negative and sum to one)"),
    (r"is not a valid positive_ordered vector",
     "is not a valid positive_ordered vector (entries must be positive and strictly increasing)"),
    (r"is not a valid ordered vector", "is not a valid ordered vector (entries must be strictly increasing)"),
    (r"is not a valid sorted vector", "is not a valid sorted vector (entries must not decrease)"),
    (r"is not a valid unit vector", "is not a valid unit vector (its squared entries must sum to one)"),
    (r"is not a valid correlation matrix",
     "is not a valid correlation matrix (symmetric, positive definite, unit diagonal)"),
    (r"is not a valid column stochastic matrix",
     "is not a valid column stochastic matrix (non-negative columns that sum to one)"),
    (r"is not a valid row stochastic matrix",
     "is not a valid row stochastic matrix (non-negative rows that sum to one)"),
    (r"is not symmetric", "is not symmetric"),
    (r"is not positive semi-definite", "is not positive semi-definite"),
    (r"is not positive definite", "is not positive definite"),
    (r"LDLT decomposition of .* failed", "is not positive definite"),
    (r"is not lower triangular", "is not lower triangular (entries above the diagonal must be zero)"),
    (r"does not sum to zero", "does not sum to zero"),
    (r"\shas size\s.*but must have a non-zero size", "must have a non-zero size"),
))
#: Stan's scalar form "<name>[<indices>] is <value>, but must be <constraint>"
_SCALAR = re.compile(r"\sis\s.*?,\s*but must be\s+(?P<constraint>.*)$")
#: the words a scalar constraint may keep (the bound itself, a number that may be row data, never)
_CONSTRAINT_WORDS = frozenset("greater less than or equal to in the interval positive negative nonnegative "
                              "non finite not nan".split())
#: a variable name (with any indices, which are dropped) just before the kind's phrase
_NAME_BEFORE = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:\[[^\]]*\]|\([^)]*\))*\s*$")
#: a program location, cleaned "(m.stan, line 4)" or raw "(in '/a/m.stan', line 4, column 2 to column 9)"
_WHERE = re.compile(r"\s*\((?:in )?'?[^()']*\.stan'?, line \d+[^()]*\)")
#: Stan messages about data that carry no value, only names and declared sizes (public): kept whole
_VALUE_FREE = re.compile(r"^(mismatch in (number )?dimensions? declared and found in context|variable does not "
                         r"exist|int variable contained non-int values)")
#: a number, or inf / nan, as Stan prints values
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![A-Za-z_])"
                     r"|(?<![A-Za-z0-9_])[-+]?(?:inf(?:inity)?|nan)(?![A-Za-z0-9_])", re.IGNORECASE)
#: indices after a name: the position of a value, i.e. which row
_INDEX = re.compile(r"(?<=[A-Za-z0-9_])(?:\[[^\]]*\])+")


def _constraint_words(constraint: str) -> str:
    """'greater than or equal to 0.000000' -> 'greater than or equal to its declared bound'; only whitelisted words
    survive (a bound can be another row's data, e.g. ``upper=n[i]``)."""
    words = []
    for word in re.findall(r"[A-Za-z_]+|[^A-Za-z_\s]+", constraint):
        if word.lower() not in _CONSTRAINT_WORDS:
            break
        words.append(word.lower())
    if not words:
        return "satisfy its declared constraint"
    if words[-1] in ("to", "than"):
        words.append("its declared bound")
    elif words[-1] == "interval":
        words.append("of its declared bounds")
    return " ".join(words)


def _strip_values(text: str) -> str:
    """``text`` without numbers (inf, nan included) and indices; words kept."""
    text = _INDEX.sub("", text)
    text = _NUMBER.sub("...", text)
    return " ".join(text.split())


def withhold_data_values(text: str, declared: Mapping[str, str] | None = None) -> str:
    """A Stan message about data with every data value and position removed (a whitelist: what is kept is named).

    ``y[3] is -1.5, but must be greater than or equal to 0 (m.stan, line 4)`` becomes ``y must be greater than
    or equal to its declared bound (values and positions withheld: ...) (m.stan, line 4)``, and
    ``s[3] is not a valid simplex. sum(s[3]) = 1.04, but should be 1`` becomes ``s is not a valid simplex
    (entries must be non-negative and sum to one) (values ... withheld ...)``. A message of a recognised kind
    (every vector and matrix constraint of the data block: simplex, ordered, positive_ordered, unit_vector,
    cholesky_factor_corr / _cov, corr_matrix, cov_matrix, sum_to_zero, stochastic matrices; scalar bounds and
    the not-NaN / finite checks) keeps the variable's name, the constraint kind in the package's words and the
    program location, nothing of Stan's text around them. The messages about declared sizes and missing
    variables (names and sizes, all public) stay whole. Any other message (e.g. a ``reject`` in transformed data)
    keeps its words and loses every number and index.

    Why: the values and the row they sit in are private; an error message is easily pasted into a forum or a
    log, and it is covered by no privacy budget. The variable, the constraint and the line are the program's.

    ``declared``: the program's data declarations, name -> Stan type (``vector<lower=0>[N]``, ``array[N]
    cholesky_factor_corr[2]``); a message about one of them also says its declared type (program text, public),
    so that a check Stan reports in other words (a ``cholesky_factor_corr`` row that is not a unit vector) still
    names the constraint the user wrote."""
    message = clean_stan_message(text)
    where = "".join(m.group(0) for m in _WHERE.finditer(message))
    body = _WHERE.sub("", message).strip()
    if _VALUE_FREE.match(body):
        return message
    for pattern, words in _KINDS:
        found = pattern.search(body)
        if found is not None:
            return _rebuild(body[:found.start()], words, where, declared)
    scalar = _SCALAR.search(body)
    if scalar is not None:
        return _rebuild(body[:scalar.start()], "must be " + _constraint_words(scalar.group("constraint")), where,
                        declared)
    stripped = _strip_values(body)
    return stripped + where if stripped == body else f"{stripped} {WITHHELD}{where}"


def _rebuild(before: str, kind: str, where: str, declared: Mapping[str, str] | None) -> str:
    """'<what came before the name, without values> <name> [(declared <type>)] <kind> WITHHELD<where>'."""
    named = _NAME_BEFORE.search(before)
    name = named.group("name") if named is not None else "a data variable"
    lead = _strip_values(before[:named.start()] if named is not None else before)
    if declared and name in declared:
        name = f"{name} (declared {' '.join(str(declared[name]).split())})"
    return " ".join(part for part in (lead, name, kind, WITHHELD) if part) + where
