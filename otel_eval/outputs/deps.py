"""``Deps``: what ``serve`` hands every optional part's ``build(config, deps)``.

The builders sit next to their parts (``outputs.events``, ``outputs.forward``,
``outputs.kafka``, ``outputs.issues.job``, ``evaluate.judge``, ``evaluate.calibration``,
``receive.kafka``); each takes its own config section and these shared handles, and returns the
part or None when its config leaves it off (``evaluate.calibration``: always on). Defined
here, on the lowest floor that sees both the store and the metrics, so every builder can
import it downward.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from prometheus_client import CollectorRegistry

from otel_eval.base.aio import LoopThread
from otel_eval.base.component import Held
from otel_eval.base.results import Evaluation
from otel_eval.store import EvaluationStore
from otel_eval.store.base import SessionLimits
from otel_eval.telemetry.metrics import Metrics


class JudgeEvents(Protocol):
    """Where a stored judgement goes out as events (``outputs.events.EvaluationEvents``)."""

    def export_judge(self, evaluation: Evaluation, root: str, low_score: float,
                     held: tuple[Held, ...] = ()) -> None: ...


class JudgedResults(Protocol):
    """Where a stored judgement goes out again as the whole result (``outputs.kafka``'s
    results topic: the v1 object, now with its ``judge``)."""

    # ``held``: taken until the record is delivered or dropped for good (the judge's
    # journal entry stays until then)
    def publish(self, evaluation: Evaluation, held: Held | None = None) -> None: ...

    def publish_stored(self, body: dict[str, Any], evaluated_at_ns: int, row_version: int = 0,
                       held: Held | None = None) -> None: ...

    def ordered(self) -> AbstractContextManager[None]:
        """Held from reading the stored row back to handing it over."""
        ...


@dataclass(frozen=True)
class Deps:
    metrics: Metrics              # the service's self-metrics (verbs per subsystem)
    registry: CollectorRegistry   # where collectors of their own register (the issues job)
    store: EvaluationStore        # the evaluations store, not opened yet at build time
    store_path: str               # store.path: local SQLite files (the rubric cache)
    store_target: str             # store.target: the SQLite file or the PostgreSQL URL
    loop: LoopThread | None       # the async stages' loop; None: no judge and no Kafka
    events: JudgeEvents | None = None  # the events sink, when on (the judge writes to it)
    # the Kafka results topic, when on (the judge publishes each stored judgement to it)
    results: JudgedResults | None = None
    # store.session: the limits of every PostgreSQL session (the issues catalogue's too);
    # None: the defaults
    store_session: SessionLimits | None = None
    # the service's one monotonic time (``Service(clock=...)``, seconds), for the parts that
    # time themselves on it (the judge stage: its queue, its judge's budget and rate limits)
    clock: Callable[[], float] = time.monotonic
