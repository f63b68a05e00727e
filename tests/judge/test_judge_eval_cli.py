"""``otel-eval eval --judge``: the offline run judges every trace through litellm against the
scripted loopback LLM, prints a cost line, and stops judging at ``--max-cost-usd``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from judge_fake_llm import FakeLLM, completion
from test_judge_serve import _scripted, _spans

from otel_eval.app.cli import main
from otel_eval.base import model
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp_json import request_to_json


def _trace_file(tmp_path: Path, n: int, task_id: str | None = None) -> Path:
    spans = []
    for i in range(n):
        tid = f"{i + 1:032x}"
        for s in _spans():
            attrs = dict(s.attributes)
            if task_id and s.parent_span_id is None:
                attrs["otel_eval.task.id"] = task_id
            spans.append(model.Span(tid, s.span_id, s.parent_span_id, s.name, s.start_ns,
                                    s.end_ns, resource=s.resource, attributes=attrs))
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request_to_json(encode_spans(spans))))
    return path


def _run(tmp_path: Path, llm: FakeLLM, capsys: pytest.CaptureFixture[str], n: int,
         *extra: str, task_id: str | None = None) -> tuple[list[dict[str, object]], str]:
    (tmp_path / "c.yaml").write_text("judge:\n  max_concurrency: 1\n  max_retries: 0\n")
    code = main(["eval", str(_trace_file(tmp_path, n, task_id)), "--format", "jsonl", "--config",
                 str(tmp_path / "c.yaml"), "--judge", "openai/gpt-4o-mini",
                 "--judge-api-base", llm.api_base, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()], err


def test_eval_judges_each_trace_and_prints_the_cost(llm: FakeLLM, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    llm.route = _scripted
    bodies, err = _run(tmp_path, llm, capsys, 3)
    assert [b["trace_id"] for b in bodies] == [f"{i:032x}" for i in (1, 2, 3)]  # input order
    for b in bodies:
        judge = b["judge"]
        assert isinstance(judge, dict) and judge["overall"]["status"] == "ok"
    assert len(llm.requests) == 3
    assert "judge openai/gpt-4o-mini: 3 traces judged in 3 calls, 3000 input + 300 output " \
           "tokens, $" in err


def test_max_cost_stops_judging_and_says_so(llm: FakeLLM, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    llm.route = _scripted
    # gpt-4o-mini: 1000 input + 100 output tokens cost $0.00021 a call (litellm's price map)
    bodies, err = _run(tmp_path, llm, capsys, 5, "--max-cost-usd", "0.0003")
    statuses = [b["judge"]["overall"].get("reason", b["judge"]["overall"]["status"])  # type: ignore[index]
                for b in bodies]
    # one trace in flight at a time: judged while spend < cap (0, 0.00021), then the one
    # already started when the cap was crossed; the rest skipped
    assert statuses == ["ok", "ok", "ok", "max_cost", "max_cost"]
    assert len(llm.requests) == 3
    assert "3 traces judged" in err and "skipped: 2 max_cost" in err


def test_garbage_replies_are_parse_errors_in_the_output(llm: FakeLLM, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    llm.route = lambda body: completion("{not json")
    bodies, _ = _run(tmp_path, llm, capsys, 1)
    entry = bodies[0]["judge"]["judges"]["combined"]  # type: ignore[index]
    assert entry["status"] == "parse_error" and entry["scores"] == {}
    assert bodies[0]["verdict"] is not None


def test_trials_of_a_task_report_pass_at_k_and_lucky_passes(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    llm.route = _scripted  # outcome 1.0; process = mean(0.6, 0.6, 0.6, 0.2) = 0.5 < 0.6
    bodies, err = _run(tmp_path, llm, capsys, 3, task_id="airline-7")
    assert all(b["task_id"] == "airline-7" for b in bodies)
    assert "airline-7  3  0  0.00  0.00  " + ", ".join(f"{i:032x}" for i in (1, 2, 3)) in err
    assert "1 tasks with 2+ judged trials: mean pass@k 0.00, pass^k 0.00; 3 lucky passes" in err


EVIL = "bot\x1b]52;c;ZWNobyBwd25lZA==\x07\r\x1b[2K"  # OSC 52 clipboard write, line erased


def test_trials_table_escapes_the_task_id(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    llm.route = _scripted
    _, err = _run(tmp_path, llm, capsys, 2, task_id=EVIL)
    assert not any(c in err for c in "\x1b\x07\r")
    assert "bot\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\r\\x1b[2K  2  0  " in err


def test_eval_table_escapes_the_agent(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The agent name is span content; the table printed it raw (as ``calibrate`` and
    ``issues`` did), ``show`` and ``inspect`` escape it."""
    tid = "ab" * 16
    spans = [model.Span(tid, f"{1:016x}", None, "invoke_agent", 1, 10, attributes={
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": EVIL})]
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request_to_json(encode_spans(spans))))
    assert main(["eval", str(path)]) == 0
    out = capsys.readouterr().out
    assert not any(c in out for c in "\x1b\x07\r")
    assert f"{tid}  bot\\x1b]52;c;ZWNobyBwd25" in out

def _failing_trace_file(tmp_path: Path, calls: int) -> Path:
    """One run of ``calls`` LLM calls, each followed by a failed tool call (a finding and a
    verdict reason each)."""
    tid, root = "cd" * 16, f"{1:016x}"
    res = {"service.name": "s"}
    spans = [model.Span(tid, root, None, "invoke_agent a", 1, 10**9, resource=res,
                        attributes={"gen_ai.operation.name": "invoke_agent",
                                    "gen_ai.agent.name": "a"})]
    for i in range(calls):
        spans.append(model.Span(
            tid, f"{2 * i + 2:016x}", root, "chat", 10 + 4 * i, 11 + 4 * i, resource=res,
            attributes={"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                        "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 10}))
        tool = model.Span(tid, f"{2 * i + 3:016x}", root, f"execute_tool t{i}", 12 + 4 * i,
                          13 + 4 * i, resource=res,
                          attributes={"gen_ai.operation.name": "execute_tool",
                                      "gen_ai.tool.name": f"tool_{i}_" + "T" * 40,
                                      "error.type": "E" * 280})
        tool.status, tool.status_message = "error", "E" * 280
        spans.append(tool)
    path = tmp_path / "failing.json"
    path.write_text(json.dumps(request_to_json(encode_spans(spans))))
    return path


def test_a_result_cut_to_max_result_bytes_keeps_its_judge_within_the_bound(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The result was cut before the judge was set, and printed as cut: without its judge
    # (and its findings, never cut, were over the bound by themselves). One judge call
    # (max_steps_per_call 1000, and an output limit their grades fit in): this is about the
    # stored result, not the chunks
    llm.route = _scripted
    limit = 64 * 1024
    (tmp_path / "c.yaml").write_text(f"trajectory:\n  max_result_bytes: {limit}\n"
                                     "judge:\n  max_retries: 0\n  max_steps_per_call: 1000\n"
                                     "  max_output_tokens: 1000000\n")
    code = main(["eval", str(_failing_trace_file(tmp_path, 400)), "--format", "jsonl",
                 "--config", str(tmp_path / "c.yaml"), "--judge", "openai/gpt-4o-mini",
                 "--judge-api-base", llm.api_base])
    out, err = capsys.readouterr()
    assert code == 0, err
    (line,) = out.splitlines()
    body = json.loads(line)
    assert body["judge"]["overall"]["status"] == "ok"
    assert isinstance(body["judge"]["overall"]["passed"], bool)
    assert body["verdict"]["passed"] is False
    assert len(line.encode()) <= limit
    (cut,) = [f for f in body["findings"] if f["kind"] == "result_truncated"]
    assert len(body["findings"]) - 1 + cut["attributes"]["findings_dropped"] >= 400
    assert cut["attributes"]["findings_dropped"] > 0
    reasons = body["verdict"]["reasons"]
    assert reasons[-1] == f"({cut['attributes']['reasons_dropped']} more reasons)"


def test_eval_judge_predicts_again_from_the_run_as_read_before_its_result_was_cut(
        llm: FakeLLM, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``eval --judge`` predicts a run again once the judge has scored it: from the run as
    the predictor read it (as ``serve``, ``eval`` and ``train`` read it), not from the result
    cut to ``max_result_bytes`` (before, its steps cut and the ``result_truncated`` finding
    added: one more info finding, another p_success for a model whose features the judge
    does not touch)."""
    from otel_eval.evaluate.predict.features import FEATURES_VERSION
    from otel_eval.evaluate.predict.modelfile import write_model

    write_model({"format": "otel-eval-predictor", "format_version": 1, "name": "m",
                 "features_version": FEATURES_VERSION,
                 "features": ["findings.info", "results.max_chars", "calls.distinct_ratio"],
                 "scaler": {"mean": [0.0, 0.0, 0.0], "scale": [1.0, 1.0, 1.0]},
                 "coefficients": [0.5, 0.1, 0.3], "intercept": 0.0,
                 "calibration": {"method": "platt", "a": 1.0, "b": -1.0}},
                tmp_path / "m.json")
    llm.route = _scripted
    (tmp_path / "c.yaml").write_text("trajectory:\n  max_result_bytes: 65536\n"
                                     "judge:\n  max_retries: 0\n  max_steps_per_call: 1000\n"
                                     "  max_output_tokens: 1000000\n")
    traces = _failing_trace_file(tmp_path, 400)
    common = ["eval", str(traces), "--format", "jsonl", "--config", str(tmp_path / "c.yaml"),
              "--model", str(tmp_path / "m.json")]

    def p_success(*extra: str) -> tuple[object, dict[str, object]]:
        assert main([*common, *extra]) == 0
        (line,) = capsys.readouterr().out.splitlines()
        body = json.loads(line)
        return body["prediction"]["p_success"], body

    unjudged, body = p_success()
    assert any(f["kind"] == "result_truncated" for f in body["findings"])  # it was cut
    judged, body = p_success("--judge", "openai/gpt-4o-mini", "--judge-api-base",
                             llm.api_base)
    assert body["judge"]["overall"]["status"] == "ok"
    assert judged == unjudged  # the model reads no judge score
