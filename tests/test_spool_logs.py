"""The spool keeps OTLP log requests too: GenAI events carry the content of spans, so a crash
must not lose them while the spans survive. Time by hand; a "crash" as in test_spool.py.

The traces are real: the openai-v2-events conformance recordings (content only in log
records). The kill -9 of a real ``otel-eval serve`` is tests/load/test_kill9_logs.py.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from test_spool import Node, body, span

from otel_eval.assemble.spool import SCHEMA_VERSION, Spool, SpoolVersionError
from otel_eval.assemble.spool_rows import thinned
from otel_eval.base.model import LogEvent
from otel_eval.decode import otlp_json, otlp_logs
from otel_eval.receive.ingest import Ingest
from otel_eval.telemetry.metrics import Metrics

RECORDINGS = Path(__file__).resolve().parent / "conformance" / "recordings" / "openai-v2-events"
T1, T9 = "a" * 32, "9" * 32


def recording(scenario: str) -> list[tuple[str, bytes]]:
    """(signal, protobuf bytes) of each recorded request, in recorded order."""
    rec = json.loads((RECORDINGS / f"{scenario}.json").read_text("utf-8"))
    out = []
    for item in rec["requests"]:
        raw = json.dumps(item["body"]).encode()
        req: Any = (otlp_json.request_from_json(raw) if item["signal"] == "traces"
                    else otlp_logs.logs_request_from_json(raw))
        out.append((item["signal"], req.SerializeToString()))
    return out


def send(node: Node, requests: list[tuple[str, bytes]], signal: str | None = None) -> None:
    """Through the receivers' Ingest, as gRPC would hand them (protobuf as received)."""
    ingest = Ingest(node.engine, node.metrics)
    for sig, raw in requests:
        if signal is None or sig == signal:
            res = (ingest.handle_bytes(raw, "grpc") if sig == "traces"
                   else ingest.handle_logs_bytes(raw, "grpc"))
            assert res.outcome == "ok" and not res.rejected, res


def stored(node: Node) -> dict[str, Any]:
    [ev] = node.store.latest(10)
    return ev


def record(trace: str, sid: int, text: str) -> LogEvent:
    return LogEvent(trace, f"{sid:016x}", "gen_ai.choice", 5,
                    {"gen_ai.system": "openai"},
                    {"index": 0, "message": {"role": "assistant", "content": text}})


def logs_body(records: list[LogEvent]) -> bytes:
    return otlp_logs.encode_logs(records).SerializeToString()


def test_content_only_in_log_records_survives_a_crash(tmp_path: Path) -> None:
    a = Node(tmp_path)
    send(a, recording("clean"))
    assert a.spool.held()[0] == 2  # the trace request and the log request
    a.crash()  # acknowledged, never evaluated

    b = Node(tmp_path)
    assert b.replayed == (2, 4, 8)
    assert b.sample("otel_eval_spool_log_records_replayed_total") == 8
    assert b.release() == 1
    ev = stored(b)
    assert ev["output"] == "It is sunny in Paris."
    assert "unrecorded" not in ev  # tool arguments, results, LLM output: all from the logs
    [tool] = [s for s in ev["steps"] if s["kind"] == "tool"]
    assert tool["arguments"] == {"city": "Paris"}
    assert b.spool.held() == (0, 0)  # the log request left with the evaluation


def test_log_requests_sent_before_the_spans_replay_in_their_order(tmp_path: Path) -> None:
    # the recording's log requests first (its arrival order depends on the exporters' timing)
    requests = sorted(recording("loop"), key=lambda r: r[0] != "logs")
    signals = [s for s, _ in requests]
    assert signals[0] == "logs" and "traces" in signals
    a = Node(tmp_path)
    send(a, requests)
    a.crash()

    b = Node(tmp_path)
    assert b.replayed[0] == len(requests)
    b.release()
    ev = stored(b)
    assert "unrecorded" not in ev and ev["output"]
    assert b.spool.held() == (0, 0)


def test_log_requests_are_kept_as_received(tmp_path: Path) -> None:
    a = Node(tmp_path)
    [(_, raw)] = [r for r in recording("clean") if r[0] == "logs"]
    send(a, [("logs", raw)])
    rows = a.spool._db.execute("SELECT signal, body FROM spool_requests").fetchall()
    assert rows == [("logs", raw)]  # not re-encoded: a replay decodes what was received
    [(tid,)] = a.spool._db.execute("SELECT trace_id FROM spool_traces").fetchall()
    rec = json.loads((RECORDINGS / "clean.json").read_text("utf-8"))
    [logs] = [item["body"] for item in rec["requests"] if item["signal"] == "logs"]
    assert {r["traceId"] for rl in logs["resourceLogs"] for sl in rl["scopeLogs"]
            for r in sl["logRecords"]} == {tid}  # the records' trace, as recorded


def test_evaluation_deletes_log_only_rows(tmp_path: Path) -> None:
    a = Node(tmp_path)
    send(a, recording("clean"), "traces")
    a.release()  # evaluated: the trace request leaves
    assert a.spool.held() == (0, 0)
    a.send([span(T1, 1, None)])
    assert a.engine.submit([record(T1, 1, "hi")], signal="logs", request=logs_body(
        [record(T1, 1, "hi")])).accepted == 1
    assert a.spool.held()[0] == 2
    a.release()
    assert a.spool.held() == (0, 0)


def test_records_of_a_trace_no_span_joins_leave_when_assembly_drops_them(
        tmp_path: Path) -> None:
    a = Node(tmp_path)
    recs = [record(T9, 1, "orphan")]
    assert a.engine.submit(recs, request=logs_body(recs), signal="logs").accepted == 1
    assert a.spool.held()[0] == 1
    a.now += 10_000  # idle timeout: dropped as no_spans, nothing to evaluate
    a.engine.tick()
    assert a.spool.held() == (0, 0)
    assert a.sample("otel_eval_assembly_log_records_dropped_total", reason="no_spans") == 1


def test_spans_acknowledged_after_their_trace_s_records_were_dropped_stay_spooled(
        tmp_path: Path) -> None:
    """T opened by a log record alone is pushed out (``release_oldest``) as no_spans; its
    spool rows are deleted at the next tick. T's spans acknowledged before that tick opened
    a new T of the same revision, and that deletion (every row of T up to it) took theirs:
    a crash then lost them. The new T takes the next revision."""
    a = Node(tmp_path, max_open_traces=1, overflow_policy="release_oldest")
    recs = [record(T1, 1, "hi")]
    assert a.engine.submit(recs, request=logs_body(recs), signal="logs").accepted == 1
    assert a.send([span(T9, 1, None)]) is None  # pushes T1 out: dropped, no_spans
    assert a.send([span(T1, 1, None), span(T1, 2)]) is None  # T1's run, acknowledged
    a.engine.tick()  # nothing due: deletes the rows of the T1 dropped
    a.crash()
    b = Node(tmp_path)
    assert b.replayed is not None and b.replayed[1] == 3  # T9's span and T1's two


def test_log_requests_without_genai_events_of_spans_leave_no_row(tmp_path: Path) -> None:
    a = Node(tmp_path)
    req = otlp_logs.encode_logs([record(T1, 1, "x")])
    req.resource_logs[0].scope_logs[0].log_records[0].event_name = "app.started"
    res = Ingest(a.engine, a.metrics).handle_logs_bytes(req.SerializeToString(), "grpc")
    assert (res.outcome, res.accepted) == ("ok", 0)
    assert a.spool.held() == (0, 0)


def test_spool_full_throttles_log_requests(tmp_path: Path) -> None:
    first = [span(T1, i) for i in range(1, 40)]
    a = Node(tmp_path, max_bytes=len(body(first)) + 10)
    assert a.send(first) is None
    recs = [record(T1, 1, "late content")]
    assert a.engine.submit(recs, request=logs_body(recs),
                           signal="logs").throttled == "spool_full"
    assert a.engine.open_traces() == 1 and a.spool.held()[0] == 1  # nothing taken


def test_a_trace_reopened_by_records_replays_its_records_once(tmp_path: Path) -> None:
    a = Node(tmp_path)
    first = [record(T1, 2, "one")]
    a.send([span(T1, 1, None), span(T1, 2)])
    a.engine.submit(first, request=logs_body(first), signal="logs")
    a.release()
    assert a.spool.held() == (0, 0)
    late = [record(T1, 2, "two")]  # re-opens T1: its spans and first record are spooled again
    assert a.engine.submit(late, request=logs_body(late), signal="logs").accepted == 1
    a.crash()

    b = Node(tmp_path)
    assert b.replayed[1:] == (2, 2)  # both spans; each record once, not the late one twice
    b.release()
    assert b.stored_spans() == {T1: 2}
    assert b.spool.held() == (0, 0)


# --- a spool file from before log requests were kept -----------------------------------------

_V0_SCHEMA = (  # what otel-eval wrote before this change (no signal column, user_version 0)
    "CREATE TABLE spool_requests (id INTEGER PRIMARY KEY, body BLOB NOT NULL)",
    "CREATE TABLE spool_traces (request_id INTEGER NOT NULL, trace_id TEXT NOT NULL, "
    "PRIMARY KEY (request_id, trace_id)) WITHOUT ROWID",
)


def test_a_spool_from_before_the_change_is_migrated_and_replays(tmp_path: Path) -> None:
    path = tmp_path / "store.db-spool"
    with sqlite3.connect(path) as db:
        for stmt in _V0_SCHEMA:
            db.execute(stmt)
        db.execute("INSERT INTO spool_requests VALUES (1, ?)",
                   (body([span(T1, 1, None), span(T1, 2)]),))
        db.execute("INSERT INTO spool_traces VALUES (1, ?)", (T1,))
    db.close()

    b = Node(tmp_path)
    assert b.replayed == (1, 2, 0)
    assert b.spool._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    recs = [record(T1, 2, "after the upgrade")]
    # the new column takes log rows
    b.engine.submit(recs, request=logs_body(recs), signal="logs")
    b.release()
    assert b.stored_spans() == {T1: 2}
    assert b.spool.held() == (0, 0)
    b.crash()
    assert Node(tmp_path).replayed == (0, 0, 0)


def test_a_spool_from_a_newer_release_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "store.db-spool"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    before = path.read_bytes()
    with pytest.raises(SpoolVersionError, match="newer release"):
        Spool(str(path), 1 << 20, Metrics(CollectorRegistry()).spool).open()
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


def test_encode_logs_round_trips_what_decode_keeps() -> None:
    recs = [record(T1, 3, "x"), LogEvent(T9, "1" * 16, "gen_ai.user.message", 7, {}, None)]
    assert otlp_logs.decode_logs(otlp_logs.encode_logs(recs)).records == recs


def test_log_records_this_version_refuses_at_replay_are_counted_and_logged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """A record an earlier version acknowledged (spooled) that today's decoder refuses was
    dropped at replay uncounted, while a span refused there is counted
    (spool_spans_rejected_total). Now the record is counted too
    (spool_log_records_rejected_total{reason}) and logged; a record of a trace the spool
    does not replay (refused when received, counted then) is not counted again."""
    a = Node(tmp_path)
    a.send([span(T1, 1, None)])
    early, late = record(T1, 1, "kept"), record(T1, 1, "refused")
    late.time_unix_nano = 10
    stray = record(T9, 2, "not replayed")
    stray.time_unix_nano = 10
    assert a.engine.submit([early, late], signal="logs",
                           request=logs_body([early, late, stray])).accepted == 2
    a.crash()

    monkeypatch.setattr("otel_eval.decode.otlp_logs.MAX_TIME_NS", 7)  # a stricter decoder
    with caplog.at_level(logging.WARNING, logger="otel_eval.assemble.spool"):
        b = Node(tmp_path)
    assert b.replayed == (2, 1, 1)
    assert b.sample("otel_eval_spool_log_records_rejected_total",
                    reason="invalid_timestamp") == 1
    assert "1 log record(s)" in caplog.text and "1 invalid_timestamp" in caplog.text


def test_log_records_assembly_refuses_at_replay_are_counted_and_logged(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A record acknowledged before assembly.max_log_records_per_trace was lowered is refused
    by assembly at replay (trace_too_large): it was dropped uncounted. Now it is counted
    (spool_log_records_rejected_total{reason}) and logged."""
    a = Node(tmp_path)
    a.send([span(T1, 1, None)])
    records = [record(T1, 1, text) for text in ("one", "two", "three")]
    assert a.engine.submit(records, signal="logs", request=logs_body(records)).accepted == 3
    a.crash()

    with caplog.at_level(logging.WARNING, logger="otel_eval.assemble.spool"):
        b = Node(tmp_path, max_log_records_per_trace=2)
    assert b.replayed == (2, 1, 2)
    assert b.sample("otel_eval_spool_log_records_rejected_total",
                    reason="trace_too_large") == 1
    assert "1 log record(s)" in caplog.text and "by assembly" in caplog.text


def test_a_log_row_thinned_keeps_its_pending_traces_records_as_they_were() -> None:
    """A row kept by one trace (``Spool`` thins it under pressure) holds only that trace's
    records, each as received, its resource and scope with it."""
    raw = logs_body([record(T1, 1, "kept"), record(T9, 2, "done")])
    out = thinned(raw, "logs", {T1})
    assert out is not None and len(out) < len(raw)
    req = otlp_logs.parse_logs_request(out)[0]
    full = otlp_logs.parse_logs_request(raw)[0]
    kept = [r for rl in req.resource_logs for sl in rl.scope_logs for r in sl.log_records]
    assert [r.trace_id.hex() for r in kept] == [T1]
    assert kept[0] == next(r for rl in full.resource_logs for sl in rl.scope_logs
                           for r in sl.log_records if r.trace_id.hex() == T1)
    assert req.resource_logs[0].resource == full.resource_logs[0].resource
