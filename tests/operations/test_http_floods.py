"""Issue 21 (floods): partial requests cannot hold an HTTP listener, and a hang-up is counted.

Before, every HTTP listener had a per-read idle timeout (120 s) and 1,024 slots: 1,030 partial
requests trickling a byte every 50 s held every slot, so /healthz, scrapes and authenticated
exports went unanswered for as long as the trickle lasted, and each hang-up afterwards was a
BrokenPipe traceback. Now the shared server (``receiver.httpserver``) has deadlines per phase
(headers, whole request), a per-peer cap, and a reserve of slots for the probe paths, whose
partial requests are reused (closed, oldest first) for newcomers when it is full, so a flood
from any number of peers cannot hold it.

Real sockets on free loopback ports; other peers are other loopback addresses (127.0.0.2...,
all routed to ``lo`` on Linux). Time is the server's injected clock, moved by hand: a byte
sent after the clock passed a deadline finds the connection cut, without waiting.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from support.clock import ManualClock
from support.harness import running_service
from support.poll import poll
from support.tls_certs import TestCA

from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpmessage import Request, Response
from otel_eval.receive.httpserver import HttpServer
from otel_eval.receive.security import TlsFiles, TlsServerConfig


class Events:
    """What ``on_close`` was told, with a way to wait for it (no sleeps)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self._cond = threading.Condition()

    def __call__(self, reason: str) -> None:
        with self._cond:
            self.counts[reason] += 1
            self._cond.notify_all()

    def wait(self, reason: str, n: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.counts[reason] >= n, timeout=10)


# set when a handler starts reading a body (the request's headers are in)
reading_body = threading.Event()


def _ok(req: Request) -> Response:
    if req.method == "POST":
        reading_body.set()
        req.body(1 << 20)
    return Response(200, b'{"status": "ok"}')


@contextmanager
def server(limits: HttpLimits) -> Iterator[tuple[HttpServer, ManualClock, Events]]:
    clock, events = ManualClock(), Events()
    reading_body.clear()
    srv = HttpServer("127.0.0.1:0", _ok, name="test-http", limits=limits, on_close=events,
                     clock=clock)
    srv.start()
    try:
        yield srv, clock, events
    finally:
        srv.shutdown(1.0)


def accepted(srv: HttpServer, n: int = 1) -> None:
    """Wait until the server holds ``n`` connections (their deadlines started)."""
    poll(lambda: srv.connections >= n, f"{n} connections accepted", timeout_s=10,
         interval_s=0.01)


def connect(port: int, peer: str = "127.0.0.1") -> socket.socket:
    s = socket.socket()
    s.settimeout(10)
    s.bind((peer, 0))
    s.connect(("127.0.0.1", port))
    return s


def answer(s: socket.socket) -> bytes:
    """Everything the server sends until it closes (b"" when it closed without a word; a
    reset, when it closed with bytes of ours unread, ends it too)."""
    out = b""
    try:
        while piece := s.recv(65536):
            out += piece
    except ConnectionResetError:
        pass
    return out


def send(s: socket.socket, data: bytes) -> None:
    """Send, unless the server has cut the connection already (that is what we test)."""
    with suppress(BrokenPipeError, ConnectionResetError):
        s.sendall(data)


def get(port: int, path: str = "/healthz", peer: str = "127.0.0.1") -> bytes:
    with connect(port, peer) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
        return answer(s)


def test_a_trickled_request_is_cut_at_the_header_deadline_not_per_read() -> None:
    with server(HttpLimits(read_header_timeout_s=10, idle_timeout_s=120)) as (srv, clock, ev):
        s = connect(srv.port)
        accepted(srv)
        s.sendall(b"GET /healthz HTTP/1.1\r\n")
        for _ in range(3):  # each gap (6 s) is well inside a per-read timeout; the sum is not
            clock.now += 6
            send(s, b"X-Trickle: 1\r\n")
        assert answer(s) == b""  # cut before the headers ended: nothing to answer
        s.close()
        assert ev.wait("header_timeout", 1)
        assert get(srv.port).startswith(b"HTTP/1.1 200 ")


def test_a_silent_connection_is_closed_at_the_header_deadline() -> None:
    with server(HttpLimits(read_header_timeout_s=10)) as (srv, clock, ev):
        s = connect(srv.port)
        accepted(srv)
        clock.now += 11
        s.sendall(b"G")  # its first byte, too late
        assert answer(s) == b""
        s.close()
        assert ev.counts["header_timeout"] == 1


def test_a_trickled_body_is_cut_at_the_request_deadline() -> None:
    with server(HttpLimits(read_header_timeout_s=10, read_timeout_s=60)) as (srv, clock, ev):
        s = connect(srv.port)
        s.sendall(b"POST /x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n" + b"a" * 10)
        assert reading_body.wait(10)  # the headers were in time
        for _ in range(7):  # 70 s of body at 10 s a piece: past the 60 s request deadline
            clock.now += 10
            send(s, b"a" * 10)
        assert answer(s) == b""
        s.close()
        assert ev.wait("read_timeout", 1)


def test_a_keep_alive_connection_gets_a_fresh_header_deadline_per_request() -> None:
    limits = HttpLimits(read_header_timeout_s=10, idle_timeout_s=120)
    with server(limits) as (srv, clock, _), connect(srv.port) as s:
        accepted(srv)  # its header deadline runs from here (t=0): the first request is sent now
        for _ in range(3):  # 3 requests 50 s apart: each within its own deadlines
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
            head = b""
            while b'{"status": "ok"}' not in head:
                piece = s.recv(65536)
                assert piece, head  # the server closed the connection
                head += piece
            assert head.startswith(b"HTTP/1.1 200 ")
            clock.now += 50  # idle between requests, well inside idle_timeout_s


def test_one_peer_cannot_take_every_slot() -> None:
    limits = HttpLimits(max_connections=8, max_connections_per_peer=3)
    with server(limits) as (srv, _, ev):
        flood = [connect(srv.port, "127.0.0.2") for _ in range(3)]
        for s in flood:
            s.sendall(b"GET /healthz HTTP/1.1\r\n")  # partial: each holds a slot
        refused = get(srv.port, peer="127.0.0.2")  # its 4th: refused at once, with a reason
        assert refused.startswith(b"HTTP/1.1 503 ") and b"too many connections" in refused
        assert get(srv.port, peer="127.0.0.1").startswith(b"HTTP/1.1 200 ")  # others get in
        assert ev.counts["peer_limit"] == 1
        for s in flood:
            s.close()


def test_the_connection_limit_503_is_neither_sniffed_nor_stored() -> None:
    """``httpconn`` promises every answer of every listener ``nosniff`` and ``no-store``;
    the 503 the accepting thread writes over a connection limit had neither, so a proxy
    or a browser could keep a "too many connections" answer for the URL."""
    with server(HttpLimits(max_connections=8, max_connections_per_peer=1)) as (srv, _, _ev):
        with connect(srv.port, "127.0.0.2") as held:
            held.sendall(b"GET /healthz HTTP/1.1\r\n")  # partial: holds the peer's slot
            refused = get(srv.port, peer="127.0.0.2")
        head = refused.split(b"\r\n\r\n", 1)[0].lower()
        assert head.startswith(b"http/1.1 503 ")
        assert b"\r\nx-content-type-options: nosniff" in head
        assert b"\r\ncache-control: no-store" in head


def test_probe_paths_get_in_on_the_reserve_when_every_slot_is_held() -> None:
    limits = HttpLimits(max_connections=4, max_connections_per_peer=2,
                        reserved_connections=1)
    with server(limits) as (srv, _, ev):
        flood = [connect(srv.port, f"127.0.0.{2 + i // 2}") for i in range(4)]
        for s in flood:
            s.sendall(b"GET /healthz HTTP/1.1\r\n")
        assert get(srv.port, "/healthz").startswith(b"HTTP/1.1 200 ")  # the reserve
        assert get(srv.port, "/metrics").startswith(b"HTTP/1.1 200 ")
        other = get(srv.port, "/v1/evaluations")  # the reserve serves only the probe paths
        assert other.startswith(b"HTTP/1.1 503 ") and b"/healthz" in other
        with connect(srv.port, "127.0.0.9") as held:  # the reserve itself, held
            held.sendall(b"GET /healthz HTTP/1.1\r\n")
            accepted(srv, 5)
            # reused: the partial request is closed, the newcomer takes its slot
            assert get(srv.port, "/healthz", "127.0.0.10").startswith(b"HTTP/1.1 200 ")
            assert answer(held) == b""
        assert ev.counts["reused"] == 1 and ev.counts["connection_limit"] == 0
        for s in flood:
            s.close()


def test_a_flood_from_many_peers_fills_the_reserve_but_cannot_hold_it() -> None:
    # 9 peers at their per-peer cap hold every general slot and the reserve (the flood of
    # 9 x 128 partial requests against the defaults, scaled down): before, /healthz got a 503
    # until the header deadline; now each newcomer reuses the oldest partial reserved one.
    limits = HttpLimits(max_connections=16, max_connections_per_peer=2,
                        reserved_connections=2)
    with server(limits) as (srv, _, ev):
        flood = []
        for i in range(18):
            flood.append(connect(srv.port, f"127.0.0.{2 + i // 2}"))
            flood[-1].sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")
            accepted(srv, i + 1)  # in order: the last two hold the reserve
        for r in range(3):  # the flood goes on, and a probe is still answered each time
            for peer in (f"127.0.0.{20 + r}", f"127.0.0.{25 + r}"):
                more = connect(srv.port, peer)
                more.sendall(b"GET /healthz HTTP/1.1\r\n")
                flood.append(more)
            assert get(srv.port, "/healthz", "127.0.0.30").startswith(b"HTTP/1.1 200 ")
        # 3 reused in the first round, 2 in each next (the answered probe left its slot free)
        assert ev.counts["connection_limit"] == 0 and ev.wait("reused", 7)
        assert answer(flood[16]) == b""  # the oldest reserved partial request, closed
        assert srv.connections <= 18
        for s in flood:
            s.close()


def test_a_reserved_connection_inside_its_handler_is_not_reused() -> None:
    started, release = threading.Event(), threading.Event()

    def slow(req: Request) -> Response:
        if req.path == "/slow":
            started.set()
            release.wait(10)
        return Response(200, b"{}")

    events = Events()
    srv = HttpServer("127.0.0.1:0", slow, name="test-http", on_close=events,
                     limits=HttpLimits(max_connections=1, reserved_connections=1),
                     reserved_paths={"/healthz", "/slow"})
    srv.start()
    try:
        with connect(srv.port) as partial, connect(srv.port) as busy:
            partial.sendall(b"GET /healthz HTTP/1.1\r\n")  # the general slot
            accepted(srv, 1)
            busy.sendall(b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n")  # the reserve
            assert started.wait(10)
            refused = get(srv.port, "/healthz")  # nothing reusable: the slot is being served
            assert refused.startswith(b"HTTP/1.1 503 ")
            release.set()
            assert answer(busy).startswith(b"HTTP/1.1 200 ")
        assert events.counts["connection_limit"] == 1 and events.counts["reused"] == 0
    finally:
        srv.shutdown(1.0)


def test_a_client_hang_up_is_counted_not_a_traceback(tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with running_service(tmp_path) as h:
        assert h.svc.http is not None
        for _ in range(5):
            with connect(h.svc.http.port) as s:  # a body cut short: the client went away
                s.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                          b"application/x-protobuf\r\nContent-Length: 1000\r\n\r\n" + b"\x0a" * 10)
                s.shutdown(socket.SHUT_WR)
                assert answer(s) == b""  # nobody to answer
        with connect(h.svc.admin.port) as s:  # inside the headers, on the admin listener
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Half")
            s.shutdown(socket.SHUT_WR)
            assert answer(s) == b""
        # the counts come before the connection closes: no wait needed
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="http",
                        reason="client_closed") == 5
        assert h.sample("otel_eval_receiver_connections_closed_total", listener="admin",
                        reason="client_closed") == 1
    # ours only: a thread an earlier test left (an SDK exporter's retry) may log here too
    assert not [r for r in caplog.records if r.name.startswith("otel_eval")
                and (r.levelno >= logging.WARNING or r.exc_info)]


def test_the_admin_listener_answers_healthz_while_partial_requests_hold_its_slots(
        tmp_path: Path) -> None:
    limits = HttpLimits(max_connections=6, max_connections_per_peer=2,
                        reserved_connections=2)
    with running_service(tmp_path, **{"admin.limits": limits}) as h:
        port = h.svc.admin.port
        flood = [connect(port, f"127.0.0.{2 + i // 2}") for i in range(6)]
        for s in flood:
            s.sendall(b"GET /v1/evaluations HTTP/1.1\r\nHost: localhost\r\n")
        assert get(port, "/healthz").startswith(b"HTTP/1.1 200 ")
        assert get(port, "/readyz").startswith(b"HTTP/1.1 200 ")
        assert b"otel_eval_receiver_connections_closed_total" in get(port, "/metrics")
        # the API too: the oldest partial request gives way (it got the reserve's 503)
        assert get(port, "/v1/evaluations").startswith(b"HTTP/1.1 200 ")
        for s in flood:
            s.close()


def _one_answer(s: socket.socket) -> bytes:
    """One keep-alive answer of ``_authenticated``, read whole (it comes in pieces)."""
    got = b""
    while not got.endswith(b'{"status": "ok"}'):
        piece = s.recv(65536)
        assert piece, got  # the server closed the connection
        got += piece
    return got


def _authenticated(req: Request) -> Response:
    req.authenticated()  # as a handler does once the request showed a known token
    return Response(200, b'{"status": "ok"}')


def test_a_proxys_idle_keep_alive_connections_give_way_to_its_new_one() -> None:
    """A proxy that adds the token keeps idle upstream connections per worker (nginx's
    ``keepalive``, Envoy's pools): every one authenticated, all from one address. With more
    of them than ``max_connections_per_peer`` its next new connection was a 503
    ``peer_limit`` while they sat idle. Now the peer's own oldest idle one gives way."""
    limits = HttpLimits(max_connections=8, max_connections_per_peer=2)
    events = Events()
    srv = HttpServer("127.0.0.1:0", _authenticated, name="test-http", limits=limits,
                     on_close=events, reuse_partial=True)
    srv.start()
    request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    try:
        pool = [connect(srv.port, "127.0.0.2") for _ in range(2)]
        for s in pool:  # each makes its request and is kept alive, idle, in this order
            s.sendall(request)
            assert _one_answer(s).startswith(b"HTTP/1.1 200 ")
            # its thread marks it idle after the answer is out: wait, or the second could
            # be idle first (a busy machine) and be the one that gives way
            poll(lambda s=s: any(h.sock.getpeername() == s.getsockname()
                                 and h.reader is not None and h.reader.phase == "idle"
                                 for h in srv.slots._general), "idle", timeout_s=10,
                 interval_s=0.01)
        assert get(srv.port, peer="127.0.0.2").startswith(b"HTTP/1.1 200 ")
        assert answer(pool[0]) == b""  # the oldest idle one was closed for it
        pool[1].sendall(request)  # the other is still served
        assert _one_answer(pool[1]).startswith(b"HTTP/1.1 200 ")
        assert events.counts["reused"] == 1 and events.counts["peer_limit"] == 0
        for s in pool:
            s.close()
    finally:
        srv.shutdown(1.0)


def test_a_tls_listener_answers_503_over_its_limit(tmp_path: Path) -> None:
    """docs/transport-security.md: past the connection limits "a connection gets a 503 and is
    closed". On a TLS listener it was only closed (the 503 needs a handshake the accepting
    thread cannot wait for): the client saw a failed handshake, a TLS proxy its own 502."""
    ca = TestCA(tmp_path)
    pair = ca.issue("server", server=True)
    tls = TlsFiles(TlsServerConfig(cert_file=str(pair.cert), key_file=str(pair.key)), "test")
    events = Events()
    srv = HttpServer("127.0.0.1:0", _ok, name="test-http", tls=tls, on_close=events,
                     limits=HttpLimits(max_connections=8, max_connections_per_peer=1))
    srv.start()
    client = ssl.create_default_context(cafile=str(ca.path))
    try:
        with connect(srv.port, "127.0.0.2"):  # holds the peer's one slot
            accepted(srv)
            with client.wrap_socket(connect(srv.port, "127.0.0.2"),
                                    server_hostname="localhost") as refused:
                send(refused, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
                got = answer(refused)
        assert got.startswith(b"HTTP/1.1 503 ") and b"too many connections" in got
        assert events.counts["peer_limit"] == 1
    finally:
        srv.shutdown(1.0)


def _both_idle(srv: HttpServer) -> bool:
    return len(srv.slots._general) == 2 and all(
        h.reader is not None and h.reader.phase == "idle" for h in srv.slots._general)


def test_a_proxys_keep_alive_given_up_for_its_new_one_is_the_one_idle_longest() -> None:
    """nginx's ``keepalive``, Envoy's and Go's pools hand out their most recently used idle
    connection first (LIFO), so a proxy's first connection, kept busy, is the one it picks
    next. The peer's *oldest* idle connection gave way to its newcomer: that busy one, just
    as the proxy was likely to send it a POST (a 502 it does not retry). The one idle the
    longest gives way now, as nginx drains its own reusable connections (and its upstream
    pool evicts): the one its pool reaches last."""
    limits = HttpLimits(max_connections=8, max_connections_per_peer=2)
    clock = ManualClock()
    srv = HttpServer("127.0.0.1:0", _authenticated, name="test-http", limits=limits,
                     clock=clock, reuse_partial=True)
    srv.start()
    request = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"
    try:
        busy, spare = pool = [connect(srv.port, "127.0.0.2") for _ in range(2)]
        for s in pool:
            s.sendall(request)
            assert _one_answer(s).startswith(b"HTTP/1.1 200 ")
        # idle since now, on the server's side (it marks a connection idle after answering:
        # advancing the clock before that made the two idle since the same time, under load)
        poll(lambda: _both_idle(srv), "both idle", timeout_s=10, interval_s=0.01)
        clock.advance(30)
        busy.sendall(request)  # the pool's most recently used, its first: the busy one
        assert _one_answer(busy).startswith(b"HTTP/1.1 200 ")
        poll(lambda: _both_idle(srv), "both idle", timeout_s=10, interval_s=0.01)
        assert get(srv.port, peer="127.0.0.2").startswith(b"HTTP/1.1 200 ")
        busy.sendall(request)  # still served
        assert _one_answer(busy).startswith(b"HTTP/1.1 200 ")
        assert answer(spare) == b""  # idle for 30 s: closed for the newcomer
        for s in pool:
            s.close()
    finally:
        srv.shutdown(1.0)


def test_a_tls_refusal_gives_up_a_trickled_handshake_at_its_deadline(tmp_path: Path) -> None:
    """A connection over a TLS listener's limits takes one of the few refusal threads for
    its handshake and 503 (``_TLS_REFUSALS``): the handshake's ``read_header_timeout_s`` is
    one deadline for the whole of it (CPython's ``do_handshake`` takes the socket timeout
    as its total since 3.5), not a timeout per read a ClientHello sent a byte at a time
    could renew. Time here is the socket's, which the server's clock does not drive: each
    byte is 0.05 s apart (the wait for the server's close paces it), so per read the 517
    bytes would hold the thread for 25 s, not the 0.5 s deadline."""
    ca = TestCA(tmp_path)
    pair = ca.issue("server", server=True)
    tls = TlsFiles(TlsServerConfig(cert_file=str(pair.cert), key_file=str(pair.key)), "test")
    events = Events()
    srv = HttpServer("127.0.0.1:0", _ok, name="test-http", tls=tls, on_close=events,
                     limits=HttpLimits(max_connections=8, max_connections_per_peer=1,
                                       read_header_timeout_s=0.5))
    srv.start()
    outgoing = ssl.MemoryBIO()
    hello = ssl.create_default_context(cafile=str(ca.path)).wrap_bio(
        ssl.MemoryBIO(), outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        hello.do_handshake()
    client_hello = outgoing.read()
    try:
        with connect(srv.port, "127.0.0.2"):  # holds the peer's one slot
            accepted(srv)
            with connect(srv.port, "127.0.0.2") as refused:
                assert events.wait("peer_limit", 1)
                refused.settimeout(0.05)
                sent, cut = 0, False
                for byte in client_hello[:-1]:  # never the whole of it
                    send(refused, bytes([byte]))
                    sent += 1
                    try:
                        cut = refused.recv(1) == b""
                    except TimeoutError:
                        continue
                    except ConnectionResetError:
                        cut = True
                    if cut:
                        break
                assert cut and sent < 200, sent  # 0.5 s: ~10 bytes; per read it took them all
    finally:
        srv.shutdown(1.0)
