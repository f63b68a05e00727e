"""OTLP/JSON agent traces for the real-service end-to-end test: a looping run, a run cut off at
its token limit with no answer, a run whose tool fails, clean runs, and one invalid span."""

from __future__ import annotations

import json
import random
import time
import urllib.request
from typing import Any

SERVICE, LOOPY, CLEAN = "shop", "looper", "steady"


def _attr(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def _id(bits: int) -> str:
    return f"{random.getrandbits(bits):0{bits // 4}x}"


class _Run:
    def __init__(self, agent: str) -> None:
        self.trace_id, self.root, self.agent = _id(128), _id(64), agent
        self.t = time.time_ns()
        self.start = self.t
        self.spans: list[dict[str, Any]] = []

    def _span(self, name: str, attrs: dict[str, Any], status: int = 1) -> None:
        self.spans.append({
            "traceId": self.trace_id, "spanId": _id(64), "parentSpanId": self.root,
            "name": name, "kind": 1, "startTimeUnixNano": str(self.t),
            "endTimeUnixNano": str(self.t + 1_000_000), "status": {"code": status},
            "attributes": [_attr(k, v) for k, v in attrs.items()]})
        self.t += 2_000_000

    def llm(self, finish: str) -> None:
        self._span("chat gpt-4o", {"gen_ai.operation.name": "chat",
                                   "gen_ai.request.model": "gpt-4o",
                                   "gen_ai.usage.input_tokens": 500,
                                   "gen_ai.usage.output_tokens": 50,
                                   "gen_ai.response.finish_reasons": finish})

    def tool(self, args: str, result: str, status: int = 1) -> None:
        self._span("execute_tool search", {"gen_ai.operation.name": "execute_tool",
                                           "gen_ai.tool.name": "search",
                                           "gen_ai.tool.call.arguments": args,
                                           "gen_ai.tool.call.result": result}, status)

    def request(self, answered: bool) -> dict[str, Any]:
        attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": self.agent}
        if answered:
            attrs["gen_ai.output.messages"] = json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}])
        root = {"traceId": self.trace_id, "spanId": self.root, "name": f"invoke_agent {self.agent}",
                "kind": 1, "startTimeUnixNano": str(self.start - 1),
                "endTimeUnixNano": str(self.t), "status": {"code": 1},
                "attributes": [_attr(k, v) for k, v in attrs.items()]}
        return {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", SERVICE)]},
                                   "scopeSpans": [{"scope": {"name": "e2e"},
                                                   "spans": [root, *self.spans]}]}]}


def _runs() -> list[dict[str, Any]]:
    out = []
    loop = _Run(LOOPY)  # the same call three times in a row: a loop (and over a 2-call budget)
    loop.llm("tool_calls")
    for _ in range(3):
        loop.tool('{"q": "x"}', "nothing")
    loop.llm("stop")
    out.append(loop.request(answered=True))
    cut = _Run(LOOPY)  # stopped at the token limit, never answered: non-termination
    cut.llm("tool_calls")
    cut.tool('{"q": "y"}', "found")
    cut.llm("length")
    out.append(cut.request(answered=False))
    fail = _Run(LOOPY)  # the tool fails: a runtime tool error
    fail.llm("tool_calls")
    fail.tool('{"q": "z"}', "boom", status=2)
    fail.llm("stop")
    out.append(fail.request(answered=True))
    for _ in range(3):
        ok = _Run(CLEAN)
        ok.llm("tool_calls")
        ok.tool('{"q": "w"}', "found")
        ok.llm("stop")
        out.append(ok.request(answered=True))
    bad = _Run(CLEAN)  # one span with an invalid trace id: rejected with a reason
    bad.llm("stop")
    req = bad.request(answered=True)
    req["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz"
    out.append(req)
    return out


def _logs(traces: dict[str, Any]) -> dict[str, Any]:
    """The first run's LLM answer as a GenAI event log record (content sent as logs, as the
    openai-v2 instrumentation does by default), and a plain log line that is ignored."""
    span = traces["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    choice = {"key": "gen_ai.choice", "value": {"kvlistValue": {"values": [
        {"key": "index", "value": {"intValue": "0"}},
        {"key": "finish_reason", "value": {"stringValue": "tool_calls"}}]}}}
    records = [{"timeUnixNano": span["endTimeUnixNano"], "eventName": "gen_ai.choice",
                "traceId": span["traceId"], "spanId": span["spanId"],
                "body": choice["value"]},
               {"timeUnixNano": span["endTimeUnixNano"], "body": {"stringValue": "hello"}}]
    return {"resourceLogs": [{"resource": {"attributes": [_attr("service.name", SERVICE)]},
                              "scopeLogs": [{"scope": {"name": "e2e"},
                                             "logRecords": records}]}]}


def _post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200


def send_round(http_port: int) -> None:
    runs = _runs()
    _post(f"http://127.0.0.1:{http_port}/v1/logs", _logs(runs[0]))
    for body in runs:
        _post(f"http://127.0.0.1:{http_port}/v1/traces", body)
