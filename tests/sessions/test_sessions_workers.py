"""``serve --workers 2``: the turns of tau-bench conversations, evaluated by two worker
processes, come back from ``/v1/sessions/{id}`` with every turn in order (each worker stores
the turns it evaluated; the session is read from the store)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conversations import tau_turns

TIMEOUT_S = 60


def _poll(what: str, condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)  # poll interval: the condition is the wait


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


def test_turns_evaluated_by_two_worker_processes_make_whole_sessions(
        tmp_path: Path, datasets: Path) -> None:
    runs = json.loads((datasets / "tau-bench" / "airline" / "gpt-4o-airline.runs.json")
                      .read_text())[:2]
    conversations = [(f"w-{i}", tau_turns(run, i, "gen_ai.conversation.id", f"w-{i}"))
                     for i, run in enumerate(runs)]
    (tmp_path / "otel-eval.yaml").write_text("assembly:\n  grace_s: 0.2\n")
    log_path = tmp_path / "serve.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "otel_eval.app.cli", "serve", "--config",
             str(tmp_path / "otel-eval.yaml"), "--http-endpoint", "127.0.0.1:0",
             "--grpc-endpoint", "127.0.0.1:0", "--admin-endpoint", "127.0.0.1:0",
             "--store", str(tmp_path / "results.db"), "--workers", "2"],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            def up() -> bool:
                assert proc.poll() is None, log_path.read_text()[-2000:]
                return {"OTLP/HTTP", "admin"} <= set(_ports(log_path))

            _poll("serve to listen", up)
            ports = _ports(log_path)
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
                _poll(f"session {session_id}", lambda s=session_id, w=want: (
                    (_session(ports["admin"], s) or {}).get("traces") == w))
                record = _session(ports["admin"], session_id)
                assert record is not None
                assert (record["turns"], record["status"]) == (len(turns), "open")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    # the turns were evaluated (and stored) by the worker processes
    assert "2 evaluation worker processes ready" in log_path.read_text()
