"""HTTP body framing and JSON parsing, both bounded (the shared HTTP layer with
``receive.httpserver``, which owns connections and deadlines).

Every HTTP route (OTLP/HTTP traces and logs, the admin API) reads its body through
``Request.body`` -> ``read_body`` and parses JSON through ``loads_bounded``. Promises:
- never more than ``limit`` bytes are held, whatever the framing: ``Content-Length``,
  ``Transfer-Encoding: chunked`` (decoded here; ``http.server`` does not), and gzip/deflate
  (the compressed bytes and the decompressed result are both bounded, decompressed as it
  streams in, so a bomb is cut off after ``limit + 64 KiB``);
- a body that cannot be framed (negative or non-numeric length, "\\u00b2" digits, a bad chunk
  header) is a ``BodyError`` with the HTTP status to answer (400, 411, 413, 415, 501), never a
  hang or a read to end of stream; after such an error the connection must be closed. One
  refused on its headers for the sender's setting, not for its bytes, says why in ``reason``
  (a Content-Encoding or Transfer-Encoding not decoded here, no length nor chunked);
- a framing field sent twice is read as one list (``field``: RFC 9110 5.3), never its first
  line alone: ``Content-Length: 0`` then ``Content-Length: 40`` is ``"0, 40"``, a 400, not an
  empty body followed by 40 bytes parsed as a next request that a front end reading the other
  line took as this one's body (request smuggling);
- with a ``BodyBudget`` (the OTLP/HTTP receiver's), the bodies being read and handled on every
  connection at once hold at most its bytes: each piece is charged as it is held (the
  decompressed bytes for gzip/deflate), and a request that would pass it, or pass its
  address's part of it, is ``BodyError`` 429 (retryable) instead of another ``limit`` bytes
  held;
- a client that closes before its body ends is ``ClientClosed`` (a hang-up: nobody to answer;
  ``receive.httpconn`` counts it);
- JSON deeper than ``max_depth``, with NaN/Infinity, or nested past the interpreter's recursion
  limit is a ``ValueError`` with the reason (the caller answers 400).
"""

from __future__ import annotations

import json
import threading
import zlib
from collections.abc import Callable
from email.message import Message
from typing import Any, Protocol

from otel_eval.base.configcheck import is_ascii_digits
from otel_eval.base.printable import quoted

# Read size for streamed bodies: bounds what is held beyond the limit while reading.
_PIECE = 64 * 1024
# Longest chunk-size line accepted (hex size plus chunk extensions).
_MAX_CHUNK_LINE = 1024
# Default JSON nesting bound: OTLP/JSON is ~10 levels deep plus 4 per nested kvlist value.
# Past what protobuf decodes (upb's 100 message levels: 31 nested kvlists, 134 JSON levels):
# a request taken as protobuf and published to Kafka as OTLP/JSON must read back (at 100 a
# taken span became a poison record); deeper JSON is refused by protobuf's own parser.
MAX_JSON_DEPTH = 160


class _Stream(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...

    def readline(self, size: int | None = ..., /) -> bytes: ...


class ClientClosed(ConnectionError):
    """The client closed the connection before its body ended (nothing to answer)."""


class BodyError(ValueError):
    """A body that is refused: ``status`` is the HTTP answer; the connection must close."""

    def __init__(self, status: int, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        # why, where the status alone does not say: a 429's "bodies_in_flight" or
        # "sender_share"; a 415's "unsupported_content_encoding" (brotli, zstd: the
        # sender's setting, not a broken body)
        self.reason = reason


class BodyBudget:
    """Bytes of request bodies held at once across connections (thread-safe): each request
    charges what it holds as it reads (``charge``: ``BodyError`` 429 past the budget) and
    gives it all back when it is answered (``release``). One sender (``peer``: its address, and
    its token's name) holds at most
    ``per_peer`` of it (None: the whole budget), so a few stalled connections from one
    address (each a 64 MiB inflated body held until its read deadline) cannot take it all
    and leave every other sender 429s."""

    def __init__(self, max_bytes: int, per_peer: int | None = None) -> None:
        self.max_bytes = max_bytes
        self.per_peer = max_bytes if per_peer is None else min(per_peer, max_bytes)
        self.held = 0
        self._peers: dict[str, int] = {}  # bytes held by each address holding any
        self._lock = threading.Lock()

    def share(self, peer: str = "") -> BodyShare:
        return BodyShare(self, peer)

    def _take(self, peer: str, n: int) -> str:
        """"" when ``n`` more bytes are held for ``peer``, else the reason they are not."""
        with self._lock:
            if self.held + n > self.max_bytes:
                return "bodies_in_flight"
            mine = self._peers.get(peer, 0)
            if mine + n > self.per_peer:
                return "sender_share"
            self.held += n
            self._peers[peer] = mine + n
            return ""

    def _give(self, peer: str, n: int) -> None:
        with self._lock:
            self.held -= n
            left = self._peers.get(peer, 0) - n
            if left > 0:
                self._peers[peer] = left
            else:
                self._peers.pop(peer, None)


class BodyShare:
    """One request's part of a ``BodyBudget``."""

    def __init__(self, budget: BodyBudget, peer: str = "") -> None:
        self.budget, self.peer, self.held = budget, peer, 0

    def charge(self, n: int) -> None:
        refused = self.budget._take(self.peer, n)
        if refused == "sender_share":
            raise BodyError(429, "request bodies in flight from this sender exceed "
                            f"{self.budget.per_peer} bytes; retry later", refused)
        if refused:
            raise BodyError(429, "request bodies in flight exceed "
                            f"{self.budget.max_bytes} bytes; retry later", refused)
        self.held += n

    def release(self) -> None:
        held, self.held = self.held, 0
        self.budget._give(self.peer, held)


def field(headers: Message, name: str) -> str | None:
    """A header's value, its lines joined by ", " when sent more than once (None: absent)."""
    values = headers.get_all(name)
    return None if values is None else ", ".join(str(v).strip() for v in values)


def _raw_pieces(headers: Message, rfile: _Stream, limit: int) -> Any:
    """Yield the body's bytes as sent (still compressed), at most ``limit`` in total."""
    te = (field(headers, "Transfer-Encoding") or "").strip().lower()
    if te:
        if te != "chunked":
            raise BodyError(501, f"unsupported Transfer-Encoding {quoted(te)}",
                            "unsupported_transfer_encoding")
        yield from _chunks(rfile, limit)
        return
    raw_length = field(headers, "Content-Length")
    if raw_length is None:
        raise BodyError(411, "a body needs Content-Length or Transfer-Encoding: chunked",
                        "length_required")
    if not is_ascii_digits(raw_length.strip()):  # "²".isdigit(), and int() refuses it
        raise BodyError(400, f"invalid Content-Length {quoted(raw_length)}: expected digits 0-9")
    length = int(raw_length)
    if length > limit:
        raise BodyError(413, f"body of {length} bytes exceeds the limit of {limit}")
    yield from _exactly(rfile, length, "the client closed before the end of its Content-Length")


def _exactly(rfile: _Stream, n: int, closed: str) -> Any:
    """Yield the next ``n`` bytes of ``rfile`` in pieces of at most ``_PIECE``;
    ``ClientClosed(closed)`` when the client closes before the last."""
    while n > 0:
        piece = rfile.read(min(_PIECE, n))
        if not piece:
            raise ClientClosed(closed)
        n -= len(piece)
        yield piece


def _chunks(rfile: _Stream, limit: int) -> Any:
    total = 0
    while True:
        line = rfile.readline(_MAX_CHUNK_LINE + 1)
        size_text = line.split(b";", 1)[0].strip()
        if len(line) > _MAX_CHUNK_LINE or not size_text or not all(
                c in b"0123456789abcdefABCDEF" for c in size_text):
            raise BodyError(400, "malformed chunked body (bad chunk size line)")
        size = int(size_text, 16)
        if size == 0:
            break
        total += size
        if total > limit:
            raise BodyError(413, f"chunked body exceeds the limit of {limit} bytes")
        yield from _exactly(rfile, size, "the client closed inside a chunk")
        if rfile.read(2) != b"\r\n":
            raise BodyError(400, "malformed chunked body (no CRLF after a chunk)")
    for _ in range(64):  # trailer fields, ignored; an empty line ends them
        trailer = rfile.readline(_MAX_CHUNK_LINE + 1)
        if trailer in (b"\r\n", b"\n", b""):
            return
    raise BodyError(400, "malformed chunked body (too many trailer lines)")


def read_body(headers: Message, rfile: _Stream, limit: int,
              charge: Callable[[int], None] = lambda _n: None) -> bytes:
    """The request body, gunzipped/inflated if so encoded, at most ``limit`` bytes;
    ``charge(n)`` as each ``n`` bytes are held (``BodyShare.charge``).

    Raises ``BodyError`` (with the status to answer) for anything refused.
    """
    encoding = (field(headers, "Content-Encoding") or "identity").strip().lower()
    if encoding not in ("identity", "gzip", "deflate"):
        raise BodyError(415, f"unsupported Content-Encoding {quoted(encoding)}",
                        "unsupported_content_encoding")
    pieces = _raw_pieces(headers, rfile, limit)
    if encoding == "identity":
        # into one buffer as they come: ``b"".join`` lists every piece first, one bytes
        # object per chunk (1-byte chunks held ~90 bytes per byte of the body)
        whole = bytearray()
        for piece in pieces:
            charge(len(piece))
            whole += piece
        return bytes(whole)
    wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    out = bytearray()
    try:
        for piece in pieces:
            inflated = d.decompress(piece, limit + 1 - len(out))
            charge(len(inflated))
            out += inflated
            if len(out) > limit or d.unconsumed_tail:
                raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
        rest = d.flush()
        charge(len(rest))
        out += rest
    except zlib.error as e:
        raise BodyError(400, f"body is not valid {encoding}: {e}") from e
    if len(out) > limit:
        raise BodyError(413, f"decompressed body exceeds the limit of {limit} bytes")
    if not d.eof:
        raise BodyError(400, f"body is not valid {encoding}: truncated stream")
    return bytes(out)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def loads_bounded(body: bytes | str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` that refuses NaN/Infinity and nesting past ``max_depth`` (ValueError)."""
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except RecursionError:
        raise ValueError(f"JSON nested deeper than {max_depth} levels") from None
    except UnicodeDecodeError as e:
        raise ValueError(f"body is not valid UTF-8 JSON: {e}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"body is not valid JSON: {e}") from e
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:  # iterative: the check itself must not recurse
        obj, depth = stack.pop()
        if depth > max_depth:
            raise ValueError(f"JSON nested deeper than {max_depth} levels")
        if isinstance(obj, dict):
            stack.extend((v, depth + 1) for v in obj.values() if isinstance(v, dict | list))
        elif isinstance(obj, list):
            stack.extend((v, depth + 1) for v in obj if isinstance(v, dict | list))
    return data
