import pytest
from detector_factory import bash, llm, tool, traj

from otel_eval.base.steps import Step
from otel_eval.evaluate.detectors import recovery
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig

FAIL = tool("edit_file", {"path": "a"}, "Error: permission denied")
FAIL_SPAN = tool("edit_file", {"path": "a"}, None, error="IOError")

# (name, steps, outcome, [(kind, severity, retries)])
CASES: list[tuple[str, list[Step], str | None, list[tuple[str, str, int]]]] = [
    ("no errors", [tool("a"), tool("b")], None, []),
    ("recovered by a different call", [FAIL, tool("chmod", {"path": "a"}), llm("ok")], None,
     [("recovered", "info", 0)]),
    ("recovered by a retry", [FAIL_SPAN, tool("edit_file", {"path": "a"})], None,
     [("recovered", "info", 0)]),
    ("retried once, then recovered", [FAIL, FAIL, tool("edit_file", {"path": "b"})], None,
     [("recovered", "info", 1)]),
    ("repeated the failing call", [FAIL, llm("again"), FAIL, FAIL], None,
     [("repeated_failing_call", "error", 2)]),
    ("gave up", [tool("a"), FAIL, llm("I could not do it")], None, [("gave_up", "error", 0)]),
    ("gave up, known failure", [FAIL], "failure", [("gave_up", "error", 0)]),
    ("unrecovered but the outcome is success", [FAIL, llm("done")], "success",
     [("unrecovered", "warning", 0)]),
    ("two failures, one recovery", [FAIL, tool("x", {}, "Error: no"), tool("y")], None,
     [("recovered", "info", 0), ("recovered", "info", 0)]),
    ("a shell command's non-zero exit is not a tool failure",
     [bash("pytest", "<returncode>1</returncode>\nFAILED")], None, []),
]


@pytest.mark.parametrize(("steps", "outcome", "expected"),
                         [(s, o, e) for _, s, o, e in CASES], ids=[c[0] for c in CASES])
def test_recovery_cases(steps: list[Step], outcome: str | None,
                        expected: list[tuple[str, str, int]]) -> None:
    found = recovery.detect(traj(*steps), DetectorsConfig(), Context(outcome=outcome))
    assert [(f.kind, f.severity, f.attributes["retries"]) for f in found] == expected


def test_recovered_points_at_failure_and_fix() -> None:
    t = traj(FAIL, tool("chmod", {"path": "a"}))
    (f,) = recovery.detect(t, DetectorsConfig(), Context())
    assert f.step_indexes == [1, 2]
    assert f.message == "recovered from a failed edit_file with chmod"
    assert f.attributes["error"] == "Error: permission denied"


def test_a_run_cut_while_it_went_on_did_not_give_up_at_the_cut() -> None:
    """A trace released ``truncated`` (cut at ``max_trace_duration_s``, or pushed out by
    ``release_oldest``) is a run that went on past its last step here: a failure at the cut
    may be followed by a success that was cut off. "Nothing succeeded after" was concluded
    from that absence (``gave_up``, an error: a long run cut right after a failed call was
    judged failed). A failure followed by a success within the cut is still ``recovered``."""
    cut = traj(tool("a"), FAIL, status="truncated", output=None)
    assert recovery.detect(cut, DetectorsConfig(), Context()) == []
    cut = traj(FAIL, FAIL, status="truncated", output=None)
    assert recovery.detect(cut, DetectorsConfig(), Context()) == []
    cut = traj(FAIL, tool("chmod", {"path": "a"}), FAIL, status="truncated", output=None)
    assert [f.kind for f in recovery.detect(cut, DetectorsConfig(), Context())] == [
        "recovered"]
