"""The shapes every long-running part of ``serve`` takes (the Collector's Start / Shutdown).

    Component:      start()                 begin work (listen, spawn the thread or task)
                    shutdown(deadline_s)    stop within the deadline: stop taking work, drain
                                            what was taken, release resources; idempotent
    Sink:           export(trace, evaluation), pass_on(trace)   what follows the store
    SinkComponent:  both: a sink the service starts and stops

Each optional part has a ``build(config, deps)`` next to its code returning one of these, or
None when its config leaves it off; ``otel_eval.app.service`` iterates the list. Async parts
(Kafka consumer and publishers) are ``AsyncComponent``s run on the service's loop by ``OnLoop``.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

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

    def export(self, trace: Trace, evaluation: Evaluation) -> None: ...

    def pass_on(self, trace: Trace) -> None:
        """A trace that gets no evaluation because it is no agent run (``not_a_run``): a sink
        in the trace path passes its spans on; the others do nothing."""


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
