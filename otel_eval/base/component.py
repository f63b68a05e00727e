"""The shapes every long-running part of ``serve`` takes (the Collector's Start / Shutdown).

    Component:      start()                 begin work (listen, spawn the thread or task)
                    shutdown(deadline_s)    stop within the deadline: stop taking work, drain
                                            what was taken, release resources; idempotent
    Sink:           export(trace, evaluation), pass_on(trace)   what follows the store
    DeliveringSink: a sink whose queue holds what no store keeps (pass-through's spans, the
                    evaluation events, the results topic's records): it takes each trace's
                    ``Held`` and settles it once that is delivered or dropped for good
    SinkComponent:  both: a sink the service starts and stops

Each optional part has a ``build(config, deps)`` next to its code returning one of these, or
None when its config leaves it off; ``otel_eval.app.service`` iterates the list. Async parts
(Kafka consumer and publishers) are ``AsyncComponent``s run on the service's loop by ``OnLoop``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Literal, Protocol, runtime_checkable

from otel_eval.base.aio import LoopThread
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation

# Extra wait for a coroutine's result beyond the deadline it was given (loop hand-off).
_LOOP_SLACK_S = 5.0


@runtime_checkable
class Component(Protocol):
    def start(self) -> None: ...

    def shutdown(self, deadline_s: float) -> None: ...


class AsyncComponent(Protocol):
    async def start(self) -> None: ...

    async def shutdown(self, deadline_s: float) -> None: ...


class Sink(Protocol):
    """Where stored evaluations go next (events, pass-through, judge). Must not block."""

    name: str  # its ``sink`` label on otel_eval_sink_dropped_total (outputs.sender.SINK_NAMES)

    def items(self, trace: Trace, evaluation: Evaluation | None) -> int:
        """What ``export`` (``evaluation``) or ``pass_on`` (None) hands on for ``trace``, in
        the sink's unit (spans, log records, evaluations): what a failure of the call drops."""

    def export(self, trace: Trace, evaluation: Evaluation) -> None: ...

    def pass_on(self, trace: Trace) -> None:
        """A trace that gets no evaluation because it is no agent run (``not_a_run``), or
        holds only another sender's spans for a released run (``foreign_sender``), or came
        late or could not be stored: a sink in the trace path passes its spans on; the
        others do nothing."""


class Held:
    """A stored trace whose spool rows and waiters (Kafka offsets) wait for the delivering
    sinks: what such a sink has queued is in no store, so the trace stays replayable until
    the sink has delivered it or dropped it for good (a counted reason). A stop or a crash
    before then replays it, and the replay sends it again (at least once). Counted:
    finishing holds it while it runs the sinks, each sink that queues it ``take``s it; the
    last ``settle`` hands it to ``release`` (the engine's: spool delete, waiters), in
    batches. It keeps what the release needs, not the trace: a sender's queue holding it
    must not keep the trace's spans alive beside the request it encoded."""

    __slots__ = ("_count", "alone", "release", "revision", "trace_id", "waiters")
    _lock = threading.Lock()  # counts change on finishing's and the senders' threads

    def __init__(self, trace_id: str, revision: int, release: Callable[[list[Held]], None],
                 waiters: list[Callable[[], None]] | None = None, *,
                 alone: bool = False) -> None:
        """``waiters``: the trace's own list (read when released), if any; ``alone``: the
        trace holds nothing of its earlier revisions (only spans to pass on), so its release
        lets its own revision's spool rows go, not theirs (still in delivery)."""
        self.trace_id, self.revision, self.alone = trace_id, revision, alone
        self.waiters = waiters if waiters is not None else []
        self.release = release
        self._count = 1  # finishing's own, settled when it has run the sinks

    def take(self) -> None:
        with Held._lock:
            self._count += 1


def settle(held: Iterable[Held]) -> None:
    """Settle one take of each; those no one holds any more are released, a batch per
    ``release`` (one spool transaction for a sender's batch of traces)."""
    ready: dict[Callable[[list[Held]], None], list[Held]] = {}
    with Held._lock:
        for h in held:
            h._count -= 1
            if h._count == 0:  # by equality: each access to a bound method is a new object
                ready.setdefault(h.release, []).append(h)
    for batch in ready.values():
        batch[0].release(batch)


@runtime_checkable
class DeliveringSink(Protocol):
    """A sink whose queue holds what no store keeps: pass-through's spans (the user's
    telemetry), the evaluation events. Each call gets the trace's ``Held``; what the sink
    queues it ``take``s (``OtlpSender.submit``), settled once delivered or dropped for good.
    A trace the store already holds an evaluation of (a replay after a stop or a crash, a
    Kafka record delivered again) comes again, with the evaluation the store holds
    (``results.stored_evaluation``), or to ``pass_on`` when that cannot be read. ``delivers``
    marks such a sink (its methods are a ``Sink``'s, with the ``Held``)."""

    delivers: Literal[True]
    name: str

    def items(self, trace: Trace, evaluation: Evaluation | None) -> int: ...

    def export(self, trace: Trace, evaluation: Evaluation, held: Held | None = None) -> None: ...

    def pass_on(self, trace: Trace, held: Held | None = None) -> None: ...


@runtime_checkable
class Live(Protocol):
    """A part whose own thread or tasks may die while the service runs (a sink's sender, the
    judge's workers): ``healthy`` False once one has, read by the service's /healthz."""

    name: str

    @property
    def healthy(self) -> bool: ...


class SinkComponent(Component, Sink, Protocol):
    """A sink with a lifecycle: what a sink's ``build`` returns."""


class OnLoop:
    """An async component as a ``Component``: its coroutines run on the service's loop."""

    def __init__(self, part: AsyncComponent, loop: LoopThread, start_timeout_s: float = 60.0,
                 ) -> None:
        self.part = part
        self.loop = loop
        self.start_timeout_s = start_timeout_s

    def start(self) -> None:
        self.loop.run(self.part.start(), timeout_s=self.start_timeout_s)

    def shutdown(self, deadline_s: float) -> None:
        self.loop.run(self.part.shutdown(deadline_s), timeout_s=deadline_s + _LOOP_SLACK_S)

    def __getattr__(self, name: str) -> Any:  # a sink's export() and the rest pass through
        return getattr(self.part, name)
