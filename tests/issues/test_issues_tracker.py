import random
import sqlite3
import string
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from issue_fixtures import AUTH, FORMAT, LOOP, evaluation, window

from otel_eval.outputs.issues.config import IssuesConfig
from otel_eval.outputs.issues.result import MAX_AGENTS_PER_ISSUE, Issue, IssuesResult, to_json
from otel_eval.outputs.issues.tracker import IssueTracker, issues_offline

CFG = IssuesConfig(age_out_s=1000.0, share_jump=0.2)


def _by_title(result: IssuesResult, word: str) -> Issue:
    found = [i for i in result.issues if word in (i.title + " " + i.description).lower()]
    assert len(found) == 1, [i.title for i in result.issues]
    return found[0]


def _tracker(store: str | sqlite3.Connection, cfg: IssuesConfig = CFG) -> IssueTracker:
    return IssueTracker(cfg, store, clock=lambda: pytest.fail("clock used"))


def test_clusters_the_hand_made_set_into_the_three_failures() -> None:
    result = issues_offline(window(12), CFG, now=100.0)
    assert [(i.level, i.node) for i in result.issues] == [
        ("system", ""), ("node", "searcher"), ("node", "searcher")]
    loop, auth, fmt = (_by_title(result, w) for w in ("arguments", "authentication", "units"))
    assert (loop.traces, auth.traces, fmt.traces) == (12, 4, 6)
    assert (loop.share, auth.share, fmt.share) == (1.0, 4 / 12, 0.5)
    assert loop.node == "searcher" and fmt.level == "system" and fmt.node == ""
    assert all(i.new and i.trend is None and i.agents == ("shop",) for i in result.issues)
    assert len(loop.exemplars) == 3 and set(loop.exemplars) <= set(loop.trace_ids)
    assert result.traces == 12 and result.critiques == 12 + 4 + 6
    by_issue = {a.issue_id for a in result.assignments}
    assert by_issue == {loop.issue_id, auth.issue_id, fmt.issue_id}
    first = window(12)[0]["trace_id"]
    assert {a.issue_id for a in result.assignments if a.trace_id == first} == by_issue


def test_a_one_off_critique_is_assigned_no_issue() -> None:
    evs = [*window(6), evaluation("f" * 32, [("searcher", "Quantum flux capacitor overheated")])]
    result = issues_offline(evs, CFG, now=1.0)
    odd = [a for a in result.assignments if a.trace_id == "f" * 32]
    assert [a.issue_id for a in odd] == [None]
    assert all("flux" not in i.description.lower() for i in result.issues)


def test_ids_are_stable_across_runs_and_trend_is_reported() -> None:
    tracker = _tracker(sqlite3.connect(":memory:"))
    first = tracker.run(window(12), now=100.0)
    second = tracker.run(window(6, offset=50, with_auth=False), now=200.0)
    assert {i.issue_id for i in second.issues} < {i.issue_id for i in first.issues}
    loop2 = _by_title(second, "arguments")
    assert loop2.issue_id == _by_title(first, "arguments").issue_id
    assert not loop2.new and loop2.trend == 0.0 and loop2.first_seen == 100.0
    assert _by_title(second, "units").trend == pytest.approx(0.0)
    # auth was absent in the second run: it comes back with a trend from share 0
    third = tracker.run(window(12), now=300.0)
    auth3 = _by_title(third, "authentication")
    assert auth3.issue_id == _by_title(first, "authentication").issue_id
    assert auth3.trend == pytest.approx(4 / 12) and not auth3.new


def test_ids_survive_a_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "issues.db")
    tracker = _tracker(store)
    before = {i.title: i.issue_id for i in tracker.run(window(12), now=100.0).issues}
    tracker.close()
    restarted = _tracker(store)
    after = restarted.run(window(9, offset=100), now=200.0)
    restarted.close()
    assert {i.title: i.issue_id for i in after.issues} == before
    rows = sqlite3.connect(store).execute("SELECT COUNT(*) FROM issues_catalogue").fetchone()
    assert rows == (3,)


def test_issues_age_out_and_new_ones_are_events() -> None:
    tracker = _tracker(sqlite3.connect(":memory:"))
    first = tracker.run(window(12), now=100.0)
    assert sorted(e.kind for e in first.events) == ["new"] * 3
    only_loops = [evaluation(f"{i:032x}", [("searcher", LOOP[i % 3].format(n=i))])
                  for i in range(4)]
    tracker.run(only_loops, now=600.0)
    later = tracker.run(only_loops, now=1200.0)  # auth and format last seen at 100
    gone = {_by_title(first, w).issue_id for w in ("authentication", "units")}
    assert set(later.aged_out) == gone
    back = tracker.run(window(12), now=1300.0)
    assert {e.issue.issue_id for e in back.events if e.kind == "new"} == gone  # same text
    assert _by_title(back, "arguments").new is False


def test_each_run_records_every_issues_share_and_only_the_last_runs_stay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tracker = _tracker(sqlite3.connect(":memory:"))
    tracker.run(window(12), now=100.0)
    tracker.run(window(6, offset=50, with_auth=False), now=200.0)  # auth not seen: share 0
    third = tracker.run(window(12), now=300.0)
    assert _by_title(third, "authentication").history == (
        (100.0, pytest.approx(4 / 12)), (200.0, 0.0), (300.0, pytest.approx(4 / 12)))
    assert _by_title(third, "arguments").history == ((100.0, 1.0), (200.0, 1.0), (300.0, 1.0))
    loop_id = _by_title(third, "arguments").issue_id
    (loop_json,) = [i for i in to_json(third)["issues"] if i["issue_id"] == loop_id]
    assert loop_json["history"] == [[100.0, 1.0], [200.0, 1.0], [300.0, 1.0]]
    monkeypatch.setattr("otel_eval.outputs.issues.catalogue.HISTORY_RUNS", 2)
    fourth = tracker.run(window(12), now=400.0)
    assert [at for at, _ in _by_title(fourth, "arguments").history] == [300.0, 400.0]


def test_an_aged_out_issue_takes_its_history_with_it() -> None:
    tracker = _tracker(sqlite3.connect(":memory:"))
    first = tracker.run(window(12), now=100.0)
    only_loops = [evaluation(f"{i:032x}", [("searcher", LOOP[i % 3].format(n=i))])
                  for i in range(4)]
    tracker.run(only_loops, now=1200.0)  # auth and format last seen at 100: aged out
    back = tracker.run(window(12), now=1300.0)
    auth = _by_title(back, "authentication")
    assert auth.issue_id == _by_title(first, "authentication").issue_id  # same text, same id
    assert auth.history == ((1300.0, pytest.approx(4 / 12)),)  # a new issue's history


def _distinct_problems(n: int, tag: str, seed: int) -> list[dict[str, object]]:
    """``n`` problems no other run has (words of their own), each in two traces."""
    rng = random.Random(seed)
    out = []
    for k in range(n):
        text = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(7))
                        for _ in range(6))
        out += [evaluation(f"{tag}{k:03x}{r:028x}", [("searcher", text)]) for r in (0, 1)]
    return out


def test_the_catalogue_keeps_at_most_max_issues_the_least_recently_seen_going_first() -> None:
    """Each run loads the whole catalogue and matches its clusters against every stored
    issue: a flood of distinct recurring critiques must not grow it for age_out_s (a week),
    run after run. Past issues.max_issues, a run first deletes the least recently seen."""
    conn = sqlite3.connect(":memory:")
    tracker = _tracker(conn, IssuesConfig(age_out_s=1e9, max_issues=25))
    runs = [tracker.run(_distinct_problems(20, tag, seed), now=float(seed))
            for seed, tag in enumerate("abc", start=1)]
    first, second, third = ({i.issue_id for i in r.issues} for r in runs)
    assert len(first) == len(second) == len(third) == 20  # every problem is a new issue
    assert runs[1].aged_out == ()  # 20 stored: under the cap
    # the third run found 40 stored: 15 of the first run's (least recently seen) went
    assert len(runs[2].aged_out) == 15 and set(runs[2].aged_out) <= first
    stored = {r[0] for r in conn.execute("SELECT issue_id FROM issues_catalogue")}
    assert stored == (first - set(runs[2].aged_out)) | second | third
    kept = {r[0] for r in conn.execute("SELECT DISTINCT issue_id FROM issue_shares")}
    assert kept == stored  # their share history went with them


def test_share_jump_is_an_event() -> None:
    tracker = _tracker(sqlite3.connect(":memory:"), IssuesConfig(share_jump=0.1))
    evs = window(12)
    # traces 0..9 of which 0 and 3 have the auth failure (the later object of a trace wins)
    tracker.run([*window(10, with_auth=False), evs[0], evs[3]], now=1.0)
    second = tracker.run(evs, now=2.0)  # 4 of 12 have it now
    jumps = [e for e in second.events if e.kind == "share_jump"]
    assert [e.issue.title for e in jumps] == [_by_title(second, "authentication").title]
    assert jumps[0].previous_share == pytest.approx(2 / 10)


def test_latest_revision_wins_and_json_shape() -> None:
    old = evaluation("a" * 32, [("searcher", AUTH[0].format(n=1))])
    new = dict(evaluation("a" * 32, [("searcher", LOOP[0].format(n=1))]), revision=1)
    evs = [old, new, evaluation("b" * 32, [("searcher", LOOP[1].format(n=2))])]
    out = to_json(issues_offline(evs, CFG, now=5.0))
    assert out["traces"] == 2 and out["critiques"] == 2
    assert set(out) == {"schema", "generated_at", "window_s", "embedding", "traces",
                        "critiques", "skipped", "window_truncated", "issues", "resolved",
                        "assignments"}
    (issue,) = out["issues"]
    assert set(issue) == {"issue_id", "level", "node", "title", "description", "share", "trend",
                          "critiques", "traces", "exemplars", "agents", "agents_omitted",
                          "service_agents",
                          "first_seen", "new",
                          "history", "nodes", "severity", "status"}
    assert out["assignments"][0] == {"trace_id": "a" * 32, "span_id": "a" * 32 + "-s0",
                                     "issue_id": issue["issue_id"], "level": "node",
                                     "node": "searcher", "source": "judge:quality"}


@pytest.mark.parametrize("revision", ["2", [1], {"n": 1}, None, 1.5])
def test_a_malformed_revision_is_unknown_and_stops_no_clustering(revision: object) -> None:
    """One bad evaluation must not stop the clustering of the others: a trace seen twice,
    once with a revision that is not a number (an edited ``eval --format jsonl`` file), is
    clustered from its object with a known revision, not a TypeError for the whole run."""
    evs = window(12)
    bad = {**evaluation(evs[0]["trace_id"], [("searcher", AUTH[1].format(n=99))]),
           "revision": revision}
    expected = issues_offline(evs, CFG, now=5.0)
    for order in ([*evs, bad], [bad, *evs]):
        result = issues_offline(order, CFG, now=5.0)
        assert result.traces == 12
        if revision is None or isinstance(revision, float):
            continue  # a known revision (none is 0): the later object or the higher wins
        assert [(i.title, i.traces) for i in result.issues] == [
            (i.title, i.traces) for i in expected.issues]


def test_an_issue_lists_at_most_max_agents_and_counts_the_rest() -> None:
    """Each run may name its own agent: an issue keeps the first MAX_AGENTS_PER_ISSUE (as
    its gauges do) and the count of the others, not every name (5 MB of JSON per request
    for 20,000 runs of 256-character names); its runs are sorted once, by the run."""
    evs = [{**e, "agent": f"agent-{i:02d}"} for i, e in enumerate(window(30))]
    result = issues_offline(evs, CFG, now=1.0)
    loop = _by_title(result, "arguments")
    assert loop.agents == tuple(f"agent-{i:02d}" for i in range(MAX_AGENTS_PER_ISSUE))
    assert loop.agents_omitted == 30 - MAX_AGENTS_PER_ISSUE
    body = to_json(result)["issues"]
    assert {(i["issue_id"], len(i["agents"]), i["agents_omitted"]) for i in body} == {
        (i.issue_id, min(i.traces, 20), max(0, i.traces - 20)) for i in result.issues}
    assert loop.trace_ids == tuple(sorted(e["trace_id"] for e in evs))


def test_injected_namer_names_new_issues_only() -> None:
    calls: list[list[str]] = []

    def namer(texts: object) -> tuple[str, str]:
        calls.append(list(texts))  # type: ignore[call-overload]
        return ("Format of final answer", "The final answer lacks units.")

    tracker = IssueTracker(CFG, sqlite3.connect(":memory:"), namer=namer)
    evs = [evaluation(f"{i:032x}", [], [FORMAT[i % 3].format(n=i)]) for i in range(4)]
    (issue,) = tracker.run(evs, now=1.0).issues
    assert issue.title == "Format of final answer" and len(calls) == 1
    assert 1 <= len(calls[0]) <= 5
    tracker.run(evs, now=2.0)
    assert len(calls) == 1


def test_failing_namer_falls_back_to_terms(caplog: pytest.LogCaptureFixture) -> None:
    def namer(texts: object) -> tuple[str, str]:
        raise RuntimeError("model down")

    evs = [evaluation(f"{i:032x}", [], [FORMAT[i % 3].format(n=i)]) for i in range(4)]
    (issue,) = issues_offline(evs, CFG, now=1.0, namer=namer).issues
    assert "units" in issue.title or "format" in issue.title
    assert "namer failed" in caplog.text


def test_micro_cluster_path_gives_the_same_groups() -> None:
    exact = issues_offline(window(30), CFG, now=1.0)
    reduced = issues_offline(window(30), IssuesConfig(max_exact=8), now=1.0)
    assert sorted(i.traces for i in reduced.issues) == sorted(i.traces for i in exact.issues)


def test_empty_window() -> None:
    result = issues_offline([], CFG, now=1.0)
    assert result.issues == () and result.traces == 0 and result.assignments == ()


def _one_problem_at_three_places() -> list[dict[str, object]]:
    """The loop at system level (even traces), at node searcher (odd ones), and in hung runs
    whose steps name no node and whose agent, travel_agent, was inferred."""
    evs: list[dict[str, object]] = []
    for i in range(9):
        text = LOOP[i % 3].format(n=i + 3)
        tid = f"{i:032x}"
        if i % 3 == 0:
            evs.append(evaluation(tid, [], [text]))
        elif i % 3 == 1:
            evs.append(evaluation(tid, [("searcher", text)]))
        else:
            hung = evaluation(tid, [("", text)], agent="travel_agent")
            evs.append({**hung, "agent_source": "inferred_history"})
    return evs


def test_one_problem_across_levels_and_nodes_is_one_issue_with_a_breakdown() -> None:
    result = issues_offline(_one_problem_at_three_places(), CFG, now=1.0)
    (issue,) = result.issues
    assert issue.traces == 9 and issue.critiques == 9
    assert sorted(issue.nodes) == [("node", "searcher", 3, 3, ""),
                                   ("node", "travel_agent", 3, 3, ""), ("system", "", 3, 3, "")]
    assert (issue.level, issue.node) == ("system", "")  # ties: system level first
    assert "root" not in {a.node for a in result.assignments}
    assert to_json(result)["issues"][0]["nodes"][0] == {
        "level": "system", "node": "", "service": None, "critiques": 3, "traces": 3}
    split = issues_offline(_one_problem_at_three_places(),
                           IssuesConfig(age_out_s=1000.0, per_node=True), now=1.0)
    assert sorted(i.node for i in split.issues) == ["", "searcher", "travel_agent"]


def test_a_pooled_issue_keeps_its_id_when_its_main_node_changes() -> None:
    conn = sqlite3.connect(":memory:")
    evs = _one_problem_at_three_places()
    first = _tracker(conn).run(evs[:6], now=1.0).issues[0]
    second = _tracker(conn).run(evs[3:], now=2.0).issues[0]
    assert second.issue_id == first.issue_id and not second.new


def _hung(i: int) -> dict[str, object]:
    """A run that never ended, its agent inferred from the service's history: no step names
    a node; the non-termination detector reports it at the root (system) and on the last
    LLM step (node)."""
    return {"trace_id": f"{i:032x}", "agent": "travel_agent", "agent_source": "inferred_history",
            "steps": [{"index": 0, "span_id": "a", "node": None},
                      {"index": 1, "span_id": "b", "node": None}],
            "findings": [
                {"detector": "non_termination", "kind": "incomplete", "severity": "error",
                 "message": "the run never finished: the root span did not end",
                 "span_ids": []},
                {"detector": "non_termination", "kind": "pending_tool_calls",
                 "severity": "error", "span_ids": ["b"], "step_indexes": [1],
                 "message": f"the run ended with tool calls that never ran (search_{i}) "
                            "and no final answer"}]}


def test_a_hung_run_is_one_issue_under_its_inferred_agent() -> None:
    looping = [evaluation(f"{i:032x}", [("travel_agent", LOOP[i % 3].format(n=i))],
                          agent="travel_agent") for i in range(6, 12)]
    result = issues_offline([*map(_hung, range(6)), *looping], CFG, now=1.0)
    hung = [i for i in result.issues if "never" in i.title]
    assert len(hung) == 1 and hung[0].traces == 6 and hung[0].critiques == 12
    assert hung[0].nodes == (("system", "", 6, 6, ""), ("node", "travel_agent", 6, 6, ""))
    assert hung[0].title.endswith("(non_termination)") and hung[0].severity == "critical"
    assert "root" not in {a.node for a in result.assignments}
    assert len(result.issues) == 2  # and the loop, its own issue


def _distinct_issues(n: int, seed: int = 7) -> list[dict[str, object]]:
    """``n`` unrelated problems (made-up words), each in two traces: ``n`` new issues."""
    rng = random.Random(seed)
    evs = []
    for k in range(n):
        text = " ".join("".join(rng.choices(string.ascii_lowercase, k=9)) for _ in range(4))
        evs += [evaluation(f"{2 * k + t:032x}", [], [text]) for t in (0, 1)]
    return evs


def test_judge_naming_calls_per_run_are_capped() -> None:
    """A flood of new issues does not spend the judge's shared hourly budget: at most
    naming_max_calls names a run, the largest issues first; the others keep the name from
    their evidence (as when naming fails)."""
    calls: list[list[str]] = []

    def namer(texts: object) -> tuple[str, str]:
        calls.append(list(texts))  # type: ignore[call-overload]
        return (f"Judge name {len(calls)}", "Named by the judge.")

    evs = _distinct_issues(12) + [evaluation(f"{100 + i:032x}", [], [FORMAT[i % 3].format(n=i)])
                                  for i in range(4)]
    cfg = IssuesConfig(naming_max_calls=3)
    result = IssueTracker(cfg, sqlite3.connect(":memory:"), namer=namer).run(evs, now=1.0)
    assert len(result.issues) == 13 and len(calls) == 3
    named = [i for i in result.issues if i.title.startswith("Judge name")]
    assert len(named) == 3 and max(i.traces for i in named) == 4  # the largest is named
    plain = {i.issue_id: i.title for i in issues_offline(evs, cfg, now=1.0).issues}
    assert all(i.title == plain[i.issue_id] for i in result.issues if i not in named)
    assert issues_offline(evs, IssuesConfig(naming_max_calls=0), now=1.0,
                          namer=namer).issues and len(calls) == 3


def test_issues_left_by_the_naming_calls_are_named_by_a_later_run() -> None:
    """naming_max_calls bounds a run's cost, not which issues are ever named: the issues a
    flood left with their evidence title kept it for good, though later runs had calls to
    spare. A later run names them (largest first, within its own calls); an issue the judge
    named keeps its name."""
    calls: list[list[str]] = []

    def namer(texts: object) -> tuple[str, str]:
        calls.append(list(texts))  # type: ignore[call-overload]
        return (f"Judge name {len(calls)}", "Named by the judge.")

    evs = _distinct_issues(7)
    tracker = IssueTracker(IssuesConfig(naming_max_calls=3), sqlite3.connect(":memory:"),
                           namer=namer)
    first = tracker.run(evs, now=1.0)
    assert len(first.issues) == 7 and len(calls) == 3
    judged = {i.issue_id: i.title for i in first.issues if i.title.startswith("Judge name")}
    second = tracker.run(evs, now=2.0)
    assert len(calls) == 6
    assert all(i.title == judged[i.issue_id] for i in second.issues if i.issue_id in judged)
    tracker.run(evs, now=3.0)
    last = tracker.run(evs, now=4.0)
    assert len(calls) == 7 and all(i.title.startswith("Judge name") for i in last.issues)
    assert len({i.title for i in last.issues}) == 7


def test_issues_left_unnamed_are_named_after_a_restart(tmp_path: Path) -> None:
    """The issues a run's naming deadline (or its calls) left with their evidence title were
    remembered in memory only: after a restart they kept it for good. The catalogue marks
    them, so the restarted process's next run names them, and no other."""
    ticks = [0.0]
    calls: list[list[str]] = []

    def hanging(texts: object) -> tuple[str, str]:
        calls.append(list(texts))  # type: ignore[call-overload]
        ticks[0] += 240.0  # each call took four minutes
        return (f"Judge name {len(calls)}", "Named by the judge.")

    evs = _distinct_issues(6)
    cfg = IssuesConfig(naming_max_calls=3, naming_deadline_s=300.0)
    db = str(tmp_path / "issues.db")
    before = IssueTracker(cfg, db, namer=hanging, monotonic=lambda: ticks[0])
    first = before.run(evs, now=1.0)
    before.close()
    assert len(first.issues) == 6 and len(calls) == 2  # the deadline stopped the third
    judged = {i.issue_id: i.title for i in first.issues if i.title.startswith("Judge name")}
    after = IssueTracker(cfg, db, namer=hanging, monotonic=lambda: ticks[0])
    second = after.run(evs, now=2.0)
    assert len(calls) == 4
    assert all(i.title == judged[i.issue_id] for i in second.issues if i.issue_id in judged)
    third = after.run(evs, now=3.0)
    after.close()
    assert len(calls) == 6 and all(i.title.startswith("Judge name") for i in third.issues)


class _Scanned(np.ndarray):
    """Cluster labels that count the elements numpy operations (ufuncs) read from them."""

    read = 0

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _Scanned.read += sum(a.size for a in inputs if isinstance(a, _Scanned))
        plain = [np.asarray(a) if isinstance(a, _Scanned) else a for a in inputs]
        return getattr(ufunc, method)(*plain, **kwargs)


def test_grouping_by_label_is_linear_when_every_text_is_its_own_cluster(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """No vocabulary (non-Latin text) and no taxonomy: every distinct text is its own
    cluster. Grouping the texts by label scanned every label once per label (quadratic in
    the window's distinct texts); one pass now."""
    from otel_eval.outputs.issues import cluster as cluster_module

    real = cluster_module.cluster
    monkeypatch.setattr(cluster_module, "cluster",
                        lambda *a, **k: real(*a, **k).view(_Scanned))
    rng = random.Random(3)
    n = 1500
    evs = [evaluation(f"{i:032x}", [], [" ".join(
        "".join(rng.choices("абвгдежзиклмнопрстуфхцчшщэюя", k=8)) for _ in range(3))])
        for i in range(n)]
    _Scanned.read = 0
    result = issues_offline(evs, IssuesConfig(taxonomy_model=""), now=1.0)
    assert result.critiques == n and result.issues == ()
    assert _Scanned.read <= 10 * n


def test_naming_stops_at_the_runs_deadline_and_the_rest_are_named_later() -> None:
    """A hanging judge provider makes each namer call last up to ask_timeout_s: the naming
    step of a run starts no call past issues.naming_deadline_s (on the injected monotonic
    clock), so the run ends long before OtelEvalIssuesJobStale; the new issues left keep
    their evidence title for now, are counted, and are named at a later run."""
    ticks = [0.0]
    calls: list[list[str]] = []

    def hanging(texts: object) -> tuple[str, str]:
        calls.append(list(texts))  # type: ignore[call-overload]
        ticks[0] += 240.0  # each call took four minutes
        return (f"Judge name {len(calls)}", "Named by the judge.")

    evs = _distinct_issues(6)
    cfg = IssuesConfig(naming_max_calls=10, naming_deadline_s=300.0)
    tracker = IssueTracker(cfg, sqlite3.connect(":memory:"), namer=hanging,
                           monotonic=lambda: ticks[0])
    first = tracker.run(evs, now=1.0)
    assert len(first.issues) == 6 and len(calls) == 2  # started at 0 s and 240 s
    assert sum(i.title.startswith("Judge name") for i in first.issues) == 2
    assert tracker.naming_deferred == 4
    second = tracker.run(evs, now=2.0)  # a later run names those left, within its deadline
    assert len(calls) == 4 and tracker.naming_deferred == 6
    assert sum(i.title.startswith("Judge name") for i in second.issues) == 4
    assert {i.issue_id for i in second.issues} == {i.issue_id for i in first.issues}
    tracker.run(evs, now=3.0)
    tracker.run(evs, now=4.0)
    assert len(calls) == 6 and tracker.naming_deferred == 6  # all named: no call more
    named = tracker.run(evs, now=5.0)
    assert len(calls) == 6 and all(i.title.startswith("Judge name") for i in named.issues)


def test_the_breakdown_keeps_same_named_agent_nodes_of_two_services_apart() -> None:
    """An agent node is a name within its service (docs/sessions.md, the per-trace metrics):
    one problem at service "search"'s planner and at service "billing"'s planner is two
    entries of the breakdown, each with its own counts, not one "planner" adding them up."""
    evs = []
    for i in range(6):
        ev = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))], agent="planner")
        evs.append({**ev, "service": "search" if i < 4 else "billing"})
    (issue,) = issues_offline(evs, CFG, now=1.0).issues
    assert issue.nodes == (("node", "planner", 4, 4, "search"),
                           ("node", "planner", 2, 2, "billing"))
    assert (issue.level, issue.node) == ("node", "planner")
    assert to_json(issues_offline(evs, CFG, now=1.0))["issues"][0]["nodes"] == [
        {"level": "node", "node": "planner", "service": "search", "critiques": 4, "traces": 4},
        {"level": "node", "node": "planner", "service": "billing", "critiques": 2,
         "traces": 2}]


def test_merge_calls_stop_at_the_runs_deadline_too() -> None:
    """The synthesis (merge) calls go to the same judge: with its provider hanging each can
    last the ask timeout too, so synthesis_max_calls of them alone outlasted
    OtelEvalIssuesJobStale's hour. None starts past issues.naming_deadline_s; the clusters
    stay as they are (as when this run's calls are spent)."""
    ticks = [0.0]
    calls: list[int] = []

    def hanging(drafts: object, stragglers: object) -> None:
        calls.append(1)
        ticks[0] += 780.0
        return None

    evs = []
    for i in range(6):
        evs.append(evaluation(f"{i:032x}", [(node, text) for node in ("a", "b", "c")
                                            for text in (LOOP[i % 3].format(n=i),
                                                         AUTH[i % 3].format(n=i))]))
    cfg = IssuesConfig(per_node=True, synthesis_max_calls=4, naming_deadline_s=300.0)
    IssueTracker(cfg, sqlite3.connect(":memory:"), synthesizer=hanging,
                 monotonic=lambda: ticks[0]).run(evs, now=1.0)
    assert len(calls) == 1


def test_per_node_issues_of_two_services_same_named_agents_are_two_issues() -> None:
    """issues.per_node clusters each agent node apart, and an agent node is a name within its
    service: service "search"'s planner and service "billing"'s planner with one problem are
    two issues, each of its own service, whose ids stay apart across runs."""
    evs = []
    for i in range(8):
        ev = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))], agent="planner")
        evs.append({**ev, "service": "search" if i % 2 else "billing"})
    cfg = IssuesConfig(age_out_s=1000.0, per_node=True)
    tracker = _tracker(sqlite3.connect(":memory:"), cfg)
    first = tracker.run(evs, now=1.0)
    assert sorted((i.nodes[0][4], i.traces) for i in first.issues) == [
        ("billing", 4), ("search", 4)]
    second = tracker.run(evs, now=2.0)
    assert len({i.issue_id for i in second.issues}) == 2
    assert {(i.issue_id, i.nodes[0][4]) for i in second.issues} == {
        (i.issue_id, i.nodes[0][4]) for i in first.issues}


def _pre_service_catalogue(path: Path) -> tuple[list[dict[str, Any]], set[str]]:
    """A catalogue file as an otel-eval before migration 12 left it: per-node issues, one
    "planner" issue spanning services "search" and "billing" (no service column); the
    window of both services' runs, and the old ids."""
    evs = []
    for i in range(8):
        ev = evaluation(f"{i:032x}", [("planner", LOOP[i % 3].format(n=i))], agent="planner")
        evs.append({**ev, "service": "search" if i % 2 else "billing"})
    old = _tracker(str(path), IssuesConfig(age_out_s=1000.0, per_node=True))
    ids = {i.issue_id for i in old.run([{k: v for k, v in e.items() if k != "service"}
                                        for e in evs], now=1.0).issues}
    old.close()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE issues_catalogue DROP COLUMN service")
    db.execute("ALTER TABLE issues_catalogue DROP COLUMN unnamed")
    db.commit()
    db.close()
    return evs, ids


def test_issues_catalogued_before_services_get_new_ids_once_per_node(tmp_path: Path) -> None:
    """docs/store.md, migration 12: with issues.per_node an issue catalogued before it (its
    node's services together) gets new ids once, one per service: the first run reports the
    old id resolved and each service's issue new, on no single service's behalf; the next
    runs keep the new ids. Without per_node (the default: every node together) an issue is
    not a service's, and keeps its id."""
    evs, old_ids = _pre_service_catalogue(tmp_path / "c.db")
    assert len(old_ids) == 1
    tracker = _tracker(str(tmp_path / "c.db"), IssuesConfig(age_out_s=1000.0, per_node=True))
    first = tracker.run(evs, now=2.0)
    assert sorted(i.nodes[0][4] for i in first.issues) == ["billing", "search"]
    assert all(i.new and i.issue_id not in old_ids for i in first.issues)
    assert {r.issue_id for r in first.resolved} == old_ids
    second = tracker.run(evs, now=3.0)
    assert {i.issue_id for i in second.issues} == {i.issue_id for i in first.issues}
    assert second.resolved == ()
    tracker.close()
    evs, old_ids = _pre_service_catalogue(tmp_path / "d.db")
    tracker = _tracker(str(tmp_path / "d.db"), IssuesConfig(age_out_s=1000.0))
    (kept,) = tracker.run(evs, now=2.0).issues
    tracker.close()
    assert kept.issue_id in old_ids and not kept.new
    assert sorted(n[4] for n in kept.nodes) == ["billing", "search"]


def test_turning_per_node_on_keeps_the_ids_of_one_nodes_issues() -> None:
    """issues.per_node's documentation: changing it keeps the id of a stored issue a cluster
    of its new group still matches (it said every issue got a new id)."""
    db = sqlite3.connect(":memory:")
    evs = [{**e, "service": "shop"} for e in window(12)]
    before = _tracker(db, IssuesConfig(age_out_s=1000.0)).run(evs, now=1.0)
    after = _tracker(db, IssuesConfig(age_out_s=1000.0, per_node=True)).run(evs, now=2.0)
    assert {i.issue_id for i in after.issues} == {i.issue_id for i in before.issues}
    assert not any(i.new for i in after.issues)


def test_an_agent_node_with_nul_keeps_its_issue_across_runs() -> None:
    """The catalogue holds text as both stores do, NUL as U+FFFD; the critiques read from
    the stored bodies keep the NUL (a JSON escape). Compared as read, the node (and service)
    of a stored issue never matched its own critiques again: with ``per_node`` the issue was
    resolved and a new one opened, and named again, at every run."""
    calls: list[object] = []

    def namer(texts: object) -> tuple[str, str]:
        calls.append(texts)
        return ("Repeated search", "The searcher repeats its call.")

    evs = [evaluation(f"{i:032x}", [("sear\x00cher", LOOP[i % 3].format(n=i + 3))])
           for i in range(6)]
    for ev in evs:
        ev["service"] = "sh\x00op"
    tracker = IssueTracker(IssuesConfig(per_node=True), sqlite3.connect(":memory:"),
                           namer=namer)
    (first,) = tracker.run(evs, now=1.0).issues
    second = tracker.run(evs, now=2.0)
    assert [i.issue_id for i in second.issues] == [first.issue_id]
    assert not second.resolved and len(calls) == 1
    assert second.issues[0].node == "sear\ufffdcher"
