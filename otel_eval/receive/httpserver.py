"""The one HTTP server of every HTTP listener (OTLP/HTTP receiver, admin API and its pages).

    accept -> slot (per peer, total, reserve) -> [TLS handshake] -> request line and headers
           -> Request -> handler(request) -> Response -> write -> next request (keep-alive)

A handler is a plain function ``Request -> Response`` (``httpmessage``). Everything about
connections is here, the same for every listener, as Go's ``net/http.Server`` has it:
- **deadlines per phase, not per read**: the TLS handshake, request line and headers must
  arrive within ``read_header_timeout_s`` (from accept, or from the first byte of a keep-alive
  request), the whole request within ``read_timeout_s``, the answer be taken within
  ``write_timeout_s``; between requests a connection may idle ``idle_timeout_s``. A client
  trickling a byte at a time is cut at the deadline, whatever its pace;
- **bounded connections** (``httpslots``): at most ``max_connections`` at once and
  ``max_connections_per_peer`` from one address; past them a connection is answered 503 and
  closed at once. A few ``reserved_connections`` beyond the total serve only
  ``reserved_paths`` (``PROBE_PATHS``), and a full reserve reuses its oldest waiting
  connection; with ``reuse_partial``, a full listener closes its oldest partial request;
- **a hang-up is an event, not an error**: a client that closes mid-request or stops reading
  the answer, a deadline passed, a slot refused, a failed handshake: each is counted with a
  reason (``CLOSE_REASONS``) through ``on_close`` and logged at debug, never a traceback;
- a bug in a handler answers 500 (logged with its traceback), and a request whose body was
  not read to its end closes the connection (its bytes must not be parsed as a request);
- **a refusal is heard**: a connection closed with bytes of its request unread (a body refused
  before it was read, a header past the limit) is half-closed after the answer, and what the
  client still sends is read and dropped for up to ``LINGER_S`` (Go's net/http
  ``closeWriteAndWait``, nginx's lingering close). Closing a socket with unread bytes sends
  a reset, and a client still writing the body of a refused 1 MiB request would get
  ``ECONNRESET`` / ``EPIPE`` instead of the 413.
"""

from __future__ import annotations

import contextlib
import errno
import io
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Collection
from http.server import BaseHTTPRequestHandler
from typing import Any, overload
from urllib.parse import urlsplit

from otel_eval.base.configcheck import StartupError, parse_endpoint
from otel_eval.decode.body import BodyError, ClientClosed, read_body
from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httpmessage import ErrorBody, Handler, Request, Response, json_error
from otel_eval.receive.httpslots import Hold, Slots
from otel_eval.receive.security import TlsFiles

log = logging.getLogger(__name__)

# Why the server closed a connection before answering, or why a client's went away.
CLOSE_REASONS = ("connection_limit", "peer_limit", "header_timeout", "read_timeout",
                 "write_timeout", "header_too_large", "client_closed", "tls_handshake", "reused",
                 "http2_client")
# What an HTTP/2 client (an OTLP/gRPC exporter pointed at an HTTP port) sends first: the
# connection preface (RFC 9113 3.4), read by http.server as a request line of version 2.0.
_HTTP2_PREFACE = b"PRI * HTTP/2.0"
# How long a connection closed with its request unread keeps reading (and dropping) what the
# client still sends, seconds (Go waits 0.5 s, nginx up to 30 s). Bounded in time; nothing is kept.
LINGER_S = 2.0
# Paths a reserved connection slot serves.
PROBE_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class _HeaderTooLarge(Exception):
    pass


class _DeadlineReader(io.RawIOBase):
    """The socket as read by one connection, each read bounded by the current phase's
    deadline (absolute, so a trickle cannot stretch it); ``phase`` names it for the count."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float], limits: HttpLimits,
                 accepted_at: float) -> None:
        self.sock, self.clock, self.limits = sock, clock, limits
        self.phase = "header"
        self.started = accepted_at
        self.deadline = accepted_at + limits.read_header_timeout_s
        self.header_bytes = 0
        self.eof = False

    def readable(self) -> bool:
        return True

    def idle(self) -> None:
        """Between requests: wait up to the idle timeout for the next one's first byte."""
        self.phase, self.deadline = "idle", self.clock() + self.limits.idle_timeout_s

    def body(self) -> None:
        self.phase, self.deadline = "body", self.started + self.limits.read_timeout_s

    def readinto(self, b: Any) -> int:
        remaining = self.deadline - self.clock()
        if remaining <= 0:
            raise TimeoutError(self.phase)
        self.sock.settimeout(remaining)
        n = self.sock.recv_into(b)
        now = self.clock()
        if now > self.deadline:  # it came, but too late
            raise TimeoutError(self.phase)
        if n == 0:
            self.eof = True
        elif self.phase == "idle":  # a new request begins: its header deadline starts now
            self.phase, self.started = "header", now
            self.deadline, self.header_bytes = now + self.limits.read_header_timeout_s, 0
        if self.phase == "header":
            self.header_bytes += n
            if self.header_bytes > self.limits.max_header_bytes + io.DEFAULT_BUFFER_SIZE:
                raise _HeaderTooLarge()
        return n


_BUSY_BODY = b'{"error": "too many connections; retry later"}'
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))
_TIMEOUT_REASON = {"header": "header_timeout", "body": "read_timeout", "write": "write_timeout"}


class _Writer:
    """The answer's bytes, sent whole (``sendall``) under the write deadline."""

    closed = False

    def __init__(self, sock: socket.socket) -> None:
        self.write = sock.sendall

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


class _Connection(BaseHTTPRequestHandler):
    """One client connection: its requests, one after another (keep-alive)."""

    protocol_version = "HTTP/1.1"
    server_version = "otel-eval"
    server: _Listener

    def __init__(self, request: Any, client_address: Any, server: _Listener,
                 accepted_at: float, hold: Hold) -> None:
        self.accepted_at, self.hold, self.reserved = accepted_at, hold, hold.reserved
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.unread = False  # bytes of the request left unread when the connection closes
        self.connection = self.request
        self.reader = _DeadlineReader(self.request, self.server.clock, self.server.limits,
                                      self.accepted_at)
        self.rfile = io.BufferedReader(self.reader)
        self.hold.reader = self.reader
        self.wfile = _Writer(self.request)  # type: ignore[assignment]

    def finish(self) -> None:
        if self.unread:
            self._linger()
        with contextlib.suppress(OSError):
            self.rfile.close()

    def _linger(self) -> None:
        """Half-close, then drop what the client still sends until it closes or ``LINGER_S``
        passes, so the answer is read rather than lost to a reset."""
        clock = self.server.clock
        deadline = clock() + LINGER_S
        sink = bytearray(65536)
        with contextlib.suppress(OSError):
            self.request.shutdown(socket.SHUT_WR)
            while (remaining := deadline - clock()) > 0:
                self.request.settimeout(remaining)
                if not self.request.recv_into(sink):
                    break

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s: " + format, self.server.name, *args)

    def handle(self) -> None:
        self.close_connection = True
        try:
            if self._handshake():
                self.handle_one_request()
                while not self.close_connection:
                    self.reader.idle()
                    self.handle_one_request()
        except TimeoutError:
            if self.reader.phase in _TIMEOUT_REASON:  # an idle keep-alive end is no event
                self._closed(_TIMEOUT_REASON[self.reader.phase])
        except _HeaderTooLarge:
            self._closed("header_too_large")
            self._try_error(431, "request headers exceed "
                            f"{self.server.limits.max_header_bytes} bytes")
        except (ConnectionError, ssl.SSLError) as e:  # hang-ups: reset, broken pipe, EOF
            log.debug("%s: client %s went away: %s", self.server.name, self.client_address[0],
                      type(e).__name__)
            self._closed("client_closed")

    def _handshake(self) -> bool:
        if not isinstance(self.request, ssl.SSLSocket):
            return True
        try:
            self.request.settimeout(max(0.001, self.reader.deadline - self.server.clock()))
            self.request.do_handshake()
        except (OSError, ssl.SSLError) as e:  # wrong CA, no client cert, plain text, slow
            log.debug("%s: TLS handshake from %s failed: %s", self.server.name,
                      self.client_address[0], type(e).__name__)
            self._closed("tls_handshake")
            return False
        return True

    def _closed(self, reason: str) -> None:
        """Count why it ended, unless it was reused for a newcomer (counted then: its
        thread then sees an EOF, a broken pipe or a failed handshake)."""
        if not self.hold.reused:
            self.server.closed(reason)

    def handle_one_request(self) -> None:
        line = self.rfile.readline(65537)
        if not line:  # closed between requests (or a TCP probe): nothing to answer
            self.close_connection = True
            return
        if len(line) > 65536:
            self.requestline = self.request_version = self.command = ""
            self.send_error(414, "request line too long")
            return
        self.raw_requestline = line
        if not self.parse_request():  # answered (400, 431, 505...)
            return
        if self.reader.eof:
            raise ClientClosed("the client closed inside the request headers")
        self._dispatch()

    def _dispatch(self) -> None:
        srv = self.server
        try:
            url = urlsplit(self.path)
        except ValueError:
            self.send_error(400, f"malformed request target {self.path!r}")
            return
        self._body_done = False
        req = Request(self.command, url.path, url.query, self.headers,
                      self.client_address[0], self._read_body, self._trust)
        if self.reserved and (url.path.rstrip("/") or "/") not in srv.reserved_paths:
            resp = srv.error(req, 503, "connection limit reached; this connection serves "
                             f"only {', '.join(sorted(srv.reserved_paths))}")
        else:
            self.reader.body()
            try:
                resp = srv.handler(req)
            except BodyError as e:
                resp = srv.error(req, e.status, str(e))
            except (TimeoutError, ConnectionError, _HeaderTooLarge):
                raise
            except Exception:  # a handler bug: answered, logged once with its traceback
                log.exception("%s: %s %s failed", srv.name, self.command, url.path)
                resp = srv.error(req, 500, "internal error")
        unread = not self._body_done and bool(
            self.headers.get("Transfer-Encoding")
            or (self.headers.get("Content-Length") or "0").strip() != "0")
        self.unread = unread
        self._write(resp, close=resp.close or self.reserved or unread)

    def _trust(self) -> None:
        self.hold.trusted = True

    def _read_body(self, limit: int) -> bytes:
        body = read_body(self.headers, self.rfile, limit)
        self._body_done = True
        return body

    def _write(self, resp: Response, close: bool) -> None:
        self.reader.phase = "write"
        self.request.settimeout(self.server.limits.write_timeout_s)
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for name, value in resp.headers.items():
            self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers) in the listener's words."""
        if getattr(self, "raw_requestline", b"").startswith(_HTTP2_PREFACE):
            self.server.http2_client(self.client_address[0])
        self.unread = True
        self._write(self.server.error(None, code, message or "bad request"), close=True)

    def _try_error(self, code: int, message: str) -> None:
        with contextlib.suppress(OSError):
            self.send_error(code, message)


class _Listener(socketserver.TCPServer):
    """Accepts connections and gives each a slot and a thread (or a 503)."""

    allow_reuse_address = True  # SO_REUSEADDR (restart over TIME_WAIT), never SO_REUSEPORT
    # listen() backlog: the default of 5 drops bursts of exporters connecting at once.
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], server: HttpServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Connection, bind_and_activate=False)  # type: ignore[arg-type]
        self.name, self.limits, self.clock = server.name, server.limits, server.clock
        self.handler, self.error, self.tls = server.handler, server.error, server.tls
        self.reserved_paths = server.reserved_paths
        self.closed = server.closed
        self.slots = server.slots  # one set of slots for every address of the endpoint
        self._http2_told = server.http2_told

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.tls is not None:
            # no handshake here: a client that never completes one would block accept()
            sock = self.tls.context().wrap_socket(sock, server_side=True,
                                                  do_handshake_on_connect=False)
        return sock, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        accepted_at = self.clock()  # before the slot shows in ``connections``
        hold = Hold(request, client_address[0])
        reason = self.slots.take(hold)
        if reason == "reused":
            log.debug("%s: full; closing its oldest waiting connection for %s",
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

    def _serve(self, request: Any, client_address: Any, accepted_at: float,
               hold: Hold) -> None:
        try:
            _Connection(request, client_address, self, accepted_at, hold)
        except Exception:
            self.handle_error(request, client_address)
        finally:  # the slot first: a client that saw the close may connect again at once
            self.slots.give_back(hold)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("%s: connection from %s failed", self.name, client_address[0])

    def http2_client(self, peer: str) -> None:
        """An HTTP/2 client here: most likely a gRPC exporter sent to the HTTP port. Counted
        each time, said once per listener (its exporter retries: one line, not a flood)."""
        self.closed("http2_client")
        level = logging.DEBUG if self._http2_told.is_set() else logging.WARNING
        self._http2_told.set()
        log.log(level, "%s: an HTTP/2 client (an OTLP/gRPC exporter?) from %s reached this "
                "HTTP/1.1 port; point gRPC exporters at the OTLP/gRPC endpoint, or set "
                "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", self.name, peer)


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
                 reserved_paths: Collection[str] = PROBE_PATHS,
                 clock: Callable[[], float] = time.monotonic,
                 reuse_partial: bool = False) -> None:
        """``reuse_partial``: when full, a new connection closes the oldest partial one."""
        self.endpoint, self.handler, self.name = endpoint, handler, name
        self.reuse_partial = reuse_partial
        self.limits = limits or HttpLimits()
        self.tls, self.error, self.closed, self.clock = tls, error, on_close, clock
        self.reserved_paths = frozenset(reserved_paths)
        self.slots = Slots(self.limits, reuse_partial)
        self.http2_told = threading.Event()  # the HTTP/2 client warning was logged
        self._listeners: list[_Listener] = []
        self._serving = False
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
        """Bind (unless ``bind`` did) and serve in a thread per address."""
        self.bind()
        for listener in self._listeners:
            threading.Thread(target=listener.serve_forever, name=self.name,
                             daemon=True).start()
        self._serving = True

    @property
    def connections(self) -> int:
        """Connections being served now."""
        return self.slots.in_use

    def shutdown(self, deadline_s: float) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            if self._serving:
                listener.shutdown()  # waits for serve_forever to return
            listener.server_close()
        self._serving = False
