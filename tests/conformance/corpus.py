"""The conformance corpus as data: stacks, recordings, expectations, and the docs table.

- ``stacks()``: each ``stacks/<name>/stack.yaml``;
- ``recording(stack, scenario)``: ``recordings/<stack>/<scenario>.json`` (see ``record.py``);
- ``expectation(stack, scenario)``: ``expected.yaml``'s per-scenario defaults, the stack's
  agent name and the stack's overrides merged (an override needs a ``reason``), and the cell's
  ``known_wrong`` entry as its ``xfail`` reason;
- ``problems(evaluation, expectation)``: how a stored per-trace evaluation differs from what a
  careful human would conclude (empty when it conforms);
- ``conversation_stacks()``, ``conversation_source(stack)``: the stacks whose conversation
  scenario (three user turns under one conversation id) is recorded, and the attribute
  otel-eval reads that id from in each;
- ``instrumentations_doc()``: the generated tables of docs/instrumentations.md.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from conformance.scenarios import COORDINATOR, prompt

from otel_eval.base.results import NOT_ENDED_KINDS

HERE = Path(__file__).resolve().parent
SCENARIOS = ("clean", "loop", "distinct", "tool_error", "non_terminating", "remote_parent",
             "streaming", "multi_agent", "parallel", "max_turns", "wrong_tool", "wrong_args",
             "length_stop", "empty_answer", "llm_error")
# Two agents in one run: the coordinator (the run's agent: the stack's ``coordinator``, default
# ``triage_agent``) hands the question to the weather agent (the stack's ``agent``), whose
# get_weather calls are its own (``call_agents``).
MULTI_AGENT = "multi_agent"
# Three runs in one conversation: recorded where a stack says how its users carry the id
# (stack.yaml ``conversation``), checked as a session (test_conversations.py), not per run.
CONVERSATION = "conversation"
# What test_conversations checks of a conversation recording (for its known_wrong entries).
CONVERSATION_CHECKS = ("session", "findings")
# An expected ``input`` that is a framework's text holding the scenario's prompt.
PROMPT_INSIDE = "prompt_inside"
# Expected ``tokens`` that are the last answered call's alone (one span for a whole loop).
LAST_CALL = "last_call"
# Expectation keys that are not checks.
_META = ("xfail", "reason")
# What an expectation checks (the keys of ``observed``).
CHECKS = ("agent", "status", "passed", "loop", "non_terminated", "input", "output",
          "tool_errors", "errors", "cities", "recovered", "llm_calls", "call_agents",
          "selection", "arguments", "length_stop", "no_output", "llm_error", "tokens")
# The words of each API's error in the llm_error scenario (scenarios.LLM_ERRORS), none
# quoted: a framework's repr of the error may escape its apostrophes.
_LLM_ERROR_WORDS = ("maximum context length", "prompt is too long", "input token count")


@cache
def stacks() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((HERE / "stacks").glob("*/stack.yaml")):
        out[path.parent.name] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return out


def recording_path(stack: str, scenario: str) -> Path:
    return HERE / "recordings" / stack / f"{scenario}.json"


def recording(stack: str, scenario: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(recording_path(stack, scenario).read_text("utf-8"))
    return data


def unrecorded() -> list[tuple[str, str]]:
    """(stack, scenario) pairs without a recording that the stack does not declare
    ``unsupported: {scenario: reason}`` in its stack.yaml, the conversation scenario too (a
    stack records it, saying how it carries the id in ``conversation``, or declares it
    unsupported)."""
    return [(s, sc) for s, st in stacks().items() for sc in (*SCENARIOS, CONVERSATION)
            if not recording_path(s, sc).is_file() and sc not in (st.get("unsupported") or {})]


def conversation_stacks() -> list[str]:
    """The stacks whose conversation scenario is recorded."""
    return [s for s in stacks() if recording_path(s, CONVERSATION).is_file()]


def conversation_spans(stack: str) -> dict[str, list[Any]]:
    """The spans of the stack's conversation recording, by trace id."""
    from otel_eval.decode.otlp import decode_request
    from otel_eval.decode.otlp_json import request_from_json

    by_trace: dict[str, list[Any]] = {}
    for item in recording(stack, CONVERSATION)["requests"]:
        if item["signal"] == "traces":
            for span in decode_request(request_from_json(json.dumps(item["body"]))).spans:
                by_trace.setdefault(span.trace_id, []).append(span)
    return by_trace


def conversation_source(stack: str) -> set[str]:
    """Where otel-eval reads the conversation id of each turn of the stack's conversation
    recording ("<convention> <key>", as ``otel-eval inspect`` shows it)."""
    from otel_eval.base.model import Trace
    from otel_eval.evaluate.config import TrajectoryConfig
    from otel_eval.evaluate.trajectory.build import build_trajectory

    return {build_trajectory(Trace(trace_id, spans, "complete"), TrajectoryConfig())
            .conversation_sources.get("session_id", "nowhere")
            for trace_id, spans in conversation_spans(stack).items()}


def recorded() -> list[tuple[str, str]]:
    """Every (stack, scenario) with a recording, in stack then scenario order."""
    return [(s, sc) for s in stacks() for sc in SCENARIOS if recording_path(s, sc).is_file()]


@cache
def _expected() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((HERE / "expected.yaml").read_text("utf-8"))
    return data


def expectation(stack: str, scenario: str) -> dict[str, Any]:
    exp = _expected()
    out = dict(exp["defaults"][scenario])
    out["agent"] = stacks()[stack]["agent"]
    if scenario == MULTI_AGENT:  # the coordinator's run; the weather agent made the calls
        out["agent"] = stacks()[stack].get("coordinator", COORDINATOR)
        out["call_agents"] = [stacks()[stack]["agent"]]
    # the model calls the run made: what the scripted LLM answered while it was recorded
    rec = recording(stack, scenario)
    out["llm_calls"] = rec["llm_requests"]
    if "llm_usage" in rec:  # the tokens the answers reported (recordings since 2026-12-06)
        out["tokens"] = reported_tokens(rec["llm_usage"])
    out["input"] = prompt(scenario)  # what the user asked
    override = (exp.get("stacks") or {}).get(stack, {}).get(scenario) or {}
    if set(override) - {"xfail"} and not override.get("reason"):
        raise ValueError(f"expected.yaml: {stack}/{scenario} overrides without a reason")
    out.update(override)
    if out.get("input") == PROMPT_INSIDE:
        out["input"] = {"holds": prompt(scenario)}
    if "llm_usage" not in rec:  # recorded before answers' usage was: not checked
        out.pop("tokens", None)
    elif out.get("tokens") == LAST_CALL:
        out["tokens"] = reported_tokens([u for u in rec["llm_usage"] if u is not None][-1:])
    if reason := known_wrong().get(f"{stack}/{scenario}"):
        out["xfail"] = reason
    return out


def reported_tokens(usage: list[Any]) -> list[int | None]:
    """[input, output] tokens the scripted LLM's answers reported, summed over the calls
    that reported any (a stream asked without usage reported none: the run's sum is of the
    others); None when no call did (unknown)."""
    sent = [u for u in usage if u is not None]
    if not sent:
        return [None, None]
    return [sum(u[0] for u in sent), sum(u[1] for u in sent)]


def known_wrong() -> dict[str, str]:
    """``expected.yaml``'s ``known_wrong``: "stack/scenario" -> what otel-eval gets wrong there
    today (the verdict expected is still the careful human's)."""
    return dict(_expected().get("known_wrong") or {})


def known_wrong_checks(stack: str, scenario: str) -> set[str]:
    """The checks a known-wrong cell fails: its reason's lead, "agent, cities and loop: ..."."""
    reason = known_wrong().get(f"{stack}/{scenario}")
    if not reason or ":" not in reason:
        return set()
    return {w for w in re.split(r",\s*|\s+and\s+", reason.split(":", 1)[0].strip()) if w}


_STOP_REASONS = frozenset({"stop", "end_turn", "stop_sequence", "completed"})


def _tool_steps(ev: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in ev["steps"] if s["kind"] == "tool"]


def _is_get_weather(name: Any) -> bool:
    return isinstance(name, str) and (name == "get_weather" or name.endswith("-get_weather"))


def _weather_named(name: str) -> str:
    return "get_weather" if _is_get_weather(name) else name


def observed(ev: dict[str, Any]) -> dict[str, Any]:
    """The facts of a stored evaluation that expectations speak about."""
    findings = ev["findings"]
    detectors = {f["detector"] for f in findings}
    tools = _tool_steps(ev)
    recovery = {f["kind"] for f in findings if f["detector"] == "recovery"}
    return {
        "agent": ev["agent"],
        "status": ev["status"],
        "passed": (ev.get("verdict") or {}).get("passed"),
        "loop": "loop" in detectors,
        # what the non-terminated metric counts: the run did not end
        "non_terminated": any(f["detector"] == "non_termination"
                              and f["kind"] in NOT_ENDED_KINDS for f in findings),
        "input": ev["input"],
        "output": ev["output"],
        # what otel_eval_detector_tool_errors_total{kind="runtime"} counts: a failed span, or
        # an error the tool answered (also for a call rebuilt from the LLM messages)
        "tool_errors": sum(1 for f in findings
                           if f["detector"] == "tool_call" and f["kind"] == "runtime"),
        # steps that failed (``counts.errors``: the run page, the API, the predictor's text)
        "errors": ev["counts"]["errors"],
        # the scenario's calls: get_weather (smolagents also answers through a final_answer
        # tool, which is a tool span of its own)
        # (Semantic Kernel names it after its plugin too: WeatherPlugin-get_weather)
        "cities": [(s.get("arguments") or {}).get("city") if isinstance(s.get("arguments"),
                                                                         dict) else None
                   for s in tools if _is_get_weather(s.get("tool_name"))],
        # the agent each get_weather call is attributed to (``Step.node``): in a multi-agent
        # run, the weather agent's and not the coordinator's
        "call_agents": sorted({s.get("node") for s in tools
                               if _is_get_weather(s.get("tool_name"))}, key=str),
        "recovered": "recovered" in recovery and not recovery & {"unrecovered", "gave_up"},
        # the tools called that were not offered (tool_call/selection findings)
        "selection": sorted({str((f.get("attributes") or {}).get("tool"))
                             for f in findings
                             if f["detector"] == "tool_call" and f["kind"] == "selection"}),
        # what the last get_weather call returned, as text (a framework's envelope off:
        # trajectory.envelopes)
        "result": next((s.get("result") for s in reversed(tools)
                        if _is_get_weather(s.get("tool_name"))), None),
        # the last message the last LLM call was sent (its ``prompt``): what the last call
        # returned, whatever shape the instrumentation records tool messages in
        "observation": next((s.get("prompt") for s in reversed(ev["steps"])
                             if s["kind"] == "llm"), None),
        # the last LLM call's finish reason says it stopped on its own (what the length_stop
        # rule reads: a run cut at the token limit is told only where it is recorded)
        "stopped": any(str(r).lower() in _STOP_REASONS for r in next(
            (s.get("finish_reasons") or () for s in reversed(ev["steps"])
             if s["kind"] == "llm"), ())),
        # the tools called with arguments their schema refuses (tool_call/arguments findings;
        # Semantic Kernel's WeatherPlugin-get_weather is get_weather)
        "arguments": sorted({_weather_named(str((f.get("attributes") or {}).get("tool")))
                             for f in findings
                             if f["detector"] == "tool_call" and f["kind"] == "arguments"}),
        # a finding says the last LLM call was cut off at its token limit
        "length_stop": any(f["kind"] == "length_stop" for f in findings),
        # a finding says the run's final output was recorded and is empty
        "no_output": any(f["kind"] == "no_output" for f in findings),
        # a finding says what the LLM's API answered (llm_error: its 400, in its words)
        "llm_error": any(w in f["message"] for f in findings for w in _LLM_ERROR_WORDS),
        # LLM steps (one call recorded by two instrumentations is one: trajectory.llm_twins)
        "llm_calls": ev["counts"]["llm_calls"],
        # [input, output] tokens of the run's LLM calls (``usage``: the tokens budget, cost)
        "tokens": [ev["usage"]["input_tokens"], ev["usage"]["output_tokens"]],
    }


def _met(got: Any, want: Any) -> bool:
    if isinstance(want, dict) and set(want) == {"holds"}:
        return isinstance(got, str) and want["holds"] in got
    return bool(got == want)


def problems(ev: dict[str, Any], want: dict[str, Any]) -> list[str]:
    got = observed(ev)
    out = [f"{key}: expected {value!r}, got {got[key]!r}" for key, value in want.items()
           if key not in _META and not _met(got[key], value)]
    if out:
        out.append("findings: " + "; ".join(f"{f['detector']}/{f['kind']}: {f['message']}"
                                            for f in ev["findings"]))
    return out


# --- docs/instrumentations.md -----------------------------------------------------------------

def _cell(text: Any) -> str:
    return " ".join(str(text or "").split()).replace("|", "\\|")


def _versions(stack: str) -> dict[str, str]:
    for scenario in SCENARIOS:
        if recording_path(stack, scenario).is_file():
            return dict(recording(stack, scenario)["packages"])
    return {}


def instrumentations_table() -> str:
    # Named beside the instrumentation: the client library and the OTel SDK (Python or JS).
    context = ("openai", "opentelemetry-sdk", "@opentelemetry/sdk-trace")
    rows = ["| stack | package | version tested | agent name from | what is read | known gaps |",
            "|---|---|---|---|---|---|"]
    for name, st in stacks().items():
        versions = _versions(name)
        pkgs = st.get("instrumentation") or list(st["packages"])[:1]
        tested = ", ".join(versions.get(p, "not recorded") for p in pkgs)
        if others := [f"{p} {v}" for p, v in versions.items()
                      if p in context and p not in pkgs]:
            tested += f" (with {', '.join(others)})"
        rows.append(f"| `{name}` | {', '.join(f'`{p}`' for p in pkgs)} | {tested} | "
                    f"{_cell(st.get('agent_from'))} | {_cell(st.get('reads'))} | "
                    f"{_cell(st.get('gaps'))} |")
    return "\n".join(rows)


def conformance_table() -> str:
    rows = ["| stack | " + " | ".join(SCENARIOS) + " |", "|---|" + "---|" * len(SCENARIOS)]
    for name in stacks():
        cells = []
        for scenario in SCENARIOS:
            if not recording_path(name, scenario).is_file():
                why = (stacks()[name].get("unsupported") or {}).get(scenario)
                if not why:
                    cells.append("not recorded")
                else:
                    pending = str(why).startswith("not recorded yet")
                    cells.append(_cell(why) if pending else f"unsupported: {_cell(why)}")
            else:  # the reasons are in expected.yaml
                cells.append("not yet" if expectation(name, scenario).get("xfail") else "yes")
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def conversations_table() -> str:
    rows = ["| stack | how its users carry the conversation id | read from | sessions |",
            "|---|---|---|---|"]
    for name, st in stacks().items():
        why = (st.get("unsupported") or {}).get(CONVERSATION)
        if recording_path(name, CONVERSATION).is_file():
            read = ", ".join(f"`{s}`" for s in sorted(conversation_source(name)))
            done = "not yet" if f"{name}/{CONVERSATION}" in known_wrong() else "yes"
            rows.append(f"| `{name}` | {_cell(st.get('conversation'))} | {read} | {done} |")
        elif why:
            rows.append(f"| `{name}` | unsupported: {_cell(why)} |  | no |")
        else:
            rows.append(f"| `{name}` | {_cell(st.get('conversation'))} |  | not recorded |")
    return "\n".join(rows)


def instrumentations_doc() -> dict[str, str]:
    """Generated sections of docs/instrumentations.md, by marker name."""
    return {"instrumentations": instrumentations_table(), "conformance": conformance_table(),
            "conversations": conversations_table()}
