"""The spans (or log records) of an OTLP export request counted on the wire, before it is
parsed: what decoding it will hold is known before protobuf allocates it.

``ExportTraceServiceRequest`` and ``ExportLogsServiceRequest`` share their shape: field 1
(``resource_spans`` / ``resource_logs``) holds field 2 (``scope_*``; 1000, the pre-1.0
``instrumentation_library_*``), which holds field 2 (``spans`` / ``log_records``). Only those
three levels are walked, every other field skipped by its length, so the walk costs a step
per item, never per byte; it stops once ``stop`` items are counted. A body that is no such
request is counted as far as it goes: the parse that follows refuses it.

``count_messages`` bounds every nested message of such a request (an attribute, an event, a
link, an ``AnyValue`` in an array...) without walking them: each begins with its tag, one of
``MESSAGE_TAGS``, so counting those bytes (C, no Python step per item) counts them all, and a
string's bytes that happen to be tags too (an upper bound). They are counted in one pass, as
the bytes ``bytes.translate`` deletes, a slice of at most ``_COUNT_CHUNK`` bytes at a time
(the copies it makes stay small whatever the request's size): a ``bytes.count`` per tag was 8
passes, ~4.6 us a span of serve's ~300 on bench/ingest.py's requests (1.5 % of its CPU),
against ~1.1.
"""

from __future__ import annotations

_LEN = 2  # wire type of a length-delimited field
_ITEMS = {1: (1,), 2: (2, 1000), 3: (2,)}  # depth -> the fields walked into (3: counted)
# The one-byte tags (field << 3 | 2) of every message-typed field of the OTLP trace and logs
# requests: fields 1 (resource_*, resource, scope, ArrayValue / KeyValueList values,
# attributes of a resource), 2 (scope_*, spans, log_records, KeyValue.value), 3 (an event's
# and a scope's attributes), 5 (a link's attributes, AnyValue.array_value, a log record's
# body), 6 (AnyValue.kvlist_value, a log record's attributes), 9, 11, 13 (a span's
# attributes, events, links); a span's status (15) is one per span, charged with it.
MESSAGE_TAGS = tuple(bytes([f << 3 | _LEN]) for f in (1, 2, 3, 5, 6, 9, 11, 13))
_TAG_BYTES = b"".join(MESSAGE_TAGS)
_COUNT_CHUNK = 1 << 20  # bytes of the request copied at a time by ``count_messages``


def _varint(data: bytes, at: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while at < end and shift < 64:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, at
        shift += 7
    raise ValueError("truncated varint")


def _skip(data: bytes, at: int, end: int, wire: int) -> int:
    if wire == 0:
        return _varint(data, at, end)[1]
    if wire == 1:
        return at + 8
    if wire == 5:
        return at + 4
    raise ValueError(f"wire type {wire}")


def _count(data: bytes, at: int, end: int, depth: int, stop: int) -> int:
    n = 0
    while at < end and n < stop:
        key, at = _varint(data, at, end)
        field, wire = key >> 3, key & 7
        if wire != _LEN:
            at = _skip(data, at, end, wire)
            continue
        size, at = _varint(data, at, end)
        inner_end = min(at + size, end)
        if field in _ITEMS[depth]:
            n += 1 if depth == 3 else _count(data, at, inner_end, depth + 1, stop - n)
        at = inner_end
    return n


def count_items(body: bytes, stop: int) -> int:
    """Spans (log records) in the request ``body``, at most ``stop`` (counting ends there)."""
    try:
        return _count(body, 0, len(body), 1, stop)
    except ValueError:  # malformed: the parse says so
        return 0


def count_messages(body: bytes) -> int:
    """Nested messages in the request ``body``, at most (module docstring): C's speed, one
    pass over the bytes, a slice of ``_COUNT_CHUNK`` at a time."""
    if len(body) <= _COUNT_CHUNK:
        return len(body) - len(body.translate(None, _TAG_BYTES))
    n = 0
    for at in range(0, len(body), _COUNT_CHUNK):
        chunk = body[at:at + _COUNT_CHUNK]
        n += len(chunk) - len(chunk.translate(None, _TAG_BYTES))
    return n
