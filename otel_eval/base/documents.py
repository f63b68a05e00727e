"""Checks for the JSON documents otel-eval ships and reads (model files): each names the
field that is wrong, so a bad file fails at start with the reason (a ValueError)."""

from __future__ import annotations

import math
from typing import Any

MAX_NAME_CHARS = 200


# The largest magnitude of a model file's number: far past what training writes (thousands),
# and small enough that no sum of 50,000 products of them overflows (inf - inf is NaN)
MAX_MAGNITUDE = 1e9


def finite_numbers(value: Any, n: int, where: str) -> tuple[float, ...]:
    """``value`` as ``n`` finite numbers of at most ``MAX_MAGNITUDE`` (a JSON list; booleans
    are not numbers)."""
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{where}: expected a list of {n} numbers")
    out = _plain_floats(value)
    if out is not None:
        return out
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int | float) or not (
                -MAX_MAGNITUDE <= v <= MAX_MAGNITUDE):  # NaN too; a 400-digit int is no float
            raise ValueError(f"{where}: {v!r:.40} is not a finite number of at most "
                             f"{MAX_MAGNITUDE:g}")
    return tuple(float(v) for v in value)


def _plain_floats(value: list[Any]) -> tuple[float, ...] | None:
    """``value`` as floats when every item is a plain int or float within ``MAX_MAGNITUDE``,
    checked in C (a model file holds ~60,000 numbers: the loop above, in Python, was a
    fifth of ``eval``'s start); None otherwise, and the loop names the first bad item.
    It accepts only what the loop accepts: exact types (no bool), no int past a float
    (OverflowError), no infinity (min/max) and no NaN (which min/max may step over, but
    which makes the sum NaN)."""
    kinds = {*map(type, value)}
    if kinds == {float}:
        out = tuple(value)
    elif kinds <= {float, int}:
        try:
            out = tuple(map(float, value))
        except OverflowError:
            return None
    else:
        return None
    if out and not (min(out) >= -MAX_MAGNITUDE and max(out) <= MAX_MAGNITUDE
                    and not math.isnan(sum(out))):
        return None
    return out


def short_name(value: Any, where: str) -> str:
    """``value`` as a non-empty string of at most ``MAX_NAME_CHARS`` characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise ValueError(f"{where}: expected a non-empty string of at most {MAX_NAME_CHARS} "
                         "characters")
    return value


def short_names(values: list[Any], where: str) -> list[str]:
    """``short_name`` of each of ``values`` (a model's 20,000 text terms), checked in C when
    every one is a plain non-empty string short enough; else the first bad one is named."""
    if ({*map(type, values)} == {str} and all(values)
            and max(map(len, values)) <= MAX_NAME_CHARS):
        return list(values)
    return [short_name(v, where) for v in values]
