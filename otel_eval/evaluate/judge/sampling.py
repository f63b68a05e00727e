"""Which traces the judge reads: a rate per agent, decided by trace id hash (so a re-opened
trace gets the same decision), and always the traces with serious deterministic findings;
the same rule for completed sessions (``session_sampled``)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from otel_eval.base.results import Evaluation
from otel_eval.evaluate.judge.config import SamplingConfig
from otel_eval.store.sessions import session_key


def _chosen(severities: list[Any], agent: str, key: str, config: SamplingConfig) -> bool:
    """The rule: always with a severity of ``always_severities``, else at the agent's rate,
    decided by a hash of ``key`` (the same trace or session, the same choice)."""
    if any(s in config.always_severities for s in severities):
        return True
    rate = config.rate_by_agent.get(agent, config.rate)
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 < rate


def sampled(evaluation: Evaluation, config: SamplingConfig) -> bool:
    return _chosen([f.severity for f in evaluation.findings],
                   evaluation.trajectory.agent or "", evaluation.trace_id, config)


def session_sampled(record: Mapping[str, Any], config: SamplingConfig) -> bool:
    """The trace rule applied to a completed session: its findings' severities, its agent's
    rate, a hash of the session's key (its conversation id within its service: two
    services' conversations of one id are two sessions, each drawn on its own)."""
    findings = [f for f in record.get("findings") or () if isinstance(f, Mapping)]
    service = record.get("service")
    key = session_key(service if isinstance(service, str) else None,
                      str(record.get("session_id")))
    return _chosen([f.get("severity") for f in findings], str(record.get("agent") or ""),
                   key, config)
