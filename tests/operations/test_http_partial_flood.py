"""Issue 33, finding 12: a flood of partial OTLP/HTTP requests from many peers denied exports
for as long as it lasted (1,127 partial requests from 49 addresses: 0 of 40 exports), not only
until the header deadline: every slot closed at its deadline was taken again by the flood.

Now, when every slot is taken, a new connection closes the oldest partial one (waiting for a
request head, never authenticated) and takes its slot, and an authenticated sender's
keep-alive connection is never closed for a newcomer. Real service on loopback; the flood's
peers are other loopback addresses (127.0.0.2...), each under its per-peer cap."""

from __future__ import annotations

import http.client
import socket
from contextlib import ExitStack
from pathlib import Path

import pytest
from support.harness import Harness, running_service
from support.poll import poll

from otel_eval.base.model import Span
from otel_eval.decode import encode
from otel_eval.receive import httpconn
from otel_eval.receive.config import HttpLimits

SLOTS, PER_PEER = 32, 8
TOKEN = "Bearer app-secret"
HEAD = b"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-protobuf\r\n"


def _partial(stack: ExitStack, port: int, peer: int) -> socket.socket:
    """A connection from 127.0.0.<peer> that sends part of a request head, then nothing."""
    s = stack.enter_context(socket.create_connection(
        ("127.0.0.1", port), timeout=30, source_address=(f"127.0.0.{peer}", 0)))
    s.sendall(HEAD)
    return s


def _slots_held(h: Harness, n: int) -> None:
    """Until the listener holds ``n`` connections."""
    assert h.svc.http is not None and h.svc.http._server is not None
    server = h.svc.http._server
    poll(lambda: server.connections >= n, f"the listener to hold {n} connections",
         timeout_s=30, interval_s=0.01)


def _export(conn: http.client.HTTPConnection) -> int:
    body = encode.encode_spans([Span("ef" * 16, f"{1:016x}", None, "root", 1, 2)]
                             ).SerializeToString()
    conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf",
                                               "Authorization": TOKEN})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def test_a_partial_flood_from_many_peers_cannot_deny_exports(tmp_path: Path) -> None:
    limits = HttpLimits(max_connections=SLOTS, max_connections_per_peer=PER_PEER)
    with running_service(tmp_path, **{"receiver.http_limits": limits,
                                      "receiver.bearer_tokens": {"app": "app-secret"}}) as h, \
            ExitStack() as stack:
        assert h.svc.http is not None
        port = h.svc.http.port
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stack.callback(kept.close)
        assert _export(kept) == 200  # an authenticated sender's keep-alive connection
        for n in range(SLOTS - 1):  # every other slot, from 8 peers
            _partial(stack, port, 2 + n % 8)
        _slots_held(h, SLOTS)
        peer = 10
        for _ in range(5):  # the flood goes on: each round takes every partial slot again
            for _ in range(SLOTS):
                _partial(stack, port, peer)
                peer = 10 + (peer - 9) % 40
            fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            stack.callback(fresh.close)
            assert _export(fresh) == 200  # a newcomer gets in
            assert _export(kept) == 200  # the authenticated connection was never closed
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="http",
                        reason="reused") >= 5 * SLOTS


ADMIN_HEAD = b"GET /v1/evaluations HTTP/1.1\r\nHost: localhost\r\n"


def _admin_partial(stack: ExitStack, port: int, peer: int) -> socket.socket:
    s = stack.enter_context(socket.create_connection(
        ("127.0.0.1", port), timeout=30, source_address=(f"127.0.0.{peer}", 0)))
    s.sendall(ADMIN_HEAD)
    return s


def _read(conn: http.client.HTTPConnection, path: str = "/v1/evaluations") -> int:
    conn.request("GET", path, headers={"Authorization": "Bearer grafana-secret"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def test_a_partial_flood_from_many_peers_cannot_deny_the_admin_api(tmp_path: Path) -> None:
    """The admin listener's API and web view, not only its probe paths: before, a flood of
    partial requests from many peers held every general slot for as long as it lasted, and
    a reader got the reserve's 503 ('serves only /healthz, /metrics, /readyz')."""
    limits = HttpLimits(max_connections=SLOTS, max_connections_per_peer=PER_PEER,
                        reserved_connections=2)
    with running_service(tmp_path, **{"admin.limits": limits,
                                      "admin.read_tokens": {"grafana": "grafana-secret"}}
                         ) as h, ExitStack() as stack:
        port = h.svc.admin.port
        kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stack.callback(kept.close)
        assert _read(kept) == 200  # a reader's keep-alive connection
        for n in range(SLOTS - 1):  # every other general slot, from 8 peers
            _admin_partial(stack, port, 2 + n % 8)
        poll(lambda: h.svc.admin._server is not None
             and h.svc.admin._server.connections >= SLOTS,
             "the admin listener to hold every slot", timeout_s=30, interval_s=0.01)
        peer = 10
        for _ in range(3):  # the flood goes on
            for _ in range(SLOTS):
                _admin_partial(stack, port, peer)
                peer = 10 + (peer - 9) % 40
            fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            stack.callback(fresh.close)
            assert _read(fresh) == 200  # a newcomer gets in, on a general slot
            assert _read(kept) == 200  # the authenticated connection was never closed


REFUSED = (b"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-protobuf"
           b"\r\nContent-Length: 1000\r\n\r\n")


def test_a_flood_of_refused_requests_cannot_deny_exports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request refused before its body is read (here 401: no token) is answered, then its
    connection lingers (drops what the client still sends, up to ``LINGER_S``) in its slot.
    Such a slot did not give way: anyone without a token could hold every slot with one
    head per connection every ``LINGER_S`` (2 s) and newcomers got 503. A lingering
    connection now gives way as a partial one does. ``LINGER_S`` is raised so that the
    flood's connections are all still lingering when the exporter comes."""
    monkeypatch.setattr(httpconn, "LINGER_S", 60.0)
    limits = HttpLimits(max_connections=SLOTS, max_connections_per_peer=PER_PEER)
    with running_service(tmp_path, **{"receiver.http_limits": limits,
                                      "receiver.bearer_tokens": {"app": "app-secret"}}) as h, \
            ExitStack() as stack:
        assert h.svc.http is not None
        port = h.svc.http.port
        for n in range(SLOTS):  # every slot, from 8 peers: each refused, then lingering
            s = stack.enter_context(socket.create_connection(
                ("127.0.0.1", port), timeout=30, source_address=(f"127.0.0.{2 + n % 8}", 0)))
            s.sendall(REFUSED)
            assert s.recv(65536).startswith(b"HTTP/1.1 401 ")
        _slots_held(h, SLOTS)
        fresh = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        stack.callback(fresh.close)
        assert _export(fresh) == 200  # a newcomer gets in
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="http",
                        reason="reused") >= 1
