"""Readiness follows the stages' health: a serve whose engine worker (or Kafka consumer) died
takes no traffic it could evaluate, so ``/readyz`` answers 503 naming it, as ``/healthz``
does, not only once the stop it triggers begins (docs/api.md)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

from support.harness import running_service


def _get(url: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_readiness_turns_red_when_a_stage_dies(tmp_path: Path) -> None:
    with running_service(tmp_path) as h:
        assert _get(h.admin_url + "/readyz") == (200, {"status": "ok"})
        # what the engine's worker records as it dies (Engine._run: "engine worker died")
        h.svc.engine.failure = RuntimeError("boom")
        assert _get(h.admin_url + "/healthz")[0] == 503
        code, body = _get(h.admin_url + "/readyz")
        assert code == 503 and "engine" in body["reason"]
