"""The one lifecycle of every long-running part (the Collector's Start / Shutdown(ctx)).

    Component:  start()                 begin work (listen, spawn the thread or task)
                shutdown(deadline_s)    stop within the deadline: stop taking work, drain
                                        what was taken, release resources; idempotent

Receivers, the engine, the judge stage, the issues job, senders, the admin server and the
event loop implement it directly; async stages (Kafka consumer and publishers) run on the
service's loop through ``OnLoop`` (both in ``otel_eval.base.component``, where the optional
parts' builders see them). ``Lifecycle`` starts parts in the order they were added
and shuts them down in reverse, each given what is left of one overall deadline; a part that
fails to stop is logged and the rest still stop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from otel_eval.base.component import AsyncComponent, Component, OnLoop
from otel_eval.base.configcheck import ConfigError, StartupError, validate

__all__ = ["AsyncComponent", "Component", "ForcedExit", "Lifecycle", "OnLoop",
           "ServiceConfig", "Step"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceConfig:
    # Seconds serve has to stop after SIGTERM or SIGINT: the receivers stop, the runs that
    # ended are evaluated and stored, the judge drains, exporters flush, each part with what
    # is left of it (past it the rest is skipped; runs in flight stay in the spool). Keep it
    # below the supervisor's kill timeout (Kubernetes terminationGracePeriodSeconds, from
    # which the Helm chart sets it; `docker run --stop-timeout`, Docker's 10 s otherwise;
    # systemd TimeoutStopSec). At least 1.
    shutdown_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        validate(self, minimum={"shutdown_timeout_s": 1.0}, finite=["shutdown_timeout_s"])


class ForcedExit(SystemExit):
    """A second signal: exit now, without draining (``Service.run_until_signal``)."""


class Step:
    """A part of the service's startup that is not a long-running part itself (replaying the
    spool, closing the store): plain callables in the same ordered lifecycle."""

    def __init__(self, start: Callable[[], None] | None = None,
                 shutdown: Callable[[float], None] | None = None) -> None:
        self._start, self._shutdown = start, shutdown

    def start(self) -> None:
        if self._start is not None:
            self._start()

    def shutdown(self, deadline_s: float) -> None:
        if self._shutdown is not None:
            self._shutdown(deadline_s)


class Lifecycle:
    """Start in order, shut down in reverse with the remaining deadline."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._parts: list[tuple[str, Component, bool]] = []
        self._started: list[tuple[str, Component]] = []

    def add(self, name: str, part: Component, *, start: bool = True) -> None:
        """``start=False``: not started at this place (a later step starts it, or tests drive
        it by hand), still shut down at it."""
        self._parts.append((name, part, start))

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self._parts]

    def start(self) -> None:
        """Start every part in order; if one fails, stop those started (reverse) and raise;
        a ``ForcedExit`` (a second signal) goes through at once."""
        for name, part, start in self._parts:
            try:
                if start:
                    part.start()
            except ForcedExit:  # no stop of what started: exit as a kill would (nothing
                raise           # acknowledged is lost: the spool replays it)
            except BaseException as e:
                # a refusal naming the file or setting is said once, by the caller
                if not isinstance(e, StartupError | ConfigError):
                    log.error("%s failed to start; stopping what started", name)
                self.shutdown(10.0)
                raise
            self._started.append((name, part))

    def shutdown(self, deadline_s: float) -> list[str]:
        """Shut down what started, last first; returns the names of parts that failed."""
        end = self.clock() + deadline_s
        failed = []
        while self._started:
            name, part = self._started.pop()
            try:
                part.shutdown(max(0.0, end - self.clock()))
            except Exception:  # the lifecycle boundary: log, keep stopping the rest
                log.exception("%s failed to shut down", name)
                failed.append(name)
        return failed
