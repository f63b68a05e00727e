"""The configuration reference, rendered from the config dataclasses themselves.

``otel-eval config`` prints every key with its default and the comment written above the
field in the source, as a YAML file one can edit; secrets (fields declared ``repr=False``)
are printed without their values, as the collector's ``print-config`` redacts them.
docs/configuration.md embeds the same text and a test keeps the two equal, so the reference
cannot drift from the code.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from typing import Any

import yaml

from otel_eval.app.config import Config
from otel_eval.store.base import redact_url

_FIELD = re.compile(r"^\s+([a-z_][a-z0-9_]*)\s*:")


def _field_comments(cls: type) -> dict[str, list[str]]:
    """Comment lines directly above each field in the class body."""
    out: dict[str, list[str]] = {}
    pending: list[str] = []
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return out
    for line in lines[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        m = _FIELD.match(line)
        if m and not stripped.startswith(("def ", "@")):
            out[m.group(1)] = pending
        pending = []
    return out


def _scalar(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _redacted(value: Any) -> Any:
    """A secret field's value as printed: tokens by name, a URL without its password, any
    other text set as ``<redacted>`` (unset stays unset)."""
    if isinstance(value, dict):
        return {k: "<redacted>" for k in value}
    if isinstance(value, str) and value:
        return redact_url(value) if "://" in value else "<redacted>"
    return value


def _render(obj: Any, indent: int, lines: list[str]) -> None:
    comments = _field_comments(type(obj))
    hints = typing.get_type_hints(type(obj))
    pad = "  " * indent
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        for c in comments.get(f.name, []):
            lines.append(f"{pad}# {c}".rstrip())
        if not f.repr:  # secrets: a token's name, a URL without its password, no value
            value = _redacted(value)
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}{f.name}:")
            _render(value, indent + 1, lines)
        else:
            kind = getattr(hints.get(f.name), "__name__", None)
            suffix = f"  # {kind}" if kind in ("dict",) else ""
            lines.append(f"{pad}{f.name}: {_scalar(value)}{suffix}")


def reference(config: Config | None = None) -> str:
    """The full configuration as commented YAML (defaults unless ``config`` is given)."""
    lines: list[str] = []
    cfg = config or Config()
    top_comments = _field_comments(Config)
    for f in dataclasses.fields(cfg):
        for c in top_comments.get(f.name, []):
            lines.append(f"# {c}")
        lines.append(f"{f.name}:")
        _render(getattr(cfg, f.name), 1, lines)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
