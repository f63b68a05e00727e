"""Which traces the judge reads: a rate per agent, decided by trace id hash (so a re-opened
trace gets the same decision), and always the traces with serious deterministic findings."""

from __future__ import annotations

import hashlib

from otel_eval.base.model import Evaluation
from otel_eval.evaluate.judge.config import SamplingConfig


def sampled(evaluation: Evaluation, config: SamplingConfig) -> bool:
    if any(f.severity in config.always_severities for f in evaluation.findings):
        return True
    agent = evaluation.trajectory.agent or ""
    rate = config.rate_by_agent.get(agent, config.rate)
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(evaluation.trace_id.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate
