"""Hostile requests to the admin endpoint (``app.admin``) for test_admin_hostile_input.py: what
its store holds, Hypothesis strategies of requests, and the ``Request`` the server builds from
one (``receive.httpconn``: the target split by ``urlsplit``, headers parsed by
``http.client``, the body read by ``decode.body.read_body``).

Everything is what can reach the port: a request line carries latin-1 without whitespace (the
rest travels percent-encoded), a header value one line of latin-1. Strategies lean towards
the values each parameter's parser is most likely to get wrong (numbers ``int`` cannot read,
times out of range, forged cursors) and towards sizes up to the server's own limits.
"""

from __future__ import annotations

import base64
import functools
import gzip
import http.client
import io
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from hypothesis import strategies as st
from issues.issue_fixtures import window
from sessions.conversations import call, scripted

from otel_eval.app.admin import MAX_FEEDBACK_BYTES
from otel_eval.decode.body import read_body
from otel_eval.outputs.issues.result import IssuesResult
from otel_eval.outputs.issues.tracker import issues_offline
from otel_eval.receive.httpmessage import Request
from otel_eval.store import query as evaluations_query
from otel_eval.store import sessions as sessions_query
from otel_eval.store.query import encode_cursor

# --- what the store holds ------------------------------------------------------------------------

READ, WRITE = "read-token-of-dashboards", "write-token-of-people"  # the guarded listener's
GUIDE = Path(__file__).resolve().parents[1] / "data" / "detectors" / \
    "guide_lucky_recovery.otlp.json"
GUIDE_ID = "6e0c63257de34c926f9efcd03899a81d"
CONVERSATIONS = ("plain", "a/b c?d%é")  # the second URL-encoded in a path


def turns(conversation: str) -> list[tuple[str, dict[str, Any]]]:
    """The conversation's two turns: (trace id, OTLP/JSON body) each."""
    return scripted(conversation, "session.id", [
        (f"question {n} of {conversation}", [call("lookup", {"n": n}, f"c{n}"),
                                             {"role": "assistant", "content": "done"}])
        for n in range(2)])


RUNS = (GUIDE_ID, *(trace_id for c in CONVERSATIONS for trace_id, _ in turns(c)))


@functools.cache
def issues() -> IssuesResult:
    """A real clustering result (the service's issues job runs on its interval, not here)."""
    return issues_offline(window(30), now=1.0)


# --- requests, as the server builds them -------------------------------------------------------

@dataclass(frozen=True)
class Sent:
    method: str
    target: str  # the request line's target: path and query, as on the wire
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


def request_of(sent: Sent) -> Request:
    """The ``Request`` ``receive.httpconn`` hands the handler for ``sent``."""
    line = sent.target
    if line.startswith("//"):  # http.server's own rewrite of the target
        line = "/" + line.lstrip("/")
    url = urlsplit(line)
    head = "".join(f"{name}: {value}\r\n" for name, value in sent.headers) + "\r\n"
    headers = http.client.parse_headers(io.BytesIO(head.encode("latin-1")))

    def read(limit: int) -> bytes:
        return read_body(headers, io.BytesIO(sent.body), limit)

    return Request(sent.method, url.path, url.query, headers, "127.0.0.1", read)


# --- strategies ----------------------------------------------------------------------------------

# What a request line carries as it is: http.server decodes it as latin-1 and splits it at
# whitespace; anything else travels percent-encoded.
WIRE = "".join(c for c in map(chr, range(256)) if not c.isspace())
# What a header value carries (one line: no CR or LF).
HEADER = "".join(c for c in map(chr, range(256)) if c not in "\r\n")


def wire(text: str) -> str:
    """``text`` in a request target: what a request line cannot hold percent-encoded (UTF-8)."""
    return "".join(c if c in WIRE else quote(c, safe="") for c in text)


def _query(pairs: list[tuple[str, str | None]]) -> str:
    return "&".join(wire(k) if v is None else f"{wire(k)}={wire(v)}" for k, v in pairs)


def target(path: str, query: str) -> str:
    return f"{path}?{query}" if query else path


def _escapes(data: bytes) -> str:
    return "".join(f"%{b:02X}" for b in data)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


_ODD = st.sampled_from([
    "", "%", "%G1", "%0", "%00", "%C2%B2", "%FF%FE", "%ED%A0%80", "%C0%AF", "²", "¹", "\x00",
    "&", "=", ";", "+", "#", "?", "/", "%2F", "..", "%2e%2e", "'", "\"", "<script>", "\\",
    "%25", "%u0041", "\u0661", "%D9%A1", "\ufeff", "\U0001d7d9"])
TEXT = st.lists(st.one_of(st.text(WIRE, max_size=12), st.text(max_size=8),
                          st.binary(min_size=1, max_size=6).map(_escapes), _ODD),
                max_size=5).map("".join)
HUGE = st.builds(lambda piece, n: piece * n,
                 st.sampled_from(["9", "a", "%00", "%FF", "²", "-", "é", "%2F", "[", "\x00"]),
                 st.integers(1_000, 12_000))
NUMBERS = st.one_of(
    st.sampled_from(["-1", "0", "1", "20", "100", "200", "201", "1000", "1001", "999999999",
                     "1000000000", "9" * 19, str(2**63), str(2**64), "1e999", "-1e999",
                     "1e-999", "nan", "NaN", "inf", "-inf", "1_000", "0x10", "+5", "5.",
                     ".5", "-0"]),
    # digits str.isdigit takes and int refuses (superscripts) or reads (U+1D7D9, Arabic-Indic,
    # Devanagari)
    st.sampled_from(["²", "¹²", "1²", "\U0001d7d9", "\u0661", "\u0661\u0662",
                     "\u0663\u0660\u0660", "\u0967"]),
    st.integers(-(2**70), 2**70).map(str))
TIMES = st.one_of(
    st.floats().map(repr),
    st.builds(lambda when, offset: when.isoformat() + offset, st.datetimes(),
              st.sampled_from(["Z", "z", "+01:00", "-23:59", "+24:00", "", "+00:00:01"])),
    st.sampled_from(["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-23:59",
                     "2026-02-30T00:00:00Z", "1733011200", "1733011200.5", "-1",
                     "9223372036.854775807", "9223372036.854775808"]))
CURSORS = st.one_of(
    st.builds(encode_cursor, st.integers(-(2**70), 2**70),
              st.one_of(st.sampled_from(RUNS + CONVERSATIONS), st.text(max_size=300))),
    st.binary(max_size=80).map(_b64),
    st.text(max_size=40).map(lambda t: _b64(t.encode())),
    st.sampled_from(["", "=", "====", "!!", "a", "Zm9v", "MTox", "LTE6" + "YQ" * 20]))
KEYS = st.one_of(
    st.sampled_from(sorted({*evaluations_query.PARAMETERS, *sessions_query.PARAMETERS,
                            "offset", "turn", "", "LIMIT", "limit[]", "limit%00", "Limit"})),
    TEXT)
VALUES = st.one_of(NUMBERS, TIMES, CURSORS, TEXT, HUGE, st.sampled_from(
    ["true", "false", "TRUE", "yes", "complete", "incomplete", "truncated", "loop",
     "loop:stagnation", "a" * 200 + ":" + "b" * 200, "travel-agent", "airline"]))
QUERIES = st.one_of(st.lists(st.tuples(KEYS, st.none() | VALUES), max_size=6).map(_query),
                    TEXT.map(wire), HUGE.map(wire))
ISSUES = st.deferred(lambda: st.sampled_from([i.issue_id for i in issues().issues]))
TAILS = st.one_of(
    st.sampled_from(RUNS), st.sampled_from(RUNS).map(str.upper),
    st.sampled_from(CONVERSATIONS).map(lambda c: quote(c, safe="")),
    st.sampled_from(CONVERSATIONS).map(wire), ISSUES,
    st.text("0123456789abcdefABCDEF", max_size=40), TEXT.map(wire), HUGE.map(wire),
    st.sampled_from(["", "/", "..", "%2F", "a%2Fb", "%00", "runs", "steps", "-", "_" * 81]))
STEPS = st.one_of(st.integers(0, 12).map(str), NUMBERS.map(wire), TEXT.map(wire))
ID_ROUTES = ("/v1/evaluations/{}", "/v1/sessions/{}", "/v1/issues/{}/runs", "/ui/runs/{}",
             "/ui/runs/{}/steps/{}", "/ui/sessions/{}", "/ui/issues/{}/runs")
ROUTES = ("/metrics", "/healthz", "/readyz", "/v1/evaluations", "/v1/sessions", "/v1/issues",
          "/v1/calibration", "/v1/feedback", "/ui", "/ui/", "/ui/issues", "/ui/sessions",
          "/ui/calibration", "/ui/static/style.css", "/ui/static/outcome.js")
SLASHES = st.sampled_from(["", "", "", "/", "//"])
ID_PATHS = st.builds(lambda route, tail, step, end: route.format(tail, step) + end,
                     st.sampled_from(ID_ROUTES), TAILS, STEPS, SLASHES)
# Every route that reads a query, and its parameters (the other routes ignore the query).
QUERY_ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/evaluations": evaluations_query.PARAMETERS, "/ui/": evaluations_query.PARAMETERS,
    "/v1/sessions": (*sessions_query.PARAMETERS, "id"),
    "/ui/sessions": (*sessions_query.PARAMETERS, "id"),
    "/v1/issues/{issue}/runs": ("offset", "limit", "cursor"),
    "/ui/issues/{issue}/runs": ("offset", "cursor"),
    "/ui/sessions/{session}": ("turn",), "/metrics": ("name[]",)}
VALUE_OF = {"id": st.one_of(st.sampled_from([*CONVERSATIONS, ".", ".."]), TEXT),
            "limit": NUMBERS, "offset": NUMBERS, "turn": NUMBERS, "since": TIMES,
            "until": TIMES, "cursor": CURSORS, "passed": st.sampled_from(
                ["true", "false", "TRUE", "False", "yes", "1", "", "%74rue", "true\x00"])}


@st.composite
def queried(draw: st.DrawFn, route: str) -> str:
    """A request target of ``route`` (which reads its query): mostly its own parameters, each
    with values hostile to its kind (numbers, times, cursors), repeated or not; or any."""
    path = route.format(issue=draw(ISSUES), session=quote(draw(st.sampled_from(
        CONVERSATIONS)), safe=""))
    if draw(st.integers(0, 4)) == 0:
        return target(path, draw(QUERIES))
    pairs = []
    for _ in range(draw(st.integers(0, 4))):
        name = draw(st.sampled_from(QUERY_ROUTES[route]) if draw(st.integers(0, 3))
                    else KEYS)
        kind = VALUE_OF.get(name, TEXT)
        pairs.append((name, draw(st.one_of(kind, kind, kind, st.none(), VALUES))))
    return target(path, _query(pairs))


PATHS = st.one_of(st.builds(str.__add__, st.sampled_from(ROUTES), SLASHES), ID_PATHS,
                  TEXT.map(lambda t: "/" + wire(t)),
                  st.builds(lambda r, t: r + "/" + wire(t), st.sampled_from(ROUTES), TEXT))


# JSON values of every shape, NaN and the infinities included (json.dumps writes them).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**80), 2**80) | st.floats()
    | st.text(max_size=30) | st.sampled_from(RUNS),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                max_size=4),
    max_leaves=12)
LONG = st.builds(lambda piece, n: piece * n,
                 st.sampled_from(["a", "\x00", "\x7f", "é", "\U0001d7d9"]),
                 st.integers(1_000, 100_000))
TRACE_IDS = st.one_of(st.sampled_from(RUNS), st.sampled_from(RUNS).map(str.upper),
                      st.text("0123456789abcdef", max_size=40), JSON, LONG)
OUTCOMES = st.one_of(
    st.sampled_from(["success", "failure", "SUCCESS", " failure ", "pass", "fail", "ok", "",
                     "²", "1", "0", "\u0000"]),
    st.integers(-(2**80), 2**80), st.floats(), JSON, LONG)
FEEDBACK = st.fixed_dictionaries({"trace_id": TRACE_IDS, "outcome": OUTCOMES},
                                 optional={"extra": JSON})
PAYLOADS = st.one_of(
    FEEDBACK.map(lambda d: json.dumps(d).encode()),
    st.builds(lambda d, key: json.dumps({k: v for k, v in d.items() if k != key}).encode(),
              FEEDBACK, st.sampled_from(["trace_id", "outcome"])),
    JSON.map(lambda v: json.dumps(v).encode()),
    st.builds(lambda n, key: (f'{{"{key}": ' + "[" * n + "1" + "]" * n + "}").encode(),
              st.integers(1, 3_000), st.sampled_from(["trace_id", "outcome"])),
    st.integers(1, 100_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 100_000).map(lambda n: b'{"a":' * n + b"1" + b"}" * n),
    st.sampled_from([
        b"", b"null", b"[]", b"{}", b'"x"', b"1" * 5000, b"1e99999",
        b'{"trace_id": 1' + b"0" * 5000 + b', "outcome": 1}',
        (b'{"trace_id": "' + GUIDE_ID.encode() + b'", "outcome": 1e999}'),
        (b'{"trace_id": "' + GUIDE_ID.encode() + b'", "outcome": NaN}'),
        b'{"trace_id": Infinity}', b"\xff\xfe{", b'{"trace_id": "\\ud800", "outcome": 1}',
        b'{"trace_id": "' + b"\\u0000" * 100_000 + b'", "outcome": 1}',
        b'{"trace_id": "' + GUIDE_ID.encode() + b'", "outcome": "' + b"\\u0000" * 100_000
        + b'"}',
        b"{", b'"\x00"', b"trace_id=" + GUIDE_ID.encode() + b"&outcome=success",
        b" " * (MAX_FEEDBACK_BYTES + 1)]),
    st.binary(max_size=100))
CONTENT_TYPES = st.sampled_from([
    *["application/json"] * 6, "application/json; charset=utf-8",
    "Application/JSON ;x=y", "text/plain", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "", "application/jsonx", "application/json\x00"])
# A header value: short ones of any character a line holds, or up to http.client's line limit.
HEADER_TEXT = st.one_of(st.text(HEADER, max_size=60), st.builds(
    lambda piece, n: piece * n, st.sampled_from(["a", "\x00", "é", "\x7f", "\\"]),
    st.integers(1_000, 60_000)))
ENCODINGS = st.one_of(st.sampled_from([None, None, None, None, "gzip", "gzip", "deflate",
                                       "identity", "GZIP", "br", "gzip, gzip"]), HEADER_TEXT)
BAD_LENGTHS = st.one_of(st.sampled_from(["-1", "²", "1e3", "0x10", "", "0", str(2**70),
                                         str(MAX_FEEDBACK_BYTES + 1)]), HEADER_TEXT)
# A transfer coding other than chunked: 501 (RFC 9112 6.1), as the shared HTTP layer answers.
CODINGS = st.one_of(st.sampled_from(["gzip", "chunked, gzip", "identity", "CHUNKED;x"]),
                    HEADER_TEXT)


@st.composite
def bodies(draw: st.DrawFn) -> tuple[tuple[tuple[str, str], ...], bytes]:
    """(framing headers, bytes on the wire) of a POST body: the payload compressed as its
    Content-Encoding says (or not at all), framed by a right Content-Length, chunks, no
    framing, a Content-Length that cannot be read or is past the limit, or a transfer coding
    other than chunked."""
    payload = draw(PAYLOADS)
    encoding = draw(ENCODINGS)
    headers: list[tuple[str, str]] = []
    if encoding is not None:
        headers.append(("Content-Encoding", encoding))
        if draw(st.booleans()):  # else the bytes are not what it says
            if encoding.lower() == "gzip":
                payload = gzip.compress(payload, compresslevel=1)
            elif encoding == "deflate":
                payload = zlib.compress(payload, 1)
    framing = draw(st.sampled_from(["length", "length", "length", "chunked", "none", "bad",
                                    "coding"]))
    if framing == "length":
        headers.append(("Content-Length", str(len(payload))))
    elif framing == "chunked":
        size = draw(st.integers(1, 1 << 16))
        pieces = [payload[i:i + size] for i in range(0, len(payload), size)]
        payload = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
        headers.append(("Transfer-Encoding", "chunked"))
    elif framing == "bad":
        headers.append(("Content-Length", draw(BAD_LENGTHS)))
    elif framing == "coding":
        headers.append(("Transfer-Encoding", draw(CODINGS)))
    return tuple(headers), payload


def _basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"me:{token}".encode()).decode()


HOSTS = st.one_of(st.sampled_from(["localhost", "localhost:8888", "127.0.0.1:1", "[::1]",
                                   "[::1]:80", "attacker.example", "127.0.0.1.attacker.example",
                                   "", "[::1", "localhost:²", "LOCALHOST"]), HEADER_TEXT)
AUTHORIZATIONS = st.one_of(st.sampled_from([
    f"Bearer {READ}", f"Bearer {WRITE}", f"bearer   {WRITE}  ", f"Bearer {WRITE}x", "Bearer",
    "Bearer ", _basic(READ), _basic(WRITE), "Basic", "Basic !!!", "Basic " + _b64(b"\xff:\xfe"),
    "Basic " + base64.b64encode(WRITE.encode()).decode(), f"Token {WRITE}", f"Bearer {READ}é"]),
    HEADER_TEXT, HEADER_TEXT.map(lambda t: "Bearer " + t))
ORIGINS = st.one_of(st.sampled_from(["null", "http://localhost:8888", "http://localhost",
                                     "https://attacker.example", "http://[::1", "://"]),
                    HEADER_TEXT)
SITES = st.one_of(st.sampled_from(["same-origin", "none", "cross-site", "same-site", "NONE"]),
                  HEADER_TEXT)
ACCEPTS = st.one_of(st.sampled_from(["application/openmetrics-text; version=1.0.0",
                                     "application/openmetrics-text; version=x", "text/plain",
                                     "*/*;q=abc", "application/openmetrics-text;q=-1"]),
                    HEADER_TEXT)
METHODS = st.one_of(st.sampled_from(["GET", "GET", "GET", "POST", "POST", "HEAD", "PUT",
                                     "DELETE", "OPTIONS", "PATCH", "get", "TRACE", "CONNECT"]),
                    st.text(WIRE, min_size=1, max_size=10),
                    st.integers(1_000, 60_000).map(lambda n: "X" * n))


@st.composite
def requests(draw: st.DrawFn) -> Sent:
    """Any method, path, query and headers; a body with a POST."""
    method = draw(METHODS)
    path = draw(st.one_of(PATHS, st.sampled_from(["/v1/feedback", "/v1/feedback/"])))
    query = draw(st.one_of(st.just(""), QUERIES))
    headers: list[tuple[str, str]] = []
    for name, values in (("Host", HOSTS), ("Authorization", AUTHORIZATIONS),
                         ("Origin", ORIGINS), ("Sec-Fetch-Site", SITES),
                         ("Content-Type", CONTENT_TYPES), ("Accept", ACCEPTS),
                         ("Cookie", HEADER_TEXT)):
        if draw(st.booleans()):
            headers.append((name, draw(values)))
    body = b""
    if method == "POST":
        framing, body = draw(bodies())
        headers += framing
    return Sent(method, target(path, query), tuple(draw(st.permutations(headers))), body)
