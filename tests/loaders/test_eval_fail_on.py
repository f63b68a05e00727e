"""``eval --fail-on``: a CI gate over trace files reads the verdicts from the exit code (it
exited 0 on a run that never terminated, so a gate had to parse the jsonl): 3 when a trace
trips what it names, distinct from 1 (a file could not be read) and 2 (a wrong flag)."""

from __future__ import annotations

from pathlib import Path

import pytest

from otel_eval.app.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "loaders"
# span_tree.json: one run, failed on non_termination (llm_error), no other finding
STOPPED = str(DATA / "span_tree.json")
# mini.traj.json: passed; tool_call warnings, recovery notes (info) only
PASSED = str(DATA / "mini.traj.json")


@pytest.mark.parametrize(("argv", "code"), [
    ([STOPPED], 0),  # no gate asked: the verdicts are the output's, as before
    ([STOPPED, "--fail-on", "non_termination"], 3),
    ([STOPPED, "--fail-on", "failed"], 3),
    ([STOPPED, "--fail-on", "loop,budget"], 0),
    ([STOPPED, "--fail-on", "loop", "--fail-on", "non_termination"], 3),
    ([PASSED, "--fail-on", "failed"], 0),
    ([PASSED, "--fail-on", "recovery"], 0),  # its recovery findings are notes
    ([PASSED, "--fail-on", "tool_call"], 3),  # warnings trip it
])
def test_fail_on_sets_the_exit_code_from_the_verdicts(
        argv: list[str], code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", *argv, "--format", "jsonl"]) == code
    err = capsys.readouterr().err
    assert ("--fail-on: 1 trace(s) tripped it" in err) == (code == 3), err


def test_a_gate_tripped_beside_an_unreadable_file_exits_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    assert main(["eval", str(bad), STOPPED, "--format", "jsonl"]) == 1
    assert main(["eval", str(bad), STOPPED, "--fail-on", "failed", "--format", "jsonl"]) == 3
    assert "bad.json" in capsys.readouterr().err  # still named


def test_an_unknown_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", STOPPED, "--fail-on", "loops"])
    assert exited.value.code == 2
    assert "--fail-on takes failed, loop, non_termination" in capsys.readouterr().err
