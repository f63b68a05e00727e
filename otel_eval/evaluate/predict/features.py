"""Stage: predict (features). One ``Evaluation`` -> named numbers, no LLM, no I/O.

    features(evaluation) -> {"steps": 2.3, "finding.loop.repeated_call": 0.69, ...}

What a trajectory shows about its own success, read from what the evaluation already holds:
counts (steps, LLM and tool calls), the error and recovery pattern, repetition, the last
steps, termination, token and time use, the calls per tool name and the programs shell
actions ran, every detector finding by
``detector.kind`` (so kinds added later become features without code here) and judge scores
when a judge ran.

Promises:
- **Blind to the outcome.** Nothing here reads the outcome attribute, the verdict, or a
  finding that exists only because the outcome is known (``lucky_pass``; ``recovery.
  unrecovered`` is read as ``recovery.gave_up``, severity too: what the recovery detector says
  of the same calls when the outcome is unknown). A trace gets the same features whether its
  label is known, so training on labelled runs and predicting on unlabelled ones see the same thing.
- **Reference-free.** Findings of the ``reference`` detector are left out: references exist
  for benchmark tasks, not for production traffic, and a model leaning on them would lose its
  best feature exactly where it is used. (With references, their own score is the better
  success signal; it stays in ``verdict.reference``.)
- **Missing is not zero.** A judge score that is absent gives ``judge.<name>.missing = 1`` and
  the value 0; unrecorded tokens give ``tokens.missing = 1``.
- Counts enter as ``log1p`` (a 200-step run is not 100 times a 2-step one). Linear time in
  the steps; tool arguments are compared in canonical form, never kept.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from otel_eval.base.results import Evaluation, Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.base.words import CJK_CLOSERS, QUESTION_MARKS
from otel_eval.evaluate.conventions.messages import STOP_REASONS
from otel_eval.evaluate.detectors.config import RecoveryConfig

# 2: calls per tool name (``tool.<name>``); 3: shell programs run (``program.<name>``);
# 4: how the run ends (``end.*``); 5: the context the run ended with (``tokens.last_input``)
# and the longest tool result (``results.max_chars``)
FEATURES_VERSION = 5
# Model files of these versions are read: each version computes every feature of the ones
# before the same way (4 adds the end.* ones, 5 tokens.last_input and results.max_chars,
# which an older model does not name).
READABLE_FEATURES_VERSIONS = (3, 4, 5)
LAST_K = 5  # "the last steps": errors among the last LAST_K tool calls
# Findings never used: derived from the outcome (lucky_pass) or from references (see above).
EXCLUDED_DETECTORS = frozenset({"lucky_pass", "reference"})
# Finding kinds renamed to what they are when the outcome is unknown (see above), with the
# severity the detector gives that kind (``recovery.unrecovered`` is a warning, ``gave_up`` an
# error: a kept severity told a known success by one error fewer and one warning more).
OUTCOME_BLIND_KINDS = {("recovery", "unrecovered"):
                       ("recovery", "gave_up", RecoveryConfig().gave_up_severity)}
FEATURE_PREFIX_FINDING = "finding."
FEATURE_PREFIX_TOOL = "tool."
FEATURE_PREFIX_PROGRAM = "program."
FEATURE_PREFIX_END = "end."  # how the run ends (_end)
# Tool names come from telemetry: each is cut to this length, and a trace contributes at most
# this many distinct tool features (the model only knows the names it was trained on).
MAX_TOOL_NAME_CHARS = 64
MAX_TOOL_FEATURES = 64
# Shell commands (a bash tool's ``command`` argument): the programs of the first this many
# characters are read; each program name is cut to MAX_TOOL_NAME_CHARS.
MAX_COMMAND_CHARS = 4000
_SHELL_KEYS = ("command", "cmd", "script")
_COMMAND_SEPARATORS = re.compile(r"&&|\|\||[;|]")
_HEREDOC = re.compile(r"<<-?\s*['\"]?([A-Za-z_][A-Za-z0-9_]*)")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
# (judge entry, score key) -> feature name; the outcome judge only when it is the judge's own
# estimate (``overall.outcome_source == "judge"``: with a label the "score" is the label)
JUDGE_SCORES = (("step", "step"), ("step", "step_min"), ("trace", "trace"),
                ("process", "process"))
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str).encode


def _log1p(n: float) -> float:
    return math.log1p(max(0.0, n))


def blind_findings(findings: Iterable[Finding]) -> list[tuple[str, str, str]]:
    """(detector, kind, severity) of the findings the predictor may read (see the module
    docstring): outcome- and reference-derived ones left out or renamed."""
    out: list[tuple[str, str, str]] = []
    for f in findings:
        if f.detector in EXCLUDED_DETECTORS:
            continue
        out.append(OUTCOME_BLIND_KINDS.get((f.detector, f.kind),
                                           (f.detector, f.kind, f.severity)))
    return out


CallKey = tuple[str, str | tuple[tuple[str, str], ...]]


def _call_key(step: Step) -> CallKey:
    """(tool, the arguments in canonical form): two calls are the same call when their keys
    are equal. Arguments that are a dict of strings (what telemetry's JSON gives) compare as
    their sorted items, the same equality as their canonical JSON without encoding it. Kept
    only while one run's features are computed."""
    args = step.arguments
    if isinstance(args, dict) and all(type(k) is str and type(v) is str
                                      for k, v in args.items()):
        return step.tool_name or step.name, tuple(sorted(args.items()))
    try:
        canonical = _CANONICAL(args)
    except (TypeError, ValueError, RecursionError):
        canonical = repr(type(args))
    return step.tool_name or step.name, canonical


def _repetition(tools: list[Step]) -> dict[str, float]:
    keys = [_call_key(s) for s in tools]
    counts: dict[CallKey, int] = {}
    longest = run = 0
    for i, k in enumerate(keys):
        counts[k] = counts.get(k, 0) + 1
        run = run + 1 if i and keys[i - 1] == k else 1
        longest = max(longest, run)
    n = len(keys)
    return {"calls.distinct_ratio": len(counts) / n if n else 1.0,
            "calls.longest_repeat": _log1p(longest),
            "calls.max_same_call": _log1p(max(counts.values(), default=0)),
            "tools.distinct": _log1p(len({s.tool_name or s.name for s in tools}))}


def _tools_used(tools: list[Step]) -> dict[str, float]:
    """Calls per tool name: which actions the agent took (e.g. a hand-off to a human)."""
    counts: dict[str, int] = {}
    for s in tools:
        name = f"{FEATURE_PREFIX_TOOL}{(s.tool_name or s.name)[:MAX_TOOL_NAME_CHARS]}"
        if name in counts or len(counts) < MAX_TOOL_FEATURES:
            counts[name] = counts.get(name, 0) + 1
    return {k: _log1p(v) for k, v in counts.items()}


def _programs(command: str) -> list[str]:
    """The program of each simple command (``cd x && python -m pytest | tail`` -> cd, python,
    tail): first word after variable assignments, path stripped; here-document bodies
    (``cat <<'EOF' ... EOF``) skipped. Linear; no shell parsing."""
    out: list[str] = []
    lines = command[:MAX_COMMAND_CHARS].splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _HEREDOC.search(line) if "<<" in line else None
        if m:  # the body is skipped up to the line that ends it (or to the end)
            tag = m.group(1)
            end = next((j for j in range(i, len(lines)) if lines[j].strip() == tag),
                       len(lines))
        for part in _COMMAND_SEPARATORS.split(line):
            words = part.split()
            while words and _ASSIGNMENT.match(words[0]):
                words = words[1:]
            if words:
                out.append(words[0].rsplit("/", 1)[-1].lower()[:MAX_TOOL_NAME_CHARS])
        if m:
            i = end + 1
    return out


def _shell_programs(tools: list[Step]) -> dict[str, float]:
    """Programs run by shell actions (agents that act through bash, e.g. mini-swe-agent):
    for them the program is the tool (ran the tests, looked at the diff)."""
    counts: dict[str, int] = {}
    for s in tools:
        args = s.arguments
        if not isinstance(args, dict):
            continue
        command = None
        for key in _SHELL_KEYS:
            if isinstance(args.get(key), str):
                command = args[key]
                break
        for program in _programs(command) if command else ():
            name = f"{FEATURE_PREFIX_PROGRAM}{program}"
            if name in counts or len(counts) < MAX_TOOL_FEATURES:
                counts[name] = counts.get(name, 0) + 1
    return {k: _log1p(v) for k, v in counts.items()}


def _errors(t: Trajectory, tools: list[Step]) -> dict[str, float]:
    tool_errors = sum(s.status == "error" for s in tools)
    last = tools[-LAST_K:]
    return {"errors.tool": _log1p(tool_errors),
            "errors.tool_rate": tool_errors / len(tools) if tools else 0.0,
            "errors.llm": _log1p(sum(s.status == "error" for s in t.llm_steps)),
            "errors.last_k": sum(s.status == "error" for s in last) / LAST_K,
            "errors.last_tool": float(bool(tools) and tools[-1].status == "error")}


def _last_steps(t: Trajectory) -> dict[str, float]:
    work = [s for s in t.steps if s.kind in ("llm", "tool")]
    last = work[-1] if work else None
    llm = t.llm_steps
    finish = {r.lower() for r in llm[-1].finish_reasons} if llm else set()
    answer = (t.output or "").strip()
    return {"last.is_tool": float(last is not None and last.kind == "tool"),
            "last.is_llm": float(last is not None and last.kind == "llm"),
            "last.is_error": float(last is not None and last.status == "error"),
            "last.llm_stopped": float(bool(finish & STOP_REASONS)),
            "last.llm_asked_tools": float(bool(llm and llm[-1].tool_calls)),
            "output.present": float(bool(answer)),
            "output.unrecorded": float(t.output is None),
            "output.chars": _log1p(len(answer))}


# What the agent says of its own result, in any task: it could not do it, or it did (whole
# words, in order of preference; matched in the lowercased text: faster than re.IGNORECASE).
_FAILURE_PHRASES = ("unable", "cannot", "can't", "could not", "couldn't", "sorry", "apologise",
                    "apologize", "unfortunately", "not able", "failed", "fails")
_SUCCESS_PHRASES = ("successfully", "completed", "confirmed", "has been", "have been", "fixed",
                    "resolved", "all tests passed", "all tests pass")


class _Phrases:
    """Counts the whole-word occurrences of any of ``phrases`` (as ``findall`` of
    ``\\b(?:phrase|...)\\b``). The regular expression tries every phrase at every position (35-45
    us for a run's ~1,400 characters); a match begins where a phrase does, so the scan starts
    at the first place one occurs (a substring search each, in C), and a text holding none is
    not scanned (on tau-bench, 61 of 100 runs' texts hold no failure phrase, 41 no success
    phrase)."""

    def __init__(self, phrases: tuple[str, ...]) -> None:
        self.phrases = phrases
        self.pattern = re.compile(rf"\b(?:{'|'.join(map(re.escape, phrases))})\b")

    def count(self, text: str) -> int:
        starts = [at for at in map(text.find, self.phrases) if at >= 0]
        # from ``min(starts)``, ``\b`` still looks at the character before it
        return len(self.pattern.findall(text, min(starts))) if starts else 0


_SAYS_FAILURE = _Phrases(_FAILURE_PHRASES)
_SAYS_SUCCESS = _Phrases(_SUCCESS_PHRASES)

END_REPLIES = 3  # the agent's last replies read for what it says (each cut like its text)
END_CHARS = 2000
_QUESTION_TAIL = 300
_CLOSERS = " \t\r\n*_`\"'" + CJK_CLOSERS  # after a question's mark: emphasis, quotes


def _end(t: Trajectory) -> dict[str, float]:
    """How the run ends, read the same way for any agent: whether the agent's last reply is
    a question (it is waiting on someone, not done; ``words.QUESTION_MARKS``: Chinese,
    Japanese and Arabic too), how often its last replies and final
    output say it failed or succeeded, the tool calls since it last replied in text, and the
    steps since the last failed one. Bounded: END_REPLIES replies and the output, each cut to
    its last END_CHARS characters."""
    work = [s for s in t.steps if s.kind in ("llm", "tool")]
    replies = [s.answer for s in work if s.kind == "llm" and s.answer]
    output = t.output if isinstance(t.output, str) else ""
    said = "\n".join([r[-END_CHARS:] for r in replies[-END_REPLIES:]]
                     + [output[-END_CHARS:]]).lower()
    last = (replies[-1] if replies else output)[-_QUESTION_TAIL:].rstrip(_CLOSERS)
    since_text = 0
    for s in reversed(work):
        if s.kind == "llm" and s.answer and not s.tool_calls:
            break
        since_text += s.kind == "tool"
    since_error = next((i for i, s in enumerate(reversed(work)) if s.status == "error"),
                       len(work))
    return {f"{FEATURE_PREFIX_END}asks": float(last.endswith(QUESTION_MARKS)),
            f"{FEATURE_PREFIX_END}says_failure": _log1p(_SAYS_FAILURE.count(said)),
            f"{FEATURE_PREFIX_END}says_success": _log1p(_SAYS_SUCCESS.count(said)),
            f"{FEATURE_PREFIX_END}tools_since_text": _log1p(since_text),
            f"{FEATURE_PREFIX_END}steps_since_error": _log1p(since_error)}


def _usage(t: Trajectory) -> dict[str, float]:
    """Token and time use. ``tokens.last_input``: the input tokens of the last LLM call that
    recorded tokens, the context the agent ended with (a chat agent sends its whole history
    each turn: how much it had read, run and written by the end); 0 when unrecorded."""
    llm = t.llm_steps
    known = [s for s in llm if s.input_tokens is not None or s.output_tokens is not None]
    inp = sum(s.input_tokens or 0 for s in known)
    out = sum(s.output_tokens or 0 for s in known)
    return {"tokens.missing": float(not known),
            "tokens.input": _log1p(inp), "tokens.output": _log1p(out),
            "tokens.output_per_call": _log1p(out / len(known)) if known else 0.0,
            "tokens.last_input": _log1p(known[-1].input_tokens or 0) if known else 0.0,
            "duration.seconds": _log1p(t.duration_s)}


def _counts(t: Trajectory, tools: list[Step]) -> dict[str, float]:
    """Counts, and ``results.max_chars``: the longest tool result (a whole file printed, a
    long failing log; 0 when no result is recorded)."""
    llm = t.llm_steps
    longest = max([len(s.result) for s in tools if s.result], default=0)
    return {"steps": _log1p(len(t.steps)), "calls.llm": _log1p(len(llm)),
            "calls.tool": _log1p(len(tools)), "results.max_chars": _log1p(longest),
            "calls.text_replies": _log1p(sum(not s.tool_calls for s in llm)),
            "status.incomplete": float(t.status == "incomplete"),
            "status.truncated": float(t.status == "truncated")}


def _findings(findings: list[Finding]) -> dict[str, float]:
    by_kind: dict[str, int] = {}
    severity = {"error": 0, "warning": 0, "info": 0}
    for detector, kind, sev in blind_findings(findings):
        name = f"{FEATURE_PREFIX_FINDING}{detector}.{kind}"
        by_kind[name] = by_kind.get(name, 0) + 1
        severity[sev] = severity.get(sev, 0) + 1
    out = {k: _log1p(v) for k, v in by_kind.items()}
    out.update({f"findings.{k}": _log1p(severity[k]) for k in ("error", "warning", "info")})
    return out


def judge_features(judge: dict[str, Any] | None) -> dict[str, float]:
    """The ``judge.*`` features of a judge's object (a run predicted again once judged)."""
    judges = (judge or {}).get("judges") or {}
    overall = (judge or {}).get("overall") or {}
    values: dict[str, Any] = {f"judge.{name}.{key}": ((judges.get(name) or {}).get("scores")
                                                       or {}).get(key)
                              for name, key in JUDGE_SCORES}
    values["judge.outcome"] = (overall.get("outcome_score")
                               if overall.get("outcome_source") == "judge" else None)
    out: dict[str, float] = {}
    for name, value in values.items():
        ok = isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value)
        out[name] = float(value) if ok else 0.0
        out[f"{name}.missing"] = 0.0 if ok else 1.0
    return out


def features(evaluation: Evaluation, end: bool = True, names: bool = True) -> dict[str, float]:
    """The features of one evaluation (see the module docstring). Finding, tool and program
    features appear only for those present; a model reads an absent name as 0. ``end=False``
    leaves out the ``end.*`` ones, ``names=False`` the ``tool.*`` and ``program.*`` ones (for
    a model that names none of them: the same prediction, without their cost)."""
    t = evaluation.trajectory
    tools = t.tool_steps
    out = _counts(t, tools)
    out.update(_errors(t, tools))
    out.update(_repetition(tools))
    if names:
        out.update(_tools_used(tools))
        out.update(_shell_programs(tools))
    out.update(_last_steps(t))
    if end:
        out.update(_end(t))
    out.update(_usage(t))
    out.update(_findings(evaluation.findings))
    out.update(judge_features(evaluation.judge))
    return out
