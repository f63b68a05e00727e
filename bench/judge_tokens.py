"""Judge cost benchmark: prompt tokens the LLM judge would send, as a share of the agent's own.

    python bench/judge_tokens.py [--only tau,trail,swe,corpus] [--limit N]
                                 [--model gpt-4o-mini] [--json FILE]

For every trace of the public datasets (../shared/datasets: tau-bench airline runs, TRAIL GAIA
span trees, SWE-bench mini-swe-agent runs) and of the conformance corpus (every completed
recording of tests/conformance, figures per stack too), through the offline path of ``eval``
(loaders.load_path -> Evaluator: trajectory + detector findings + outcome label), build exactly
the requests ``Judge`` would send at the default ``JudgeConfig`` (only ``model`` set), and count
their prompt tokens with litellm's ``token_counter`` (no LLM is called). The agent's input
tokens come from the trace's usage attributes, else are counted from its LLM steps' input
messages with the same tokenizer. Reported: judge input tokens / agent input tokens, summed
over the traces (and the per-trace median), for the default combined call and, for
comparison, one call per judge; the rubric judge (off by default) is shown apart, and so is
the reply schema the default ``response_format: json_schema`` sends with each call (its JSON
text counted; not in the default figure, which counts the messages). Where the
default call's tokens go: the fixed frame (system prompt, instructions, the reply's shape
when the prompt carries it, list of steps to score), the task, and the rendered trajectory by
section (new input messages of LLM calls, LLM outputs, tool arguments, tool results), each
counted on its own text.
"""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network for the price map

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import litellm

from otel_eval.app.config import Config
from otel_eval.base.model import Trace
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.judge import (
    Judge,
    JudgeConfig,
    prompting,
)
from otel_eval.evaluate.judge.compact import parse_messages
from otel_eval.evaluate.judge.render import Rendered, render
from otel_eval.receive.loaders import load_path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
SETS = {
    "tau": ("tau-bench airline (gpt-4o)", "tau-bench/airline/gpt-4o-airline.runs.json"),
    "trail": ("TRAIL GAIA (smolagents)", "trail/GAIA/traces"),
    "swe": ("SWE-bench mini-swe-agent", "swe-bench-mini-swe-agent/trajs"),
    "corpus": ("conformance corpus (all stacks)", ""),
}
CORPUS = ROOT / "tests" / "conformance"
SEPARATE = ("step", "process", "trace", "outcome")
# stand-in criteria for counting the rubric check prompt (the judge writes ~3-8)
CRITERIA = [{"id": f"c{i}", "criterion": "The agent " + "does the required thing " * 3}
            for i in range(1, 7)]


def count(model: str, messages: list[dict[str, str]]) -> int:
    return int(litellm.token_counter(model=model, messages=messages))


def count_text(model: str, text: str) -> int:
    return int(litellm.token_counter(model=model, text=text)) if text else 0


_SECTIONS = {" new input:": "llm_input", " output:": "llm_output",
             " result: ": "tool_result", " error: ": "errors"}


def trajectory_sections(text: str) -> dict[str, str]:
    """The rendered trajectory's lines by section (``render._Renderer`` layout): a step
    header starts a section, `` input``/`` output``/`` result``/`` error`` lines switch it."""
    out: dict[str, list[str]] = defaultdict(list)
    section = "headers"
    for line in text.splitlines():
        if line.startswith("[step "):
            section = "tool_args" if "] tool " in line else "headers"
        else:
            section = next((v for k, v in _SECTIONS.items() if line.startswith(k)), section)
        out[section].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def breakdown(rendered: Rendered, total: int, model: str) -> dict[str, int]:
    """Where the default call's tokens go (sections counted apart; frame = the rest)."""
    parts = {"task": count_text(model, rendered.task),
             "final_output_findings": count_text(model, rendered.final_output
                                                 + rendered.findings)}
    for name, text in trajectory_sections(rendered.trajectory).items():
        parts["trajectory_" + name] = count_text(model, text)
    parts["frame"] = max(total - sum(parts.values()), 0)
    return parts


def agent_input_tokens(t: Trajectory, model: str) -> int:
    total = 0
    for step in t.llm_steps:
        if step.input_tokens is not None:
            total += step.input_tokens
        elif step.input_text:
            msgs = [{"role": m.role if m.role != "raw" else "user",
                     "content": m.content + (f"\n{m.tool_calls}" if m.tool_calls else "")}
                    for m in parse_messages(step.input_text)]
            total += count(model, msgs)
    return total


def judge_tokens(ev: Evaluation, combined: Judge, separate: Judge, model: str,
                 ) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    rendered = render(ev, combined.config.compaction)
    for r in combined.requests(ev, rendered):
        n = count(model, r.messages)
        out["default"] += n
        out["default_calls"] += 1
        # sent besides the messages under the default response_format json_schema (the
        # provider counts it as input too); its JSON text, counted apart
        out["default_schema"] += count_text(model, json.dumps(r.schema))
        for k, v in breakdown(rendered, n, model).items():
            out["part_" + k] += v
    for r in separate.requests(ev, rendered):
        out[r.name] += count(model, r.messages)
        out["separate"] += count(model, r.messages)
    gen = separate.redacted(prompting.rubric_generate(separate.prompts, rendered.task))
    check = separate.redacted(prompting.rubric_verify(separate.prompts, rendered, CRITERIA))
    out["rubric_generate"] = count(model, gen.messages)
    out["rubric_verify"] = count(model, check.messages)
    return out


def corpus_traces() -> Iterator[tuple[str, Trace]]:
    """(stack, run) for every completed run of the conformance corpus
    (``tests/conformance/hung.py``)."""
    sys.path.insert(0, str(CORPUS.parent))  # hung.py imports ``conformance.corpus``
    from conformance import corpus, hung

    for stack in corpus.stacks():
        for trace in hung.completed_runs(stack):
            yield stack, trace


def run_set(path: Path | None, model: str, limit: int | None) -> dict[str, Any]:
    evaluator = Evaluator(Config())
    base = JudgeConfig(model=model)
    combined, separate = Judge(base), Judge(replace(base, combined=False))
    rows: list[tuple[int, dict[str, int]]] = []
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # stack -> [agent, judge]
    errors: list[Any] = []
    calls = 0
    started = time.monotonic()
    traces = (((None, t) for t in load_path(path, on_error=errors.append)) if path
              else corpus_traces())
    for group, trace in traces:
        ev = evaluator.evaluate(trace)
        agent = agent_input_tokens(ev.trajectory, model)
        if agent:
            rows.append((agent, judge_tokens(ev, combined, separate, model)))
            calls += len(ev.trajectory.llm_steps)
            if group:
                groups[group][0] += agent
                groups[group][1] += rows[-1][1]["default"]
        if limit and len(rows) >= limit:
            break
    agent_total = sum(a for a, _ in rows)

    def pct(key: str) -> float:
        return round(100 * sum(j.get(key, 0) for _, j in rows) / agent_total, 2)

    keys = ("default", "default_schema", *SEPARATE, "separate", "rubric_generate",
            "rubric_verify")
    return {
        "traces": len(rows), "load_errors": len(errors), "agent_input_tokens": agent_total,
        "judge_input_tokens": {k: sum(j.get(k, 0) for _, j in rows) for k in keys},
        "percent_of_agent": {k: pct(k) for k in keys},
        "median_trace_percent_default": round(statistics.median(
            100 * j["default"] / a for a, j in rows), 2) if rows else None,
        "default_calls_per_trace": round(sum(j["default_calls"] for _, j in rows)
                                         / max(len(rows), 1), 2),
        "default_breakdown_percent": share_of_default(rows),
        "agent_llm_calls_per_trace": round(calls / max(len(rows), 1), 1),
        "seconds": round(time.monotonic() - started, 1),
        "default_percent_by_stack": {g: round(100 * j / a, 2) for g, (a, j) in groups.items()},
    }


def share_of_default(rows: list[tuple[int, dict[str, int]]]) -> dict[str, float]:
    """Each part's share of the default call's tokens, %, summed over the traces."""
    total = sum(j["default"] for _, j in rows) or 1
    keys = sorted({k for _, j in rows for k in j if k.startswith("part_")})
    return {k[5:]: round(100 * sum(j.get(k, 0) for _, j in rows) / total, 1) for k in keys}


def print_table(results: dict[str, dict[str, Any]]) -> None:
    head = ("| dataset | traces | agent input tok | **default (combined) %** | median/trace % "
            "| calls/trace | step % | process % | trace % | outcome % | separate total % "
            "| rubric gen + check % | + response_format schema % |")
    print(head)
    print("|---" * 13 + "|")
    for name, r in results.items():
        p = r["percent_of_agent"]
        print(f"| {name} | {r['traces']} | {r['agent_input_tokens']:,} | **{p['default']}** | "
              f"{r['median_trace_percent_default']} | {r['default_calls_per_trace']} | "
              f"{p['step']} | {p['process']} | {p['trace']} | {p['outcome']} | "
              f"{p['separate']} | {p['rubric_generate']} + {p['rubric_verify']} | "
              f"+{p['default_schema']} |")
    cols = ("frame", "task", "trajectory_llm_input", "trajectory_llm_output",
            "trajectory_tool_args", "trajectory_tool_result", "trajectory_headers",
            "trajectory_errors", "final_output_findings")
    print("\nShare of the default call's tokens, %:\n")
    print("| dataset | agent LLM calls/trace | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 2) + "|")
    for name, r in results.items():
        b = r["default_breakdown_percent"]
        print(f"| {name} | {r['agent_llm_calls_per_trace']} | "
              + " | ".join(str(b.get(c, 0.0)) for c in cols) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    ap.add_argument("--only", default=",".join(SETS), help="tau,trail,swe,corpus")
    ap.add_argument("--limit", type=int, default=None, help="traces per dataset")
    ap.add_argument("--model", default="gpt-4o-mini", help="tokenizer / judge model")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for key in args.only.split(","):
        name, rel = SETS[key]
        results[name] = run_set(args.datasets / rel if rel else None, args.model, args.limit)
        print(f"{name}: {json.dumps(results[name])}", file=sys.stderr)
    print_table(results)
    for name, r in results.items():
        if r["default_percent_by_stack"]:
            print(f"\n{name}, default call % of agent input, per stack:\n")
            print("| stack | % |\n|---|---|")
            for stack, p in sorted(r["default_percent_by_stack"].items()):
                print(f"| {stack} | {p} |")
    agent = sum(r["agent_input_tokens"] for r in results.values())
    for key in ("default", "separate"):
        judge = sum(r["judge_input_tokens"][key] for r in results.values())
        print(f"\nall traces pooled, {key}: {judge:,} / {agent:,} = "
              f"{100 * judge / max(agent, 1):.2f} %")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
