"""The ``otel-eval`` command: its flags parsed (``cli_args``), then the command run: ``serve``,
``eval``, ``show``, ``inspect``, ``replay``, ``issues``, ``config``, ``train``, ``calibrate``."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from otel_eval.app.cli_args import build_parser, config_from_args
from otel_eval.app.config import Config, load_config
from otel_eval.app.gate import Gate
from otel_eval.base.configcheck import ConfigError, StartupError
from otel_eval.base.printable import configure_logging, printable, printable_cut
from otel_eval.base.steps import tokens_total
from otel_eval.base.words import columns, padded

if TYPE_CHECKING:
    from otel_eval.app.offline import EvalRun

log = logging.getLogger("otel_eval")

# grpc's C core logs to stderr on its own, outside ``logging``: at its default verbosity a
# line per failed TLS handshake (a plain-text exporter or a scanner at a TLS gRPC port),
# unlimited. Its errors still show; an operator's own setting wins. Set before grpc loads.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

# The exit status each part of the running command has earned so far (a file it could not
# read: 1): what ``main`` returns when the output pipe closes before the command ends.
_earned: list[Callable[[], int]] = []


def run_from_args(args: argparse.Namespace, cfg: Config | None = None,
                  bounded: bool = True) -> EvalRun:
    """The offline engine for ``eval`` / ``issues`` / ``show``, configured by the flags."""
    from otel_eval.app.offline import EvalRun

    run = EvalRun(cfg or config_from_args(args), getattr(args, "paths", ()),
                  references_path=args.references,
                  max_cost_usd=getattr(args, "max_cost_usd", None),
                  turns=getattr(args, "turns", False), bounded=bounded)
    _earned.append(lambda: 1 if run.failed_files else 0)
    return run


def _unpredicted(args: argparse.Namespace) -> Config:
    """The flags' configuration with no success model: training reads the features alone
    (and may be writing the model the configuration names)."""
    from otel_eval.evaluate.predict.config import PredictionConfig

    return dataclasses.replace(config_from_args(args), prediction=PredictionConfig(model_path=""))


def cmd_eval(args: argparse.Namespace, out: TextIO) -> int:
    from otel_eval.evaluate.judge.trials import trials_of
    from otel_eval.evaluate.sessions.offline import SessionCollector

    run = run_from_args(args)
    gate = Gate(args.fail_on)
    _earned.append(gate.code)
    rows: list[_Row] = []  # --format table: each trace's cells, not its result
    trials = []
    sessions = SessionCollector(run.cfg.sessions, run.evaluator.predictor)
    evaluated = 0
    for evaluation in run.evaluations():
        evaluated += 1
        gate.add(evaluation)
        trials += trials_of([evaluation])
        if args.format == "jsonl":  # = json.dumps(to_json()), from the text stored
            out.write(evaluation.to_json_ascii() + "\n")
        else:
            rows.append(_table_row(evaluation.to_json()))
        if evaluation.trajectory.session_id is not None:  # a turn: its session gated too
            sessions.add(evaluation.to_json(), len(evaluation.to_json_text()))
    if args.format == "table":
        _print_table(rows, out)
    for record in sessions.records():  # after the trace records (issue 27)
        gate.add_session(record)
        if args.format == "jsonl":
            out.write(json.dumps(record) + "\n")
    line = run.cost_line()
    if line:
        print(line, file=sys.stderr)
    if run.not_runs:
        print(f"otel-eval: {run.not_runs} trace(s) not evaluated: no agent run (only setup "
              "operations such as create_agent)", file=sys.stderr)
    _print_trials(trials, sys.stderr)
    gate.report(sys.stderr)
    if not (evaluated or run.not_runs or run.failed_files):  # as inspect and show: said
        print("otel-eval eval: no trace in " + printable(" ".join(map(str, args.paths)))
              + " (no trace file, or none holding a span)", file=sys.stderr)
        return 1
    return max(1 if run.failed_files else 0, gate.code())  # EVAL_EXIT_CODES


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from otel_eval.app.inspection import render_text, report
    from otel_eval.app.show import is_trace_id
    from otel_eval.evaluate.trajectory import build_trajectory
    from otel_eval.receive.loaders import load_paths

    cfg = config_from_args(args).trajectory
    if Path(args.target).exists():
        paths, wanted = [args.target, *args.paths], args.trace
    elif is_trace_id(args.target) and args.paths:
        paths, wanted = list(args.paths), args.target
    else:
        print(f"otel-eval inspect: {args.target!r} is no trace file; a trace id needs the "
              "trace files to look in (serve stores results, not spans)", file=sys.stderr)
        return 1
    reports = []
    failed = _FileErrors("inspect")
    for trace in load_paths(paths, config=cfg, on_error=failed.report):  # as eval reads them
        if wanted and trace.trace_id != wanted.lower():
            continue
        keys = {s.span_id: list(s.attributes) for s in trace.spans}
        reports.append(report(build_trajectory(trace, cfg), keys))
    if not reports:
        print("otel-eval inspect: no such trace" if wanted else "otel-eval inspect: no trace",
              file=sys.stderr)
        return 1
    if args.format == "json":
        out.write(json.dumps(reports, indent=2) + "\n")
    else:
        out.write(render_text(reports))
    return 1 if failed.paths else 0


class _FileErrors:
    """The loaders' ``on_error`` for a command: each problem on stderr (it names the file),
    the files counted; the command goes on with the rest and exits 1 (as ``eval``)."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.paths: set[str] = set()
        _earned.append(lambda: 1 if self.paths else 0)

    def report(self, error: Exception) -> None:
        self.paths.add(getattr(error, "path", ""))
        print(f"otel-eval {self.command}: {printable(str(error))}", file=sys.stderr)


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from pathlib import Path

    from otel_eval.app.show import ShowError, from_run, from_store, is_trace_id, render_text
    from otel_eval.evaluate.judge.redact import Redactor
    from otel_eval.outputs.ui.run import tree

    failed = 0  # a file read with a problem (reported): exit 1 after the run, as eval
    try:
        if Path(args.target).exists() or not is_trace_id(args.target):
            run = run_from_args(args)
            run.paths = [args.target]
            body = from_run(run.evaluations(), args.target, args.trace)
            failed = run.failed_files
        else:
            _stored_as_evaluated(args)
            body = from_store(args.store or config_from_args(args).store.target, args.target)
    except ShowError as e:
        print(f"otel-eval show: {e}", file=sys.stderr)
        return 1
    shown = tree(body)
    if args.format == "json":
        out.write(json.dumps(shown, indent=2) + "\n")
    else:
        redactor = Redactor(config_from_args(args).judge.redaction)
        out.write(render_text(shown, width=args.width, full=args.full, redact=redactor.redact))
    return 1 if failed else 0


# ``show``'s flags that change an evaluation (``_common``'s but --config), by their names
_EVALUATING = (("budget", "--budget"), ("references", "--references"), ("judge", "--judge"),
               ("judge_api_base", "--judge-api-base"))


def _stored_as_evaluated(args: argparse.Namespace) -> None:
    """A stored run is shown as it was evaluated (the store keeps results, not spans: it is
    not evaluated again): ShowError naming the flags given that would change it, never a
    silent ignore."""
    from otel_eval.app.show import ShowError

    given = [flag for name, flag in _EVALUATING if getattr(args, name, None)]
    if given:
        raise ShowError(f"{', '.join(given)} would evaluate the run anew, and a stored run "
                        "is shown as it was evaluated (the store keeps results, not spans): "
                        "show its trace file with them, or drop them")


def _print_trials(trials: Sequence[Any], out: TextIO) -> None:
    """Pass@k (any trial passes) and Pass^k (all pass) per task judged more than once, with
    k = the task's judged trials, and the lucky passes (outcome passed, process did not)."""
    from otel_eval.evaluate.judge.trials import summarize

    tasks = [t for t in summarize(trials).values() if t.n >= 2]
    if not tasks:
        return
    out.write("task  trials  passes  pass@k  pass^k  lucky passes\n")
    for t in sorted(tasks, key=lambda t: t.task_id):  # task ids: span content, escaped
        out.write(f"{printable(t.task_id)}  {t.n}  {t.passes}  {t.pass_at_k:.2f}  "
                  f"{t.pass_hat_k:.2f}  {printable(', '.join(t.lucky)) or '-'}\n")
    mean_at = sum(t.pass_at_k or 0.0 for t in tasks) / len(tasks)
    mean_hat = sum(t.pass_hat_k or 0.0 for t in tasks) / len(tasks)
    lucky = sum(len(t.lucky) for t in tasks)
    out.write(f"{len(tasks)} tasks with 2+ judged trials: mean pass@k {mean_at:.2f}, "
              f"pass^k {mean_hat:.2f}; {lucky} lucky passes\n")


# A trace's line of the table: its cells, its p_success (None: not predicted), and whether
# it failed. The table is printed once every width is known: a line is kept per trace, never
# its whole result (up to ``trajectory.max_result_bytes`` each, ~100x the line).
_Row = tuple[tuple[str, ...], str | None, bool]


def _table_row(b: dict[str, Any]) -> _Row:
    v = b.get("verdict")
    kinds = sorted({f"{f['detector']}:{f['kind']}" for f in b["findings"]})
    tokens = tokens_total(b["usage"])
    # span content (the agent; a file's trace id): escaped as ``show`` does, cut between
    # escapes
    cells = (printable(b["trace_id"]), printable_cut(str(b["agent"] or "-"), 24),
             printable(b["status"]),
             str(b["counts"]["llm_calls"]), str(b["counts"]["tool_calls"]),
             "-" if tokens is None else str(tokens),
             "-" if v is None else ("pass" if v["passed"] else "FAIL"),
             printable_cut(", ".join(kinds), 60) or "-")
    p = f"{b['prediction']['p_success']:.2f}" if "prediction" in b else None
    return cells, p, bool(v and not v["passed"])


def _print_table(rows: Sequence[_Row], out: TextIO) -> None:
    predicted = any(p is not None for _, p, _ in rows)  # a p_success column with --model
    head = ("trace_id", "agent", "status", "llm", "tools", "tokens", "verdict",
            *(("p_success",) if predicted else ()), "findings")
    lines = [head]
    for cells, p, _ in rows:
        lines.append((*cells[:-1], *((p or "-",) if predicted else ()), cells[-1]))
    widths = [max(columns(r[i]) for r in lines) for i in range(len(head) - 1)]
    for r in lines:
        out.write("  ".join(padded(c, w) for c, w in zip(r, widths, strict=False)) + "  "
                  + r[-1] + "\n")
    failed = sum(1 for _, _, f in rows if f)
    out.write(f"\n{len(rows)} traces, {failed} failed\n")


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    """Exit 1 when the receiver rejected spans (its partial success says how many, why), the
    exporter gave up on a batch (the receiver down or refusing: the replay stops there) or
    a file could not be loaded (reported on stderr; the other files are replayed)."""
    from otel_eval.app.replay import Rejections, ReplayError, Sent, replay
    from otel_eval.receive.loaders import load_paths

    cfg = config_from_args(args).trajectory  # the task id and outcome attributes written
    rejected, sent = Rejections(), Sent()
    failed = _FileErrors("replay")
    try:  # the files one stream, as eval reads them: the traces eval evaluates
        n = replay(load_paths(args.paths, config=cfg, turns=args.turns,
                              on_error=failed.report),
                   args.endpoint, protocol=args.protocol, rejections=rejected, sent=sent)
    except ReplayError as e:  # the receiver down or refusing: the exporter gave up
        print(f"otel-eval replay: {e} (to {args.endpoint})", file=sys.stderr)
        return 1
    out.write(f"replayed {n} spans to {args.endpoint} over OTLP/{args.protocol}: "
              f"{n - rejected.spans} accepted, {rejected.spans} rejected\n")
    if sent.log_records:  # the GenAI event log records of the files (their content)
        out.write(f"and {sent.log_records} log records: "
                  f"{sent.log_records - rejected.log_records} accepted, "
                  f"{rejected.log_records} rejected\n")
    if rejected.spans or rejected.log_records:
        records = (f" and {rejected.log_records} of {sent.log_records} log records"
                   if sent.log_records else "")
        print(f"otel-eval replay: the receiver rejected {rejected.spans} of {n} spans{records}: "
              f"{printable(rejected.summary())}", file=sys.stderr)
        return 1
    return 1 if failed.paths else 0


def cmd_serve(args: argparse.Namespace) -> int:
    from otel_eval.app.service import Options, Service

    cfg = config_from_args(args)
    svc = Service(cfg, Options(references_path=args.references))
    _tune_gc()
    return svc.run_until_signal()


def _tune_gc() -> None:
    """The per-trace objects (spans, steps, findings) are short-lived and acyclic: the cyclic
    collector's generation-0 runs, triggered every 700 allocations, cost ~16 % of serve's
    time walking them. Freeze what startup made and collect young objects less often."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def main(argv: Sequence[str] | None = None) -> int:
    """The command's exit code. Output into a pipe whose reader has gone (``| head``) ends
    the command quietly, with the exit code it had earned by then (0, or 1 once a file
    could not be read: a failure already reported is not undone by ``| head``): stdout is
    flushed here, where that is seen, and then pointed at /dev/null, so the interpreter's
    own flush at exit has nothing to fail on.
    Ctrl-C (SIGINT; ``serve`` handles its own once started) ends it quietly, exit code 130
    as a shell gives: what was printed is whole lines."""
    _earned.clear()
    code = 0
    try:
        try:
            code = _command(argv)
            return code
        finally:  # a small output is still in the buffer (``--help`` too: argparse exits)
            sys.stdout.flush()
    except BrokenPipeError:
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return max([code, *(earned() for earned in _earned)])
    except KeyboardInterrupt:
        return 130


def _command(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "serve":
            return cmd_serve(args)
        if args.command == "eval":
            return cmd_eval(args, sys.stdout)
        if args.command == "show":
            return cmd_show(args, sys.stdout)
        if args.command == "inspect":
            return cmd_inspect(args, sys.stdout)
        if args.command == "replay":
            return cmd_replay(args, sys.stdout)
        if args.command == "train":
            from otel_eval.evaluate.predict.train import cmd_train
            # uncut results: a run's features as the predictor reads them (before the cut)
            return cmd_train(args, run_from_args(args, _unpredicted(args), bounded=False),
                             sys.stdout)
        if args.command == "calibrate":
            from otel_eval.app.calibrate import cmd_calibrate
            return cmd_calibrate(args, load_config(args.config), sys.stdout)
        if args.command == "config":
            from otel_eval.app.configdoc import reference
            sys.stdout.write(reference(load_config(args.config)))
            return 0
        from otel_eval.app.issues import cmd_issues
        return cmd_issues(args, run_from_args(args), sys.stdout)
    except (ConfigError, StartupError) as e:  # one line naming the file, endpoint, setting
        print(f"otel-eval: {printable(str(e), keep=chr(10))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
