"""``serve --workers 2`` on SQLite and on PostgreSQL: the turns of tau-bench conversations,
evaluated by two worker processes, come back from ``/v1/sessions/{id}`` with every turn in
order (each worker stores the turns it evaluated; the session's state is in the store); serve
killed -9 while they are open, the next serve completes each once."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conversations import tau_turns
from support.poll import poll

# sessions.idle_timeout_s: the first serve's never ends them (it is killed while they are
# open, however slow the machine); the second's completes them soon after it starts
FIRST_IDLE_S, SECOND_IDLE_S = 3600, 3


def _ports(log: Path) -> dict[str, int]:
    found = re.findall(r"(OTLP/HTTP|admin) (?:receiver|endpoint) listening on \S+ \(port (\d+)\)",
                       log.read_text(errors="replace"))
    return {name: int(port) for name, port in found}


def _session(admin: int, session_id: str) -> dict[str, Any] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{admin}/v1/sessions/{session_id}",
                                    timeout=10) as r:
            out: dict[str, Any] = json.loads(r.read())
            return out
    except urllib.error.HTTPError:
        return None


def _serve(tmp_path: Path, store: str, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("w") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "otel_eval.app.cli", "serve", "--config",
             str(tmp_path / "otel-eval.yaml"), "--http-endpoint", "127.0.0.1:0",
             "--grpc-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
             "--store", store, "--workers", "2"],
            stdout=log, stderr=subprocess.STDOUT)


def _listening(proc: subprocess.Popen[bytes], log_path: Path) -> dict[str, int]:
    def up() -> bool:
        assert proc.poll() is None, log_path.read_text()[-2000:]
        return {"OTLP/HTTP", "admin"} <= set(_ports(log_path))

    poll(up, "serve to listen")
    return _ports(log_path)


def _completed(admin: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("otel_eval_sessions_completed_total{"))


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_sessions_of_two_worker_processes_survive_kill_9_and_complete_once(
        tmp_path: Path, datasets: Path, backend: str, request: pytest.FixtureRequest) -> None:
    """Turns evaluated by two worker processes make open sessions; serve is killed -9 while
    they are open; a new serve on the same store completes each once, every turn in order."""
    store = (request.getfixturevalue("postgresql_url") if backend == "postgresql"
             else str(tmp_path / "results.db"))
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())[:2]
    conversations = [(f"w-{i}", tau_turns(run, i, "gen_ai.conversation.id", f"w-{i}"))
                     for i, run in enumerate(runs)]
    # store.path: with --store postgresql://... the SQLite path is not the store, but the
    # spool (and its lock) still goes beside it: in tmp_path, not the working directory
    def config(idle_s: int) -> None:
        (tmp_path / "otel-eval.yaml").write_text(
            f"assembly:\n  grace_s: 0.2\nsessions:\n  idle_timeout_s: {idle_s}\n"
            f"  check_interval_s: 0.2\nstore:\n  path: {tmp_path / 'results.db'}\n")

    config(FIRST_IDLE_S)
    first = _serve(tmp_path, store, tmp_path / "first.log")
    try:
        ports = _listening(first, tmp_path / "first.log")
        for _, turns in conversations:
            for _, body in turns:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{ports['OTLP/HTTP']}/v1/traces",
                    data=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"}, method="POST")
                with urllib.request.urlopen(req, timeout=10) as r:
                    assert r.status == 200
        for session_id, turns in conversations:
            want = [trace_id for trace_id, _ in turns]
            poll(lambda s=session_id, w=want: (
                (_session(ports["admin"], s) or {}).get("traces") == w), f"session {session_id}",
                 interval_s=0.2)
            record = _session(ports["admin"], session_id)
            assert record is not None
            assert (record["turns"], record["status"]) == (len(turns), "open")
    finally:
        first.kill()  # kill -9: the sessions are open, their state in the store
        first.wait()
    assert "2 evaluation worker processes ready" in (tmp_path / "first.log").read_text()
    config(SECOND_IDLE_S)
    second = _serve(tmp_path, store, tmp_path / "second.log")
    try:
        ports = _listening(second, tmp_path / "second.log")
        for session_id, turns in conversations:
            poll(lambda s=session_id: (
                (_session(ports["admin"], s) or {}).get("status") == "complete"),
                 f"session {session_id} complete", interval_s=0.2)
            record = _session(ports["admin"], session_id)
            assert record is not None
            assert record["traces"] == [trace_id for trace_id, _ in turns]
            assert (record["turns"], record["completion"]) == (len(turns), 0)
            assert 0 < record["prediction"]["p_success"] < 1
        assert _completed(ports["admin"]) == len(conversations)  # each once, by this serve
    finally:
        _stop(second)
