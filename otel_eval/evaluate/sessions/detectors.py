"""Stage: evaluate, sessions. Detectors across the turns of one conversation.

Each is a pure function of the turns (stored v1 evaluation objects, in start order) and the
config, returning findings that name the turn (``trace_id``) and the step they point at:

- ``loop`` / ``repeated_across_turns`` (error): the same call, same tool and same canonical
  arguments (``detectors.canonical``), made in ``loop_turns`` or more turns. No single trace
  needs to repeat anything: the agent forgot what an earlier turn already learned. A call
  with no arguments is not compared: it asks for the state now, which the turns between may
  change (DSPy ReAct's ``finish`` ends every turn); nor one whose arguments the stored turn
  holds cut (``truncated``): known only in part; nor a call whose last turn's result
  differed from the turn's before (a status asked for until it changed, as loop rule (a)'s
  poll: the earlier turns had not learned it; a call that failed with no result recorded,
  a rate limit, then succeeded).
- ``repeated_request`` / ``same_request`` (warning): the user's request (``_request``: the
  turn's input, whitespace and case folded) repeated in ``repeated_request_turns`` or more
  turns: the agent did not help the first time. ``reworded_request`` (warning): the same, with at
  least one of the repeats in other words (character-3-gram Jaccard of the two requests >=
  ``reworded_request_similarity``, and the same words with a digit: a booking code, a date,
  an amount; each compared with the ``reworded_window`` requests before it). Short requests
  ("yes") are not compared. A request naming nothing of its own ("yes, please proceed with
  these changes") names what the agent's reply before it named (``_named``): confirmations
  of two different proposals are two requests. Nor is a request whose last repeat's turn
  made a call of the turn before again and got another result (``_polled``): "is it done
  yet?" asked until the status changed was answered each time.
- ``non_termination`` (complete sessions only: an open one may still go on):
  ``pending_tool_call`` (error), the last turn's last LLM call asked for a tool that never
  ran (a call that ran at the very end, a handoff such as tau-bench's
  ``transfer_to_human_agents``, is an ending; a call rebuilt from the output whose result
  came back ran; a call of unknown outcome is none); ``unanswered_question`` (warning:
  "anything else?" is a polite close), the last turn's answer (else its last LLM call's) ends
  on a question nobody answered (emphasis, quotes and brackets after the "?" set aside; the
  fullwidth and Arabic question marks are question marks too). A last turn whose trace was
  released ``truncated`` (cut while its run went on) has no last LLM call of its own: its
  run went on past the cut, so neither is drawn from the LLM call the trace ends with (as
  the trace's own ``non_termination``; the turn's recorded output is still read).
- ``budget`` (error), its kind the ``--budget`` name: ``session_turns`` (more turns than
  ``session_turns``), ``session_steps`` (the turns' steps summed), ``session_tokens``
  (input and output tokens summed), ``session_cost`` (USD summed; a turn of unknown cost
  makes the total unknown unless the known part alone is past), ``session_time`` (first
  turn's start to last turn's end, seconds; a turn of unknown start or duration left out).
  Each is on the first turn past the budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from otel_eval.base.steps import tokens_total
from otel_eval.base.text import load_content
from otel_eval.base.usage import cost_partly_known
from otel_eval.base.words import (
    CJK_CLOSERS,
    QUESTION_MARKS,
    wide_len,
    words,
)
from otel_eval.evaluate.conventions.values import cut_json
from otel_eval.evaluate.detectors.canonical import canonical_arguments, norm_ws
from otel_eval.evaluate.detectors.reworded import jaccard, trigrams
from otel_eval.evaluate.sessions.config import SessionsConfig

__all__ = ["DETECTORS", "SessionFinding"]

SessionFinding = dict[str, Any]
Turns = Sequence[dict[str, Any]]
_DIGIT = re.compile(r"\d")
_PUNCTUATION = ".,;:!?()[]{}\"'"
# what ends a request without changing it: a full stop, an exclamation or a question mark,
# of Latin, Chinese and Japanese (fullwidth, 。), Arabic
_ENDS = ".!? \u3002\uff01\u3000" + "".join(QUESTION_MARKS)
# after a question's mark: emphasis, quotes, brackets
_CLOSERS = "*_`\"'\u201d\u2019)]} \t\n" + CJK_CLOSERS
_NO_ARGUMENTS = frozenset({"{}", "[]", ""})  # canonical arguments of a call with none
# of a request compared for equality, whole up to this (two that share a pasted log and
# then ask different things are two requests); a prompt read as the request likewise
_REQUEST_CHARS = 8_000
_REWORD_CHARS = 500  # of a request compared for a rewording (it shows in the first sentences)
_REPLY_CHARS = 2_000  # of the agent's reply a request naming nothing answers (its proposal)


def _finding(detector: str, kind: str, severity: str, message: str, turn: dict[str, Any],
             step: int | None, **attributes: Any) -> SessionFinding:
    return {"detector": detector, "kind": kind, "severity": severity, "message": message,
            "trace_id": turn.get("trace_id"), "step": step, "attributes": attributes}


def _calls(turn: dict[str, Any], bare: bool = False,
           ) -> dict[tuple[str, str], tuple[int, Any]]:
    """(tool, canonical arguments) -> the index of its first step and what it returned last
    (``_returned``), for the turn's calls with arguments (one with none, or unrecorded ones,
    asks nothing an earlier turn answered), with ``bare`` those with none too. Arguments the
    stored object cut (``truncated``: their start, or emptied), or the text of an object cut
    at an attribute length limit (``values.cut_json``), are not known whole: two calls
    stored alike may differ past the cut, so they are not compared."""
    out: dict[tuple[str, str], tuple[int, Any]] = {}
    for step in turn.get("steps") or ():
        cut = step.get("truncated")
        if (isinstance(cut, dict) and "arguments" in cut) or cut_json(step.get("arguments")):
            continue  # cut by the store, or at an attribute length limit (``cut_json``)
        if step.get("kind") == "tool" and step.get("tool_name"):
            arguments = canonical_arguments(step.get("arguments"))
            if bare or arguments not in _NO_ARGUMENTS:
                key = (str(step["tool_name"]), arguments)
                first = out[key][0] if key in out else int(step.get("index", 0))
                out[key] = (first, _returned(step))
    return out


def _returned(step: dict[str, Any]) -> tuple[Any, Any, bool, bool] | None:
    """A call's result and error, whether the result is known only in part (cut by the
    store, ``truncated``, or at an attribute length limit, ``values.cut_json``), and whether
    the call failed (its span's status); None when it told nothing: no result recorded, and
    it did not fail (a call that raised, a rate limit, records its error and no result)."""
    result = step.get("result")
    failed = step.get("status") == "error"
    if result is None:
        return (None, step.get("error"), False, True) if failed else None
    cut = step.get("truncated")
    return result, step.get("error"), (isinstance(cut, dict) and "result" in cut) \
        or cut_json(result), failed


def _changed(before: tuple[Any, Any, bool, bool] | None,
             last: tuple[Any, Any, bool, bool] | None) -> bool:
    """Whether a call's last turn may have learned something its turn before did not: its
    result differed (a job's status asked for in each turn until it changed, as loop rule
    (a)'s poll; a call that failed, with no result, then succeeded: a retry after a rate
    limit), or both were cut alike (what they said past the cut is unknown). Not when either
    told nothing, nor two failures one of which recorded no result: unknown, not a change."""
    if before is None or last is None:
        return False
    if before[0] is None or last[0] is None:
        return before[3] != last[3]  # a failure with no result, and one that did not fail
    return before[:2] != last[:2] or last[2]


def loop(turns: Turns, config: SessionsConfig, complete: bool) -> list[SessionFinding]:
    seen: dict[tuple[str, str], list[tuple[int, int, Any]]] = {}  # call -> [(turn, step, ..)]
    for number, turn in enumerate(turns):
        for key, (step, returned) in _calls(turn).items():
            seen.setdefault(key, []).append((number, step, returned))
    out = []
    for (tool, arguments), where in seen.items():
        if len(where) >= config.loop_turns and not _changed(where[-2][2], where[-1][2]):
            number, step, _ = where[-1]
            out.append(_finding(
                "loop", "repeated_across_turns", "error",
                f"{tool} called with the same arguments in {len(where)} turns of the "
                "conversation", turns[number], step, tool=tool, arguments=arguments[:256],
                turns=[n + 1 for n, _, _ in where]))
    return out


def _request(turn: dict[str, Any]) -> tuple[str, bool]:
    """(the user's request in the turn, read from what an LLM was sent?). The request is the
    turn's input: the user's message where the input holds messages (``trajectory.build``).
    Where the input is another JSON document (a framework's agent config or workflow state:
    CrewAI, LlamaIndex), it is what the turn's first LLM call was sent last (its ``prompt``),
    often inside the framework's own template (compared for equality only: the user's words
    may come after a long template). Either is kept whole up to ``_REQUEST_CHARS``. Nothing
    recognised is "" (never compared)."""
    text: Any = turn.get("input")
    prompted = not isinstance(text, str) or _is_document(text)
    if prompted:
        llm = next((s for s in turn.get("steps") or () if s.get("kind") == "llm"), None)
        text = llm.get("prompt") if llm is not None else None
    if not isinstance(text, str):
        return "", prompted
    return norm_ws(text[:_REQUEST_CHARS * 4]).casefold().rstrip(_ENDS)[:_REQUEST_CHARS], \
        prompted


def _words(requests: Sequence[tuple[str, bool]]) -> list[str]:
    """What the user wrote in each request: a prompted request without the template its
    turns share, the text before and after that differs between them (when two or more
    differ; else the whole text, template and words not told apart). Words that every
    differing request shares go with the template: a repeat may be missed, none made up."""
    prompts = {text for text, prompted in requests if prompted and text}
    if len(prompts) < 2:
        return [text for text, _ in requests]
    head = _shared(prompts)
    tail = _shared({p[head:][::-1] for p in prompts})
    return [text[head:len(text) - tail] if prompted else text for text, prompted in requests]


def _shared(texts: set[str]) -> int:
    """The length of the prefix every text shares: that of the lowest and the highest (any
    text between them in order shares it too)."""
    n = 0
    for a, b in zip(min(texts), max(texts), strict=False):  # the shorter one ends it
        if a != b:
            break
        n += 1
    return n


def _is_document(text: str) -> bool:
    """A JSON object or array, not words."""
    if not text.lstrip().startswith(("{", "[")):
        return False
    try:
        return isinstance(load_content(text), dict | list)
    except ValueError:  # a message that starts with a brace (or nested past our depth)
        return False


def _identifiers(text: str) -> frozenset[str]:
    """The words with a digit in them (a booking code, a date, a flight, an amount): two
    requests naming different ones ask different things, however alike their words (``words``:
    in Chinese or Japanese, the number in 订单123456在哪里, not the whole sentence)."""
    return frozenset(w.strip(_PUNCTUATION) for w in words(text) if _DIGIT.search(w))


def _named(turns: Turns, number: int, text: str, prompted: bool) -> frozenset[str]:
    """What a request names (``_identifiers``); a user's request that names nothing of its
    own ("yes, please proceed with these changes") is about what the agent said just before
    it, so it names what that reply named (the last ``_REPLY_CHARS`` of the turn before's
    output): two confirmations of proposals of different flights, dates or amounts are two
    requests. A repeat may be missed so, none is made up."""
    named = _identifiers(text[:_REWORD_CHARS])
    if named or prompted or number == 0:
        return named
    reply = turns[number - 1].get("output")
    return _identifiers(reply[-_REPLY_CHARS:]) if isinstance(reply, str) else named


def _groups(requests: Sequence[tuple[int, str, bool]], ids: Sequence[frozenset[str]],
            config: SessionsConfig) -> list[tuple[list[int], bool]]:
    """Turns asking the same thing: (turn numbers, reworded?) per group of two or more.
    Equal texts naming the same (``ids``: ``_named``) are one request wherever they are; a
    text is also compared with the ``reworded_window`` requests before it (the nearest
    first): character-3-gram Jaccard >= ``reworded_request_similarity`` is a rewording. A
    request read from an LLM's prompt is only ever equal: the framework's template around
    the user's words makes any two alike."""
    grams = [frozenset() if prompted else trigrams(text[:_REWORD_CHARS])
             for _, text, prompted in requests]
    group = list(range(len(requests)))  # request -> the first request of its group
    reworded: set[int] = set()
    # (text, what it names) -> its first request (equal ones: at any distance)
    exact: dict[tuple[str, frozenset[str]], int] = {}
    similar = config.reworded_request_similarity
    for i, (_, text, prompted) in enumerate(requests):
        if (text, ids[i]) in exact:
            group[i] = group[exact[text, ids[i]]]
            continue
        exact[text, ids[i]] = i
        if prompted:
            continue
        for j in range(i - 1, max(0, i - config.reworded_window) - 1, -1):
            if requests[j][2]:
                continue
            small, large = sorted((len(grams[i]), len(grams[j])))
            # J <= |small| / |large|: sets of too different sizes are not compared
            if ids[i] == ids[j] and small >= similar * large \
                    and jaccard(grams[i], grams[j]) >= similar:
                group[i] = group[j]
                reworded.add(group[j])
                break
    members: dict[int, list[int]] = {}
    for i, first in enumerate(group):
        members.setdefault(first, []).append(requests[i][0])
    return [(numbers, first in reworded) for first, numbers in members.items()
            if len(numbers) >= 2]


def _polled(before: dict[str, Any], last: dict[str, Any]) -> bool:
    """Whether a request's last repeat learned what the one before had not: a call both
    turns made (one with no arguments too: it asks for the state now) whose result changed
    (``_changed``). "Is it done yet?" asked each turn until the job's status changed was
    answered each time: a poll, as the session loop's, not a request the agent failed."""
    earlier = _calls(before, bare=True)
    return any(_changed(earlier[key][1], returned)
               for key, (_, returned) in _calls(last, bare=True).items() if key in earlier)


def repeated_request(turns: Turns, config: SessionsConfig,
                     complete: bool) -> list[SessionFinding]:
    """Short requests are not compared; a prompted request's length is that of the user's
    words in it (``_words``: "yes" in a template of 500 characters is still "yes")."""
    read = [_request(t) for t in turns]
    words = _words(read)
    floor = config.min_request_chars  # a wide character (Chinese) counts two (``wide_len``)
    requests = [(n, text, prompted) for n, (text, prompted) in enumerate(read)
                if len(words[n]) >= floor or wide_len(words[n]) >= floor]
    ids = [_named(turns, n, text, prompted) for n, text, prompted in requests]
    out = []
    for numbers, reworded in _groups(requests, ids, config):
        if len(numbers) < config.repeated_request_turns \
                or _polled(turns[numbers[-2]], turns[numbers[-1]]):
            continue
        said = "asked the same thing" + (", reworded," if reworded else "")
        out.append(_finding(
            "repeated_request", "reworded_request" if reworded else "same_request", "warning",
            f"the user {said} in {len(numbers)} turns", turns[numbers[-1]], None,
            turns=[n + 1 for n in numbers], request=words[numbers[0]][:256]))
    return out


def _pending(turn: dict[str, Any], llm: dict[str, Any]) -> list[str]:
    """The calls the turn's last LLM call asked for that did not run: ``never_ran``, or
    rebuilt from its output with no result told (a rebuilt call whose result came back
    ran); a call of unknown outcome is no pending call."""
    told = {s.get("call_id") for s in turn.get("steps") or ()
            if s.get("kind") == "tool" and s.get("call_id") and s.get("result") is not None}
    out = []
    for call in llm.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        outcome = call.get("outcome")
        if outcome == "never_ran" or (outcome == "rebuilt" and call.get("call_id") not in told):
            out.append(str(call.get("name"))[:128])
    return out


def _asks(text: Any) -> bool:
    """The reply ends on a question (markdown emphasis, quotes and brackets after the
    question mark set aside: ``**Shall I go ahead?**``)."""
    return isinstance(text, str) and \
        text[-1000:].rstrip().rstrip(_CLOSERS).endswith(QUESTION_MARKS)


def non_termination(turns: Turns, config: SessionsConfig,
                    complete: bool) -> list[SessionFinding]:
    if not complete or not turns:
        return []
    last = turns[-1]
    llm = [s for s in last.get("steps") or () if s.get("kind") == "llm"]
    if last.get("status") == "truncated":  # cut while it went on: its last call unknown
        llm = []
    pending = _pending(last, llm[-1]) if llm else []
    if pending:
        return [_finding("non_termination", "pending_tool_call", "error",
                         "the conversation ended with a tool call pending in its last turn ("
                         + ", ".join(pending) + ")", last, int(llm[-1].get("index", 0)),
                         tools=pending)]
    answer = last.get("output")
    if not isinstance(answer, str) and llm:  # no answer on the root: the last LLM call's
        answer = llm[-1].get("answer")
    if _asks(answer):
        return [_finding("non_termination", "unanswered_question", "warning",
                         "the conversation ended with the agent's question unanswered",
                         last, None)]
    return []


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
    return float(value) if ok else None


def _turn_steps(turn: dict[str, Any]) -> float | None:
    counts = turn.get("counts")
    steps = _number(counts.get("steps")) if isinstance(counts, dict) else None
    return steps if steps is not None else float(len(turn.get("steps") or ()))


def _usage(turn: dict[str, Any], key: str) -> float | None:
    usage = turn.get("usage")
    return _number(usage.get(key)) if isinstance(usage, dict) else None


def _turn_tokens(turn: dict[str, Any]) -> float | None:
    return tokens_total(turn.get("usage"))  # None: no span of the turn recorded a count


def _turn_cost(turn: dict[str, Any]) -> float | None:
    return _usage(turn, "cost_usd")


# kind -> (config field, per-turn measure, what it counts, unit)
_SUMMED: dict[str, tuple[str, Callable[[dict[str, Any]], float | None], str, str]] = {
    "session_steps": ("session_steps", _turn_steps, "steps", ""),
    "session_tokens": ("session_tokens", _turn_tokens, "tokens", ""),
    "session_cost": ("session_cost_usd", _turn_cost, "cost", " USD"),
}


def _summed(turns: Turns, config: SessionsConfig, kind: str) -> list[SessionFinding]:
    """A budget summed over the turns: the finding is on the turn that went past it. A turn
    whose value is unknown (a cost partly unknown too) makes the total a lower bound, reported
    when the known part alone is past."""
    field, measure, what, unit = _SUMMED[kind]
    limit = getattr(config, field)
    if limit is None:
        return []
    total, unknown, crossed = 0.0, False, None
    for turn in turns:
        value = measure(turn)
        if value is None:
            unknown = True
            continue
        # a turn's cost leaving out a call of unknown cost is a lower bound as well
        unknown = unknown or (kind == "session_cost" and cost_partly_known(turn))
        total += value
        if crossed is None and total > limit:
            crossed = turn
    if crossed is None:
        return []
    return [_finding("budget", kind, "error",
                     f"{what} {total:g}{unit}{' at least' if unknown else ''} in the "
                     f"conversation (budget {limit:g}{unit})", crossed, None,
                     value=total, limit=limit, unknown_turns=unknown)]


def _time(turns: Turns, config: SessionsConfig) -> list[SessionFinding]:
    """Wall time from the first turn's start to the last turn's end; the finding is on the
    first turn that ended past the budget. A turn whose start or duration is unknown (a start
    of 0: no time recorded, not 1970) is left out."""
    limit = config.session_time_s
    timed = [(t, start, start + duration * 1e9) for t in turns
             if (start := _number(t.get("start_time_unix_nano"))) is not None and start > 0
             and (duration := _number(t.get("duration_s"))) is not None]
    if limit is None or not timed:
        return []
    first = min(start for _, start, _ in timed)
    elapsed = (max(end for _, _, end in timed) - first) / 1e9
    if elapsed <= limit:
        return []
    crossed = next(t for t, _, end in timed if (end - first) / 1e9 > limit)
    return [_finding("budget", "session_time", "error",
                     f"{elapsed:g} s from the first turn's start to the last one's end "
                     f"(budget {limit:g} s)", crossed, None, value=elapsed, limit=limit)]


def budget(turns: Turns, config: SessionsConfig, complete: bool,
           total: int | None = None) -> list[SessionFinding]:
    """The session budgets (``SESSION_BUDGETS``); ``total``: the turns it has in all, when
    only the newest were read (the sums are then over those read: past the budget is past)."""
    if not turns:
        return []
    out = []
    limit = config.session_turns
    count = len(turns) if total is None else total
    if limit is not None and count > limit:
        # the first turn past it; when the newest were read without it, the first read
        first = limit - (count - len(turns))
        at = turns[max(first, 0)]
        out.append(_finding("budget", "session_turns", "error",
                            f"{count} turns in the conversation (budget {limit})", at, None,
                            value=count, limit=limit))
    for kind in _SUMMED:
        out += _summed(turns, config, kind)
    return out + _time(turns, config)


Detector = Callable[[Turns, SessionsConfig, bool], list[SessionFinding]]
DETECTORS: dict[str, Detector] = {
    "loop": loop,
    "repeated_request": repeated_request,
    "non_termination": non_termination,
}
