"""Stan's runtime error text, shortened for people: no C++ function prefixes, the program line kept."""
from __future__ import annotations

import re

__all__ = ["clean_stan_message"]

_PREFIX = re.compile(r"^.*?Exception:\s*")
_NAMESPACE = re.compile(r"^\w+_model_namespace::\w+:\s*")
_LOCATION = re.compile(r"\s*\(in '([^']*)', line (\d+), column \d+ to (?:line \d+, )?column \d+\)")


def clean_stan_message(text: str) -> str:
    """``Error in bs_x: Exception: m_model_namespace::m_model: N is 0, but ... (in '/a/m.stan', line 1, column
    7 to column 22)`` becomes ``N is 0, but ... (m.stan, line 1)``."""
    message = " ".join(str(text).split())
    message = _PREFIX.sub("", message, count=1)
    message = _NAMESPACE.sub("", message)

    def located(match: re.Match) -> str:
        return f" ({match.group(1).rsplit('/', 1)[-1]}, line {match.group(2)})"

    return _LOCATION.sub(located, message).strip()
