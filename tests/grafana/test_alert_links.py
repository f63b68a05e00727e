"""An alert's link (``otel_eval_url``) lists the runs behind its series: exactly the runs its
metric counted, no others. Before, the non-termination alerts linked ``detector=non_termination``
(also the runs that ended raising: ``root_error``, ``llm_error``, ``no_output``, which
``otel_eval_traces_non_terminated_total`` does not count) and the budget alerts
``detector=budget`` (also every run whose cost was partly unpriced, ``cost_unknown``, which
``otel_eval_traces_budget_overruns_total`` does not count): the page behind an alert listed
runs that never did what it pages about."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from grafana_files import alert_rules, metric_names, panels

from otel_eval.base.results import Evaluation, Finding, Verdict
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.reader import SessionReader
from otel_eval.store import EvaluationStore, Store
from otel_eval.store.query import EvaluationQuery
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
            "otel_eval_traces_budget_overruns_total")


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
    60 minutes up to the evaluation that fired it: `since`, `until`), not the newest runs of
    the agent. Before, it carried no window: opened when the alert fired, or an hour later,
    the list began with whatever ran since, and the runs that fired it were further down or
    on a later page."""
    now_s = 1_800_000_000
    store = Store(str(tmp_path / "s.db"))
    checked = 0
    for rule in alert_rules():
        template = (rule.get("annotations") or {}).get("otel_eval_url", "")
        if "traces_completed" not in rule.get("expr", "") or not template:
            continue
        window_s = 60 * max(int(m) for m in re.findall(r"\[(\d+)m\]", rule["expr"]))
        params = _link(template, now_s=now_s)
        assert (params.get("since"), params.get("until")) == (
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
                url = template.replace("${otel_eval_url}", "{{ $externalLabels.otel_eval_url }}")
                url = url.replace("${__from:date:seconds}", "0").replace(
                    "${__to:date:seconds}", str(NOW_S))
                url = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                             r"{{ $labels.\1 | urlquery }}", url)
                params = _link(url)
                listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
                    {**params, "limit": ["100"]})).evaluations}
                counted = {ev.trace_id for ev in runs
                           if not counters or _counted(ev, counters[0])}
                assert listed == counted, (panel["title"], target["refId"], template)
                checked += 1
    assert checked >= 7
    store.close()


def test_a_panel_series_links_the_runs_of_the_dashboards_time_range(tmp_path: Path) -> None:
    """A series' link to its runs carries the dashboard's time range (Grafana's
    ``${__from:date:seconds}``, ``${__to:date:seconds}``): the runs the panel shows, not the
    newest runs of the agent. Before, it carried none: a spike clicked on yesterday's graph
    opened today's runs."""
    start_s, end_s = 1_800_000_000, 1_800_021_600  # a 6 hour range
    store = Store(str(tmp_path / "s.db"))
    edges = (start_s - 1, start_s, end_s - 1, end_s)
    runs = [Evaluation(Trajectory(f"{i:032x}", "otlp", "complete", [], service="shop",
                                  agent="planner"),
                       [Finding("loop", "stagnation", "error", "x"),
                        Finding("non_termination", "halted", "error", "x")],
                       Verdict(False, []), evaluated_at_ns=t * 10**9)
            for i, t in enumerate(edges)]
    store.put_many(runs)
    checked = 0
    for panel in panels():
        for target in panel["targets"]:
            for template in _panel_links(panel, target["refId"]):
                if not template.startswith("${otel_eval_url}/ui/?"):
                    continue
                url = template.replace("${__from:date:seconds}", str(start_s)).replace(
                    "${__to:date:seconds}", str(end_s)).replace("${otel_eval_url}", "")
                url = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                             lambda m: LABELS[m.group(1)], url)
                params = parse_qs(urlsplit(url).query, keep_blank_values=True)
                assert (params.get("since"), params.get("until")) == (
                    [str(start_s)], [str(end_s)]), (panel["title"], template)
                listed = {b["trace_id"] for b in store.query(EvaluationQuery.from_params(
                    {**params, "limit": ["100"]})).evaluations}
                assert listed == {runs[1].trace_id, runs[2].trace_id}, panel["title"]
                checked += 1
    assert checked >= 7
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
                url = template.replace("${otel_eval_url}", "").replace(
                    "${__from:date:seconds}", "0").replace(
                    "${__to:date:seconds}", str(2 * 10**9))
                url = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                             lambda m: {"service": "desk", "agent": "concierge"}[m.group(1)],
                             url)
                params = parse_qs(urlsplit(url).query, keep_blank_values=True)
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


def test_a_session_panel_series_links_the_conversations_the_range_counts(
        tmp_path: Path) -> None:
    """A Conversations panel's series (failure rate, session loop and non-termination rate)
    counts sessions as they complete, the idle timeout after their last turn: its link
    lists those completed in the dashboard's range (``counted_since``, ``counted_until``
    from Grafana's ``${__from:date:seconds}``, ``${__to:date:seconds}``). Before, it
    carried no window: a spike clicked on yesterday's graph opened today's conversations."""
    start_s, end_s, idle_s = 1_800_000_000, 1_800_021_600, 1800
    reader = _counted_in(start_s, end_s, idle_s, tmp_path)
    checked = 0
    for panel in panels():
        for target in panel["targets"]:
            for template in _panel_links(panel, target["refId"]):
                if not template.startswith("${otel_eval_url}/ui/sessions?"):
                    continue
                url = template.replace("${__from:date:seconds}", str(start_s)).replace(
                    "${__to:date:seconds}", str(end_s)).replace("${otel_eval_url}", "")
                url = re.sub(r"\$\{__field\.labels\.(\w+):percentencode\}",
                             lambda m: {"service": "desk", "agent": "concierge"}[m.group(1)],
                             url)
                params = parse_qs(urlsplit(url).query, keep_blank_values=True)
                assert (params.get("counted_since"), params.get("counted_until")) == (
                    [str(start_s)], [str(end_s)]), (panel["title"], template)
                window = {k: v for k, v in params.items() if k not in ("passed", "detector")}
                listed = {r["session_id"] for r in reader.page(SessionQuery.from_params(
                    {**window, "limit": ["10"]}))["sessions"]}
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
