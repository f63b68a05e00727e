"""How one trace's judge prompts grow with its size: a run of n LLM calls, each followed by a
failed tool call with a 400-character error (a finding each), as ``serve`` would hand the
judge.

    python bench/judge_scaling.py                  n = 1250 2500 5000
    python bench/judge_scaling.py --sizes 1000 4000

For each n: the trajectory through every detector, then ``Judge.requests`` (every request
built and redacted, what the judge sends): how many requests, their characters in all, the
largest, the seconds to build them and the peak of memory allocated meanwhile
(``tracemalloc``). Then the ratio of each figure at 2n to the figure at n (2 = linear, 4 =
quadratic), the baseline being the smaller size measured in the same run. Prints one table and
one ``BENCH {json}`` line. ``PYTHONPATH`` at another checkout gives its figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import tracemalloc
from typing import Any

from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Step, Trajectory
from otel_eval.evaluate.detectors import Detectors, DetectorsConfig
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.evaluate.judge.judge import Judge


def failing_trajectory(calls: int) -> Trajectory:
    """``calls`` LLM steps, each followed by a failed tool call with a 400-character error
    (``tests/judge/test_judge_findings_bound.py`` builds its runs here too)."""
    steps = [Step(0, "r" * 16, None, "agent", "agent", node="a")]
    for i in range(calls):
        steps.append(Step(len(steps), f"{len(steps):016x}", "r" * 16, "llm", "chat", node="a",
                          depth=1, model="gpt-4o", input_tokens=10, output_tokens=10,
                          input_text=json.dumps([{"role": "user", "content": f"q{i}"}]),
                          output_text=json.dumps([{"role": "assistant", "content": f"a{i}"}])))
        name = f"tool_{i}_" + "T" * 40
        steps.append(Step(len(steps), f"{len(steps):016x}", "r" * 16, "tool", name, node="a",
                          depth=1, tool_name=name, status="error",
                          error=f"err{i} " + "E" * 400, arguments={"k": i}))
    return Trajectory(trace_id="0" * 31 + "1", source="bench", status="complete",
                      steps=steps, agent="a", input="task", output="done",
                      span_count=len(steps))


def failing_run(calls: int) -> Evaluation:
    """``failing_trajectory`` through every detector (a finding per failed call)."""
    t = failing_trajectory(calls)
    findings, verdict = Detectors(DetectorsConfig()).evaluate(t)
    return Evaluation(t, findings, verdict)


def measure(judge: Judge, calls: int) -> dict[str, Any]:
    evaluation = failing_run(calls)
    tracemalloc.start()
    began = time.perf_counter()
    requests = judge.requests(evaluation)
    seconds = time.perf_counter() - began
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    sizes = [sum(len(m["content"]) for m in r.messages) for r in requests]
    return {"n": calls, "spans": len(evaluation.trajectory.steps),
            "findings": len(evaluation.findings), "requests": len(requests),
            "chars": sum(sizes), "largest": max(sizes), "seconds": round(seconds, 3),
            "peak_mb": round(peak / 1e6, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1250, 2500, 5000])
    args = ap.parse_args()
    judge = Judge(JudgeConfig(model="openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1"))
    rows = [measure(judge, n) for n in sorted(args.sizes)]
    print(f"{'n':>6} {'spans':>6} {'findings':>8} {'requests':>8} {'chars':>12} "
          f"{'largest':>9} {'seconds':>8} {'peak MB':>8}", file=sys.stderr)
    for r in rows:
        print(f"{r['n']:>6} {r['spans']:>6} {r['findings']:>8} {r['requests']:>8} "
              f"{r['chars']:>12,} {r['largest']:>9,} {r['seconds']:>8.2f} {r['peak_mb']:>8.1f}",
              file=sys.stderr)
    growth = []
    for small, large in itertools.pairwise(rows):
        scale = large["n"] / small["n"]
        ratios = {k: round(large[k] / small[k] * 2 / scale, 2) for k in
                  ("requests", "chars", "seconds", "peak_mb") if small[k]}
        growth.append({"from": small["n"], "to": large["n"], **ratios})
        print(f"{small['n']} -> {large['n']}: ratio per doubling " + ", ".join(
            f"{k} {v}" for k, v in ratios.items()), file=sys.stderr)
    print("BENCH " + json.dumps({"rows": rows, "per_doubling": growth}))


if __name__ == "__main__":
    main()
