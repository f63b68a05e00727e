"""A scripted OpenAI-compatible chat completions server on loopback, for recording the corpus.

``POST /v1/chat/completions`` (also ``/chat/completions``), non-streaming and streaming (SSE
chunks with tool-call deltas, the ``stream_options.include_usage`` usage chunk, ``[DONE]``).
What it answers is ``scenarios.reply(NAME, k)``:

- NAME is the ``[scenario:NAME]`` marker found in any message of the conversation (string
  content or text parts);
- k is the number of tool results already in the conversation: ``role: "tool"`` (or legacy
  ``"function"``) messages, plus ``tool_result`` / ``function_call_output`` content parts or
  items, for clients that shape them so.

The model is always reported as ``gpt-4o-mini`` (a model litellm's price table knows), with
ids shaped like real ones (``chatcmpl-...``, ``call_...``) derived from the conversation so a
re-recording gives the same ids, and usage numbers that grow with the conversation. A request
without a marker, with an unknown scenario or not shaped like a chat completion gets a 400
with an OpenAI-style error body (and is noted in ``errors``: ``record.py`` writes no recording
then). ``requests`` counts answered calls; requests are served on threads, counters under a
lock.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import scenarios

MODEL = "gpt-4o-mini"
_ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


class BadRequest(ValueError):
    """The request is not a chat completion this server can script."""


def _token_id(seed: str, n: int) -> str:
    digest = hashlib.sha256(seed.encode()).digest()
    while len(digest) < n:
        digest += hashlib.sha256(digest).digest()
    return "".join(_ALNUM[b % len(_ALNUM)] for b in digest[:n])


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [p.get("text", "") for p in content
                if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return []


def _is_tool_result(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    return item.get("role") in ("tool", "function") or \
        item.get("type") in ("tool_result", "function_call_output")


def scenario_of(messages: list[Any]) -> tuple[str, int]:
    """(scenario name, tool results so far) of a conversation; BadRequest when unscripted."""
    name = None
    k = 0
    for m in messages:
        if not isinstance(m, dict):
            raise BadRequest("messages must be objects")
        for text in _texts(m.get("content")):
            if name is None and (found := scenarios.MARKER.search(text)):
                name = found.group(1)
        parts = m.get("content") if isinstance(m.get("content"), list) else []
        k += _is_tool_result(m) + sum(_is_tool_result(p) for p in parts)
    if name is None:
        raise BadRequest("no [scenario:NAME] marker in the conversation")
    if name not in scenarios.SCENARIOS:
        raise BadRequest(f"unknown scenario {name!r}")
    return name, k


def _usage(messages: list[Any], answer: str) -> dict[str, int]:
    prompt = 40 + len(json.dumps(messages)) // 4
    completion = 9 + len(answer) // 4
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


def plan(body: dict[str, Any]) -> dict[str, Any]:
    """The scripted answer to a chat completions request body: ids, message, usage."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("'messages' must be a non-empty list")
    name, k = scenario_of(messages)
    r = scenarios.reply(name, k)
    seed = f"{name}/{k}/{len(messages)}"
    out: dict[str, Any] = {"id": "chatcmpl-" + _token_id(seed, 29),
                           "fingerprint": "fp_" + _token_id("fp", 10)}
    if r.city is not None:
        call = {"id": "call_" + _token_id(seed + "/call", 24), "type": "function",
                "function": {"name": scenarios.TOOL_NAME,
                             "arguments": json.dumps({"city": r.city})}}
        out.update(message={"role": "assistant", "content": None, "tool_calls": [call],
                            "refusal": None},
                   finish_reason="tool_calls", answer=json.dumps(call))
    else:
        out.update(message={"role": "assistant", "content": r.text, "refusal": None},
                   finish_reason="stop", answer=r.text or "")
    out["usage"] = _usage(messages, out.pop("answer"))
    return out


def completion(p: dict[str, Any], created: int) -> dict[str, Any]:
    return {"id": p["id"], "object": "chat.completion", "created": created, "model": MODEL,
            "system_fingerprint": p["fingerprint"], "service_tier": "default",
            "choices": [{"index": 0, "message": p["message"], "logprobs": None,
                         "finish_reason": p["finish_reason"]}],
            "usage": {**p["usage"], "prompt_tokens_details": {"cached_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0}}}


def chunks(p: dict[str, Any], created: int, include_usage: bool) -> list[dict[str, Any]]:
    """The SSE chunk objects of a streamed answer, in order (without ``[DONE]``)."""
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        c: dict[str, Any] = {"id": p["id"], "object": "chat.completion.chunk",
                             "created": created, "model": MODEL,
                             "system_fingerprint": p["fingerprint"],
                             "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                          "finish_reason": finish}]}
        if include_usage:
            c["usage"] = None
        return c

    msg = p["message"]
    out = [chunk({"role": "assistant", "content": "" if msg["content"] else None,
                  "refusal": None})]
    if msg.get("tool_calls"):
        call = msg["tool_calls"][0]
        out.append(chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        args = call["function"]["arguments"]
        for i in range(0, len(args), 8):
            out.append(chunk({"tool_calls": [{"index": 0,
                                              "function": {"arguments": args[i:i + 8]}}]}))
    else:
        words = msg["content"].split(" ")
        for i, w in enumerate(words):
            out.append(chunk({"content": w if i == 0 else " " + w}))
    out.append(chunk({}, p["finish_reason"]))
    if include_usage:
        out.append({**chunk({}), "choices": [], "usage": p["usage"]})
    return out


class ScriptedLLM:
    """The server: ``start()`` binds 127.0.0.1:0; ``base_url`` ends in ``/v1``."""

    def __init__(self, clock: Any = time.time) -> None:
        self.clock = clock
        self.requests = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def refused(self, reason: str) -> None:
        with self._lock:
            self.errors.append(reason)

    def answer(self, body: Any) -> tuple[bool, Any]:
        """(stream?, completion or chunk list) for a request body; BadRequest when unscripted."""
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        p = plan(body)
        created = int(self.clock())
        with self._lock:
            self.requests += 1
        if body.get("stream"):
            opts = body.get("stream_options") or {}
            return True, chunks(p, created, bool(opts.get("include_usage")))
        return False, completion(p, created)


def _handler(llm: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] not in ("/v1/chat/completions", "/chat/completions"):
                self._json(404, {"error": {"message": f"no route {self.path}",
                                           "type": "invalid_request_error"}})
                return
            try:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                stream, answer = llm.answer(json.loads(raw or b"null"))
            except (BadRequest, ValueError, KeyError, IndexError) as e:
                llm.refused(str(e))
                self._json(400, {"error": {"message": str(e), "type": "invalid_request_error",
                                           "code": "unscripted_request"}})
                return
            if stream:
                self._sse(answer)
            else:
                self._json(200, answer)

        def _json(self, code: int, obj: Any) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _sse(self, items: list[Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            for item in items:
                self.wfile.write(b"data: " + json.dumps(item).encode() + b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler
