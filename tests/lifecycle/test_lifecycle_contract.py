"""Every long-running part implements the one lifecycle (``start()``, ``shutdown(deadline)``):
each is started and stopped here for real; ``Lifecycle`` starts in order and stops in reverse
with the remaining deadline. (The Kafka parts: tests/kafka/test_kafka_lifecycle.py.)"""

from __future__ import annotations

import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.admin import AdminApi, AdminServer
from otel_eval.app.config import Config
from otel_eval.app.lifecycle import Component, ForcedExit, Lifecycle, Step
from otel_eval.assemble.config import AssemblyConfig
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.aio import LoopThread
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.stage import JudgeStage
from otel_eval.evaluate.stage import InProcess
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.events import EvaluationEvents
from otel_eval.outputs.forward import Forwarder
from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.job import IssuesJob
from otel_eval.receive.config import ReceiverConfig
from otel_eval.receive.grpc import GrpcReceiver
from otel_eval.receive.http import HttpReceiver
from otel_eval.receive.ingest import Ingest
from otel_eval.store import Store
from otel_eval.store.base import Window
from otel_eval.store.query import Page
from otel_eval.telemetry.metrics import Metrics

Make = Callable[[], Component]


@pytest.fixture
def parts(tmp_path: Path) -> Iterator[dict[str, Make]]:
    registry = CollectorRegistry()
    metrics = Metrics(registry)
    store = Store(str(tmp_path / "s.db"))
    engine = Engine(InProcess(Evaluator(Config()), store),
                    StoreHealth(store.location, clock=time.monotonic), metrics,
                    assembly=AssemblyConfig())
    ingest = Ingest(engine, metrics)
    loop = LoopThread()
    loop.start()
    export = ExportConfig(events_endpoint="127.0.0.1:9", forward_endpoint="127.0.0.1:9")
    api = AdminApi(registry=registry, query=lambda q: Page(), get=lambda t: None,
                   feedback=lambda t, o: None, healthy=lambda: True, ready=lambda: True)
    yield {
        "grpc receiver": lambda: GrpcReceiver(ReceiverConfig(grpc_endpoint="127.0.0.1:0"),
                                              ingest),
        "http receiver": lambda: HttpReceiver(ReceiverConfig(http_endpoint="127.0.0.1:0"),
                                              ingest),
        "admin": lambda: AdminServer("127.0.0.1:0", api),
        "engine": lambda: Engine(InProcess(Evaluator(Config()), store),
                                 StoreHealth(store.location, clock=time.monotonic), metrics,
                                 assembly=AssemblyConfig()),
        "judge stage": lambda: JudgeStage(
            JudgeConfig(model="openai/judge", api_base="http://127.0.0.1:9/v1",
                        max_cost_usd_per_hour=0.0), loop, store,
            Metrics(CollectorRegistry())),
        "issues job": lambda: IssuesJob(IssuesConfig(interval_s=3600.0),
                                        sqlite3.connect(":memory:", check_same_thread=False),
                                        lambda since_ns: Window([], False), CollectorRegistry()),
        "events sender": lambda: EvaluationEvents(export, metrics),
        "forward sender": lambda: Forwarder(export, metrics),
        "event loop": LoopThread,
    }
    loop.stop()
    store.close()


def _port(part: object) -> int | None:
    return getattr(part, "port", None) or None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.mark.parametrize("name", ["grpc receiver", "http receiver", "admin", "engine",
                                  "judge stage", "issues job", "events sender",
                                  "forward sender", "event loop"])
def test_each_part_starts_and_shuts_down(parts: dict[str, Make], name: str) -> None:
    part = parts[name]()
    assert isinstance(part, Component)
    part.start()
    port = _port(part)
    if port is not None:
        assert _listening(port), f"{name} does not listen after start()"
    part.shutdown(5.0)
    if port is not None:
        assert not _listening(port), f"{name} still listens after shutdown()"


def test_lifecycle_starts_in_order_and_stops_in_reverse_with_the_remaining_deadline() -> None:
    clock = ManualClock(0.0)
    events: list[tuple[str, str, float]] = []

    def part(name: str, cost_s: float = 0.0, fail: bool = False) -> Step:
        def stop(deadline_s: float) -> None:
            events.append(("stop", name, deadline_s))
            clock.now += cost_s  # this part used some of the deadline
            if fail:
                raise RuntimeError(f"{name} broke")
        return Step(start=lambda: events.append(("start", name, 0.0)), shutdown=stop)

    lc = Lifecycle(clock)
    lc.add("store", part("store"))
    lc.add("engine", part("engine", cost_s=7.0, fail=True))
    lc.add("tests drive it", part("manual"), start=False)
    lc.add("receiver", part("receiver", cost_s=2.0))
    lc.start()
    assert [e[1] for e in events] == ["store", "engine", "receiver"]
    events.clear()
    assert lc.shutdown(10.0) == ["engine"]  # a part that fails does not stop the rest
    assert events == [("stop", "receiver", 10.0), ("stop", "manual", 8.0),
                      ("stop", "engine", 8.0), ("stop", "store", 1.0)]
    assert lc.shutdown(10.0) == [] and len(events) == 4  # stops once


def test_a_part_failing_to_start_stops_those_started() -> None:
    stopped: list[str] = []

    def broken() -> None:
        raise OSError("address in use")

    lc = Lifecycle()
    lc.add("a", Step(shutdown=lambda _d: stopped.append("a")))
    lc.add("b", Step(shutdown=lambda _d: stopped.append("b")))
    lc.add("c", Step(start=broken, shutdown=lambda _d: stopped.append("c")))
    with pytest.raises(OSError):
        lc.start()
    assert stopped == ["b", "a"]


def test_a_second_signal_during_startup_exits_at_once() -> None:
    """``run_until_signal``'s second signal raises SystemExit wherever the main thread is,
    startup included: it exits without draining (as kill -9: nothing acknowledged is lost),
    not after a full stop of what had started (10 s of deadline)."""
    stopped: list[str] = []

    def second_signal() -> None:
        raise ForcedExit(1)

    lc = Lifecycle()
    lc.add("a", Step(shutdown=lambda _d: stopped.append("a")))
    lc.add("b", Step(start=second_signal, shutdown=lambda _d: stopped.append("b")))
    with pytest.raises(SystemExit):
        lc.start()
    assert stopped == []
