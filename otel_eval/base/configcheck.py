"""Validation of a stage's config object, called from its ``__post_init__``.

``validate(obj, minimum=..., maximum=..., endpoints=...)`` raises ``FieldErrors`` naming every
bad field at once; ``config.build`` reports each one with its full path
(``assembly.grace_s: must be >= 0, got -5.0``), alongside the loader's own errors. Every bound
a field's comment documents is checked here, by the stage's own ``__post_init__``. Kept apart
from ``config`` so that every stage module can use it without importing the top-level config
(which imports the stages). ``ConfigError`` and ``parse_endpoint`` (the one ``HOST:PORT``
parser) live here for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any


class FieldErrors(ValueError):
    """Problems with fields of one config object: {field name: problem}."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in problems.items()))
        self.problems = dict(problems)


def is_ascii_digits(text: str) -> bool:
    """Only 0-9: ``str.isdigit`` also takes superscripts ("\\u00b2", which ``int``
    refuses) and Arabic-Indic digits (which ``int`` reads)."""
    return text.isascii() and text.isdigit()


def ascii_int(text: str, max_digits: int) -> int | None:
    """``text`` as a number when it is 1 to ``max_digits`` digits 0-9, else None: what a
    client or a span writes where a position, a page or a length goes (``int`` refuses
    "\u00b2" and more than 4,300 digits; either would raise out of the reader)."""
    # is_ascii_digits inlined: a span's every flattened OpenInference key position comes here
    return int(text) if len(text) <= max_digits and text.isascii() and text.isdigit() else None


def parse_endpoint(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4317`` for IPv6) -> (host, port). Raises ValueError."""
    host, sep, port = value.rpartition(":")
    if (not sep or not host or "/" in host or not is_ascii_digits(port)
            or not 0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _endpoint_ok(value: str) -> bool:
    try:
        parse_endpoint(value)
    except ValueError:
        return False
    return True


def _number_problem(value: Any, *, minimum: float | None, above: float | None,
                    maximum: float | None, finite: bool) -> str | None:
    # "not value >= bound", not "value < bound": nan fails every comparison
    if minimum is not None and not value >= minimum:
        return f"must be >= {minimum:g}, got {value!r}"
    if above is not None and not value > above:
        return f"must be > {above:g}, got {value!r}"
    if maximum is not None and not value <= maximum:
        return f"must be <= {maximum:g}, got {value!r}"
    if value != value:
        return f"must be a number, got {value!r}"
    if finite and value in (math.inf, -math.inf):
        return f"must be finite, got {value!r}"
    return None


def validate(obj: Any, *, minimum: Mapping[str, float] | None = None,
             above: Mapping[str, float] | None = None,
             maximum: Mapping[str, float] | None = None,
             finite: Sequence[str] = (), endpoints: Sequence[str] = (),
             values: Mapping[str, tuple[float, float]] | None = None,
             problems: Mapping[str, str] | None = None) -> None:
    """The bounds a stage's field comments document, each checked on its field: ``minimum``
    (>=), ``above`` (>), ``maximum`` (<=), ``finite`` (not infinite); nan fails every one. A
    field that is None (unset) is not checked. Each field in ``endpoints`` must be
    ``HOST:PORT`` or empty (off); each value of a mapping field in ``values`` within
    (lowest, highest), named ``field.KEY``. ``problems`` are the stage's own other checks.
    Raises ``FieldErrors`` naming every bad field at once."""
    found: dict[str, str] = dict(problems or {})
    lo, gt, hi = minimum or {}, above or {}, maximum or {}
    for name in dict.fromkeys([*lo, *gt, *hi, *finite]):
        value = getattr(obj, name)
        if value is None:
            continue
        problem = _number_problem(value, minimum=lo.get(name), above=gt.get(name),
                                  maximum=hi.get(name), finite=name in finite)
        if problem:
            found[name] = problem
    for name in endpoints:
        value = getattr(obj, name)
        if value and not _endpoint_ok(value):
            found[name] = f"expected HOST:PORT (or empty to turn it off), got {value!r}"
    for name, (lowest, highest) in (values or {}).items():
        for key, value in getattr(obj, name).items():
            problem = _number_problem(value, minimum=lowest, above=None, maximum=highest,
                                      finite=False)
            if problem:
                found[f"{name}.{key}"] = problem
    if found:
        raise FieldErrors(found)


class ConfigError(ValueError):
    """All problems found in a configuration, one per line, each with its path."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors))
        self.errors = errors


class StartupError(Exception):
    """A part cannot start for a reason its user must fix (a port in use, a store another
    process holds, a missing file): one line naming the endpoint, file or setting; serve
    exits 2 with it, without a traceback."""
