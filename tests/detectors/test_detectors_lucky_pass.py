import pytest
from detector_factory import traj

from otel_eval.base.results import Finding
from otel_eval.evaluate.detectors import lucky_pass
from otel_eval.evaluate.detectors.calls import Context
from otel_eval.evaluate.detectors.config import DetectorsConfig

LOOP = Finding("loop", "repeated_call", "error", "loop", ["s1", "s2"], [1, 2])
BUDGET = Finding("budget", "steps_exceeded", "error", "8 steps", ["s8"], [8])
UNRECOVERED = Finding("recovery", "unrecovered", "warning", "x", ["s3"], [3])
RECOVERED = Finding("recovery", "recovered", "info", "x", ["s3", "s4"], [3, 4])
OTHER = Finding("tool_call", "runtime", "warning", "x", ["s3"], [3])

CASES: list[tuple[str, str | None, list[Finding], str | None]] = [
    ("success, clean path", "success", [RECOVERED, OTHER], None),
    ("failure is never lucky", "failure", [LOOP, BUDGET], None),
    ("unknown outcome", None, [LOOP], None),
    ("loops", "success", [LOOP], "succeeded despite loops"),
    ("unrecovered errors", "success", [UNRECOVERED], "succeeded despite unrecovered errors"),
    ("all three", "success", [LOOP, UNRECOVERED, BUDGET],
     "succeeded despite loops, unrecovered errors and a blown budget"),
]


@pytest.mark.parametrize(("outcome", "findings", "message"),
                         [(o, f, m) for _, o, f, m in CASES], ids=[c[0] for c in CASES])
def test_lucky_pass_cases(outcome: str | None, findings: list[Finding],
                          message: str | None) -> None:
    found = lucky_pass.detect(traj(), DetectorsConfig(),
                              Context(outcome=outcome, findings=findings))
    assert [f.message for f in found] == ([message] if message else [])
    assert all(f.severity == "warning" and f.kind == "lucky_pass" for f in found)


def test_points_at_the_causes() -> None:
    (f,) = lucky_pass.detect(traj(), DetectorsConfig(),
                             Context(outcome="success", findings=[LOOP, BUDGET]))
    assert f.span_ids == ["s1", "s2", "s8"] and f.step_indexes == [1, 2, 8]
    assert f.attributes == {"causes": ["loops", "a blown budget"],
                            "findings": {"loops": ["repeated_call"],
                                         "a blown budget": ["steps_exceeded"]}}
