"""Stage: trajectory (part). Convention-independent span readers for what the conventions
added as they moved: cache-write and cache-read tokens, cost recorded on the span with its
source, and a command tool's exit code, the decision taken on a tool call before it ran,
an MCP client's ``tools/call`` span.

Each reader names the attribute keys that call for it; ``fields.Plan`` keeps, per span
shape, only the readers whose keys the shape has, so the usual span pays nothing for them.
They run after the conventions' fields, in ``READERS`` order, each keeping its source in
``Step.sources``. A value present but not understood is recorded in ``Step.unknown``, never
read as a value (nor as an error).

Attribute names, as the GenAI conventions name them (open-telemetry/semantic-conventions
``model/gen-ai/registry.yaml``; semantic-conventions-genai pull request 443 for cost):

- ``gen_ai.usage.cache_creation.input_tokens`` (the registry's name), renamed
  ``gen_ai.usage.cache_write.input_tokens``: input tokens written to a provider's cache
  (OpenLLMetry ``gen_ai.usage.cache_creation_input_tokens``, OpenInference
  ``llm.token_count.prompt_details.cache_write``); ``gen_ai.usage.cache_read.input_tokens``:
  input tokens served from it (OpenLLMetry ``gen_ai.usage.cache_read_input_tokens``,
  OpenInference ``llm.token_count.prompt_details.cache_read``). Both "SHOULD be included in
  ``gen_ai.usage.input_tokens``" (the registry); the price list prices them at their rates;
- ``gen_ai.usage.cost.amount`` with ``gen_ai.usage.cost.currency`` (ISO 4217; only ``USD``
  is read as ``cost_usd``) and ``gen_ai.usage.cost.source`` (``provider`` | ``local``);
  then the older single-number keys (``gen_ai.usage.cost``, OpenInference ``llm.cost.total``,
  ...), read as USD as before (a negative cost, like a negative amount, is not understood:
  never subtracted from a run's; nor is one past ``MAX_STEP_COST_USD``, 1e9 USD, far above
  any real call: never summed nor observed); a price list prices only a step still without
  cost;
- ``process.exit.code`` on a tool span: non-zero is the call's error (the conventions' command
  and skill tools set ``error.type`` to the exit code); zero is no error;
- ``gen_ai.tool.call.decision.outcome`` (``allow`` | ``deny`` | ``require_approval``), on the
  tool span or on its ``gen_ai.tool.call.decision`` span event (semantic-conventions-genai
  pull request 535, in flight: we follow its names): a denied call did not run, so it is
  never a tool error (the loop detector says when it is retried);
- ``mcp.method.name`` ``tools/call`` (semantic-conventions-genai ``model/mcp``): the MCP
  client's span of a tool call, named ``tools/call <tool>``, is a tool call even with no
  GenAI marker; its tool is ``gen_ai.tool.name``, else the span name's target. The step
  records it in ``Step.sources["mcp_method"]``: ``trajectory.links`` folds it into the
  framework's span of the same call.
- Google ADK's own content attributes (``gcp.vertex.agent.llm_request`` / ``llm_response`` /
  ``tool_call_args`` / ``tool_response``, its telemetry schema 1): ``conventions.adk``;
- (rec31b) LlamaIndex's ``ToolOutput.is_error`` in a tool step's ``traceloop.entity.output``
  (Traceloop's LlamaIndex instrumentation, the workflow's ``call_tool`` step, keyed by its
  ``tool.arguments``): ``true`` is the call's error, its ``raw_output`` the message (the
  raising tool's own span is never ended, so never exported); ``false`` is no error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from otel_eval.base.model import Span
from otel_eval.base.steps import MAX_STEP_COST_USD, Step
from otel_eval.evaluate.conventions import adk
from otel_eval.evaluate.conventions.adapter import Attrs
from otel_eval.evaluate.conventions.openllmetry import (
    WORKFLOW_TOOL_ARGUMENTS,
    workflow_tool_output,
)
from otel_eval.evaluate.conventions.values import as_float, as_int, as_name, as_str

__all__ = ["EVENT_KEYS", "READERS", "SpanReader", "cost_unread", "for_keys"]

# each convention's key of the cached input tokens, the first present read (its convention
# named in the step's source): GenAI's current name, its former one, OpenLLMetry's,
# OpenInference's; each part of the call's input tokens, as its convention says
CACHE_WRITE_KEYS = {"gen_ai.usage.cache_write.input_tokens": "genai",
                    "gen_ai.usage.cache_creation.input_tokens": "genai",
                    "gen_ai.usage.cache_creation_input_tokens": "openllmetry",
                    "llm.token_count.prompt_details.cache_write": "openinference"}
CACHE_READ_KEYS = {"gen_ai.usage.cache_read.input_tokens": "genai",
                   "gen_ai.usage.cache_read_input_tokens": "openllmetry",
                   "llm.token_count.prompt_details.cache_read": "openinference"}
COST_AMOUNT = "gen_ai.usage.cost.amount"
COST_CURRENCY = "gen_ai.usage.cost.currency"
COST_SOURCE = "gen_ai.usage.cost.source"
# single-number costs, read as USD (their conventions say no currency)
LEGACY_COST_KEYS = ("gen_ai.usage.cost", "llm.cost.total", "gen_ai.usage.total_cost",
                    "llm.usage.cost")
EXIT_CODE = "process.exit.code"
_COST_SOURCES = frozenset({"provider", "local"})
DECISION_EVENT = "gen_ai.tool.call.decision"
DECISION_OUTCOME = "gen_ai.tool.call.decision.outcome"
_OUTCOMES = frozenset({"allow", "deny", "require_approval"})
EVENT_KEYS = frozenset({DECISION_EVENT})  # the span events a reader here reads
MCP_METHOD = "mcp.method.name"
_MCP_TOOL_CALL = "tools/call"


class SpanReader(NamedTuple):
    """A reader run on the spans whose attribute keys (or span event names) include one of
    ``keys``; ``tools``, when given, reads the tools those spans offer (as an adapter's)."""

    keys: frozenset[str]
    read: Callable[[Step, Span, Attrs], None]
    tools: Callable[[Attrs], dict[str, Any]] | None = None


def _cached(name: str, keys: dict[str, str]) -> Callable[[Step, Span, Attrs], None]:
    """The reader of ``Step.<name>`` from ``keys`` (key -> its convention), the first
    understood."""
    def read(step: Step, span: Span, attrs: Attrs) -> None:
        for key, convention in keys.items():
            value = attrs.get(key)
            if value is None:
                continue
            tokens = as_int(value, 0)
            if tokens is None:
                step.unknown[name] = f"{key} not understood"
                continue
            setattr(step, name, tokens)
            step.sources[name] = f"{convention} {key}"
            return
    return read


def _cost(step: Step, span: Span, attrs: Attrs) -> None:
    amount = attrs.get(COST_AMOUNT)
    if amount is not None:
        value = as_float(amount)
        currency = as_str(attrs.get(COST_CURRENCY))
        if value is None or value < 0:
            step.unknown["cost_usd"] = f"{COST_AMOUNT} not understood"
        elif currency is None or currency.upper() != "USD":
            step.unknown["cost_usd"] = f"{COST_AMOUNT} in currency {currency or 'not given'}"
        elif value > MAX_STEP_COST_USD:
            step.unknown["cost_usd"] = _implausible(COST_AMOUNT, value)
        else:
            step.cost_usd = value
            origin = as_str(attrs.get(COST_SOURCE))
            origin = origin if origin in _COST_SOURCES else "source unknown"
            step.sources["cost_usd"] = f"genai {COST_AMOUNT} ({origin})"
            return
    for key in LEGACY_COST_KEYS:
        value = as_float(attrs.get(key))
        if value is not None and value > MAX_STEP_COST_USD:
            step.unknown["cost_usd"] = _implausible(key, value)
        elif value is not None and value >= 0:  # a negative cost is none (as an amount's)
            step.cost_usd = value
            step.sources["cost_usd"] = f"span {key}"
            return


def cost_unread(step: Step) -> str | None:
    """Why the cost the step's span recorded was not read (not understood, not dollars,
    past ``MAX_STEP_COST_USD``), when its cost is unknown: a value present but not
    understood (``unrecorded.unparsed``); None otherwise (none recorded, or a price list's
    reason)."""
    why = step.unknown.get("cost_usd")
    if step.cost_usd is None and why is not None and why.startswith(
            (COST_AMOUNT, *LEGACY_COST_KEYS)):
        return why
    return None


def _implausible(key: str, value: float) -> str:
    """Why a recorded cost past ``MAX_STEP_COST_USD`` is not read."""
    return f"{key} {value:g} USD is past any plausible cost of one call ({MAX_STEP_COST_USD:g})"


def _exit_code(step: Step, span: Span, attrs: Attrs) -> None:
    if step.kind != "tool":
        return
    raw = attrs.get(EXIT_CODE)
    code = _exit_code_value(raw)
    if code is None:
        if raw is not None:
            step.unknown["exit_code"] = f"{EXIT_CODE} not understood"
        return
    step.sources["exit_code"] = f"process {EXIT_CODE} {code}"
    if code == 0:
        return
    said = step.error if step.error not in (None, str(code), "error") else None
    step.status = "error"
    step.error = f"exit code {code}" + (f": {said}" if said else "")


def _exit_code_value(raw: Any) -> int | None:
    """An exit code: an int or its text (``as_int``'s bounds); a float, or the text of one
    (``"1.5"``, ``"1e2"``), is none (as_int would truncate it to a code)."""
    if isinstance(raw, str):
        try:
            int(raw)
        except ValueError:
            return None
    return as_int(raw) if not isinstance(raw, float) else None


def _decision(step: Step, span: Span, attrs: Attrs) -> None:
    if step.kind != "tool":
        return
    raw, source = attrs.get(DECISION_OUTCOME), f"genai {DECISION_OUTCOME}"
    if raw is None:
        for event in span.events:  # the last decision taken on the call
            if event.name == DECISION_EVENT:
                raw = event.attributes.get(DECISION_OUTCOME)
                source = f"genai {DECISION_EVENT} event"
    outcome = as_str(raw)
    if outcome not in _OUTCOMES:
        if raw is not None:
            step.unknown["decision"] = f"{DECISION_OUTCOME} not understood"
        return
    step.decision, step.sources["decision"] = outcome, source
    if outcome == "deny":  # it never ran: no tool error, whatever the span's status says
        step.status, step.error = "ok", None


def _mcp(step: Step, span: Span, attrs: Attrs) -> None:
    if attrs.get(MCP_METHOD) != _MCP_TOOL_CALL or step.kind not in ("tool", "other"):
        return
    step.sources["mcp_method"] = f"mcp {MCP_METHOD} {_MCP_TOOL_CALL}"
    if step.kind == "tool":
        return
    step.kind = "tool"
    step.sources["kind"] = f"mcp {MCP_METHOD} {_MCP_TOOL_CALL}"
    name = as_name(attrs.get("gen_ai.tool.name"))
    target = span.name[len(_MCP_TOOL_CALL):].strip() if span.name.startswith(
        _MCP_TOOL_CALL) else ""
    if name or target:
        step.tool_name = name or target
        step.sources["tool_name"] = "genai gen_ai.tool.name" if name else "span name"
    call_id = as_str(attrs.get("gen_ai.tool.call.id"))
    if call_id and step.call_id is None:
        step.call_id, step.sources["call_id"] = call_id, "genai gen_ai.tool.call.id"


# --- rec31b: LlamaIndex's ToolOutput.is_error (Traceloop's LlamaIndex instrumentation): start ---
def _tool_output_error(step: Step, span: Span, attrs: Attrs) -> None:
    if step.kind != "tool":
        return
    output = workflow_tool_output(attrs).get("tool_output")
    if not isinstance(output, dict) or output.get("is_error") is None:
        return
    flag = output["is_error"]
    if not isinstance(flag, bool):
        step.unknown["error"] = "tool_output.is_error not understood"
        return
    step.sources["error"] = "llamaindex tool_output.is_error (traceloop.entity.output)"
    if flag and step.status != "error":
        step.status = "error"
        step.error = as_str(output.get("raw_output")) or "tool_output.is_error"


WORKFLOW_TOOL_READER = SpanReader(frozenset((WORKFLOW_TOOL_ARGUMENTS,)), _tool_output_error)
# --- rec31b: end ---

READERS = (
    SpanReader(frozenset((MCP_METHOD,)), _mcp),  # first: the ones after read tool steps
    SpanReader(frozenset(CACHE_WRITE_KEYS), _cached("cache_write_tokens", CACHE_WRITE_KEYS)),
    SpanReader(frozenset(CACHE_READ_KEYS), _cached("cache_read_tokens", CACHE_READ_KEYS)),
    SpanReader(frozenset((COST_AMOUNT, *LEGACY_COST_KEYS)), _cost),
    SpanReader(frozenset((EXIT_CODE,)), _exit_code),
    SpanReader(frozenset((DECISION_OUTCOME, DECISION_EVENT)), _decision),
    WORKFLOW_TOOL_READER,  # rec31b
    SpanReader(adk.KEYS, adk.read, adk.tools),
)


def for_keys(attrs: Attrs, events: frozenset[str] = frozenset()) -> tuple[SpanReader, ...]:
    """The readers a span shape with these attribute keys and span event names (those of
    ``EVENT_KEYS`` it has) calls for, in ``READERS`` order."""
    keys = attrs.keys()
    return tuple(r for r in READERS
                 if not keys.isdisjoint(r.keys) or not events.isdisjoint(r.keys))
