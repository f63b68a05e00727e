"""Retry back-off, one schedule for every loop that waits before trying again: the result
exporters (``outputs.sender``), the judge client, the worker pool's restarts and the store's
write retries (``assemble.store_health``).

    attempt n (0-based) -> initial_s * multiplier**n, capped at max_s -> times a jitter factor
                           drawn from [1 - jitter, 1] -> unless a server's hint says otherwise

as the collector's ``retry_on_failure`` (``initial_interval``, ``max_interval``,
``randomization_factor``) and the OTLP SDK exporters do. Jitter spreads the retries of
replicas that failed together; a single writer needs none (``jitter=0``). A server's hint
(gRPC ``RetryInfo``, HTTP ``Retry-After``) replaces the schedule: the server knows when it
will take the call. ``within`` says whether waiting still fits a deadline, so a loop gives up
(or stops for shutdown) instead of sleeping past it.

Pure: no clock and no sleeping here; the loops own their clocks (injected in tests).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    initial_s: float  # first delay, seconds (0: retry at once)
    max_s: float  # largest delay from the schedule, seconds (a hint may be longer)
    multiplier: float = 2.0  # growth per attempt
    jitter: float = 0.0  # fraction taken off at random: 0.5 draws from [0.5, 1] x delay
    rng: Callable[[], float] = random.random  # [0, 1); injected by tests

    def __post_init__(self) -> None:
        if min(self.initial_s, self.max_s) < 0 or self.multiplier < 1 or not (
                0 <= self.jitter <= 1):
            raise ValueError(f"invalid back-off {self!r}: need initial_s, max_s >= 0, "
                             "multiplier >= 1, 0 <= jitter <= 1")

    def delay_s(self, attempt: int, hint_s: float | None = None) -> float:
        """Seconds to wait before retry ``attempt + 1`` (``attempt`` counts failures so far,
        from 0); ``hint_s``, when the server gave one, instead."""
        if hint_s is not None:
            return max(0.0, hint_s)
        delay = min(self.initial_s * self.multiplier ** min(attempt, 64), self.max_s)
        return delay * (1.0 - self.jitter * self.rng()) if self.jitter else delay

    @staticmethod
    def within(now: float, delay_s: float, deadline: float) -> bool:
        """Waiting ``delay_s`` from ``now`` ends by ``deadline`` (same clock)."""
        return now + delay_s <= deadline
