"""A log line per kind of event at most every ``interval_s``: what a flood of bad input (a
topic of records that are not OTLP) would otherwise write to stderr once per record. The
events are counted by their metric either way; the log says one, then, at the next line it
lets through, how many it left out meanwhile. Time is injected (``clock``).
Thread-safe: the admin endpoint calls one from each connection's thread."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable

# Seconds between two lines of one bug hit over and over (``bug_line``).
BUG_LOG_INTERVAL_S = 10.0


class LogLimiter:
    def __init__(self, interval_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval_s = interval_s
        self._clock = clock
        self._next = -float("inf")  # when the next line may be written
        self._left_out = 0  # events not logged since the last line
        self._lines = 0  # lines let through
        self._lock = threading.Lock()  # uncontended but for the admin endpoint's threads

    def allow(self) -> int | None:
        """None: leave this event out of the log. Else log it, with the number returned:
        the events left out since the last line (0: none)."""
        line = self.take()
        return None if line is None else line[0]

    def take(self) -> tuple[int, bool] | None:
        """``allow``, with whether the line is the first this limiter lets through."""
        with self._lock:
            now = self._clock()
            if now < self._next:
                self._left_out += 1
                return None
            left_out, self._left_out = self._left_out, 0
            self._next = now + self._interval_s
            self._lines += 1
            return left_out, self._lines == 1

    @staticmethod
    def since(left_out: int, what: str) -> str:
        """The suffix of a line after ``left_out`` events were left out ("" after none)."""
        return f" ({left_out} more {what} not logged since the last)" if left_out else ""


def failed_line(limiter: LogLimiter, logger: logging.Logger, what: str, *args: object) -> None:
    """In an ``except`` block: a per-trace failure's warning ``what % args``, unless
    ``limiter`` leaves it out (``limited_line``); the traceback only at DEBUG (not a thousand
    frames per trace)."""
    limited_line(limiter, logger, what, *args, counted="evaluation failures",
                 exc_info=sys.exc_info()[1], stacklevel=3)


def limited_line(limiter: LogLimiter, logger: logging.Logger, what: str, *args: object,
                 counted: str, level: int = logging.WARNING,
                 exc_info: BaseException | None = None, stacklevel: int = 2) -> None:
    """``what % args`` at ``level``, unless ``limiter`` leaves it out; a line let through
    names how many ``counted`` it left out since the last (``exc_info``'s traceback only at
    DEBUG). The record names the caller's line (``stacklevel``), not this module's."""
    left_out = limiter.allow()
    if left_out is not None:
        logger.log(level, what + "%s", *args, LogLimiter.since(left_out, counted),
                   exc_info=exc_info if logger.isEnabledFor(logging.DEBUG) else None,
                   stacklevel=stacklevel)


def bug_line(limiter: LogLimiter, logger: logging.Logger, what: str, *args: object,
             counted: str) -> None:
    """In an ``except`` block: a bug's ERROR line ``what % args``, unless ``limiter`` leaves
    it out; the traceback with the first line (what to fix), then only at DEBUG: the same
    bug hit by every trace or request is one traceback, then a count every interval."""
    line = limiter.take()
    if line is not None:
        left_out, first = line
        logger.error(what + "%s", *args, LogLimiter.since(left_out, counted),
                     exc_info=first or logger.isEnabledFor(logging.DEBUG), stacklevel=2)
