"""What decoding the requests in hand holds at once, over every door (thread-safe):
the bytes as received grow several times over once parsed and decoded (a request of minimal
spans ~19x: 13 MiB held 244 MiB; empty spans ~90x in the parse alone), which neither the
HTTP bodies budget nor gRPC's message limit counts.

A protobuf request is charged before it is parsed, by what decoding it will hold:
``PARSED_BYTES_PER_BYTE`` per byte (at its peak: the parse's copy of the request's strings,
the decoded span's own bytes and, while a span is written, the serializer's buffer; a salvage
holds the lenient copy, the item written back and its re-parse), ``MESSAGE_HELD_BYTES``
per nested message and ``SPAN_HELD_BYTES`` per span
or log record (counted on the wire, ``decode.wirecount``: a parsed message and its decoded
span each cost ~0.2 and ~0.8 KiB whatever its size on the wire). A nested message, an
attribute, an event, a link or an array's value, holds ~50-85 bytes parsed whatever its size
(an empty one is 2 bytes on the wire: ~25-40x), twice that when a span's invalid UTF-8 makes
the parse salvage the rest (a lenient copy beside the real one); they are counted by their
tags (``count_messages``, an upper bound: ~3.7 % of an LLM agent's request bytes are such
tags, ~7 B a byte charged). The charge is
given back once the engine answered (what it took, its pending budget counts). A request
whose charge alone passes the budget is refused as too large (never retried); one that
would pass it with the requests being decoded is throttled (retryable; reason
``decoding``).

An OTLP/JSON request is charged the same way, before ``json.loads``, by an upper bound that
holds whatever its content (``json_cost``): ``JSON_BYTES_PER_BYTE`` per byte (a number or a
string held as Python objects, the protobuf request and its decoded copy; floats ~12x) plus
``SPAN_HELD_BYTES`` per ``{`` (a dict, the message it becomes and perhaps a decoded span: an
empty span ``{},`` held ~105x its 3 bytes) and ``JSON_LIST_BYTES`` per ``[`` (``[],`` ~47x),
each counted by ``bytes.count`` (braces inside strings are charged too: an upper bound).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from otel_eval.assemble.assembler import SPAN_HELD_BYTES
from otel_eval.decode.wirecount import count_items, count_messages

# what decoding a request holds per byte of it at its peak, beyond its messages: 3 measured
# (a 20 MB string, parsed or salvaged: the parse copies it, the span's bytes are a second copy
# and SerializeToString's buffer a third while they are written; 2 once done, which is what
# was measured before: tests/receiver/test_decoding_budget.py); the request itself is counted
# where it is received (the HTTP bodies, gRPC's messages)
PARSED_BYTES_PER_BYTE = 3
# per nested message (its tag counted on the wire): ~84 bytes measured at most (an empty link),
# ~160 parsed twice to salvage a request with invalid UTF-8 (tests/receiver/
# test_decoding_budget.py)
MESSAGE_HELD_BYTES = 192
# json.loads and ParseDict of an OTLP/JSON request, per byte, per object and per list, at
# most (measured: ~0.75 of this charge at worst, a list of floats; module docstring)
JSON_BYTES_PER_BYTE = 16
JSON_LIST_BYTES = 256


def json_cost(body: bytes) -> int:
    """What parsing and decoding the OTLP/JSON ``body`` holds at worst (module docstring)."""
    return (len(body) * JSON_BYTES_PER_BYTE + body.count(b"{") * SPAN_HELD_BYTES
            + body.count(b"[") * JSON_LIST_BYTES)


class DecodeBudget:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._lock = threading.Lock()

    def cost(self, body: bytes) -> int:
        """What decoding ``body`` holds at worst; counting stops past the budget."""
        parsed = len(body) * PARSED_BYTES_PER_BYTE + count_messages(body) * MESSAGE_HELD_BYTES
        room = max(0, self.max_bytes - parsed) // SPAN_HELD_BYTES + 1
        return parsed + count_items(body, room) * SPAN_HELD_BYTES

    def take(self, body: bytes, *, json: bool = False
             ) -> tuple[Literal["", "too_large", "decoding"], int]:
        """Charge ``body``'s cost: ("", the bytes charged, to ``give_back``), or why not and 0
        (``too_large``: past the budget alone; ``decoding``: not with what is held)."""
        n = json_cost(body) if json else self.cost(body)
        if n > self.max_bytes:
            return "too_large", 0
        with self._lock:
            if self.held + n > self.max_bytes:
                return "decoding", 0
            self.held += n
        return "", n

    def give_back(self, n: int) -> None:
        with self._lock:
            self.held -= n

    @contextmanager
    def charged(self, body: bytes, *, json: bool = False
                ) -> Iterator[Literal["", "too_large", "decoding"]]:
        """"" while ``body``'s cost is held (given back on exit), else why it is not;
        ``json``: an OTLP/JSON body (``json_cost``)."""
        refused, n = self.take(body, json=json)
        if refused:
            yield refused
            return
        try:
            yield ""
        finally:
            self.give_back(n)
