"""Prompt templates: packaged files under ``prompts/`` (``$name`` placeholders), each
replaceable by a file of the same name in ``JudgeConfig.prompt_dir``.

Templates are checked when loaded: an override using an unknown placeholder fails at startup,
not on the first trace.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from otel_eval.evaluate.judge.schemas import Schema

NAMES = ("system", "frame", "combined", "step", "trace", "process", "outcome", "session",
         "rubric_generate", "rubric_verify", "repair", "issue_name", "issue_merge")
PLACEHOLDERS = ("instructions", "task", "trajectory", "final_output", "findings", "request",
                "schema", "reply", "error", "stragglers")


def _shape(schema: Any, defs: dict[str, Any]) -> str:
    """The shape of ``schema``; a ``{"$ref": "#/$defs/NAME"}`` is shown as ``defs[NAME]``."""
    if "$ref" in schema:
        return _shape(defs[schema["$ref"].removeprefix("#/$defs/")], defs)
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = ",".join(f'"{k}":{_shape(v, defs)}' for k, v in schema["properties"].items())
        return "{" + props + "}"
    if kind == "array":
        return f"[{_shape(schema['items'], defs)},...]"
    if kind == "number" and "maximum" in schema:
        return f"{schema.get('minimum', 0)}..{schema['maximum']}"
    return {"string": "str", "integer": "int", "boolean": "true|false"}.get(str(kind), "any")


def schema_text(schema: Schema) -> str:
    """A compact shape of the reply (the full JSON schema travels as response_format)."""
    return _shape(schema, schema.get("$defs", {}))


class Prompts:
    """The loaded templates, by name; ``render(name, **values)`` substitutes placeholders."""

    def __init__(self, prompt_dir: str = "") -> None:
        packaged = resources.files("otel_eval.evaluate.judge") / "prompts"
        self._templates: dict[str, Template] = {}
        self.sources: dict[str, str] = {}  # name -> "package" | path of the override
        for name in NAMES:
            override = Path(prompt_dir) / f"{name}.txt" if prompt_dir else None
            if override is not None and override.is_file():
                text, self.sources[name] = override.read_text(encoding="utf-8"), str(override)
            else:
                text = (packaged / f"{name}.txt").read_text(encoding="utf-8")
                self.sources[name] = "package"
            template = Template(text.strip())
            try:
                template.substitute({p: "" for p in PLACEHOLDERS})
            except (KeyError, ValueError) as e:
                raise ValueError(f"prompt {self.sources[name]} ({name}): bad placeholder {e}; "
                                 f"known: {', '.join(PLACEHOLDERS)}") from e
            self._templates[name] = template

    def digest(self, *names: str) -> str:
        """A sha256 (hex) of the templates ``names`` as loaded (packaged or overridden)."""
        text = "\x00".join(self._templates[name].template for name in names)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def render(self, name: str, **values: str) -> str:
        return self._templates[name].substitute({p: "" for p in PLACEHOLDERS} | values)
