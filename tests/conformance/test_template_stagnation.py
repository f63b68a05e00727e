"""The stagnation rule on DSPy's ReAct, recorded (``recordings/dspy``): each turn is written in
DSPy's ChatAdapter template (``[[ ## next_thought ## ]]`` ... ``[[ ## completed ## ]]``) and
the turns of ``distinct`` differ only in the city, in the thought and in the arguments (two
words in fifty). Read as a user of either instrumentation of the stack alone exports them
(OpenInference's DSPy ``LM.__call__`` spans, whose output is a JSON list of strings, or its
LiteLLM ``completion`` spans, the raw text), the six turns are not near-identical outputs: the
rule compares what differs between outputs, not the template they share. The same turn
repeated (``loop``) still is stagnation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conformance import corpus

from otel_eval.base.model import Trace
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors.config import LoopConfig
from otel_eval.evaluate.detectors.stagnation import stagnation
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.receive.loaders import load_file

SCOPES = {"dspy": "openinference.instrumentation.dspy",
          "litellm": "openinference.instrumentation.litellm"}


def _trajectory(tmp_path: Path, scenario: str, scope: str) -> Trajectory:
    """The recorded run with only the spans of one instrumentation's scope kept (and the
    module spans, all DSPy's: the run's root and the tool spans)."""
    rec = corpus.recording("dspy", scenario)
    spans = [rs for r in rec["requests"] if r["signal"] == "traces"
             for rs in r["body"]["resourceSpans"]]
    path = tmp_path / f"{scenario}.json"
    path.write_text(json.dumps({"resourceSpans": spans}), encoding="utf-8")
    (trace,) = load_file(path)
    dropped = set(SCOPES.values()) - {SCOPES[scope], SCOPES["dspy"]}
    kept = [s for s in trace.spans if s.scope not in dropped]
    if scope == "litellm":  # the LLM calls as the LiteLLM instrumentation alone records them
        kept = [s for s in kept if s.name != "LM.__call__"]
    return build_trajectory(Trace(trace.trace_id, kept, trace.status, source=trace.source),
                            TrajectoryConfig())


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_six_templated_turns_for_six_cities_are_not_stagnation(tmp_path: Path,
                                                                scope: str) -> None:
    t = _trajectory(tmp_path, "distinct", scope)
    turns = [s for s in t.llm_steps if "next_thought" in (s.answer or "")]
    assert len(turns) == 7  # six calls and the finish turn
    assert len({s.answer for s in turns}) == 7
    assert stagnation(t.llm_steps, LoopConfig()) == []


@pytest.mark.parametrize("scope", sorted(SCOPES))
def test_the_same_templated_turn_repeated_is_stagnation(tmp_path: Path, scope: str) -> None:
    t = _trajectory(tmp_path, "loop", scope)
    found = stagnation(t.llm_steps, LoopConfig())
    assert [f.message for f in found] == ["4 consecutive near-identical LLM outputs"]
