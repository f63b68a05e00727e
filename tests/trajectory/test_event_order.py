"""The order a span's GenAI events are read in (``conventions.events._in_order``) when they
share one time: by observed time where it is known, else as received. OTLP says an
observed time of 0 is unknown (logs.proto: "Value of 0 indicates unknown or missing
timestamp"), and span events have none: such an event keeps its place right after the one
received before it at that time (first when none was), as an unknown time does, and never
reorders the events whose observed times are known. Before, 0 was read as the earliest
observed time: a span's own events (read after its log records) and a record whose observed
time was not sent (a spool row an earlier release re-encoded) went before every record of
that time, wherever they came."""

from __future__ import annotations

import json

import pytest

from otel_eval.base.model import LogEvent, Span, SpanEvent
from otel_eval.evaluate.conventions.events import overlay, span_events

TID, SID, T = "a" * 32, "b" * 16, 5


def _said(text: str, observed: int) -> LogEvent:
    return LogEvent(TID, SID, "gen_ai.user.message", T, {}, {"content": text},
                    observed_time_unix_nano=observed)


def _read(events: list[LogEvent]) -> list[str]:
    return [m["content"] for m in json.loads(overlay({}, events)["gen_ai.input.messages"])]


@pytest.mark.parametrize(("received", "read"), [
    ([("a", 9), ("b", 0), ("c", 3)], "cab"),  # unknown after a: stays right after it
    ([("a", 0), ("b", 9), ("c", 3)], "acb"),  # unknown first at its time: stays first
    ([("a", 9), ("b", 3), ("c", 0)], "bac"),  # unknown after a and b: after both
    ([("a", 9), ("b", 0), ("c", 0), ("d", 3)], "dabc"),  # unknowns keep their own order
    ([("a", 0), ("b", 0)], "ab"),
    ([("a", 9), ("b", 3)], "ba"),
], ids=["between", "first", "last", "two", "none-known", "all-known"])
def test_an_unknown_observed_time_keeps_its_place(received: list[tuple[str, int]],
                                                  read: str) -> None:
    assert "".join(_read([_said(t, o) for t, o in received])) == read


def test_a_span_s_own_events_come_after_its_records_of_the_same_time() -> None:
    span = Span(TID, SID, None, "chat", 1, 9, events=[
        SpanEvent("gen_ai.user.message", T, {"content": "on the span"})])
    records = [_said("logged first", 8), _said("logged second", 7)]
    assert _read([*records, *span_events(span)]) == [
        "logged second", "logged first", "on the span"]


def test_a_later_time_is_read_later_whatever_the_observed_times() -> None:
    late = LogEvent(TID, SID, "gen_ai.user.message", T + 1, {}, {"content": "later"})
    assert _read([late, _said("earlier", 0)]) == ["earlier", "later"]
