"""Rolling-window limits on judge calls: requests/min, tokens/min, USD/hour.

Pure bookkeeping over an injected clock's readings: callers pass ``now`` and get back how long
to wait, so tests drive time by hand and the client decides how to wait.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable


class RateLimiter:
    """Requests and tokens started in the last 60 s; 0 disables a limit."""

    WINDOW_S = 60.0

    def __init__(self, requests_per_min: int, tokens_per_min: int) -> None:
        self.rpm = requests_per_min
        self.tpm = tokens_per_min
        self._events: deque[tuple[float, int, int]] = deque()  # (time, requests, tokens)

    def _prune(self, now: float) -> None:
        while self._events and self._events[0][0] <= now - self.WINDOW_S:
            self._events.popleft()

    def reserve(self, now: float, tokens: int) -> float:
        """0.0 and the request is counted, or the seconds to wait before asking again."""
        self._prune(now)
        if self.rpm and sum(e[1] for e in self._events) >= self.rpm:
            return self._until(now, lambda used: used[0] < self.rpm)
        if self.tpm and self._events:
            used = sum(e[2] for e in self._events)
            if used + tokens > self.tpm:  # a single call over the limit passes an empty window
                return self._until(now, lambda u: u[1] + tokens <= self.tpm or u == (0, 0))
        self._events.append((now, 1, tokens))
        return 0.0

    def add_tokens(self, now: float, tokens: int) -> None:
        """Count tokens known only after a call (its completion)."""
        if tokens > 0:
            self._events.append((now, 0, tokens))

    def _until(self, now: float, fits: Callable[[tuple[int, int]], bool]) -> float:
        """Seconds until enough of the oldest events leave the window for ``fits``."""
        req = sum(e[1] for e in self._events)
        tok = sum(e[2] for e in self._events)
        for t, r, k in self._events:
            req, tok = req - r, tok - k
            if fits((req, tok)):
                return max(t + self.WINDOW_S - now, 1e-3)
        return self.WINDOW_S


class CostBudget:
    """USD spent in the last hour; ``exceeded(now)`` once it reaches the limit (0 = none).
    Calls already in flight when the limit is reached still complete, so the budget can be
    overshot by at most ``max_concurrency`` calls."""

    WINDOW_S = 3600.0

    def __init__(self, max_usd_per_hour: float) -> None:
        self.limit = max_usd_per_hour
        self._spend: deque[tuple[float, float]] = deque()

    def spent(self, now: float) -> float:
        while self._spend and self._spend[0][0] <= now - self.WINDOW_S:
            self._spend.popleft()
        return sum(c for _, c in self._spend)

    def add(self, now: float, cost_usd: float) -> None:
        if cost_usd > 0:
            self._spend.append((now, cost_usd))

    def exceeded(self, now: float) -> bool:
        return self.limit > 0 and self.spent(now) >= self.limit
