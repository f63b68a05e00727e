"""Issue ids across runs: the same critiques keep their issue id when the window slides
(the catalogue matches the new clusters to the stored ones) and whatever the input order."""

from __future__ import annotations

import random
import sqlite3

from issue_fixtures import evaluation, window

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


def test_an_issue_of_stop_words_only_keeps_its_id_across_runs() -> None:
    # a critique with no term (a budget message such as "over") has an empty vector: its
    # issue matched no stored one and got a new id, status "new", on every run
    def with_stop_words(offset: int) -> list[dict[str, object]]:
        return window(6, offset=offset) + [
            evaluation(f"{i + 1000:032x}", [], ["over"]) for i in range(offset, offset + 6)]

    tracker = IssueTracker(CFG, sqlite3.connect(":memory:"))
    runs = [tracker.run(with_stop_words(k * 3), now=100.0 * (k + 1)) for k in range(3)]
    over = [[i for i in r.issues if i.title == "over"] for r in runs]
    assert all(len(o) == 1 for o in over)
    assert len({o[0].issue_id for o in over}) == 1
    assert [o[0].new for o in over] == [True, False, False]
    assert not [e for r in runs[1:] for e in r.events if e.kind == "new"]
