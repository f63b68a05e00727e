"""``otel-eval train`` and ``eval --model`` on real tau-bench runs, through the command line."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path
from typing import Any

import pytest
from predict_helpers import SLICE_RUNS, otel_eval

import otel_eval.evaluate.predict.labels as labels_module
from otel_eval.app.config import Config, replace
from otel_eval.app.offline import EvalRun
from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict import load_model
from otel_eval.evaluate.predict.features import FEATURES_VERSION, features
from otel_eval.evaluate.predict.regression import HYPERPARAMETERS, choose_c
from otel_eval.evaluate.predict.train import cmd_train
from otel_eval.receive.loaders import load_path


def _jsonl(text: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in text.splitlines()]


def test_train_writes_a_model_that_eval_applies_to_every_trace(tau_slice: Path,
                                                               tau_model: Path) -> None:
    model = load_model(tau_model)
    tasks = {run["task_id"] for run in json.loads(tau_slice.read_text())}
    assert model.training["runs"] == SLICE_RUNS and model.training["tasks"] == len(tasks)
    assert 0 < model.training["successes"] < SLICE_RUNS
    assert "calls.tool" in model.features and "judge.outcome.missing" in model.features
    assert all(not f.startswith("finding.lucky_pass") for f in model.features)
    # how the run ends is read; the calls per tool name and program are not (name_features)
    assert "end.says_failure" in model.features
    assert not [f for f in model.features if f.startswith(("tool.", "program."))]
    done = otel_eval("eval", str(tau_slice), "--model", str(tau_model), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    rows = _jsonl(done.stdout)
    assert len(rows) == SLICE_RUNS
    ps = []
    for row in rows:
        prediction = row["prediction"]
        assert isinstance(prediction, dict) and prediction["model"] == model.label
        assert 0.0 <= prediction["p_success"] <= 1.0
        ps.append(prediction["p_success"])
    assert len(set(ps)) > SLICE_RUNS // 2  # per trace, not a constant


def test_the_counts_c_is_the_grid_value_with_the_lowest_held_out_loss(tau_model: Path) -> None:
    training = load_model(tau_model).training
    losses = training["cross_validation"]["counts_log_loss_by_C"]
    grid = HYPERPARAMETERS["C_grid"]
    assert list(losses) == [str(c) for c in grid]
    assert training["hyperparameters"]["C"] == grid[[losses[str(c)] for c in grid].index(
        min(losses.values()))]


def test_choose_c_charges_confident_wrong_log_odds() -> None:
    import numpy as np

    y = np.array([1, 0, 1, 0])
    # column 0 ranks the runs right but says it with log-odds of +-8 where it is wrong once;
    # column 1 ranks them the same way, mildly: log loss prefers the second
    odds = np.array([[8.0, 1.0, 0.5, 0.5], [-8.0, -1.0, 0.5, 0.5], [8.0, 1.0, 0.5, 0.5],
                     [8.0, 0.5, 0.5, 0.5]])
    j, losses = choose_c(odds, y)
    assert j == 1 and losses[str(HYPERPARAMETERS["C_grid"][0])] > losses[str(
        HYPERPARAMETERS["C_grid"][1])]
    assert choose_c(odds[:0], y[:0]) == (len(HYPERPARAMETERS["C_grid"]) - 1, {})


def test_with_the_model_turned_off_there_is_no_prediction(tau_slice: Path) -> None:
    done = otel_eval("eval", str(tau_slice), "--model", "", "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    assert all("prediction" not in row for row in _jsonl(done.stdout))


def test_without_model_flags_every_record_gets_the_shipped_default(tau_slice: Path) -> None:
    done = otel_eval("eval", str(tau_slice), "--format", "jsonl")
    assert done.returncode == 0, done.stderr
    rows = _jsonl(done.stdout)
    assert rows and all(str(row["prediction"]["model"]).startswith("success-default@")
                        for row in rows)
    assert len({row["prediction"]["p_success"] for row in rows}) > len(rows) // 2


def test_labels_file_wins_over_the_outcome_the_runs_carry(tau_slice: Path,
                                                          tmp_path: Path) -> None:
    ids = [row["trace_id"] for row in _jsonl(otel_eval("eval", str(tau_slice), "--format",
                                                       "jsonl").stdout)]
    labels = tmp_path / "labels.jsonl"  # every 3rd run succeeded, whatever its reward says
    labels.write_text("".join(json.dumps({"trace_id": t, "outcome": i % 3 == 0}) + "\n"
                              for i, t in enumerate(ids)))
    out = tmp_path / "m.json"
    done = otel_eval("train", str(tau_slice), "--labels", str(labels), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_model(out).training["successes"] == len(range(0, SLICE_RUNS, 3))


def test_swe_bench_results_summary_labels_runs_by_task(datasets: Path, tmp_path: Path) -> None:
    folder = datasets / "swe-bench-mini-swe-agent"
    trajs = sorted(p for p in (folder / "trajs").iterdir() if p.is_dir())[:12]
    paths = [str(next(p.glob("*.traj.json*"))) for p in trajs]
    resolved = {i["instance_id"]: i["resolved"]
                for i in json.loads((folder / "results_summary.json").read_text())["instances"]}
    out = tmp_path / "swe.json"
    done = otel_eval("train", *paths, "--labels", str(folder / "results_summary.json"),
                     "--out", str(out))
    assert done.returncode == 0, done.stderr
    training = load_model(out).training
    assert training["runs"] == 12
    assert training["successes"] == sum(resolved[p.name] for p in trajs)


def test_bad_labels_and_too_few_labels_are_clear_errors(tau_slice: Path,
                                                        tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trace_id": "ab", "outcome": true}\n{"trace_id": "cd", "outcome": "maybe"}\n')
    done = otel_eval("train", str(tau_slice), "--labels", str(bad), "--out",
                     str(tmp_path / "m.json"))
    assert done.returncode == 2 and done.stdout == ""
    assert "line 2" in done.stderr and "'maybe'" in done.stderr
    one_class = tmp_path / "one.jsonl"
    runs = json.loads(tau_slice.read_text())[:8]
    few = tmp_path / "few.runs.json"
    few.write_text(json.dumps([{**r, "reward": 1.0} for r in runs]))
    one_class.write_text("")
    done = otel_eval("train", str(few), "--out", str(tmp_path / "m.json"))
    assert done.returncode == 2 and "at least 2 successful and 2 failed" in done.stderr
    assert not (tmp_path / "m.json").exists()
    done = otel_eval("train", str(tau_slice), "--out", str(tmp_path / "no" / "m.json"))
    assert done.returncode == 2 and "No such file or directory" in done.stderr
    done = otel_eval("train", str(tau_slice), "--name", "a@b", "--out", str(tmp_path / "m.json"))
    assert done.returncode == 2 and "name: must not contain '@'" in done.stderr



def _otlp_runs(tmp_path: Path, input_tokens: dict[int, str]) -> tuple[Path, Path]:
    """Six two-span runs as OTLP/JSON (run i's chat span says ``input_tokens[i]`` when
    given) and a labels file, every other run a success."""
    def span(tid: str, sid: str, parent: str | None, attrs: dict[str, str]) -> dict[str, Any]:
        return {"traceId": tid, "spanId": sid, **({"parentSpanId": parent} if parent else {}),
                "name": attrs["gen_ai.operation.name"], "startTimeUnixNano": "1000",
                "endTimeUnixNano": "2000",
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    spans, labels = [], []
    for i in range(6):
        tid = f"{i + 1:032x}"
        chat = {"gen_ai.operation.name": "chat"}
        if i in input_tokens:
            chat["gen_ai.usage.input_tokens"] = input_tokens[i]
        spans += [span(tid, "01" * 8, None, {"gen_ai.operation.name": "invoke_agent",
                                              "gen_ai.agent.name": "a"}),
                  span(tid, "02" * 8, "01" * 8, chat)]
        labels.append(json.dumps({"trace_id": tid, "outcome": i % 2 == 0}) + "\n")
    traces = tmp_path / "traces.json"
    traces.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    (tmp_path / "labels.jsonl").write_text("".join(labels))
    return traces, tmp_path / "labels.jsonl"


def test_a_run_with_a_400_digit_token_count_trains_with_the_count_unknown(
        tmp_path: Path) -> None:
    """Before: the count was kept as a 400-digit int and ``features`` (math.log1p) ended
    ``otel-eval train`` with an OverflowError traceback."""
    traces, labels = _otlp_runs(tmp_path, {0: "9" * 400, 1: "120"})
    done = otel_eval("train", str(traces), "--labels", str(labels), "--out",
                     str(tmp_path / "m.json"))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert load_model(tmp_path / "m.json").training["runs"] == 6


def test_a_run_whose_features_raise_is_left_out_and_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever slips past the readers into ``features``: that run is left out, counted and
    named (exit 1, as for a file that could not be loaded); the others train."""
    traces, labels = _otlp_runs(tmp_path, {})
    bad = f"{3:032x}"
    real = labels_module.features

    def failing(ev: Evaluation) -> dict[str, float]:
        if ev.trace_id == bad:
            raise OverflowError("int too large to convert to float")
        return real(ev)
    monkeypatch.setattr(labels_module, "features", failing)
    args = argparse.Namespace(labels=[str(labels)], out=str(tmp_path / "m.json"),
                              name="success")
    out = io.StringIO()
    assert cmd_train(args, EvalRun(Config(), [str(traces)]), out) == 1
    assert out.getvalue().startswith(f"wrote {tmp_path / 'm.json'}: success@")
    err = capsys.readouterr().err
    assert ("1 labelled run(s) left out, their features could not be computed (the first: "
            f"trace {bad}: OverflowError: int too large to convert to float)") in err
    assert load_model(tmp_path / "m.json").training["runs"] == 5

def test_features_do_not_depend_on_the_outcome(tau_slice: Path) -> None:
    """The label must not leak: a run's features are the same whatever its outcome."""
    evaluator = Evaluator(Config())
    differs = 0
    for trace in load_path(tau_slice):
        ok = evaluator.evaluate(trace, "success")
        failed = evaluator.evaluate(trace, "failure")
        differs += [(f.detector, f.kind) for f in ok.findings] != \
            [(f.detector, f.kind) for f in failed.findings]
        assert features(ok) == features(failed)
    assert differs > 0  # the findings do differ (lucky_pass, unrecovered): the check bites


def test_the_table_shows_p_success_only_with_a_model(tau_slice: Path, tau_model: Path) -> None:
    with_model = otel_eval("eval", str(tau_slice), "--model", str(tau_model)).stdout
    head, first = with_model.splitlines()[:2]
    assert head.split()[7] == "p_success" and 0.0 <= float(first.split()[7]) <= 1.0
    assert "p_success" not in otel_eval("eval", str(tau_slice), "--model", "").stdout


def test_offline_prediction_is_made_again_with_the_judge_scores(tau_slice: Path,
                                                                tmp_path: Path) -> None:
    """``eval --judge``: the judge scores a run after it was predicted; the prediction is
    made again with them (a model that reads a judge score gives another p_success)."""
    from otel_eval.app.offline import EvalRun
    from otel_eval.evaluate.predict.modelfile import write_model

    doc = {"format": "otel-eval-predictor", "format_version": 1, "name": "judged",
           "features_version": FEATURES_VERSION, "features": ["judge.process.process"],
           "scaler": {"mean": [0.5], "scale": [0.25]}, "coefficients": [2.0],
           "intercept": 0.0, "calibration": {"method": "platt", "a": 1.0, "b": 0.0}}
    write_model(doc, tmp_path / "judged.json")
    cfg = replace(Config(), **{"prediction.model_path": str(tmp_path / "judged.json")})
    run = EvalRun(cfg, [str(tau_slice)])
    ev = next(run.evaluations())
    assert ev.prediction is not None and ev.prediction["p_success"] < 0.5  # no judge: 0
    ev.judge = {"judges": {"process": {"scores": {"process": 0.9}}}}
    (again,) = run._repredicted(iter([ev]))
    assert again.prediction is not None and again.prediction["p_success"] > 0.9


@pytest.mark.parametrize(("text", "says"), [
    ("[" * 2000 + "]" * 2000 + "\n", "line 1: not JSON"),  # nested past the recursion limit
    ('{"instances": 5}', "instances: expected a list"),
    ('{"instances": [{"instance_id": "a", "resolved": true}], "x": ' + "[" * 1500
     + "]" * 1500 + "}", "line 1: not JSON"),
    ('{"instances": [{"instance_id": "a", "resolved": true},'
     ' {"instance_id": "a", "resolved": false}]}', "instances[1]: instance_id 'a' labelled both"),
], ids=["deep_line", "instances_no_list", "deep_summary", "summary_both_ways"])
def test_a_hostile_labels_file_stops_training_with_the_file_and_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, says: str) -> None:
    """A labels file nested too deep, or a results summary whose instances are no list (or
    label one task both ways), is a bad labels file like any other: exit 2 naming the file
    and why, never a traceback (RecursionError, TypeError) nor the last label winning."""
    labels = tmp_path / "labels.json"
    labels.write_text(text)
    args = argparse.Namespace(labels=[str(labels)], out=str(tmp_path / "m.json"),
                              name="success")
    out = io.StringIO()
    assert cmd_train(args, EvalRun(Config(), []), out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"otel-eval train: labels file {labels}") or \
        err.startswith(f"otel-eval train: {labels}"), err
    assert says in err and out.getvalue() == ""
    assert not (tmp_path / "m.json").exists()


def test_train_reads_a_run_as_the_predictor_does_before_the_result_is_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Training computed a run's features after its result was cut to the stored bounds: a
    tool argument over ``max_value_bytes`` cut to its start (two calls writing different
    large files read as one call repeated) and the ``result_truncated`` finding added (one
    more info finding), where ``eval`` and ``serve`` predict before the cut. The model
    applied to what ``train`` reads of a run gives the p_success ``eval`` gives it."""
    from otel_eval.app.cli import main

    def span(tid: str, sid: str, attrs: dict[str, str]) -> dict[str, Any]:
        return {"traceId": tid, "spanId": sid, **({"parentSpanId": "01" * 8}
                                                    if sid != "01" * 8 else {}),
                "name": attrs["gen_ai.operation.name"], "startTimeUnixNano": "1000",
                "endTimeUnixNano": "2000",
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()]}
    big = json.dumps({"path": "a.py", "content": "x = 1\n" * 5000})  # 30 kB > 16 kB
    spans, labels = [], []
    for i in range(6):
        tid = f"{i + 1:032x}"
        spans += [span(tid, "01" * 8, {"gen_ai.operation.name": "invoke_agent",
                                       "gen_ai.agent.name": "a"}),
                  span(tid, "02" * 8, {"gen_ai.operation.name": "chat"})]
        spans += [span(tid, f"{3 + k:02x}" * 8, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "write_file",
            "gen_ai.tool.call.arguments": big[:-10] + str(k) + big[-9:] if i % 3 else "{}"})
            for k in range(2)]
        labels.append(json.dumps({"trace_id": tid, "outcome": i % 2 == 0}) + "\n")
    traces = tmp_path / "traces.json"
    traces.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    (tmp_path / "labels.jsonl").write_text("".join(labels))
    read: dict[str, Any] = {}
    real = labels_module.row

    def recorded(ev: Evaluation, label: bool) -> Any:
        read[ev.trace_id] = found = real(ev, label)
        return found
    monkeypatch.setattr(labels_module, "row", recorded)
    assert main(["train", str(traces), "--labels", str(tmp_path / "labels.jsonl"),
                 "--out", str(tmp_path / "m.json")]) == 0
    capsys.readouterr()
    assert main(["eval", str(traces), "--format", "jsonl"]) == 0  # the default model
    predicted = {r["trace_id"]: r["prediction"] for r in _jsonl(capsys.readouterr().out)
                 if r.get("record", "trace") == "trace"}
    model = load_model(Config().prediction.model_file)
    assert len(read) == len(predicted) == 6
    for trace_id, r in read.items():
        assert round(model.p_success(r.values, r.text, r.agent), 4) == \
            predicted[trace_id]["p_success"], trace_id


def test_train_takes_the_outcomes_users_recorded_in_the_store(tau_slice: Path,
                                                               tmp_path: Path) -> None:
    """``train --feedback STORE``: the outcomes recorded through ``POST /v1/feedback`` (the
    web view's form) label the runs, over the reward the tau-bench runs carry; a labels
    line naming a trace still wins over the store."""
    from otel_eval.store.sqlite import SqliteStore

    ids = [row["trace_id"] for row in _jsonl(otel_eval("eval", str(tau_slice), "--format",
                                                       "jsonl").stdout)]
    store = SqliteStore(str(tmp_path / "otel-eval.db")).open()
    for i, trace_id in enumerate(ids):  # every 3rd run succeeded, whatever its reward says
        store.put_feedback(trace_id, "success" if i % 3 == 0 else "failure", 1)
    store.close()
    out = tmp_path / "m.json"
    done = otel_eval("train", str(tau_slice), "--feedback", str(tmp_path / "otel-eval.db"),
                     "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_model(out).training["successes"] == len(range(0, SLICE_RUNS, 3))
    labels = tmp_path / "labels.jsonl"  # the file says run 1 succeeded: it wins
    labels.write_text(json.dumps({"trace_id": ids[1], "outcome": True}) + "\n")
    done = otel_eval("train", str(tau_slice), "--labels", str(labels), "--feedback",
                     str(tmp_path / "otel-eval.db"), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert load_model(out).training["successes"] == len(range(0, SLICE_RUNS, 3)) + 1
    missing = otel_eval("train", str(tau_slice), "--feedback", str(tmp_path / "none.db"),
                        "--out", str(out))
    assert missing.returncode == 2 and "--feedback: no store at" in missing.stderr


def test_too_few_labels_names_every_source_of_labels_feedback_too() -> None:
    """Training on the outcomes users recorded (``--feedback STORE``), all of one class, said
    where labels come from without naming the store: the user was pointed at every source
    but the one they used."""
    from otel_eval.evaluate.predict.labels import TrainError
    from otel_eval.evaluate.predict.train import fit

    with pytest.raises(TrainError, match=r"got 0 and 0 .*--labels.*--feedback"):
        fit([])
