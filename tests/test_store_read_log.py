"""A store that cannot answer made assembly write a line (with a traceback) per trace it
read for: each replayed trace already evaluated (``Finishing``: the evaluation to send the
delivering sinks again) and each trace that arrived as log records only (``Engine``: late or
``no_spans``). Every read is still counted or answered as before; the log says one, then,
after ``STORE_READ_LOG_INTERVAL_S``, how many it left out meanwhile, with no traceback (the
store's failure, not ours)."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support.clock import ManualClock

from otel_eval.app.config import Config
from otel_eval.assemble.engine import Engine
from otel_eval.assemble.finishing import STORE_READ_LOG_INTERVAL_S
from otel_eval.assemble.store_health import StoreHealth
from otel_eval.base.component import Held
from otel_eval.base.model import LogEvent, Span, Trace
from otel_eval.decode import otlp_logs
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import InProcess
from otel_eval.receive.ingest import Ingest
from otel_eval.store import Store
from otel_eval.telemetry.metrics import Metrics

IDLE = 60.0


def _unreadable(_trace_id: str) -> tuple[dict[str, Any], int] | None:
    raise OSError("disk I/O error")


def _engine(tmp: Path, clock: ManualClock) -> tuple[Engine, Store]:
    cfg = Config()
    cfg = replace(cfg, assembly=replace(cfg.assembly, idle_timeout_s=IDLE))
    store = Store(str(tmp / "store.db"))
    engine = Engine(InProcess(Evaluator(cfg), store), StoreHealth(store.location, clock=clock),
                    Metrics(CollectorRegistry()), assembly=cfg.assembly, clock=clock,
                    stored=_unreadable)
    return engine, store


def _lines(caplog: pytest.LogCaptureFixture, what: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if what in r.getMessage()]


def test_replays_whose_evaluation_cannot_be_read_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    engine, store = _engine(tmp_path, clock)
    try:
        with caplog.at_level(logging.WARNING):
            for n in range(21):
                if n == 20:
                    clock.advance(STORE_READ_LOG_INTERVAL_S)
                t = f"{n + 1:032x}"
                trace = Trace(t, [Span(t, "a0", None, "agent", 0, 100)], "complete")
                engine.finishing._again(trace, Held(t, 0, lambda _: None), [])
    finally:
        store.close()
    got = _lines(caplog, "reading the stored evaluation")
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[0].getMessage().endswith("passing it on as it came (OSError)")
    assert got[1].getMessage().endswith("(OSError) (19 more failed store reads not logged "
                                        "since the last)")
    assert all(r.exc_info is None for r in got)


def test_log_records_whose_run_cannot_be_read_are_one_line_then_a_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    engine, store = _engine(tmp_path, clock)
    ingest = Ingest(engine, engine.metrics)
    try:
        with caplog.at_level(logging.WARNING):
            for batch in (range(20), range(20, 21)):  # each trace dropped at its batch's tick
                for n in batch:
                    t = f"{n + 1:032x}"
                    rec = LogEvent(t, "1" * 16, "gen_ai.choice", 1_000, {"gen_ai.system": "o"},
                                   {"index": 0, "message": {"role": "assistant"}})
                    body = otlp_logs.encode_logs([rec]).SerializeToString()
                    assert ingest.handle_logs_bytes(body, "grpc").outcome == "ok"
                clock.advance(max(IDLE + 1, STORE_READ_LOG_INTERVAL_S))
                engine.tick()
    finally:
        engine.shutdown(1.0)
        store.close()
    got = _lines(caplog, "reading the stored run")
    assert len(got) == 2, [r.getMessage() for r in got]
    assert got[1].getMessage().endswith("(OSError) (19 more failed store reads not logged "
                                        "since the last)")
    assert all(r.exc_info is None for r in got)
