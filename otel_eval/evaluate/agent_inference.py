"""Stage: evaluate (part). The agent of a run that never said it: from the service's history.

A run that never ended (hung, killed) never exports its root or agent span, and under most
instrumentations that span alone names the agent. When nothing that did arrive names it
(``Trajectory.agent_source == "unknown"``), the agent is read from the same service's
completed runs, the agent they were evaluated as:

    completed run, agent named by a span ─► fingerprints(run) ─► history.remember_agents
    run with no agent ─► fingerprints(run) ─► history.recall_agent ─► agent, "inferred_history"

A run's fingerprints, strongest first (each a hash, so span content is never a key):

    system:  the system instructions of its first LLM call
    tools:   the set of tools offered to its LLM calls
    steps:   the set of its LLM and tool span names (``chat gpt-4o``, ``execute_tool search``)
    service  (always) the service itself: a service with one agent is that agent

``recall_agent`` answers the agent of the first fingerprint that exactly one agent of the
service has shown (two agents sharing a fingerprint prove nothing), else None. The history
lives in the store (``EvaluationStore.remember_agents`` / ``recall_agent``): SQLite's file is
shared by its ``serve --workers`` processes, PostgreSQL's by the fleet. It is bounded there
(``store.base``: rows per service, services, age), so hostile service names cannot grow it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Protocol

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.conventions.messages import message_text, messages
from otel_eval.store.base import SERVICE_FINGERPRINT

__all__ = ["SERVICE_FINGERPRINT", "AgentHistory", "RecallOnce", "RememberInBatches",
           "fingerprints", "infer_agent", "learned"]

# Bytes of an LLM input parsed for its system message: beyond it the input is not read for
# one (a longer conversation still has the other fingerprints).
_MAX_INPUT_CHARS = 1_000_000
_SYSTEM_ROLES = ("system", "developer")
# Agent sources a completed run teaches the history from (not an inferred one: a guess does
# not vouch for another).
_NAMED = ("span", "child_span")


class AgentHistory(Protocol):
    """Where completed runs' agents are kept (both stores implement it)."""

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None: ...

    def remember_agents(self, runs: Sequence[tuple[str, str, Sequence[str]]]) -> object:
        """The store's answer (the rows its bounds deleted) is its callers' to count."""


class RecallOnce:
    """``history`` with each (service, fingerprints) recalled once: a batch of runs that no
    span names (an instrumentation that never names its agent) costs one store query per
    distinct kind of run, not one per run. One per batch (it keeps at most one answer per
    run of the batch, and does not see what the batch itself teaches the history)."""

    def __init__(self, history: AgentHistory) -> None:
        self._history = history
        self._answers: dict[tuple[str, tuple[str, ...]], str | None] = {}

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None:
        key = (service, tuple(fingerprints))
        if key not in self._answers:
            self._answers[key] = self._history.recall_agent(service, fingerprints)
        return self._answers[key]

    def remember_agents(self, runs: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        self._history.remember_agents(runs)


class RememberInBatches:
    """``history`` taught ``runs`` runs at a time, as ``serve`` teaches it a released batch:
    one store transaction per batch, not per run (the per-run one was ~1 % of ``eval``'s
    CPU on tau-bench). What is held back is written before any recall, so a recall still
    sees every run remembered before it. ``flush`` writes the rest."""

    def __init__(self, history: AgentHistory, runs: int = 256) -> None:
        self._history = history
        self._runs = runs
        self._held: list[tuple[str, str, Sequence[str]]] = []

    def recall_agent(self, service: str, fingerprints: Sequence[str]) -> str | None:
        self.flush()
        return self._history.recall_agent(service, fingerprints)

    def remember_agents(self, runs: Sequence[tuple[str, str, Sequence[str]]]) -> None:
        self._held += runs
        if len(self._held) >= self._runs:
            self.flush()

    def flush(self) -> None:
        if self._held:
            held, self._held = self._held, []
            self._history.remember_agents(held)


def _hash(kind: str, parts: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\x00")
    return f"{kind}:{digest.hexdigest()[:32]}"


def _system_text(t: Trajectory) -> str | None:
    for step in t.steps:
        if step.kind != "llm":
            continue
        raw = step.input_text
        if not raw or len(raw) > _MAX_INPUT_CHARS:
            return None
        for msg in messages(raw) or ():
            if isinstance(msg, dict) and msg.get("role") in _SYSTEM_ROLES:
                return message_text(msg)
        return None
    return None


def fingerprints(t: Trajectory) -> tuple[str, ...]:
    """The run's fingerprints, strongest first; the service one always last."""
    out = []
    system = _system_text(t)
    if system:
        out.append(_hash("system", [system]))
    if t.tools:
        out.append(_hash("tools", sorted(t.tools)))
    names = sorted({f"{s.kind} {s.name}" for s in t.steps
                    if s.kind in ("llm", "tool") and not s.rebuilt})
    if names:
        out.append(_hash("steps", names))
    out.append(SERVICE_FINGERPRINT)
    return tuple(out)


def infer_agent(t: Trajectory, history: AgentHistory) -> None:
    """Name the agent of a run that nothing named, from the service's history (in place)."""
    if t.agent_source != "unknown" or not t.service:
        return
    agent = history.recall_agent(t.service, fingerprints(t))
    if agent:
        t.agent, t.agent_source = agent, "inferred_history"


def learned(evaluations: Iterable[Evaluation]) -> list[tuple[str, str, tuple[str, ...]]]:
    """(service, agent, fingerprints) of the completed runs whose agent a span named."""
    out = []
    for ev in evaluations:
        t = ev.trajectory
        if (t.status == "complete" and t.agent_source in _NAMED and t.service and t.agent
                and ev.error is None):
            out.append((t.service, t.agent, fingerprints(t)))
    return out
