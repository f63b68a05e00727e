"""Delivery (``outputs.sender``): queued OTLP requests -> export requests bounded in bytes.

    queued requests (one trace's spans, or one evaluation's records)
      -> ``take`` the next run of them under ``max_batch_items`` and ``max_batch_bytes``
      -> ``batches``: merged into one request, or one request too large alone split in pieces

The byte bound is the collector's ``sending_queue.batch`` with ``sizer: bytes``,
``max_size``: a downstream refuses a request over its receive limit (OTLP/gRPC: 4 MiB unless
configured) with RESOURCE_EXHAUSTED, and the whole request is lost, other traces' spans included.

Promises:
- sizes are the serialized size of the request (protobuf ``ByteSize``), what the downstream's
  limit counts (uncompressed: gRPC checks the size after decompressing). Merging requests
  concatenates their resource entries, so a merged request's size is the sum of its parts;
- a request larger than ``max_bytes`` alone is split by resource, then scope, then item
  (span, log record), in order: each piece under ``max_bytes``, every item in exactly one
  piece, under a copy of its resource and scope entries as received (every field, unknown
  fields too: ``CopyFrom``), unchanged itself. Nothing is re-encoded from the model;
- one item larger than ``max_bytes`` with its resource and scope is a piece of its own: it is
  sent, not dropped (nothing smaller can carry it; a downstream whose limit is higher than
  the bound takes it), and a downstream that refuses it refuses only that item (counted
  ``rejected`` by the sender);
- linear in the request's size: each resource and scope entry is copied once for its
  header (the entry without its repeated field), each item sized once and copied once.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from otel_eval.base.component import Held
from otel_eval.decode.encode import header

# A length-delimited field's length prefix is at most this many bytes for any message under
# 32 GiB; a piece's size is counted with it, so the real size is never above the count.
_MAX_LENGTH_PREFIX = 5


class Request(Protocol):
    def MergeFrom(self, other: Any) -> None: ...
    def ByteSize(self) -> int: ...


R = TypeVar("R", bound=Request)


@dataclass(frozen=True)
class Layout:
    """The three repeated fields of one OTLP signal: request -> resources -> scopes -> items."""
    resources: str
    scopes: str
    items: str


TRACES = Layout("resource_spans", "scope_spans", "spans")
LOGS = Layout("resource_logs", "scope_logs", "log_records")


@dataclass
class Queued(Generic[R]):
    """A request waiting in the sender's queue: ``items`` spans or records, ``size`` bytes;
    ``held``: the traces it holds in the spool until it is settled (``base.component.Held``)."""
    request: R
    items: int
    size: int
    held: tuple[Held, ...] = ()


def take(queue: collections.deque[Queued[R]], max_items: int,
         max_bytes: int) -> list[Queued[R]]:
    """Pop the next batch from ``queue`` (not empty): the first request, then the following
    ones while the batch stays within ``max_items`` and ``max_bytes``. The first is taken
    whatever its size (a trace is never split by count; by bytes, ``batches`` splits it)."""
    first = queue.popleft()
    out, n, size = [first], first.items, first.size
    while queue and n + queue[0].items <= max_items and size + queue[0].size <= max_bytes:
        q = queue.popleft()
        out.append(q)
        n += q.items
        size += q.size
    return out


def batches(taken: list[Queued[R]], layout: Layout, max_bytes: int,
            new_request: Callable[[], R]) -> list[tuple[R, int]]:
    """The export requests for what ``take`` returned, each with its item count: one merged
    request, or the pieces of one request larger than ``max_bytes``."""
    if len(taken) == 1:  # sent as queued (the sender owns it), or in pieces
        q = taken[0]
        return ([(q.request, q.items)] if q.size <= max_bytes
                else split(q.request, layout, max_bytes, new_request))
    batch = new_request()
    for q in taken:
        batch.MergeFrom(q.request)  # concatenates the resource entries
    return [(batch, sum(q.items for q in taken))]


def _prefix(field_number: int) -> int:
    """Bytes of a length-delimited field's tag (wire type 2)."""
    return _varint_size(field_number << 3 | 2)


def _varint_size(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)


def _entry_size(size: int, tag: int) -> int:
    """Bytes of a message of ``size`` bytes as an entry of a repeated field."""
    return tag + _varint_size(size) + size


def split(request: Any, layout: Layout, max_bytes: int,
          new_request: Callable[[], Any]) -> list[tuple[Any, int]]:
    """``request`` in pieces of at most ``max_bytes`` (but one item too large alone), each
    with its item count; items in order, each under its own resource and scope entries.
    Resource and scope entries without items carry nothing to deliver and are left out."""
    rs_field = request.DESCRIPTOR.fields_by_name[layout.resources]
    ss_field = rs_field.message_type.fields_by_name[layout.scopes]
    item_tag = _prefix(ss_field.message_type.fields_by_name[layout.items].number)
    pieces: list[tuple[Any, int]] = []
    piece, size, n = new_request(), 0, 0
    for rs in getattr(request, layout.resources):
        rs_head = header(rs, layout.scopes)
        rs_cost = _prefix(rs_field.number) + _MAX_LENGTH_PREFIX + rs_head.ByteSize()
        rs_open: Any = None  # rs's entry in the current piece, once it has an item
        for ss in getattr(rs, layout.scopes):
            ss_head = header(ss, layout.items)
            ss_cost = _prefix(ss_field.number) + _MAX_LENGTH_PREFIX + ss_head.ByteSize()
            ss_open: Any = None
            for item in getattr(ss, layout.items):
                cost = _entry_size(item.ByteSize(), item_tag)
                if n and size + cost + (ss_open is None) * ss_cost \
                        + (rs_open is None) * rs_cost > max_bytes:
                    pieces.append((piece, n))  # full: the item opens the next piece
                    piece, size, n, rs_open, ss_open = new_request(), 0, 0, None, None
                if rs_open is None:
                    rs_open = getattr(piece, layout.resources).add()
                    rs_open.CopyFrom(rs_head)
                    size += rs_cost
                if ss_open is None:
                    ss_open = getattr(rs_open, layout.scopes).add()
                    ss_open.CopyFrom(ss_head)
                    size += ss_cost
                getattr(ss_open, layout.items).append(item)
                size += cost
                n += 1
    if n:
        pieces.append((piece, n))
    return pieces
