"""One connection of the shared HTTP server (``httpserver``): its requests, one after another.

    [TLS handshake] -> request line and headers -> Request -> handler(request) -> Response
                    -> write -> idle -> next request (keep-alive) ... -> [linger] -> close

A ``Connection`` runs on its own thread, from the slot the listener gave it (``httpslots``)
to its close; it reads through ``httpstream`` (each read under its phase's deadline), parses
with ``http.server`` (its head checked first: ``httphead``) and answers through the
listener's handler and error words (``httpmessage``). It promises:
- **deadlines per phase, not per read**: the TLS handshake, request line and headers must
  arrive within ``read_header_timeout_s`` (from accept, or from the first byte of a keep-alive
  request), the whole request within ``read_timeout_s``, the answer be taken within
  ``write_timeout_s``; between requests a connection may idle ``idle_timeout_s``. A client
  trickling a byte at a time is cut at the deadline, whatever its pace;
- **a hang-up is an event, not an error**: a client that closes mid-request or stops reading
  the answer, a deadline passed, a failed handshake, headers past the limit, an HTTP/2 client:
  each is counted with a reason through the listener's ``closed`` (``CLOSE_REASONS``) and
  logged at debug, never a traceback; an idle keep-alive connection timing out is no event;
  a request refused before its handler is counted too (``refused``: ``REFUSE_REASONS``);
- **empty lines before a request line are dropped** (RFC 9112 2.2: a client may end a POST's
  body with a CRLF its length does not count), at most ``EMPTY_LINES``, within the head's
  deadline and limit; a line of blanks, or one empty line more, is a 400;
- a reserved connection serves only the reserved paths (any other is a 503), one request;
- a bug in a handler answers 500 (logged with its traceback), and a request whose body was
  not read to its end closes the connection (its bytes must not be parsed as a request), as
  does one framed both ways (``Transfer-Encoding`` and ``Content-Length``: read as chunked,
  but a front end that read the length took what follows for its body; RFC 9112 6.1);
- **``Expect: 100-continue`` is answered at the body's first read**, not when the headers are
  in (Go's ``expectContinueReader``): a request refused on its headers (no token,
  a length past the limit, a wrong type) gets its final status and no ``100 Continue``, so
  its client never sends the body it was about to be refused for;
- **a refusal is heard**: a connection closed with bytes of its request unread (a body refused
  before it was read, a header past the limit) is half-closed after the answer, and what the
  client still sends is read and dropped for up to ``LINGER_S`` (Go's net/http
  ``closeWriteAndWait``, nginx's lingering close). Closing a socket with unread bytes sends
  a reset, and a client still writing the body of a refused 1 MiB request would get
  ``ECONNRESET`` / ``EPIPE`` instead of the 413;
- **every answer is an HTTP/1.1 answer**: a status line, ``Content-Type`` and
  ``Content-Length``, and ``Connection: close`` when the connection closes after it, refusals
  of a request line it could not read too (http.server answers those as to HTTP/0.9: a bare
  body its client cannot read; Go's net/http writes ``HTTP/1.1 400`` and headers);
- **every answer is neither sniffed nor stored**: ``X-Content-Type-Options: nosniff`` (a
  browser never reads a JSON body that quotes span content as HTML or script) and
  ``Cache-Control: no-store`` (results, errors and the server's own refusals are not kept by
  a browser or a proxy), unless the handler set the header itself (the web view's static
  files are cached). Written here, where every answer of every listener is written.
"""

from __future__ import annotations

import contextlib
import io
import logging
import socket
import socketserver
import ssl
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import urlsplit

from otel_eval.base.loglimit import LogLimiter, bug_line
from otel_eval.base.printable import quoted
from otel_eval.decode.body import (
    BodyBudget,
    BodyError,
    BodyShare,
    ClientClosed,
    field,
    read_body,
)
from otel_eval.receive.config import HttpLimits
from otel_eval.receive.httphead import BadHead, FieldLines, check_request_line
from otel_eval.receive.httpmessage import ErrorBody, Handler, Request, Response
from otel_eval.receive.httpslots import Hold
from otel_eval.receive.httpstream import (
    TIMEOUT_REASON,
    DeadlineReader,
    HeaderTooLarge,
    Writer,
)

log = logging.getLogger(__name__)

# What an HTTP/2 client (an OTLP/gRPC exporter pointed at an HTTP port) sends first: the
# connection preface (RFC 9113 3.4), read by http.server as a request line of version 2.0.
_HTTP2_PREFACE = b"PRI * HTTP/2.0"
_TLS_HANDSHAKE = b"\x16"  # a TLS record's content type: a ClientHello's first byte
# Why a request was refused before a handler saw it, by the status it was answered (by
# http.server's ``parse_request`` or here): counted through the listener's ``refused``.
_REFUSALS = {400: "bad_request_line", 414: "bad_request_line", 431: "header_too_large",
             505: "unsupported_http_version"}
# How long a connection closed with its request unread keeps reading (and dropping) what the
# client still sends, seconds (Go waits 0.5 s, nginx up to 30 s). Bounded in time; nothing is kept.
LINGER_S = 2.0
# Empty lines dropped before a request line (RFC 9112 2.2: "SHOULD ignore at least one"; a
# client may end a POST's body with a CRLF its Content-Length does not count), at most this
# many, as Apache httpd's DEFAULT_LIMIT_BLANK_LINES: one more is a 400. Bounded in bytes and
# time too, as the head they precede (``max_header_bytes``, ``read_header_timeout_s``).
EMPTY_LINES = 10
_EMPTY = (b"\r\n", b"\n")
# Headers of every answer a handler does not set itself (lowercase name -> (name, value)).
_EVERY_ANSWER = {"x-content-type-options": ("X-Content-Type-Options", "nosniff"),
                 "cache-control": ("Cache-Control", "no-store")}


class _ContinueFirst:
    """A connection's body stream that sends the ``100 Continue`` it owes before its first
    read: ``read_body`` refuses a body by its framing (length past the limit, an unknown
    encoding) before reading any of it, and that refusal needs no ``100`` either."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def _continue(self) -> io.BufferedIOBase:
        if self.conn.continue_owed:  # the client waits for it before sending the body
            self.conn.continue_owed = False
            self.conn.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        return self.conn.rfile

    def read(self, size: int = -1, /) -> bytes:
        return self._continue().read(size)

    def readline(self, size: int | None = -1, /) -> bytes:
        return self._continue().readline(size)


class ListenerBase(socketserver.TCPServer):
    """What a connection reads of the listener that accepted it (``httpserver``'s is the
    one): declared here, so that this module does not import the server's."""

    name: str
    limits: HttpLimits
    clock: Callable[[], float]
    handler: Handler
    error: ErrorBody
    reserved_paths: frozenset[str]
    closed: Callable[[str], None]  # count why a connection ended (``CLOSE_REASONS``)
    refused: Callable[[str], None]  # count a request refused before its handler
    budget: BodyBudget | None  # bodies held at once by every connection (None: no bound)
    handler_log: LogLimiter  # a handler's bug: its traceback once, then counted lines

    def http2_client(self, peer: str) -> None:
        """Count (and say) an HTTP/2 client at this HTTP/1.1 port."""
        raise NotImplementedError

    def tls_client(self, peer: str) -> None:
        """Count (and say) a TLS client at this plain-text port."""
        raise NotImplementedError


class Connection(BaseHTTPRequestHandler):
    """One client connection: its requests, one after another (keep-alive)."""

    protocol_version = "HTTP/1.1"
    server_version = "otel-eval"
    server: ListenerBase

    def __init__(self, request: Any, client_address: Any, server: ListenerBase,
                 accepted_at: float, hold: Hold) -> None:
        self.accepted_at, self.hold, self.reserved = accepted_at, hold, hold.reserved
        super().__init__(request, client_address, server)

    def setup(self) -> None:
        self.unread = False  # bytes of the request left unread when the connection closes
        self.share: BodyShare | None = None  # the request's part of the listener's budget
        self.connection = self.request
        self.reader = DeadlineReader(self.request, self.server.clock, self.server.limits,
                                      self.accepted_at)
        self.buffered = io.BufferedReader(self.reader)
        self.rfile = self.buffered
        self.hold.reader = self.reader
        self.wfile = Writer(self.request)  # type: ignore[assignment]

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
        self.reader.phase = "linger"  # answered: its slot gives way to a newcomer (httpslots)
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
                    # waits for the next request's first byte, unless the client sent it
                    # with the previous request's (pipelined): it begins now either way
                    if self.buffered.peek(1):
                        self.reader.begin(self.server.clock())
                    self.handle_one_request()
        except TimeoutError:
            if self.reader.phase in TIMEOUT_REASON:  # an idle keep-alive end is no event
                self._closed(TIMEOUT_REASON[self.reader.phase])
        except HeaderTooLarge:
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

    def handle_expect_100(self) -> bool:
        """``Expect: 100-continue``: owed, sent before the body's first read (``_ContinueFirst``)
        if the handler reads it; http.server sent it at once, before the handler could refuse
        the request, and the client sent the body it was then refused for."""
        self.continue_owed = True
        return True

    def handle_one_request(self) -> None:
        self.continue_owed = False
        # nothing of the request is known yet, and nothing of the last one holds: a refusal
        # before ``parse_request`` (a line past the head's limit, a ClientHello, a line past
        # 64 KiB) logs and answers with these (unset on a new connection: a traceback)
        self.requestline = self.request_version = self.command = ""
        self.raw_requestline = b""
        head_at = self.rfile.tell()
        if (not isinstance(self.request, ssl.SSLSocket)
                and self.buffered.peek(1)[:1] == _TLS_HANDSHAKE):
            # a ClientHello, not a request line (read as one, it waited for a newline its
            # random bytes may not hold, then was a bare 400): an https:// endpoint here
            self.server.tls_client(self.client_address[0])
            self.send_error(400, "a TLS client at a plain-text port: use http://",
                            reason="tls_client")
            return
        line = self._request_line()
        if not line:  # closed between requests (or a TCP probe): nothing to answer
            self.close_connection = True
            return
        if len(line) > 65536:
            self.send_error(414, "request line too long")
            return
        self.raw_requestline = line
        if len(line.split()) == 2:
            # no version: HTTP/0.9, which sends no headers (http.server waited for some, then
            # served it as 0.9); refused at once, as Go's net/http refuses it
            self.requestline = str(line, "iso-8859-1").rstrip("\r\n")
            self.send_error(400, f"bad request line {quoted(self.requestline)}: no HTTP version")
            return
        self.rfile = FieldLines(self.buffered)  # type: ignore[assignment]  # http.server
        try:  # reads the field lines through it: each is checked first (``httphead``)
            check_request_line(line)  # http.server closed on a blank one without a word
            parsed = self.parse_request()
        except BadHead as e:
            self.send_error(400, str(e))
            return
        finally:
            self.rfile = self.buffered
        if not parsed:  # answered (400, 431, 505...)
            return
        if self.rfile.tell() - head_at > self.server.limits.max_header_bytes:
            raise HeaderTooLarge()  # what was read ahead past the head is not counted
        if self.reader.eof:
            raise ClientClosed("the client closed inside the request headers")
        if self.request_version == "HTTP/1.0" and "Transfer-Encoding" in self.headers:
            # no transfer coding before HTTP/1.1: its framing is faulty, and what a front end
            # took for this request's end is unknown; answered, then closed (RFC 9112 6.1)
            self.send_error(400, "Transfer-Encoding in an HTTP/1.0 request",
                            reason="unsupported_transfer_encoding")
            return
        self._dispatch()

    def _request_line(self) -> bytes:
        """The request line, past up to ``EMPTY_LINES`` empty lines (RFC 9112 2.2): they are
        read under the head's deadline, which began at the first, and count in its limit."""
        for _ in range(EMPTY_LINES):
            line = self.rfile.readline(65537)
            if line not in _EMPTY:
                return line
        return self.rfile.readline(65537)

    def _dispatch(self) -> None:
        srv = self.server
        try:
            url = urlsplit(self.path)
        except ValueError:
            self.send_error(400, f"malformed request target {quoted(self.path)}")
            return
        self._body_done = False
        req = Request(self.command, url.path, url.query, self.headers,
                      self.client_address[0], self._read_body, self._trust)
        if self.reserved and (url.path.rstrip("/") or "/") not in srv.reserved_paths:
            resp = srv.error(req, 503, "connection limit reached; this connection serves "
                             f"only {', '.join(sorted(srv.reserved_paths))}")
        else:
            self.reader.body()
            self.share = (srv.budget.share(self.client_address[0])
                          if srv.budget is not None else None)
            try:
                resp = srv.handler(req)
            except BodyError as e:
                resp = srv.error(req, e.status, str(e))
            except (TimeoutError, ConnectionError, HeaderTooLarge):
                raise
            except Exception:  # a handler bug: answered; its traceback once, then counted
                bug_line(srv.handler_log, log, "%s: %s %s failed", srv.name, self.command,
                         url.path, counted="failed requests")
                resp = srv.error(req, 500, "internal error")
            finally:  # handled: its body is no longer held
                if self.share is not None:
                    self.share.release()
        chunked = field(self.headers, "Transfer-Encoding")
        length = field(self.headers, "Content-Length")
        # both framings: read as chunked, but a front end may have read the length, and the
        # bytes past the last chunk must not be answered as a request (RFC 9112 6.1)
        unread = bool(chunked and length is not None) or (
            not self._body_done and bool(chunked or (length or "0") != "0"))
        self.unread = unread
        self._write(resp, close=resp.close or self.reserved or unread)

    def _trust(self, sender: str) -> None:
        self.hold.trusted = True
        if sender and self.share is not None and not self.share.held:
            self.share.peer = f"{self.share.peer} token {sender}"  # no address has a space

    def _read_body(self, limit: int) -> bytes:
        stream: Any = _ContinueFirst(self) if self.continue_owed else self.rfile
        body = read_body(self.headers, stream, limit,
                         self.share.charge if self.share is not None else lambda _n: None)
        self._body_done = True
        return body

    def _write(self, resp: Response, close: bool) -> None:
        self.reader.phase = "write"
        self.request.settimeout(self.server.limits.write_timeout_s)
        if self.request_version == "HTTP/0.9":
            # http.server's version until it read one from the request line: it writes an
            # HTTP/0.9 answer, a body without status line nor headers, which an HTTP/1.x
            # client cannot read. Every answer is HTTP/1.1, as Go's net/http writes its own.
            self.request_version = self.protocol_version
        self.send_response(resp.status)
        self.send_header("Content-Type", resp.content_type)
        self.send_header("Content-Length", str(len(resp.body)))
        for name, value in resp.headers.items():
            self.send_header(name, value)
        own = {name.lower() for name in resp.headers}
        for key, (name, value) in _EVERY_ANSWER.items():
            if key not in own:
                self.send_header(name, value)
        if close:
            self.send_header("Connection", "close")  # also sets close_connection
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None, *, reason: str = "") -> None:
        """http.server's own refusals (bad request line, headers) in the listener's words,
        counted with ``reason`` (by default the status's, ``_REFUSALS``) before the answer."""
        if getattr(self, "raw_requestline", b"").startswith(_HTTP2_PREFACE):
            self.server.http2_client(self.client_address[0])
        if reason := reason or _REFUSALS.get(code, ""):
            self.server.refused(reason)
        self.unread = True
        self._write(self.server.error(None, code, message or "bad request"), close=True)

    def _try_error(self, code: int, message: str) -> None:
        with contextlib.suppress(OSError):
            self.send_error(code, message)
