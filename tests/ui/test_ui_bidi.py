"""A run whose agent, tool and texts carry bidirectional overrides and isolates: the web view
shows them as escapes (``\\u202e``), as the terminal does, never a name displayed reversed."""

from __future__ import annotations

import json
from pathlib import Path

from hostile import _span
from ui_server import admin, evaluate, get

from otel_eval.store import Store

BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
TRACE_ID = "0123456789abcdef0123456789abcde0"


def _trace(path: Path) -> Path:
    spans = [
        _span("b000000000000001", None, "invoke_agent admin\u202egnp.exe", 0, {
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "admin\u202egnp.exe",
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                {"type": "text", "content": "delete " + BIDI}]}])}),
        _span("b000000000000002", "b000000000000001", "execute_tool \u2067rm\u2069", 100, {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "\u202etxt.exe",
            "gen_ai.tool.call.arguments": json.dumps({"path": "\u2066/etc\u2069"}),
            "gen_ai.tool.call.result": "ok \u202d"}),
    ]
    for span in spans:
        span["traceId"] = TRACE_ID
    doc = {"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "svc\u202e"}}]},
        "scopeSpans": [{"scope": {"name": "bidi"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc))
    return path


def test_bidirectional_overrides_are_shown_as_escapes(tmp_path: Path) -> None:
    [run] = evaluate([str(_trace(tmp_path / "bidi.json"))])
    store = Store(str(tmp_path / "otel-eval.db"))
    store.put_many([run])
    try:
        with admin(store) as url:
            pages = [get(f"{url}{path}") for path in (
                "/ui/", f"/ui/runs/{TRACE_ID}", f"/ui/runs/{TRACE_ID}/steps/0",
                f"/ui/runs/{TRACE_ID}/steps/1")]
    finally:
        store.close()
    for status, _, body in pages:
        page = body.decode()
        assert status == 200 and not any(c in page for c in BIDI), page[:300]
    run_page = pages[1][2].decode()
    assert "admin\\u202egnp.exe" in run_page and "\\u2067rm\\u2069" in run_page


def test_a_filter_holding_a_bidirectional_override_is_written_out_escaped(
        tmp_path: Path) -> None:
    """A crafted link (``/ui/?agent=%E2%80%AEtxt.exe``) put its override in the filter box,
    which displayed "exe.txt", and nowhere else: the one place the web view showed such a
    character as it is. The box keeps the value (it filters what the URL says: a run's agent
    may hold one, and its link must find it), and the form writes the value out beside it
    escaped, as every other text of the page is."""
    import html
    import re
    from urllib.parse import quote

    store = Store(str(tmp_path / "otel-eval.db"))
    try:
        with admin(store) as url:
            status, _, body = get(f"{url}/ui/?agent={quote(chr(0x202e) + 'txt.exe')}"
                                  f"&service=svc&task_id={quote('t' + chr(0x2067))}")
    finally:
        store.close()
    page = body.decode()
    assert status == 200
    form = page[page.index("<form"):page.index("</form>")]
    shown = html.unescape(re.sub(r"<[^>]*>", " ", form))  # the text, attributes left out
    assert "\\u202etxt.exe" in shown and "t\\u2067" in shown
    assert not any(c in shown for c in BIDI)
    assert 'value="\u202etxt.exe"' in form  # the filter itself, as the URL gave it
    assert shown.count("as text") == 2  # only the fields that hold one
