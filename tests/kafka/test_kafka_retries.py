"""``Retries``: which refused records hold which later ones (pure; the consumer's rule, tested
on a real broker in test_kafka_refused_partition.py)."""

from __future__ import annotations

from otel_eval.receive.kafka.retries import Retries


class Engine:
    """Refuses what ``refuse`` maps to a reason; records what it took."""

    def __init__(self) -> None:
        self.refuse: dict[str, str] = {}
        self.took: list[str] = []
        self.counted: list[str] = []  # the refusals counted: a record's first only

    def submit(self, record: str, again: bool = False) -> str:
        trace = record.split(":")[0]
        if not again and self.refuse.get(trace):
            self.counted.append(record)
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
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True)
    assert len(r) == 2  # still past its share: a:2 was not offered before a:1
    del e.refuse["a"]
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True)
    assert e.took == ["b:1", "c:1", "a:1", "a:2"] and len(r) == 0 and 0 not in r


def test_any_other_refusal_stalls_its_partition_only() -> None:
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "store_unavailable"
    for partition, record in ((0, "a:1"), (0, "b:1"), (1, "c:1")):
        offer(r, e, partition, record)
    assert e.took == ["c:1"] and r.stalled == {0} and len(r) == 2
    del e.refuse["a"]
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True)
    assert e.took == ["c:1", "a:1", "b:1"] and not r.stalled and len(r) == 0


def test_a_revoked_partitions_records_are_dropped() -> None:
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "pending_spans"
    offer(r, e, 3, "a:1")
    r.drop([3])
    assert len(r) == 0 and not r.stalled and 3 not in r


def test_a_record_refused_on_every_retry_pass_is_counted_once() -> None:
    # kafka_throttled_total counts records: a retry pass every throttle_retry_s counted each
    # waiting record again, so the counter grew with the time it waited, not the records
    r: Retries[int, str] = Retries()
    e = Engine()
    e.refuse["a"] = "pending_spans"
    for record in ("a:1", "b:1"):
        offer(r, e, 0, record)
    assert e.counted == ["a:1"] and r.stalled == {0}  # b:1 waits, not offered
    e.refuse = {"a": "service_share", "b": "service_share"}
    for _ in range(3):
        r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True)
    # b:1 was refused first on the first retry pass: counted then, once
    assert e.counted == ["a:1", "b:1"] and len(r) == 2
    e.refuse = {}
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True)
    assert e.took == ["a:1", "b:1"] and len(r) == 0


def test_a_record_not_decoded_yet_is_prepared_in_order_and_waits_while_it_cannot_be() -> None:
    """Records offered as their bytes (``trace_ids`` None) are decoded (``prepare``) only
    when nothing ahead holds them: one the decoding budget cannot take stalls its partition,
    those behind it stay undecoded, and once decoded a record still waits behind an earlier
    one of its traces."""
    r: Retries[int, str] = Retries()
    e = Engine()
    full = {"on": True}
    prepared: list[str] = []

    def prepare(record: str) -> frozenset[str] | str:
        if full["on"] and record == "b:1":
            return "decoding"
        prepared.append(record)
        return frozenset({record.split(":")[0]})

    e.refuse["a"] = "service_share"
    for record in ("a:1", "b:1", "a:2", "c:1"):
        r.offer(0, None, record, e.submit, prepare)
    assert prepared == ["a:1"] and r.stalled == {0} and e.took == [] and len(r) == 4
    full["on"] = False
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True, prepare)
    # a:2, decoded now, waits behind a:1 (its trace still past its share)
    assert prepared == ["a:1", "b:1", "a:2", "c:1"]  # each decoded once
    assert e.took == ["b:1", "c:1"] and len(r) == 2 and not r.stalled
    del e.refuse["a"]
    r.retry(lambda _p, rec, again: e.submit(rec, again), lambda _p, _rec: True, prepare)
    assert e.took == ["b:1", "c:1", "a:1", "a:2"] and len(r) == 0
