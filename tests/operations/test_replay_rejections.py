"""Issue 21: ``otel-eval replay`` says how many spans the receiver rejected, and why.

Before, it printed "replayed 11 spans", exit 0, when the server had rejected all 11 as
duplicates: the SDK exporters count a partial success as a success and drop its answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.harness import running_service

from otel_eval.app.cli import main
from otel_eval.base.model import Span
from otel_eval.decode import encode, otlp_json

TRACE = "b2" * 16


def _trace_file(tmp_path: Path) -> Path:
    spans = [Span(TRACE, f"{1:016x}", None, "invoke_agent", 10, 40),  # root still open: held
             Span(TRACE, f"{2:016x}", f"{1:016x}", "chat", 10, 20),
             Span(TRACE, f"{3:016x}", f"{1:016x}", "execute_tool", 20, 30)]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(otlp_json.request_to_json(encode.encode_spans(spans))))
    return path


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_replay_exits_1_and_names_the_rejections(tmp_path: Path, protocol: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = _trace_file(tmp_path)
    with running_service(tmp_path, **{"assembly.grace_s": 3600}) as h:
        assert h.svc.grpc is not None and h.svc.http is not None
        port = h.svc.grpc.port if protocol == "grpc" else h.svc.http.port
        argv = ["replay", str(path), "--endpoint", f"127.0.0.1:{port}", "--protocol", protocol]
        assert main(argv) == 0
        first = capsys.readouterr()
        assert "replayed 3 spans" in first.out and "3 accepted, 0 rejected" in first.out
        assert main(argv) == 1  # the same spans again: duplicates of a trace still open
        again = capsys.readouterr()
        assert "3 accepted" not in again.out and "0 accepted, 3 rejected" in again.out
        assert "rejected 3 of 3 spans" in again.err and "3 duplicate_span" in again.err
