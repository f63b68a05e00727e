"""Self-metrics of the evaluation worker processes (``workers.pool``)."""

from __future__ import annotations

from otel_eval.telemetry.declare import Declarer


class WorkerMetrics:
    """Worker processes: running, restarted, and the traces each holds."""

    def __init__(self, d: Declarer) -> None:
        self.g_running = d.gauge("workers_running", "Evaluation worker processes running.")
        self.g_inflight = d.gauge(
            "workers_inflight_traces", "Traces handed to an evaluation worker process and "
            "not yet stored, by worker index.", ["worker"])
        self.c_restarts = d.counter("workers_restarts", "Evaluation worker processes "
                                     "restarted after they died, by worker index.", ["worker"])
        self.c_hung = d.counter("workers_hung", "Evaluation worker processes killed (then "
                                "restarted) for holding a batch of traces past "
                                "evaluation.worker_timeout_s, by worker index.", ["worker"])
        self.c_retried = d.counter("workers_retried_traces", "Traces handed again to a "
                                    "restarted worker: the one holding them died.")

    def running(self, n: int) -> None:
        self.g_running.set(n)

    def pool_started(self, workers: int) -> None:
        """Declare each worker index's restart and in-flight series at 0 when the pool starts:
        a restart counter born at 1 hides the first restart from increase(), and
        OtelEvalWorkerRestarts with it."""
        for worker in range(workers):
            self.c_restarts.labels(str(worker))
            self.c_hung.labels(str(worker))
            self.g_inflight.labels(str(worker))

    def inflight(self, worker: int, n: int) -> None:
        self.g_inflight.labels(str(worker)).set(n)

    def restarted(self, worker: int, retried: int) -> None:
        self.c_restarts.labels(str(worker)).inc()
        self.c_retried.inc(retried)

    def hung(self, worker: int) -> None:
        self.c_hung.labels(str(worker)).inc()
