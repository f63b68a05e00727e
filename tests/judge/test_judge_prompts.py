"""Rendered prompts against golden files (tests/data/judge/); UPDATE_GOLDEN=1 rewrites them.
Also: prompt overrides from a directory, and bad overrides failing at startup."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from judge_fixtures import config, evaluation

from otel_eval.evaluate.judge import Judge, prompting
from otel_eval.evaluate.judge.prompting import Request
from otel_eval.evaluate.judge.render import render

GOLDEN = Path(__file__).resolve().parents[1] / "data" / "judge"
ALL = ("step", "trace", "rubric", "process", "outcome")


def _text(request: Request) -> str:
    parts = [f"### request: {request.name} parts={','.join(request.parts)}"]
    for m in request.messages:
        parts.append(f"=== {m['role']} ===\n{m['content']}")
    return "\n".join(parts) + "\n"


def _compare(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8"), f"{path} differs (UPDATE_GOLDEN=1)"


def _requests(combined: bool) -> list[Request]:
    judge = Judge(config(enabled=ALL, combined=combined))
    ev = evaluation()
    rendered = render(ev, judge.config.compaction)
    reqs = judge.requests(ev, rendered)
    criteria = [{"id": "c1", "criterion": "Cancels reservation ABC123"}]
    reqs.append(judge.redacted(prompting.rubric_generate(judge.prompts, rendered.task)))
    reqs.append(judge.redacted(prompting.rubric_verify(judge.prompts, rendered, criteria)))
    return reqs


def test_combined_prompts_golden() -> None:
    reqs = _requests(combined=True)
    assert [r.name for r in reqs] == ["combined", "rubric_generate", "rubric_verify"]
    for r in reqs:
        _compare(f"prompt_{r.name}", _text(r))


def test_separate_prompts_golden() -> None:
    reqs = _requests(combined=False)
    assert [r.name for r in reqs][:4] == ["step", "process", "trace", "outcome"]
    for r in reqs[:4]:
        _compare(f"prompt_separate_{r.name}", _text(r))


def test_compaction_shows_system_prompt_once_and_trims_tool_output() -> None:
    text = render(evaluation(), config().compaction).trajectory
    assert text.count("You are an airline agent") == 1
    assert "chars trimmed" in text  # the 3000-char tool result and the long system prompt
    assert "Cancel my reservation" not in text  # the task is shown once, above the run


def test_prompt_override_directory(tmp_path: Path) -> None:
    (tmp_path / "trace.txt").write_text("# House rules for traces\nBe terse.", encoding="utf-8")
    judge = Judge(config(prompt_dir=str(tmp_path), combined=False, enabled=("trace",)))
    assert judge.prompts.sources["trace"] == str(tmp_path / "trace.txt")
    assert judge.prompts.sources["step"] == "package"
    (req,) = judge.requests(evaluation())
    assert req.messages[1]["content"].startswith("# House rules for traces\nBe terse.")


def test_override_with_unknown_placeholder_fails_at_startup(tmp_path: Path) -> None:
    (tmp_path / "frame.txt").write_text("$instructions $trajectroy", encoding="utf-8")
    with pytest.raises(ValueError, match="frame"):
        Judge(config(prompt_dir=str(tmp_path)))
