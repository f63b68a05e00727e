"""The agent of a run that never ended, on the conformance corpus (``hung``): every stack's
killed run, replayed through a real ``Service`` after the same service's clean run, is
evaluated (and counted as non-terminated) as the stack's agent, not ``unknown``; and every
simulated hung run (root and agent spans dropped) of every stack gets the agent whenever the
stack's completed runs name it, and stays unknown, never a wrong name, when they do not."""

from __future__ import annotations

from pathlib import Path

from conformance import corpus, hung
from conformance.replay import replay
from support.harness import running_service


def _named(stack: str) -> bool:
    """Whether the stack's completed runs name its agent (llamaindex's never do)."""
    return corpus.expectation(stack, "clean")["agent"] == corpus.stacks()[stack]["agent"]


def _agent_known_wrong(stack: str) -> bool:
    """Whether the agent of the stack's completed runs is known wrong today (expected.yaml's
    known_wrong): what a history learns from them is then no reference for a hung run."""
    return "agent" in corpus.known_wrong_checks(stack, "clean")


def test_a_killed_run_is_counted_for_the_agent_of_the_services_completed_runs(
        tmp_path: Path) -> None:
    stacks = [s for s in corpus.stacks() if not _agent_known_wrong(s)
              and corpus.recording_path(s, hung.KILLED).is_file()]  # beeai: unsupported
    with running_service(tmp_path) as h:
        idle = h.svc.config.assembly.idle_timeout_s + 1
        for stack in stacks:  # what each service ran before: one clean run
            replay(h, corpus.recording(stack, "clean"))
        h.release(after_s=idle)
        killed = {}
        for stack in stacks:
            rec = corpus.recording(stack, hung.KILLED)
            replay(h, rec)
            killed[stack] = rec
        h.release(after_s=idle)
        stored = {(e["service"], e["status"]): e for e in h.svc.store.latest(1000)}
        for stack in stacks:
            service = f"conformance-{stack}"
            ev = stored[(service, "incomplete")]
            agent = corpus.stacks()[stack]["agent"] if _named(stack) else None
            assert (ev["agent"], ev["agent_source"] != "unknown") == (agent, bool(agent)), stack
            counted = h.sample("otel_eval_traces_non_terminated_total", service=service,
                               agent=agent or "unknown")
            assert counted == 1, stack


def test_every_simulated_hung_run_gets_the_agent_when_completed_runs_name_it() -> None:
    with_history = hung.agents_of_hung_runs(history=True)
    for stack, (right, total, sources) in with_history.items():
        if _agent_known_wrong(stack):
            continue
        if _named(stack):
            assert right == total, (stack, sources)
            assert set(sources) <= {"child_span", "inferred_history"}, stack
        else:
            assert (right, sources) == (0, ["unknown"]), stack  # unknown, never a guess
