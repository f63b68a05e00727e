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


def _judged(i: int, text: str) -> dict[str, object]:
    tid = f"{i:032x}"
    return {"trace_id": tid, "agent": "shop", "findings": [],
            "steps": [{"index": 0, "span_id": f"{tid}-s0", "node": "searcher"}],
            "judge": {"judges": {"quality": {"critiques": [
                {"span_id": f"{tid}-s0", "score": 0.1, "text": text}]}}}}


def test_a_fleet_handoff_keeps_the_previous_runs_assignment() -> None:
    """On a fleet the issues job moves between workers over one catalogue: "a critique stays
    in the issue the previous run gave it" means the fleet's previous run. A worker taking
    the job back put a critique where its own run, hours before, had put it, against the
    run another worker made since over the same catalogue."""
    loop = ["Tool web_search was called {n} times with identical arguments",
            "The agent called web_search {n} times with the same arguments again"]
    auth = ["Authentication failed: API key rejected by the server ({n})",
            "API key rejected, authentication failed by the server"]
    both = "search called with the same arguments, API key rejected"
    first = [_judged(i, loop[i % 2].format(n=i + 3)) for i in range(8)] + [_judged(100, both)]
    later = first + [_judged(200 + i, auth[i % 2].format(n=i)) for i in range(8)]
    db = sqlite3.connect(":memory:")
    a, b = IssueTracker(CFG, db), IssueTracker(CFG, db)  # two workers, one catalogue

    def issue_of(result: object) -> str | None:
        return _ids(result)[(f"{100:032x}", f"{100:032x}-s0")]
    first_run = issue_of(a.run(first, now=100.0))  # worker a leads
    handed = issue_of(b.run(later, now=200.0))  # a stopped; b leads
    assert first_run is not None and handed is not None and handed != first_run
    assert issue_of(a.run(later, now=300.0)) == handed  # b stopped; a leads again
