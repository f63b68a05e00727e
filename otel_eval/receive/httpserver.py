"""The one HTTP server of every HTTP listener (OTLP/HTTP receiver, admin API and its pages).

    accept -> slot (per peer, total, reserve) -> [TLS handshake] -> request line and headers
           -> Request -> handler(request) -> Response -> write -> next request (keep-alive)

A handler is a plain function ``Request -> Response`` (``httpmessage``). Everything about
connections is here, the same for every listener, as Go's ``net/http.Server`` has it, in three
modules: this one binds and accepts (``HttpServer``: a listener per address of its endpoint,
a thread per connection), ``httpslots`` says which connections are served, and ``httpconn``
serves one, request after request (its bytes read and written by ``httpstream``). Together
they promise:
- **deadlines per phase, not per read** (``httpconn``): the TLS handshake and the request
  head within ``read_header_timeout_s``, the whole request within ``read_timeout_s``, the
  answer taken within ``write_timeout_s``, an idle keep-alive within ``idle_timeout_s``; a
  client trickling a byte at a time is cut at the deadline, whatever its pace;
- **bounded connections** (``httpslots``): at most ``max_connections`` at once and
  ``max_connections_per_peer`` from one address; past them a connection is answered 503 and
  closed at once (over TLS after its handshake, ``_TLS_REFUSALS`` at once). A few
  ``reserved_connections`` beyond the total serve only ``reserved_paths`` (``PROBE_PATHS``),
  and a full reserve reuses its oldest waiting connection; with ``reuse_partial``, a full
  listener closes the partial request waiting longest, and a peer at its cap its own;
- **a hang-up is an event, not an error**: a client that closes mid-request or stops reading
  the answer, a deadline passed, a slot refused, a failed handshake: each is counted with a
  reason (``CLOSE_REASONS``) through ``on_close`` and logged at debug, never a traceback;
- **a request refused before its handler is counted** (``httpconn``): a bad request line,
  headers past the limit, HTTP/2, a TLS client at a plain-text port, each with a reason
  (``REFUSE_REASONS``) through ``on_refuse``: a client speaking the wrong protocol shows;
- a bug in a handler answers 500, and a request whose body was not read to its end closes
  the connection (``httpconn``);
- **a refusal is heard** (``httpconn``): a connection closed with bytes of its request unread
  is half-closed after the answer and drained for up to ``LINGER_S`` (Go's
  ``closeWriteAndWait``, nginx's lingering close), so the client reads the 413, not a reset.
"""

from __future__ import annotations

import errno
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable, Collection
from typing import Any, overload

from otel_eval.base.configcheck import StartupError, parse_endpoint
from otel_eval.base.loglimit import BUG_LOG_INTERVAL_S, LogLimiter, bug_line
from otel_eval.decode.body import BodyBudget
from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpconn import LINGER_S, Connection, ListenerBase
from otel_eval.receive.httpmessage import ErrorBody, Handler, json_error
from otel_eval.receive.httpslots import Hold, Slots
from otel_eval.receive.security import TlsFiles

log = logging.getLogger(__name__)

# Why the server closed a connection before answering, or why a client's went away.
CLOSE_REASONS = ("connection_limit", "peer_limit", "header_timeout", "read_timeout",
                 "write_timeout", "header_too_large", "client_closed", "tls_handshake", "reused",
                 "http2_client", "tls_client")
# Why the server refused a request before a handler saw it (``httpconn``): its request line
# (not HTTP/1.x, too long, an unreadable target), headers past the limit, HTTP/2 or later
# (an OTLP/gRPC exporter), a TLS ClientHello at a plain-text port.
REFUSE_REASONS = ("bad_request_line", "header_too_large", "unsupported_http_version",
                  "tls_client")
# Paths a reserved connection slot serves.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


_BUSY_BODY = b'{"error": "too many connections; retry later"}'
# written by the accepting thread, not ``httpconn``: with the headers every answer has there
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nX-Content-Type-Options: nosniff\r\n"
         b"Cache-Control: no-store\r\nConnection: close\r\n\r\n%s"
         % (len(_BUSY_BODY), _BUSY_BODY))


# Connections over a TLS listener's limits answered 503 at once, each on a thread of its own
# (the answer needs the handshake first, within ``read_header_timeout_s``); past these a
# refused TLS connection is closed without a word, as every one was (a TLS proxy in front
# then showed its own 502).
_TLS_REFUSALS = 8


class _Listener(ListenerBase):
    """Accepts connections and gives each a slot and a thread (or a 503)."""

    allow_reuse_address = True  # SO_REUSEADDR (restart over TIME_WAIT), never SO_REUSEPORT
    # listen() backlog: the default of 5 drops bursts of exporters connecting at once.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], server: HttpServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, Connection, bind_and_activate=False)  # type: ignore[arg-type]
        self.name, self.limits, self.clock = server.name, server.limits, server.clock
        self.handler, self.error, self.tls = server.handler, server.error, server.tls
        self.reserved_paths = server.reserved_paths
        self.closed, self.refused = server.closed, server.refused
        self.budget = server.budget
        self.slots = server.slots  # one set of slots for every address of the endpoint
        self._http2_told = server.http2_told
        self.handler_log, self._connection_log = server.handler_log, server.connection_log
        self._tls_told = server.tls_told
        self._tls_refusals = server.tls_refusals

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            # no handshake here: a client that never completes one would block accept()
            sock = self.tls.context().wrap_socket(sock, server_side=True,
                                                  do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        accepted_at = self.clock()  # before the slot shows in ``connections``
        hold = Hold(request, client_address[0], accepted_at)
        reason = self.slots.take(hold)
        if reason == "reused":
            log.debug("%s: full; closing a waiting connection for %s",
                      self.name, client_address[0])
            self.closed(reason)
        elif reason is not None:
            log.debug("%s: %s; closing a connection from %s", self.name, reason,
                      client_address[0])
            self.closed(reason)
            if self.tls is None:
                try:  # a clear answer when it fits in the socket buffer, never a wait
                    request.setblocking(False)
                    request.send(_BUSY)
                except OSError:
                    pass
            elif self._tls_refusals.acquire(blocking=False):
                self._refuse_tls(request)
                return
            self.shutdown_request(request)
            return
        thread = threading.Thread(target=self._serve, name=f"{self.name}-connection",
                                  args=(request, client_address, accepted_at, hold),
                                  daemon=True)
        try:
            thread.start()
        except BaseException:
            self.slots.give_back(hold)
            raise

    def _refuse_tls(self, request: Any) -> None:
        """The 503 over TLS, on a thread of its own (a ``_TLS_REFUSALS`` slot taken)."""
        def refuse() -> None:
            try:
                request.settimeout(self.limits.read_header_timeout_s)
                request.do_handshake()
                request.sendall(_BUSY)
                # heard, not lost to a reset: its request (sent after the handshake) is
                # read and dropped as ``httpconn`` lingers, under the raw socket
                socket.socket.shutdown(request, socket.SHUT_WR)
                deadline = self.clock() + LINGER_S
                while (remaining := deadline - self.clock()) > 0:
                    request.settimeout(remaining)
                    if not socket.socket.recv(request, 65536):
                        break
            except OSError:  # ssl.SSLError too: a failed handshake, a client gone
                pass
            finally:
                self.shutdown_request(request)
                self._tls_refusals.release()
        try:
            threading.Thread(target=refuse, name=f"{self.name}-refusal", daemon=True).start()
        except BaseException:
            self.shutdown_request(request)
            self._tls_refusals.release()
            raise

    def _serve(self, request: Any, client_address: Any, accepted_at: float,
               hold: Hold) -> None:
        try:
            Connection(request, client_address, self, accepted_at, hold)
        except Exception:
            self.handle_error(request, client_address)
        finally:  # the slot first: a client that saw the close may connect again at once
            self.slots.give_back(hold)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        bug_line(self._connection_log, log, "%s: connection from %s failed", self.name,
                 client_address[0], counted="failed connections")

    def http2_client(self, peer: str) -> None:
        """An HTTP/2 client here: most likely a gRPC exporter sent to the HTTP port. Counted
        each time, said once per listener (its exporter retries: one line, not a flood)."""
        self.closed("http2_client")
        level = logging.DEBUG if self._http2_told.is_set() else logging.WARNING
        self._http2_told.set()
        log.log(level, "%s: an HTTP/2 client (an OTLP/gRPC exporter?) from %s reached this "
                "HTTP/1.1 port; point gRPC exporters at the OTLP/gRPC endpoint, or set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", self.name, peer)

    def tls_client(self, peer: str) -> None:
        """A TLS client here: most likely an exporter given an https:// endpoint for this
        plain-text port. Counted each time, said once per listener, as ``http2_client``."""
        self.closed("tls_client")
        level = logging.DEBUG if self._tls_told.is_set() else logging.WARNING
        self._tls_told.set()
        log.log(level, "%s: a TLS client (an https:// OTLP endpoint?) from %s reached this "
                "plain-text port; use http:// in the exporter's endpoint "
                "(OTEL_EXPORTER_OTLP_ENDPOINT), or give the receiver TLS (receiver.tls)",
                self.name, peer)


def _addresses(endpoint: str) -> list[tuple[str, int]]:
    """Where ``HOST:PORT`` listens: ``localhost`` is both loopback families, 127.0.0.1 and
    ::1 (as gRPC binds it), so a client that resolves localhost to ::1 first connects too."""
    host, port = parse_endpoint(endpoint)
    return [("127.0.0.1", port), ("::1", port)] if host == "localhost" else [(host, port)]


# ::1 cannot be bound on a host without IPv6 (disabled, or a container without it)
_NO_FAMILY = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


class HttpServer:
    """One HTTP listener (on each address of its endpoint: ``localhost`` is two): ``start()``
    binds and serves in a thread, ``shutdown`` stops accepting (a request in progress
    finishes on its own thread)."""

    def __init__(self, endpoint: str, handler: Handler, *, name: str,
                 limits: HttpLimits | None = None, tls: TlsFiles | None = None,
                 error: ErrorBody = json_error,
                 on_close: Callable[[str], None] = lambda _reason: None,
                 on_refuse: Callable[[str], None] = lambda _reason: None,
                 reserved_paths: Collection[str] = PROBE_PATHS,
                 clock: Callable[[], float] = time.monotonic,
                 reuse_partial: bool = False, body_budget: int | None = None,
                 body_budget_per_peer: int | None = None) -> None:
        """``reuse_partial``: when full, a new connection closes the partial one waiting
        longest; ``body_budget``: bytes of request bodies held at once by all its
        connections (past it a body's read is refused 429: ``decode.body.BodyBudget``);
        None: no bound;
        ``body_budget_per_peer``: the part of it the connections of one address hold;
        ``on_close``: why a connection ended (``CLOSE_REASONS``); ``on_refuse``: why a
        request was refused before the handler saw it (``REFUSE_REASONS``)."""
        self.endpoint, self.handler, self.name = endpoint, handler, name
        self.reuse_partial = reuse_partial
        self.limits = limits or HttpLimits()
        self.tls, self.error, self.closed, self.clock = tls, error, on_close, clock
        self.refused = on_refuse
        self.reserved_paths = frozenset(reserved_paths)
        self.slots = Slots(self.limits, reuse_partial)
        self.budget = (BodyBudget(body_budget, body_budget_per_peer)
                       if body_budget is not None else None)
        self.http2_told = threading.Event()  # the HTTP/2 client warning was logged
        self.tls_told = threading.Event()  # the TLS client warning was logged
        # a bug every request (connection) hits: its traceback once, then a line per interval
        self.handler_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)
        self.connection_log = LogLimiter(BUG_LOG_INTERVAL_S, clock)
        self.tls_refusals = threading.BoundedSemaphore(_TLS_REFUSALS)  # 503s over TLS now
        self._listeners: list[_Listener] = []
        self._accepting: list[threading.Thread] = []
        self._wake: tuple[socket.socket, socket.socket] | None = None  # shutdown -> loops
        self.port = 0

    def bind(self) -> None:
        """Listen on ``HOST:PORT`` (port 0 picks a free one; connections wait in the backlog
        until ``start``); ``StartupError`` naming the endpoint when it cannot. ``localhost``:
        127.0.0.1, then ::1 on the same port (skipped where the host has no IPv6; a port 0
        that another process holds on ::1 is picked again)."""
        if self._listeners:
            return
        first, *more = _addresses(self.endpoint)
        for _ in range(5):
            listeners = [self._listen(first)]
            port = listeners[0].server_address[1]
            try:
                for host, _port in more:
                    listener = self._listen((host, port), optional=True)
                    if listener is not None:
                        listeners.append(listener)
            except StartupError:
                for listener in listeners:
                    listener.server_close()
                if first[1] != 0:
                    raise
                continue  # port 0: the port 127.0.0.1 got is taken on ::1; pick another
            self._listeners, self.port = listeners, port
            return
        raise StartupError(f"{self.name}: cannot listen on {self.endpoint}: no port free on "
                           "both loopback addresses")

    @overload
    def _listen(self, address: tuple[str, int]) -> _Listener: ...
    @overload
    def _listen(self, address: tuple[str, int], optional: bool) -> _Listener | None: ...

    def _listen(self, address: tuple[str, int], optional: bool = False) -> _Listener | None:
        """A listener bound to ``address``; None when ``optional`` and the host lacks its
        address family."""
        listener = _Listener(address, self)
        try:
            listener.server_bind()
            listener.server_activate()
        except OSError as e:
            listener.server_close()
            if optional and e.errno in _NO_FAMILY:
                log.debug("%s: not listening on %s: %s", self.name, address[0], e.strerror)
                return None
            where = f" ({address[0]})" if optional else ""
            raise StartupError(f"{self.name}: cannot listen on {self.endpoint}{where}: "
                               f"{e.strerror or e}") from None
        return listener

    def start(self) -> None:
        """Bind (unless ``bind`` did) and accept in a thread per address."""
        self.bind()
        self._wake = socket.socketpair()
        self._accepting = [threading.Thread(target=self._accept, args=(listener, self._wake[0]),
                                            name=self.name, daemon=True)
                           for listener in self._listeners]
        for thread in self._accepting:
            thread.start()

    @staticmethod
    def _accept(listener: _Listener, wake: socket.socket) -> None:
        """Accept on ``listener`` until ``wake`` is readable. socketserver's ``serve_forever``
        polls for its stop every 0.5 s instead: a stop waited up to that per address, one
        address after another."""
        with selectors.DefaultSelector() as selector:
            selector.register(listener, selectors.EVENT_READ)
            selector.register(wake, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is wake for key, _ in ready):
                    return
                listener._handle_request_noblock()  # type: ignore[attr-defined]  # as serve_forever

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return self.slots.in_use

    def shutdown(self, deadline_s: float) -> None:
        """Stop accepting on every address at once (a connection being served finishes on
        its own thread). ``deadline_s`` is not needed: the accept loops end as they wake."""
        listeners, self._listeners = self._listeners, []
        accepting, self._accepting = self._accepting, []
        wake, self._wake = self._wake, None
        if wake is not None:
            wake[1].send(b"\0")  # level-triggered: every loop sees it, none reads it
            for thread in accepting:  # at once: an accept loop only hands connections off
                if thread.ident is not None:  # started (a failed start leaves some not)
                    thread.join()  # before closing: a loop not yet running may start now
        for listener in listeners:
            listener.server_close()
        if wake is not None:
            for end_ in wake:
                end_.close()
