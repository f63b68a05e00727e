"""The web view as ``serve`` wires it: a real Service takes the guide trace over OTLP/HTTP,
and its admin port shows the run with the judge's configured redaction applied."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from support.harness import running_service
from ui_server import GUIDE, GUIDE_ID, get


def test_serve_shows_the_run_it_evaluated_redacted_as_configured(tmp_path: Path) -> None:
    with running_service(tmp_path, **{"judge.redaction.extra_patterns": ("timeout_s",),
                                      "admin.trace_url": "https://tempo.example/t/{trace_id}"}
                         ) as h:
        request = urllib.request.Request(h.http_url, data=GUIDE.read_bytes(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.status == 200
        assert h.release() == 1
        status, headers, page = get(f"{h.admin_url}/ui/runs/{GUIDE_ID}")
        assert status == 200 and "default-src 'none'" in headers["Content-Security-Policy"]
        assert b'id="step-4"' in page and b"loop:repeated_call" in page
        assert b"[REDACTED]" in page and b"timeout_s" not in page  # as the judge sees it
        assert f"https://tempo.example/t/{GUIDE_ID}".encode() in page
        status, _, listing = get(f"{h.admin_url}/ui/?agent=docs-fixer")
        assert status == 200 and GUIDE_ID.encode() in listing
