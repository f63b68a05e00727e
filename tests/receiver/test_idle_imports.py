"""Idle memory: a default ``serve`` imports litellm, scikit-learn (numpy, scipy), aiokafka,
psycopg and jsonschema only when their feature is on (a judge, a clustering run, Kafka, a
PostgreSQL store, a tool schema). The default Service (ports 0, no judge, no Kafka, the issues
job on) is built and started in a fresh interpreter, takes a priced agent run (no tool
schemas) through the official SDK exporter, evaluates and stores it, and runs the issues job
once (nothing to cluster); then none of those packages may be in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
HEAVY = ("litellm", "sklearn", "scipy", "numpy", "aiokafka", "openai", "tiktoken", "psycopg",
         "jsonschema")  # the tool-schema validator: only for runs that offer schemas

SCRIPT = """
import json, sys, tempfile
from pathlib import Path
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from support.harness import emit_agent_run, running_service

with tempfile.TemporaryDirectory() as d, running_service(Path(d)) as h:
    trace_id = emit_agent_run(OTLPSpanExporter(endpoint=h.grpc_target, insecure=True))
    stored = h.release()
    body = h.svc.store.get(trace_id)
    issues = h.svc.issues.run_once() if h.svc.issues is not None else None
heavy = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[1:])
print(json.dumps({"stored": stored, "cost_usd": body["usage"]["cost_usd"],
                  "issues_run": issues is not None and issues.critiques == 0,
                  "heavy": heavy}))
"""


def test_default_serve_imports_no_optional_heavy_package(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, *HEAVY], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["stored"] == 1
    # priced from litellm's packaged price map (gpt-4o, 120 in / 30 out) without litellm
    assert got["cost_usd"] is not None and got["cost_usd"] > 0
    assert got["issues_run"]  # the job ran over the window: nothing to cluster
    assert got["heavy"] == []


WORKER = """
import json, sys
from multiprocessing.connection import Connection
import otel_eval.app.worker
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.stage import evaluate_and_store
from otel_eval.store import open_store
light = ("otel_eval.app.config", "otel_eval.app.admin", "otel_eval.telemetry.metrics")
print(json.dumps(sorted(m for m in sys.modules
                        if m.split(".")[0] in sys.argv[1:] or m in light)))
"""

POOL = """
import json, sys, tempfile
from pathlib import Path
from support.harness import running_service

with tempfile.TemporaryDirectory() as d, running_service(
        Path(d), **{"evaluation.workers": 2}) as h:
    pids = h.svc.engine.stage.pids()
    kids = [int(c) for t in Path("/proc/self/task").iterdir()
            for c in (t / "children").read_text().split()]
    argv = [Path(f"/proc/{k}/cmdline").read_bytes().replace(b"\\0", b" ").decode()
            for k in kids]
print(json.dumps({"pids": sorted(pids), "children": sorted(kids), "argv": argv}))
"""


def test_a_worker_imports_what_evaluating_and_storing_need_only(tmp_path: Path) -> None:
    """The worker's imports (its entry, the evaluator, the stage, the store) leave out the
    top-level config (YAML, the admin API), the metrics client, gRPC and every optional
    package: each would be resident in every worker."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", WORKER, *HEAVY, "prometheus_client", "grpc",
                          "yaml"], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True)
    assert json.loads(out.stdout) == []


def test_the_worker_pool_starts_its_workers_and_nothing_else(tmp_path: Path) -> None:
    """Two workers are two child processes: no multiprocessing resource tracker beside them
    (spawn and forkserver start one; nothing here needs semaphores or shared memory)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", POOL], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=180, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(got["pids"]) == 2 and None not in got["pids"]
    assert got["children"] == got["pids"], got["argv"]
    assert not [a for a in got["argv"] if "resource_tracker" in a]
