"""What each judge sends: ``Request`` objects (messages + reply schema + completeness check).

Pure functions of the rendered trajectory: the Judge sends them, the token benchmark counts
them, the golden tests compare them. Text from spans (task, run, final output, findings) is
framed by the prompt's own lines (``#`` headings, the request line, the reply's shape: each
starts like one of ``frame.OPENERS``); the renderer escaped it (``frame.escape``: a line of
span text that starts like a line of the frame gets a backslash before it), so span content
cannot write a line that reads as the prompt's own (issue 33). Step and process replies must
cover every step / turn asked for (checked, so a partial reply goes through the repair round
trip, not into scores).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from otel_eval.evaluate.judge import schemas
from otel_eval.evaluate.judge.client import Check, Messages
from otel_eval.evaluate.judge.frame import (
    ANSWER,
    CRITERIA,
    GRADE_OUTCOME,
    GRADE_RUN,
    GRADE_SESSION,
    REPLY_SHAPE,
    SCORE_STEPS,
    TURNS_TO_GRADE,
    escape,
)
from otel_eval.evaluate.judge.render import Rendered, StepRef
from otel_eval.evaluate.judge.templates import Prompts, schema_text

PART_ORDER = ("step", "process", "trace", "outcome")  # parts a combined call may carry
# Reply tokens a call asks for: per step of a stepwise part (a step's grade: its critique and
# score; a turn's: its stage and four reasonings and scores) and per whole part (trace,
# outcome). A step's grade with a one-sentence critique is 38 tokens (o200k), a turn's
# with a sentence a dimension 161 (85 with none): a step of a combined call is ~200, so 60
# of them (11,000 tokens) were cut at the default max_output_tokens of 4,096, twice.
REPLY_TOKENS = {"step": 48, "process": 192}
WHOLE_REPLY_TOKENS = 192


@dataclass(frozen=True, slots=True)
class Request:
    name: str  # step | trace | process | outcome | combined | session | rubric_*
    parts: tuple[str, ...]  # judges answered by this call
    messages: Messages
    schema: schemas.Schema
    steps: tuple[StepRef, ...] = ()  # LLM steps / turns this call scores
    check: Check | None = None


def _missing(data: dict[str, Any], key: str, id_key: str, wanted: Sequence[Any]) -> str | None:
    """What the reply's ``key`` lacks or repeats: every step listed graded, each once (a step
    graded twice has no one grade: which would stand would depend on the reply's order)."""
    graded = Counter(item.get(id_key) for item in data.get(key, ()) if isinstance(item, dict))
    missing = [i for i in wanted if i not in graded]
    if missing:
        return f"{key} is missing {id_key} {', '.join(map(str, missing))}: grade every one listed"
    return _twice(graded, key, id_key, "grades")


def _twice(graded: Counter[Any], key: str, id_key: str, verb: str) -> str | None:
    twice = [str(i) for i, n in graded.items() if n > 1][:20]
    if twice:
        return f"{key} {verb} {id_key} {', '.join(twice)} more than once: once each"
    return None


def _check(parts: tuple[str, ...], steps: tuple[StepRef, ...]) -> Check | None:
    wanted = [s.index for s in steps]
    checks = [(key, id_key) for part, key, id_key in
              (("step", "steps", "step"), ("process", "turns", "turn")) if part in parts]
    if not checks or not wanted:
        return None

    def check(data: dict[str, Any]) -> str | None:
        for key, id_key in checks:
            if problem := _missing(data, key, id_key, wanted):
                return problem
        return None

    return check


def _steps_line(steps: tuple[StepRef, ...]) -> str:
    by_node: dict[str, list[str]] = {}
    for s in steps:
        by_node.setdefault(s.node or "(main)", []).append(str(s.index))
    if len(by_node) == 1:
        return "steps " + ", ".join(next(iter(by_node.values())))
    return "; ".join(f"node {node}: steps {', '.join(ids)}" for node, ids in by_node.items())


def _request_text(part: str, steps: tuple[StepRef, ...]) -> str:
    if part == "step":
        return f"{SCORE_STEPS}{_steps_line(steps)}."
    if part == "process":
        return f"{TURNS_TO_GRADE}{', '.join(str(s.index) for s in steps)}."
    if part == "trace":
        return GRADE_RUN
    return GRADE_OUTCOME


def _combined_request(parts: tuple[str, ...], steps: tuple[StepRef, ...]) -> str:
    """One line naming the parts to answer, the stepwise ones last with their steps listed (a
    step left out costs a repair round trip: the whole prompt again)."""
    stepwise = [p for p in parts if p in ("step", "process")]
    out = [p for p in parts if p not in ("step", "process")]
    if stepwise:
        turn = " (a turn per step)" if "process" in stepwise else ""
        out.append(f"{' and '.join(stepwise)}{turn} for LLM {_steps_line(steps)}")
    return ANSWER + "; ".join(out) + "."


def _reply(shape_text: str) -> str:
    """The reply's shape, announced by the frame's own line."""
    return f"{REPLY_SHAPE}\n{shape_text}"


def _messages(prompts: Prompts, rendered: Rendered, instructions: str, request: str,
              schema: schemas.Schema, shape: bool) -> Messages:
    """``shape``: the prompt ends with the reply's shape, for a model that is not sent the
    schema; else the schema travels as ``response_format`` only (not twice). ``rendered``'s
    texts were escaped by their renderer (``render``, ``session``), which knows its own
    step and turn headers from span text."""
    shape_text = schema_text(schema)
    user = prompts.render(
        "frame", instructions=instructions, task=rendered.task,
        trajectory=rendered.trajectory, final_output=rendered.final_output,
        findings=rendered.findings, request=request, schema=shape_text,
        reply=_reply(shape_text) if shape else "").rstrip()
    return [{"role": "system", "content": prompts.render("system")},
            {"role": "user", "content": user}]


def single(prompts: Prompts, rendered: Rendered, part: str,
           steps: tuple[StepRef, ...] = (), shape: bool = True) -> Request:
    """One judge, one call (``steps`` for the step judge and process grader)."""
    schema = schemas.part_schema(part)
    messages = _messages(prompts, rendered, prompts.render(part), _request_text(part, steps),
                         schema, shape)
    return Request(part, (part,), messages, schema, steps, _check((part,), steps))


def combined(prompts: Prompts, rendered: Rendered, parts: tuple[str, ...],
             steps: tuple[StepRef, ...], shape: bool = True) -> Request:
    """Several judges in one structured call; the reply has one property per part."""
    parts = tuple(p for p in PART_ORDER if p in parts)
    instructions = "\n\n".join([prompts.render("combined"),
                                *(prompts.render(p) for p in parts)])
    request = _combined_request(parts, steps)
    schema = schemas.combined_schema(parts)
    messages = _messages(prompts, rendered, instructions, request, schema, shape)
    return Request("combined", parts, messages, schema, steps, _check(parts, steps))


def steps_per_call(stepwise: tuple[str, ...], whole: tuple[str, ...], max_steps: int,
                   max_output_tokens: int | None) -> int:
    """Steps one call asks ``stepwise`` grades for: at most ``max_steps``, and no more than
    a reply of ``max_output_tokens`` holds beside the ``whole`` parts' (``REPLY_TOKENS``);
    at least one."""
    if max_output_tokens is None or not stepwise:
        return max_steps
    room = max_output_tokens - WHOLE_REPLY_TOKENS * len(whole)
    return max(1, min(max_steps, room // sum(REPLY_TOKENS[p] for p in stepwise)))


def _chunks(steps: tuple[StepRef, ...], size: int) -> list[tuple[StepRef, ...]]:
    return [steps[i:i + size] for i in range(0, len(steps), size)] or [()]


def plan(prompts: Prompts, rendered: Rendered, parts: tuple[str, ...], combine: bool,
         max_steps_per_call: int, shape: bool = True,
         max_output_tokens: int | None = None) -> Iterator[Request]:
    """The calls for step / process / trace / outcome ``parts`` (rubric is separate), built
    one at a time as they are taken: each carries the whole view, so a caller that sends as
    it goes holds only the requests in flight.

    Steps and turns go in chunks of ``max_steps_per_call``, fewer when their reply would not
    fit ``max_output_tokens`` (``steps_per_call``: a reply cut at the limit is no JSON); in
    combined mode the first chunk rides with the trace and outcome parts."""
    stepwise = tuple(p for p in ("step", "process") if p in parts)
    whole = tuple(p for p in ("trace", "outcome") if p in parts)
    steps = rendered.steps if stepwise else ()
    if combine:
        chunks = _chunks(steps, steps_per_call(stepwise, whole, max_steps_per_call,
                                               max_output_tokens))
        for n, chunk in enumerate(chunks):
            chunk_parts = (stepwise if chunk else ()) + (whole if n == 0 else ())
            if len(chunk_parts) == 1:
                yield single(prompts, rendered, chunk_parts[0], chunk, shape)
            elif chunk_parts:
                yield combined(prompts, rendered, chunk_parts, chunk, shape)
        return
    for part in stepwise:
        size = steps_per_call((part,), (), max_steps_per_call, max_output_tokens)
        yield from (single(prompts, rendered, part, chunk, shape)
                    for chunk in _chunks(steps, size) if chunk)
    yield from (single(prompts, rendered, part, (), shape) for part in whole)


def session(prompts: Prompts, rendered: Rendered, shape: bool = True) -> Request:
    """The session judge's one call: ``rendered`` is the conversation (``judge.session``)."""
    schema = schemas.session_schema()
    messages = _messages(prompts, rendered, prompts.render("session"), GRADE_SESSION,
                         schema, shape)
    return Request("session", ("session",), messages, schema)


def _one_id_each(data: dict[str, Any]) -> str | None:
    """Criteria under distinct ids: a verdict is given, and stored, by id (two criteria under
    one would share one verdict, the second never checked)."""
    return _twice(Counter(c.get("id") for c in data.get("criteria", ())), "criteria", "id",
                  "gives")


def rubric_generate(prompts: Prompts, task: str) -> Request:
    schema = schemas.rubric_generate_schema()
    shape = schema_text(schema)
    user = prompts.render("rubric_generate", task=escape(task), schema=shape,
                          reply=_reply(shape))
    return Request("rubric_generate", ("rubric",),
                   [{"role": "system", "content": prompts.render("system")},
                    {"role": "user", "content": user}], schema, (), _one_id_each)


def rubric_verify(prompts: Prompts, rendered: Rendered,
                  criteria: Sequence[dict[str, str]], shape: bool = True) -> Request:
    schema = schemas.rubric_verify_schema()
    # criteria were written by the model from span text: escaped like it
    listing = escape("\n".join(f"- {c['id']}: {c['criterion']}" for c in criteria))
    ids = [c["id"] for c in criteria]

    def check(data: dict[str, Any]) -> str | None:
        """Every criterion checked, each once (as the steps: ``_missing``)."""
        return _missing(data, "results", "id", ids)

    messages = _messages(prompts, rendered, prompts.render("rubric_verify"),
                         f"{CRITERIA}\n{listing}", schema, shape)
    return Request("rubric_verify", ("rubric",), messages, schema, (), check)
