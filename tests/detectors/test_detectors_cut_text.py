"""Values cut at an attribute length limit (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``): JSON text
so cut is told by its shape (``values.cut_json``) and never compared as whole; plain text so
cut cannot be told from whole text, so it is compared as written. docs/evaluation-limits.md
says both: each comparison it names is checked here, so the page and the code agree."""

from __future__ import annotations

import json
import re
from pathlib import Path

from detector_factory import kinds, llm, tool, traj

from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors import loop
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.detectors import repeated_request

DOC = Path(__file__).resolve().parents[2] / "docs" / "evaluation-limits.md"
LIMIT = 64
CITIES = ("Paris", "London", "Tokyo")
# one start, then what differs: the city, past the limit
REPLY = "I have looked at the forecast you asked for and here is what I found for {c}: sunny."
RESULT = "Forecast service v2, region eu-west, source station network, for {c}: sunny, 21C"
REQUEST = "Please look at the weather forecast for the coming days and tell me about flight {c}."
FLIGHTS = ("AF1001", "BA2002", "JL3003")


def _section() -> str:
    text = DOC.read_text()
    start = text.index("## Values cut at an attribute length limit")
    return text[start:text.index("\n## ", start + 1)]


def _loop_kinds(limit: int | None) -> list[str]:
    def cut(text: str) -> str:
        return text if limit is None else text[:limit]

    outputs = [llm(cut(REPLY.format(c=c))) for c in CITIES]
    results = [tool("get_forecast", {"region": "eu"}, cut(RESULT.format(c=c))) for c in CITIES]
    reads = [tool("get_alerts", {"page": n}, f"none {n}") for n in range(2)]
    steps = [*outputs, results[0], reads[0], results[1], reads[1], results[2]]
    return kinds(loop.detect(traj(*steps), DetectorsConfig(), Context()))


def test_plain_text_cut_at_the_limit_is_compared_as_written_as_documented() -> None:
    section = _section()
    assert "cannot be told from whole text" in re.sub(r"\s+", " ", section)
    assert all(len(REPLY.format(c=c)) > LIMIT for c in CITIES)
    assert not any(cut_json(REPLY.format(c=c)[:LIMIT]) for c in CITIES)
    # whole, the replies and results differ; cut at the limit they are alike: the
    # comparisons the page names
    assert _loop_kinds(None) == []
    found = _loop_kinds(LIMIT)
    for named in ("loop/stagnation", "loop/no_progress"):
        assert f"`{named}`" in section and named in found
    turns = [{"trace_id": f"{n:032x}", "input": REQUEST.format(c=c)[:LIMIT]}
             for n, c in enumerate(FLIGHTS)]
    whole = [dict(t, input=REQUEST.format(c=c)) for t, c in zip(turns, FLIGHTS, strict=True)]
    assert not repeated_request(whole, SessionsConfig(), True)
    assert "`same_request`" in section
    assert [f["kind"] for f in repeated_request(turns, SessionsConfig(), True)] == ["same_request"]


def test_json_cut_at_the_limit_is_known_only_in_part_as_documented() -> None:
    assert "`conventions.values.cut_json`" in _section()
    replies = [json.dumps({"answer": REPLY.format(c=c)})[:LIMIT] for c in CITIES]
    assert all(cut_json(r) for r in replies)
    assert kinds(loop.detect(traj(*map(llm, replies)), DetectorsConfig(), Context())) == []
