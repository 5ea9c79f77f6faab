"""Input checks of the privacy package: every message names the input to change.

Shared by the closed forms (``gaussian``), the evaluation (``evaluation``) and the calibration (``accounting``).
"""
from __future__ import annotations

import math
import numbers
import operator
from typing import Any


def check_real(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number (got {value!r})")
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"{name} must be a number, not NaN")
    return value


def check_epsilon(value: Any, name: str = "epsilon") -> float:
    value = check_real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r}); pass a positive {name}")
    return value


def check_delta(value: Any, name: str = "delta") -> float:
    value = check_real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r}); typical values are "
                         f"well below 1/N")
    return value


def check_count(value: Any, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})")
    try:
        count = operator.index(value)
    except TypeError:
        if isinstance(value, numbers.Real) and float(value).is_integer():
            count = int(float(value))
        else:
            raise ValueError(f"{name} must be an integer >= {minimum} (got {value!r})") from None
    if count < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum} (got {count})")
    return count


def check_positive(value: Any, name: str) -> float:
    value = check_real(value, name)
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0 (got {value!r})")
    return value


def _check_open_fraction(value: Any, name: str) -> float:
    value = check_real(value, name)
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {value!r})")
    return value


def no_finite_noise_error(epsilon: float, delta: float, why: str = "") -> ValueError:
    extra = f" ({why})" if why else ""
    return ValueError(f"no finite noise level meets the budget epsilon={epsilon!r}, delta={delta!r}{extra}; "
                      f"increase epsilon or delta")


def check_delta_for_rows(delta: float, n_rows: int) -> str | None:
    """The delta rule for N rows: ``ValueError`` for delta >= 1/N, the text of a warning for delta > 1/(10 N),
    None otherwise. Each message says why in words.

    delta is the probability with which the guarantee may fail outright. A mechanism that publishes one whole row
    chosen at random is (0, 1/N)-DP, so any delta >= 1/N is met by a release that exposes a row; and one that
    publishes each row with probability delta meets (0, delta) while exposing N delta rows on average, which
    the warning threshold keeps below 0.1.
    """
    delta, n = check_delta(delta), check_count(n_rows, "N")
    if delta >= 1.0 / n:
        raise ValueError(
            f"delta = {delta:g} is not below 1/N = {1.0 / n:.3g} (N = {n:,} rows): a mechanism that publishes one "
            "whole row, chosen at random, meets such a guarantee, so it would protect no row.\n"
            f"Use a delta well below 1/N, at most 1/(10 N) = {0.1 / n:.3g} (e.g. {_round_down(0.01 / n):g}).")
    if delta > 0.1 / n:
        return (f"delta = {delta:g} is above 1/(10 N) = {0.1 / n:.3g} (N = {n:,} rows): a mechanism that publishes "
                f"each row with probability delta also meets this guarantee and would expose about N delta = "
                f"{n * delta:.2g} rows. Prefer delta <= 1/(10 N) (e.g. {_round_down(0.01 / n):g}).")
    return None


def _round_down(x: float) -> float:
    """The largest power of ten at most ``x`` (a round example value)."""
    return 10.0 ** math.floor(math.log10(x))
