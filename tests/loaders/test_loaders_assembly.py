"""Offline runs regroup spans through the assembler ``serve`` uses: the same duplicate rule,
trace order and completeness; what the assembler refuses is reported with its reason."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from otel_eval.base.model import Span
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp_json import request_to_json
from otel_eval.receive.loaders import LoaderError, load_file


def _file(tmp_path: Path, spans: list[Span]) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(request_to_json(encode_spans(spans))))
    return path


def _span(trace: str, i: int, parent: int | None, end: int = 2, name: str = "") -> Span:
    return Span(trace, f"{i:016x}", None if parent is None else f"{parent:016x}",
                name or f"s{i}", 1, end)


def test_a_duplicate_span_is_refused_as_serve_refuses_it(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = "a" * 32, "b" * 32
    spans = [_span(b, 1, None, end=0), _span(a, 1, None), _span(a, 2, 1),
             _span(a, 2, 1, name="again"), _span(b, 2, 1)]
    path = _file(tmp_path, spans)
    errors: list[LoaderError] = []
    traces = load_file(path, on_error=errors.append)
    assert [t.trace_id for t in traces] == [b, a]  # first-seen order
    assert [t.status for t in traces] == ["incomplete", "complete"]  # b's root never ended
    assert {t.release_reason for t in traces} == {"eof"}
    a_spans = traces[1].spans
    assert [s.name for s in a_spans] == ["s1", "s2"]  # the first copy kept, as in serve
    assert [e.problem for e in errors] == ["1 span(s) rejected: 1 duplicate_span"]
    with caplog.at_level(logging.WARNING, "otel_eval.receive.loaders.files"):
        assert len(load_file(path)) == 2  # without on_error: logged, the file still loads
    assert "1 duplicate_span" in caplog.text


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_a_trace_in_two_files_takes_the_same_source_whatever_their_order(
        tmp_path: Path, order: tuple[str, str]) -> None:
    """A trace's ``source`` is the first by name of the files holding its spans, whatever
    the order they were read in; a copy of the same export in two files (given as
    ``b.json a.json``, or a glob in another locale's order) took the file read first, its
    copy's spans all refused as ``duplicate_span``, so the same files gave another source."""
    from otel_eval.receive.loaders import load_paths

    a = "a" * 32
    spans = [_span(a, 1, None), _span(a, 2, 1)]
    text = json.dumps(request_to_json(encode_spans(spans)))
    for name in order:
        (tmp_path / f"{name}.json").write_text(text)
    errors: list[LoaderError] = []
    (trace,) = load_paths([tmp_path / f"{n}.json" for n in order], on_error=errors.append)
    assert trace.source == str(tmp_path / "a.json")
    assert len(trace.spans) == 2
    assert [e.problem for e in errors] == ["2 span(s) rejected: 2 duplicate_span"]
