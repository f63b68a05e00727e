"""JSON schemas of the judges' replies (sent as response_format and validated on receipt).

Reasoning fields come before score fields: with structured output the model writes the
properties in schema order, so the justification is produced before the number it justifies.

A provider puts the schema before the model and bills it as input, once per call: a part used
more than once (a process dimension) is written once under ``$defs`` and referenced.
"""

from __future__ import annotations

from typing import Any

STAGES = ("exploration", "information_gathering", "tool_invocation", "synthesis", "verification")
PROCESS_DIMENSIONS = ("goal_alignment", "efficiency", "information_utilization",
                      "result_verification")
PROCESS_SCALE = (0, 0.2, 0.4, 0.6, 0.8, 1)

Schema = dict[str, Any]


def _obj(props: dict[str, Any]) -> Schema:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


_UNIT = {"type": "number", "minimum": 0, "maximum": 1}
_SCORED = _obj({"critique": {"type": "string"}, "score": _UNIT})
_REASONED = _obj({"reasoning": {"type": "string"}, "score": _UNIT})


def step_schema() -> Schema:
    item = _obj({"step": {"type": "integer"}, "critique": {"type": "string"}, "score": _UNIT})
    return _obj({"steps": {"type": "array", "items": item}})


def trace_schema() -> Schema:
    return _SCORED


def outcome_schema() -> Schema:
    return _REASONED


def process_schema() -> Schema:
    dim = _obj({"reasoning": {"type": "string"}, "score": {"enum": list(PROCESS_SCALE)}})
    item = _obj({"turn": {"type": "integer"}, "stage": {"enum": list(STAGES)},
                 **{d: {"$ref": "#/$defs/dimension"} for d in PROCESS_DIMENSIONS}})
    return {**_obj({"turns": {"type": "array", "items": item}}), "$defs": {"dimension": dim}}


def session_schema() -> Schema:
    """The session judge: a critique of the conversation, then the chance it solved the
    user's problem."""
    return _SCORED


def rubric_generate_schema() -> Schema:
    item = _obj({"id": {"type": "string"}, "criterion": {"type": "string"}})
    return _obj({"criteria": {"type": "array", "items": item, "minItems": 1, "maxItems": 20}})


def rubric_verify_schema() -> Schema:
    item = _obj({"id": {"type": "string"}, "reasoning": {"type": "string"},
                 "fulfilled": {"type": "boolean"}})
    return _obj({"results": {"type": "array", "items": item}})


def part_schema(part: str) -> Schema:
    """The schema of one part of a combined reply, keyed like the combined object."""
    return {"step": step_schema, "trace": trace_schema, "process": process_schema,
            "outcome": outcome_schema}[part]()


def combined_schema(parts: tuple[str, ...]) -> Schema:
    """One object whose properties are the parts' replies: steps, turns, trace, outcome
    (the parts' ``$defs`` gathered at its root)."""
    props: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    for part in parts:
        s = part_schema(part)
        defs.update(s.get("$defs", {}))
        if part == "step":
            props["steps"] = s["properties"]["steps"]
        elif part == "process":
            props["turns"] = s["properties"]["turns"]
        else:
            props[part] = s
    combined = _obj(props)
    return {**combined, "$defs": defs} if defs else combined
