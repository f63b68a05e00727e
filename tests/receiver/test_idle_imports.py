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
from service_harness import running_service
from test_receivers import emit_agent_run

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
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", SCRIPT, *HEAVY], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["stored"] == 1
    # priced from litellm's packaged price map (gpt-4o, 120 in / 30 out) without litellm
    assert got["cost_usd"] is not None and got["cost_usd"] > 0
    assert got["issues_run"]  # the job ran over the window: nothing to cluster
    assert got["heavy"] == []
