"""Bounded results: how big one hostile trace's stored body gets, and the peak memory of
evaluating it, against a clean trace of the same shape measured in the same run.

The hostile trace is issue 21's: each LLM span's reply is a code block that binds a ~49 KB
literal (control characters, which JSON writes as 6-byte ``\\u0001``) once and passes it to
an offered tool 64 times. ``--spans N`` LLM spans of ~50 KB each (64 make the issue's
3.2 MB request). Each case runs in its own child process (evaluate + encode the stored
body), so its peak RSS is its own (``ru_maxrss``).

    python bench/bounded_results.py [--spans 1,4]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

LITERAL_CHARS = 48_000
CALLS = 64


def hostile_trace(spans: int, clean: bool = False):  # type: ignore[no-untyped-def]
    from otel_eval.base.model import Span, Trace

    tid = "0af7651916cd43dd8448eb211c80319c"
    literal = ("x" if clean else "\x01") * (64 if clean else LITERAL_CHARS)
    code = f"data = '{literal}'\n" + "".join("get_weather(data)\n"
                                              for _ in range(CALLS))
    reply = f"Thought: act.\n<code>\n{code}</code>"
    root = Span(tid, "a" * 16, None, "run", 0, 10_000, attributes={
        "openinference.span.kind": "AGENT", "input.value": "task",
        "smolagents.tools_names": json.dumps(["get_weather", "final_answer"])})
    out = [root]
    for i in range(spans):
        step = f"{i + 1:016x}"
        llm = f"{i + 1 + 4096:016x}"
        out.append(Span(tid, step, root.span_id, f"step{i}", 10 + i * 100, 10 + i * 100 + 90,
                        attributes={"openinference.span.kind": "CHAIN",
                                    "output.value": "Execution logs:\nsunny"}))
        out.append(Span(tid, llm, step, f"llm{i}", 11 + i * 100, 11 + i * 100 + 10,
                        attributes={"openinference.span.kind": "LLM",
                                    "llm.model_name": "gpt-4o",
                                    "llm.output_messages.0.message.role": "assistant",
                                    "llm.output_messages.0.message.content": reply}))
    return Trace(tid, out, "complete"), sum(len(reply) for _ in range(spans))


def child(spans: int, clean: bool) -> None:
    from otel_eval.app.config import Config
    from otel_eval.evaluate.evaluator import Evaluator

    trace, sent = hostile_trace(spans, clean)
    start = time.perf_counter()
    ev = Evaluator(Config()).evaluate(trace)
    body = ev.to_json_text().encode()
    took = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"spans": spans, "clean": clean, "sent_bytes": sent,
                      "body_bytes": len(body), "steps": len(ev.trajectory.steps),
                      "peak_rss_bytes": rss, "seconds": round(took, 3),
                      "findings": sorted({f.kind for f in ev.findings})}))


def run(spans: int, clean: bool) -> dict:  # type: ignore[type-arg]
    out = subprocess.run([sys.executable, __file__, "--child", str(spans)]
                         + (["--clean"] if clean else []),
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--spans", default="1,4")
    p.add_argument("--child", type=int)
    p.add_argument("--clean", action="store_true")
    a = p.parse_args()
    if a.child is not None:
        child(a.child, a.clean)
        return
    for n in (int(x) for x in a.spans.split(",")):
        base, hostile = run(n, True), run(n, False)
        h, b = hostile, base
        print(f"{n} LLM spans: hostile sent {h['sent_bytes'] / 1e6:.2f} MB -> stored body "
              f"{h['body_bytes'] / 1e6:.2f} MB ({h['body_bytes'] / h['sent_bytes']:.1f}x), "
              f"{h['steps']} steps, peak RSS {h['peak_rss_bytes'] / 1e6:.0f} MB "
              f"(clean baseline {b['peak_rss_bytes'] / 1e6:.0f} MB, "
              f"body {b['body_bytes'] / 1e3:.1f} kB; "
              f"ratio {h['peak_rss_bytes'] / b['peak_rss_bytes']:.2f}x), "
              f"{h['seconds']} s, findings {h['findings']}")


if __name__ == "__main__":
    main()
