"""The conformance corpus replayed through a real ``Service``: every recording of a real
instrumentation stack (traces and logs, over OTLP/HTTP, in recorded order) must give the
verdict of ``expected.yaml``; and docs/instrumentations.md must match the corpus.

Regenerate the doc's tables with ``UPDATE_DOCS=1 python -m pytest tests/conformance``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from conformance import corpus
from conformance.replay import replay
from support.harness import running_service

DOC = Path(__file__).resolve().parents[2] / "docs" / "instrumentations.md"


def _params() -> list[Any]:
    out = []
    for stack, scenario in corpus.recorded():
        reason = corpus.expectation(stack, scenario).get("xfail")
        if os.environ.get("CONFORMANCE_NO_XFAIL"):  # see every cell's real outcome
            reason = None
        marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
        out.append(pytest.param(stack, scenario, id=f"{stack}/{scenario}", marks=marks))
    return out


@pytest.mark.parametrize(("stack", "scenario"), _params())
def test_recording_gets_the_expected_verdict(tmp_path: Path, stack: str, scenario: str) -> None:
    rec = corpus.recording(stack, scenario)
    assert (rec["stack"], rec["scenario"]) == (stack, scenario)
    with running_service(tmp_path) as h:
        notes = replay(h, rec)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        stored = h.svc.store.latest(100)
    assert stored, "no evaluation was stored"
    # One agent run, one trace, one evaluation. More is a problem of its own (e.g. a span made
    # before the run, as its own trace); the others are checked on the run's (the largest).
    run = max(stored, key=lambda e: int(e["counts"]["spans"]))
    problems = corpus.problems(run, corpus.expectation(stack, scenario))
    if len(stored) > 1:
        problems.insert(0, f"evaluations: expected 1 (one run, one trace), got {len(stored)}: "
                           + "; ".join(f"{e['trace_id']} ({e['counts']['spans']} spans, agent "
                                       f"{e['agent']!r})" for e in stored if e is not run))
    assert not problems, "\n".join(problems + notes)


def _block(name: str) -> re.Pattern[str]:
    return re.compile(rf"(<!-- {name}:start -->\n)(.*?)(<!-- {name}:end -->)", re.S)


def test_instrumentations_doc_matches_the_corpus() -> None:
    text = DOC.read_text(encoding="utf-8")
    sections = corpus.instrumentations_doc()
    if os.environ.get("UPDATE_DOCS"):
        for name, body in sections.items():
            text = _block(name).sub(lambda m, b=body: m.group(1) + b + "\n" + m.group(3), text)
        DOC.write_text(text, encoding="utf-8")
    for name, body in sections.items():
        m = _block(name).search(text)
        assert m is not None, f"{DOC.name} lacks the {name} markers"
        assert m.group(2).strip() == body.strip(), (
            f"{DOC.name} {name} is stale: run UPDATE_DOCS=1 python -m pytest tests/conformance")


def test_every_expectation_names_a_stack_and_scenario_of_the_corpus() -> None:
    for stack, overrides in (corpus._expected().get("stacks") or {}).items():
        assert stack in corpus.stacks(), stack
        for scenario in overrides:
            assert corpus.recording_path(stack, scenario).is_file(), (stack, scenario)
    for cell, reason in corpus.known_wrong().items():
        stack, _, scenario = cell.partition("/")
        assert corpus.recording_path(stack, scenario).is_file(), cell
        assert isinstance(reason, str) and reason.strip(), f"known_wrong {cell}: say why"
        checks = corpus.known_wrong_checks(stack, scenario)
        allowed = set(corpus.CONVERSATION_CHECKS if scenario == corpus.CONVERSATION
                      else (*corpus.CHECKS, "evaluations"))
        assert checks and checks <= allowed, (
            f"known_wrong {cell}: lead with the checks it fails ('agent, cities: why')")


def test_every_stack_records_every_scenario_it_supports() -> None:
    assert not corpus.unrecorded(), "record them (README) or declare them `unsupported`"
