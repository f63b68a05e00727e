"""``JudgeObserver``: how the judge reports calls, skips and scores to metrics (wired by the
service). Label values are bounded: judge names, statuses, skip reasons and dimensions come
from closed sets; no trace ids or free text."""

from __future__ import annotations

from typing import Literal, Protocol

SkipReason = Literal["queue_full", "sampled_out", "over_budget", "disabled", "shutdown",
                     "worker_error", "restart", "one_turn"]
# restart: queued (a session: being judged) when the process before this one died (kill -9,
# OOM) without judging it;
# one_turn: a session of one turn, whose run the trace judge already judges
SKIP_REASONS: tuple[SkipReason, ...] = ("queue_full", "sampled_out", "over_budget", "disabled",
                                        "shutdown", "worker_error", "restart", "one_turn")


class JudgeObserver(Protocol):
    def call(self, judge: str, status: str, input_tokens: int, output_tokens: int,
             cost_usd: float | None, latency_s: float) -> None:
        """One judge call finished (``judge``: step | trace | process | outcome | combined |
        rubric_generate | rubric_verify | session | issue_name | issue_merge; ``status``: a
        CallStatus; ``cost_usd`` None: unknown, no price for the model)."""

    def usage_implausible(self, judge: str, replies: int) -> None:
        """Replies whose reported token usage was implausible (not a whole number from 0 to
        twice the text's size) and was replaced by an estimate."""

    def skip(self, reason: SkipReason) -> None:
        """A trace was not judged."""

    def score(self, judge: str, dimension: str, value: float) -> None:
        """One score (per step / turn / trace) for the score histograms."""


class NoopObserver:
    def call(self, judge: str, status: str, input_tokens: int, output_tokens: int,
             cost_usd: float | None, latency_s: float) -> None:
        pass

    def usage_implausible(self, judge: str, replies: int) -> None:
        pass

    def skip(self, reason: SkipReason) -> None:
        pass

    def score(self, judge: str, dimension: str, value: float) -> None:
        pass
