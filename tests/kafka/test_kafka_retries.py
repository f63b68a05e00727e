"""``Retries``: which refused records hold which later ones (pure; the consumer's rule, tested
on a real broker in test_kafka_refused_partition.py)."""

from __future__ import annotations

from otel_eval.receive.kafka.retries import Retries


class Engine:
    """Refuses what ``refuse`` maps to a reason; records what it took."""

    def __init__(self) -> None:
        self.refuse: dict[str, str] = {}
        self.took: list[str] = []

    def submit(self, record: str) -> str:
        trace = record.split(":")[0]
        if reason := self.refuse.get(trace, ""):
            return reason
        self.took.append(record)
        return ""


def offer(r: Retries[int, str], e: Engine, partition: int, record: str) -> None:
    r.offer(partition, frozenset({record.split(":")[0]}), record, e.submit)


def test_a_share_refusal_holds_only_its_own_traces_later_records() -> None:
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "service_share"
    for record in ("a:1", "b:1", "a:2", "c:1"):
        offer(r, e, 0, record)
    assert e.took == ["b:1", "c:1"] and len(r) == 2 and 0 in r and not r.stalled
    r.retry(lambda _p, rec: e.submit(rec), lambda _p, _rec: True)
    assert len(r) == 2  # still past its share: a:2 was not offered before a:1
    del e.refuse["a"]
    r.retry(lambda _p, rec: e.submit(rec), lambda _p, _rec: True)
    assert e.took == ["b:1", "c:1", "a:1", "a:2"] and len(r) == 0 and 0 not in r


def test_any_other_refusal_stalls_its_partition_only() -> None:
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "store_unavailable"
    for partition, record in ((0, "a:1"), (0, "b:1"), (1, "c:1")):
        offer(r, e, partition, record)
    assert e.took == ["c:1"] and r.stalled == {0} and len(r) == 2
    del e.refuse["a"]
    r.retry(lambda _p, rec: e.submit(rec), lambda _p, _rec: True)
    assert e.took == ["c:1", "a:1", "b:1"] and not r.stalled and len(r) == 0


def test_a_revoked_partitions_records_are_dropped() -> None:
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "pending_spans"
    offer(r, e, 3, "a:1")
    r.drop([3])
    assert len(r) == 0 and not r.stalled and 3 not in r
