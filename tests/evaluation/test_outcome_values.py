"""``normalize_outcome``: how a known outcome is written (POST /v1/feedback, the root span's
outcome attribute, training labels) -> success / failure, or None (not an outcome: 400 from
the API, unknown on a span, a bad labels line). A number is an outcome only when it is 1 or 0
(tau-bench style rewards 1.0 / 0.0 included); 0.5, 2 or -7 is a score, not an outcome."""

from __future__ import annotations

import pytest

from otel_eval.evaluate.evaluator import normalize_outcome

CASES: list[tuple[object, str | None]] = [
    (True, "success"), (False, "failure"),
    (1, "success"), (0, "failure"), (1.0, "success"), (0.0, "failure"), (-0.0, "failure"),
    ("success", "success"), ("Passed", "success"), (" resolved ", "success"),
    ("failure", "failure"), ("error", "failure"), ("unresolved", "failure"),
    ("1", "success"), ("0", "failure"), ("1.0", "success"), ("0.0", "failure"),
    ("true", "success"), ("false", "failure"),
    (0.5, None), (0.99, None), (1.01, None), (2, None), (-1, None), (-7, None),
    (float("inf"), None), (float("-inf"), None), (float("nan"), None), (10**400, None),
    ("0.5", None), ("2", None), ("maybe", None), ("", None), (None, None), ([1], None),
]


@pytest.mark.parametrize(("value", "expected"), CASES, ids=[repr(c[0])[:20] for c in CASES])
def test_normalize_outcome(value: object, expected: str | None) -> None:
    assert normalize_outcome(value) == expected
