"""The ``otel-eval`` command line's flags: one parser per command (``build_parser``) and the
configuration the flags give (``config_from_args``: the file, or the embedded defaults, with
each flag applied over it). ``app.cli`` runs the commands."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, TypeAlias

from otel_eval.app.config import Config, load_config, replace
from otel_eval.app.gate import EVAL_EXIT_CODES, FAIL_ON
from otel_eval.base.configcheck import is_ascii_digits, parse_endpoint
from otel_eval.evaluate.detectors.config import (
    BUDGET_NAMES,
    SESSION_BUDGET_NAMES,
    parse_budget,
)
from otel_eval.evaluate.sessions.config import SESSION_BUDGETS
from otel_eval.store.base import is_postgresql_url

__all__ = ["build_parser", "config_from_args"]

# What ``otel-eval --help`` says the command is.
DESCRIPTION = ("The ``otel-eval`` command: ``serve``, ``eval``, ``show``, ``inspect``, "
               "``replay``, ``issues``,\n``config``, ``train``, ``calibrate``.")


def _endpoint(value: str) -> str:
    try:
        parse_endpoint(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return value


def _workers(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of workers (0 or more)")
    return n


def _at_least_one(noun: str, digits: int) -> Callable[[str], int]:
    """A parser of a whole number of ``noun``, 1 or more, of at most ``digits`` digits."""
    def parse(value: str) -> int:
        n = int(value) if is_ascii_digits(value) and len(value) <= digits else 0
        if n < 1:
            raise argparse.ArgumentTypeError(f"{value!r} is not a number of {noun} (1 or more)")
        return n

    return parse


def _fail_on(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    wrong = [n for n in names if n not in FAIL_ON]
    if wrong or not names:
        raise argparse.ArgumentTypeError(
            f"{value!r}: --fail-on takes {', '.join(FAIL_ON)} (comma-separated)")
    return names


def _usd(value: str) -> float:
    try:
        usd = float(value)
    except ValueError:
        usd = -1.0
    if not (math.isfinite(usd) and usd >= 0):
        raise argparse.ArgumentTypeError(f"{value!r} is not an amount in USD (0 or more)")
    return usd


def _budget(value: str) -> tuple[str, float]:
    try:
        return parse_budget(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


_TURNS_HELP = ("tau-bench runs as conversations: a trace per user message, tied by a "
               "conversation id (a session per run); default: a trace per run")


def _config(p: argparse.ArgumentParser, uses: str = "") -> None:
    """``--config FILE``, the same for every command that reads the configuration."""
    p.add_argument("--config", metavar="FILE", action="append",
                   help="YAML configuration (default: embedded)" + (f": {uses}" if uses else "")
                   + "; repeatable, each file over the ones before it, key by key")


def _common(p: argparse.ArgumentParser) -> None:
    _config(p)
    p.add_argument("--budget", metavar="NAME=VALUE", type=_budget, action="append",
                   default=[], help=f"budget override, repeatable; NAME in "
                   f"{', '.join(BUDGET_NAMES + SESSION_BUDGET_NAMES)}")
    p.add_argument("--references", metavar="FILE",
                   help="references: expected calls and/or final answers per task id (JSON "
                   "lines, or tau-bench task files)")
    p.add_argument("--judge", metavar="MODEL", help="litellm model string of the LLM judge")
    p.add_argument("--judge-api-base", metavar="URL", help="API base URL for the judge")


def _model(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", metavar="MODEL", help="success predictor: `default` (shipped), "
                   "a model written by `otel-eval train`, or '' for none "
                   "(prediction.model_path): prediction.p_success per trace")


# The subcommands' parsers (``add_subparsers``): each command adds its own.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def _global_flags(p: argparse.ArgumentParser, default: Any) -> None:
    """The flags every command takes, before the command or after it: on the top parser
    with their defaults, on each command's with none (``SUPPRESS``: a flag given before the
    command is not reset by the command's parser)."""
    p.add_argument("--log-level", default=default, type=str.upper,
                   choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                   help="log level (any case; before or after the command; default: INFO)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="otel-eval", description=DESCRIPTION)
    _global_flags(parser, "INFO")
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_command(sub)
    _eval_command(sub)
    _train_command(sub)
    _replay_command(sub)
    _config_command(sub)
    _show_command(sub)
    _inspect_command(sub)
    _calibrate_command(sub)
    _issues_command(sub)
    for command in sub.choices.values():
        _global_flags(command, argparse.SUPPRESS)
    return parser


def _serve_command(sub: Commands) -> None:
    serve = sub.add_parser("serve", help="run the streaming service (OTLP in, results out)")
    _common(serve)
    serve.add_argument("--grpc-endpoint", type=_endpoint, metavar="HOST:PORT")
    serve.add_argument("--http-endpoint", type=_endpoint, metavar="HOST:PORT")
    serve.add_argument("--admin-endpoint", type=_endpoint, metavar="HOST:PORT")
    serve.add_argument("--store", metavar="PATH|URL", help="SQLite file for results, or a "
                       "postgresql:// URL (store.url: the fleet's shared store)")
    serve.add_argument("--workers", type=_workers, metavar="N",
                       help="evaluation worker processes (evaluation.workers; 0: one per "
                       "core, 1: none, evaluate in the serving process)")
    serve.add_argument("--allow-insecure-non-loopback", action="store_true",
                       help="listen beyond loopback without TLS and tokens (receiver and "
                            "admin allow_insecure_non_loopback); restrict access otherwise")
    serve.add_argument("--events-endpoint", type=_endpoint, metavar="HOST:PORT",
                       help="OTLP/gRPC endpoint for gen_ai.evaluation.result events")
    serve.add_argument("--forward-endpoint", type=_endpoint, metavar="HOST:PORT",
                       help="OTLP/gRPC endpoint receiving the evaluated, stamped spans")
    serve.add_argument("--kafka-brokers", metavar="HOST:PORT,...",
                       help="consume OTLP traces from Kafka")
    serve.add_argument("--kafka-publish", action="store_true",
                       help="receivers publish to Kafka instead of assembling")
    _model(serve)


def _eval_command(sub: Commands) -> None:
    codes = "; ".join(f"{code}: {meaning}" for code, meaning in EVAL_EXIT_CODES.items())
    ev = sub.add_parser("eval", help="evaluate trace files offline",
                        epilog=f"exit codes: {codes.replace('`', '')}")
    _common(ev)
    ev.add_argument("paths", nargs="+", metavar="PATH")
    ev.add_argument("--format", choices=["table", "jsonl"], default="table")
    ev.add_argument("--max-cost-usd", type=_usd, metavar="USD",
                    help="stop judging once the judge has spent this much")
    ev.add_argument("--turns", action="store_true", help=_TURNS_HELP)
    ev.add_argument("--fail-on", type=_fail_on, action="extend", default=[],
                    metavar="WHAT[,WHAT...]",
                    help="exit 3 when a trace or a conversation trips WHAT (repeatable): "
                         "'failed' (its verdict did not pass) or a detector ("
                         + ", ".join(FAIL_ON[1:]) + "; a finding of it at warning or error, "
                         "notes never)")
    _model(ev)


def _train_command(sub: Commands) -> None:
    tr = sub.add_parser("train", help="train the success predictor on labelled runs")
    _common(tr)
    tr.add_argument("paths", nargs="+", metavar="PATH")
    tr.add_argument("--labels", metavar="LABELS", action="append", default=[],
                    help='JSON lines {"trace_id"|"task_id": ..., "outcome": true|false}, or a '
                         "SWE-bench results summary (instances[].resolved); repeatable; "
                         "these win over the outcomes the runs carry")
    tr.add_argument("--feedback", metavar="STORE",
                    help="labels: the outcomes users recorded for these runs in serve's store "
                         "(POST /v1/feedback, the web view's form; a SQLite PATH or a "
                         "postgresql:// URL, read only); after --labels' trace ids, before "
                         "their task ids and the outcomes the runs carry")
    tr.add_argument("--out", metavar="MODEL", required=True, help="model file to write")
    tr.add_argument("--name", default="success", help="model name (default: success)")


def _replay_command(sub: Commands) -> None:
    rp = sub.add_parser("replay", help="re-emit trace files as OTLP spans")
    _config(rp, "trajectory.task_id_attribute and outcome_attribute, the attributes a "
            "tau-bench or mini-swe-agent run's task id and outcome are written to")
    rp.add_argument("paths", nargs="+", metavar="PATH")
    rp.add_argument("--endpoint", type=_endpoint, required=True, metavar="HOST:PORT")
    rp.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    rp.add_argument("--turns", action="store_true", help=_TURNS_HELP)


def _config_command(sub: Commands) -> None:
    cf = sub.add_parser("config", help="print the configuration reference (defaults, or the "
                        "effective configuration of --config FILE) as commented YAML")
    _config(cf)


def _show_command(sub: Commands) -> None:
    sh = sub.add_parser("show", help="one evaluated run as a tree of steps, each finding and "
                        "judge critique on its step")
    _common(sh)
    sh.add_argument("target", metavar="TRACE_ID|FILE",
                    help="a trace id (read from the store) or a trace file (evaluated now)")
    sh.add_argument("--store", metavar="PATH|URL", help="SQLite file or postgresql:// URL of "
                    "serve (default: store.url, else store.path)")
    sh.add_argument("--trace", metavar="TRACE_ID", help="the trace to show, when FILE holds "
                    "several")
    sh.add_argument("--format", choices=["text", "json"], default="text")
    sh.add_argument("--width", type=_at_least_one("columns", 6), default=100, metavar="COLUMNS",
                    help="fold tool results and LLM content to this width (100)")
    sh.add_argument("--full", action="store_true", help="unfold tool results and LLM content")


def _inspect_command(sub: Commands) -> None:
    ins = sub.add_parser("inspect", help="how each span of a trace was read: which convention "
                         "and attribute supplied each field, what stayed unknown and why")
    _common(ins)
    ins.add_argument("target", metavar="TRACE_ID|FILE",
                     help="a trace file (every trace in it), or a trace id looked for in PATH")
    ins.add_argument("paths", nargs="*", metavar="PATH",
                     help="trace files or directories to look for TRACE_ID in")
    ins.add_argument("--trace", metavar="TRACE_ID", help="only this trace of FILE")
    ins.add_argument("--format", choices=["text", "json"], default="text")


def _calibrate_command(sub: Commands) -> None:
    cal = sub.add_parser("calibrate", help="the judge checked against people: AUC and "
                         "Cohen's kappa of every judge score and p_success against the "
                         "outcomes recorded through POST /v1/feedback, per agent")
    _config(cal, "the store and the judge's pass thresholds")
    cal.add_argument("--store", metavar="PATH|URL", help="SQLite file or postgresql:// URL of "
                     "serve (default: store.url, else store.path)")
    cal.add_argument("--limit", type=_at_least_one("runs", 18), default=10_000, metavar="N",
                     help="the N most recently labelled runs (10000)")
    cal.add_argument("--format", choices=["table", "json"], default="table")


def _issues_command(sub: Commands) -> None:
    iss = sub.add_parser("issues", help="cluster critiques and findings into recurring issues")
    _common(iss)
    iss.add_argument("paths", nargs="+", metavar="PATH")
    iss.add_argument("--format", choices=["table", "json"], default="table")


def config_from_args(args: argparse.Namespace) -> Config:
    """The configuration file (or the defaults) with the command-line flags applied."""
    cfg = load_config(args.config)
    changes: dict[str, Any] = {}
    for flag, key in (("grpc_endpoint", "receiver.grpc_endpoint"),
                      ("http_endpoint", "receiver.http_endpoint"),
                      ("admin_endpoint", "admin.endpoint"), ("store", "store.path"),
                      ("events_endpoint", "export.events_endpoint"),
                      ("forward_endpoint", "export.forward_endpoint"),
                      ("kafka_brokers", "kafka.brokers"), ("judge", "judge.model"),
                      ("judge_api_base", "judge.api_base"),
                      ("model", "prediction.model_path"), ("workers", "evaluation.workers")):
        value = getattr(args, flag, None)
        if value is None:
            continue
        if key == "store.path" and is_postgresql_url(value):
            changes["store.url"] = value
        elif key == "store.path":  # a file given on the command line wins over store.url
            changes.update({"store.path": value, "store.url": ""})
        else:
            changes[key] = value
    if getattr(args, "budget", None):  # repeated --budget: the last value of a name wins
        budgets = dict(args.budget)
        for name, (field, whole) in SESSION_BUDGETS.items():  # a conversation's budgets
            if name in budgets:
                value = budgets.pop(name)
                changes[f"sessions.{field}"] = int(value) if whole else value
        if budgets:
            changes["detectors.budget_overrides"] = {**cfg.detectors.budget_overrides,
                                                     **budgets}
    if getattr(args, "kafka_publish", False):
        changes["kafka.publish"] = True
    if getattr(args, "allow_insecure_non_loopback", False):
        changes["receiver.allow_insecure_non_loopback"] = True
        changes["admin.allow_insecure_non_loopback"] = True
    return replace(cfg, **changes) if changes else cfg
