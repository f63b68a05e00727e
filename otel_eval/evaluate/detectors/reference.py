"""Reference detector (stage: evaluate): the calls made vs the calls expected for the task.

Match modes (how the call sequences must relate):
    exact      the same calls in the same order, nothing else
    in_order   the reference calls appear in this order; other calls may come between
    any_order  the same calls in any order, nothing else (same multiset)
    superset   every reference call appears, in any order; extra calls are allowed
               (this is Vertex AI's "any_order" and agentevals' "superset")
Tool names are compared as a model is offered them (``links.as_offered``, as the tool_call
detector takes them: Unicode NFC, composed or decomposed one name; lowercase; each run of
characters no letter or digit one ``_``: CrewAI runs delegate_work_to_coworker as "Delegate
work to coworker"; no compatibility folding: NFKC would merge distinct names). A step that
ran a call a model asked for (joined to it: ``links.join_calls``) is also that call's name:
the OpenAI Agents SDK's span ``handoff to weather_agent`` is the model's
``transfer_to_weather_agent``, and a golden set may name either. Argument
modes (when a call's arguments count as right): ``exact`` (equal after canonicalization;
strings compared in Unicode NFC, whitespace collapsed), ``ignore``, ``subset`` (every
argument given is in the reference with that value), ``superset`` (every reference argument
is given with that value); per-tool overrides. A reference call written without
``arguments`` (or with null) takes any arguments in every mode (as DeepEval's expected call
named only); ``{}`` means none. Tool-name precision/recall are reported apart from argument
accuracy (on the calls whose name matched); ``score`` in 0..1 is the share of reference
calls satisfied (in_order, superset) or the F1 of satisfied calls (exact, any_order, which
forbid extras).

A call whose arguments are unknown (``Step.arguments`` None: not recorded, or present and not
understood, ``unparsed``; or the text of an object cut at an attribute length limit,
``cut_json``, the model's own call kept as it asked) is never compared as if it had none
nor as the text it is: its arguments are neither right nor wrong, so it satisfies a
reference call of its name, is left out of ``argument_accuracy``, and is listed in
``unknown_arguments`` (and the message).

A call whose tool no attribute named (its name a guess from the span's name,
``Step.sources["tool_name"] == "span name"``, as the tool_call detector takes it as unknown)
that ran no call a model asked for is neither a reference call nor another: the calls are
compared taking it for any tool, for none of the reference's and, with ``tools``, for one
left out; when they disagree the result is unknown (``matched`` null, ``reference/unknown``,
the guesses in ``unknown_names``), never a mismatch drawn from a name not recorded.

A trace released ``truncated`` (cut while its run went on: its maximum duration, an overflow,
spans refused for a share or past the per-trace limit) does not show the calls made after
the cut. A reference call it does not hold that could come after the cut (any one in
``any_order`` / ``superset``; in ``exact`` / ``in_order``, one after every reference call the
trace holds) is neither made nor missing: listed in ``unseen`` (and the message), not in
``missing``. When nothing else is wrong, the result is unknown: ``matched`` null, finding
``reference/unknown`` (info), never a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otel_eval.base.results import Finding
from otel_eval.base.steps import Step, Trajectory
from otel_eval.base.text import load_content
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.calls import (
    Context,
    RefCall,
    Reference,
    top_level_tool_steps,
)
from otel_eval.evaluate.detectors.canonical import canonical_of_normalized, nfc, normalized
from otel_eval.evaluate.detectors.config import DetectorsConfig, ReferenceConfig
from otel_eval.evaluate.detectors.reference_answer import detect_answer
from otel_eval.evaluate.trajectory.links import as_offered

Pair = Callable[[int, int], bool]


def arguments_ok(expected: Any, actual: Any, mode: str) -> bool:
    """Whether ``actual`` arguments satisfy ``expected`` under an argument mode."""
    if mode == "ignore":
        return True
    return _Arguments([expected], [actual]).ok(0, 0, mode)


class _Arguments:
    """The reference's and the run's arguments, each parsed, normalized and canonicalized
    once per comparison (matching and LCS compare every pair, often more than once)."""

    def __init__(self, expected: Sequence[Any], actual: Sequence[Any]) -> None:
        self._raw = (expected, actual)
        self._norm: dict[tuple[int, int], Any] = {}
        self._canon: dict[tuple[int, int], str] = {}

    def _normalized(self, key: tuple[int, int]) -> Any:
        if key not in self._norm:
            self._norm[key] = normalized(nfc(_parsed(self._raw[key[0]][key[1]])))
        return self._norm[key]

    def _canonical(self, key: tuple[int, int]) -> str:
        if key not in self._canon:
            self._canon[key] = canonical_of_normalized(self._normalized(key))
        return self._canon[key]

    def ok(self, r: int, a: int, mode: str) -> bool:
        """Whether actual ``a`` satisfies expected ``r`` under an argument mode; a reference
        call given no ``arguments`` (None) takes any (``{}``: none)."""
        if mode == "ignore" or self._raw[0][r] is None:
            return True
        exp, act = self._normalized((0, r)), self._normalized((1, a))
        if mode == "exact" or not isinstance(exp, dict) or not isinstance(act, dict):
            return self._canonical((0, r)) == self._canonical((1, a))
        if mode == "subset":
            return all(k in exp and exp[k] == v for k, v in act.items())
        return all(k in act and act[k] == v for k, v in exp.items())  # superset


def _parsed(value: Any) -> Any:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            return load_content(value)
        except ValueError:
            return value
    return value


def _max_matching(n_ref: int, n_act: int, ok: Pair,
                  initial: Mapping[int, int] | None = None) -> dict[int, int]:
    """Maximum bipartite matching reference -> actual: each reference call takes a free
    partner first (for an equivalence, same name or same canonical arguments, that is
    already maximum), then Kuhn's augmenting paths for those left, without recursion (a
    reference of thousands of calls is no RecursionError) and with the actual calls a failed
    search saw skipped until a search succeeds (no path runs through them meanwhile).
    From ``initial`` (pairs ``ok`` holds), when given: every call it pairs stays paired."""
    match: dict[int, int] = dict(initial or {})  # reference -> actual
    owner: dict[int, int] = {a: r for r, a in match.items()}  # actual -> reference
    for r in range(n_ref):
        for a in range(n_act if r not in match else 0):
            if a not in owner and ok(r, a):
                owner[a], match[r] = r, a
                break
    seen: set[int] = set()
    for r in range(n_ref):
        if r not in match and _augment(r, n_act, ok, owner, match, seen):
            seen = set()
    return match


def _augment(root: int, n_act: int, ok: Pair, owner: dict[int, int], match: dict[int, int],
             seen: set[int]) -> bool:
    """One search for an augmenting path from ``root`` (depth first, on a list), flipping it
    when found."""
    stack: list[list[int]] = [[root, 0, -1]]  # [reference, next actual to try, actual taken]
    while stack:
        level = stack[-1]
        r = level[0]
        for a in range(level[1], n_act):
            if a in seen or not ok(r, a):
                continue
            seen.add(a)
            level[1], level[2] = a + 1, a
            if a not in owner:
                for lv in reversed(stack):  # each takes the actual it reached
                    owner[lv[2]], match[lv[0]] = lv[0], lv[2]
                return True
            stack.append([owner[a], 0, -1])
            break
        else:
            stack.pop()
    return False


def _lcs(n_ref: int, n_act: int, ok: Pair) -> int:
    prev = [0] * (n_act + 1)
    for r in range(n_ref):
        cur = [0] * (n_act + 1)
        for a in range(n_act):
            cur[a + 1] = prev[a] + 1 if ok(r, a) else max(prev[a + 1], cur[a])
        prev = cur
    return prev[n_act]


def _ratio(num: int, den: int, empty: float | None) -> float | None:
    return round(num / den, 6) if den else empty


def compare(ref: Reference, actual: Sequence[Step], match: str, args_mode: str,
            by_tool: Mapping[str, str], cut: bool = False,
            called: Mapping[str, str] | None = None,
            unnamed: Mapping[int, bool] | None = None) -> dict[str, Any]:
    """The verdict ``reference`` summary plus the missing/unexpected/wrong-argument lists.
    ``cut``: the trace was cut while its run went on (module docstring: ``unseen``);
    ``called``: call id -> the name of the call a model asked for under it (``_called``);
    ``unnamed``: position in ``actual`` of a step whose tool is unknown -> whether it is
    taken for any tool (True) or for none of the reference's (False)."""
    # names as a model is offered them (module docstring), the tool_call detector's one tool
    rc, names = list(ref.calls), [as_offered(s.tool_name or s.name) for s in actual]
    # and the name of the call each step ran, as the model asked for it
    asked = [as_offered((called or {}).get(s.call_id or "", s.tool_name or s.name))
             for s in actual]
    expected = [as_offered(c.name) for c in rc]
    by_tool = {as_offered(k): v for k, v in by_tool.items()}
    unknown = {a for a, s in enumerate(actual) if s.arguments is None or cut_json(s.arguments)}
    memo: dict[tuple[int, int], bool] = {}
    arguments = _Arguments([c.arguments for c in rc], [s.arguments for s in actual])

    guessed = unnamed or {}

    def name_ok(r: int, a: int) -> bool:
        if a in guessed:
            return guessed[a]
        return expected[r] == names[a] or expected[r] == asked[a]

    def full_ok(r: int, a: int) -> bool:
        if not name_ok(r, a):
            return False
        if a in unknown:
            return True  # unknown arguments: not wrong (nor known right: ``unknown_arguments``)
        if (r, a) not in memo:  # matching and LCS ask for the same pairs again
            mode = by_tool.get(expected[r], args_mode)
            memo[r, a] = arguments.ok(r, a, mode)
        return memo[r, a]

    n_ref, n_act = len(rc), len(actual)
    full = _max_matching(n_ref, n_act, full_ok)
    # by name, from the calls that match in full: the calls left over (unexpected) are
    # those no reference call matches, not the right ones a wrong call of their name took
    by_name = _max_matching(n_ref, n_act, name_ok, full)
    wrong = [r for r, a in by_name.items() if r not in full and not full_ok(r, a)]
    ordered = match in ("exact", "in_order")
    unseen = _unseen(n_ref, by_name, ordered) if cut else []
    need = n_ref - len(unseen)  # the reference calls the trace can show
    satisfied = _lcs(n_ref, n_act, full_ok) if ordered else len(full)
    extras_ok = match in ("in_order", "superset")
    matched = satisfied == need and (extras_ok or n_act == need)
    score = (satisfied / n_ref if n_ref else 1.0) if extras_ok else \
        (2 * satisfied / (n_ref + n_act) if n_ref + n_act else 1.0)
    used = set(by_name.values())
    unjudged = [r for r in sorted(by_name) if by_name[r] in unknown]
    judged = len(by_name) - len(unjudged)
    return {
        "match": match, "arguments_match": args_mode,
        "matched": None if matched and unseen else matched,  # unknown: the rest unseen
        "tool_precision": _ratio(len(by_name), n_act, 1.0),
        "tool_recall": _ratio(len(by_name), n_ref, 1.0),
        "argument_accuracy": _ratio(judged - len(wrong), judged, None),
        "score": round(1.0 if matched else score, 6),
        "missing": [rc[r].name for r in range(n_ref) if r not in by_name and r not in unseen],
        "unseen": [rc[r].name for r in unseen],
        "unexpected": [names[a] for a in range(n_act) if a not in used],
        "wrong_arguments": [rc[r].name for r in sorted(wrong)],
        "unknown_arguments": [rc[r].name for r in unjudged],
        "out_of_order": ordered and len(full) == need and satisfied < need,
        "_wrong_steps": [actual[by_name[r]] for r in sorted(wrong)],
        "_unexpected_steps": [actual[a] for a in range(n_act) if a not in used],
    }


def _unseen(n_ref: int, by_name: Mapping[int, int], ordered: bool) -> list[int]:
    """The reference calls a cut trace does not hold that could come after the cut: any in
    an unordered mode, those after every one it holds in an ordered mode."""
    last = max(by_name, default=-1) if ordered else -1
    return [r for r in range(last + 1, n_ref) if r not in by_name]


def _message(ref: Reference, summary: Mapping[str, Any]) -> str:
    head = f"calls do not match the reference for task {ref.task_id} ({summary['match']}"
    head += f", arguments {summary['arguments_match']})"
    parts = []
    if summary["missing"]:
        parts.append("missing " + ", ".join(summary["missing"]))
    if summary["unexpected"] and summary["match"] in ("exact", "any_order"):
        parts.append("unexpected " + ", ".join(summary["unexpected"]))
    if summary["wrong_arguments"]:
        parts.append("wrong arguments " + ", ".join(summary["wrong_arguments"]))
    if summary["out_of_order"]:
        parts.append("out of order")
    return head + (": " + "; ".join(parts) if parts else "") + _unknown(summary)


def _unknown(summary: Mapping[str, Any]) -> str:
    names = summary["unknown_arguments"]
    out = f" (arguments unknown for {', '.join(names)})" if names else ""
    if summary.get("unknown_names"):
        out += (" (tool not recorded for the calls taken as "
                f"{', '.join(summary['unknown_names'])})")
    if summary["unseen"]:
        out += (f" (not seen: {', '.join(summary['unseen'])}; the trace was cut while its "
                "run went on)")
    return out


SUMMARY_KEYS = ("match", "arguments_match", "matched", "tool_precision", "tool_recall",
                "argument_accuracy", "score")


def detect(trajectory: Trajectory, config: DetectorsConfig, context: Context) -> list[Finding]:
    ref = context.reference
    if ref is None:
        return []
    calls = _detect_calls(trajectory, config, ref) if ref.compare_calls else []
    return calls + detect_answer(trajectory, ref, config.reference, context.findings)


def _detect_calls(trajectory: Trajectory, config: DetectorsConfig,
                  ref: Reference) -> list[Finding]:
    cfg = config.reference
    tools = None if ref.tools is None else {as_offered(t) for t in ref.tools}
    called = _called(trajectory)
    actual = [s for s in top_level_tool_steps(trajectory)
              if tools is None or _unnamed(s, called)
              or as_offered(s.tool_name or s.name) in tools
              or as_offered(called.get(s.call_id or "", "")) in tools]
    summary = _compared(ref, actual, cfg, trajectory.status == "truncated", called,
                        tools is not None)
    flagged: list[Step] = summary.pop("_wrong_steps") + summary.pop("_unexpected_steps")
    attrs = {**summary, "task_id": ref.task_id, "expected": [c.name for c in ref.calls]}
    if summary["matched"]:
        return [Finding("reference", "match", "info",
                        f"calls match the reference for task {ref.task_id} "
                        f"({summary['match']}, arguments {summary['arguments_match']})"
                        + _unknown(summary),
                        attributes=attrs)]
    if summary["matched"] is None:  # right as far as the cut trace shows: the rest unknown
        return [Finding("reference", "unknown", "info",
                        f"calls match the reference for task {ref.task_id} as far as the "
                        f"trace goes ({summary['match']}, arguments "
                        f"{summary['arguments_match']})" + _unknown(summary),
                        attributes=attrs)]
    flagged.sort(key=lambda s: s.index)
    return [Finding("reference", "mismatch", cfg.severity, _message(ref, summary),
                    [s.span_id for s in flagged], [s.index for s in flagged], attrs)]


def _unnamed(step: Step, called: Mapping[str, str]) -> bool:
    """Whether no attribute named the step's tool (its name a guess from the span's name, as
    the tool_call detector takes it) nor did the call it ran."""
    return step.sources.get("tool_name") == "span name" and (step.call_id or "") not in called


def _compared(ref: Reference, actual: list[Step], cfg: ReferenceConfig, cut: bool,
              called: Mapping[str, str], filtered: bool) -> dict[str, Any]:
    """``compare``, where a step whose tool is unknown is neither the reference's call nor
    another: compared taking it for any tool, for none of the reference's, and (a ``tools``
    filter) for one left out; ``matched`` is null (unknown) when they disagree."""
    unnamed = [a for a, s in enumerate(actual) if _unnamed(s, called)]
    modes = (ref.match or cfg.match, ref.arguments_match or cfg.arguments_match,
             ref.arguments_match_by_tool)
    summary = compare(ref, actual, *modes, cut=cut, called=called,
                      unnamed=dict.fromkeys(unnamed, True))
    if not unnamed:
        return summary
    summary["unknown_names"] = [actual[a].tool_name or actual[a].name for a in unnamed]
    others = [compare(ref, actual, *modes, cut=cut, called=called,
                      unnamed=dict.fromkeys(unnamed, False))["matched"]]
    if filtered:
        others.append(compare(ref, [s for a, s in enumerate(actual) if a not in unnamed],
                              *modes, cut=cut, called=called)["matched"])
    if any(m != summary["matched"] for m in others):
        summary["matched"] = None
    return summary


def _called(trajectory: Trajectory) -> dict[str, str]:
    """Call id -> the name of the call an LLM step asked for under it (the first asked): a
    tool step that ran it (``Step.call_id``, joined by ``links.join_calls``) is that call,
    whatever name its span gives it (the OpenAI Agents SDK's ``handoff to weather_agent``
    ran the model's ``transfer_to_weather_agent``)."""
    out: dict[str, str] = {}
    for step in trajectory.llm_steps:
        for call in step.tool_calls:
            if call.call_id and call.name:
                out.setdefault(call.call_id, call.name)
    return out


def reference_summary(findings: Sequence[Finding]) -> dict[str, Any] | None:
    """The ``verdict.reference`` object from the reference findings, if any: the calls'
    summary (``SUMMARY_KEYS``) when they were compared, and ``answer`` (match | mismatch |
    unknown) when the reference has an expected answer."""
    summary: dict[str, Any] | None = None
    for f in findings:
        if f.detector != "reference":
            continue
        summary = summary if summary is not None else {}
        if f.kind.startswith(_ANSWER):
            summary["answer"] = f.kind[len(_ANSWER):]
        else:
            summary.update({k: f.attributes[k] for k in SUMMARY_KEYS})
    return summary


_ANSWER = "answer_"


__all__ = ["RefCall", "Reference", "arguments_ok", "compare", "detect", "reference_summary"]
