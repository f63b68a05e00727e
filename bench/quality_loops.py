"""Loop, code-action and localisation figures of ``bench/quality.py`` (issue 13.1, 13.2, 13.5).

- TRAIL GAIA: trace-level precision/recall of the loop detector against "Resource Abuse",
  *before* (the same code with code actions not read, loop keys over all arguments and
  rule (f) off: the behaviour before issue 13) and *after*; the
  findings by rule; code-action coverage (code blocks in LLM replies, parsed, calls of known
  tools, calls that became steps); localisation: per annotated category a detector covers,
  how often one of its findings sits on the annotated span, its parent / the LLM step that
  decided it, or a child / a call it made.
- SWE-bench mini-swe-agent: loop rates for resolved vs unresolved runs, before/after; the
  same runs as an instrumentation that records only LLM calls would send them (the loader's
  bash tool spans removed): share of bash actions rebuilt from the replies, and whether the
  loop findings stay the same.

Thresholds are the detectors' defaults (declared in detectors/config.py before these figures
were measured); nothing is fitted to the labels here.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.detectors import calls as calls_stage
from otel_eval.evaluate.trajectory import build_trajectory
from otel_eval.evaluate.trajectory import passes as trajectory_stage
from otel_eval.receive.loaders import load_path

CFG = TrajectoryConfig()
# The TRAIL categories the deterministic detectors cover, and which detectors cover them.
COVERED = {
    "resource abuse": ("loop",),
    "tool-related": ("tool_call", "recovery"),
    "tool selection": ("tool_call",),
    "timeout issues": ("non_termination", "budget"),
    "resource exhaustion": ("non_termination", "budget"),
}


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 3) if den else None


@contextlib.contextmanager
def _as_before() -> Iterator[None]:
    """The stages as before issue 13: code actions not read, loop keys over all arguments
    (not only the declared ones), shell commands split by a regex for the read-only test.
    Rule (f) is switched off by ``_before_config``."""
    saved = (trajectory_stage.rebuild_code_actions, calls_stage._declared,
             calls_stage.shell_commands)
    trajectory_stage.rebuild_code_actions = lambda steps, tools, limit, *_: (steps, {})  # type: ignore
    calls_stage._declared = lambda arguments, schema: arguments  # type: ignore
    # the read-only test falls back to its regex split, as before shlex
    calls_stage.shell_commands = lambda command: ([], False, "off")  # type: ignore
    try:
        yield
    finally:
        (trajectory_stage.rebuild_code_actions, calls_stage._declared,
         calls_stage.shell_commands) = saved


def _before_config(config: DetectorsConfig) -> DetectorsConfig:
    """``config`` with rule (f) off (a group can never reach this size)."""
    return replace(config, loop=replace(config.loop, reworded_min_calls=10**9))


def _annotations(folder: Path) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for path in sorted(folder.glob("*.json")):
        text = re.sub(r",\s*([\]}])", r"\1", path.read_text())  # one file has a trailing comma
        out[path.stem] = json.loads(text).get("errors", [])
    return out


def _category(error: dict[str, Any]) -> str:
    name = re.sub(r"\s+errors?$", "", str(error.get("category", "")).strip().lower())
    return "context handling failures" if name == "context handling failure" else name


def _confusion(flags: list[tuple[bool, bool]]) -> dict[str, Any]:
    tp = sum(f and a for f, a in flags)
    fp = sum(f and not a for f, a in flags)
    fn = sum(a and not f for f, a in flags)
    return {"precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn),
            "tp": tp, "fp": fp, "fn": fn, "tn": len(flags) - tp - fp - fn}


# --- localisation ---------------------------------------------------------------------------


class _Tree:
    """Who decided what in one trace: parents, descendants, and for OpenInference's sibling
    layout (an LLM span and the TOOL spans it asked for share a parent) the LLM step that
    decided each call and the calls each LLM step made."""

    def __init__(self, trace: Trace, t: Trajectory) -> None:
        self.parent = {s.span_id: s.parent_span_id for s in trace.spans}
        self.decided_by: dict[str, str] = {}
        self.made: dict[str, set[str]] = {}
        last_llm: dict[str | None, str] = {}
        for step in t.steps:
            if step.rebuilt:
                continue
            if step.kind == "llm":
                last_llm[step.parent_span_id] = step.span_id
            elif step.kind in ("tool", "agent") and step.parent_span_id in last_llm:
                llm = last_llm[step.parent_span_id]
                self.decided_by[step.span_id] = llm
                self.made.setdefault(llm, set()).add(step.span_id)

    def ancestors(self, span: str) -> set[str]:
        seen: set[str] = set()
        p = self.parent.get(span)
        while p and p not in seen:
            seen.add(p)
            p = self.parent.get(p)
        return seen

    def where(self, location: str, flagged: set[str]) -> str:
        """``on`` | ``parent`` | ``child`` | ``elsewhere`` (nearest relation first)."""
        if location in flagged:
            return "on"
        if self.parent.get(location) in flagged or self.decided_by.get(location) in flagged:
            return "parent"
        made = self.made.get(location, set())
        if any(location in self.ancestors(s) or s in made for s in flagged):
            return "child"
        return "elsewhere"


def _localise(rows: list[tuple[Trace, Trajectory, list[Finding]]],
              notes: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    table: dict[str, Counter[str]] = {c: Counter() for c in COVERED}
    for trace, t, findings in rows:
        tree = _Tree(trace, t)
        for error in notes.get(t.trace_id, []):
            category = _category(error)
            if category not in COVERED:
                continue
            flagged = {s for f in findings if f.detector in COVERED[category]
                       for s in f.span_ids}
            row = table[category]
            row["annotations"] += 1
            row[tree.where(str(error.get("location", "")), flagged) if flagged else "none"] += 1
    return {c: {k: row[k] for k in ("annotations", "on", "parent", "child", "elsewhere",
                                    "none")} for c, row in table.items()}


# --- TRAIL ----------------------------------------------------------------------------------


def _trail_rows(folder: Path, config: DetectorsConfig,
                ) -> list[tuple[Trace, Trajectory, list[Finding]]]:
    detectors = Detectors(config)
    rows = []
    for trace in load_path(folder):
        t = build_trajectory(trace, CFG)
        rows.append((trace, t, detectors.evaluate(t)[0]))
    return rows


def _coverage(ts: list[Trajectory]) -> dict[str, Any]:
    total: Counter[str] = Counter()
    for t in ts:
        total.update(t.code_actions)
    unparsed = sum(v for k, v in total.items() if k.startswith("unparsed_"))
    return {"code_blocks": total["blocks"], "parsed": total["blocks"] - unparsed,
            "parsed_share": _ratio(total["blocks"] - unparsed, total["blocks"]),
            "unparsed": {k: v for k, v in total.items() if k.startswith("unparsed_")},
            "calls_of_known_tools": total["calls"], "calls_that_are_steps": total["steps"],
            "steps_share": _ratio(total["steps"], total["calls"]),
            "rebuilt_steps": total["rebuilt"]}


def trail_loops(datasets: Path) -> dict[str, Any]:
    folder = datasets / "trail" / "GAIA"
    notes = _annotations(folder / "annotations")
    with _as_before():
        before = _trail_rows(folder / "traces", _before_config(DetectorsConfig()))
    after = _trail_rows(folder / "traces", DetectorsConfig())

    def flags(rows: list[tuple[Trace, Trajectory, list[Finding]]]) -> list[tuple[bool, bool]]:
        return [(any(f.detector == "loop" for f in fs),
                 any(_category(e) == "resource abuse" for e in notes.get(t.trace_id, [])))
                for _, t, fs in rows]

    rules: Counter[str] = Counter(f.kind for *_, fs in after for f in fs if f.detector == "loop")
    return {
        "traces": len(after),
        "annotated_resource_abuse": sum(a for _, a in flags(after)),
        "loop_vs_resource_abuse": {"before": _confusion(flags(before)),
                                   "after": _confusion(flags(after))},
        "loop_findings_by_rule": dict(rules),
        "code_actions": _coverage([t for _, t, _ in after]),
        "localisation_before": _localise(before, notes),
        "localisation_after": _localise(after, notes),
    }


# --- SWE-bench ------------------------------------------------------------------------------


def _llm_only(trace: Trace) -> Trace:
    """The trace without the loader's bash tool spans: what an instrumentation recording only
    the LLM calls sends."""
    spans = [s for s in trace.spans if s.attributes.get("gen_ai.operation.name")
             != "execute_tool"]
    return Trace(trace.trace_id, spans, trace.status, source=trace.source)


def _loop_kinds(findings: list[Finding]) -> list[tuple[str, int]]:
    return [(f.kind, len(f.step_indexes)) for f in findings if f.detector == "loop"]


def _commands(steps: list[Step]) -> list[Any]:
    return [s.arguments for s in steps if s.kind == "tool"]


def _has_loop(detectors: Detectors, trace: Trace, before: bool = False) -> bool:
    with _as_before() if before else contextlib.nullcontext():
        found = detectors.evaluate(build_trajectory(trace, CFG))[0]
    return any(f.detector == "loop" for f in found)


def _swe_run(trace: Trace, after: Detectors, before: Detectors, tally: Counter[str]) -> None:
    """One run with its bash tool spans, and seen through its LLM spans only."""
    t, bare = build_trajectory(trace, CFG), build_trajectory(_llm_only(trace), CFG)
    found, bare_found = after.evaluate(t)[0], after.evaluate(bare)[0]
    tally["runs"] += 1
    tally["bash_actions"] += len(t.tool_steps)
    tally["rebuilt_from_replies"] += sum(s.rebuilt for s in bare.tool_steps)
    tally["runs_with_the_same_commands"] += _commands(bare.steps) == _commands(t.steps)
    tally["runs_with_the_same_loop_findings"] += _loop_kinds(bare_found) == _loop_kinds(found)
    tally["llm_only_loop_before"] += _has_loop(before, _llm_only(trace), before=True)
    tally["llm_only_loop_after"] += any(f.detector == "loop" for f in bare_found)


def swe_loops(datasets: Path) -> dict[str, Any]:
    folder = datasets / "swe-bench-mini-swe-agent"
    summary = json.loads((folder / "results_summary.json").read_text())
    resolved = {i["instance_id"]: bool(i["resolved"]) for i in summary["instances"]}
    rates: dict[str, Counter[str]] = {"resolved": Counter(), "unresolved": Counter()}
    after, before = Detectors(DetectorsConfig()), Detectors(_before_config(DetectorsConfig()))
    tally: Counter[str] = Counter()
    for traj_dir in sorted(p for p in (folder / "trajs").iterdir() if p.is_dir()):
        for trace in load_path(traj_dir):
            group = rates["resolved" if resolved.get(traj_dir.name) else "unresolved"]
            group["runs"] += 1
            group["loop_after"] += _has_loop(after, trace)
            group["loop_before"] += _has_loop(before, trace, before=True)
            _swe_run(trace, after, before, tally)
    runs = tally["runs"]
    return {
        **{name: {"runs": g["runs"], "loop_before": _ratio(g["loop_before"], g["runs"]),
                  "loop_after": _ratio(g["loop_after"], g["runs"])}
           for name, g in rates.items()},
        "llm_spans_only": {**tally,
                           "coverage": _ratio(tally["rebuilt_from_replies"],
                                              tally["bash_actions"]),
                           "loop_rate_before": _ratio(tally["llm_only_loop_before"], runs),
                           "loop_rate_after": _ratio(tally["llm_only_loop_after"], runs)},
    }


# --- cost -----------------------------------------------------------------------------------


def cost(datasets: Path, rounds: int = 3) -> dict[str, Any]:
    """CPU seconds to build and detect the TRAIL and SWE-bench runs (loaded once), before and
    after, alternating ``rounds`` times (the machine is shared: only alternating runs
    compare); median of the rounds and the ratio after / before."""
    out: dict[str, Any] = {}
    for name, path in (("trail", datasets / "trail" / "GAIA" / "traces"),
                       ("swe", datasets / "swe-bench-mini-swe-agent" / "trajs")):
        traces = list(load_path(path))
        seconds: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(rounds):
            for label in seconds:
                detectors = Detectors(_before_config(DetectorsConfig()) if label == "before"
                                      else DetectorsConfig())
                with _as_before() if label == "before" else contextlib.nullcontext():
                    started = time.process_time()
                    for trace in traces:
                        detectors.evaluate(build_trajectory(trace, CFG))
                    seconds[label].append(time.process_time() - started)
        median = {k: sorted(v)[len(v) // 2] for k, v in seconds.items()}
        out[name] = {"traces": len(traces), **{f"{k}_cpu_s": round(v, 3)
                                               for k, v in median.items()},
                     "after_over_before": _ratio(median["after"], median["before"])}
    return out
