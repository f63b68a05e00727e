"""Issue ids across runs: the same critiques keep their issue id when the window slides
(the catalogue matches the new clusters to the stored ones) and whatever the input order."""

from __future__ import annotations

import random
import sqlite3

from issue_fixtures import window

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.tracker import IssueTracker, issues_offline

CFG = IssuesConfig(age_out_s=10_000.0)


def _ids(result: object) -> dict[tuple[str, str | None], str | None]:
    return {(a.trace_id, a.span_id): a.issue_id for a in result.assignments}  # type: ignore[attr-defined]


def test_critiques_in_both_windows_keep_their_issue_ids() -> None:
    tracker = IssueTracker(CFG, sqlite3.connect(":memory:"))
    first = _ids(tracker.run(window(18), now=100.0))  # traces 0..17
    second = _ids(tracker.run(window(18, offset=9), now=200.0))  # traces 9..26
    overlap = set(first) & set(second)
    assert len(overlap) > 9 and all(first[k] for k in overlap)
    assert sum(first[k] == second[k] for k in overlap) == len(overlap)
    # new traces' critiques of the same failures join the same (old) issues
    assert set(second.values()) == set(first.values())


def test_input_order_does_not_change_ids_or_assignments() -> None:
    evs = window(18)
    shuffled = evs[:]
    random.Random(7).shuffle(shuffled)
    a, b = issues_offline(evs, CFG, now=1.0), issues_offline(shuffled, CFG, now=1.0)
    assert _ids(a) == _ids(b)
    assert sorted((i.issue_id, i.title, i.critiques) for i in a.issues) == sorted(
        (i.issue_id, i.title, i.critiques) for i in b.issues)
