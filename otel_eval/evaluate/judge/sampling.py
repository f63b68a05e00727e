"""Which traces the judge reads: a rate per agent, decided by trace id hash (so a re-opened
trace gets the same decision), and always the traces with serious deterministic findings;
the same rule for completed sessions (``session_sampled``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

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


def session_sampled(record: Mapping[str, Any], config: SamplingConfig) -> bool:
    """The trace rule applied to a completed session: its findings' severities, its agent's
    rate, a hash of the session id (the same session, the same choice)."""
    findings = [f for f in record.get("findings") or () if isinstance(f, Mapping)]
    if any(f.get("severity") in config.always_severities for f in findings):
        return True
    rate = config.rate_by_agent.get(str(record.get("agent") or ""), config.rate)
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(str(record.get("session_id")).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate
