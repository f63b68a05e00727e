"""Tool-call detector (stage: evaluate): wrong tool vs wrong arguments vs failed execution.

Against the tool definitions the model was offered (``Trajectory.tools``): a call to a tool
that was not offered is a *selection* error; arguments that are not JSON or fail the tool's
JSON schema (missing required, wrong type, unknown parameter, ...) are an *argument* error
naming the violated constraint; a failed execution (span error, error payload) is a
*runtime* error. Without tool definitions, selection and argument checks are skipped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from otel_eval.detectors.calls import Context, is_action_tool, result_failed
from otel_eval.detectors.config import DetectorsConfig, ToolCallConfig
from otel_eval.model import Finding, Step, Trajectory


def parameters_schema(definition: Any) -> Mapping[str, Any] | None:
    """The JSON schema of a tool's parameters, from the common definition shapes."""
    if not isinstance(definition, Mapping):
        return None
    if isinstance(definition.get("function"), Mapping):  # OpenAI {"type": "function", ...}
        definition = definition["function"]
    for key in ("parameters", "input_schema", "inputSchema", "schema"):
        inner = definition.get(key)
        if isinstance(inner, Mapping):
            return inner
    if "properties" in definition or definition.get("type") == "object":
        return definition
    return None


@lru_cache(maxsize=512)
def _validator(schema_json: str) -> Any:
    """A compiled validator for a schema (cached by its canonical JSON), None if invalid."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return cls(schema)


def argument_problems(arguments: Any, schema: Mapping[str, Any],
                      reject_unknown: bool) -> list[dict[str, str]]:
    """Violations of ``schema`` by ``arguments``: [{constraint, path, message}], best first."""
    if isinstance(arguments, str):
        return [{"constraint": "json", "path": "", "message": "arguments are not valid JSON"}]
    args = {} if arguments is None else arguments
    problems = []
    validator = _validator(json.dumps(schema, sort_keys=True, default=str))
    if validator is not None:
        errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        first = best_match(errors)
        ordered = [first, *[e for e in errors if e is not first]] if first else []
        for e in ordered:
            path = "/".join(str(p) for p in e.absolute_path)
            problems.append({"constraint": str(e.validator), "path": path,
                             "message": e.message[:200]})
    props = schema.get("properties")
    if (reject_unknown and isinstance(args, Mapping) and isinstance(props, Mapping)
            and "additionalProperties" not in schema):
        for name in sorted(set(args) - set(props)):
            problems.append({"constraint": "additionalProperties", "path": "",
                             "message": f"unknown parameter {name!r}"})
    return problems


def _selection(step: Step, name: str, offered: Mapping[str, Any],
               cfg: ToolCallConfig) -> Finding:
    return Finding("tool_call", "selection", cfg.selection_severity,
                   f"called {name}, which was not offered",
                   [step.span_id], [step.index],
                   {"tool": name, "offered": sorted(offered)[:50]})


def _arguments(step: Step, name: str, problems: list[dict[str, str]],
               cfg: ToolCallConfig) -> Finding:
    first = problems[0]
    where = f" at {first['path']}" if first["path"] else ""
    return Finding("tool_call", "arguments", cfg.argument_severity,
                   f"{name}: invalid arguments ({first['constraint']}{where}: "
                   f"{first['message']})", [step.span_id], [step.index],
                   {"tool": name, "constraint": first["constraint"], "problems": problems[:10]})


def check_step(step: Step, offered: Mapping[str, Any], config: DetectorsConfig) -> list[Finding]:
    cfg = config.tool_call
    name = step.tool_name or step.name
    action = is_action_tool(name, config.loop)
    out = []
    if offered and name not in offered and not action:
        out.append(_selection(step, name, offered, cfg))
    elif name in offered:
        schema = parameters_schema(offered[name])
        if schema is not None:
            problems = argument_problems(step.arguments, schema, cfg.reject_unknown_parameters)
            if problems:
                out.append(_arguments(step, name, problems, cfg))
    failure = result_failed(step, action, cfg)
    if failure is not None:
        out.append(Finding("tool_call", "runtime", cfg.runtime_severity,
                           f"{name} failed: {failure}"[:300], [step.span_id], [step.index],
                           {"tool": name, "error": failure}))
    return out


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    out: list[Finding] = []
    for step in trajectory.tool_steps:
        out += check_step(step, trajectory.tools, config)
    return out
