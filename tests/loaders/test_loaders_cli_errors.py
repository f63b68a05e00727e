"""Hostile or malformed input files through the ``otel-eval`` command, as a subprocess: each is
reported on stderr with its path, never a traceback, and the exit code says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "otel_eval", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _tau_run(**fields: object) -> dict[str, object]:
    return {"task_id": 1, "reward": 1, "traj": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], **fields}


@pytest.mark.parametrize("command", ["eval", "show", "issues", "train"])
def test_a_number_past_the_digit_limit_is_a_reported_file(tmp_path: Path, command: str) -> None:
    """Python refuses to parse an integer of more than 4,300 digits with a plain ValueError
    (not a JSONDecodeError): the file is refused with its path, not a traceback."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([_tau_run()]).replace('"reward": 1', '"reward": ' + "9" * 5000))
    out = ["--out", str(tmp_path / "model.json")] if command == "train" else []
    done = _cli(command, str(path), *out)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode != 0
    assert f"{path}: not valid JSON" in done.stderr


def _otlp_span(span_id: str, parent: str | None) -> dict[str, object]:
    span: dict[str, object] = {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id,
                               "name": "invoke_agent a", "startTimeUnixNano": "1",
                               "endTimeUnixNano": "5", "attributes": [
                                   {"key": "gen_ai.operation.name",
                                    "value": {"stringValue": "invoke_agent"}}]}
    if parent:
        span["parentSpanId"] = parent
    return span


def test_inspect_reports_a_file_it_cannot_load_and_reads_the_others(tmp_path: Path) -> None:
    """inspect took the loaders' errors as exceptions: a file of an unknown shape, or one
    span the OTLP decoder rejects, stopped it with a traceback (the good spans unread)."""
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"foo": 1}')
    partly = tmp_path / "partly.json"
    bad = {**_otlp_span("a000000000000002", "a000000000000001"), "spanId": "zz"}
    partly.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
        _otlp_span("a000000000000001", None), bad]}]}]}))
    done = _cli("inspect", str(unknown), str(partly), "--format", "json")
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
    assert f"{unknown}: JSON of an unknown shape" in done.stderr
    assert f"{partly}: " in done.stderr  # the rejected span, with the decoder's reason
    [report] = json.loads(done.stdout)  # the good span of partly.json is read
    assert report["trace_id"] == "5b8efff798038103d269b633813fc60c"


def test_replay_reports_a_file_it_cannot_load(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.json"
    unknown.write_text('{"foo": 1}')
    done = _cli("replay", str(unknown), "--endpoint", "127.0.0.1:9")  # nothing is sent
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
    assert f"{unknown}: JSON of an unknown shape" in done.stderr
    assert done.stdout.startswith("replayed 0 spans")


@pytest.fixture
def refusing_receiver() -> Iterator[str]:
    """An OTLP/HTTP receiver that answers every request 400 (the exporter does not retry)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_replay_to_a_receiver_that_fails_the_export_is_one_line(tmp_path: Path,
                                                                 refusing_receiver: str) -> None:
    """The exporter giving up on a batch (a receiver down or refusing) raised ReplayError out
    of main: a traceback, and nothing on stdout saying how many spans went."""
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([_tau_run()]))
    done = _cli("replay", str(path), "--endpoint", refusing_receiver, "--protocol", "http")
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 1
    assert "otel-eval replay: exporter failed a batch of 2 spans after 0 spans were " \
           "delivered" in done.stderr


@pytest.mark.parametrize("command", ["eval", "show", "issues", "inspect", "train"])
def test_a_files_error_quoting_its_content_escapes_control_characters(
        tmp_path: Path, command: str) -> None:
    """protobuf's json_format quotes the value it could not parse (``Couldn't parse float:
    ...``): eval, show, issues and train printed it raw, so a trace file could write escape
    sequences to the user's terminal (an OSC title or clipboard write, a colour, a cursor
    move), as span content printed raw would."""
    span = _otlp_span("a000000000000001", None)
    span["attributes"] = [{"key": "x", "value": {"doubleValue": "\x1b]0;PWNED\x07\x1b[31m"}}]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}))
    out = ["--out", str(tmp_path / "model.json")] if command == "train" else []
    done = _cli(command, str(path), *out)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"{path}: " in done.stderr
    assert "\\x1b]0;PWNED\\x07" in done.stderr  # the value, visible
    assert "\x1b" not in done.stderr + done.stdout and "\x07" not in done.stderr


@pytest.mark.parametrize("command", ["eval", "show", "issues", "inspect", "train"])
def test_a_json_line_nested_too_deep_is_a_reported_file(tmp_path: Path, command: str) -> None:
    """A collector JSON-lines file whose second line nests past Python's recursion limit:
    json.loads raised RecursionError inside the handler of the first line's "Extra data",
    past the loader's own RecursionError clause, and every command stopped with a
    traceback."""
    path = tmp_path / "traces.jsonl"
    first = json.dumps({"resourceMetrics": []})  # another signal's line: skipped
    path.write_text(first + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    out = ["--out", str(tmp_path / "model.json")] if command == "train" else []
    done = _cli(command, str(path), *out)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode != 0
    assert f"{path}: line 2: not valid JSON" in done.stderr


def test_eval_of_no_trace_says_so_and_exits_1(tmp_path: Path) -> None:
    """``eval`` of an empty directory (a wrong path, a glob that matched a folder of other
    files) exited 0 with nothing on stderr, as if every run had passed; ``inspect`` and
    ``show`` say "no trace" and exit 1. Now eval says so and exits 1 too."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "no_spans.json").write_text('{"resourceSpans": []}')
    for path in (tmp_path / "empty", tmp_path / "no_spans.json"):
        for fmt in ("table", "jsonl"):
            done = _cli("eval", str(path), "--format", fmt)
            assert done.returncode == 1, done.stderr
            assert f"otel-eval eval: no trace in {path}" in done.stderr
            assert "Traceback" not in done.stderr


def test_eval_exit_1_is_documented_for_a_file_read_with_spans_refused(tmp_path: Path) -> None:
    """A copy of an export given twice is read whole, its spans refused (``duplicate_span``)
    and reported, and eval exits 1 (as replay does for the copy); the exit codes (``--help``,
    docs/guide.md) said 1 meant a file could not be read, and 0 every file read: a CI job
    reading them took a file read with a problem for a missing file."""
    copy = (ROOT / "tests" / "data" / "loaders" / "otlp_request.json").read_text()
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(copy)
    done = _cli("eval", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert done.returncode == 1, done.stderr
    assert "duplicate_span" in done.stderr
    usage = " ".join(_cli("eval", "--help").stdout.split())
    assert "1: a file could not be read, or spans or log records in one were refused" in usage
