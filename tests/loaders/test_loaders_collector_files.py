"""``otel-eval eval`` over a directory the collector's file exporters wrote (``file/traces``,
``file/logs``, one exporter in several pipelines), as a CI job runs it: a clean run exits 0
with its result on stdout, whatever else the exporters left beside it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRACE = "5b8efff798038103d269b633813fc60c"


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "otel_eval", *argv], env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _span(span_id: str, parent: str | None, name: str, start: int, end: int,
          **attributes: str) -> dict[str, object]:
    span: dict[str, object] = {
        "traceId": TRACE, "spanId": span_id, "name": name,
        "startTimeUnixNano": str(1_700_000_000_000_000_000 + start * 10**9),
        "endTimeUnixNano": str(1_700_000_000_000_000_000 + end * 10**9),
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]}
    if parent:
        span["parentSpanId"] = parent
    return span


def _traces_line() -> str:
    """One request of a finished run: an agent span and a tool call under it."""
    spans = [_span("00000000000000b1", "00000000000000a1", "execute_tool search", 1, 2,
                   **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}),
             _span("00000000000000a1", None, "invoke_agent planner", 0, 3,
                   **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})]
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "agent"}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]})


def _evaluated(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [json.loads(line)["trace_id"] for line in done.stdout.splitlines()]


def test_an_empty_file_exporter_output_beside_the_traces_passes(tmp_path: Path) -> None:
    """The file exporter creates its file when the collector starts: a ``file/logs`` exporter
    of an agent that sent no log records leaves an empty file. eval refused it ("neither
    JSON nor an OTLP protobuf request") and exited 1, failing every clean CI run; an empty
    file holds no request (an empty protobuf request, no JSON line) and is read as none."""
    (tmp_path / "traces.json").write_text(_traces_line() + "\n")
    (tmp_path / "logs.json").write_bytes(b"")
    done = _cli("eval", str(tmp_path), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert _evaluated(done) == [TRACE]
    assert "logs.json" not in done.stderr
    alone = _cli("eval", str(tmp_path / "logs.json"))  # still no trace at all: exit 1, said
    assert alone.returncode == 1 and "no trace in" in alone.stderr


def test_a_one_line_file_of_another_signal_is_skipped_as_its_lines_are(tmp_path: Path) -> None:
    """A file exporter in the metrics pipeline (or the one exporter of every pipeline) that
    flushed once wrote one line of metrics: read as a whole JSON document, it was "JSON of
    an unknown shape" and eval exited 1, while the same line among others is skipped."""
    metrics = json.dumps({"resourceMetrics": [{"resource": {}, "scopeMetrics": [{
        "scope": {}, "metrics": [{"name": "m", "gauge": {"dataPoints": [
            {"asInt": "1", "timeUnixNano": "1"}]}}]}]}]})
    (tmp_path / "traces.json").write_text(_traces_line() + "\n")
    (tmp_path / "metrics.json").write_text(metrics + "\n")
    (tmp_path / "metrics2.json").write_text(metrics + "\n" + metrics + "\n")
    done = _cli("eval", str(tmp_path), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert _evaluated(done) == [TRACE]
    assert "metrics" not in done.stderr


def _service_line(service: str, spans: list[dict[str, object]]) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": service}}]},
        "scopeSpans": [{"scope": {"name": "t"}, "spans": spans}]}]})


def test_a_run_over_two_services_files_is_one_trace_whatever_their_order(tmp_path: Path) -> None:
    """The file exporter's ``group_by`` (or a collector per service) writes a file per
    service: the agent's file holds the root, ended, and the tool call; the MCP server's
    file the call's server span, failed. Read first, the agent's file released the run as
    "surely ended" without the server's span (its verdict passed, 2 spans), then refused
    that span as ``late`` and exited 1: the run split over files was not one trace."""
    agent = tmp_path / "agent.json"
    server = tmp_path / "mcp-server.json"
    agent.write_text(_service_line("agent", [
        _span("00000000000000b1", "00000000000000a1", "execute_tool search", 1, 3,
              **{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search"}),
        _span("00000000000000a1", None, "invoke_agent planner", 0, 9,
              **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})])
        + "\n")
    failed = _span("00000000000000c1", "00000000000000b1", "tools/call search", 2, 3,
                   **{"mcp.method.name": "tools/call"})
    failed["status"] = {"code": 2, "message": "upstream refused"}
    server.write_text(_service_line("mcp-server", [failed]) + "\n")
    outputs = []
    for paths in ([tmp_path], [agent, server], [server, agent]):
        done = _cli("eval", *map(str, paths), "--format", "jsonl")
        assert done.returncode == 0, done.stderr
        assert "late" not in done.stderr
        (result,) = [json.loads(line) for line in done.stdout.splitlines()]
        assert result["counts"]["spans"] == 3
        del result["source"]  # the file it was first read from
        outputs.append(result)
    assert outputs[0] == outputs[1] == outputs[2]


def test_the_order_of_the_files_does_not_change_the_evaluation(tmp_path: Path) -> None:
    """api.md: with log records in the input "the order of the files does not change the
    evaluation". The runs came out in the order their files were given, and a run that
    names no agent took it from the runs before it (the agent history): ``eval a b logs``
    named run B's agent ``planner`` (``inferred_history``), ``eval b a logs`` left it
    unknown. The runs are now evaluated in the order they started, whatever the files'."""
    first, second = "a1" * 16, "b2" * 16

    def run(trace: str, *spans: dict[str, object]) -> str:
        return _service_line("agent", [{**s, "traceId": trace} for s in spans])

    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    (tmp_path / "a.json").write_text(run(first, _span(
        "00000000000000a2", "00000000000000a1", "chat gpt-4o", 1, 2, **chat), _span(
        "00000000000000a1", None, "invoke_agent planner", 0, 3,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})) + "\n")
    (tmp_path / "b.json").write_text(run(second, _span(
        "00000000000000b1", None, "chat gpt-4o", 10, 11, **chat)) + "\n")
    (tmp_path / "logs.json").write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{
        "logRecords": [{"timeUnixNano": "1700000010000000000", "traceId": second,
                        "spanId": "00000000000000b1", "eventName": "gen_ai.user.message",
                        "body": {"kvlistValue": {"values": [
                            {"key": "content", "value": {"stringValue": "hi"}}]}}}]}]}]})
        + "\n")
    outputs = []
    for names in (["a.json", "b.json", "logs.json"], ["b.json", "a.json", "logs.json"]):
        done = _cli("eval", *(str(tmp_path / n) for n in names), "--format", "jsonl")
        assert done.returncode == 0, done.stderr
        results = [json.loads(line) for line in done.stdout.splitlines()]
        for result in results:
            del result["source"]  # the file it was first read from
        outputs.append(results)
    assert [r["trace_id"] for r in outputs[0]] == [first, second]
    assert outputs[0] == outputs[1]


def test_a_broken_link_in_the_directory_fails_the_run_naming_it(tmp_path: Path) -> None:
    """A link to the collector's file on a volume the CI job did not mount: walking the
    directory skipped it as no regular file, and eval passed on the other files as if it
    had read everything. A file that cannot be read is reported and the exit code is 1."""
    (tmp_path / "traces.json").write_text(_traces_line() + "\n")
    (tmp_path / "logs.json").symlink_to(tmp_path / "unmounted" / "logs.json")
    done = _cli("eval", str(tmp_path), "--format", "jsonl")
    assert done.returncode == 1
    assert _evaluated(done) == [TRACE]
    assert f"{tmp_path / 'logs.json'}: cannot read" in done.stderr


def test_the_output_is_the_same_bytes_whatever_the_order_of_the_files(tmp_path: Path) -> None:
    """A run's ``source`` was the file read first that held any of it: ``eval agent.json
    server.json`` and ``eval server.json agent.json`` printed the same runs with another
    ``source``. It is now the first of its files by name (spans only: not a logs file)."""
    agent, server, logs = (tmp_path / n for n in ("agent.json", "mcp-server.json", "logs.json"))
    agent.write_text(_service_line("agent", [_span(
        "00000000000000a1", None, "invoke_agent planner", 0, 9,
        **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "planner"})]) + "\n")
    server.write_text(_service_line("mcp-server", [_span(
        "00000000000000c1", "00000000000000a1", "tools/call search", 2, 3,
        **{"mcp.method.name": "tools/call"})]) + "\n")
    logs.write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": "1700000002000000000", "traceId": TRACE, "spanId": "00000000000000c1",
        "eventName": "gen_ai.user.message", "body": {"kvlistValue": {"values": [
            {"key": "content", "value": {"stringValue": "hi"}}]}}}]}]}]}) + "\n")
    outputs = []
    for paths in ([logs, server, agent], [agent, server, logs]):
        done = _cli("eval", *map(str, paths), "--format", "jsonl")
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0])["source"] == str(agent)
