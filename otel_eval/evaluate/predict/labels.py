"""Stage: predict (training input). Labelled runs: labels files and the outcomes runs carry
-> one training row per labelled run (``otel-eval train``).

    labels files (JSON lines, a SWE-bench results summary) -> Labels
    evaluations + Labels -> Row (features, label, fold group: the task, text, agent)

A run's label, first match wins: a line naming its trace id, the outcome a user recorded
for it in serve's store (``--feedback``: ``with_feedback``), a line (or summary instance)
naming its task id, the outcome the run carries (tau-bench ``reward``, the root span's
outcome attribute). A bad labels file stops training with the file, line and reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.evaluator import normalize_outcome
from otel_eval.evaluate.predict.features import features
from otel_eval.evaluate.predict.modelfile import agent_key
from otel_eval.evaluate.predict.text import run_text

MAX_LABEL_LINE_CHARS = 4096


class TrainError(ValueError):
    """Training cannot go on (bad labels file, too few labelled runs); the message says why."""


@dataclass
class Labels:
    by_trace: dict[str, bool] = field(default_factory=dict)
    by_task: dict[str, bool] = field(default_factory=dict)

    def of(self, evaluation: Evaluation) -> bool | None:
        t = evaluation.trajectory
        if t.trace_id in self.by_trace:
            return self.by_trace[t.trace_id]
        if t.task_id is not None and t.task_id in self.by_task:
            return self.by_task[t.task_id]
        outcome = evaluation.verdict.outcome if evaluation.verdict else None
        return None if outcome is None else outcome == "success"


@dataclass(frozen=True)
class Row:
    """One labelled run: its features, label and fold group (the task, else the trace)."""

    values: dict[str, float]
    label: bool
    group: str
    source: str
    text: str = ""
    agent: str = ""  # ``modelfile.agent_key``: service/agent


def _outcome(value: Any, where: str) -> bool:
    outcome = normalize_outcome(value)
    if outcome is None:
        raise TrainError(f"{where}: outcome {value!r} is not true/false, 1/0 or "
                         "success/failure")
    return outcome == "success"


def _summary(doc: dict[str, Any], path: str, labels: Labels) -> None:
    instances = doc.get("instances")
    if not isinstance(instances, list):
        raise TrainError(f"{path}: instances: expected a list of {{instance_id, resolved}}")
    for i, item in enumerate(instances):
        if not isinstance(item, dict) or not isinstance(item.get("instance_id"), str):
            raise TrainError(f"{path}: instances[{i}]: expected {{instance_id, resolved}}")
        key, value = item["instance_id"], _outcome(item.get("resolved"),
                                                   f"{path}: instances[{i}]")
        if labels.by_task.get(key, value) != value:  # as a labels line (_line)
            raise TrainError(f"{path}: instances[{i}]: instance_id {key[:80]!r} labelled "
                             "both ways")
        labels.by_task[key] = value


def _line(text: str, where: str, labels: Labels) -> None:
    if len(text) > MAX_LABEL_LINE_CHARS:
        raise TrainError(f"{where}: longer than {MAX_LABEL_LINE_CHARS} characters")
    try:
        item = json.loads(text)
    except (ValueError, RecursionError) as e:  # RecursionError: nested too deep
        raise TrainError(f"{where}: not JSON ({e})") from None
    if not isinstance(item, dict) or "outcome" not in item:
        raise TrainError(f'{where}: expected {{"trace_id": "...", "outcome": true|false}}')
    value = _outcome(item["outcome"], where)
    if isinstance(item.get("trace_id"), str):
        kind, key, into = "trace_id", item["trace_id"].lower(), labels.by_trace
    elif isinstance(item.get("task_id"), str | int):
        kind, key, into = "task_id", str(item["task_id"]), labels.by_task
    else:
        raise TrainError(f"{where}: needs a string trace_id (or task_id)")
    if into.get(key, value) != value:  # which one was right? (the last one won)
        raise TrainError(f"{where}: {kind} {key[:80]!r} labelled both ways")
    into[key] = value


def read_labels(paths: Iterable[str]) -> Labels:
    """Labels from JSON-lines files or SWE-bench results summaries (see the docstring)."""
    labels = Labels()
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise TrainError(f"labels file {path}: cannot be read ({e})") from None
        stripped = text.lstrip()
        if stripped.startswith("{") and '"instances"' in stripped[:200]:
            try:
                doc = json.loads(text)
            except (ValueError, RecursionError):  # then read as lines, which say where
                doc = None
            if isinstance(doc, dict):
                _summary(doc, path, labels)
                continue
        # lines end at "\n": not at U+2028, U+2029 or NEL, which JSON writes as they are
        # inside a string (str.splitlines cut there)
        for n, line in enumerate(text.split("\n"), 1):
            if line.strip():
                _line(line, f"labels file {path} line {n}", labels)
    return labels


FEEDBACK_BATCH = 500  # runs whose recorded outcomes are looked up at once


def with_feedback(evaluations: Iterable[Evaluation],
                  feedback_many: Callable[[Collection[str]], dict[str, str]],
                  labels: Labels) -> Iterator[Evaluation]:
    """The evaluations, as they come, each labelled by the outcome a user recorded for its
    trace (``feedback_many``: trace id -> success | failure, the store's feedback table)
    unless a labels line names its trace id: ``FEEDBACK_BATCH`` lookups at a time, so the
    store is asked once per batch, never for the whole input at once."""
    batch: list[Evaluation] = []

    def labelled() -> list[Evaluation]:
        ids = [ev.trace_id for ev in batch if ev.trace_id not in labels.by_trace]
        for trace_id, outcome in feedback_many(ids).items() if ids else ():
            labels.by_trace[trace_id] = outcome == "success"
        return batch

    for ev in evaluations:
        batch.append(ev)
        if len(batch) == FEEDBACK_BATCH:
            yield from labelled()
            batch = []
    yield from labelled()


@dataclass
class TrainingRows:
    """What ``rows_from`` made of the runs: a row per labelled run, and the runs left out."""

    rows: list[Row] = field(default_factory=list)
    unlabelled: int = 0  # runs without a label (or whose evaluation failed)
    # labelled runs whose features could not be computed: "trace <id>: <exception>", in order
    unreadable: list[str] = field(default_factory=list)


def rows_from(evaluations: Iterable[Evaluation], labels: Labels) -> TrainingRows:
    """A row per labelled run. A run whose features raise is left out and named: serve's
    predictor gives such a run no prediction (``Evaluator._predict``), so training leaves it
    out too rather than stopping on it with a traceback."""
    out = TrainingRows()
    for ev in evaluations:
        label = labels.of(ev)
        if label is None or ev.error is not None:
            out.unlabelled += 1
            continue
        try:
            out.rows.append(row(ev, label))
        except Exception as e:  # the run's content; the other runs still train
            out.unreadable.append(f"trace {ev.trace_id}: {type(e).__name__}: {e}")
    return out


def row(ev: Evaluation, label: bool) -> Row:
    t = ev.trajectory
    return Row(features(ev), label, t.task_id or t.trace_id, t.source, run_text(ev),
               agent_key(t))
