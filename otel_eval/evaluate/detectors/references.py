"""Reference trajectories loaded from a file (stage: evaluate, set-up; the only I/O here).

Two formats, told apart by content:
- JSON lines, one object per task: ``task_id``, ``calls`` [{``name``, ``arguments``}],
  optional ``match``, ``arguments_match``, ``arguments_match_by_tool`` {tool: mode} and
  ``tools`` (compare only calls to these tools); and optional ``expected_output`` (the final
  answer expected: a text or a number), ``output_match`` (exact | contains | numeric:
  ``reference_answer``) and ``output_tolerance`` (numeric, absolute, at least 0). A
  reference with ``expected_output`` may leave out ``calls``: its calls are not compared.
  A JSON array of such objects also loads.
- tau-bench task files (a JSON array of tasks with ``actions`` [{``name``, ``kwargs``}]), as
  they are: task id = index in the file; the expected calls are the *write* actions (those
  that change the database, which is what tau-bench's reward checks), compared with
  ``any_order`` and exact arguments against the agent's calls to write tools only.
A task id given twice is refused, naming both lines (one of the two would never be compared).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

from otel_eval.base.configcheck import StartupError
from otel_eval.evaluate.config import MAX_TASK_ID_CHARS
from otel_eval.evaluate.detectors.calls import RefCall, Reference
from otel_eval.evaluate.detectors.canonical import nfc
from otel_eval.evaluate.detectors.config import ArgumentsMode, MatchMode, OutputMode
from otel_eval.evaluate.detectors.reference_answer import expected_number

# tau-bench (airline + retail) tools that change the database. Reads (get_*, search_*,
# find_*, list_*), `calculate`, `think` and `transfer_to_human_agents` do not.
TAU_BENCH_WRITE_TOOLS = frozenset({
    "book_reservation", "cancel_reservation", "send_certificate", "update_reservation_baggages",
    "update_reservation_flights", "update_reservation_passengers",
    "cancel_pending_order", "exchange_delivered_order_items", "modify_pending_order_address",
    "modify_pending_order_items", "modify_pending_order_payment", "modify_user_address",
    "return_delivered_order_items",
})

_MATCH = frozenset(get_args(MatchMode))
_ARGS = frozenset(get_args(ArgumentsMode))
_OUTPUT = frozenset(get_args(OutputMode))


class ReferenceSet(Mapping[str, Reference]):
    """Task id -> reference, read-only; a task id is looked up in Unicode NFC (composed or
    decomposed, one id: a macOS file name's NFD, a golden set typed NFC)."""

    def __init__(self, references: Mapping[str, Reference] | None = None) -> None:
        self._refs: dict[str, Reference] = {nfc(k): v for k, v in (references or {}).items()}

    def __getitem__(self, task_id: str) -> Reference:
        return self._refs[nfc(task_id)]

    def __iter__(self) -> Iterator[str]:
        return iter(self._refs)

    def __len__(self) -> int:
        return len(self._refs)

    def __repr__(self) -> str:
        return f"ReferenceSet({len(self)} tasks)"


def _mode(value: Any, allowed: frozenset[str], what: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value not in allowed:  # a list is unhashable
        raise ValueError(f"{where}: {what} {value!r} is not one of {', '.join(sorted(allowed))}")
    return str(value)


def reference_from_object(obj: Any, where: str) -> Reference:
    """One reference from a JSON-lines object; ValueError naming ``where`` if malformed."""
    if not isinstance(obj, Mapping) or "task_id" not in obj:
        raise ValueError(f"{where}: expected an object with task_id and calls")
    answer = _answer(obj, where)
    raw_calls = obj.get("calls")
    if raw_calls is None and answer["expected_output"] is not None:
        raw_calls = None  # an answer only: the calls are not compared
    elif not isinstance(raw_calls, list):
        raise ValueError(f"{where}: calls must be a list of {{name, arguments}}")
    calls = []
    for i, c in enumerate(raw_calls or ()):
        if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
            raise ValueError(f"{where}: calls[{i}] needs a string name")
        calls.append(RefCall(c["name"], c.get("arguments")))
    by_tool = obj.get("arguments_match_by_tool") or {}
    if not isinstance(by_tool, Mapping):
        raise ValueError(f"{where}: arguments_match_by_tool must map tool -> mode")
    tools = obj.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(
            isinstance(t, str) for t in tools)):
        raise ValueError(f"{where}: tools must be a list of tool names")
    raw_id = obj["task_id"]
    if isinstance(raw_id, bool) or not isinstance(raw_id, str | int | float) or raw_id == "":
        # null, true, a list: its Python text ("None") is no id a run carries
        raise ValueError(f"{where}: task_id must be a non-empty string or a number")
    task_id = str(raw_id)
    if len(task_id) > MAX_TASK_ID_CHARS:
        raise ValueError(f"{where}: task_id longer than {MAX_TASK_ID_CHARS} characters "
                         "(a run's longer task id is none: no run can find it)")
    return Reference(
        task_id=task_id, calls=tuple(calls),
        match=_mode(obj.get("match"), _MATCH, "match", where),
        arguments_match=_mode(obj.get("arguments_match"), _ARGS, "arguments_match", where),
        arguments_match_by_tool={  # a null mode is not set: the default, as match: null
            str(k): mode for k, v in by_tool.items()
            if (mode := _mode(v, _ARGS, f"arguments_match_by_tool.{k}", where)) is not None},
        tools=frozenset(tools) if tools is not None else None,
        compare_calls=raw_calls is not None, **answer,
    )


def _json_kind(value: Any) -> str:
    """What a JSON value that is no text nor number is, as a message names it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "an object" if isinstance(value, Mapping) else "an array"


def _answer(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The expected answer's fields of a reference, checked."""
    expected = obj.get("expected_output")
    if expected is not None and (isinstance(expected, bool) or not isinstance(
            expected, str | int | float)):
        raise ValueError(
            f"{where}: expected_output must be a text or a number, got {_json_kind(expected)}"
            " (the final answer compared with the run's: give its text, or remove the key: "
            "the reference's calls are still compared)")
    mode = _mode(obj.get("output_match"), _OUTPUT, "output_match", where)
    tolerance = obj.get("output_tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(
            tolerance, int | float) or not 0 <= tolerance < float("inf")):
        raise ValueError(f"{where}: output_tolerance must be a number at least 0")
    if mode == "numeric" and expected is not None and expected_number(expected) is None:
        raise ValueError(f"{where}: expected_output {str(expected)[:80]!r} is no number "
                         "(output_match numeric)")
    return {"expected_output": expected, "output_match": mode,
            "output_tolerance": float(tolerance) if tolerance is not None else None}


def _tau_bench(index: int, task: Mapping[str, Any], path: str) -> Reference:
    actions = task.get("actions")
    if not isinstance(actions, list):
        raise ValueError(f"{path}[{index}]: actions must be a list of {{name, kwargs}}")
    writes = [RefCall(a["name"], a.get("kwargs", {})) for a in actions
              if isinstance(a, Mapping) and isinstance(a.get("name"), str)
              and a["name"] in TAU_BENCH_WRITE_TOOLS]
    return Reference(str(index), tuple(writes), match="any_order", arguments_match="exact",
                     tools=TAU_BENCH_WRITE_TOOLS)


def _add(refs: dict[str, Reference], first: dict[str, str], ref: Reference,
         where: str) -> None:
    """``ref`` under its task id; a task id given twice is refused naming both places (the
    later one silently replaced the earlier: one of the two was never compared)."""
    key = nfc(ref.task_id)  # the id ``ReferenceSet`` looks up
    if key in first:
        raise ValueError(f"{where}: task_id {ref.task_id!r} given again "
                         f"(first at {first[key]})")
    first[key] = where
    refs[key] = ref


def _from_array(items: list[Any], path: str) -> dict[str, Reference]:
    refs: dict[str, Reference] = {}
    first: dict[str, str] = {}
    for i, item in enumerate(items):
        if isinstance(item, Mapping) and "actions" in item and "calls" not in item:
            ref = _tau_bench(i, item, path)
        else:
            ref = reference_from_object(item, f"{path}[{i}]")
        _add(refs, first, ref, f"{path}[{i}]")
    return refs


def load_references(path: str | Path) -> ReferenceSet:
    """Read references (JSON lines or a tau-bench task file). Raises ``ReferencesError``
    (a ValueError and a StartupError) naming the file: missing, unreadable or malformed."""
    try:
        return _load(path)
    except (OSError, UnicodeDecodeError) as e:
        raise ReferencesError(f"references file {path}: "
                              f"{getattr(e, 'strerror', None) or e}") from None
    except ValueError as e:
        raise ReferencesError(str(e) if str(path) in str(e)
                              else f"references file {path}: {e}") from None


class ReferencesError(StartupError, ValueError):
    """References that cannot be read; the message names the file (and line)."""


def _load(path: str | Path) -> ReferenceSet:
    text = Path(path).read_text(encoding="utf-8-sig")  # a UTF-8 BOM skipped, as trace files
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as e:  # RecursionError: nesting too deep
            raise ValueError(f"{path}: not valid JSON: {e}") from e
        return ReferenceSet(_from_array(data, str(path)))
    refs: dict[str, Reference] = {}
    first: dict[str, str] = {}
    # lines end at "\n" (a "\r" before it is whitespace to JSON): not at U+2028, U+2029 or
    # NEL, which JSON writes as they are inside a string (str.splitlines cut there)
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise ValueError(f"{path}:{n}: not valid JSON: {e}") from e
        _add(refs, first, reference_from_object(obj, f"{path}:{n}"), f"{path}:{n}")
    return ReferenceSet(refs)
