"""tau-bench runs files: a JSON list of ``{task_id, reward, info, traj, trial}`` where ``traj``
is the OpenAI chat log of one run (system, user, assistant with ``tool_calls``, tool).

Each run is one trace (see ``loaders.chat``): a ``chat`` span per assistant message and an
``execute_tool`` span per tool call, in order, with the tool result matched by
``tool_call_id``. The root carries the task id (as a string) and the outcome
(``success`` when ``reward`` is 1, else ``failure``; none when it is no finite number).
tau-bench tools report failures as a result starting with ``Error:``; those tool spans get
status ERROR.

With ``turns`` (``otel-eval eval --turns``, ``replay --turns``) a run is instead one
conversation as a chat service sends it: a trace per user message (the user's message, then
the agent's chat and tool spans until the next one), every turn's root carrying the
conversation id ``gen_ai.conversation.id`` = ``<file name>:<run index>:<digest>`` (8 hex
digits of the run's content: runs files of one name in two directories are two
conversations, never one), a minute apart.
The reward belongs to the conversation, not to a turn: each turn carries ``tau_bench.reward``
and ``tau_bench.task_id`` as plain attributes, no outcome and no task id (the reference
trajectories are whole runs: they are matched in the default mode).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from otel_eval.base.model import Trace
from otel_eval.evaluate.config import TrajectoryConfig
from otel_eval.receive.loaders.chat import ChatTrace, Inputs, content_digest, message_json
from otel_eval.receive.loaders.files import LoaderError

AGENT = "tau-bench-agent"
CONVERSATION_KEY = "gen_ai.conversation.id"
TURN_GAP_NS = 60 * 1_000_000_000  # between the starts of two turns of a conversation


def is_runs(doc: Any) -> bool:
    if isinstance(doc, dict):
        return "traj" in doc
    return (isinstance(doc, list) and bool(doc) and isinstance(doc[0], dict)
            and "traj" in doc[0])


def _tool_error(result: str | None) -> str | None:
    if result and result.startswith("Error"):
        return result.splitlines()[0][:500]
    return None


def _serialized(msg: dict[str, Any], system: dict[str, str]) -> str:
    """The message as GenAI JSON; the system prompt (the same policy text in every run of a
    file) is serialized once per file."""
    content = msg.get("content")
    if msg.get("role") != "system" or not isinstance(content, str):
        return message_json(msg)
    if content not in system:
        system[content] = message_json(msg)
    return system[content]


def _results(traj: list[dict[str, Any]]) -> dict[tuple[int, Any], Any]:
    """(position of the assistant message, call id) -> the content of the first tool message
    after it answering that id. Runs reuse call ids (25 of the 100 airline runs do), so an
    id alone can name another call's result."""
    out: dict[tuple[int, Any], Any] = {}
    open_calls: dict[Any, int] = {}  # call id -> position of the call still unanswered
    for pos, msg in enumerate(traj):
        role = msg.get("role")
        if role == "assistant":
            for call in msg.get("tool_calls") or ():
                open_calls[call.get("id")] = pos
        elif role == "tool":
            call_pos = open_calls.pop(msg.get("tool_call_id"), None)
            if call_pos is not None:
                out[(call_pos, msg.get("tool_call_id"))] = msg.get("content")
    return out


def _assistant(trace: ChatTrace, msg: dict[str, Any], pos: int, serialized: str,
               history: list[str], results: dict[tuple[int, Any], Any]) -> None:
    """An assistant message: its chat span, then a tool span per call it made."""
    trace.chat(history, serialized, "tool_call" if msg.get("tool_calls") else "stop")
    for call in msg.get("tool_calls") or ():
        fn = call.get("function") or {}
        result = results.get((pos, call.get("id")))
        result = None if result is None else str(result)
        trace.tool(str(fn.get("name")), call.get("id"), fn.get("arguments"), result,
                   _tool_error(result))


def _run(run: dict[str, Any], index: int, path: Path, config: TrajectoryConfig,
         system: dict[str, str], digest: str | None) -> Trace:
    trace = ChatTrace(f"{path.name}:{index}:{digest or content_digest(run)}", index,
                      "tau-bench")
    traj = run["traj"]
    results = _results(traj)
    history: list[str] = []
    first_user = last_answer = None
    for pos, msg in enumerate(traj):
        serialized = _serialized(msg, system)
        role = msg.get("role")
        if role == "assistant":
            _assistant(trace, msg, pos, serialized, history, results)
            if msg.get("content"):
                last_answer = serialized
        elif role == "user" and first_user is None:
            first_user = serialized
        history.append(serialized)
    reward = run.get("reward")
    outcome = None
    if isinstance(reward, int | float) and not isinstance(reward, bool) \
            and math.isfinite(reward):  # NaN, +-Infinity: not a reward, no outcome
        outcome = "success" if reward >= 1 else "failure"
    return trace.finish(AGENT, str(path), {
        config.task_id_attribute: str(run["task_id"]) if run.get("task_id") is not None
        else None,
        config.outcome_attribute: outcome,
        "tau_bench.reward": reward,
        "tau_bench.trial": run.get("trial"),
        # = dumps([message]): a one-item list is the item in brackets
        "gen_ai.input.messages": f"[{first_user}]" if first_user else None,
        "gen_ai.output.messages": f"[{last_answer}]" if last_answer else None,
    })


def _turn_messages(traj: list[dict[str, Any]]) -> list[list[int]]:
    """The positions of each turn's messages: a turn starts at a user message (what comes
    before the first one, the system prompt, goes with the first turn)."""
    turns: list[list[int]] = [[]]
    asked = False  # the current turn has its user message
    for pos, msg in enumerate(traj):
        if msg.get("role") == "user":
            if asked:
                turns.append([])
            asked = True
        turns[-1].append(pos)
    return turns


def _turns(run: dict[str, Any], index: int, path: Path, system: dict[str, str]) -> list[Trace]:
    """The run as a conversation: one trace per user message."""
    traj = run["traj"]
    results = _results(traj)
    conversation = f"{path.name}:{index}:{content_digest(run)}"
    history: list[str] = []
    inputs = Inputs()  # the conversation's history is sent on over its turns
    out = []
    for number, positions in enumerate(_turn_messages(traj)):
        trace = ChatTrace(f"{conversation}:turn{number}", index, "tau-bench",
                          offset_ns=number * TURN_GAP_NS, inputs=inputs)
        user = answer = None
        for pos in positions:
            msg = traj[pos]
            serialized = _serialized(msg, system)
            if msg.get("role") == "assistant":
                _assistant(trace, msg, pos, serialized, history, results)
                answer = serialized if msg.get("content") else answer
            elif msg.get("role") == "user" and user is None:
                user = serialized
            history.append(serialized)
        out.append(trace.finish(AGENT, str(path), {
            CONVERSATION_KEY: conversation,
            "tau_bench.task_id": str(run["task_id"]) if run.get("task_id") is not None
            else None,
            "tau_bench.reward": run.get("reward"), "tau_bench.trial": run.get("trial"),
            "gen_ai.input.messages": f"[{user}]" if user else None,
            "gen_ai.output.messages": f"[{answer}]" if answer else None}))
    return out


def from_doc(doc: Any, path: Path, config: TrajectoryConfig, turns: bool = False,
             digest: str | None = None) -> list[Trace]:
    """A trace per run, or with ``turns`` a trace per user message of each run. ``digest``:
    the file's (``chat.file_digest``), in each run's ids; without it, the run's own."""
    runs = [doc] if isinstance(doc, dict) else doc
    traces = []
    system: dict[str, str] = {}
    for index, run in enumerate(runs):
        try:
            if turns:
                traces += _turns(run, index, path, system)
            else:
                traces.append(_run(run, index, path, config, system, digest))
        except (KeyError, TypeError, AttributeError, ValueError) as e:
            raise LoaderError(path, f"run {index}: malformed tau-bench run: {e!r}") from e
    return traces
