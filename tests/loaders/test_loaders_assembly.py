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
from otel_eval.receive.loaders import LoaderError, load_file, load_paths


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


@pytest.mark.parametrize("name", ["tau_runs.json", "mini.traj.json"])
def test_a_copy_of_a_chat_log_is_refused_as_late_as_an_otlp_copy(tmp_path: Path,
                                                                  name: str) -> None:
    """tau-bench runs and mini-swe-agent trajectories went around the file assembly: a copy
    (``a/x.runs.json`` and ``b/x.runs.json``, or one path given twice) made the same trace
    ids again, each run evaluated (and learnt by ``train``) twice under one trace id. Their
    traces now take the assembly's rule, as OTLP files' do: the copy is refused as ``late``
    and reported (docs/api.md, ``otel-eval eval``)."""
    data = (Path(__file__).parent.parent / "data" / "loaders" / name).read_bytes()
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / name).write_bytes(data)
    once = list(load_paths([tmp_path / "a" / name]))
    assert once
    for paths in ([tmp_path / "a" / name, tmp_path / "b" / name],
                  [tmp_path / "a" / name] * 2):
        errors: list[LoaderError] = []
        traces = list(load_paths(paths, on_error=errors.append))
        assert [t.trace_id for t in traces] == [t.trace_id for t in once]
        assert [[s.span_id for s in t.spans] for t in traces] == [
            [s.span_id for s in t.spans] for t in once]
        assert [(str(e.path), e.problem.split(": ")[-1]) for e in errors] == [
            (str(paths[1]), f"{sum(len(t.spans) for t in once)} late")]
