"""The one hand-driven clock of the tests: code under test takes ``clock: Callable[[], float]``
(and, for back-offs, an async ``sleep``); tests advance ``now`` instead of waiting."""

from __future__ import annotations


class ManualClock:
    """``clock()`` is ``now``; ``advance(s)`` moves it; ``await sleep(s)`` records the delay
    in ``sleeps`` and advances time instead of waiting."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
