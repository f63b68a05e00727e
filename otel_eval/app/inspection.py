"""``otel-eval inspect``: how otel-eval read a trace, for someone onboarding a framework.

    trace files -> loaders -> build_trajectory -> report(trajectory) -> render_text | JSON

Per step: its kind and the convention of its marker, which convention and attribute supplied
each field (``Step.sources``), what stayed unknown and why (not recorded, or present but not
understood: ``Step.unknown``); the spans no convention recognised, with their attribute keys;
the agent and where its name came from; the conversation (session) the trace is a turn of
and its user, with the attribute each was read from. Spans are read from files: ``serve``
stores results, not spans (export them with the collector's file exporter to inspect them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from otel_eval.base.printable import escaped_cut, printable
from otel_eval.base.steps import Step, Trajectory

__all__ = ["render_text", "report"]

# The fields each kind of step is expected to carry: those it lacks are listed as unknown.
_EXPECTED = {
    "tool": ("tool_name", "arguments", "result", "call_id"),
    "llm": ("model", "input_text", "output_text", "input_tokens", "output_tokens",
            "finish_reasons"),
    "agent": ("agent_name", "input_text", "result"),
}
_VALUE_CHARS = 80  # of a value shown beside its source
_MAX_KEYS = 40  # attribute keys listed for a span not understood
_KEY_CHARS = 120  # of one attribute key listed


def _value(step: Step, name: str) -> Any:
    if name == "agent_name":
        return step.node
    if name == "tool_calls":
        return [f"{c.name} {c.call_id or '(no id)'}" for c in step.tool_calls]
    return getattr(step, name, None)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = printable(text)
    return text if len(text) <= _VALUE_CHARS else escaped_cut(text, _VALUE_CHARS) + "..."


def _step(step: Step) -> dict[str, Any]:
    fields = {}
    for name, source in step.sources.items():
        # a source of no Step field (``mcp_method``, ``exit_code``): the source says it all
        value = _short(_value(step, name)) if hasattr(step, name) or name == "agent_name" else ""
        fields[name] = {"source": source, "value": value}
    unknown = dict(step.unknown)
    for name in _EXPECTED.get(step.kind, ()):
        value = _value(step, name)
        if name not in fields and name not in unknown and (value is None or value == []):
            if name == "result" and step.status == "error":
                continue  # a failed call has its error instead
            unknown[name] = "not recorded"
    out: dict[str, Any] = {"index": step.index, "span_id": step.span_id,
                           "name": printable(step.name), "kind": step.kind,
                           "convention": step.convention, "fields": fields,
                           "unknown": unknown}
    if step.rebuilt:
        out["rebuilt"] = "from the LLM call's requested tool call (no span of its own)"
    return out


def report(trajectory: Trajectory, attributes: dict[str, list[str]]) -> dict[str, Any]:
    """The inspection of one trajectory; ``attributes``: span id -> its attribute keys."""
    agent_step = next((s for s in trajectory.steps if s.kind == "agent"
                       and s.node == trajectory.agent), None)
    if trajectory.agent_source == "span" and agent_step is not None:
        agent_from = agent_step.sources.get("agent_name", "span name")
    else:
        agent_from = {"child_span": "stamped on the spans under it (gen_ai.agent.name, "
                                    "traceloop.workflow.name, ai.telemetry.functionId)",
                      "inferred_history": "inferred from the service's completed runs",
                      }.get(trajectory.agent_source, "no span names it")
    not_understood = [
        {"span_id": s.span_id, "name": printable(s.name),
         "attributes": [printable(k[:_KEY_CHARS])
                        for k in sorted(attributes.get(s.span_id, []))[:_MAX_KEYS]]}
        for s in trajectory.steps if s.convention == "unknown" and not s.rebuilt]
    return {
        "trace_id": trajectory.trace_id,
        "service": printable(trajectory.service) if trajectory.service else None,
        "agent": printable(trajectory.agent) if trajectory.agent else None,
        "agent_source": trajectory.agent_source,
        "agent_from": agent_from, "convention": trajectory.convention,
        "session_id": printable(trajectory.session_id) if trajectory.session_id else None,
        "user_id": printable(trajectory.user_id) if trajectory.user_id else None,
        "conversation_sources": dict(trajectory.conversation_sources),
        "other_session_ids": [printable(i) for i in trajectory.other_session_ids],
        "unrecorded": dict(trajectory.unrecorded),
        "steps": [_step(s) for s in trajectory.steps],
        "not_understood": not_understood,
    }


def render_text(reports: Iterable[dict[str, Any]]) -> str:
    lines: list[str] = []
    for rep in reports:
        lines.append(f"trace {rep['trace_id']}  service {rep['service']}  convention "
                     f"{rep['convention']}")
        lines.append(f"agent {rep['agent']!r} ({rep['agent_source']}: {rep['agent_from']})")
        sources = rep["conversation_sources"]
        if rep["session_id"] is not None:
            lines.append(f"conversation {rep['session_id']!r} ({sources['session_id']})")
            if rep["other_session_ids"]:  # not counted under: the turn is the first's
                lines.append("  also carried " + ", ".join(map(repr, rep["other_session_ids"])))
        if rep["user_id"] is not None:
            lines.append(f"user {rep['user_id']!r} ({sources['user_id']})")
        if rep["unrecorded"]:
            lines.append("unrecorded " + ", ".join(f"{k}={v}"
                                                   for k, v in rep["unrecorded"].items()))
        for step in rep["steps"]:
            rebuilt = " rebuilt" if step.get("rebuilt") else ""
            lines.append(f"  [{step['index']}] {step['kind']}{rebuilt} {step['name']!r} "
                         f"(marker: {step['convention']})")
            for name, field in step["fields"].items():
                shown = f"  = {field['value']}" if field["value"] else ""
                lines.append(f"      {name:<15} {field['source']}{shown}")
            for name, why in step["unknown"].items():
                lines.append(f"      {name:<15} UNKNOWN: {why}")
        if rep["not_understood"]:
            lines.append(f"spans not understood ({len(rep['not_understood'])}):")
            for span in rep["not_understood"]:
                lines.append(f"  {span['span_id']} {span['name']!r}: "
                             + (", ".join(span["attributes"]) or "no attributes"))
        lines.append("")
    return "\n".join(lines)
