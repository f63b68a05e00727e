"""One trace never takes its batch or serve down (issue 33, findings 1 and 4).

A lone surrogate spelled in span JSON (``"\\ud800"``: OTLP strings are valid UTF-8, the JSON
inside them is parsed) once became an agent name the store's driver could not encode: the
engine thread died, serve exited, and the spool replayed the poison at every start. Now the
parsed text is made valid (U+FFFD), and any exception a store call raises that is not the
store's own state is one trace's: the batch is stored trace by trace, the trace that still
fails is stored as an evaluation error, or dropped and counted when even that fails.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from support.harness import Harness, running_service
from support.poll import poll

import otel_eval.store.sqlite as sqlite_module
from otel_eval.base.model import Span
from otel_eval.base.results import Evaluation
from otel_eval.decode import encode
from otel_eval.store.base import Row, evaluation_row

POISON = "0d" * 16
CLEAN = [f"{i:02x}" * 16 for i in range(0x10, 0x1a)]  # 10 clean traces
WAIT_S = 60.0  # a bound on waiting for worker processes on a loaded machine, not a timing


def _openinference(trace: str, agent_json: str) -> list[Span]:
    """A LangChain run under OpenInference: its agent stamped in the ``metadata`` JSON."""
    meta = "{\"lc_agent_name\": " + agent_json + ", \"langgraph_step\": 1}"
    root = Span(trace, "01" * 8, None, "agent", 1, 9,
                attributes={"openinference.span.kind": "CHAIN", "metadata": meta,
                            "input.value": "what is the weather?"})
    tool = Span(trace, "02" * 8, "01" * 8, "search", 2, 8,
                attributes={"openinference.span.kind": "TOOL", "tool.name": "search",
                            "input.value": '{"q": "\\udfffparis"}', "metadata": meta})
    return [root, tool]


def _post(h: Harness, spans: list[Span]) -> None:
    body = encode.encode_spans(spans).SerializeToString()
    req = urllib.request.Request(h.http_url, data=body, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


@pytest.mark.parametrize(("store", "workers"), [
    ("sqlite", 1), pytest.param("postgresql", 1, marks=pytest.mark.postgres), ("sqlite", 2)])
def test_a_lone_surrogate_in_span_json_is_stored_and_serve_keeps_going(
        tmp_path: Path, request: pytest.FixtureRequest, store: str, workers: int) -> None:
    """In the serving process (workers 1, as the default on one CPU) and in worker processes
    (2), on SQLite and PostgreSQL: the poison is stored, and so are the 10 clean traces."""
    changes: dict[str, Any] = {"evaluation.workers": workers}
    if store == "postgresql":
        changes["store.url"] = request.getfixturevalue("postgresql_url")
    with running_service(tmp_path, **changes) as h:
        _post(h, _openinference(POISON, '"\\ud800evil"'))
        for trace in CLEAN:
            _post(h, _openinference(trace, '"weather_agent"'))
        assert h.release() == 11  # before: UnicodeEncodeError out of the engine's process()
        poll(lambda: h.svc.store.get(CLEAN[-1]) is not None
             and h.svc.store.get(POISON) is not None,
             "the worker processes to store the batch", timeout_s=WAIT_S)
        poison = h.svc.store.get(POISON)
        assert poison is not None and poison["agent"] == "\ufffdevil"
        assert all(h.svc.store.get(t) is not None for t in CLEAN)
        assert h.svc.engine.healthy
        assert h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                        reason="UnicodeEncodeError") == 0
        if workers > 1:
            assert h.svc.engine.stage.drain(WAIT_S)
        assert h.sample("otel_eval_spool_requests") == 0  # nothing left to replay at start


def _failing_rows(bad: str, times: int) -> Any:
    """``evaluation_row`` raising for trace ``bad`` its first ``times`` calls."""
    calls = {"n": 0}

    def row(ev: Evaluation) -> Row:
        if ev.trace_id == bad and calls["n"] < times:
            calls["n"] += 1
            raise TypeError("a row that cannot be built")
        return evaluation_row(ev)
    return row


class _Recorder:
    """A sink that notes the poison trace's id, exported (evaluated) or passed on."""

    def __init__(self) -> None:
        self.exported: list[str] = []
        self.passed_on: list[str] = []

    def export(self, trace: Any, evaluation: Evaluation) -> None:
        if trace.trace_id == POISON:
            self.exported.append(trace.trace_id)

    def pass_on(self, trace: Any) -> None:
        if trace.trace_id == POISON:
            self.passed_on.append(trace.trace_id)


@pytest.mark.parametrize("times", [2, 99])
def test_a_trace_whose_row_fails_is_an_error_record_or_dropped_never_the_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, times: int) -> None:
    """``times`` 2: the batch and the trace alone fail, its error record is stored; 99:
    even the error record fails, the trace is dropped and counted. The batch's other traces
    are stored either way, and nothing stays in the spool."""
    monkeypatch.setattr(sqlite_module, "evaluation_row", _failing_rows(POISON, times))
    with running_service(tmp_path) as h:
        sink = _Recorder()
        h.svc.engine.sinks.append(sink)
        _post(h, _openinference(POISON, '"weather_agent"'))
        for trace in CLEAN:
            _post(h, _openinference(trace, '"weather_agent"'))
        assert h.release() == 11
        assert all(h.svc.store.get(t) is not None for t in CLEAN)
        poison = h.svc.store.get(POISON)
        if times == 2:
            assert poison is not None
            assert [f["kind"] for f in poison["findings"]] == ["evaluation_error"]
            assert "TypeError" in json.dumps(poison)
            assert h.sample("otel_eval_evaluation_failures_total", stage="evaluate",
                            reason="TypeError") == 1
            assert sink.exported == [POISON]
        else:
            assert poison is None
            assert h.sample("otel_eval_evaluation_skipped_total", reason="unstorable") == 1
            # its spans still pass on (forwarded unstamped); before, no sink saw them
            assert sink.passed_on == [POISON] and sink.exported == []
        assert h.sample("otel_eval_store_write_failures_total", reason="error") == 0
        assert h.sample("otel_eval_spool_requests") == 0


def test_a_tool_named_with_a_lone_surrogate_leaves_metrics_scrapable(tmp_path: Path) -> None:
    """Finding 2: an LLM asked for a tool "\\ud800x" (spelled in its output messages' JSON);
    the selection error put the name in a ``tool`` label and every scrape answered 500."""
    trace = "cd" * 16
    out = ('[{"role": "assistant", "parts": [{"type": "tool_call", "id": "c1", '
           '"name": "\\ud800x", "arguments": {"q": "a"}}], "finish_reason": "tool_call"}]')
    tools = json.dumps([{"name": "search", "parameters": {"type": "object"}}])
    spans = [Span(trace, "01" * 8, None, "invoke_agent a", 1, 9,
                  attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}),
             Span(trace, "02" * 8, "01" * 8, "chat", 2, 3,
                  attributes={"gen_ai.operation.name": "chat", "gen_ai.tool.definitions": tools,
                              "gen_ai.output.messages": out})]
    with running_service(tmp_path) as h:
        _post(h, spans)
        assert h.release() == 1
        for accept in ("text/plain", "application/openmetrics-text"):
            req = urllib.request.Request(f"{h.admin_url}/metrics", headers={"Accept": accept})
            with urllib.request.urlopen(req, timeout=10) as r:
                assert r.status == 200
                page = r.read().decode()
            assert 'tool="\ufffdx"' in page


def test_a_store_that_refuses_every_row_keeps_the_traces_never_drops_them(
        tmp_path: Path) -> None:
    """A driver error on every row (here: the table is gone) is the store's, not one
    trace's: after trying trace by trace and the error record, the traces are kept (spooled,
    retried with back-off), not stored as errors nor dropped."""
    with running_service(tmp_path) as h:
        store = h.svc.store
        assert isinstance(store, sqlite_module.SqliteStore)
        with store._lock:
            store._db.execute("ALTER TABLE evaluations RENAME TO gone")
        for trace in CLEAN[:3]:
            _post(h, _openinference(trace, '"weather_agent"'))
        h.release()
        assert h.sample("otel_eval_evaluation_skipped_total", reason="unstorable") == 0
        assert h.sample("otel_eval_store_write_failures_total", reason="error") == 1
        assert h.svc.engine.pending_spans() == 6 and h.sample("otel_eval_spool_requests") == 3
        with store._lock:
            store._db.execute("ALTER TABLE gone RENAME TO evaluations")
        h.release(after_s=60)
        assert all(store.get(t) is not None for t in CLEAN[:3])
        assert h.sample("otel_eval_spool_requests") == 0


def _run_with_tokens(tracer: Any, input_tokens: Any) -> str:
    agent = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": 30}
    with (tracer.start_as_current_span("invoke_agent a", attributes=agent) as root,
          tracer.start_as_current_span("chat", attributes=chat)):
        pass
    return f"{root.get_span_context().trace_id:032x}"


def test_a_token_count_out_of_range_is_unknown_and_its_batch_is_stored(tmp_path: Path) -> None:
    """A chat span says it read a 400-digit number of tokens (as text, as OpenInference and
    some SDKs write counts). It was kept as a 400-digit int: the metrics of the stored trace
    raised OverflowError (float of it) out of the engine's ``process``, and the batch's
    later traces lost their metrics, sinks, waiters and pending budget. Now the count is
    unknown, and the trace and its batch are evaluated and finished like any other."""
    with running_service(tmp_path) as h:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=h.http_url)))
        tracer = provider.get_tracer("huge-tokens")
        huge = _run_with_tokens(tracer, "9" * 400)
        clean = _run_with_tokens(tracer, 120)
        provider.shutdown()
        assert h.release() == 2  # before: OverflowError out of process()
        stored = {t: h.svc.store.get(t) for t in (huge, clean)}
        assert all(row is not None for row in stored.values())
        assert stored[huge]["usage"]["input_tokens"] is None  # unknown: no count known
        assert [s.get("input_tokens") for s in stored[huge]["steps"]] == [None, None]
        assert stored[clean]["usage"]["input_tokens"] == 120
        # the SDK's default service.name is no service: labelled "unknown"
        assert stored[clean]["service"] is None
        service = "unknown"
        assert h.sample("otel_eval_trace_duration_seconds_count", service=service,
                        agent="a") == 2  # both traces counted: the batch finished
        # the unknown input count adds nothing: the huge trace's 30 output tokens, and 150
        assert h.sample("otel_eval_trace_tokens_sum", service=service, agent="a") == 180
        assert h.svc.engine.pending_spans() == 0 and h.svc.engine.healthy
        assert h.sample("otel_eval_spool_requests") == 0


def test_a_trace_whose_metrics_fail_costs_its_batch_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Metrics read a stored trace's content; whatever slips past the readers (above: a
    400-digit count) must not stop the finishing of its batch. The trace's metrics raise
    here: it is counted as a metrics failure, still handed to the sinks, and the batch's
    other traces are counted, nothing left pending (before: the exception left
    ``process``, skipping all of that for the rest of the batch)."""
    with running_service(tmp_path) as h:
        stored = h.svc.metrics.traces.evaluation_stored

        def observe(ev: Evaluation, *args: Any) -> Any:
            if ev.trace_id == POISON:
                raise OverflowError("int too large to convert to float")
            return stored(ev, *args)
        monkeypatch.setattr(h.svc.metrics.traces, "evaluation_stored", observe)
        sink = _Recorder()
        h.svc.engine.sinks.append(sink)
        _post(h, _openinference(POISON, '"weather_agent"'))
        for trace in CLEAN:
            _post(h, _openinference(trace, '"weather_agent"'))
        assert h.release() == 11
        assert all(h.svc.store.get(t) is not None for t in [POISON, *CLEAN])
        assert h.sample("otel_eval_evaluation_failures_total", stage="metrics",
                        reason="OverflowError") == 1
        assert sink.exported == [POISON]
        assert sum(s.value for m in h.svc.registry.collect() for s in m.samples
                   if s.name == "otel_eval_trace_steps_count") == len(CLEAN)
        assert h.svc.engine.pending_spans() == 0 and h.svc.engine.healthy
        assert h.sample("otel_eval_spool_requests") == 0
