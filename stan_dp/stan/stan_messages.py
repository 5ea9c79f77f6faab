"""Stan's runtime error text, shortened for people: no C++ function prefixes, the program line kept; and
data values withheld from messages about private rows."""
from __future__ import annotations

import re

__all__ = ["clean_stan_message", "withhold_data_values"]

_PREFIX = re.compile(r"^.*?Exception:\s*")
_NAMESPACE = re.compile(r"^\w+_model_namespace::\w+:\s*")
_LOCATION = re.compile(r"\s*\(in '([^']*)', line (\d+), column \d+ to (?:line \d+, )?column \d+\)")
#: Stan's data-validation form "<variable>[<indices>] is <value>, but must be <constraint>"
_VALUE_CHECK = re.compile(r"\b(?P<name>[A-Za-z_][A-Za-z0-9_.]*)(?P<index>(?:\[[^\]]*\])*) is (?P<value>[^,]*?),"
                          r"\s*but must be\b")
WITHHELD = "(value and position withheld: data values may belong to private rows)"


def clean_stan_message(text: str) -> str:
    """``Error in bs_x: Exception: m_model_namespace::m_model: N is 0, but ... (in '/a/m.stan', line 1, column
    7 to column 22)`` becomes ``N is 0, but ... (m.stan, line 1)``."""
    message = " ".join(str(text).split())
    message = _PREFIX.sub("", message, count=1)
    message = _NAMESPACE.sub("", message)

    def located(match: re.Match) -> str:
        return f" ({match.group(1).rsplit('/', 1)[-1]}, line {match.group(2)})"

    return _LOCATION.sub(located, message).strip()


def withhold_data_values(text: str) -> str:
    """A Stan message about private data with the offending value and its position removed.

    ``y[3] is -1.5, but must be greater than or equal to 0`` becomes ``y (value and position withheld: ...) must
    be greater than or equal to 0``: the variable and the constraint stay (they are public:
    the program says them), the value and the row it sits in do not (an error message is easily pasted into a
    forum or a log, and it is not covered by any privacy budget)."""
    return _VALUE_CHECK.sub(lambda m: f"{m.group('name')} {WITHHELD} must be", str(text))
