"""The Kafka records the engine refused (throttled: nothing taken), waiting to be offered
again, per partition, in offset order (the consumer's; pure, single-threaded, on its loop).

Promises:
- a refused record is never skipped: it waits here until the engine takes it (or its
  partition is revoked: the new owner replays it), and the committed position stays at it;
- one refused for its traces' service's share (``service_share``) holds only the records of
  its own traces: a later record of its partition sharing a trace with a waiting record waits
  behind it (a trace's records keep their order; the collector's exporter,
  ``partition_traces_by_id``, keeps a trace on one partition); every other record is offered
  at once. A refused record held every later record of its topic (from any partition, any
  service), then of its partition, so one service past its share locked the others out and
  held the rest of its own open runs: its share freed only when they were cut as
  non-terminated, ``idle_timeout_s`` later;
- one refused for any other reason (the engine takes nothing now: the store, the spool,
  open traces, pending spans) stalls its partition: every later record of it waits, and
  ``stalled`` says the consumer should pause it;
- a record whose trace ids are not known yet (not decoded: ``None``) is prepared first, when
  nothing ahead of it holds it: ``prepare(record)`` decodes it and returns its trace ids, or
  why it cannot be now (the decoding budget is full: it waits and stalls its partition, as
  for an engine's refusal); a record behind a stalled partition is not decoded, so a record
  waits as its bytes until it can be offered;
- a record is refused once in the count (``kafka_throttled_total``: records, not attempts):
  ``submit(record, again)`` is told ``again`` when the engine refused this record before, so
  a retry pass (every ``throttle_retry_s``) does not count the records still refused again.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Generic, TypeVar

P = TypeVar("P")  # partition handle
R = TypeVar("R")  # the record as the consumer holds it (decoded, with its ticket)

# The refusal that names the record's traces: only they wait.
SHARE = "service_share"
_WAITS = "waits"


# A waiting record: its trace ids (None: not decoded yet), the record, and whether the engine
# refused it already.
_Entry = tuple[frozenset[str] | None, R, bool]
# ``prepare(record)``: its trace ids once decoded, or why it cannot be decoded now.
Prepare = Callable[[R], frozenset[str] | str]


def _known(record: object) -> frozenset[str] | str:
    raise AssertionError("a record offered without its trace ids needs ``prepare``")


class Retries(Generic[P, R]):
    """``offer(partition, trace_ids, record, submit)``: ``submit(record, again)`` returns why
    the engine refused it, "" when taken; ``again``: it refused this record before.
    ``trace_ids`` None: ``prepare(record)`` gives them once nothing ahead holds the record."""

    def __init__(self) -> None:
        self._queues: dict[P, deque[_Entry[R]]] = {}  # never empty
        self._traces: dict[P, set[str]] = {}  # the trace ids of the records waiting
        self.stalled: set[P] = set()

    def offer(self, partition: P, trace_ids: frozenset[str] | None, record: R,
              submit: Callable[[R, bool], str], prepare: Prepare[R] = _known) -> None:
        queue = self._queues.setdefault(partition, deque())
        self._offer(partition, (trace_ids, record, False), submit, prepare, queue)
        if not queue:
            del self._queues[partition]

    def _offer(self, partition: P, entry: _Entry[R], submit: Callable[[R, bool], str],
               prepare: Prepare[R], queue: deque[_Entry[R]]) -> None:
        trace_ids, record, again = entry
        refused = _WAITS if partition in self.stalled else ""
        if not refused and trace_ids is None:
            got = prepare(record)
            refused, trace_ids = (got, None) if isinstance(got, str) else ("", got)
        if not refused:
            waiting = self._traces.get(partition)
            assert trace_ids is not None
            if waiting is not None and not waiting.isdisjoint(trace_ids):
                refused = _WAITS
            else:
                refused = submit(record, again)
                again = again or bool(refused)  # the engine's refusal, counted once
        if refused:
            queue.append((trace_ids, record, again))
            self._traces.setdefault(partition, set()).update(trace_ids or ())
            if refused not in (_WAITS, SHARE):
                self.stalled.add(partition)

    def retry(self, submit: Callable[[P, R, bool], str],
              current: Callable[[P, R], bool], prepare: Prepare[R] = _known) -> None:
        """Offer every waiting record again, in offset order; ``current(partition, record)``
        False: its partition was revoked meanwhile (dropped: the new owner replays it)."""
        for partition, old in list(self._queues.items()):
            queue: deque[_Entry[R]] = deque()
            self._queues[partition] = queue
            self._traces[partition] = set()
            self.stalled.discard(partition)
            for entry in old:
                if current(partition, entry[1]):
                    self._offer(partition, entry, partial(submit, partition), prepare,
                                queue)
            if not queue:
                del self._queues[partition], self._traces[partition]

    def __contains__(self, partition: object) -> bool:
        return partition in self._queues

    def records(self) -> Iterator[R]:
        """The records waiting, on every partition."""
        for queue in self._queues.values():
            for _ids, record, _again in queue:
                yield record

    def __len__(self) -> int:
        """Records waiting, on every partition."""
        return sum(len(q) for q in self._queues.values())

    def drop(self, partitions: Iterable[P]) -> list[R]:
        """Forget revoked partitions' records (their new owner replays them); those records."""
        dropped: list[R] = []
        for p in partitions:
            dropped.extend(r for _ids, r, _again in self._queues.pop(p, ()))
            self._traces.pop(p, None)
            self.stalled.discard(p)
        return dropped
