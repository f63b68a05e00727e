"""Fuzzing the evaluation path with Hypothesis: OTLP decode, the convention adapters +
trajectory build, and the detectors (issue 11). The same strategies and checks run bounded in
the test suite (``tests/evaluation/test_evaluation_fuzz.py``: few examples, derandomized);
here they run long and the outcome is counted instead of raised.

    python bench/fuzz.py                          1,000 inputs per target, hang = > 2 s
    python bench/fuzz.py --examples 20000 --hang-s 1 --seed 7

Targets (each input must end in a clean result or a clean error, never anything else):
- ``decode``: mutated OTLP protobuf bodies (bit flips, truncation, splices, random bytes) ->
  ``otlp.parse_request`` + ``decode_request`` + every span's attributes, or MalformedRequest;
  and OTLP/JSON documents -> ``request_from_json``, or ValueError;
- ``trajectory``: spans whose attributes mix every convention's keys with hostile values
  (wrong types, odd JSON message shapes, NaN, deep nesting, huge numbers) ->
  ``build_trajectory`` with no adapter error (``Trajectory.errors`` empty);
- ``evaluate``: the same traces, plus tool definitions with hostile schemas ->
  ``Evaluator.evaluate``: a verdict, no ``evaluation_error``, JSON a strict parser accepts.
A *crash* is an exception or a broken promise; a *hang* an input that took more than
``--hang-s`` of CPU time (measured here, never in a test; CPU, not wall time: on a shared
machine a wall clock counts the neighbours' work too, and the evaluation path waits on
nothing), with the cyclic collector off while the input runs: Hypothesis's own state grows
to millions of objects over a long run (3.8 M after 18,000 inputs), and a full collection of
it (up to 3.4 s of CPU) landing inside one input was counted as that input's hang. Prints
counts per target and one
``BENCH {json}`` line; exits 1 when anything crashed or hung.
"""

from __future__ import annotations

import argparse
import gc
import json
import pickle
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.decode import encode, otlp, otlp_json
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.trajectory import build_trajectory

TRACE = "0af7651916cd43dd8448eb211c80319c"

# --- values ------------------------------------------------------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "{", "[]", "{}", "null", "NaN", "tool_call", "finish_reason", "\ud800",
                     "call_1", "a" * 300]))
JSON = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)

_ODD = st.one_of(st.integers(-2, 2), st.text(max_size=3), st.floats(), JSON)  # not a list
_PART = st.one_of(st.fixed_dictionaries({
    "type": st.sampled_from(["text", "tool_call", "tool_call_response", "tool-call",
                             "tool-result", "tool_result", "tool_use", "function_call_output",
                             1, None]),
    "id": st.one_of(st.sampled_from(["call_1", "call_2"]), JSON),
    "name": st.one_of(st.sampled_from(["search", "bash", ""]), JSON),
    "arguments": st.one_of(st.just('{"q": "x"}'), st.just("{bad"), JSON),
    "response": JSON, "content": JSON},
    # the AI SDK's and Bedrock's call and result parts, pydantic-ai's ``result``
    optional={"toolName": JSON, "input": JSON, "output": JSON, "result": JSON,
              "toolUse": JSON, "toolResult": JSON}), JSON)
_MESSAGE = st.one_of(st.fixed_dictionaries({
    "role": st.sampled_from(["assistant", "tool", "user", 3]),
    "parts": st.one_of(st.lists(_PART, max_size=3), _ODD),
    "tool_calls": st.one_of(st.lists(st.fixed_dictionaries({
        "id": JSON, "function": st.one_of(JSON, st.fixed_dictionaries({
            "name": st.one_of(st.just("search"), JSON), "arguments": JSON}))}), max_size=2),
        _ODD),
    "tool_call_id": st.one_of(st.just("call_1"), JSON), "content": JSON,
    "finish_reason": JSON}), JSON)
# a message whose role is not its first key, after nested objects (Agno's), parts under
# ``content`` (the AI SDK, Bedrock), a Responses API item
_REORDERED = st.fixed_dictionaries({
    "content": st.one_of(JSON, st.lists(_PART, max_size=3)), "meta": JSON,
    "role": st.sampled_from(["tool", "user", "function", ["tool"]])})
_ITEM = st.fixed_dictionaries({"call_id": JSON, "output": JSON,
                               "type": st.sampled_from(["function_call_output", "x"])})
MESSAGES = st.one_of(st.lists(st.one_of(_MESSAGE, _REORDERED, _ITEM), min_size=1, max_size=3),
                     JSON).map(lambda v: json.dumps(v) if not isinstance(v, str) else v)
# frameworks' envelopes around a tool result (trajectory.envelopes.unwrap_result)
_SERIALIZED = st.fixed_dictionaries({"lc": st.just(1), "type": st.just("constructor"),
                                     "id": st.one_of(st.just(["x", "ToolMessage"]), JSON),
                                     "kwargs": JSON})
RESULTS = st.one_of(
    st.fixed_dictionaries({"type": st.just("tool"), "data": st.fixed_dictionaries(
        {"type": st.just("tool"), "content": JSON, "status": JSON})}),
    _SERIALIZED, _SERIALIZED.map(lambda v: {"output": v}),
    st.fixed_dictionaries({"tool_name": JSON, "raw_input": JSON, "raw_output": JSON,
                           "is_error": JSON, "blocks": JSON}),
    st.fixed_dictionaries({"result": JSON}, optional={"is_error": JSON})).map(json.dumps)

_SCHEMA = st.one_of(JSON, st.fixed_dictionaries({
    "type": st.sampled_from(["object", "string", 3]),
    "properties": st.one_of(st.dictionaries(st.sampled_from(["q", "a"]), st.one_of(
        JSON, st.fixed_dictionaries({"$ref": st.sampled_from(
            ["#", "#/$defs/x", "#/nope", "http://127.0.0.1:9/x", "file:///etc/passwd"])}),
        st.fixed_dictionaries({"pattern": st.sampled_from(
            ["^(a+)+$", "(?=x)", "[", "\\d{1,3}"])}),
        st.fixed_dictionaries({"uniqueItems": st.booleans(), "type": st.just("array")}),
    ), max_size=2), JSON),
    "$defs": st.one_of(JSON, st.just({"x": {"$ref": "#/$defs/x"}})),
    "required": JSON, "patternProperties": JSON, "additionalProperties": JSON,
    "$schema": JSON}))
TOOLS = st.lists(st.fixed_dictionaries({
    "name": st.sampled_from(["search", "bash", "t"]), "parameters": _SCHEMA}), max_size=2).map(
    json.dumps)

# Haystack's ChatMessage reprs, as OpenInference records them in input.value / output.value
# (conventions.haystack reads the tool results, their error flags and the calls' ids)
_PY_STRING = st.one_of(st.text(max_size=20), st.sampled_from(
    ["", "'", '"', "\\", "), error=True)]", ", id='x', extra=", "a" * 30_000])).map(repr)
_TOOL_CALL = st.builds(
    lambda name, args, call_id, extra: f"ToolCall(tool_name={name}, arguments={args}, "
    f"id={call_id}" + (", extra=None)" if extra else ")"),
    st.one_of(st.just("'search'"), _PY_STRING),
    st.sampled_from(["{}", "{'q': 'x'}", "{'q': \", id='f', extra=\"}", "{"]),
    st.one_of(st.sampled_from(["'call_1'", "'call_2'", "7", "'"]), _PY_STRING), st.booleans())
_HAYSTACK_TOOL = st.builds(
    lambda result, origin, error: "ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=["
    f"ToolCallResult(result={result}, origin={origin}, error={error})], _name=None, _meta={{}})",
    _PY_STRING, _TOOL_CALL, st.sampled_from(["True", "False", "1"]))
_META = st.one_of(st.just("{}"), st.builds(
    lambda reason: f"{{'model': 'm', 'finish_reason': {reason}, 'usage': {{}}}}",
    st.one_of(st.sampled_from(["'length'", "'stop'", "None", "'" + "x" * 50 + "'"]),
              _PY_STRING)))
_HAYSTACK_REPLY = st.builds(
    lambda calls, meta: "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=["
    + ", ".join(calls) + f"], _name=None, _meta={meta})", st.lists(_TOOL_CALL, max_size=3), _META)
# smolagents' ChatMessage, the provider's response as a repr in ``raw`` (its finish reason)
SMOLAGENTS_OUT = st.builds(
    lambda head, choice, reason, content: json.dumps({"role": "assistant", "content": content,
                                                      "raw": f"ChatCompletion(id={head}, "
                                                      f"choices=[{choice}(finish_reason="
                                                      f"{reason}, message={content})])"}),
    _PY_STRING, st.sampled_from(["Choice", "Choices", "", "(" * 50]),
    st.one_of(st.sampled_from(["'length'", "'stop'", "None"]), _PY_STRING), _PY_STRING)
HAYSTACK_IN = st.lists(st.one_of(_HAYSTACK_TOOL, st.text(max_size=5)), max_size=3).map(
    lambda messages: json.dumps({"messages": messages}))
HAYSTACK_OUT = st.lists(_HAYSTACK_REPLY, max_size=2).map(
    lambda replies: json.dumps({"replies": replies}))

# Google ADK's legacy content attributes (conventions.adk): Gemini Contents, hostile parts
_GEMINI_PART = st.one_of(
    st.fixed_dictionaries({"text": JSON}),
    st.fixed_dictionaries({"function_call": st.one_of(JSON, st.fixed_dictionaries(
        {"name": st.one_of(st.just("search"), JSON), "args": JSON, "id": JSON}))}),
    st.fixed_dictionaries({"function_response": st.one_of(JSON, st.fixed_dictionaries(
        {"name": JSON, "response": JSON, "id": JSON}))}), JSON)
_CONTENT = st.one_of(st.fixed_dictionaries({
    "role": st.sampled_from(["user", "model", 3]),
    "parts": st.one_of(st.lists(_GEMINI_PART, max_size=3), _ODD)}), JSON)
ADK_REQUEST = st.fixed_dictionaries({"contents": st.one_of(
    st.lists(_CONTENT, max_size=3), JSON)}).map(json.dumps)
ADK_RESPONSE = st.fixed_dictionaries({"content": _CONTENT}).map(json.dumps)

# the keys the adapters read, per convention, with hostile values
_KEYS: dict[str, st.SearchStrategy[Any]] = {
    "gen_ai.operation.name": st.sampled_from(["chat", "execute_tool", "invoke_agent", "x", 5]),
    "gen_ai.system": JSON, "gen_ai.agent.name": JSON, "gen_ai.tool.name": JSON,
    "gen_ai.tool.call.arguments": st.one_of(JSON, st.just('{"q": NaN}')),
    "gen_ai.tool.call.result": st.one_of(JSON, RESULTS), "gen_ai.tool.call.id": JSON,
    "gen_ai.input.messages": MESSAGES, "gen_ai.output.messages": MESSAGES,
    "gen_ai.tool.definitions": st.one_of(TOOLS, JSON),
    "gen_ai.usage.input_tokens": JSON, "gen_ai.usage.output_tokens": JSON,
    "gen_ai.response.finish_reasons": JSON, "gen_ai.prompt": JSON, "gen_ai.completion": JSON,
    "gen_ai.usage.cost": JSON, "error.type": JSON,
    "openinference.span.kind": st.sampled_from(["LLM", "TOOL", "AGENT", "CHAIN", "?"]),
    "llm.input_messages.0.message.content": JSON, "llm.output_messages.0.message.role": JSON,
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": JSON,
    "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": JSON,
    "llm.tools.0.tool.json_schema": st.one_of(TOOLS, JSON), "tool.name": JSON,
    "tool.parameters": JSON, "input.value": st.one_of(JSON, HAYSTACK_IN),
    "output.value": st.one_of(JSON, HAYSTACK_OUT, SMOLAGENTS_OUT, RESULTS, st.sampled_from(
        ["assistant: None", "assistant: ", "user: None", ": None",
         "StopEvent(result=AgentOutput(response=ChatMessage(text='It is s...", "..."])),
    # the same reply id on several LLM spans: one call recorded twice (trajectory.llm_twins)
    "gen_ai.response.id": st.one_of(st.sampled_from(["msg_1", "msg_2", ""]), JSON),
    "llm.input_messages.0.message.role": st.sampled_from(["user", "tool"]),
    "llm.input_messages.1.message.role": st.sampled_from(["tool", "user", 1]),
    "llm.token_count.prompt": JSON, "llm.model_name": JSON, "llm.finish_reason": JSON,
    # content parts and AutoGen's function results, flattened (OpenInference)
    "llm.input_messages.0.message.contents.0.message_content.text": JSON,
    "llm.input_messages.0.message.contents.1.message_content.type": JSON,
    "llm.output_messages.0.message.contents.0.message_content.text": JSON,
    "llm.input_messages.1.function.0": st.one_of(JSON, JSON.map(json.dumps)),
    "ai.toolCall.result": JSON,
    "gcp.vertex.agent.llm_request": st.one_of(ADK_REQUEST, JSON),
    "gcp.vertex.agent.llm_response": st.one_of(ADK_RESPONSE, JSON),
    "gcp.vertex.agent.tool_call_args": JSON, "gcp.vertex.agent.tool_response": JSON,
    "traceloop.span.kind": st.sampled_from(["workflow", "task", "agent", "tool", "?"]),
    "traceloop.entity.name": JSON, "traceloop.entity.input": JSON,
    "traceloop.entity.output": JSON, "gen_ai.prompt.0.content": JSON,
    "gen_ai.completion.0.tool_calls.0.name": JSON,
    "gen_ai.completion.0.tool_calls.0.arguments": JSON, "llm.request.functions.0.name": JSON,
    # a completion that is its function call alone (LiteLLM's)
    "gen_ai.completion.0.function_call.name": JSON,
    "gen_ai.completion.0.function_call.arguments": JSON,
    "llm.request.functions.0.parameters": JSON, "task_id": JSON,
    # positions in flattened keys that are no ASCII number ("\u00b2" passes str.isdigit and
    # fails int(); 5,000 digits pass both checks but int() refuses them)
    "llm.output_messages.\u00b2.message.tool_calls.0.tool_call.function.name": JSON,
    "llm.output_messages.0.message.tool_calls.\u0663.tool_call.function.name": JSON,
    f"llm.input_messages.{'9' * 5000}.message.role": JSON,
    "gen_ai.prompt.\u00b2.content": JSON,
}


def _convention(marker: str, prefixes: tuple[str, ...]) -> st.SearchStrategy[dict[str, Any]]:
    """Attributes of one convention: its marker, then any of its keys (dense, so that the
    shapes each adapter parses are reached often)."""
    keys = {k: v for k, v in _KEYS.items() if k.startswith(prefixes) and k != marker}
    return st.fixed_dictionaries({marker: _KEYS[marker]}, optional=keys)


ATTRIBUTES = st.one_of(
    _convention("gen_ai.operation.name", ("gen_ai.", "error.")),
    _convention("openinference.span.kind", ("llm.", "tool.", "input.", "output.")),
    _convention("traceloop.span.kind", ("traceloop.", "gen_ai.", "llm.request")),
    st.lists(st.sampled_from(sorted(_KEYS)), max_size=8, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: _KEYS[k] for k in keys})))


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    """A trace of up to 8 spans: tree, orphans, self-parents, duplicate ids, odd times."""
    n = draw(st.integers(1, 8))
    ids = [f"{i + 1:016x}" for i in range(n)]
    spans = []
    for i in range(n):
        parent = draw(st.one_of(st.none(), st.sampled_from([*ids, "ffffffffffffffff"])))
        start = draw(st.integers(0, 10**6))
        spans.append(Span(
            TRACE, draw(st.sampled_from(ids)) if i and draw(st.booleans()) and n > 2 else ids[i],
            parent, draw(st.sampled_from(["chat", "execute_tool search", "invoke_agent a", ""])),
            start, start + draw(st.integers(-5, 10**6)),
            status=draw(st.sampled_from(["unset", "ok", "error"])),
            attributes=draw(ATTRIBUTES),
            scope=draw(st.sampled_from(["", "openinference.instrumentation.llama_index"]))))
    return Trace(TRACE, spans, draw(st.sampled_from(["complete", "incomplete", "truncated"])))


def _valid_request() -> bytes:
    span = Span(TRACE, "00f067aa0ba902b7", None, "invoke_agent a", 1, 2, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a", "n": 3,
        "l": [1, "x"], "f": 1.5})
    return encode.encode_spans([span]).SerializeToString()


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """Mutated OTLP protobuf bodies (and some random bytes)."""
    data = bytearray(draw(st.one_of(st.just(_valid_request()), st.binary(max_size=200))))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "dup"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        else:
            data += data[at:]
    return bytes(data)


_OTLP_JSON = st.fixed_dictionaries({"resourceSpans": st.one_of(JSON, st.lists(
    st.fixed_dictionaries({"scopeSpans": st.lists(st.fixed_dictionaries({"spans": st.lists(
        st.fixed_dictionaries({"traceId": st.one_of(st.just(TRACE), JSON),
                               "spanId": st.one_of(st.just("00f067aa0ba902b7"), JSON),
                               "name": JSON, "attributes": JSON, "status": JSON,
                               "startTimeUnixNano": JSON}), max_size=2)}), max_size=2)}),
    max_size=2))})

# --- checks ----------------------------------------------------------------------------------


def check_decode(body: bytes) -> None:
    try:
        req, _ = otlp.parse_request(body)
    except otlp.MalformedRequest:
        return
    for span in otlp.decode_request(req).spans:
        _ = span.attributes, span.events


def check_json(doc: Any) -> None:
    try:
        req = otlp_json.request_from_json(json.dumps(doc))
    except ValueError:
        return
    assert isinstance(req, ExportTraceServiceRequest)
    for span in otlp.decode_request(req).spans:
        _ = span.attributes


def check_trajectory(trace: Trace) -> None:
    traj = build_trajectory(trace, TrajectoryConfig())
    assert getattr(traj, "errors", []) == [], traj.errors
    assert len({s.span_id for s in traj.steps}) == len({s.span_id for s in trace.spans})


_EVALUATOR = Evaluator(Config())


def check_evaluate(trace: Trace) -> None:
    ev = _EVALUATOR.evaluate(trace)
    assert ev.verdict is not None
    errors = [f.attributes for f in ev.findings if f.kind == "evaluation_error"]
    assert errors == [], errors
    json.dumps(ev.to_json(), allow_nan=False)


TARGETS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "decode": (bodies(), check_decode),
    "decode_json": (_OTLP_JSON, check_json),
    "trajectory": (traces(), check_trajectory),
    "evaluate": (traces(), check_evaluate),
}


def run(target: str, examples: int, hang_s: float, rng_seed: int) -> dict[str, Any]:
    """Run one target ``examples`` times; crashes and hangs are counted, not raised."""
    strategy, check = TARGETS[target]
    stats: dict[str, Any] = {"inputs": 0, "crashes": 0, "slowest_s": 0.0,
                             "first_crash": None, "hang_inputs": []}

    @seed(rng_seed)
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def each(value: Any) -> None:
        stats["inputs"] += 1
        gc.disable()  # a full collection of Hypothesis's own objects is no input's cost
        start = time.process_time()
        try:
            check(value)
        except Exception:
            stats["crashes"] += 1
            stats["first_crash"] = stats["first_crash"] or traceback.format_exc(limit=4)
        finally:
            took = time.process_time() - start
            gc.enable()
        stats["slowest_s"] = max(stats["slowest_s"], round(took, 4))
        if took > hang_s:
            stats["hang_inputs"].append(value)

    each()
    return {**stats, "hangs": len(stats["hang_inputs"])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", type=int, default=1000, help="inputs per target")
    ap.add_argument("--hang-s", type=float, default=2.0, help="an input slower than this hangs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save-hangs", metavar="DIR",
                    help="pickle each target's hanging inputs to DIR/<target>.pickle")
    ap.add_argument("--targets", nargs="*", default=list(TARGETS), choices=list(TARGETS))
    args = ap.parse_args(argv)
    results = {}
    for target in args.targets:
        start = time.perf_counter()
        results[target] = run(target, args.examples, args.hang_s, args.seed)
        results[target]["seconds"] = round(time.perf_counter() - start, 1)
        r = results[target]
        print(f"{target:12s} inputs {r['inputs']:6d}  crashes {r['crashes']:3d}  hangs "
              f"{r['hangs']:3d}  slowest {r['slowest_s']:.3f} s  ({r['seconds']} s)")
        if r["first_crash"]:
            print(r["first_crash"], file=sys.stderr)
        if args.save_hangs and r["hang_inputs"]:
            path = Path(args.save_hangs) / f"{target}.pickle"
            path.write_bytes(pickle.dumps(r["hang_inputs"]))
            print(f"{target}: {len(r['hang_inputs'])} hanging input(s) in {path}",
                  file=sys.stderr)
    print("BENCH " + json.dumps({k: {x: y for x, y in v.items()
                                     if x not in ("first_crash", "hang_inputs")}
                                 for k, v in results.items()}))
    return 1 if any(r["crashes"] or r["hangs"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
