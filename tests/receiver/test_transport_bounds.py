"""Issue 11 (transport): hostile HTTP framing on the OTLP/HTTP receiver and the admin API.

Each request goes over a raw socket so that the framing (lengths, chunks, encodings) is
exactly what an attacker sends; the answer must come at once (no read to end of stream) and
be a clear status, never a silently empty 200 or a dropped connection.
"""

from __future__ import annotations

import email.message
import gzip
import io
import json
import os
import socket
import subprocess
import tracemalloc
from pathlib import Path

import pytest
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.base.model import Span
from otel_eval.decode import encode
from otel_eval.decode.body import loads_bounded, read_body
from otel_eval.receive.httpserver import HttpLimits

LIMIT = 256 * 1024


def _spans(trace: str = "ab" * 16, n: int = 2) -> list[Span]:
    return [Span(trace, f"{i + 1:016x}", None if i == 0 else f"{1:016x}", f"s{i}", 1, 2)
            for i in range(n)]


def _exchange(port: int, head: str, body: bytes = b"",
              check_close: bool = False) -> tuple[int, bytes, bool]:
    """Send raw bytes; return (status, the rest of the answer, whether the server closed).

    Without ``check_close`` the request says ``Connection: close`` (the answer is all we
    read); with it, the request keeps the connection alive and we see whether the server
    closes it anyway.

    The 10 s socket timeout only turns a server that waits for bytes never sent (today's
    behaviour for ``Content-Length: -1``) into a failed assertion instead of a hung suite.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        head += "" if check_close else "Connection: close\n"
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        closed = False
        while b"\r\n\r\n" not in data:
            piece = s.recv(65536)
            if not piece:
                closed = True
                break
            data += piece
        head_bytes, _, rest = data.partition(b"\r\n\r\n")
        status = int(head_bytes.split(b" ", 2)[1]) if head_bytes else 0
        headers = head_bytes.decode("latin-1").lower()
        length = int(headers.split("content-length:", 1)[1].split("\r\n", 1)[0]) \
            if "content-length:" in headers else 0
        while len(rest) < length:
            piece = s.recv(65536)
            if not piece:
                break
            rest += piece
        if not closed and check_close:
            try:
                closed = s.recv(1) == b""
            except TimeoutError:
                closed = False
        return status, rest[:length], closed


def _post_head(path: str, ctype: str, *headers: str) -> str:
    extra = "".join(f"{h}\n" for h in headers)
    return f"POST {path} HTTP/1.1\nHost: localhost\nContent-Type: {ctype}\n{extra}"


def _chunked(data: bytes, size: int = 1000) -> bytes:
    out = b"".join(b"%x\r\n%s\r\n" % (len(data[i:i + size]), data[i:i + size])
                   for i in range(0, len(data), size))
    return out + b"0\r\n\r\n"


@pytest.fixture
def h(tmp_path: Path) -> Harness:
    with running_service(tmp_path, **{"receiver.max_message_bytes": LIMIT}) as harness:
        yield harness  # type: ignore[misc]


def _port(h: Harness) -> int:
    assert h.svc.http is not None
    return h.svc.http.port


PB = "application/x-protobuf"


def test_chunked_protobuf_and_gzip_bodies_are_accepted(h: Harness) -> None:
    body = encode.encode_spans(_spans("01" * 16)).SerializeToString()
    status, _, _ = _exchange(_port(h), _post_head("/v1/traces", PB,
                                                  "Transfer-Encoding: chunked"), _chunked(body))
    assert status == 200
    zipped = gzip.compress(encode.encode_spans(_spans("02" * 16)).SerializeToString())
    status, _, _ = _exchange(_port(h), _post_head(
        "/v1/traces", PB, "Transfer-Encoding: chunked", "Content-Encoding: gzip"),
        _chunked(zipped, 7))
    assert status == 200
    assert h.svc.engine.open_traces() == 2
    assert h.sample("otel_eval_receiver_spans_accepted_total", protocol="http") == 4


@pytest.mark.parametrize(("headers", "body", "code"), [
    (("Content-Length: -1",), b"x" * 100, 400),
    (("Content-Length: abc",), b"", 400),
    ((), b"\x0a\x00", 411),
    (("Content-Length: 99999999999",), b"x" * 10, 413),
    (("Content-Length: 99999999999", "Content-Encoding: gzip"), gzip.compress(b"x"), 413),
    (("Transfer-Encoding: chunked",), b"%x\r\n" % (LIMIT + 1), 413),
    (("Transfer-Encoding: chunked",), b"zz\r\n", 400),
    (("Transfer-Encoding: chunked", "Content-Encoding: gzip"),
     _chunked(gzip.compress(b"\x00" * (4 * LIMIT)), 100), 413),
    (("Transfer-Encoding: gzip",), b"", 501),
    (("Content-Length: 5", "Content-Encoding: br"), b"xxxxx", 415),
], ids=["negative-length", "text-length", "no-length", "huge-length", "huge-length-gzip",
        "huge-chunk", "bad-chunk-size", "chunked-gzip-bomb", "unknown-transfer-encoding",
        "unknown-content-encoding"])
def test_bad_framing_gets_a_status_at_once_and_the_connection_closes(
        h: Harness, headers: tuple[str, ...], body: bytes, code: int) -> None:
    status, answer, closed = _exchange(_port(h), _post_head("/v1/traces", PB, *headers), body,
                                       check_close=True)
    assert status == code
    assert answer  # a google.rpc.Status saying why
    assert closed  # what was not read is never parsed as a next request
    assert h.svc.engine.open_traces() == 0


def _otlp_json(span_extra: str) -> bytes:
    span = '{"traceId":"' + "ab" * 16 + '","spanId":"' + "01" * 8 + '","name":"x"'
    return ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + span_extra
            + "}]}]}]}").encode()


def _nested_kvlist(depth: int) -> str:
    return (',"attributes":[{"key":"k","value":' + '{"kvlistValue":{"values":[{"key":"a",'
            '"value":' * depth + '{"intValue":1}' + "}]}}" * depth + "}]")


@pytest.mark.parametrize(("body", "reason"), [
    (_otlp_json(_nested_kvlist(300)), "nested deeper"),
    (_otlp_json(_nested_kvlist(40)), "nested deeper"),
    # deeper than protobuf decodes, within the JSON bound: protobuf's parser refuses it
    (_otlp_json(_nested_kvlist(32)), "OTLP"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (_otlp_json(',"\\ud800":1'), "OTLP"),
    (b'{"\\udfff":1,"resourceSpans":[]}', "OTLP"),
    (_otlp_json(',"kind":Infinity'), "Infinity"),
    (_otlp_json(',"startTimeUnixNano":NaN'), "NaN"),
], ids=["kvlist-300", "kvlist-40", "kvlist-32", "array-100k", "surrogate-key", "surrogate-top-key",
        "infinity-enum", "nan-int"])
def test_hostile_json_is_400_with_a_reason(h: Harness, body: bytes, reason: str) -> None:
    status, answer, _ = _exchange(_port(h), _post_head(
        "/v1/traces", "application/json", f"Content-Length: {len(body)}"), body)
    assert status == 400
    assert reason in json.loads(answer)["message"]
    assert h.svc.engine.open_traces() == 0


def _logs_json(extra: str) -> bytes:
    return ('{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"eventName":"gen_ai.choice"'
            + extra + "}]}]}]}").encode()


@pytest.mark.parametrize(("body", "reason"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    (b'{"\\udfff":1,"resourceLogs":[]}', "OTLP"),
    (_logs_json(',"severityNumber":Infinity'), "Infinity"),
], ids=["array-100k", "surrogate-top-key", "infinity-enum"])
def test_hostile_logs_json_is_400_with_a_reason(h: Harness, body: bytes, reason: str) -> None:
    """/v1/logs parses JSON under the same bounds as /v1/traces."""
    status, answer, _ = _exchange(_port(h), _post_head(
        "/v1/logs", "application/json", f"Content-Length: {len(body)}"), body)
    assert status == 400
    assert reason in json.loads(answer)["message"]


def test_json_depth_bound_keeps_ordinary_nesting() -> None:
    assert loads_bounded(_otlp_json(_nested_kvlist(10)))
    assert loads_bounded(_otlp_json(_nested_kvlist(31)))  # as deep as protobuf decodes
    with pytest.raises(ValueError, match="nested deeper than 5"):
        loads_bounded(b"[[[[[[1]]]]]]", max_depth=5)
    assert loads_bounded(b"[[[[[1]]]]]", max_depth=5) == [[[[[1]]]]]


def test_a_body_of_one_byte_chunks_holds_about_its_size() -> None:
    """``read_body`` promises never more than ``limit`` bytes held, whatever the framing. A
    chunked body of 1-byte chunks was joined from a list of one bytes object per chunk: ~90
    bytes held per byte sent (64 MiB, the default limit: ~5.7 GB for one request)."""
    n = 100_000
    headers = email.message.Message()
    headers["Transfer-Encoding"] = "chunked"
    wire = io.BufferedReader(io.BytesIO(b"1\r\nx\r\n" * n + b"0\r\n\r\n"))
    tracemalloc.start()
    try:
        body = read_body(headers, wire, n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert body == b"x" * n
    assert peak < 4 * n, f"{peak} bytes held for a body of {n}"


def test_bodies_held_at_once_are_bounded_over_every_connection(tmp_path: Path) -> None:
    """Each connection was bounded by ``max_message_bytes`` (64 MiB), but nothing bounded
    them together: 1,024 connections (128 from one address) could each hold a full body, a
    64 KB gzip bomb apiece. Past ``max_body_bytes_in_flight`` a body is a retryable 429."""
    budget = 4096
    with running_service(tmp_path, **{"receiver.max_message_bytes": budget,
                                      "receiver.max_body_bytes_in_flight": budget}) as h:
        assert h.svc.http is not None and h.svc.http._server is not None
        held = h.svc.http._server.budget
        assert held is not None
        with socket.create_connection(("127.0.0.1", _port(h)), timeout=10) as slow:
            slow.sendall(_post_head("/v1/traces", PB, "Transfer-Encoding: chunked",
                                    "Connection: close").replace("\n", "\r\n").encode()
                         + b"\r\n" + b"%x\r\n%s\r\n" % (3000, b"\x00" * 3000))
            poll(lambda: held.held == 3000, "the first chunk held")
            body = b"\x00" * 2000
            status, answer, _ = _exchange(_port(h), _post_head(
                "/v1/traces", PB, f"Content-Length: {len(body)}"), body)
            assert status == 429 and b"in flight" in answer
            assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="http",
                            reason="bodies_in_flight") == 1
            slow.sendall(b"0\r\n\r\n")
            assert slow.recv(65536).startswith(b"HTTP/1.1 ")  # answered: its share given back
        assert held.held == 0
        status, _, _ = _exchange(_port(h), _post_head(
            "/v1/traces", PB, f"Content-Length: {len(body)}"), body)
        assert status != 429


def test_one_address_holds_at_most_half_the_bodies_in_flight(tmp_path: Path) -> None:
    """``max_body_bytes_in_flight`` was one pool for every address: four stalled connections
    from one address, each holding a 64 MiB inflated body until its read deadline, took the
    whole of it, and every other sender got 429s. One address now holds at most half of it
    (at least one message): past that its own request is the 429 (``sender_share``)."""
    budget = 4096
    with running_service(tmp_path, **{"receiver.max_message_bytes": budget // 2,
                                      "receiver.max_body_bytes_in_flight": budget}) as h:
        assert h.svc.http is not None and h.svc.http._server is not None
        held = h.svc.http._server.budget
        assert held is not None
        head = _post_head("/v1/traces", PB, "Transfer-Encoding: chunked",
                          "Connection: close").replace("\n", "\r\n").encode() + b"\r\n"
        chunk = b"%x\r\n%s\r\n" % (2000, b"\x00" * 2000)
        with socket.create_connection(("127.0.0.1", _port(h)), timeout=10) as one, \
                socket.create_connection(("127.0.0.1", _port(h)), timeout=10) as two:
            one.sendall(head + chunk)
            poll(lambda: held.held == 2000, "the first stalled body held")
            two.sendall(head + chunk)

            def throttled() -> float:
                return h.sample("otel_eval_receiver_requests_throttled_total",
                                protocol="http", reason="sender_share")
            poll(lambda: held.held == 4000 or throttled() == 1, "the second body read")
            body = b"\x00" * 1000
            with socket.create_connection(("127.0.0.1", _port(h)), timeout=10,
                                          source_address=("127.0.0.2", 0)) as other:
                other.sendall(_post_head("/v1/traces", PB, f"Content-Length: {len(body)}",
                                         "Connection: close").replace("\n", "\r\n").encode()
                              + b"\r\n" + body)
                answer = other.recv(65536)
            assert not answer.startswith(b"HTTP/1.1 429"), answer[:200]
            assert throttled() == 1 and two.recv(65536).startswith(b"HTTP/1.1 429")
            one.sendall(b"0\r\n\r\n")
            assert one.recv(65536).startswith(b"HTTP/1.1 ")
        assert held.held == 0


def test_behind_a_proxy_each_token_holds_its_own_share_of_the_bodies(tmp_path: Path) -> None:
    """Behind a proxy that passes each team's token on, every sender is the proxy's address:
    the share of ``max_body_bytes_in_flight`` was per address, so one team's stalled body
    left every other team behind that proxy 429 ``sender_share``. A sender is now its address
    and its token's name."""
    budget = 4096
    tokens = {"team-a": "a" * 32, "team-b": "b" * 32}
    with running_service(tmp_path, **{"receiver.max_message_bytes": budget // 2,
                                      "receiver.max_body_bytes_in_flight": budget,
                                      "receiver.bearer_tokens": tokens}) as h:
        assert h.svc.http is not None and h.svc.http._server is not None
        held = h.svc.http._server.budget
        assert held is not None

        def head(token: str, *framing: str) -> bytes:
            return (_post_head("/v1/traces", PB, f"Authorization: Bearer {token}", *framing,
                               "Connection: close").replace("\n", "\r\n").encode() + b"\r\n")
        with socket.create_connection(("127.0.0.1", _port(h)), timeout=10) as stalled:
            stalled.sendall(head(tokens["team-a"], "Transfer-Encoding: chunked")
                            + b"%x\r\n%s\r\n" % (1500, b"\x00" * 1500))
            poll(lambda: held.held == 1500, "team a's stalled body held")
            body = b"\x00" * 1000  # from the same address: 2500 > the address's 2048
            with socket.create_connection(("127.0.0.1", _port(h)), timeout=10) as other:
                other.sendall(head(tokens["team-b"], f"Content-Length: {len(body)}") + body)
                answer = other.recv(65536)
            assert answer.startswith(b"HTTP/1.1 ") and not answer.startswith(
                b"HTTP/1.1 429"), answer[:200]
            assert h.sample("otel_eval_receiver_requests_throttled_total", protocol="http",
                            reason="sender_share") == 0
            stalled.sendall(b"0\r\n\r\n")
            assert stalled.recv(65536).startswith(b"HTTP/1.1 ")
        assert held.held == 0


def _admin_port(h: Harness) -> int:
    return h.svc.admin.port


def test_feedback_over_one_mib_is_refused_and_not_read_as_a_second_request(
        h: Harness) -> None:
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    body = b" " * (1 << 20) + smuggled
    status, answer, closed = _exchange(_admin_port(h), _post_head(
        "/v1/feedback", "application/json", f"Content-Length: {len(body)}"), body,
        check_close=True)
    assert status == 413 and b"limit" in answer
    assert closed  # the healthz request hidden past 1 MiB got no answer


def test_a_refused_body_still_being_sent_gets_the_answer_not_a_reset(h: Harness) -> None:
    """The 413 is written before the body is read; the client reads it, then goes on sending
    the 2 MiB it announced. The server reads and drops them until the client closes, so the
    client's writes succeed and it sees an orderly end, never ``EPIPE`` / ``ECONNRESET``."""
    body = b"x" * (2 << 20)
    head = _post_head("/v1/feedback", "application/json", f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", _admin_port(h)), timeout=10) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n")
        answer = b""
        while b"limit" not in answer:
            piece = s.recv(65536)
            assert piece, answer
            answer += piece
        assert answer.startswith(b"HTTP/1.1 413")
        s.sendall(body)  # a closed socket would answer this with a reset
        assert s.recv(1) == b""


def test_feedback_chunked_and_hostile_json(h: Harness) -> None:
    fb = json.dumps({"trace_id": "ee" * 16, "outcome": "success"}).encode()
    status, answer, _ = _exchange(_admin_port(h), _post_head(
        "/v1/feedback", "application/json", "Transfer-Encoding: chunked"), _chunked(fb, 5))
    assert status == 404 and b"no evaluation" in answer  # read and understood
    deep = b'{"trace_id":' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, answer, _ = _exchange(_admin_port(h), _post_head(
        "/v1/feedback", "application/json", f"Content-Length: {len(deep)}"), deep)
    assert status == 400 and b"nested deeper" in answer


def _listen_backlog(port: int) -> int:
    """The accept-queue bound of a listening socket, as ``ss`` reports it (Send-Q)."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True,
                         check=True, env={**os.environ, "LC_ALL": "C"}).stdout.split()
    return int(out[2])


def test_http_servers_listen_with_a_real_backlog(h: Harness) -> None:
    assert _listen_backlog(_port(h)) >= 128
    assert _listen_backlog(_admin_port(h)) >= 128


def test_connections_are_capped_and_silent_ones_closed(tmp_path: Path) -> None:
    limits = HttpLimits(max_connections=2, read_header_timeout_s=3.0)
    with running_service(tmp_path, **{"receiver.http_limits": limits}) as harness:
        port = _port(harness)
        held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
        with socket.create_connection(("127.0.0.1", port), timeout=10) as third:
            third.sendall(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            answer = b"".join(iter(lambda: third.recv(4096), b""))
            # over the cap: the oldest silent connection gives it its slot (issue 33)
            assert answer.startswith(b"HTTP/1.1 404 ")
        for s in held:  # the oldest closed for the third; the other at read_header_timeout_s
            assert s.recv(1) == b""
            s.close()
        assert harness.sample("otel_eval_receiver_connections_closed_total",
                              listener="http", reason="reused") == 1
        assert harness.sample("otel_eval_receiver_connections_closed_total",
                              listener="http", reason="header_timeout") == 1
        body = encode.encode_spans(_spans("03" * 16)).SerializeToString()
        status, _, _ = _exchange(port, _post_head("/v1/traces", PB,
                                                  f"Content-Length: {len(body)}"), body)
        assert status == 200  # slots freed
