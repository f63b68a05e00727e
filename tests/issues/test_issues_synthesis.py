"""The synthesis step: a reply merging issues is applied to the clustering; a malformed one
(or a failing synthesizer) leaves the clustering's issues exactly as they were."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from issue_fixtures import AUTH, LOOP, evaluation, window

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.synthesis import (
    Draft,
    SynthesisError,
    merges_of,
    plan_of,
    synthesize,
)
from otel_eval.outputs.issues.tracker import IssueTracker, issues_offline

CFG = IssuesConfig(age_out_s=1000.0, per_node=True)  # groups per level and node
MERGE = {"groups": [{"issues": [2, 1], "title": "Searcher tool calls fail.",
                     "description": "Searches repeat or are refused."}]}


class Scripted:
    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.calls: list[list[Draft]] = []
        self.strays: list[list[str]] = []

    def __call__(self, drafts: Sequence[Draft],
                 strays: Sequence[str]) -> Mapping[str, Any] | None:
        self.calls.append(list(drafts))
        self.strays.append(list(strays))
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply  # type: ignore[no-any-return]


@pytest.mark.parametrize(("reply", "problem"), [
    ({"groups": "1,2"}, "must be a list"),
    ({"groups": [{"issues": [1], "title": "x y z"}]}, "fewer than two"),
    ({"groups": [{"issues": [1, 1], "title": "x y z"}]}, "fewer than two"),
    ({"groups": [{"issues": [1, 4], "title": "x y z"}]}, "numbered 1 to 3"),
    ({"groups": [{"issues": [0, 1], "title": "x y z"}]}, "numbered 1 to 3"),
    ({"groups": [{"issues": [1, 2], "title": "a b c"}, {"issues": [2, 3], "title": "d e f"}]},
     "repeats an issue"),
    ({"groups": [{"issues": [1, 2], "title": " "}]}, "no title"),
    ({"groups": [{"issues": ["1", 2], "title": "x y z"}]}, "list of numbers"),
    ({"groups": [{"issues": [True, 2], "title": "x y z"}]}, "list of numbers"),
])
def test_malformed_replies_are_refused_whole(reply: dict[str, Any], problem: str) -> None:
    with pytest.raises(SynthesisError, match=problem):
        merges_of(reply, 3)


def test_a_valid_reply_gives_zero_based_sorted_merges() -> None:
    (merge,) = merges_of({"groups": [{"issues": [3, 1], "title": "  Loops  again.",
                                      "description": "x"}]}, 3)
    assert (merge.drafts, merge.title, merge.description) == ((0, 2), "Loops again", "x")
    assert merges_of({"groups": []}, 3) == []


def test_synthesizer_merges_two_issues_of_a_group_and_names_the_merge() -> None:
    synth = Scripted(MERGE)
    before = issues_offline(window(12), CFG, now=1.0)
    after = issues_offline(window(12), CFG, now=1.0, synthesizer=synth)
    assert len(synth.calls) == 1  # the system group has one issue: nothing to ask
    drafts = synth.calls[0]
    assert [d.critiques for d in drafts] == [12, 4]  # largest first: loop, then auth
    assert all(1 <= len(d.examples) <= 3 and d.title for d in drafts)
    assert len(before.issues) == 3 and len(after.issues) == 2
    (merged,) = [i for i in after.issues if i.node == "searcher"]
    assert merged.title == "Searcher tool calls fail"
    assert merged.description == "Searches repeat or are refused."
    assert (merged.critiques, merged.traces) == (16, 12)
    # every critique still has an issue; the searcher's all have the merged one
    assert all(a.issue_id for a in after.assignments)
    assert {a.issue_id for a in after.assignments if a.node == "searcher"} == {
        merged.issue_id}


@pytest.mark.parametrize("reply", [
    None, {"groups": [{"issues": [1, 3], "title": "out of range"}]}, RuntimeError("down")])
def test_no_or_bad_reply_keeps_the_clustering(reply: Any,
                                              caplog: pytest.LogCaptureFixture) -> None:
    synth = Scripted(reply)
    plain = issues_offline(window(12), CFG, now=1.0)
    result = issues_offline(window(12), CFG, now=1.0, synthesizer=synth)
    assert len(synth.calls) == 1
    assert [(i.issue_id, i.title, i.critiques) for i in result.issues] == [
        (i.issue_id, i.title, i.critiques) for i in plain.issues]
    assert result.assignments == plain.assignments
    if reply is not None:
        assert "issue synthesis" in caplog.text


def test_synthesis_is_bounded_and_can_be_off() -> None:
    synth = Scripted({"groups": []})
    issues_offline(window(12), IssuesConfig(synthesis_max_issues=1), now=1.0,
                   synthesizer=synth)
    assert synth.calls == []  # one draft cannot be merged: no call
    issues_offline(window(12), IssuesConfig(synthesis_max_issues=0), now=1.0,
                   synthesizer=synth)
    assert synth.calls == []


def test_merged_issue_keeps_its_id_in_the_next_run() -> None:
    tracker = IssueTracker(CFG, sqlite3.connect(":memory:"), synthesizer=Scripted(MERGE))
    first = {i.node: i.issue_id for i in tracker.run(window(12), now=1.0).issues}
    second = {i.node: i.issue_id for i in tracker.run(window(12, offset=6), now=2.0).issues}
    assert second == first


def test_synthesize_without_synthesizer_or_anything_to_do() -> None:
    draft = Draft("loop", ("a",), 2)
    assert not synthesize([draft, draft], ["x"], None)
    assert not synthesize([draft], [], Scripted(MERGE))
    assert not synthesize([], ["x"], Scripted(MERGE))


@pytest.mark.parametrize(("assign", "problem"), [
    ("1", "must be a list"),
    ([{"critique": 1}], "needs numbers"),
    ([{"critique": 3, "issue": 1}], "critiques are numbered 1 to 2"),
    ([{"critique": 1, "issue": 4}], "issues are numbered 1 to 3"),
    ([{"critique": 1, "issue": 1}, {"critique": 1, "issue": 2}], "assigns critique 1 again"),
])
def test_malformed_assignments_are_refused(assign: Any, problem: str) -> None:
    with pytest.raises(SynthesisError, match=problem):
        plan_of({"groups": [], "assign": assign}, 3, 2)


def _with_strays(n: int) -> list[dict[str, Any]]:
    """``window(n)`` plus two one-off critiques in the searcher (in no issue by words: no
    word of theirs recurs in another trace, issues.term_min_traces)."""
    return [*window(n), evaluation("e" * 32, [("searcher", "The helper kept polling the "
                                                           "engine forever")]),
            evaluation("f" * 32, [("searcher", "Quantum flux capacitor overheated")])]


def test_stragglers_are_shown_and_assigned_ones_join_their_issue() -> None:
    plain = issues_offline(_with_strays(12), CFG, now=1.0)
    stray_ids = {a.trace_id: a.issue_id for a in plain.assignments
                 if a.trace_id in ("e" * 32, "f" * 32)}
    assert stray_ids == {"e" * 32: None, "f" * 32: None}
    synth = Scripted({"groups": []})
    issues_offline(_with_strays(12), CFG, now=1.0, synthesizer=synth)
    assert len(synth.strays[0]) == 2  # both one-offs shown, as the critiques' own text
    polling = synth.strays[0].index("The helper kept polling the engine forever") + 1
    synth = Scripted({"groups": [], "assign": [{"critique": polling, "issue": 1}]})
    result = issues_offline(_with_strays(12), CFG, now=1.0, synthesizer=synth)
    loop = max(result.issues, key=lambda i: i.critiques)
    ids = {a.trace_id: a.issue_id for a in result.assignments}
    assert ids["e" * 32] == loop.issue_id and ids["f" * 32] is None
    assert loop.traces == 13 and loop.critiques == 13


def _two_groups(n: int) -> list[dict[str, Any]]:
    """Two agent nodes, each with the loop failure everywhere and auth every third trace."""
    out = []
    for i in range(n):
        texts = [LOOP[i % 3].format(n=i + 3)] + ([AUTH[i % 3].format(n=i)] if i % 3 == 0
                                                 else [])
        out.append(evaluation(f"{i:032x}", [(node, t) for node in ("searcher", "writer")
                                            for t in texts]))
    return out


def test_a_run_with_nothing_new_asks_nothing() -> None:
    synth = Scripted({"groups": []})
    tracker = IssueTracker(CFG, sqlite3.connect(":memory:"), synthesizer=synth)
    tracker.run(window(12), now=1.0)
    assert len(synth.calls) == 1
    tracker.run(window(12, offset=3), now=2.0)  # the same issues, matched to the catalogue
    assert len(synth.calls) == 1


def test_calls_per_run_are_capped_over_all_groups() -> None:
    synth = Scripted({"groups": []})
    issues_offline(_two_groups(12), CFG, now=1.0, synthesizer=synth)
    assert len(synth.calls) == 2  # one per node group
    capped = Scripted({"groups": []})
    issues_offline(_two_groups(12), IssuesConfig(synthesis_max_calls=1), now=1.0,
                   synthesizer=capped)
    assert len(capped.calls) == 1
