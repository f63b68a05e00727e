"""Validation of a stage's config object, called from its ``__post_init__``.

``validate(obj, minimum=..., endpoints=...)`` raises ``FieldErrors`` naming every bad field at
once; ``config.build`` reports each one with its full path (``assembly.grace_s: must be >= 0,
got -5.0``), alongside the loader's own errors. Kept apart from ``config`` so that every stage
module can use it without importing the top-level config (which imports the stages).
"""

from __future__ import annotations

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


def parse_endpoint(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:4317`` for IPv6) -> (host, port). Raises ValueError."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not is_ascii_digits(port) or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return host.strip("[]"), int(port)


def _endpoint_ok(value: str) -> bool:
    try:
        parse_endpoint(value)
    except ValueError:
        return False
    return True


def validate(obj: Any, *, minimum: Mapping[str, float] | None = None,
             endpoints: Sequence[str] = ()) -> None:
    """Each field in ``minimum`` must be >= its bound; each field in ``endpoints`` must be
    ``HOST:PORT`` or empty (off)."""
    problems: dict[str, str] = {}
    for name, bound in (minimum or {}).items():
        value = getattr(obj, name)
        if not value >= bound:  # also catches nan
            problems[name] = f"must be >= {bound:g}, got {value!r}"
    for name in endpoints:
        value = getattr(obj, name)
        if value and not _endpoint_ok(value):
            problems[name] = f"expected HOST:PORT (or empty to turn it off), got {value!r}"
    if problems:
        raise FieldErrors(problems)


class ConfigError(ValueError):
    """All problems found in a configuration, one per line, each with its path."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("invalid configuration:\n  " + "\n  ".join(errors))
        self.errors = errors


class StartupError(Exception):
    """A part cannot start for a reason its user must fix (a port in use, a store another
    process holds, a missing file): one line naming the endpoint, file or setting; serve
    exits 2 with it, without a traceback."""
