"""Input checks of the privacy package: every message names the input to change.

Shared by the closed forms (``gaussian``), the evaluation (``evaluation``) and the calibration (``accounting``).
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any


def _real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number (got {value!r})")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, not NaN")
    return value


def _check_epsilon(value: Any, name: str = "epsilon") -> float:
    value = _real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r}); pass a positive {name}")
    return value


def _check_delta(value: Any, name: str = "delta") -> float:
    value = _real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r}); typical values are "
                         f"well below 1/N")
    return value


def _check_count(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})")
    try:
        count = operator.index(value)
    except TypeError:
        if isinstance(value, numbers.Real) and float(value).is_integer():
            count = int(value)
        else:
            raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})") from None
    if count < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (got {count})")
    return count


def _check_positive(value: Any, name: str) -> float:
    value = _real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    return value


def _check_open_fraction(value: Any, name: str) -> float:
    value = _real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r})")
    return value


def _no_finite_noise(epsilon: float, delta: float, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"no finite noise level meets the budget epsilon={epsilon!r}, delta={delta!r}{extra}; "
                      f"increase epsilon or delta")
