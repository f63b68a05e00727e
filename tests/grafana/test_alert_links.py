"""An alert's link (``otel_eval_url``) lists the runs behind its series: exactly the runs its
metric counted, no others. Before, the non-termination alerts linked ``detector=non_termination``
(also the runs that ended raising: ``root_error``, ``llm_error``, ``no_output``, which
``otel_eval_traces_non_terminated_total`` does not count) and the budget alerts
``detector=budget`` (also every run whose cost was partly unpriced, ``cost_unknown``, which
``otel_eval_traces_over_budget_total`` does not count): the page behind an alert listed
runs that never did what it pages about."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from grafana_files import alert_rules, dashboard, metric_names, panels

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.outputs.ui.routes import PAGES, Sources
from otel_eval.store import EvaluationStore, Store
from otel_eval.store.query import EvaluationQuery, Page
from otel_eval.store.sessions import SessionQuery
from otel_eval.telemetry.metrics import Metrics

LABELS = {"service": "shop", "agent": "planner"}
FINDINGS = [("non_termination", "halted"), ("non_termination", "incomplete"),
            ("non_termination", "root_error"), ("non_termination", "llm_error"),
            ("non_termination", "no_output"), ("budget", "steps_exceeded"),
            ("budget", "cost_usd_exceeded"), ("budget", "cost_unknown"),
            ("loop", "stagnation"), ("tool_call", "runtime")]
# the per-trace counters an alert link stands for (the numerator of its share)
COUNTERS = ("otel_eval_traces_with_loop_total", "otel_eval_traces_non_terminated_total",
            "otel_eval_traces_over_budget_total")


def _evaluation(i: int, detector: str, kind: str) -> Evaluation:
    traj = Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop", agent="planner")
    severity = "info" if kind == "cost_unknown" else "error"
    return Evaluation(traj, [Finding(detector, kind, severity, "x")], Verdict(False, []),
                      evaluated_at_ns=10**18 + i)


def _counted(ev: Evaluation, counter: str) -> bool:
    m = Metrics()
    m.evaluation_stored(ev, 0.0, superseded=False)
    return any(s.value > 0 for f in m.registry.collect() for s in f.samples
               if s.name == counter)


# Prometheus' rule evaluation time, as the rules' links read it (`query "time()"`)
NOW_S = 10**9 + 60  # a minute after the runs below were evaluated
_QUERY = re.compile(r'\{\{ with query "time\(\)(?: - (\d+))?" \}\}'
                    r'\{\{ \. \| first \| value \| printf "%\.0f" \}\}\{\{ end \}\}')


def _link(template: str, labels: dict[str, str] = LABELS,
          now_s: int = NOW_S) -> dict[str, list[str]]:
    url = _QUERY.sub(lambda m: str(now_s - int(m.group(1) or 0)), template)
    url = re.sub(r"\{\{ \$externalLabels\.otel_eval_url \}\}", "", url)
    url = re.sub(r"\{\{ \$labels\.(\w+) \| urlquery \}\}",
                 lambda m: quote(labels[m.group(1)], safe=""), url)
    assert "{{" not in url, url
    return parse_qs(urlsplit(url).query, keep_blank_values=True)


def test_an_alert_link_lists_exactly_the_runs_its_metric_counts(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    runs = [_evaluation(i, d, k) for i, (d, k) in enumerate(FINDINGS, start=1)]
    store.put_many(runs)
    checked = 0
    for rule in alert_rules():
        template = (rule.get("annotations") or {}).get("otel_eval_url", "")
        counters = [c for c in COUNTERS if c in metric_names(rule.get("expr", ""))]
        if "detector=" not in template or not counters:
            continue
        params = _link(template)
        listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
            {**params, "limit": ["100"]})).evaluations}
        counted = {ev.trace_id for ev in runs if _counted(ev, counters[0])}
        assert listed == counted, (rule["alert"], params["detector"])
        checked += 1
    assert checked >= 6


def test_an_alert_link_opens_the_window_its_expression_counts(tmp_path: Path) -> None:
    """An agent alert's link lists the runs of the window its expression counts (15, 30 or
    60 minutes up to the evaluation that fired it: `counted_since`, `counted_until`), not the
    newest runs of the agent. Before, it carried no window: opened when the alert fired, or
    an hour later, the list began with whatever ran since, and the runs that fired it were
    further down or on a later page. The window is of the runs' first evaluations, which the
    metrics count: a run re-evaluated after late spans (counted only as superseded) stays in
    the window that counted it, and is not in the one its re-evaluation fell in (before, the
    stored evaluation time, which the re-evaluation moves, was selected on)."""
    now_s = 1_800_000_000
    store = Store(str(tmp_path / "s.db"))
    checked = 0
    for rule in alert_rules():
        template = (rule.get("annotations") or {}).get("otel_eval_url", "")
        if "traces_completed" not in rule.get("expr", "") or not template:
            continue
        window_s = 60 * max(int(m) for m in re.findall(r"\[(\d+)m\]", rule["expr"]))
        params = _link(template, now_s=now_s)
        assert (params.get("counted_since"), params.get("counted_until")) == (
            [str(now_s - window_s)], [str(now_s)]), rule["alert"]
        # a looping, non-terminated, overrun run before the window, one in it, one after
        edges = (now_s - window_s - 1, now_s - window_s, now_s - 1, now_s)
        runs = [Evaluation(Trajectory(f"{checked:08x}{i:024x}", "otlp", "complete", [],
                                      service="shop", agent="planner"),
                           [Finding(d, k, "error", "x") for d, k in
                            (("loop", "stagnation"), ("non_termination", "halted"),
                             ("budget", "steps_exceeded"))],
                           Verdict(False, []), evaluated_at_ns=t * 10**9)
                for i, t in enumerate(edges)]
        store.put_many(runs)
        # late spans: the run before the window re-evaluated in it, the last one in it after
        for run, t in ((runs[0], now_s - 1), (runs[2], now_s + 60)):
            store.put_many([dataclasses.replace(
                run, trajectory=dataclasses.replace(run.trajectory, revision=1),
                evaluated_at_ns=t * 10**9)])
        listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
            {**params, "limit": ["100"]})).evaluations} & {r.trace_id for r in runs}
        assert listed == {runs[1].trace_id, runs[2].trace_id}, rule["alert"]
        checked += 1
    assert checked == 8
    store.close()


def _panel_links(panel: dict[str, Any], ref_id: str) -> list[str]:
    """The URLs of the links a series of ``panel``'s target ``ref_id`` offers: its target's
    own (an override by that query), else the panel's."""
    config = panel.get("fieldConfig") or {}
    for override in config.get("overrides") or ():
        if override["matcher"] == {"id": "byFrameRefID", "options": ref_id}:
            return [p for prop in override["properties"] if prop["id"] == "links"
                    for p in (link["url"] for link in prop["value"])]
    return [link["url"] for link in (config.get("defaults") or {}).get("links") or ()]


# What Grafana fills in a data link (its docs, "Data link variables" and "Global variables"):
# the dashboard's range, the clicked point's time (Unix ms; ``:date:seconds`` formats it),
# the dashboard's variables (the Share window ``$window``) and the series' labels.
DEFAULT_WINDOW = next(v for v in dashboard()["templating"]["list"]
                      if v["name"] == "window")["current"]["value"]


def _clicked(template: str, labels: dict[str, str], at_s: int,
             range_s: tuple[int, int] = (0, 2 * 10**9),
             window: str = DEFAULT_WINDOW) -> dict[str, list[str]]:
    """The query of a panel link as Grafana sends it for the point at ``at_s`` of a graph
    over ``range_s``."""
    return parse_qs(urlsplit(_filled(template, labels, at_s, range_s, window)).query,
                    keep_blank_values=True)


def _filled(template: str, labels: dict[str, str], at_s: int, range_s: tuple[int, int],
            window: str) -> str:
    url = template.replace("${otel_eval_url}", "")
    for name, value in (("__from:date:seconds", range_s[0]), ("__to:date:seconds", range_s[1]),
                        ("__value.time:date:seconds", at_s), ("window", window)):
        url = url.replace("${" + name + "}", str(value))
    url = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                 lambda m: quote(labels[m.group(1)], safe=""), url)
    assert "${" not in url, url
    return url


def _opened(url: str, store: EvaluationStore,
            sessions: SessionReader | None = None) -> set[str]:
    """The trace ids (or conversation ids) the web view lists at ``url``, as a browser
    opens the link: through its routes, the page answered 200."""
    seen: list[Any] = []

    def query(q: EvaluationQuery) -> Page:
        seen.append(store.query(dataclasses.replace(q, limit=1000)))
        return seen[-1]  # type: ignore[no-any-return]

    def page(q: SessionQuery) -> dict[str, Any]:
        assert sessions is not None
        seen.append(sessions.page(dataclasses.replace(q, limit=200)))
        return seen[-1]  # type: ignore[no-any-return]

    sources = Sources(query=query, get=store.get, issues=lambda: None, sessions=page)
    parts = urlsplit(url)
    for pattern, view in PAGES:
        found = re.fullmatch(pattern, parts.path)
        if found:
            status, _, data = view(sources, found, parts.query)
            assert status == 200, (url, data.decode()[-400:])
            (listed,) = seen
            if isinstance(listed, Page):
                return {str(b["trace_id"]) for b in listed.evaluations}
            return {str(r["session_id"]) for r in listed["sessions"]}
    raise AssertionError(url)


def _seconds(window: str) -> int:
    return sum(int(n) * {"m": 60, "h": 3600}[u] for n, u in re.findall(r"(\d+)([mh])", window))


def test_a_panel_series_links_exactly_the_runs_it_counts(tmp_path: Path) -> None:
    """A series of a per-trace panel (the loop and non-termination shares, the Runs in the
    window counts, per agent and per service) links the runs its metric counts: the looping
    runs for a loop share or count, the runs that did not end for a non-termination one,
    every run for the runs count. Before, every one of them linked every run of the agent
    (or service): the 3 looping runs of a Runs in the window series were among the pair's
    hundreds, its link no nearer them than the agent's name."""
    store = Store(str(tmp_path / "s.db"))
    runs = [_evaluation(i, d, k) for i, (d, k) in enumerate(FINDINGS, start=1)]
    store.put_many(runs)
    checked = 0
    for panel in panels():
        for target in panel["targets"]:
            names = metric_names(target["expr"])
            counters = [c for c in COUNTERS if c in names]
            if not counters and names != {"otel_eval_traces_completed_total",
                                          "otel_eval_traces_completed_created"}:
                continue
            for template in _panel_links(panel, target["refId"]):
                params = _clicked(template, LABELS, NOW_S, window="1d")
                listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
                    {**params, "limit": ["100"]})).evaluations}
                counted = {ev.trace_id for ev in runs
                           if not counters or _counted(ev, counters[0])}
                assert listed == counted, (panel["title"], target["refId"], template)
                checked += 1
    assert checked >= 7
    store.close()


def test_a_panel_point_links_the_runs_its_window_counts(tmp_path: Path) -> None:
    """A point of a per-trace panel (the shares and counts over the Share window
    ``$window``) counts the runs of the window up to its time: its link lists those
    (``counted_until`` the point's time, Grafana's ``${__value.time:date:seconds}``, and
    ``counted_window`` the dashboard's ``${window}``: of the runs' first evaluations, which
    the metrics count), not every run of the dashboard's range. Before, it
    carried the range (``${__from}``, ``${__to}``): a spike clicked at 14:00 on a 24-hour
    graph listed the day's runs newest first, the hour behind the spike pages down."""
    start_s, end_s = 1_800_000_000, 1_800_086_400  # a 24 hour range
    at_s = start_s + 43_200  # the point clicked, mid-range
    store = Store(str(tmp_path / "s.db"))
    checked = 0
    for w, window in enumerate(("1h", "15m", "6h")):
        low = at_s - _seconds(window)
        edges = (start_s, low - 1, low, at_s - 1, at_s, end_s - 1)
        runs = [Evaluation(Trajectory(f"{w + 1:02x}{i:030x}", "otlp", "complete", [],
                                      service="shop", agent="planner"),
                           [Finding("loop", "stagnation", "error", "x"),
                            Finding("non_termination", "halted", "error", "x")],
                           Verdict(False, []), evaluated_at_ns=t * 10**9)
                for i, t in enumerate(edges)]
        store.put_many(runs)
        for panel in panels():
            for target in panel["targets"]:
                if "[$window]" not in target["expr"]:
                    continue
                for template in _panel_links(panel, target["refId"]):
                    if not template.startswith("${otel_eval_url}/ui/?"):
                        continue
                    url = _filled(template, LABELS, at_s, (start_s, end_s), window)
                    listed = _opened(url, store) & {r.trace_id for r in runs}
                    assert listed == {runs[2].trace_id, runs[3].trace_id}, (
                        panel["title"], window, template)
                    checked += 1
    assert checked >= 21
    store.close()


def _complete_at(store: EvaluationStore, config: SessionsConfig, now_s: float) -> int:
    """The session job's check at ``now_s``: the sessions it completes are counted then."""
    return SessionJob(store, config, Metrics()).tick(now_s)


def _turn(i: int, session: str, tool_call: bool, passed: bool) -> Evaluation:
    steps = [Step(0, f"{i:016x}", None, "tool", "search", tool_name="search",
                  arguments={"q": "flights"})] if tool_call else []
    traj = Trajectory(f"{i:032x}", "otlp", "complete", steps, service="desk",
                      agent="concierge", start_ns=10**18 + i, session_id=session)
    return Evaluation(traj, [], Verdict(passed, [] if passed else ["bad"]),
                      evaluated_at_ns=10**18 + i)


def test_the_session_loop_alert_links_the_conversations_its_metric_counts(
        tmp_path: Path) -> None:
    """OtelEvalSessionLoopsRepeated counts session loop findings: its link lists the
    conversations with one, not every failed conversation (before, ``passed=false``: a
    conversation failed by one bad turn, with no call repeated, was listed beside them)."""
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_turn(1, "looping", True, True), _turn(2, "looping", True, True),
                    _turn(3, "looping", True, True),  # the same call in 3 turns
                    _turn(4, "bad_turn", False, True), _turn(5, "bad_turn", False, False),
                    _turn(6, "fine", False, True)])
    _complete_at(store, SessionsConfig(), 10**9 + 1800 + 1)  # idle after the last turn
    reader = SessionReader(store, SessionsConfig())
    looping = {r["session_id"] for r in reader.page(SessionQuery(limit=10))["sessions"]
               if any(f["detector"] == "loop" for f in r["findings"])}
    assert looping == {"looping"}
    rules = {r["alert"]: r for r in alert_rules() if "alert" in r}
    template = rules["OtelEvalSessionLoopsRepeated"]["annotations"]["otel_eval_url"]
    # counted at completion, sessions.idle_timeout_s after the last turn (10**9 s)
    params = _link(template, {"service": "desk", "agent": "concierge"},
                   now_s=10**9 + 1800 + 60)
    listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
        {**params, "limit": ["10"]}))["sessions"]}
    assert listed == looping
    store.close()


def test_a_session_findings_series_links_the_conversations_with_that_finding(
        tmp_path: Path) -> None:
    """The Session loop and non-termination rate panel's series each link the conversations
    with the session finding they count (``detector="loop"``, ``"non_termination"``). Before,
    both linked every conversation of the agent."""
    store = Store(str(tmp_path / "s.db"))
    store.put_many([_turn(1, "looping", True, True), _turn(2, "looping", True, True),
                    _turn(3, "looping", True, True), _turn(4, "bad_turn", False, True),
                    _turn(5, "bad_turn", False, False), _turn(6, "fine", False, True)])
    _complete_at(store, SessionsConfig(), 10**9 + 1800 + 1)  # idle after the last turn
    reader = SessionReader(store, SessionsConfig())
    records = reader.page(SessionQuery(limit=10))["sessions"]
    checked = 0
    for panel in panels():
        for target in panel["targets"]:
            found = re.search(r'otel_eval_session_findings_total\{[^}]*detector="(\w+)"',
                              target["expr"])
            if found is None:
                continue
            counted = {r["session_id"] for r in records
                       if any(f["detector"] == found.group(1) for f in r["findings"])}
            for template in _panel_links(panel, target["refId"]):
                params = _clicked(template, {"service": "desk", "agent": "concierge"},
                                  10**9 + 3600, window="1h")
                listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
                    {**params, "limit": ["10"]}))["sessions"]}
                assert listed == counted, (panel["title"], target["refId"], template)
                checked += 1
    assert checked >= 2
    store.close()


def _conversation(n: int, last_s: int) -> list[Evaluation]:
    """Conversation ``c{n}``: the same call in 3 turns (a session loop), its last turn
    evaluated at ``last_s``."""
    out = []
    for k in range(3):
        i = 100 * (n + 1) + k
        steps = [Step(0, f"{i:016x}", None, "tool", "search", tool_name="search",
                      arguments={"q": "flights"})]
        traj = Trajectory(f"{i:032x}", "otlp", "complete", steps, service="desk",
                          agent="concierge", start_ns=(last_s - 2 + k) * 10**9,
                          session_id=f"c{n}")
        out.append(Evaluation(traj, [], Verdict(True, []),
                              evaluated_at_ns=(last_s - 2 + k) * 10**9))
    return out


def _counted_in(start_s: int, end_s: int, idle_s: int, tmp_path: Path) -> SessionReader:
    """A store of conversations completed (counted) just before and just inside the window
    ``[start_s, end_s)``, each by the job's check just after it went ``idle_s`` quiet: c1
    and c2 in it, c0 before it, c3 at its end."""
    store = Store(str(tmp_path / "s.db"))
    config = SessionsConfig(idle_timeout_s=idle_s)
    for n, done_s in enumerate((start_s - 1, start_s, end_s - 1, end_s)):
        store.put_many(_conversation(n, done_s - idle_s - 1))
        assert _complete_at(store, config, done_s) == 1
    return SessionReader(store, config)


def test_the_session_alert_link_opens_the_conversations_its_window_counts(
        tmp_path: Path) -> None:
    """OtelEvalSessionLoopsRepeated counts session loop findings made over the hour up to
    the evaluation that fired it, each when its session completed, sessions.idle_timeout_s
    after its last turn: its link lists the conversations completed in that hour
    (``counted_since``, ``counted_until``: the last turn shifted by the idle timeout, which
    otel-eval knows and the rule does not). Before, it carried no window, as the run alerts
    before theirs: the list began with the agent's newest conversations, open ones among
    them, and those that fired it were further down or on a later page."""
    now_s, idle_s = 1_800_000_000, 600
    reader = _counted_in(now_s - 3600, now_s, idle_s, tmp_path)
    rules = {r["alert"]: r for r in alert_rules() if "alert" in r}
    template = rules["OtelEvalSessionLoopsRepeated"]["annotations"]["otel_eval_url"]
    params = _link(template, {"service": "desk", "agent": "concierge"}, now_s=now_s)
    assert (params.get("counted_since"), params.get("counted_until")) == (
        [str(now_s - 3600)], [str(now_s)])
    listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
        {**params, "limit": ["10"]}))["sessions"]}
    assert listed == {"c1", "c2"}
    reader.store.close()


def test_a_session_panel_point_links_the_conversations_its_window_counts(
        tmp_path: Path) -> None:
    """A Conversations panel's point (failure rate, session loop and non-termination rate,
    over the Share window ``$window``) counts the sessions completed in the window up to its
    time: its link lists those (``counted_until`` the point's time, Grafana's
    ``${__value.time:date:seconds}``, ``counted_window`` the dashboard's ``${window}``).
    Before, it carried the dashboard's range: the conversations of the whole range."""
    at_s, idle_s = 1_800_000_000, 1800
    start_s, end_s = at_s - 43_200, at_s + 43_200  # the point mid-range of 24 hours
    window_s = _seconds(DEFAULT_WINDOW)
    reader = _counted_in(at_s - window_s, at_s, idle_s, tmp_path)
    config = SessionsConfig(idle_timeout_s=idle_s)
    for n, done_s in ((4, start_s + 10), (5, end_s - 10)):  # in the range, not the window
        reader.store.put_many(_conversation(n, done_s - idle_s - 1))
        assert _complete_at(reader.store, config, done_s) == 1
    checked = 0
    for panel in panels():
        for target in panel["targets"]:
            for template in _panel_links(panel, target["refId"]):
                if not template.startswith("${otel_eval_url}/ui/sessions?"):
                    continue
                url = _filled(template, {"service": "desk", "agent": "concierge"}, at_s,
                              (start_s, end_s), DEFAULT_WINDOW)
                url = re.sub(r"&(passed|detector)=[^&]*", "", url)  # the window alone
                listed = _opened(url, reader.store, reader)
                assert listed == {"c1", "c2"}, (panel["title"], template)
                checked += 1
    assert checked >= 3
    reader.store.close()


def test_a_counted_window_lists_the_conversations_completed_in_it(tmp_path: Path) -> None:
    """``counted_since``/``counted_until`` select the conversations whose completion the
    session metrics counted in the window: when the job stored it. Before, they were read
    as the last turn plus ``sessions.idle_timeout_s``, which is not when a conversation is
    completed: the job's check comes up to ``check_interval_s`` later (c0, completed at the
    window's start, was left out), ``max_session_duration_s`` and ``max_open_sessions``
    complete one early (c1, cut in the window, was left out), and a conversation whose
    turns were stored late is not complete at all (c3, open, counted nowhere, was listed)."""
    start_s, end_s, idle_s = 1_800_000_000, 1_800_003_600, 600
    store = Store(str(tmp_path / "s.db"))
    config = SessionsConfig(idle_timeout_s=idle_s)
    store.put_many(_conversation(2, start_s - idle_s - 100))
    assert _complete_at(store, config, start_s - 10) == 1  # c2: before the window
    store.put_many(_conversation(0, start_s - idle_s - 5))
    assert _complete_at(store, config, start_s) == 1  # c0: a check 5 s after it went idle
    store.put_many(_conversation(1, end_s - 100))  # c1: cut for its duration, in the window
    assert _complete_at(store, SessionsConfig(idle_timeout_s=idle_s,
                                              max_session_duration_s=30), end_s - 50) == 1
    store.put_many(_conversation(3, start_s - idle_s + 10))  # c3: stored late, still open
    reader = SessionReader(store, config)
    listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
        {"counted_since": [str(start_s)], "counted_until": [str(end_s)],
         "limit": ["10"]}))["sessions"]}
    assert listed == {"c0", "c1"}
    store.close()


def test_a_conversation_resumed_stays_in_the_window_that_counted_it(tmp_path: Path) -> None:
    """A conversation completed, then resumed after the idle timeout and completed again, is
    counted once by the session metrics (its loop finding, the alert's), at its first
    completion; the second counts only as re-opened. The alert's window lists it there.
    Before, the window read its last completion: the alert that fired on its loop opened a
    list without it."""
    now_s, idle_s = 1_800_000_000, 600
    store = Store(str(tmp_path / "s.db"))
    config = SessionsConfig(idle_timeout_s=idle_s)
    metrics = Metrics()
    store.put_many(_conversation(0, now_s - 1800))
    assert SessionJob(store, config, metrics).tick(now_s - 1800 + idle_s + 1) == 1
    resumed = _conversation(0, now_s + 10)[-1]  # the user comes back, after the alert
    resumed.trajectory.trace_id = "f" * 32
    store.put_many([resumed])
    assert SessionJob(store, config, metrics).tick(now_s + 10 + idle_s + 1) == 1
    counted = {s.name: s.value for f in metrics.registry.collect() for s in f.samples
               if s.name in ("otel_eval_sessions_completed_total",
                             "otel_eval_sessions_reopened_total")}
    assert counted == {"otel_eval_sessions_completed_total": 1,
                       "otel_eval_sessions_reopened_total": 1}
    rules = {r["alert"]: r for r in alert_rules() if "alert" in r}
    template = rules["OtelEvalSessionLoopsRepeated"]["annotations"]["otel_eval_url"]
    params = _link(template, {"service": "desk", "agent": "concierge"}, now_s=now_s)
    listed = {r["session_id"] for r in SessionReader(store, config).page(
        SessionQuery.from_params({**params, "limit": ["10"]}))["sessions"]}
    assert listed == {"c0"}
    store.close()


def test_a_conversation_is_linked_from_the_agent_its_metrics_count_it_under(
        tmp_path: Path) -> None:
    """A conversation handed from one agent to another (triage's turns, then billing's) is
    counted by the session metrics under one agent, its last turn's: the session alert's
    link for that agent lists it, the other agent's lists it not. Before, the ``agent``
    filter took any turn's agent: triage's alert link (and its panels' links) listed a
    conversation its series never counted, beside those it did."""
    now_s, idle_s = 1_800_000_000, 600
    store = Store(str(tmp_path / "s.db"))
    turns = _conversation(0, now_s - 1800)
    for turn, agent in zip(turns, ("triage", "triage", "billing"), strict=True):
        turn.trajectory.agent = agent
    store.put_many(turns)
    config = SessionsConfig(idle_timeout_s=idle_s)
    metrics = Metrics()
    assert SessionJob(store, config, metrics).tick(now_s - 1800 + idle_s + 1) == 1
    counted = {s.labels["agent"] for f in metrics.registry.collect() for s in f.samples
               if s.name == "otel_eval_session_findings_total" and s.labels["detector"] == "loop"}
    assert counted == {"billing"}
    rules = {r["alert"]: r for r in alert_rules() if "alert" in r}
    template = rules["OtelEvalSessionLoopsRepeated"]["annotations"]["otel_eval_url"]
    reader = SessionReader(store, config)
    for agent, expected in (("billing", {"c0"}), ("triage", set())):
        params = _link(template, {"service": "desk", "agent": agent}, now_s=now_s)
        listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
            {**params, "limit": ["10"]}))["sessions"]}
        assert listed == expected, agent
    store.close()
