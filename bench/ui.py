"""Page size and render time of the web view for a 2,000-step run, against the results API.

    python bench/ui.py                      2,000 steps, 2 kB tool results, and 200 kB ones
    python bench/ui.py --steps 4000 --no-browser

One synthetic run (an agent, then alternating LLM calls asking for a tool and the tool's
span: 1,000 + 999 steps plus the agent), evaluated by the offline engine and stored, then:

- baseline: ``GET /v1/evaluations/{trace_id}``, the per-trace JSON (what the run view
  replaces), over a real admin server: bytes and seconds;
- ``/ui/runs/{trace_id}`` over the same server: bytes and seconds, and the ratio to the
  baseline; the render alone (the page's view from ``routes.PAGES``, in process) too;
- ``otel-eval show``'s text (``render_text``): bytes and seconds;
- with Chromium (``--no-browser`` to skip): the page's load in headless Chromium (navigation
  start to the load event, from the page's own ``performance`` timing) against the same
  browser loading the JSON.

Best of ``--reps``. Prints one table per content size and one ``BENCH {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "ui"))

from prometheus_client import CollectorRegistry  # noqa: E402

from otel_eval.app.admin import AdminApi, AdminServer  # noqa: E402
from otel_eval.app.config import Config  # noqa: E402
from otel_eval.app.offline import EvalRun  # noqa: E402
from otel_eval.app.show import render_text  # noqa: E402
from otel_eval.evaluate.judge.config import RedactionConfig  # noqa: E402
from otel_eval.evaluate.judge.redact import Redactor  # noqa: E402
from otel_eval.outputs.ui.routes import PAGES, Response, Sources  # noqa: E402
from otel_eval.outputs.ui.run import tree  # noqa: E402
from otel_eval.store import Store  # noqa: E402

TRACE_ID = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
T0 = 1_764_600_000_000_000_000


def _attr(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": {"intValue": str(value)} if isinstance(value, int)
            else {"stringValue": value}}


def _span(i: int, parent: str | None, name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    out = {"traceId": TRACE_ID, "spanId": f"{i + 1:016x}", "name": name, "kind": 1,
           "startTimeUnixNano": str(T0 + i * 1_000_000),
           "endTimeUnixNano": str(T0 + i * 1_000_000 + 900_000),
           "attributes": [_attr(k, v) for k, v in attrs.items()], "status": {}}
    if parent:
        out["parentSpanId"] = parent
    return out


def render(sources: Sources, path: str) -> Response:
    """The web view's page for ``path`` rendered in process, as the admin router serves it
    (the first of ``routes.PAGES`` whose pattern matches the whole path)."""
    for pattern, view in PAGES:
        found = re.fullmatch(pattern, path)
        if found:
            return view(sources, found, "")
    raise LookupError(path)


def trace_file(path: Path, steps: int, result_chars: int, same_call: bool = False) -> Path:
    """An agent span, then LLM calls each asking for a tool and the tool's span, alternating;
    the last LLM call answers (no call), so the run has exactly ``steps`` steps. Each call
    asks for another city; ``same_call``: all for one (a loop the detectors flag, whose
    findings name steps all over the run)."""
    root = f"{1:016x}"
    spans = [_span(0, None, "invoke_agent bench", {
        "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "bench",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
            {"type": "text", "content": "Find the weather in every city of the list."}]}])})]
    for n in range(1, steps):
        city = "city-0" if same_call else f"city-{n // 2}"
        if n % 2:
            call = [] if n == steps - 1 else [{"type": "tool_call", "id": f"c{n}",
                                               "name": "get_weather", "arguments": {"city": city}}]
            out = [{"role": "assistant", "parts": [
                {"type": "text", "content": f"Next I check {city}. " * 8}, *call]}]
            spans.append(_span(n, root, "chat gpt-4o", {
                "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 40,
                "gen_ai.output.messages": json.dumps(out)}))
        else:
            spans.append(_span(n, root, "execute_tool get_weather", {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": f"c{n - 1}",
                "gen_ai.tool.call.arguments": json.dumps({"city": city}),
                "gen_ai.tool.call.result": (f"{city}: sunny, 21 C. " * result_chars)[
                    :result_chars]}))
    doc = {"resourceSpans": [{"resource": {"attributes": [_attr("service.name", "bench")]},
                              "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc))
    return path


def best(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(reps):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=120) as r:
        return bytes(r.read())


def browser_load(url: str, profile: Path) -> tuple[float, float]:
    """(ms to the load event of the page, of the JSON) in headless Chromium."""
    from browser import Browser  # tests/ui/browser.py

    b = Browser(profile)
    try:
        out = []
        for target in (url + "/ui/runs/" + TRACE_ID, url + "/v1/evaluations/" + TRACE_ID):
            b.open(target)
            out.append(float(b.js("(() => { const t = performance.getEntriesByType("
                                  "'navigation')[0]; return t.loadEventEnd - t.startTime; })()")))
        return out[0], out[1]
    finally:
        b.close()


def measure(steps: int, result_chars: int, reps: int, with_browser: bool) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-ui-"))
    [ev] = list(EvalRun(Config(), [str(trace_file(tmp / "run.json", steps, result_chars))])
                .evaluations())
    store = Store(str(tmp / "otel-eval.db"))
    store.put_many([ev])
    body = store.get(TRACE_ID)
    # every step is evaluated; the stored object keeps what fits its bound (``bound``: with
    # 200 kB results the last steps are left out of it), which is what the pages render
    assert ev.trajectory.steps and len(ev.trajectory.steps) == steps
    assert body is not None and 0 < len(body["steps"]) <= steps
    redact = Redactor(RedactionConfig()).redact
    api = AdminApi(CollectorRegistry(), store.query, store.get, lambda _t, _o: None,
                   lambda: True, lambda: True, redact=redact)
    server = AdminServer("127.0.0.1:0", api)
    server.start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        api_s, api_bytes = best(lambda: fetch(url + "/v1/evaluations/" + TRACE_ID), reps)
        page_s, page_bytes = best(lambda: fetch(url + "/ui/runs/" + TRACE_ID), reps)
        sources = Sources(store.query, lambda _t: body, lambda: None, redact)
        render_s, _ = best(lambda: render(sources, "/ui/runs/" + TRACE_ID), reps)
        show_s, text = best(lambda: render_text(tree(body), redact=redact), reps)
        row: dict[str, Any] = {
            "steps": steps, "stored_steps": len(body["steps"]), "result_chars": result_chars,
            "api_bytes": len(api_bytes),
            "api_s": api_s, "page_bytes": len(page_bytes), "page_s": page_s,
            "render_s": render_s, "show_bytes": len(text.encode()), "show_s": show_s}
        if with_browser:
            row["browser_page_ms"], row["browser_json_ms"] = browser_load(url, tmp / "chromium")
        return row
    finally:
        server.stop()
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--result-chars", type=int, nargs="+", default=[2000, 200_000])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    rows = [measure(args.steps, chars, args.reps, not args.no_browser)
            for chars in args.result_chars]
    for r in rows:
        print(f"\n{r['steps']} steps ({r['stored_steps']} stored), tool results of "
              f"{r['result_chars']:,} characters")
        print(f"  GET /v1/evaluations/ID (baseline)  {r['api_bytes'] / 1e6:7.2f} MB  "
              f"{r['api_s'] * 1000:7.0f} ms")
        print(f"  GET /ui/runs/ID                    {r['page_bytes'] / 1e6:7.2f} MB  "
              f"{r['page_s'] * 1000:7.0f} ms  (x{r['page_bytes'] / r['api_bytes']:.2f} bytes, "
              f"x{r['page_s'] / r['api_s']:.2f} time)")
        print(f"  render only (in process)                      {r['render_s'] * 1000:7.0f} ms")
        print(f"  show (render_text)                 {r['show_bytes'] / 1e6:7.2f} MB  "
              f"{r['show_s'] * 1000:7.0f} ms")
        if "browser_page_ms" in r:
            print(f"  Chromium load: page {r['browser_page_ms']:.0f} ms, the JSON "
                  f"{r['browser_json_ms']:.0f} ms "
                  f"(x{r['browser_page_ms'] / r['browser_json_ms']:.2f})")
    print("BENCH " + json.dumps(rows))


if __name__ == "__main__":
    main()
