"""Per-partition low watermark of finished records: what a Kafka worker may commit.

Promises (pure, no I/O, single-threaded - the consumer calls it on its event loop):
- the commit position of a partition is the lowest offset taken and not yet done, or one past
  the highest taken offset when nothing is pending; committing it never skips a record whose
  traces are not stored, so a crash replays and never loses;
- ``done`` for a ticket of a revoked (or revoked and re-assigned) partition is ignored: an
  old assignment's late completion cannot mark a new assignment's record as finished.

Records are taken in offset order per partition, so pending offsets form a queue and
advancing the watermark is amortised O(1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

P = TypeVar("P")  # partition handle, e.g. aiokafka TopicPartition or an int


@dataclass
class _Partition:
    epoch: int
    pending: deque[int] = field(default_factory=deque)  # taken, in offset order
    done: set[int] = field(default_factory=set)  # finished, still behind the watermark
    next_offset: int | None = None  # one past the highest offset taken
    committed: int | None = None  # last position handed out by ``committable``

    def position(self) -> int | None:
        while self.pending and self.pending[0] in self.done:
            self.done.discard(self.pending.popleft())
        if self.pending:
            return self.pending[0]
        return self.next_offset


@dataclass(frozen=True)
class Ticket(Generic[P]):
    """One taken record; hand it back to ``OffsetTracker.done``."""

    partition: P
    offset: int
    epoch: int


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

    def take(self, partition: P, offset: int) -> Ticket[P]:
        st = self._parts.get(partition)
        if st is None:
            self.assign(partition)
            st = self._parts[partition]
        if st.next_offset is not None and offset < st.next_offset:
            raise ValueError(f"offset {offset} taken out of order on {partition!r}")
        st.pending.append(offset)
        st.next_offset = offset + 1
        self._inflight += 1
        return Ticket(partition, offset, st.epoch)

    def done(self, ticket: Ticket[P]) -> bool:
        """Mark a record finished. False (ignored) if its assignment is gone or it was done."""
        st = self._parts.get(ticket.partition)
        if st is None or st.epoch != ticket.epoch or ticket.offset in st.done:
            return False
        if not st.pending or ticket.offset < st.pending[0]:
            return False
        st.done.add(ticket.offset)
        self._inflight -= 1
        return True

    def position(self, partition: P) -> int | None:
        """Offset to commit for the partition (None if nothing was ever taken)."""
        st = self._parts.get(partition)
        return st.position() if st else None

    def committable(self) -> dict[P, int]:
        """Positions that moved since the last call (marks them as handed out)."""
        out: dict[P, int] = {}
        for p, st in self._parts.items():
            pos = st.position()
            if pos is not None and pos != st.committed:
                out[p] = pos
                st.committed = pos
        return out

    def uncommit(self, partitions: Iterable[P]) -> None:
        """A commit of these positions failed: ``committable`` returns them again."""
        for p in partitions:
            st = self._parts.get(p)
            if st is not None:
                st.committed = None

    def epoch(self, partition: P) -> int | None:
        st = self._parts.get(partition)
        return st.epoch if st else None

    def revoke(self, partition: P) -> int | None:
        """Stop tracking a partition; returns its final commit position (None if none)."""
        st = self._parts.get(partition)
        pos = st.position() if st else None
        self._drop(partition)
        return pos

    def _drop(self, partition: P) -> None:
        st = self._parts.pop(partition, None)
        if st is not None:
            self._inflight -= len(st.pending) - len(st.done)

    def inflight(self, partition: P | None = None) -> int:
        """Records taken and not done (of one partition, or all)."""
        if partition is None:
            return self._inflight
        st = self._parts.get(partition)
        return len(st.pending) - len(st.done) if st else 0

    def partitions(self) -> list[P]:
        return list(self._parts)
