"""``otel-eval issues PATH...``: over TRAIL trace files, over ``eval --format jsonl`` output
produced by the CLI itself, and over evaluation files with judge critiques; bad input exits 2."""

from __future__ import annotations

import gzip
import io
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from issue_fixtures import window

from otel_eval.app.cli import build_parser, main, run_from_args
from otel_eval.app.issues import cmd_issues, is_evaluation
from otel_eval.base.configcheck import ConfigError
from otel_eval.base.results import NOTE_KINDS


def _issues(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    args = build_parser().parse_args(["issues", *argv])
    try:
        run = run_from_args(args)
    except ConfigError as e:  # as main() reports it
        print(f"otel-eval: {e}", file=sys.stderr)
        return 2, ""
    code = cmd_issues(args, run, out)
    return code, out.getvalue()


def _json(*paths: Path) -> dict[str, Any]:
    code, text = _issues(*map(str, paths), "--format", "json")
    assert code == 0, text
    data: dict[str, Any] = json.loads(text)
    return data


def _ids(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(i["issue_id"], i["level"], i["node"]) for i in data["issues"]]


def _expected_finding_critiques(evaluations: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """(trace id, span id, source) of every finding with a message that reports a problem:
    each must be assigned."""
    return Counter((e["trace_id"], (f["span_ids"] or [None])[0], f"finding:{f['detector']}")
                   for e in evaluations for f in e["findings"]
                   if f["message"].strip() and (f["detector"], f["kind"]) not in NOTE_KINDS)


def _assigned(data: dict[str, Any]) -> Counter[tuple[Any, ...]]:
    return Counter((a["trace_id"], a["span_id"], a["source"]) for a in data["assignments"])


@pytest.mark.slow
def test_trail_traces_and_their_eval_jsonl_give_the_same_stable_issues(
        tmp_path: Path, datasets: Path, capsys: pytest.CaptureFixture[str]) -> None:
    traces = datasets / "trail" / "GAIA" / "traces"
    assert main(["eval", str(traces), "--format", "jsonl"]) == 0
    jsonl = tmp_path / "trail.jsonl"
    jsonl.write_text(capsys.readouterr().out)
    evaluations = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(evaluations) == 56 and all(is_evaluation(e) for e in evaluations)

    from_traces, from_jsonl, again = _json(traces), _json(jsonl), _json(jsonl)
    expected = _expected_finding_critiques(evaluations)
    assert sum(expected.values()) > 50  # detectors find things in TRAIL: a real workload
    for data in (from_traces, from_jsonl):
        assert data["schema"] == "otel-eval.issues/v1" and data["traces"] == 56
        assert _assigned(data) == expected  # every finding has its assignment
        ids = {i["issue_id"] for i in data["issues"]}
        assert data["issues"] and all(a["issue_id"] in ids | {None}
                                      for a in data["assignments"])
        assigned = sum(a["issue_id"] is not None for a in data["assignments"])
        assert assigned >= 0.8 * len(data["assignments"])  # recurring, not singletons
    # Same input, same ids: traces vs their jsonl, and one run vs the next.
    assert _ids(from_traces) == _ids(from_jsonl) == _ids(again)
    assert from_traces["assignments"] == from_jsonl["assignments"] == again["assignments"]


def test_judge_critiques_from_evaluation_files(tmp_path: Path) -> None:
    evs = window(12)
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in evs[:6]))
    packed = tmp_path / "evals-2.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps(e) + "\n" for e in evs[6:8]).encode()))
    listed = tmp_path / "more.json"
    listed.write_text(json.dumps(evs[8:], indent=2))  # a JSON list of evaluations
    data, again = _json(jsonl, packed, listed), _json(tmp_path)  # files, then their directory
    critiques = Counter((e["trace_id"], c.get("span_id"), "judge:quality")
                        for e in evs for c in e["judge"]["judges"]["quality"]["critiques"])
    assert _assigned(data) == critiques and data["critiques"] == sum(critiques.values())
    assert {(level, node) for _, level, node in _ids(data)} == {("system", ""),
                                                               ("node", "searcher")}
    assert len(data["issues"]) == 3 and all(a["issue_id"] for a in data["assignments"])
    # The directory lists the files in another order: same issues, same assignments.
    assert _ids(data) == _ids(again)
    assert sorted(map(json.dumps, data["assignments"])) == sorted(
        map(json.dumps, again["assignments"]))


def test_table_shows_every_issue(tmp_path: Path) -> None:
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in window(12)))
    code, table = _issues(str(jsonl))
    assert code == 0
    lines = table.splitlines()
    assert lines[0].split() == ["level", "node", "id", "share", "trend", "status", "severity",
                                "runs", "exemplar", "title"]
    data = _json(jsonl)
    for issue in data["issues"]:
        row = next(line for line in lines if issue["issue_id"] in line)
        level, node, _, share, trend, status, severity, runs, exemplar = row.split()[:9]
        assert (level, node, trend) == (issue["level"], issue["node"] or "-", "new")
        assert (status, severity, runs) == ("new", issue["severity"], str(issue["traces"]))
        assert share == f"{issue['share'] * 100:.1f}%" and exemplar == issue["exemplars"][0]
    assert lines[-1].startswith("3 issues from 22 critiques in 12 traces")


# an OSC 52 clipboard write, then a carriage return and an erased line that fakes the row
EVIL = "bot\x1b]52;c;ZWNobyBwd25lZA==\x07\r\x1b[2K\x1b[32mALL GOOD"


def test_table_escapes_span_content_as_show_does(tmp_path: Path) -> None:
    """The node (span content) and the titles reached the terminal raw; now escaped before
    the columns are measured, as ``show`` and ``inspect`` escape them."""
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text("".join(json.dumps(e).replace("searcher", json.dumps(EVIL)[1:-1]) + "\n"
                             for e in window(12)))
    code, table = _issues(str(jsonl))
    assert code == 0
    assert not any(c in table for c in "\x1b\x07\r")
    rows = [line for line in table.splitlines() if line.startswith("node")]
    assert rows and all("bot\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\r\\x1b[2K" in r for r in rows)
    assert len({r.index(" iss_") for r in rows}) == 1  # the columns still line up

@pytest.mark.parametrize(("name", "content", "message"), [
    ("garbage.json", b"this is not a trace", "garbage.json"),
    ("broken.jsonl", None, "broken.jsonl:2"),
    ("half.json.gz", b"\x1f\x8b\x08\x00truncated", "half.json.gz"),
])
def test_bad_files_exit_2_naming_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          name: str, content: bytes | None,
                                          message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content if content is not None else
                     (json.dumps(window(1)[0]) + "\n{broken\n").encode())
    code, out = _issues(str(path), "--format", "json")
    assert code == 2 and out == ""  # nothing printed from part of the input
    assert message in capsys.readouterr().err


def test_an_evaluation_line_nested_too_deep_exits_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A line of an evaluation file nested past the recursion limit: json.loads raised
    RecursionError, which no handler took, and issues stopped with a traceback."""
    path = tmp_path / "deep.jsonl"
    path.write_text(json.dumps(window(1)[0]) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    code, out = _issues(str(path), "--format", "json")
    assert code == 2 and out == ""
    assert "deep.jsonl:2: not JSON" in capsys.readouterr().err


def test_missing_path_and_bad_config_exit_2(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert _issues(str(tmp_path / "nope.jsonl"))[0] == 2
    assert "nope.jsonl" in capsys.readouterr().err
    good = tmp_path / "evals.jsonl"
    good.write_text(json.dumps(window(1)[0]) + "\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("issues:\n  top_k: 0\n  no_such_key: 1\n")
    assert _issues(str(good), "--config", str(bad))[0] == 2
    assert "no_such_key" in capsys.readouterr().err


def test_config_file_reaches_the_clustering(tmp_path: Path) -> None:
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text("".join(json.dumps(e) + "\n" for e in window(12)))
    config = tmp_path / "c.yaml"
    config.write_text("issues:\n  min_cluster_size: 100\n")  # no cluster recurs that much
    data = _json(jsonl, Path("--config"), config)
    assert data["issues"] == [] and all(a["issue_id"] is None for a in data["assignments"])


def _run(trace_id: str, *findings: tuple[str, str, str, str]) -> dict[str, Any]:
    return {"trace_id": trace_id, "agent": "airline", "steps": [],
            "verdict": {"passed": False, "reasons": []},
            "findings": [{"detector": d, "kind": k, "severity": sev, "message": m,
                          "span_ids": [], "step_indexes": []} for d, k, sev, m in findings]}


def test_a_finding_that_says_a_run_went_right_is_in_no_issue(tmp_path: Path) -> None:
    # The guide's example: `otel-eval issues` over `eval --references ... --format jsonl`
    # of tau-bench. "calls match the reference" (info) clustered with "calls do not match"
    # (error): the issue "calls do not match the reference" held every run, the 24 that
    # matched among them (share 100 %, critical); and "X failed and was never recovered"
    # was mostly runs that recovered. A success finding is no critique, as a judge critique
    # scoring above the threshold is none.
    runs = []
    for i in range(12):
        mismatch = ("reference", "mismatch", "error",
                    f"calls do not match the reference for task {i} (any_order, arguments "
                    "exact): missing update_reservation_flights")
        match = ("reference", "match", "info",
                 f"calls match the reference for task {i} (any_order, arguments exact)")
        gave_up = ("recovery", "gave_up", "warning",
                   "update_reservation_flights failed and was never recovered from")
        recovered = ("recovery", "recovered", "info",
                     "recovered from a failed update_reservation_flights with "
                     "transfer_to_human_agents")
        runs.append(_run(f"{i:032x}", mismatch, gave_up))
        runs.append(_run(f"{i + 100:032x}", match, recovered))
    path = tmp_path / "eval.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs), encoding="utf-8")
    data = _json(path)
    good = {r["trace_id"] for r in runs[1::2]}
    assert data["issues"]
    assert not [a for a in data["assignments"] if a["trace_id"] in good]
    assert all(i["traces"] == 12 for i in data["issues"])


def _otlp_span(trace: str, span: str, parent: str | None, name: str,
               attrs: dict[str, str]) -> dict[str, Any]:
    return {"traceId": trace, "spanId": span, "parentSpanId": parent or "", "name": name,
            "startTimeUnixNano": "1764547200000000000", "endTimeUnixNano": "1764547201000000000",
            "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}


def _agent_run(trace: str, agent: str, system: str, tool: str) -> list[dict[str, Any]]:
    """An agent's run: its invoke_agent span, then a chat span with its prompt and tool."""
    messages = [{"role": "system", "parts": [{"type": "text", "content": system}]},
                {"role": "user", "parts": [{"type": "text", "content": f"task {trace}"}]}]
    tools = [{"type": "function", "name": tool, "parameters": {}}]
    root = trace[:15] + "1"
    return [_otlp_span(trace, root, None, f"invoke_agent {agent}",
                       {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent}),
            _otlp_span(trace, trace[:15] + "2", root, "chat gpt-4o",
                       {"gen_ai.operation.name": "chat",
                        "gen_ai.input.messages": json.dumps(messages),
                        "gen_ai.tool.definitions": json.dumps(tools)})]


def _otlp_file(path: Path, spans: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name",
                                     "value": {"stringValue": "shop"}}]},
        "scopeSpans": [{"spans": spans}]}]}), encoding="utf-8")
    return path


def test_trace_files_are_evaluated_as_eval_evaluates_them(tmp_path: Path) -> None:
    """``issues`` over trace files reads the evaluations ``eval`` gives: the files one stream
    (a run whose spans are in two files is one run) and the agent history of the runs
    before (a run no span names gets the agent its service's earlier runs show)."""
    from otel_eval.app.config import Config
    from otel_eval.app.issues import evaluations
    from otel_eval.app.offline import EvalRun

    planner = _agent_run("a" * 32, "planner", "Plan.", "plan")
    coder = _agent_run("b" * 32, "coder", "Code.", "run_tests")
    hung = _agent_run("c" * 32, "coder", "Code.", "run_tests")[1:]  # its agent span never came
    files = [_otlp_file(tmp_path / "1.json", [*planner, coder[1]]),  # the run's chat ...
             _otlp_file(tmp_path / "2.json", [coder[0], *hung])]  # ... its agent span after

    def seen(evaluations: Any) -> list[tuple[Any, ...]]:
        return [(e["trace_id"][0], e["agent"], e["agent_source"], e["status"],
                 len(e["steps"]), e["counts"]["llm_calls"]) for e in evaluations]

    by_eval = seen(e.to_json() for e in EvalRun(Config(), [str(tmp_path)]).evaluations())
    assert by_eval == [("a", "planner", "span", "complete", 2, 1),
                       ("b", "coder", "span", "complete", 2, 1),
                       ("c", "coder", "inferred_history", "complete", 1, 1)]
    assert seen(evaluations([str(tmp_path)], EvalRun(Config()))) == by_eval
    assert seen(evaluations([str(f) for f in files], EvalRun(Config()))) == by_eval


@pytest.mark.parametrize("kind", ["evaluations", "traces"])
def test_a_pipe_is_read_once(tmp_path: Path, kind: str) -> None:
    """A path that is a pipe (``issues <(zcat evals.jsonl.gz)``, ``/dev/stdin``) was read
    once to see whether it holds evaluations, then again to read them (or its traces): the
    second read found it empty, and issues refused it as no trace file (exit 2)."""
    if kind == "evaluations":
        content = "".join(json.dumps(e) + "\n" for e in window(12)).encode()
    else:
        content = (Path(__file__).parents[1] / "data" / "loaders" / "otlp_request.json"
                   ).read_bytes()
    copy = tmp_path / "copy.json"
    copy.write_bytes(content)
    read, write = os.pipe()
    try:
        os.write(write, content)  # within the pipe's buffer
        os.close(write)
        code, text = _issues(f"/dev/fd/{read}", "--format", "json")
    finally:
        os.close(read)
    assert code == 0, text
    assert _assigned(json.loads(text)) == _assigned(_json(copy))


def test_a_gzip_bomb_exits_2_naming_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """An evaluation file ``.gz`` was read through ``gzip.open`` with no bound (its first
    line, then its lines or the whole document): a small file could take any memory. Now
    it is refused past ``MAX_GUNZIPPED_BYTES``, exit 2 naming the file."""
    monkeypatch.setattr("otel_eval.decode.compressed.MAX_GUNZIPPED_BYTES", 1 << 20)
    first = (json.dumps(window(1)[0]) + "\n").encode()
    for name, content in (("lines.jsonl.gz", first + b" " * (4 << 20) + b"\n"),
                          ("one_line.jsonl.gz", first[:-1] + b" " * (4 << 20) + b"\n")):
        path = tmp_path / name
        path.write_bytes(gzip.compress(content, compresslevel=1))
        code, out = _issues(str(path), "--format", "json")
        assert code == 2 and out == ""
        err = capsys.readouterr().err
        assert name in err and "limit of 1048576 bytes" in err, err


def test_gzip_is_decided_by_content_not_by_the_name(tmp_path: Path) -> None:
    """Evaluation files were detected by content (gzip magic, a UTF-8 byte order mark
    skipped) but read by suffix and as plain UTF-8: a gzipped file not named ``.gz``
    (UnicodeDecodeError), a plain one named ``.gz`` (BadGzipFile) or one starting with a
    byte order mark was refused, exit 2. They are now read as the loaders read trace files."""
    evs = window(12)
    text = "".join(json.dumps(e) + "\n" for e in evs).encode()
    plain, packed = tmp_path / "plain", tmp_path / "packed"
    plain.mkdir()
    packed.mkdir()
    (plain / "evals.jsonl").write_bytes(text)
    (packed / "evals.jsonl").write_bytes(gzip.compress(text))  # gzip without the suffix
    (tmp_path / "evals.jsonl.gz").write_bytes(text)  # plain with the suffix
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + text)  # as Windows editors save
    expected = _json(plain / "evals.jsonl")
    for path in (packed / "evals.jsonl", tmp_path / "evals.jsonl.gz", tmp_path / "bom.jsonl"):
        data = _json(path)
        assert _ids(data) == _ids(expected) and data["critiques"] == expected["critiques"]


def test_issue_titles_and_descriptions_are_redacted_as_the_web_view_redacts(
        tmp_path: Path) -> None:
    """A finding message quotes span content (the run's error text); an issue's title and
    description are its words, published on /v1/issues, the web view, the gauges' title label
    and Grafana: they carry the judge's redaction (``judge.redaction``), as the run's page
    shows that message, never the e-mail address or card number as recorded."""
    lines = []
    for i in range(6):
        message = (f"the run failed: no account for user{i % 2}@example.com; card "
                   "4111 1111 1111 1111 was declined")
        lines.append(json.dumps({
            "trace_id": f"{i:032x}", "agent": "shop", "service": "svc", "steps": [],
            "findings": [{"detector": "non_termination", "kind": "failed",
                          "severity": "error", "message": message, "span_ids": [],
                          "step_indexes": [], "attributes": {}}]}))
    path = tmp_path / "evaluations.jsonl"
    path.write_text("\n".join(lines) + "\n")
    data = _json(path)
    assert data["issues"]
    shown = json.dumps(data)
    assert "example.com" not in shown and "4111" not in shown
    assert any("[EMAIL]" in i["description"] for i in data["issues"])


def test_zstd_evaluation_files_are_read_as_eval_reads_zstd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``eval`` reads zstd (the file exporter's ``compression: zstd``), ``issues`` read its
    evaluation files through a reader of gzip only: ``eval ... --format jsonl | zstd``
    was taken for a trace file and refused, exit 2. Now read as the loaders read zstd (one
    stream or a frame after another, whatever the name), bounded alike."""
    import cramjam

    evs = window(12)
    text = "".join(json.dumps(e) + "\n" for e in evs).encode()
    (tmp_path / "plain.jsonl").write_bytes(text)
    expected = _json(tmp_path / "plain.jsonl")
    stream, frames = tmp_path / "evals.jsonl.zst", tmp_path / "frames.jsonl"
    stream.write_bytes(bytes(cramjam.zstd.compress(text)))
    frames.write_bytes(b"".join(bytes(cramjam.zstd.compress((json.dumps(e) + "\n").encode()))
                                for e in evs))
    for path in (stream, frames):
        data = _json(path)
        assert _ids(data) == _ids(expected) and data["critiques"] == expected["critiques"]
    monkeypatch.setattr("otel_eval.decode.compressed.MAX_GUNZIPPED_BYTES", 1 << 20)
    bomb = tmp_path / "bomb.jsonl.zst"
    bomb.write_bytes(bytes(cramjam.zstd.compress(
        (json.dumps(evs[0]) + "\n").encode() + b" " * (4 << 20) + b"\n")))
    capsys.readouterr()
    code, out = _issues(str(bomb), "--format", "json")
    assert code == 2 and out == ""
    err = capsys.readouterr().err
    assert "bomb.jsonl.zst" in err and "limit of 1048576 bytes" in err, err


def test_eval_jsonl_with_conversations_gives_what_its_traces_give(tmp_path: Path) -> None:
    """``eval --format jsonl`` prints a ``{"record": "session", ...}`` line per conversation
    after the trace records. Session findings are no issue (serve's issues job reads the
    stored runs alone), and such a record is no malformed evaluation either: the jsonl gives
    what its trace files give. Before, each session record was counted ``skipped``, as a
    malformed line, so the same runs read from their eval output reported parts skipped."""
    from sessions.conversations import call, scripted

    turns = scripted("issues-loop", "session.id", [
        (f"what is the status of my booking, question {n}",
         [call("get_reservation_details", {"reservation_id": "ZFA04Y"}, f"c{n}"),
          {"role": "assistant", "content": "Confirmed."}]) for n in range(4)])
    traces = tmp_path / "traces"
    traces.mkdir()
    for number, (_, body) in enumerate(turns):
        (traces / f"turn-{number}.json").write_text(json.dumps(body))
    out = io.StringIO()
    from otel_eval.app.cli import cmd_eval
    assert cmd_eval(build_parser().parse_args(["eval", str(traces), "--format", "jsonl"]),
                    out) == 0
    assert '"record": "session"' in out.getvalue()
    jsonl = tmp_path / "evals.jsonl"
    jsonl.write_text(out.getvalue())
    from_traces, from_jsonl = _json(traces), _json(jsonl)
    assert from_traces["traces"] == from_jsonl["traces"] == 4
    assert from_jsonl["skipped"] == from_traces["skipped"] == 0
    assert from_jsonl["assignments"] == from_traces["assignments"]


def test_a_namer_cap_on_a_model_without_a_price_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``issues`` names and merges issues with the judge model under the same hourly cap;
    a model litellm has no price for (no judge prices) was costed $0 a call there too, the
    cap never reached. Refused before any call, as ``eval`` and ``serve`` refuse it."""
    path = tmp_path / "evals.jsonl"  # evaluations: no judge run over them, only the namer
    path.write_text("".join(json.dumps(e) + "\n" for e in window(12)))
    code, _ = _issues(str(path), "--judge", "openai/gpt-9-unreleased", "--judge-api-base",
                      "http://127.0.0.1:9/v1")
    err = capsys.readouterr().err
    assert code == 2 and "litellm has no price for openai/gpt-9-unreleased" in err, err


def test_a_namer_without_its_provider_key_is_refused_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``issues`` names and merges issues with the judge model: without the provider's key
    every namer call failed ("Missing credentials") and the command went on with unnamed
    issues. Refused before any call, as ``eval`` and ``serve`` refuse it."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = tmp_path / "evals.jsonl"  # evaluations: no judge run over them, only the namer
    path.write_text("".join(json.dumps(e) + "\n" for e in window(12)))
    code, _ = _issues(str(path), "--judge", "openai/gpt-4o-mini")
    err = capsys.readouterr().err
    assert code == 2 and "needs OPENAI_API_KEY" in err, err


def test_the_offline_run_holds_what_clustering_reads_not_whole_evaluations() -> None:
    """``otel-eval issues`` over ``eval --format jsonl`` reads the evaluations as a stream,
    but the run kept each whole (every step's inputs and outputs) until the end, as serve's
    job did before it kept ``critique_fields`` of each stored body: a week of eval output was
    gigabytes held. It holds what clustering reads, as serve does."""
    import tracemalloc

    from otel_eval.outputs.issues.tracker import issues_offline

    def stream(n: int) -> Any:
        for i in range(n):
            tid = f"{i + 1:032x}"
            yield {"trace_id": tid, "agent": "shop", "service": "svc",
                   "steps": [{"index": 0, "span_id": f"{i + 1:016x}", "node": "shop",
                              "output": "x" * 100_000}],
                   "findings": [{"detector": "loop", "kind": "repeated_call",
                                 "severity": "error", "span_ids": [f"{i + 1:016x}"],
                                 "message": "search called 3 times with the same arguments"}]}

    issues_offline(stream(4))  # the clustering's modules imported before measuring
    tracemalloc.start()
    try:
        result = issues_offline(stream(400))  # 40 MB of step outputs in all
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.traces == 400 and result.issues
    assert peak < 10_000_000, peak
