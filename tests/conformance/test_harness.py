"""The recording harness itself: the scripted LLM speaks the OpenAI API as the official client
expects (tool calls, streaming, usage) and refuses what it cannot script; the capture server
stores what the official OTLP exporters send (protobuf, gzip, JSON) with hex ids; no committed
recording holds an absolute path of the machine that recorded it."""

from __future__ import annotations

import gzip
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import scenarios
from machine_paths import LEAK, scrub
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from scripted_llm import ScriptedLLM
from support.otlp_capture import Capture

HERE = Path(__file__).resolve().parent

TOOL = {"type": "function", "function": {"name": "get_weather",
                                         "parameters": scenarios.TOOL_PARAMETERS}}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    server = ScriptedLLM().start()
    yield server
    server.stop()


def _client(llm: ScriptedLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=llm.base_url, api_key="sk-test", max_retries=0)


def _run(client: openai.OpenAI, scenario: str) -> list[Any]:
    """Drive a scenario to its final answer; the assistant messages in order."""
    messages: list[Any] = [{"role": "user", "content": f"weather? [scenario:{scenario}]"}]
    out = []
    for _ in range(10):
        msg = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                             tools=[TOOL]).choices[0].message
        out.append(msg)
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            return out
        for call in msg.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": "sunny"})
    raise AssertionError("no final answer")


@pytest.mark.parametrize(("scenario", "cities"), [
    ("clean", ["Paris"]), ("loop", ["Paris"] * 4), ("distinct", list(scenarios.CITIES)),
    ("tool_error", ["Atlantis", "Paris"])])
def test_scenarios_script_the_tool_calls_then_a_final_answer(
        llm: ScriptedLLM, scenario: str, cities: list[str]) -> None:
    msgs = _run(_client(llm), scenario)
    calls = [c for m in msgs[:-1] for c in m.tool_calls or []]
    assert [json.loads(c.function.arguments)["city"] for c in calls] == cities
    assert all(c.id.startswith("call_") and len(c.id) == 29 for c in calls)
    assert len({c.id for c in calls}) == len(calls)
    assert msgs[-1].content and not msgs[-1].tool_calls


def test_streaming_gives_tool_call_deltas_and_a_usage_chunk(llm: ScriptedLLM) -> None:
    stream = _client(llm).chat.completions.create(
        model="gpt-4o-mini", tools=[TOOL], stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "[scenario:streaming]"}])
    chunks = list(stream)
    args = "".join(d.function.arguments or "" for c in chunks for ch in c.choices
                   for d in ch.delta.tool_calls or [] if d.function)
    assert json.loads(args) == {"city": "Paris"}
    assert [ch.finish_reason for c in chunks for ch in c.choices][-1] == "tool_calls"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > chunks[-1].usage.prompt_tokens > 0
    assert all(c.id.startswith("chatcmpl-") and c.model == "gpt-4o-mini" for c in chunks)


def test_each_answer_s_reported_usage_is_logged(llm: ScriptedLLM) -> None:
    """``usage`` holds what each answer reported (the conformance check ``tokens``): the
    tokens of a completion, those of a stream's usage chunk, and None for a stream asked
    without usage, which reported none."""
    client = _client(llm)
    question = [{"role": "user", "content": "[scenario:clean]"}]
    done = client.chat.completions.create(model="gpt-4o-mini", tools=[TOOL], messages=question)
    assert done.usage is not None
    list(client.chat.completions.create(model="gpt-4o-mini", tools=[TOOL], messages=question,
                                        stream=True, stream_options={"include_usage": True}))
    list(client.chat.completions.create(model="gpt-4o-mini", tools=[TOOL], messages=question,
                                        stream=True))
    sent = (done.usage.prompt_tokens, done.usage.completion_tokens)
    assert llm.usage == [sent, sent, None] and llm.requests == 3


RESPONSES_TOOL = {"type": "function", "name": "get_weather",
                  "parameters": scenarios.TOOL_PARAMETERS}


@pytest.mark.parametrize(("scenario", "cities"), [
    ("clean", ["Paris"]), ("distinct", list(scenarios.CITIES)),
    ("tool_error", ["Atlantis", "Paris"])])
def test_responses_api_scripts_function_calls_with_call_ids(
        llm: ScriptedLLM, scenario: str, cities: list[str]) -> None:
    """The Responses API as the official client drives it: function_call items in, each
    answered by a function_call_output item with the same call_id, until a message."""
    client = _client(llm)
    items: list[Any] = [{"role": "user", "content": f"weather? [scenario:{scenario}]"}]
    calls = []
    for _ in range(10):
        r = client.responses.create(model="gpt-4o-mini", input=items, tools=[RESPONSES_TOOL])
        assert r.status == "completed" and r.usage is not None and r.usage.total_tokens > 0
        out = r.output[0]
        if out.type == "message":
            assert r.output_text == scenarios.reply(scenario, len(cities)).text
            break
        assert out.type == "function_call" and out.call_id.startswith("call_")
        calls.append(out)
        items += [out.model_dump(exclude_none=True),
                  {"type": "function_call_output", "call_id": out.call_id, "output": "sunny"}]
    assert [json.loads(c.arguments)["city"] for c in calls] == cities
    assert len({c.call_id for c in calls}) == len(calls)


def test_responses_api_streams_typed_events_ending_in_the_completed_response(
        llm: ScriptedLLM) -> None:
    events = list(_client(llm).responses.create(
        model="gpt-4o-mini", input="[scenario:streaming]", tools=[RESPONSES_TOOL], stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    assert [e.sequence_number for e in events] == list(range(len(events)))
    done = events[-1].response
    assert done.output[0].type == "function_call" and done.output[0].arguments == args
    assert done.usage is not None and done.usage.input_tokens > 0
    text = list(_client(llm).responses.create(model="gpt-4o-mini", stream=True, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "[scenario:streaming]"}]},
        {"type": "function_call_output", "call_id": "call_x", "output": "sunny"}]))
    assert "".join(e.delta for e in text if e.type == "response.output_text.delta") == \
        scenarios.FINAL == text[-1].response.output_text


@pytest.mark.parametrize("body", [
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "no marker"}]},
    {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "[scenario:nope]"}]},
    {"model": "gpt-4o-mini"}, ["not", "an", "object"]])
def test_unscripted_requests_get_a_clear_400(llm: ScriptedLLM, body: Any) -> None:
    req = urllib.request.Request(llm.base_url + "/chat/completions", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400
    assert json.loads(e.value.read())["error"]["code"] == "unscripted_request"
    assert llm.requests == 0 and len(llm.errors) == 1


def test_tool_results_are_counted_in_any_shape() -> None:
    from scripted_llm import scenario_of
    msgs = [{"role": "user", "content": [{"type": "text", "text": "[scenario:distinct]"}]},
            {"role": "tool", "content": "a"}, {"role": "function", "content": "b"},
            {"role": "user", "content": [{"type": "tool_result", "content": "c"}]},
            {"type": "function_call_output", "output": "d"},
            {"role": "user", "content": [{"type": "text", "text": "Observation:\nsunny"}]},
            {"role": "user", "content": "Call id: call_1\nError:\nunknown city"},
            {"role": "user", "content": [{"type": "text", "text": "Error:\nunknown city"},
                                         {"type": "text", "text": "Observation:\nsunny"}]},
            {"role": "user", "content": "not an Observation: at the start"},
            {"role": "user", "content": "New task:\nx\nError:\nboom\n\nObservation:\nsunny"}]
    assert scenario_of(msgs) == ("distinct", 10)


def test_conversation_turns_count_tool_results_from_their_own_prompt() -> None:
    from scripted_llm import BadRequest, plan, scripted_turn
    first = [{"role": "user", "content": scenarios.turn_prompt(1)}]
    # an agent that sends the earlier turns as history, in the middle of turn 2
    history = [*first, {"role": "tool", "content": "sunny"},
               {"role": "assistant", "content": "It is sunny in Paris."},
               {"role": "user", "content": scenarios.turn_prompt(2)},
               {"role": "tool", "content": "sunny"}]
    assert scripted_turn(first) == ("conversation", 0, 1)
    assert scripted_turn(history) == ("conversation", 1, 2)
    assert scripted_turn(history[:4]) == ("conversation", 0, 2)
    call = plan({"messages": history[:4]})["message"]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"city": "London"}
    assert plan({"messages": history})["message"]["content"] == "It is sunny in London."
    # smolagents: the earlier turn's last observation and the new task in one user message
    joined = [{"role": "user", "content": "Observation:\nsunny\nNew task:\n"
                                          + scenarios.turn_prompt(2)}]
    assert scripted_turn(first + joined) == ("conversation", 0, 2)
    with pytest.raises(BadRequest):
        scripted_turn([{"role": "user", "content": "[scenario:conversation] [turn:4]"}])


def test_a_final_answer_tool_gets_the_final_text_as_its_call(llm: ScriptedLLM) -> None:
    final = {"type": "function", "function": {"name": "final_answer", "parameters": {}}}
    msg = _client(llm).chat.completions.create(
        model="gpt-4o-mini", tools=[TOOL, final],
        messages=[{"role": "user", "content": "[scenario:clean]"},
                  {"role": "user", "content": "Observation:\nsunny"}]).choices[0].message
    assert msg.content is None and msg.tool_calls is not None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("final_answer", {"answer": scenarios.FINAL})]


def test_capture_stores_sdk_protobuf_gzip_and_json_with_hex_ids() -> None:
    cap = Capture().start()
    try:
        tp = TracerProvider()
        tp.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(
            endpoint=cap.endpoint + "/v1/traces", compression=Compression.Gzip)))
        with tp.get_tracer("t").start_as_current_span("s") as span:
            ctx = span.get_span_context()
        tp.shutdown()
        body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
            {"traceId": f"{ctx.trace_id:032x}", "spanId": f"{ctx.span_id:016x}",
             "eventName": "gen_ai.choice"}]}]}]}
        req = urllib.request.Request(cap.endpoint + "/v1/logs", method="POST",
                                     data=gzip.compress(json.dumps(body).encode()),
                                     headers={"Content-Type": "application/json",
                                              "Content-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200
    finally:
        cap.stop()
    assert [r["signal"] for r in cap.recorded()] == ["traces", "logs"] and not cap.errors
    span_json = cap.recorded()[0]["body"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert span_json["traceId"] == f"{ctx.trace_id:032x}"
    assert span_json["spanId"] == f"{ctx.span_id:016x}"
    assert cap.recorded()[1]["body"] == body


def test_capture_reads_a_chunked_body() -> None:
    """The OTel JS exporter sends its body chunked, without a Content-Length."""
    import http.client

    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "s"}]}]}]}).encode()
    cap = Capture().start()
    try:
        conn = http.client.HTTPConnection(cap.endpoint.removeprefix("http://"), timeout=10)
        conn.request("POST", "/v1/traces", body=iter([body[:10], body[10:]]),
                     headers={"Content-Type": "application/json"}, encode_chunked=True)
        assert conn.getresponse().status == 200
        conn.close()
    finally:
        cap.stop()
    assert not cap.errors
    assert cap.recorded()[0]["body"]["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["name"] == "s"


def test_a_code_agent_gets_code_blocks_calling_the_tool_then_final_answer(
        llm: ScriptedLLM) -> None:
    client = _client(llm)
    messages: list[Any] = [{"role": "user", "content": "[scenario:clean] [answer:code]"}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    messages.append({"role": "user", "content": "Observation:\nsunny"})
    last = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert [first.choices[0].message.content, last.choices[0].message.content] == [
        'Thought: I will look up the weather in Paris.\n<code>\nprint(get_weather(city="Paris"))'
        "\n</code>",
        f'Thought: I have the answer.\n<code>\nfinal_answer("{scenarios.FINAL}")\n</code>']
    assert first.choices[0].message.tool_calls is None


_DSPY_REACT = ("Your input fields are:\n1. `question` (str): \n2. `trajectory` (str):\n"
               "Your output fields are:\n1. `next_thought` (str): \n2. `next_tool_name` "
               "(Literal['get_weather', 'finish']): \n3. `next_tool_args` (dict[str, Any]):"
               "\n\nAll interactions will be structured in the following way, with the "
               "appropriate values filled in.\n\n[[ ## completed ## ]]")
_DSPY_EXTRACT = ("Your input fields are:\n1. `question` (str): \n2. `trajectory` (str):\n"
                 "Your output fields are:\n1. `reasoning` (str): \n2. `answer` (str):\n\n"
                 "[[ ## completed ## ]]")


def test_dspy_react_gets_its_turns_in_the_chat_adapter_template(llm: ScriptedLLM) -> None:
    """DSPy's ReAct: k is the trajectory's observation fields; the extract step after finish
    gets each of its output fields, the final text as ``answer``."""
    client = _client(llm)

    def turn(system: str, trajectory: str) -> str:
        user = (f"[[ ## question ## ]]\nWeather? [scenario:tool_error]\n\n"
                f"[[ ## trajectory ## ]]\n{trajectory}")
        reply = client.chat.completions.create(model="gpt-4o-mini", messages=[
            {"role": "system", "content": system}, {"role": "user", "content": user}])
        return str(reply.choices[0].message.content)

    first = turn(_DSPY_REACT, "")
    after_error = turn(_DSPY_REACT, "[[ ## observation_0 ## ]]\nExecution error in get_weather")
    done = turn(_DSPY_REACT, "[[ ## observation_0 ## ]]\nx\n\n[[ ## observation_1 ## ]]\ny")
    assert "[[ ## next_tool_name ## ]]\nget_weather\n" in first
    assert '[[ ## next_tool_args ## ]]\n{"city": "Atlantis"}' in first
    assert '[[ ## next_tool_args ## ]]\n{"city": "Paris"}' in after_error
    assert "[[ ## next_tool_name ## ]]\nfinish\n" in done
    assert first.endswith("[[ ## completed ## ]]")
    extract = turn(_DSPY_EXTRACT, "[[ ## observation_0 ## ]]\nx")
    assert f"[[ ## answer ## ]]\n{scenarios.FINAL}\n" in extract
    assert "[[ ## next_tool_name ## ]]" not in extract


def test_dspy_conversation_turns_count_observations_after_their_marker() -> None:
    """A DSPy ReAct run of turn 2 sent turn 1 as history (dspy.History: its own user message
    with its trajectory): only the observation fields after the last [turn:n] count."""
    from scripted_llm import plan

    def user(n: int, trajectory: str) -> dict[str, Any]:
        return {"role": "user", "content": f"[[ ## question ## ]]\n{scenarios.turn_prompt(n)}"
                                           f"\n\n[[ ## trajectory ## ]]\n{trajectory}"}
    turn1 = user(1, "[[ ## observation_0 ## ]]\nsunny")
    done1 = {"role": "assistant", "content": "[[ ## answer ## ]]\nIt is sunny in Paris."}
    start = plan({"messages": [{"role": "system", "content": _DSPY_REACT}, turn1, done1,
                               user(2, "")]})["message"]["content"]
    assert '[[ ## next_tool_args ## ]]\n{"city": "London"}' in start
    extract = plan({"messages": [{"role": "system", "content": _DSPY_EXTRACT}, turn1, done1,
                                 user(2, "[[ ## observation_0 ## ]]\nsunny")]})
    assert "[[ ## answer ## ]]\nIt is sunny in London.\n" in extract["message"]["content"]


def _messages(llm: ScriptedLLM, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(llm.root_url + "/v1/messages", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        if not body.get("stream"):
            return json.loads(r.read())
        events = []
        for block in r.read().decode().split("\n\n"):
            if block.strip():
                name, data = block.split("\n", 1)
                events.append((name.removeprefix("event: "),
                               json.loads(data.removeprefix("data: "))))
        return events


ANTHROPIC_TOOL = {"name": "get_weather", "description": scenarios.TOOL_DESCRIPTION,
                  "input_schema": scenarios.TOOL_PARAMETERS}


@pytest.mark.parametrize(("scenario", "cities"), [
    ("clean", ["Paris"]), ("distinct", list(scenarios.CITIES)),
    ("tool_error", ["Atlantis", "Paris"])])
def test_messages_api_scripts_tool_use_blocks_answered_by_tool_results(
        llm: ScriptedLLM, scenario: str, cities: list[str]) -> None:
    """The Anthropic Messages API as its SDK drives it: a tool_use block, answered by a user
    message holding a tool_result block with its tool_use_id, until end_turn."""
    messages: list[Any] = [{"role": "user", "content": f"weather? [scenario:{scenario}]"}]
    calls = []
    for _ in range(10):
        m = _messages(llm, {"model": "claude-3-5-haiku-20241022", "max_tokens": 256,
                            "system": "be brief", "messages": messages,
                            "tools": [ANTHROPIC_TOOL]})
        assert m["type"] == "message" and m["usage"]["input_tokens"] > 0
        block = m["content"][0]
        if m["stop_reason"] == "end_turn":
            assert block == {"type": "text", "text": scenarios.reply(scenario, len(cities)).text}
            break
        assert m["stop_reason"] == "tool_use" and block["id"].startswith("toolu_01")
        calls.append(block)
        messages += [{"role": "assistant", "content": m["content"]},
                     {"role": "user", "content": [{"type": "tool_result", "is_error": False,
                                                   "tool_use_id": block["id"],
                                                   "content": "sunny"}]}]
    assert [c["input"]["city"] for c in calls] == cities
    assert len({c["id"] for c in calls}) == len(calls)


def test_messages_api_streams_named_events_with_json_deltas(llm: ScriptedLLM) -> None:
    events = _messages(llm, {"model": "claude-3-5-haiku-20241022", "max_tokens": 256,
                             "stream": True, "tools": [ANTHROPIC_TOOL],
                             "messages": [{"role": "user", "content": "[scenario:streaming]"}]})
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert all(n == e["type"] for n, e in events)
    args = "".join(e["delta"]["partial_json"] for n, e in events if n == "content_block_delta")
    assert json.loads(args) == {"city": "Paris"}
    assert [e["delta"]["stop_reason"] for n, e in events if n == "message_delta"] == ["tool_use"]


def _gemini(llm: ScriptedLLM, body: dict[str, Any], stream: bool = False) -> Any:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    req = urllib.request.Request(f"{llm.root_url}/v1beta/models/gemini-2.0-flash:{method}",
                                 method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        if not stream:
            return json.loads(r.read())
        return [json.loads(b.removeprefix("data: "))
                for b in r.read().decode().split("\n\n") if b.strip()]


@pytest.mark.parametrize(("scenario", "cities"), [
    ("clean", ["Paris"]), ("tool_error", ["Atlantis", "Paris"])])
def test_gemini_api_scripts_function_calls_answered_by_function_responses(
        llm: ScriptedLLM, scenario: str, cities: list[str]) -> None:
    """The Gemini API as google-genai drives it: a functionCall part, answered by a user turn
    holding a functionResponse part, until a text part."""
    contents: list[Any] = [{"role": "user", "parts": [{"text": f"[scenario:{scenario}]"}]}]
    calls = []
    for _ in range(10):
        g = _gemini(llm, {"contents": contents, "tools": [{"functionDeclarations": [
            {"name": "get_weather", "parameters": scenarios.TOOL_PARAMETERS}]}]})
        assert g["usageMetadata"]["promptTokenCount"] > 0 and g["modelVersion"]
        part = g["candidates"][0]["content"]["parts"][0]
        if "text" in part:
            assert part["text"] == scenarios.reply(scenario, len(cities)).text
            break
        calls.append(part["functionCall"])
        contents += [g["candidates"][0]["content"],
                     {"role": "user", "parts": [{"functionResponse": {
                         "name": "get_weather", "response": {"result": "sunny"}}}]}]
    assert [c["args"]["city"] for c in calls] == cities


def test_gemini_conversation_turns_count_function_responses_after_their_marker(
        llm: ScriptedLLM) -> None:
    """google-genai's chat sends turn 1 (its functionCall and functionResponse) as history:
    turn 2 starts with its own city, and ends after its own functionResponse."""
    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "parts": [{"text": text}]}
    call = {"role": "model", "parts": [{"functionCall": {"name": "get_weather",
                                                          "args": {"city": "Paris"}}}]}
    response = {"role": "user", "parts": [{"functionResponse": {
        "name": "get_weather", "response": {"result": "sunny"}}}]}
    history = [user(scenarios.turn_prompt(1)), call, response,
               {"role": "model", "parts": [{"text": "It is sunny in Paris."}]},
               user(scenarios.turn_prompt(2))]
    first = _gemini(llm, {"contents": history})["candidates"][0]["content"]["parts"][0]
    assert first["functionCall"]["args"] == {"city": "London"}
    last = _gemini(llm, {"contents": [*history, call, response]})
    assert last["candidates"][0]["content"]["parts"][0] == {"text": "It is sunny in London."}


def test_gemini_api_streams_unnamed_chunks_with_usage_last(llm: ScriptedLLM) -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "[scenario:streaming]"}]},
                         {"role": "model", "parts": [{"functionCall": {
                             "name": "get_weather", "args": {"city": "Paris"}}}]},
                         {"role": "user", "parts": [{"functionResponse": {
                             "name": "get_weather", "response": {"result": "sunny"}}}]}]}
    chunks = _gemini(llm, body, stream=True)
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == scenarios.FINAL and len(chunks) > 1
    assert "usageMetadata" in chunks[-1] and "usageMetadata" not in chunks[0]
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


def test_a_tool_offered_under_a_qualified_name_is_called_by_it(llm: ScriptedLLM) -> None:
    """Semantic Kernel offers a plugin's function as PluginName-function."""
    qualified = {"type": "function", "function": {"name": "WeatherPlugin-get_weather",
                                                  "parameters": scenarios.TOOL_PARAMETERS}}
    msg = _client(llm).chat.completions.create(
        model="gpt-4o-mini", tools=[qualified],
        messages=[{"role": "user", "content": "[scenario:clean]"}]).choices[0].message
    assert msg.tool_calls is not None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in msg.tool_calls] == [
        ("WeatherPlugin-get_weather", {"city": "Paris"})]


@pytest.mark.parametrize(("text", "scrubbed"), [
    (r'File \"/root/.cache/otel-eval-conformance/smolagents/lib/python3.11/site-packages/'
     r'smolagents/agents.py\", line 3',
     r'File \"<venv>/lib/python3.11/site-packages/smolagents/agents.py\", line 3'),
    ("at f (file:///home/u/.cache/c/vercel-ai/node_modules/ai/node_modules/@ai-sdk/x.mjs:35:18)",
     "at f (file://<venv>/node_modules/ai/node_modules/@ai-sdk/x.mjs:35:18)"),
    (r'\"/root/.pyenv/versions/3.11.7/lib/python3.11/concurrent/futures/_base.py\"',
     r'\"<python>/lib/python3.11/concurrent/futures/_base.py\"'),
    (r'File \"/work/wt/r1/tests/conformance/stacks/common.py\"',
     r'File \"<repo>/tests/conformance/stacks/common.py\"'),
    ("at file:///tmp/c/otel-eval-conformance/vercel-ai/agent.mjs:40:36",
     "at file://<venv>/agent.mjs:40:36"),
    (r"boom\n/tmp/r2v/run.py and /Users/bob/a b", r"boom\n<path>/run.py and <path>/a b"),
    # URL paths and the placeholders themselves are not machine paths
    ("http://127.0.0.1:8000/v1/messages", "http://127.0.0.1:8000/v1/messages"),
    ('"url.path": "/v1/messages"', '"url.path": "/v1/messages"'),
    ("<venv>/node_modules/ai/node_modules/x.mjs", "<venv>/node_modules/ai/node_modules/x.mjs"),
])
def test_machine_paths_are_scrubbed_to_placeholders(text: str, scrubbed: str) -> None:
    assert scrub(text) == scrubbed
    assert scrub(scrubbed) == scrubbed and not LEAK.search(scrubbed)


@pytest.mark.parametrize("path", sorted((HERE / "recordings").glob("*/*.json")),
                         ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_recording_holds_a_path_of_the_recording_machine(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    leak = LEAK.search(text)
    assert leak is None, f"machine path at {leak.start()}: {text[leak.start():][:120]}"
    assert scrub(text) == text  # nothing else that record.py would rewrite either


def test_multi_agent_the_coordinator_delegates_and_the_weather_agent_calls_get_weather(
        llm: ScriptedLLM) -> None:
    """Who asks is told by what is offered: the coordinator (no get_weather) calls its one
    tool with the prompt, marker included; the weather agent calls get_weather until Paris'
    weather is in its conversation; the coordinator answers once a result came back."""
    client = _client(llm)
    ask = {"type": "function", "function": {"name": "ask_weather_agent", "parameters": {
        "type": "object", "properties": {"question": {"type": "string"}},
        "required": ["question"]}}}
    asked: list[Any] = [{"role": "user", "content": scenarios.prompt("multi_agent")}]
    first = client.chat.completions.create(model="m", messages=asked,
                                           tools=[ask]).choices[0].message
    (call,) = first.tool_calls or []
    question = json.loads(call.function.arguments)["question"]
    assert call.function.name == "ask_weather_agent"
    assert question == scenarios.prompt("multi_agent")
    # the weather agent, sent the question alone (an agent called as a tool)
    worker: list[Any] = [{"role": "user", "content": question}]
    msg = client.chat.completions.create(model="m", messages=worker,
                                         tools=[TOOL]).choices[0].message
    (weather,) = msg.tool_calls or []
    assert json.loads(weather.function.arguments) == {"city": "Paris"}
    worker += [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": weather.id,
                                                   "content": scenarios.weather("Paris")}]
    done = client.chat.completions.create(model="m", messages=worker,
                                          tools=[TOOL]).choices[0].message
    assert (done.content, done.tool_calls) == (scenarios.FINAL, None)
    asked += [first.model_dump(exclude_none=True),
              {"role": "tool", "tool_call_id": call.id, "content": scenarios.FINAL}]
    last = client.chat.completions.create(model="m", messages=asked,
                                          tools=[ask]).choices[0].message
    assert (last.content, last.tool_calls) == (scenarios.FINAL, None)


@pytest.mark.parametrize(("body", "tools"), [
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"x": 1}}}]},
     {"a": {"x": 1}}),
    ({"tools": [{"type": "function", "name": "a", "parameters": {"x": 1}}]}, {"a": {"x": 1}}),
    ({"tools": [{"name": "a", "input_schema": {"x": 1}}]}, {"a": {"x": 1}}),
    ({"tools": [{"functionDeclarations": [{"name": "a", "parameters_json_schema": {"x": 1}},
                                          {"name": "b"}]}]}, {"a": {"x": 1}, "b": {}}),
    ({"tools": "nonsense"}, {}),
])
def test_offered_tools_are_read_in_every_api_s_shape(body: Any, tools: Any) -> None:
    from scripted_llm import offered
    assert offered(body) == tools


@pytest.mark.parametrize(("parameters", "arguments"), [
    ({}, {}),  # the OpenAI Agents SDK's transfer_to_weather_agent
    ({"properties": {"agent_name": {"type": "string", "enum": ["weather_agent"]}},
      "required": ["agent_name"]}, {"agent_name": "weather_agent"}),  # ADK's transfer
    ({"properties": {"task": {"type": "string"}, "additional_args": {"type": "object"}},
      "required": ["task"]}, {"task": scenarios.prompt("multi_agent")}),  # smolagents
    ({"properties": {"coworker": {"type": "string"}, "task": {"type": "string"}}},
     {"coworker": "weather_agent", "task": scenarios.prompt("multi_agent")}),
])
def test_delegation_arguments_follow_the_tool_s_schema(parameters: Any, arguments: Any) -> None:
    assert scenarios.delegation_arguments(parameters) == arguments


def test_dspy_tools_are_read_from_react_s_prompt_text() -> None:
    """DSPy ReAct offers its tools in its system message, not as API tools."""
    from scripted_llm import _dspy_tools
    system = ("When selecting the next_tool_name and its next_tool_args, the tool must be one "
              "of:\n\n        (1) ask_weather_agent, whose description is <desc>Ask.</desc>. "
              "It takes arguments {'question': {'type': 'string'}}.\n        (2) finish, whose "
              "description is <desc>Done.</desc>. It takes arguments {}.\n")
    assert _dspy_tools([{"role": "system", "content": system}]) == {
        "ask_weather_agent": {"properties": {"question": {"type": "string"}}}}


def test_a_code_agent_s_tools_are_read_from_its_prompt_text(llm: ScriptedLLM) -> None:
    """smolagents' CodeAgent shows its tools and managed agents as Python functions: the
    coordinator's block calls its managed agent with the task, code marker kept."""
    system = ("You can use these tools:\ndef final_answer(answer: any) -> any:\n    ...\n"
              "def weather_agent(task: str, additional_args: dict) -> str:\n    ...\n")
    answer = _client(llm).chat.completions.create(model="m", messages=[
        {"role": "system", "content": system},
        {"role": "user", "content": scenarios.prompt("multi_agent") + " [answer:code]"}],
    ).choices[0].message.content or ""
    task = json.dumps(scenarios.prompt("multi_agent") + " [answer:code]")
    assert f"print(weather_agent(task={task}))" in answer


def test_a_messages_parameter_gets_one_user_message() -> None:
    """Haystack's Agent run as a ComponentTool takes its ChatMessage list."""
    args = scenarios.delegation_arguments({"properties": {"messages": {"type": "array"}},
                                           "required": ["messages"]})
    assert args == {"messages": [{"role": "user",
                                  "content": [{"text": scenarios.prompt("multi_agent")}]}]}


PARALLEL = list(scenarios.PARALLEL_CITIES)


def test_parallel_calls_come_in_one_reply_in_every_api_s_shape(llm: ScriptedLLM) -> None:
    """The parallel scenario's first reply holds one get_weather call per city, each with its
    own id, in chat completions (whole and streamed by index), Responses (one function_call
    item each, whole and streamed), Messages (one tool_use block each, whole and streamed)
    and Gemini (one functionCall part each); the results of both get the final text."""
    client = _client(llm)
    user = {"role": "user", "content": "weather? [scenario:parallel]"}
    msgs = _run(client, "parallel")
    assert len(msgs) == 2 and msgs[-1].content == scenarios.PARALLEL_FINAL
    calls = msgs[0].tool_calls or []
    assert [json.loads(c.function.arguments)["city"] for c in calls] == PARALLEL
    assert len({c.id for c in calls}) == 2

    stream = list(client.chat.completions.create(model="gpt-4o-mini", tools=[TOOL], stream=True,
                                                 messages=[user]))
    args: dict[int, str] = {}
    for c in stream:
        for d in c.choices[0].delta.tool_calls or [] if c.choices else []:
            args[d.index] = args.get(d.index, "") + (d.function.arguments or "")
    assert [json.loads(args[i])["city"] for i in sorted(args)] == PARALLEL

    r = client.responses.create(model="gpt-4o-mini", input=[user], tools=[RESPONSES_TOOL])
    assert [json.loads(o.arguments)["city"] for o in r.output] == PARALLEL
    assert len({o.call_id for o in r.output}) == len({o.id for o in r.output}) == 2
    events = list(client.responses.create(model="gpt-4o-mini", input=[user],
                                          tools=[RESPONSES_TOOL], stream=True))
    done = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert [json.loads(a)["city"] for a in done] == PARALLEL
    assert [e.sequence_number for e in events] == list(range(len(events)))

    body = {"model": "claude-3-5-haiku-20241022", "max_tokens": 256, "messages": [user],
            "tools": [ANTHROPIC_TOOL]}
    m = _messages(llm, body)
    assert [b["input"]["city"] for b in m["content"]] == PARALLEL
    assert m["stop_reason"] == "tool_use" and len({b["id"] for b in m["content"]}) == 2
    named = _messages(llm, {**body, "stream": True})
    starts = [e["index"] for n, e in named if n == "content_block_start"]
    assert starts == [0, 1] == [e["index"] for n, e in named if n == "content_block_stop"]
    answered = _messages(llm, {**body, "messages": [user, {"role": "assistant",
                                                           "content": m["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": b["id"],
                                      "content": "sunny"} for b in m["content"]]}]})
    assert answered["content"] == [{"type": "text", "text": scenarios.PARALLEL_FINAL}]

    contents = [{"role": "user", "parts": [{"text": user["content"]}]}]
    parts = _gemini(llm, {"contents": contents})["candidates"][0]["content"]["parts"]
    assert [p["functionCall"]["args"]["city"] for p in parts] == PARALLEL
    chunks = _gemini(llm, {"contents": contents}, stream=True)
    assert len(chunks) == 1 and chunks[0]["candidates"][0]["content"]["parts"] == parts


def test_a_code_agent_calls_each_parallel_city_in_one_code_block(llm: ScriptedLLM) -> None:
    reply = _client(llm).chat.completions.create(model="gpt-4o-mini", messages=[
        {"role": "user", "content": "[scenario:parallel] [answer:code]"}]).choices[0].message
    assert reply.content is not None
    code = reply.content.split("<code>\n", 1)[1]
    assert code == ('print(get_weather(city="Paris"))\nprint(get_weather(city="London"))\n'
                    "</code>")


def test_max_turns_calls_on_until_a_request_offers_no_tool(llm: ScriptedLLM) -> None:
    """The model never answers while get_weather is offered (cycling cities, as
    non_terminating); a framework at its cap asking without tools gets the give-up text."""
    client = _client(llm)
    messages: list[Any] = [{"role": "user", "content": "weather? [scenario:max_turns]"}]
    cities = []
    for _ in range(8):
        msg = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                             tools=[TOOL]).choices[0].message
        [call] = msg.tool_calls or []
        cities.append(json.loads(call.function.arguments)["city"])
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    assert cities == [*scenarios.CITIES, *scenarios.CITIES[:2]]
    last = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert last.choices[0].message.content == scenarios.GAVE_UP


def test_wrong_tool_calls_a_tool_never_offered_then_get_weather(llm: ScriptedLLM) -> None:
    msgs = _run(_client(llm), "wrong_tool")
    calls = [c for m in msgs[:-1] for c in m.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        (scenarios.WRONG_TOOL, {"city": "Paris"}), ("get_weather", {"city": "Paris"})]
    assert msgs[-1].content == scenarios.FINAL


def test_wrong_args_passes_the_city_under_another_name_then_as_city(llm: ScriptedLLM) -> None:
    msgs = _run(_client(llm), "wrong_args")
    calls = [c for m in msgs[:-1] for c in m.tool_calls or []]
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {scenarios.WRONG_ARGUMENT: "Paris"}), ("get_weather", {"city": "Paris"})]
    assert msgs[-1].content == scenarios.FINAL


def test_length_stop_cuts_the_answer_after_the_tool_result_at_the_token_limit(
        llm: ScriptedLLM) -> None:
    msgs = _run(_client(llm), "length_stop")
    assert msgs[-1].content == scenarios.TRUNCATED
    client = _client(llm)
    messages: list[Any] = [{"role": "user", "content": "weather? [scenario:length_stop]"}]
    first = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                           tools=[TOOL]).choices[0]
    assert first.finish_reason == "tool_calls"
    [call] = first.message.tool_calls or []
    messages += [first.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    last = client.chat.completions.create(model="gpt-4o-mini", messages=messages,
                                          tools=[TOOL]).choices[0]
    assert (last.finish_reason, last.message.content) == ("length", scenarios.TRUNCATED)


def test_empty_answer_answers_nothing_after_the_tool_result(llm: ScriptedLLM) -> None:
    msgs = _run(_client(llm), "empty_answer")
    assert [c.function.name for m in msgs[:-1] for c in m.tool_calls or []] == ["get_weather"]
    assert msgs[-1].content == ""
