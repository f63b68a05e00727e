"""A scripted OpenAI-compatible ``/v1/chat/completions`` server on 127.0.0.1, port 0.

Each request pops the next scripted reply (status, headers, body) and is recorded, so tests
see what litellm actually sent over HTTP. ``hang()`` makes a reply wait until the server
stops (the client's timeout fires first): no sleeps, no fixed ports. ``trickle`` sends the
headers, then one byte of the body every ``TRICKLE_S`` until the server stops (a provider
that never finishes, and never falls silent long enough for a per-read timeout).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None  # dict -> JSON; str -> raw; bytes -> as they are (an encoded body)
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False
    trickle: bool = False


CHUNK = 64 * 1024  # bytes of a reply body written at once
TRICKLE_S = 0.02  # between the bytes of a trickled reply (the server's pace, not a wait)


def completion(content: str, model: str = "gpt-4o-mini", prompt_tokens: int = 1000,
               completion_tokens: int = 100) -> Reply:
    return Reply(200, {
        "id": "chatcmpl-test", "object": "chat.completion", "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens},
    })


def good(data: Any, **kw: Any) -> Reply:
    return completion(json.dumps(data), **kw)


def error(status: int, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, {"error": {"message": f"scripted {status}", "type": "server_error",
                                    "code": str(status)}}, headers or {})


class FakeLLM:
    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # of each request, names in lower case
        self.released = threading.Event()
        self.arrived = threading.Event()  # set when any request has arrived
        self.sent_bytes = 0  # of reply bodies, as far as the client took them
        self.answered = threading.Event()  # set when a reply was written or refused
        # replies chosen from the request instead of the script (concurrent calls)
        self.route: Callable[[dict[str, Any]], Reply] | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append(body)
                fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                fake.arrived.set()
                if fake.route is not None:
                    reply = fake.route(body)
                else:
                    reply = fake.replies.popleft() if fake.replies else error(500)
                if reply.hang:
                    fake.released.wait(30)
                    return
                if reply.trickle:
                    self._trickle()
                    return
                raw = (reply.body if isinstance(reply.body, str | bytes)
                       else json.dumps(reply.body))
                data = raw if isinstance(raw, bytes) else raw.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:  # in pieces, counted: a client that stops reading is seen to stop
                    for at in range(0, len(data), CHUNK):
                        self.wfile.write(data[at:at + CHUNK])
                        fake.sent_bytes += len(data[at:at + CHUNK])
                except OSError:  # the client closed the connection
                    self.close_connection = True
                finally:
                    fake.answered.set()

            def _trickle(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(1 << 20))
                self.end_headers()
                self.wfile.flush()
                while not fake.released.wait(TRICKLE_S):
                    try:
                        self.wfile.write(b" ")
                        self.wfile.flush()
                    except OSError:  # the client gave up
                        return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def by_schema(self, replies: dict[str, Reply]) -> None:
        """Reply by the response_format schema name (``step_grade``, ``combined_grade``...)."""
        def route(body: dict[str, Any]) -> Reply:
            return replies[body["response_format"]["json_schema"]["name"]]
        self.route = route

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)
