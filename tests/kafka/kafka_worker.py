"""A Kafka worker process for the kill -9 test and bench/kafka.py.

    python tests/kafka/kafka_worker.py --bootstrap HOST:PORT,... --topic T --db stored.db \
        [--worker-index I --worker-count N] [--engine mini|real]

Runs ``KafkaConsumerStage`` (static assignment, worker I of N) feeding ``--engine``: ``mini``
(tests/kafka/kafka_mini_engine.py, SQLite rows keyed by trace id) or ``real`` (the service's
``otel_eval.assemble.engine.Engine`` with its store: ``--db`` a SQLite file, or a ``postgresql://``
URL shared by every worker). SIGTERM shuts down gracefully
(drain, commit); SIGKILL is the crash under test. Prints ``ready`` once consuming; with
``--gate`` it prints ``ready`` before starting and waits for a line on stdin (bench/kafka.py
releases all workers at once). Its siblings import as the script's directory; the launcher
sets ``PYTHONPATH`` to the checkout so that its ``otel_eval`` is the one run.
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import signal
import sys
import time
from typing import Any

from kafka_mini_engine import MiniEngine

from otel_eval.base.kafka.config import KafkaConfig
from otel_eval.receive.kafka.consumer import KafkaConsumerStage


def build_engine(kind: str, db: str) -> tuple[Any, Any]:
    """(engine, close) for ``kind``."""
    if kind == "mini":
        engine = MiniEngine(db)
        return engine, engine.close
    from otel_eval.app.config import Config, replace
    from otel_eval.assemble.engine import Engine
    from otel_eval.assemble.store_health import StoreHealth
    from otel_eval.evaluate.evaluator import Evaluator
    from otel_eval.evaluate.stage import InProcess
    from otel_eval.store import is_postgresql_url, open_store
    from otel_eval.telemetry.metrics import Metrics

    cfg = replace(Config(), **{"assembly.grace_s": 0.2,
                               "store.url" if is_postgresql_url(db) else "store.path": db})
    store = open_store(db)
    real = Engine(InProcess(Evaluator(cfg), store),
                  StoreHealth(store.location, clock=time.monotonic), Metrics(),
                  assembly=cfg.assembly, tick_interval_s=0.05)
    real.start()

    def close() -> None:
        real.shutdown(5.0)
        store.close()

    return real, close


def die_with_parent() -> None:
    """Linux: SIGKILL this worker when the process that started it dies, so a test runner
    killed mid-test (no teardown) leaves no worker behind."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


async def main(args: argparse.Namespace) -> None:
    cfg = KafkaConfig(brokers=args.bootstrap, topic=args.topic, logs_topic=args.logs_topic,
                      group_id=args.group,
                      assignment="static", worker_index=args.worker_index,
                      worker_count=args.worker_count, commit_interval_s=args.commit_interval_s,
                      max_inflight_records=args.max_inflight)
    engine, close = build_engine(args.engine, args.db)
    stage = KafkaConsumerStage(cfg, engine)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    # A Python-level handler, not loop.add_signal_handler: that one delivers the signal through
    # the loop's self-pipe and loses it when the pipe is momentarily full.
    signal.signal(signal.SIGTERM, lambda _s, _f: loop.call_soon_threadsafe(stop.set))
    if args.gate:
        print("ready", flush=True)
        await loop.run_in_executor(None, sys.stdin.readline)
    await stage.start()
    if not args.gate:
        print("ready", flush=True)
    await stop.wait()
    await stage.shutdown(5.0)
    close()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", default="otlp_spans")
    p.add_argument("--logs-topic", default="", help="also consume this logs topic")
    p.add_argument("--group", default="otel-eval")
    p.add_argument("--db", required=True)
    p.add_argument("--worker-index", type=int, default=0)
    p.add_argument("--worker-count", type=int, default=1)
    p.add_argument("--commit-interval-s", type=float, default=0.2)
    p.add_argument("--max-inflight", type=int, default=20_000)
    p.add_argument("--engine", choices=("mini", "real"), default="mini")
    p.add_argument("--gate", action="store_true", help="wait for a stdin line before starting")
    die_with_parent()
    faulthandler.register(signal.SIGUSR1)  # stack dump into the log, for a stuck worker
    asyncio.run(main(p.parse_args()))
