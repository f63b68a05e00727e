"""The judge at the session level, inside ``serve``: a completed conversation is judged once,
in one call through litellm against the scripted loopback LLM, and the result lands on that
completion's stored record (``store.put_session_judge``), under the trace judges' cost
controls; the write path never lands on a completion other than the one judged."""

from __future__ import annotations

import json
import time
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from judge_fake_llm import FakeLLM, Reply, good
from judge_fixtures import judged_service
from prometheus_client import CollectorRegistry
from sessions.conversations import call, scripted
from support.poll import poll

from otel_eval.app.config import Config
from otel_eval.app.service import Service
from otel_eval.base.model import Trace
from otel_eval.decode.otlp import decode_request
from otel_eval.decode.otlp_json import request_from_json
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.store import EvaluationStore, Store
from otel_eval.store.postgresql import PostgresStore
from otel_eval.telemetry.metrics import Metrics

KEY = "gen_ai.conversation.id"
SECRET = "sk-" + "b" * 40  # an OpenAI-style key in a user message: redacted before sending


def _turns(n: int, tag: str) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(f"{tag} request number {i}, my key is {SECRET}",
             [call("get_reservation_details", {"reservation_id": f"R{i}"}, f"c{i}"),
              {"role": "assistant", "content": f"{tag} answer {i}"}]) for i in range(n)]


def _store_turns(store: EvaluationStore, conversations: dict[str, int]) -> None:
    """Each conversation's turns evaluated and stored, as the engine stores them."""
    evaluator = Evaluator(Config())
    for conversation, n in conversations.items():
        for trace_id, body in scripted(conversation, KEY, _turns(n, conversation)):
            spans = decode_request(request_from_json(json.dumps(body))).spans
            evaluation = evaluator.evaluate(Trace(trace_id, spans, "complete"))
            assert evaluation is not None
            store.put_many([evaluation])


def _later() -> float:
    return time.time() + SessionsConfig().idle_timeout_s + 1


def _session_reply(body: dict[str, Any]) -> Reply:
    assert body["response_format"]["json_schema"]["name"] == "session_grade", body
    return good({"critique": "Turn 2 asked again what turn 1 had answered.", "score": 0.25},
                prompt_tokens=2000, completion_tokens=60)


def _serve(tmp_path: Path, llm: FakeLLM, **changes: Any) -> AbstractContextManager[Service]:
    return judged_service(tmp_path, llm.api_base, **changes)


def _key(store: EvaluationStore, session_id: str) -> str:
    """The store's key of the conversation (its turns all of one service)."""
    [key] = store.session_keys(session_id, 2) or [session_id]
    return key


def _judge(svc: Service, session_id: str) -> dict[str, Any] | None:
    row = svc.store.session_record(_key(svc.store, session_id))
    return (row.record or {}).get("judge") if row is not None else None


def _sample(svc: Service, name: str, **labels: str) -> float:
    return svc.metrics.registry.get_sample_value(name, labels) or 0.0


def test_each_completed_session_is_judged_once_onto_its_record(
        tmp_path: Path, llm: FakeLLM) -> None:
    llm.route = _session_reply
    with _serve(tmp_path, llm) as svc:
        _store_turns(svc.store, {"conv-a": 3, "conv-b": 2})
        assert svc.session_job.tick(_later()) == 2
        judged = poll(lambda: all(_judge(svc, s) for s in ("conv-a", "conv-b")),
                      "both sessions judged")
        assert judged
        assert svc.session_job.tick(_later()) == 0  # complete: never judged again
        judge = _judge(svc, "conv-a")
        assert judge is not None
        assert judge["overall"]["status"] == "ok"
        assert judge["overall"]["session_score"] == 0.25
        assert judge["overall"]["passed"] is False  # below judge.tau_task 0.5
        entry = judge["judges"]["session"]
        assert entry["calls"] == 1 and entry["tokens"] == {"input": 2000, "output": 60}
        assert entry["critiques"][0]["text"].startswith("Turn 2 asked again")
        assert judge["totals"]["cost_usd"] > 0  # litellm's price of gpt-4o-mini
        # the API shows it with the session's record
        served = svc.sessions.get("conv-a")
        assert served is not None and served["judge"] == judge
        assert served["status"] == "complete" and served["turns"] == 3
        cost = _sample(svc, "otel_eval_judge_cost_usd_total", judge="session")
        spent = sum(j["totals"]["cost_usd"] for j in (judge, _judge(svc, "conv-b")) if j)
        assert cost == pytest.approx(spent)
    # one call per session, the turns in order as a transcript, the secret redacted
    assert len(llm.requests) == 2
    prompt = next(r["messages"][-1]["content"] for r in llm.requests
                  if "conv-a request number 0" in r["messages"][-1]["content"])
    order = [prompt.index(f"conv-a request number {i}") for i in range(3)]
    assert order == sorted(order) and "Turn 3" in prompt and "Turn 4" not in prompt
    assert "get_reservation_details" in prompt and "conv-a answer 2" in prompt
    assert SECRET not in prompt and "conv-b" not in prompt


def test_a_one_turn_session_is_left_to_the_trace_judge(tmp_path: Path, llm: FakeLLM) -> None:
    """A conversation of one turn is its one run, which the trace judge already scores: a
    session call too doubled the judge's cost for stacks that make a conversation id per
    run (Agno, ADK, pydantic-ai). Skipped ``one_turn``, stored and counted; a conversation
    of two turns is judged; with the trace judge off, one turn is judged too."""
    llm.route = _session_reply
    with _serve(tmp_path, llm) as svc:
        _store_turns(svc.store, {"conv-a": 1, "conv-b": 2})
        assert svc.session_job.tick(_later()) == 2
        poll(lambda: _judge(svc, "conv-a") and _judge(svc, "conv-b"), "both sessions marked")
        assert _judge(svc, "conv-a")["overall"] == {"status": "skipped", "reason": "one_turn"}
        assert _judge(svc, "conv-b")["overall"]["status"] == "ok"
        assert _sample(svc, "otel_eval_judge_skipped_total", reason="one_turn") == 1
    assert len(llm.requests) == 1
    with _serve(tmp_path / "sessions-only", llm, **{"judge.enabled": ["session"]}) as svc:
        _store_turns(svc.store, {"conv-c": 1})
        assert svc.session_job.tick(_later()) == 1
        judged = poll(lambda: _judge(svc, "conv-c"), "the one-turn session judged")
        assert judged["overall"]["status"] == "ok"
    assert len(llm.requests) == 2


def test_sessions_share_the_judges_budget_and_sampling(tmp_path: Path, llm: FakeLLM) -> None:
    """The hourly cost budget the trace judges spend stops session calls too: the first
    session's call spends past it, the next session is skipped ``over_budget`` (no call)."""
    llm.route = _session_reply
    with _serve(tmp_path, llm, **{"judge.max_cost_usd_per_hour": 1e-6,
                                  "sessions.max_completions_per_check": 1}) as svc:
        _store_turns(svc.store, {"conv-a": 2, "conv-b": 2})
        assert svc.session_job.tick(_later()) == 1
        first = poll(lambda: _judge(svc, "conv-a") or _judge(svc, "conv-b"),
                     "the first session judged")
        assert first["overall"]["status"] == "ok"
        assert svc.session_job.tick(_later()) == 1
        second = poll(lambda: [j for s in ("conv-a", "conv-b")
                               if (j := _judge(svc, s)) is not None and j is not first
                               and j.get("overall", {}).get("status") == "skipped"],
                      "the second session skipped")
        assert second[0]["overall"]["reason"] == "over_budget"
        assert _sample(svc, "otel_eval_judge_skipped_total", reason="over_budget") == 1
    assert len(llm.requests) == 1
    with _serve(tmp_path / "sampled", llm, **{"judge.sampling.rate": 0.0}) as svc:
        _store_turns(svc.store, {"conv-c": 2})  # no error finding: sampled out at rate 0
        assert svc.session_job.tick(_later()) == 1
        skipped = poll(lambda: _judge(svc, "conv-c"), "the session marked sampled out")
        assert skipped["overall"] == {"status": "skipped", "reason": "sampled_out"}
    assert len(llm.requests) == 1


async def _flushed() -> bool:
    """Run on the service's loop: the submits scheduled on it before have run."""
    return True


def test_sessions_waiting_for_the_judge_are_bounded_in_bytes(tmp_path: Path,
                                                            llm: FakeLLM) -> None:
    """A session handed to the judge holds its turns (up to sessions.max_turns_chars of JSON)
    until its call ends: as traces, past judge.max_queue_bytes of them waiting the next is
    skipped ``queue_full`` (one alone is always taken). Bounded by judge.queue_size alone,
    1,000 sessions could hold 64 GiB."""
    llm.route = lambda body: Reply(hang=True)  # the first call holds until released
    with _serve(tmp_path, llm, **{"judge.max_queue_bytes": 1000}) as svc:
        try:
            _store_turns(svc.store, {"conv-a": 2, "conv-b": 2, "conv-c": 2})  # kB of JSON each
            assert svc.session_job.tick(_later()) == 3
            assert svc.loop is not None and svc.loop.run(_flushed(), timeout_s=30)
            assert _sample(svc, "otel_eval_judge_skipped_total", reason="queue_full") == 2
            poll(lambda: sum((_judge(svc, s) or {}).get("overall", {}).get("reason")
                             == "queue_full" for s in ("conv-a", "conv-b", "conv-c")) == 2,
                 "the sessions past the bound stored as skipped")
        finally:
            llm.released.set()
    assert len(llm.requests) == 1


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_the_session_judge_writes_onto_the_completion_it_judged(
        tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> None:
    store: EvaluationStore = (
        PostgresStore(request.getfixturevalue("postgresql_url")).open()
        if backend == "postgresql" else Store(str(tmp_path / "r.db")))
    session_id = f"conv-w-{tmp_path.name}"
    try:
        _store_turns(store, {session_id: 2})
        assert SessionJob(store, SessionsConfig(), Metrics(CollectorRegistry())).tick(
            _later()) == 1
        key = _key(store, session_id)
        assert not store.put_session_judge(key, 2, {"n": 2})  # not completed twice
        assert not store.put_session_judge("no-such-session", 1, {"n": 1})
        assert not store.put_session_judge(session_id, 1, {"n": 1})  # the id alone is no key
        assert store.put_session_judge(key, 1, {"n": 1})
        row = store.session_record(key)
        assert row is not None and row.record is not None
        assert row.record["judge"] == {"n": 1} and row.record["turns"] == 2
        assert row.state == "complete" and row.completions == 1
        # a late turn re-opens it: the judgement of the first completion lands nowhere
        _store_turns(store, {session_id: 3})
        assert not store.put_session_judge(key, 1, {"n": 3})
    finally:
        store.close()


def test_the_judge_draws_each_services_session_of_one_id_on_its_own() -> None:
    """A session is a conversation id within one service: at a sampling rate, two services'
    conversations of one id are two draws. Before, the hash was of the id alone, so a sender
    reusing another service's ids shared its sessions' sampling decisions."""
    from otel_eval.evaluate.judge.config import SamplingConfig
    from otel_eval.evaluate.judge.sampling import session_sampled

    half = SamplingConfig(rate=0.5, always_severities=())
    drawn = [(session_sampled({"session_id": str(n), "service": "shop"}, half),
              session_sampled({"session_id": str(n), "service": "attacker"}, half))
             for n in range(64)]
    assert any(a != b for a, b in drawn)
    # one session, one draw: the same record is always drawn the same way
    assert drawn == [(session_sampled({"session_id": str(n), "service": "shop"}, half),
                      session_sampled({"session_id": str(n), "service": "attacker"}, half))
                     for n in range(64)]


def test_a_session_judgement_a_killed_process_held_is_marked_restart(
        tmp_path: Path, llm: FakeLLM) -> None:
    """A session judgement under way when the process died (kill -9, OOM: its provider
    hanging makes each last minutes) left its completion with no ``judge`` at all, for good
    (a completion is judged once): the next start now stores it skipped ``restart`` and
    counts it, as it does a trace's."""
    from judge_fixtures import config

    from otel_eval.base.aio import LoopThread
    from otel_eval.evaluate.judge.stage import JudgeStage

    llm.route = lambda body: Reply(hang=True)  # the call never ends: then the "kill"
    path = str(tmp_path / "r.db")
    store = Store(path)
    dead_loop, loop = LoopThread(), LoopThread()
    dead_loop.start()
    dead = JudgeStage(config(llm.api_base, timeout_s=600.0, max_retries=0), dead_loop, store,
                      Metrics(CollectorRegistry()), cache_path=path)
    registry = CollectorRegistry()
    restarted = JudgeStage(config(llm.api_base), loop, store, Metrics(registry),
                           cache_path=path)
    try:
        dead.start()
        _store_turns(store, {"conv-k": 2})
        job = SessionJob(store, SessionsConfig(), Metrics(CollectorRegistry()), judging=dead)
        assert job.tick(_later()) == 1
        assert llm.arrived.wait(30)  # being judged when the process "dies"
        key = _key(store, "conv-k")
        assert dead.loop.run(_flushed(), timeout_s=30)
        dead._writer.call(lambda: True).result(30)  # its writes so far are made
        loop.start()  # nothing of it is stored; a new process starts on the same files
        restarted.start()
        row = store.session_record(key)
        assert row is not None and row.record is not None
        assert row.record.get("judge") == {"judges": {},
                                           "overall": {"status": "skipped", "reason": "restart"}}
        assert registry.get_sample_value("otel_eval_judge_skipped_total",
                                         {"reason": "restart"}) == 1.0
    finally:
        llm.released.set()
        restarted.shutdown(5.0)
        dead.shutdown(5.0)
        loop.stop()
        dead_loop.stop()
        store.close()
