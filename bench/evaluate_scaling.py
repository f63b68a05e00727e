"""How one trace's evaluation time grows with its size (issue 11: no per-trace step worse than
n log n in its spans).

    python bench/evaluate_scaling.py                  all shapes, n = 500 1000 2000 4000
    python bench/evaluate_scaling.py --shapes history --sizes 2000

Each shape is a synthetic trace built to hit one step hard, evaluated through
``otel_eval.evaluate.evaluator.Evaluator.evaluate`` (trajectory + every detector), best of
``--reps``:

- ``history``: n LLM spans whose tool calls exist only in their output (rebuilt steps), each
  input carrying the whole conversation so far (message bytes grow as n^2 by construction);
- ``flat``: the same with a constant-size input (the last 3 messages);
- ``stagnation``: n identical LLM outputs, each followed by the same tool call (a loop the
  stagnation finding must be checked against);
- ``failing``: n tool calls that all fail, each with different arguments (recovery);
- ``no_progress``: ``get_x`` with the same result alternating with read-only calls;
- ``deep``: a chain of n/2 nested spans with n/2 tool calls at the bottom.

Prints per shape the seconds per size and the ratio t(2n)/t(n) (2 = linear, 4 = quadratic)
and one ``BENCH {json}`` line. Run it once with ``PYTHONPATH`` at an older checkout for a
before/after; both figures come from the same machine in the same session.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from otel_eval.app.config import Config
from otel_eval.base.model import Span, Trace
from otel_eval.evaluate.evaluator import Evaluator

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _span(i: int, parent: int | None, attrs: dict[str, Any], status: str = "unset") -> Span:
    return Span(TRACE, f"{i + 1:016x}", f"{parent + 1:016x}" if parent is not None else None,
                str(attrs.get("gen_ai.operation.name", "span")), 10 + i, 10**15 - i,
                status=status, attributes=attrs)


def _root() -> Span:
    return _span(0, None, {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"})


def _llm_conversation(n: int, history: bool) -> list[Span]:
    spans = [_root()]
    msgs: list[Any] = [{"role": "user", "parts": [{"type": "text", "content": "do it"}]}]
    for i in range(n):
        out = [{"role": "assistant", "parts": [
            {"type": "text", "content": f"step {i}: thinking about item {i * 7}"},
            {"type": "tool_call", "id": f"call_{i}", "name": "search",
             "arguments": {"q": f"query {i}"}}]}]
        spans.append(_span(i + 1, 0, {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.input.messages": json.dumps(msgs if history else msgs[-3:]),
            "gen_ai.output.messages": json.dumps(out)}))
        msgs = [*msgs, *out, {"role": "tool", "parts": [
            {"type": "tool_call_response", "id": f"call_{i}", "response": f"result {i}"}]}]
    return spans


def _tool(i: int, parent: int, name: str, args: Any, result: str = "ok",
          status: str = "unset") -> Span:
    return _span(i, parent, {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                             "gen_ai.tool.call.arguments": json.dumps(args),
                             "gen_ai.tool.call.result": result}, status)


def _stagnation(n: int) -> list[Span]:
    spans = [_root()]
    text = json.dumps([{"role": "assistant", "parts": [
        {"type": "text", "content": "I will search for the answer again now. " * 3}]}])
    for i in range(n):
        spans.append(_span(2 * i + 1, 0, {"gen_ai.operation.name": "chat",
                                          "gen_ai.output.messages": text}))
        spans.append(_tool(2 * i + 2, 0, "search", {"q": "same"}))
    return spans


def _failing(n: int) -> list[Span]:
    return [_root(), *(_tool(i + 1, 0, "write_file", {"path": f"f{i}"}, "", "error")
                       for i in range(n))]


def _no_progress(n: int) -> list[Span]:
    return [_root(), *(_tool(i + 1, 0, "get_x" if i % 2 else f"list_{i}", {"a": 1}, "same")
                       for i in range(n))]


def _deep(n: int) -> list[Span]:
    half = n // 2
    chain = [_root(), *(_span(i, i - 1, {"x": i}) for i in range(1, half))]
    return chain + [_tool(half + i, half - 1, "write", {"i": i}) for i in range(half)]


SHAPES: dict[str, Callable[[int], list[Span]]] = {
    "history": lambda n: _llm_conversation(n, True),
    "flat": lambda n: _llm_conversation(n, False),
    "stagnation": _stagnation,
    "failing": _failing,
    "no_progress": _no_progress,
    "deep": _deep,
}


def measure(shape: str, n: int, reps: int, evaluator: Evaluator) -> float:
    spans = SHAPES[shape](n)
    best = float("inf")
    for _ in range(reps):
        trace = Trace(TRACE, list(spans), "complete")
        start = time.perf_counter()
        evaluator.evaluate(trace)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--sizes", nargs="*", type=int, default=[500, 1000, 2000, 4000])
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--max-s", type=float, default=60.0,
                    help="skip larger sizes of a shape once one took longer than this")
    args = ap.parse_args(argv)
    evaluator = Evaluator(Config())
    results: dict[str, dict[int, float]] = {}
    for shape in args.shapes:
        results[shape] = {}
        for n in sorted(args.sizes):
            t = measure(shape, n, args.reps, evaluator)
            results[shape][n] = round(t, 4)
            print(f"{shape:12s} n={n:6d} {t:8.3f} s", file=sys.stderr, flush=True)
            if t > args.max_s:
                break
    print(f"{'shape':12s} " + " ".join(f"{n:>9d}" for n in sorted(args.sizes))
          + "   t(2n)/t(n) at the largest pair")
    for shape, times in results.items():
        sizes = sorted(times)
        cells = " ".join(f"{times[n]:9.3f}" for n in sizes)
        pairs = [(a, b) for a, b in pairwise(sizes) if b == 2 * a]
        ratio = f"{times[pairs[-1][1]] / max(times[pairs[-1][0]], 1e-9):.1f}" if pairs else "-"
        print(f"{shape:12s} {cells}   {ratio}")
    print("BENCH " + json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
