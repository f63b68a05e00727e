"""Forwarder: stamped spans received by a real OTLP server; bounds, retries, drop reasons."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from opentelemetry.proto.trace.v1 import trace_pb2
from results_sample import LLM, ROOT, TOOL, evaluation, trace
from support.otlp_capture import Capture

from otel_eval.base.component import Held, settle
from otel_eval.base.results import stored_evaluation
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp import attributes_to_dict
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.forward import Forwarder, stamps
from otel_eval.telemetry.metrics import Metrics


def _config(ds: Capture | None, **kw: Any) -> ExportConfig:
    endpoint = f"127.0.0.1:{ds.port}" if ds else "127.0.0.1:1"
    kw = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05, **kw}
    return ExportConfig(forward_endpoint=endpoint, **kw)


def _spans(ds: Capture) -> dict[str, trace_pb2.Span]:
    return {s.span_id.hex(): s for req in ds.traces for rs in req.resource_spans
            for ss in rs.scope_spans for s in ss.spans}


def _value(m: Metrics, name: str, **labels: str) -> float:
    return m.registry.get_sample_value(name, labels) or 0.0


def test_forwards_spans_with_stamps_and_summary(downstream: Capture) -> None:
    m = Metrics()
    fwd = Forwarder(_config(downstream), m)
    fwd.start()
    fwd.export(trace(), evaluation())
    fwd.shutdown(5.0)
    spans = _spans(downstream)
    assert set(spans) == {ROOT, LLM, TOOL}
    assert attributes_to_dict(spans[TOOL].attributes) == {
        "gen_ai.tool.name": "search",
        "otel_eval.findings": ["loop/repeated_tool_call", "tool_call/runtime"],
        "otel_eval.severity": "error",
    }
    assert attributes_to_dict(spans[LLM].attributes) == {
        "gen_ai.usage.input_tokens": 10,
        "otel_eval.findings": ["loop/repeated_tool_call"],
        "otel_eval.severity": "error",
    }
    assert attributes_to_dict(spans[ROOT].attributes) == {
        "gen_ai.agent.name": "shop",
        "otel_eval.finding_count": 3,
        "otel_eval.findings": ["budget/tokens", "loop/repeated_tool_call", "tool_call/runtime"],
        "otel_eval.finding.budget.count": 1,
        "otel_eval.finding.loop.count": 1,
        "otel_eval.finding.tool_call.count": 1,
        "otel_eval.trace.status": "complete",
        "otel_eval.trace.revision": 0,
        "otel_eval.verdict": "fail",
        "otel_eval.verdict.reasons": ["loop: search called 3 times"],
    }
    assert spans[TOOL].status.code == trace_pb2.Status.STATUS_CODE_ERROR
    assert spans[TOOL].parent_span_id.hex() == ROOT and spans[TOOL].start_time_unix_nano == 4_000
    rs = downstream.traces[0].resource_spans[0]
    assert attributes_to_dict(rs.resource.attributes) == {"service.name": "shop-agent"}
    assert rs.scope_spans[0].scope.name == "agent"
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3


def test_a_trace_that_is_no_run_is_passed_on_unstamped(downstream: Capture) -> None:
    m = Metrics()
    fwd = Forwarder(_config(downstream), m)
    fwd.start()
    fwd.pass_on(trace())
    fwd.shutdown(5.0)
    spans = _spans(downstream)
    assert set(spans) == {ROOT, LLM, TOOL}
    assert not [a.key for s in spans.values() for a in s.attributes
                if a.key.startswith("otel_eval.")]
    assert attributes_to_dict(spans[ROOT].attributes) == {"gen_ai.agent.name": "shop"}
    assert _value(m, "otel_eval_forward_spans_sent_total") == 3


def test_retries_then_delivers_and_counts_partial_rejects(downstream: Capture) -> None:
    downstream.fail_next = [grpc.StatusCode.UNAVAILABLE] * 3
    downstream.reject_spans = 1
    m = Metrics()
    fwd = Forwarder(_config(downstream), m)
    fwd.start()
    fwd.export(trace(), evaluation())
    downstream.wait_for(lambda ds: len(ds.traces) == 1)
    fwd.shutdown(5.0)
    assert len(downstream.failed) == 3
    assert _value(m, "otel_eval_forward_spans_sent_total") == 2
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward",
                  reason="downstream_rejected") == 1


def test_gives_up_after_max_retry(downstream: Capture) -> None:
    downstream.fail_next = [grpc.StatusCode.UNAVAILABLE] * 100
    m = Metrics()
    fwd = Forwarder(_config(downstream, max_retry_s=0.05), m)
    fwd.start()
    fwd.export(trace(), evaluation())
    fwd.shutdown(5.0)
    assert downstream.traces == []
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward",
                  reason="retries_exhausted") == 3


def test_queue_full_drops_oldest_and_too_large(downstream: Capture) -> None:
    m = Metrics()
    fwd = Forwarder(_config(downstream, max_queue_items=4), m)
    fwd.export(trace(), evaluation(passed=True))  # queued: the worker is not started yet
    fwd.export(trace(), evaluation())  # 3 + 3 > 4: the first (oldest) trace is evicted
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="queue_full") == 3
    fwd.start()
    fwd.shutdown(5.0)
    assert len(downstream.traces) == 1
    assert attributes_to_dict(_spans(downstream)[ROOT].attributes)["otel_eval.verdict"] == "fail"
    small = Forwarder(_config(downstream, max_queue_items=2), m)
    small.export(trace(), evaluation())
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="too_large") == 3
    small.shutdown(1.0)


def test_the_queue_is_bounded_in_bytes_too(downstream: Capture) -> None:
    """Before, only items counted: 100,000 queued spans of a few MB each held gigabytes while
    the downstream was away. Now the oldest requests make room for the bytes, and a request
    larger than the whole queue is refused alone."""
    m = Metrics()
    one = encode_spans(trace().spans, extra=stamps(trace(), evaluation())).ByteSize()
    assert 2 * one >= 1024  # room for two and a half requests, within the bounds' minimums
    fwd = Forwarder(_config(downstream, max_batch_bytes=1024,
                            max_queue_bytes=2 * one + one // 2), m)
    for passed in (True, True, False):  # queued: the worker is not started yet
        fwd.export(trace(), evaluation(passed=passed))
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="queue_full") == 3
    fwd.start()
    fwd.shutdown(5.0)
    assert len(downstream.traces) == 2  # the two newest
    assert attributes_to_dict(_spans(downstream)[ROOT].attributes)["otel_eval.verdict"] == "fail"
    small = Forwarder(_config(downstream, max_batch_bytes=1024, max_queue_bytes=1024), m)
    big = trace()
    big.spans[0].attributes["input.value"] = "x" * 2000
    small.export(big, evaluation())
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="too_large") == 3
    small.shutdown(1.0)


def test_unstarted_shutdown_counts_the_queue() -> None:
    m = Metrics()
    fwd = Forwarder(_config(None), m)
    fwd.export(trace(), evaluation())
    fwd.shutdown(1.0)
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="shutdown") == 3


def test_shutdown_deadline_drops_what_cannot_be_sent() -> None:
    m = Metrics()
    # Port 1 on loopback refuses connections: UNAVAILABLE until the shutdown deadline.
    fwd = Forwarder(_config(None, max_retry_s=60.0), m)
    fwd.start()
    fwd.export(trace(), evaluation())
    fwd.shutdown(0.2)
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="shutdown") == 3
    assert _value(m, "otel_eval_forward_spans_sent_total") == 0


def test_empty_endpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="forward_endpoint"):
        Forwarder(ExportConfig(), Metrics())


def test_a_received_stamp_key_is_replaced_not_repeated() -> None:
    """A span that already carries an ``otel_eval.*`` key (from an otel-eval upstream) gets
    ours instead: OTLP attribute keys are unique. Its other attributes keep their order."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from otel_eval.decode.encode import dict_to_attributes, encode_spans
    from otel_eval.decode.otlp import decode_request

    span = trace_pb2.Span(trace_id=bytes(range(1, 17)), span_id=bytes(range(1, 9)), name="s",
                          trace_state="k=v", dropped_links_count=2,
                          attributes=dict_to_attributes({"a": 1, "otel_eval.severity": "info",
                                                         "b": b"\x00"}))
    req = ExportTraceServiceRequest()
    req.resource_spans.add().scope_spans.add().spans.append(span)
    decoded = decode_request(req).spans
    out = encode_spans(decoded, extra={decoded[0].span_id: {"otel_eval.severity": "error"}})
    got = out.resource_spans[0].scope_spans[0].spans[0]
    assert [(kv.key, kv.value) for kv in got.attributes] == [
        (kv.key, kv.value) for kv in dict_to_attributes(
            {"a": 1, "b": b"\x00", "otel_eval.severity": "error"})]
    assert got.trace_state == "k=v" and got.dropped_links_count == 2


class Releases:
    """The engine's side of ``Held``: which traces were released, in which batches."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def held(self, trace_id: str = "t") -> Held:
        return Held(trace_id, 0, self.release)

    def release(self, held: list[Held]) -> None:
        self.batches.append([h.trace_id for h in held])

    @property
    def released(self) -> list[str]:
        return [t for b in self.batches for t in b]


def _finished(r: Releases, *held: Held) -> None:
    settle(held)  # finishing's own share, as after its sinks ran


def test_a_forwarded_trace_is_released_once_delivered(downstream: Capture) -> None:
    r = Releases()
    fwd = Forwarder(_config(downstream), Metrics())
    a, b = r.held("a"), r.held("b")
    fwd.export(trace(), evaluation(), a)  # queued before start: merged into one request
    fwd.pass_on(trace(), b)
    _finished(r, a, b)
    assert r.released == []  # queued, not delivered: the spool keeps both
    fwd.start()
    fwd.shutdown(5.0)
    assert len(downstream.traces) == 1
    assert r.batches == [["a", "b"]]  # one batch: one spool transaction


@pytest.mark.parametrize("why", ["queue_full", "too_large", "retries_exhausted", "rejected"])
def test_a_trace_dropped_for_good_is_released(downstream: Capture, why: str) -> None:
    """A counted drop is final: kept in the spool, the trace would come back at every start."""
    r = Releases()
    m = Metrics()
    kw: dict[str, Any] = {"queue_full": {"max_queue_items": 4},
                          "too_large": {"max_queue_items": 2},
                          "retries_exhausted": {"max_retry_s": 0.05},
                          "rejected": {}}[why]
    downstream.fail_next = {"retries_exhausted": [grpc.StatusCode.UNAVAILABLE] * 100,
                            "rejected": [grpc.StatusCode.INVALID_ARGUMENT]}.get(why, [])
    fwd = Forwarder(_config(downstream, **kw), m)
    first = r.held("first")
    fwd.export(trace(), evaluation(), first)
    if why == "queue_full":
        fwd.export(trace(), evaluation(), r.held("second"))  # evicts the first
    _finished(r, first)
    fwd.start()
    fwd.shutdown(5.0)
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason=why) == 3
    assert "first" in r.released


def test_a_trace_the_stop_could_not_deliver_stays_held() -> None:
    """Dropped for the stop (``shutdown``), before start or at the deadline: the trace stays
    in the spool and goes out after the restart."""
    r = Releases()
    m = Metrics()
    unstarted = Forwarder(_config(None), m)
    never = r.held("never started")
    unstarted.export(trace(), evaluation(), never)
    unstarted.shutdown(1.0)
    # Port 1 on loopback refuses connections: UNAVAILABLE until the shutdown deadline.
    fwd = Forwarder(_config(None, max_retry_s=60.0), m)
    fwd.start()
    late = r.held("unavailable")
    fwd.export(trace(), evaluation(), late)
    fwd.shutdown(0.2)
    closed = r.held("after the stop")
    fwd.export(trace(), evaluation(), closed)
    _finished(r, never, late, closed)
    assert _value(m, "otel_eval_sink_dropped_total", sink="forward", reason="shutdown") == 9
    assert r.released == []


def test_a_replay_is_stamped_as_the_evaluation_was() -> None:
    """What the store keeps (the v1 object, through JSON) gives the same stamps."""
    ev = evaluation()
    again = stored_evaluation(trace(), json.loads(ev.to_json_text()))
    assert stamps(trace(), again) == stamps(trace(), ev)
    assert stored_evaluation(trace(), {"findings": [1, {"span_ids": "x"}], "verdict": []}) \
        .verdict is None  # not of the shape: left out, never a made-up verdict


def test_a_cut_run_is_stamped_with_why_it_was_released() -> None:
    """The run's root carried ``otel_eval.trace.status`` ``truncated`` alone: downstream
    could not tell a run otel-eval cut for room (``pressure``) from one cut at its maximum
    duration. It carries ``otel_eval.trace.release_reason``, as the stored result does, and
    a replay of the stored result stamps it the same."""
    ev = evaluation()
    ev.trajectory.status, ev.trajectory.release_reason = "truncated", "pressure"
    root = stamps(trace(), ev)[ROOT]
    assert (root["otel_eval.trace.status"], root["otel_eval.trace.release_reason"]) == (
        "truncated", "pressure")
    again = stored_evaluation(trace(), json.loads(ev.to_json_text()))
    assert stamps(trace(), again) == stamps(trace(), ev)
