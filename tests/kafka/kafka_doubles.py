"""Kafka test doubles: a recording engine, metrics that can be awaited, a topic handle, and
producers that write like the collector's exporter."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer
from kafka_traces import requests_for, trace_ids

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.base.kafka.stats import KafkaStats
from otel_eval.base.model import Span
from otel_eval.receive.kafka.publisher import KafkaPublisher


@dataclass
class Topic:
    name: str
    bootstrap: str
    partitions: int

    def config(self, **kw: object) -> KafkaConfig:
        # no logs topic unless a test asks for one (its own, co-partitioned)
        base: dict[str, object] = {"brokers": self.bootstrap, "topic": self.name,
                                   "logs_topic": "",
                                   "group_id": f"g-{self.name}", "commit_interval_s": 0.05,
                                   "throttle_retry_s": 0.05}
        base.update(kw)
        return KafkaConfig(**base)  # type: ignore[arg-type]


@dataclass
class _Admission:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    throttled: str | None = None


class FakeEngine:
    """Records every submit; holds ``on_stored`` until the test releases it (from a thread, as
    the real engine's worker thread would). ``throttle`` makes submit refuse everything.
    Create it inside the running event loop."""

    def __init__(self, changed: asyncio.Condition | None = None) -> None:
        """Engines sharing ``changed`` wake each other's ``until``."""
        self.spans: list[Span] = []
        self.calls = 0
        self.refusals = 0  # submits refused (``throttle``)
        self.held: list[tuple[set[str], Callable[[], None]]] = []
        self.throttle: str | None = None
        self.auto_release = False
        self._changed = changed if changed is not None else asyncio.Condition()
        self._loop = asyncio.get_running_loop()

    def submit(self, spans: list[Span], source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *,
               signal: str = "traces") -> _Admission:
        assert source == "kafka"
        if self.throttle:
            self.refusals += 1
            self._loop.create_task(self._notify())
            return _Admission(throttled=self.throttle)
        self.calls += 1
        self.spans.extend(spans)
        if on_stored is not None:
            if self.auto_release:
                self._in_thread([on_stored])
            else:
                self.held.append(({s.trace_id for s in spans}, on_stored))
        self._loop.create_task(self._notify())
        return _Admission(accepted=len(spans))

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def release(self, pred: Callable[[set[str]], bool] = lambda _ids: True) -> int:
        keep: list[tuple[set[str], Callable[[], None]]] = []
        go: list[tuple[set[str], Callable[[], None]]] = []
        for ids, cb in self.held:
            (go if pred(ids) else keep).append((ids, cb))
        self.held = keep
        self._in_thread([cb for _, cb in go])
        return len(go)

    @staticmethod
    def _in_thread(callbacks: list[Callable[[], None]]) -> None:
        t = threading.Thread(target=lambda: [cb() for cb in callbacks])
        t.start()
        t.join()

    async def until(self, cond: Callable[[FakeEngine], bool], timeout: float = 20.0) -> None:
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: cond(self)), timeout)


class WatchedStats(KafkaStats):
    """``KafkaStats`` whose changes can be awaited (no sleeping in tests)."""

    def __init__(self) -> None:
        super().__init__()
        self._event = asyncio.Event()

    def _touch(self) -> None:
        self._event.set()

    def record_poison(self, reason: str) -> None:
        super().record_poison(reason)
        self._touch()

    def lag(self, partition: int, records: int, topic: str = "spans") -> None:
        super().lag(partition, records, topic)
        self._touch()

    def committed(self, partition: int, offset: int, topic: str = "spans") -> None:
        super().committed(partition, offset, topic)
        self._touch()

    def throttled(self, reason: str) -> None:
        super().throttled(reason)
        self._touch()

    async def until(self, cond: Callable[[WatchedStats], bool], timeout: float = 20.0) -> None:
        async def wait() -> None:
            while not cond(self):
                self._event.clear()
                await self._event.wait()

        await asyncio.wait_for(wait(), timeout)


async def produce_traces(topic: Topic, n_traces: int, spans_per_trace: int = 3,
                         traces_per_request: int = 10) -> list[str]:
    """Write traces as the collector's exporter would (split per trace id, keyed, fnv1a)."""
    ids = trace_ids(n_traces)
    pub = KafkaPublisher(topic.config())
    await pub.start()
    try:
        for req in requests_for(ids, spans_per_trace, traces_per_request):
            await pub.publish(req.SerializeToString())
    finally:
        await pub.stop()
    return ids


async def produce_raw(topic: Topic, value: bytes, key: bytes, partition: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=topic.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic.name, value, key=key, partition=partition)
    finally:
        await producer.stop()
