"""A recording whose every request is delivered twice (an exporter retrying a request the
service took, whose answer it never got; a Kafka record redelivered) gets the verdict of
``expected.yaml``: the second copy of a span is a ``duplicate_span``, of a GenAI event log
record a ``duplicate_log_record``; neither is read as a second event of the run (a tool call
asked twice reads as a loop the run never made)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance import corpus
from conformance.replay import replay
from support.harness import running_service

# the recordings whose GenAI events came as log records
_WITH_LOGS = [(stack, scenario) for stack, scenario in corpus.recorded()
              if scenario in ("clean", "tool_error")
              and any(r["signal"] == "logs" for r in corpus.recording(stack, scenario)["requests"])]


@pytest.mark.parametrize(("stack", "scenario"), _WITH_LOGS,
                         ids=[f"{s}/{c}" for s, c in _WITH_LOGS])
def test_a_recording_delivered_twice_gets_the_expected_verdict(tmp_path: Path, stack: str,
                                                               scenario: str) -> None:
    rec = corpus.recording(stack, scenario)
    twice = {**rec, "requests": [r for r in rec["requests"] for _ in range(2)]}
    with running_service(tmp_path) as h:
        replay(h, twice)
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        stored = h.svc.store.latest(100)
        duplicates = h.sample("otel_eval_receiver_log_records_rejected_total",
                              protocol="http", reason="duplicate_log_record")
    assert len(stored) == 1
    problems = corpus.problems(stored[0], corpus.expectation(stack, scenario))
    assert not problems, "\n".join(problems)
    assert duplicates > 0  # counted, with its reason
