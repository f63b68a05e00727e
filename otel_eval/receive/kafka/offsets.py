"""Per-partition low watermark of finished records: what a Kafka worker may commit.

Promises (pure, no I/O, single-threaded - the consumer calls it on its event loop):
- the commit position of a partition is the lowest offset taken and not yet done, or one past
  the highest taken offset when nothing is pending; committing it never skips a record whose
  traces are not stored, so a crash replays and never loses;
- ``done`` for a ticket of a revoked (or revoked and re-assigned) partition is ignored: an
  old assignment's late completion cannot mark a new assignment's record as finished;
- **replays are whole traces**: with the position goes commit metadata naming the records
  past it that are already done (``encode_done``). A record is done only once every trace it
  carries is stored, so after a restart (``restore``) skipping exactly those records replays
  every unstored trace from its first record and no stored trace at all. Replaying from the
  bare watermark instead would hand the engine the tail of a stored trace (its head lies
  behind the watermark), which an evaluator would store as a new, partial trace.

- ``TraceGate`` finishes the records of one trace together: the engine reports stored records
  one callback at a time, so without it a commit could fall between two records of one
  stored trace and leave the first behind the position and the second to be replayed.

Records are taken in offset order per partition, so pending offsets form a queue and
advancing the watermark is amortised O(1). What a partition holds follows its records in
flight, not how far it was read past its position: a run held open (up to
``assembly.max_trace_duration_s``) while the partition is read on held one entry per record
finished behind it (~70 bytes each, ~70 MB per million); every offset read past the
position and not in flight is done.
"""

from __future__ import annotations

import base64
import zlib
from collections import Counter, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from otel_eval.base.configcheck import ascii_int

P = TypeVar("P")  # partition handle, e.g. aiokafka TopicPartition or an int


# Entries ``_Partition.pending`` may hold for records already done besides twice the records
# in flight, before it is rebuilt without them.
_SLACK = 1024


@dataclass
class _Partition:
    epoch: int
    # taken, in offset order; done ones are let go once at the front, or when they are most
    # of it (a run held open while the partition is read on: never one entry per record)
    pending: deque[int] = field(default_factory=deque)
    open: set[int] = field(default_factory=set)  # taken and not done
    next_offset: int | None = None  # one past the highest offset taken
    committed: tuple[int, str] | None = None  # last (position, metadata) handed out
    skip: set[int] = field(default_factory=set)  # done before a restart (``restore``)

    def position(self) -> int | None:
        while self.pending and self.pending[0] not in self.open:
            self.pending.popleft()
        if self.pending:
            return self.pending[0]
        return self.next_offset

    def finished(self, offset: int) -> None:
        self.open.discard(offset)
        if len(self.pending) > 2 * len(self.open) + _SLACK:
            self.pending = deque(o for o in self.pending if o in self.open)


@dataclass(frozen=True)
class Ticket(Generic[P]):
    """One taken record; hand it back to ``OffsetTracker.done``."""

    partition: P
    offset: int
    epoch: int


# Brokers reject commit metadata over ``offset.metadata.max.bytes`` (default 4096).
MAX_METADATA_CHARS = 4000
_TAG = "oe1"


# The most offsets past the position commit metadata names (a bitmap of 8 KiB): what a
# restart reads back is bounded by it, whatever the metadata (anyone who can commit for the
# group can write it, and 4000 characters of zlib inflate ~1000-fold: ~24M offsets).
MAX_DONE_RANGE = 1 << 16


def encode_done(position: int, end: int, done: Collection[int],
                limit: int = MAX_METADATA_CHARS, *, through: int | None = None,
                missing: Collection[int] = ()) -> str:
    """Commit metadata: which offsets in [position, end) are done, as a zlib'd bitmap: those
    in ``done``, and every offset in [position, ``through``) not in ``missing``.
    Over ``limit`` characters or ``MAX_DONE_RANGE`` offsets the range is shortened: done
    records past it are replayed again (their traces may then be re-evaluated from a tail;
    only when very many records are in flight)."""
    end = min(end, position + MAX_DONE_RANGE)
    while end > position:
        n = end - position
        bits = bytearray((n + 7) // 8)
        upto = min(max(through or position, position), end) - position  # all done below
        bits[:upto >> 3] = b"\xff" * (upto >> 3)
        for i in range(upto & ~7, upto):
            bits[i >> 3] |= 1 << (i & 7)
        for o in missing:
            if position <= o < end:
                bits[(o - position) >> 3] &= ~(1 << ((o - position) & 7)) & 0xFF
        for o in done:
            if position <= o < end:
                bits[(o - position) >> 3] |= 1 << ((o - position) & 7)
        packed = base64.b64encode(zlib.compress(bytes(bits), 9)).decode()
        meta = f"{_TAG}:{end - position}:{packed}"
        if len(meta) <= limit:
            return meta
        end = position + (end - position) // 2
    return ""


def decode_done(position: int, metadata: str) -> set[int] | None:
    """Offsets ``encode_done`` marked done; empty for foreign or malformed metadata. None
    for metadata past what ``encode_done`` writes (longer than ``MAX_METADATA_CHARS``, over
    ``MAX_DONE_RANGE`` offsets, or a bitmap inflating past its stated length): not read
    further (never inflated past the bound), to be treated as absent."""
    tag, _, rest = metadata.partition(":")
    length, _, packed = rest.partition(":")
    bits_used = ascii_int(length, 12)
    if tag != _TAG or bits_used is None:
        return set()
    if bits_used > MAX_DONE_RANGE or len(metadata) > MAX_METADATA_CHARS:
        return None
    size = (bits_used + 7) // 8
    try:
        bits = zlib.decompressobj().decompress(base64.b64decode(packed, validate=True),
                                               size + 1)
    except (ValueError, zlib.error):
        return set()
    if len(bits) > size:
        return None
    return {position + i for i in range(min(bits_used, len(bits) * 8))
            if bits[i >> 3] >> (i & 7) & 1}


class OffsetTracker(Generic[P]):
    def __init__(self) -> None:
        self._parts: dict[P, _Partition] = {}
        self._epoch = 0
        self._inflight = 0

    def assign(self, partition: P) -> None:
        """Start (or restart) tracking a partition; tickets of earlier epochs go stale."""
        self._drop(partition)
        self._epoch += 1
        self._parts[partition] = _Partition(self._epoch)

    def restore(self, partition: P, position: int, metadata: str) -> int | None:
        """(Re)assign a partition whose committed position and metadata were just fetched:
        records marked done there will be reported by ``replayed``. Returns how many; None
        when the metadata is past the bounds (``decode_done``): read as absent, nothing
        skipped (the replay starts at the position)."""
        self.assign(partition)
        skip = decode_done(position, metadata)
        if skip is None:
            return None
        self._parts[partition].skip = skip
        return len(skip)

    def replayed(self, ticket: Ticket[P]) -> bool:
        """True if the ticket's record was done before a restart: finish it, do not resubmit."""
        st = self._parts.get(ticket.partition)
        if st is None or st.epoch != ticket.epoch or ticket.offset not in st.skip:
            return False
        st.skip.discard(ticket.offset)
        return True

    def take(self, partition: P, offset: int) -> Ticket[P]:
        st = self._parts.get(partition)
        if st is None:
            self.assign(partition)
            st = self._parts[partition]
        if st.next_offset is not None and offset < st.next_offset:
            raise ValueError(f"offset {offset} taken out of order on {partition!r}")
        st.pending.append(offset)
        st.open.add(offset)
        st.next_offset = offset + 1
        self._inflight += 1
        return Ticket(partition, offset, st.epoch)

    def done(self, ticket: Ticket[P]) -> bool:
        """Mark a record finished. False (ignored) if its assignment is gone or it was done."""
        st = self._parts.get(ticket.partition)
        if st is None or st.epoch != ticket.epoch or ticket.offset not in st.open:
            return False
        st.finished(ticket.offset)
        self._inflight -= 1
        return True

    def position(self, partition: P) -> int | None:
        """Offset to commit for the partition (None if nothing was ever taken)."""
        st = self._parts.get(partition)
        return st.position() if st else None

    def ahead(self, partition: P) -> int:
        """How many offsets past its position the partition was read (the offsets it holds
        in memory, pending or done)."""
        st = self._parts.get(partition)
        pos = st.position() if st else None
        return 0 if st is None or pos is None or st.next_offset is None \
            else st.next_offset - pos

    def committable(self) -> dict[P, tuple[int, str]]:
        """(position, metadata) of partitions that changed since the last call (marks them
        as handed out); the metadata lists the done records past the position."""
        out: dict[P, tuple[int, str]] = {}
        for p, st in self._parts.items():
            entry = self._entry(st)
            if entry is not None and entry != st.committed:
                out[p] = entry
                st.committed = entry
        return out

    @staticmethod
    def _entry(st: _Partition) -> tuple[int, str] | None:
        pos = st.position()
        if pos is None:
            return None
        # Every offset read past the position and not in flight is done (or was never a
        # record: a compacted or skipped offset, never read again). Records restored as done
        # and not yet re-read stay done: a second crash during the replay must not lose that.
        taken = st.next_offset or pos
        end = max(taken, max(st.skip) + 1 if st.skip else pos)
        if end == pos or (taken == pos + len(st.open) and not st.skip):
            return pos, ""
        return pos, encode_done(pos, end, st.skip, through=taken, missing=st.open)

    def uncommit(self, partitions: Iterable[P]) -> None:
        """A commit of these positions failed: ``committable`` returns them again."""
        for p in partitions:
            st = self._parts.get(p)
            if st is not None:
                st.committed = None

    def epoch(self, partition: P) -> int | None:
        st = self._parts.get(partition)
        return st.epoch if st else None

    def revoke(self, partition: P) -> tuple[int, str] | None:
        """Stop tracking a partition; returns its final (position, metadata), None if none."""
        st = self._parts.get(partition)
        entry = self._entry(st) if st else None
        self._drop(partition)
        return entry

    def _drop(self, partition: P) -> None:
        st = self._parts.pop(partition, None)
        if st is not None:
            self._inflight -= len(st.open)

    def inflight(self, partition: P | None = None) -> int:
        """Records taken and not done (of one partition, or all)."""
        if partition is None:
            return self._inflight
        st = self._parts.get(partition)
        return len(st.open) if st else 0

    def partitions(self) -> list[P]:
        return list(self._parts)


class TraceGate(Generic[P]):
    """Holds a stored record back until every submitted record of its traces (same partition
    and assignment) is stored too, then releases them in one step.

    ``submitted(ticket, trace_ids)`` when the engine took a record; ``stored(ticket,
    trace_ids)`` when it reported the record stored: returns the tickets that are now finished
    (hand them to ``OffsetTracker.done``). A span arriving after its trace was stored opens
    the trace again, and only the records from then on wait for each other.
    """

    def __init__(self) -> None:
        self._open: dict[tuple[P, int, str], int] = {}  # records submitted, not yet stored
        self._held: dict[tuple[P, int, str], list[tuple[Ticket[P], frozenset[str]]]] = {}

    def submitted(self, ticket: Ticket[P], trace_ids: frozenset[str]) -> None:
        for t in trace_ids:
            key = (ticket.partition, ticket.epoch, t)
            self._open[key] = self._open.get(key, 0) + 1

    def stored(self, ticket: Ticket[P], trace_ids: frozenset[str]) -> list[Ticket[P]]:
        p, e = ticket.partition, ticket.epoch
        closed = []
        for t in trace_ids:
            key = (p, e, t)
            n = self._open.get(key, 0) - 1
            if n > 0:
                self._open[key] = n
            else:
                self._open.pop(key, None)
                closed.append(key)
        out: list[Ticket[P]] = []
        self._hold_or_release(ticket, trace_ids, out)
        for key in closed:
            for tk, ids in self._held.pop(key, []):
                self._hold_or_release(tk, ids, out)
        return out

    def _hold_or_release(self, ticket: Ticket[P], trace_ids: frozenset[str],
                         out: list[Ticket[P]]) -> None:
        p, e = ticket.partition, ticket.epoch
        still = next((k for k in ((p, e, t) for t in trace_ids) if k in self._open), None)
        if still is None:
            out.append(ticket)
        else:
            self._held.setdefault(still, []).append((ticket, trace_ids))

    def waiting(self, partitions: Collection[P]) -> Counter[str]:
        """Records of ``partitions`` submitted and not yet stored, by trace id (a record of
        several traces counted under each)."""
        out: Counter[str] = Counter()
        for (p, _e, t), n in self._open.items():
            if p in partitions:
                out[t] += n
        return out

    def open_traces(self, partition: P) -> set[str]:
        """Trace ids with records of ``partition`` submitted and not yet stored."""
        return {k[2] for k in self._open if k[0] == partition}

    def drop(self, partition: P) -> None:
        """Forget a revoked partition (its late callbacks then finish nothing)."""
        for d in (self._open, self._held):
            for key in [k for k in d if k[0] == partition]:
                del d[key]
