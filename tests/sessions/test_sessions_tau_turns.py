"""A tau-bench run as a conversation (``eval --turns``, ``replay --turns``): a trace per
user message, tied by the run's conversation id; ``eval --format jsonl`` prints a session
record per run after the trace records, and a serve sent the same turns over OTLP gives the
same sessions from ``/v1/sessions/{id}``. Without ``--turns`` a run stays one trace."""

from __future__ import annotations

import io
import json
import re
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from support.harness import running_service

from otel_eval.app.cli import build_parser, cmd_eval, cmd_replay

RUNS = 4


@pytest.fixture(scope="module")
def runs_file(tmp_path_factory: pytest.TempPathFactory, datasets: Path) -> Path:
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())[:RUNS]
    path = tmp_path_factory.mktemp("tau") / "airline.runs.json"
    path.write_text(json.dumps(runs))
    return path


def _users(path: Path) -> list[list[str]]:
    return [[m["content"] for m in run["traj"] if m["role"] == "user"]
            for run in json.loads(path.read_text())]


def _eval(*argv: str) -> list[dict[str, Any]]:
    out = io.StringIO()
    assert cmd_eval(build_parser().parse_args(["eval", *argv, "--format", "jsonl"]), out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_run_is_a_conversation_with_a_turn_per_user_message(runs_file: Path) -> None:
    lines = _eval(str(runs_file), "--turns")
    users = _users(runs_file)
    turns = [r for r in lines if "record" not in r]
    sessions = lines[len(turns):]  # every session record after every trace record
    assert len(turns) == sum(map(len, users)) and len(sessions) == RUNS
    assert all(s["record"] == "session" and s["status"] == "complete" for s in sessions)
    for index, (said, session) in enumerate(zip(users, sessions, strict=True)):
        assert session["session_id"].rpartition(":")[0] == f"{runs_file.name}:{index}"
        mine = [t for t in turns if t["session_id"] == session["session_id"]]
        assert session["turns"] == len(mine) == len(said)
        assert session["traces"] == [t["trace_id"] for t in mine]  # in turn order
        assert [t["input"] for t in mine] == said  # each turn opens with its user message
        starts = [t["start_time_unix_nano"] for t in mine]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        assert all(t["task_id"] is None for t in mine)  # the reward is the conversation's
    # the agent's calls are in the turn they were made in, none lost or doubled
    calls = sum(1 for run in json.loads(runs_file.read_text()) for m in run["traj"]
                if m["role"] == "assistant" for _ in m.get("tool_calls") or ())
    assert sum(s["counts"]["tool_calls"] for s in sessions) == calls


def test_without_turns_a_run_stays_one_trace(runs_file: Path) -> None:
    lines = _eval(str(runs_file))
    assert len(lines) == RUNS and not any("record" in r or "session_id" in r for r in lines)
    assert [r["task_id"] for r in lines] == [
        str(run["task_id"]) for run in json.loads(runs_file.read_text())]


def test_replayed_turns_come_back_as_the_same_sessions(runs_file: Path,
                                                        tmp_path: Path) -> None:
    offline = {s["session_id"]: s for s in _eval(str(runs_file), "--turns")
               if s.get("record") == "session"}
    with running_service(tmp_path) as h:
        out = io.StringIO()
        args = build_parser().parse_args(["replay", str(runs_file), "--turns", "--endpoint",
                                          h.grpc_target])
        assert cmd_replay(args, out) == 0, out.getvalue()
        h.release(after_s=h.svc.config.assembly.idle_timeout_s + 1)
        # long after the last turn: the session job completes each conversation once
        later = time.time() + h.svc.config.sessions.idle_timeout_s + 1
        assert h.svc.session_job.tick(later) == len(offline)
        for session_id, expected in offline.items():
            url = h.admin_url + "/v1/sessions/" + urllib.parse.quote(session_id, safe="")
            with urllib.request.urlopen(url, timeout=30) as r:
                served = json.loads(r.read())
            for key in ("turns", "traces", "status", "findings", "verdict", "service",
                        "agent"):
                assert served[key] == expected[key], (session_id, key)


def _loaded(tmp_path: Path, traj: list[dict[str, Any]]) -> list[Any]:
    from otel_eval.receive.loaders import load_file

    path = tmp_path / "runs.json"
    path.write_text(json.dumps([{"task_id": 7, "reward": 1.0, "traj": traj}]))
    return load_file(path, turns=True)


def _roots(traces: list[Any]) -> list[dict[str, Any]]:
    return [next(s for s in t.spans if s.parent_span_id is None).attributes for t in traces]


@pytest.mark.parametrize(("roles", "turns"), [
    (["system", "user", "assistant", "user", "assistant"], 2),
    (["system", "assistant", "user", "assistant"], 1),  # a greeting before the user speaks
    (["user", "user", "assistant"], 2),  # two messages in a row: two turns, one unanswered
    (["system", "assistant"], 1),  # no user message: the run is one turn
    ([], 1),
])
def test_turns_split_at_user_messages(tmp_path: Path, roles: list[str], turns: int) -> None:
    traj = [{"role": r, "content": f"{r} {n}"} for n, r in enumerate(roles)]
    traces = _loaded(tmp_path, traj)
    assert len(traces) == turns
    roots = _roots(traces)
    [conversation] = {r["gen_ai.conversation.id"] for r in roots}
    assert re.fullmatch(r"runs\.json:0:[0-9a-f]{8}", conversation)
    assert all(r["tau_bench.task_id"] == "7" and "otel_eval.task.id" not in r for r in roots)
    assert len({t.trace_id for t in traces}) == turns


def test_a_malformed_run_is_a_loader_error(tmp_path: Path) -> None:
    from otel_eval.receive.loaders import LoaderError

    with pytest.raises(LoaderError, match="malformed tau-bench run"):
        _loaded(tmp_path, [{"role": "assistant", "tool_calls": "not a list of calls"}])


def test_runs_files_of_one_name_are_two_conversations(tmp_path: Path, datasets: Path) -> None:
    """Two runs files of one name in two directories (``before/airline.json``,
    ``after/airline.json``) hold different runs: their conversations are two sessions of
    their own turns, never one of both; the same run read again is the same conversation."""
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())
    paths = []
    for name, run in (("before", runs[0]), ("after", runs[5])):
        (tmp_path / name).mkdir()
        paths.append(tmp_path / name / "airline.json")
        paths[-1].write_text(json.dumps([run]))
    lines = _eval(*map(str, paths), "--turns")
    sessions = [r for r in lines if r.get("record") == "session"]
    turns = [r for r in lines if "record" not in r]
    assert len(sessions) == 2 and len({s["session_id"] for s in sessions}) == 2
    assert [s["turns"] for s in sessions] == [len(_users(p)[0]) for p in paths]
    assert len({t["trace_id"] for t in turns}) == len(turns)
    again = [r for r in _eval(str(paths[0]), "--turns") if r.get("record") == "session"]
    assert [s["session_id"] for s in again] == [sessions[0]["session_id"]]
