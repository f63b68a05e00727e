"""Loading a configuration (every command's first step, ``otel-eval eval`` included) imports
the stages' config classes, not the admin server: ``admin:``'s class lived beside the server,
so reading it imported the web view, the store's queries, the HTTP server and the Prometheus
client (72 modules, ~45 ms of CPU at every ``eval``'s start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVER = ("otel_eval.app.admin", "otel_eval.outputs.ui", "otel_eval.receive.httpserver",
          "prometheus_client", "http.server")
SCRIPT = """
import json, sys
import otel_eval.app.cli
print(json.dumps(sorted(m for m in sys.modules if m in sys.argv[1:])))
"""


def test_the_cli_and_its_config_import_no_part_of_the_admin_server(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, *SERVER], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(out.stdout) == []
