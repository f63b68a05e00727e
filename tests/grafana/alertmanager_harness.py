"""A real Alertmanager (Debian's ``prometheus-alertmanager``) for the end-to-end tests: the
shipped config (grafana/alertmanager.yml) with each receiver's webhook pointed at the test's
``Webhook`` (path ``/<receiver>``) and its waits shortened, on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from grafana_files import ALERTMANAGER_YML
from prometheus_harness import PROMETHEUS_POLL, stop
from support.poll import poll
from support.ports import free_port


class Webhook:
    """Stands for the pager: an HTTP server on a free loopback port keeping every notification
    Alertmanager POSTs to it, as (path, payload)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._received: list[tuple[str, dict[str, Any]]] = []
        received, lock = self._received, self._lock

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    received.append((self.path, json.loads(body)))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def received(self) -> list[tuple[str, dict[str, Any]]]:
        with self._lock:
            return list(self._received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@contextlib.contextmanager
def alertmanager(tmp_path: Path, webhook: Webhook, group_interval: str = "1s") -> Iterator[int]:
    """The shipped Alertmanager config, its receivers posting to ``webhook`` and its groups
    notified after ``group_interval`` (group_wait half of it); yields its port."""
    exe = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
    assert exe, ("prometheus-alertmanager missing: apt-get install -y prometheus-alertmanager "
                 "(scripts/test installs it)")
    config = yaml.safe_load(ALERTMANAGER_YML.read_text())
    for receiver in config["receivers"]:
        for hook in receiver["webhook_configs"]:
            hook["url"] = f"http://127.0.0.1:{webhook.port}/{receiver['name']}"
    config["route"].update(group_wait=f"{int(group_interval[:-1]) * 500}ms",
                           group_interval=group_interval)
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp_path / "alertmanager.log"
    with log_path.open("w") as log:
        # --cluster.listen-address= : no gossip port (it would bind 0.0.0.0:9094)
        proc = subprocess.Popen(
            [exe, f"--config.file={tmp_path / 'alertmanager.yml'}",
             f"--storage.path={tmp_path / 'alertmanager'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=log, stderr=subprocess.STDOUT)
        try:
            def ready() -> bool:
                assert proc.poll() is None, log_path.read_text()[-3000:]
                return _ready(port)

            poll(ready, "Alertmanager to be ready", **PROMETHEUS_POLL)
            yield port
        finally:
            stop(proc)
