"""Stage: evaluate and store in N worker processes (``serve --workers N``).

    Engine.process -> WorkerPool.run(jobs) -> route: crc32(trace id) % N -> worker backlog
        -> (at most max_inflight traces per worker) sender thread -> pipe -> child.run
        <- pipe <- receiver thread -> done(jobs, outcomes) (engine: spool, metrics, sinks)

Promises:
- a trace id always goes to the same worker, and each worker takes its messages in order, so
  the revisions of a trace are stored in the order they were released;
- at most ``max_inflight`` traces per worker are in its pipe or being evaluated; the rest
  wait here, still counted as pending by the engine, whose bounds throttle the receivers;
- a worker that dies (kill -9, OOM), or whose result cannot be read (it is killed then), is
  restarted and the traces it held are handed to the new one again one at a time, in their
  original order: each alone in the worker, nothing sent beside it until it is stored. So a
  poison trace (one that kills its worker) takes only itself down: a death while a worker held
  one trace counts against that trace alone, and a trace whose worker died ``max_attempts``
  times while holding it alone is stored as an evaluation error (``WorkerLost``) by the main
  process instead (unless a worker stored an evaluation of its revision since it was first
  handed out: that one stands): never replayed forever, never dropped (a store refusing that
  write keeps it, retried as any refused write, and never sent to a worker again); every trace
  that was in flight beside it is evaluated normally. A trace the dead worker had already
  committed is stored again, not counted as superseded (``evaluate_and_store``);
- a worker that hangs (alive, never answering) is killed as if it had died: a watchdog
  thread kills a worker whose oldest batch has been its current one for longer than
  ``timeout_s`` (counted: ``hung``), and the crash path above restarts it and hands its
  traces again (a trace that hangs its worker alone ``max_attempts`` times is stored as
  ``WorkerLost``);
- ``drain`` waits until every trace handed to ``run`` is stored; ``shutdown`` then stops the
  workers (a stop message; SIGKILL past the deadline: they ignore SIGTERM and SIGINT, which
  a process group or a terminal may send them too, so that serve alone decides when they stop).

Each process is a fresh interpreter (``worker_process.WorkerProcess``), never a fork of this
process's threads, so restarting a worker while serving is safe.

Threads: per worker one sender (pickles and writes messages, which may block on a full pipe)
and one receiver (reads results, calls ``done``, restarts the worker when its pipe breaks);
the shared state below is guarded by ``_lock``. The two share the worker's connection, and
whichever ends last closes it (``_Pipe``).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import queue
import sys
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from otel_eval.app import worker as child
from otel_eval.app.worker_process import WorkerProcess, WorkerStartError
from otel_eval.base.backoff import Backoff
from otel_eval.base.model import Trace
from otel_eval.evaluate.stage import Done, Job, Outcome
from otel_eval.telemetry.workers import WorkerMetrics

log = logging.getLogger(__name__)

# Restart back-off after a worker fails to start again, seconds (doubling up to the cap).
_BACKOFF = Backoff(0.5, 30.0)
# Consecutive failed restarts after which the pool reports itself unhealthy.
_UNHEALTHY_AFTER = 3
_STOP = None  # the message that ends a worker


class WorkerLost(RuntimeError):
    """A trace whose worker process died ``max_attempts`` times while holding it."""


@dataclass
class _Item:
    job: Job
    done: Done


class _Pipe:
    """A worker's connection, shared by its sender and receiver threads: each calls
    ``release`` when it ends, and the last one closes it. Never closed under a write: the
    sender may have read the descriptor's number when the worker dies, and the next worker's
    socket pair, made right after, would get that number and the stale batch with it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._users = 2
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            self.conn.close()


@dataclass
class _Worker:
    index: int
    process: WorkerProcess | None = None
    outbox: queue.SimpleQueue[Any] = field(default_factory=queue.SimpleQueue)
    generation: int = 0
    alive: bool = False
    failed_starts: int = 0
    backlog: deque[_Item] = field(default_factory=deque)
    inflight: dict[int, list[_Item]] = field(default_factory=dict)  # by message id, sent order
    n_inflight: int = 0
    # when the oldest message in flight became the one the worker works on (monotonic, s):
    # when it was sent to an idle worker, or when the message before it was done
    busy_since: float = 0.0
    killed: int = 0  # the generation the watchdog killed as hung (killed once)


class WorkerPool:
    def __init__(self, workers: int, spec: child.WorkerSpec, metrics: WorkerMetrics,
                 give_up: Callable[[list[Trace], BaseException, dict[str, int]],
                                   list[Outcome]], *,
                 max_inflight: int = 64, max_attempts: int = 3,
                 start_timeout_s: float = 60.0, timeout_s: float = 300.0) -> None:
        self.spec = spec
        self.metrics = metrics
        # stores traces as evaluation errors (in this process), given when each was first
        # handed out (a worker's own commit of it since then stands); a store's refusal is an
        # outcome (``unstored``), never raised (``evaluate.stage.store_given_up``)
        self.give_up = give_up
        self.max_inflight = max_inflight
        self.chunk = max(1, max_inflight // 4)  # traces per message: a few messages in flight
        self.max_attempts = max_attempts
        self.start_timeout_s = start_timeout_s
        self.timeout_s = timeout_s  # a worker on one message longer than this is hung
        self._workers = [_Worker(i) for i in range(workers)]
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a job finished or a worker changed
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self.failure: BaseException | None = None  # a result could not be finished
        self._finishing = 0  # traces of a dead worker being stored as errors here

    def pids(self) -> list[int | None]:
        """Each worker's process id (None while it is down)."""
        with self._lock:
            return [w.process.pid if w.process is not None and w.alive else None
                    for w in self._workers]

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker and wait until each is ready; raises ``WorkerStartError`` (and
        stops those started) when one cannot start."""
        atexit.register(self._kill_left)
        self.metrics.pool_started(len(self._workers))
        try:
            for w in self._workers:
                self._spawn(w)
        except BaseException:
            self.shutdown(5.0)
            raise
        threading.Thread(target=self._watch, daemon=True,
                         name="otel-eval-workers-watchdog").start()
        log.info("%d evaluation worker processes ready", len(self._workers))

    def shutdown(self, deadline_s: float) -> None:
        """Stop the workers: each finishes the message it holds and exits; past the deadline
        it is killed. Call ``drain`` first to store what they were given."""
        end = time.monotonic() + deadline_s
        self._stopping.set()
        with self._lock:
            for w in self._workers:
                w.alive = False
                w.outbox.put(_STOP)
        for w in self._workers:
            p = w.process
            if p is None:
                continue
            p.join(max(0.0, end - time.monotonic()))
            if p.is_alive():  # it ignores SIGTERM; what it holds stays in the spool
                log.warning("evaluation worker %d did not stop in time; killing it", w.index)
                p.kill()
                p.join()
        self.metrics.running(0)

    def _kill_left(self) -> None:
        """At interpreter exit, workers not shut down are killed: they ignore SIGTERM (serve
        drains them itself), so multiprocessing's exit handler would wait for them forever.
        What they held is in the spool."""
        for w in self._workers:
            if w.process is not None and w.process.is_alive():
                w.process.kill()

    @property
    def healthy(self) -> bool:
        with self._lock:
            return self.failure is None and all(w.failed_starts < _UNHEALTHY_AFTER
                                                for w in self._workers)

    # --- EvaluationStage ---------------------------------------------------------------------

    def run(self, jobs: list[Job], done: Done) -> None:
        """Queue each job on its trace's worker and send what the in-flight bound allows."""
        # Out of attempts and handed back (the store refused their error records, and the
        # engine kept them): given up on here again, never sent to a worker.
        lost = [_Item(job, done) for job in jobs if job.lone_deaths >= self.max_attempts]
        with self._lock:
            touched = set()
            for job in jobs:
                if job.lone_deaths >= self.max_attempts:
                    continue
                w = self._workers[zlib.crc32(job.trace.trace_id.encode()) % len(self._workers)]
                w.backlog.append(_Item(job, done))
                touched.add(w.index)
            for i in touched:
                self._pump(self._workers[i])
            self._finishing += len(lost)
        if lost:
            self._give_up(lost)

    def drain(self, deadline_s: float) -> bool:
        end = time.monotonic() + deadline_s
        with self._lock:
            while self._finishing or any(w.backlog or w.n_inflight for w in self._workers):
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    # --- sending -----------------------------------------------------------------------------

    def _pump(self, w: _Worker) -> None:  # lock held
        """Hand ``w`` what its in-flight bound allows. A trace being retried (its worker died
        holding it) goes alone into an idle worker, and nothing follows it until it is
        stored: if it kills the worker again, it alone was in it."""
        while w.alive and w.backlog and w.n_inflight < self.max_inflight:
            if w.backlog[0].job.attempts:
                if w.n_inflight:
                    break  # wait until the worker is idle
                items = [w.backlog.popleft()]
            else:
                room = min(self.chunk, self.max_inflight - w.n_inflight)
                items = []
                while w.backlog and len(items) < room and not w.backlog[0].job.attempts:
                    items.append(w.backlog.popleft())
            now_ns = time.time_ns()
            retried = {}
            for it in items:
                if it.job.attempts:
                    retried[it.job.trace.trace_id] = it.job.first_sent_ns
                else:
                    it.job.first_sent_ns = now_ns
                it.job.attempts += 1
            msg_id = next(self._ids)
            if not w.inflight:
                w.busy_since = time.monotonic()
            w.inflight[msg_id] = items
            w.n_inflight += len(items)
            w.outbox.put((msg_id, items, retried))
            if retried:
                break  # alone until it is stored
        self.metrics.inflight(w.index, w.n_inflight)

    def _send_loop(self, pipe: _Pipe, outbox: queue.SimpleQueue[Any]) -> None:
        """Pickle and write messages (blocks while the worker's pipe is full)."""
        try:
            while True:
                msg = outbox.get()
                if msg is _STOP:
                    pipe.conn.send(None)
                    return
                msg_id, items, retried = msg
                pipe.conn.send(("batch", msg_id,
                                [child.pack_trace(it.job.trace) for it in items], retried))
        except (OSError, ValueError):  # the worker died: its receiver restarts it
            return
        finally:
            pipe.release()

    # --- receiving ---------------------------------------------------------------------------

    def _receive_loop(self, w: _Worker, pipe: _Pipe, generation: int) -> None:
        """Read ``w``'s results until its pipe breaks. A message that cannot be read (not
        unpickled, not of the shape sent, no memory for it) is the worker's death too: it
        is killed, and the crash path restarts it and hands its traces again."""
        try:
            while True:
                try:
                    msg = pipe.conn.recv()
                    done = msg[0] == "done"
                except (EOFError, OSError):
                    break
                except Exception:  # the result is lost: as if the worker had died
                    log.exception("reading a result of evaluation worker %d failed; "
                                  "killing it", w.index)
                    self._kill(w, generation)
                    break
                if done:
                    try:
                        self._done(w, msg[1], msg[2])
                    except BaseException as e:  # results no longer reach the engine: be loud
                        log.exception("finishing results of evaluation worker %d failed",
                                      w.index)
                        self.failure = e
                        return
        finally:
            pipe.release()
        self._died(w, generation)

    def _kill(self, w: _Worker, generation: int) -> None:
        """Kill ``w``'s process of ``generation`` (not a later one already restarted)."""
        with self._lock:
            if w.generation == generation and w.process is not None:
                w.process.kill()

    def _done(self, w: _Worker, msg_id: int, outcomes: list[Outcome]) -> None:
        """A message's traces are stored: finish them, then count them out (so ``drain``
        returns only once the engine has finished every trace: spool, sinks, waiters)."""
        with self._lock:
            items = w.inflight.pop(msg_id)
            w.busy_since = time.monotonic()  # the worker takes up its next message now
        try:
            self._finish(items, outcomes)
        finally:
            with self._lock:
                w.n_inflight -= len(items)
                self._pump(w)
                self._changed.notify_all()

    @staticmethod
    def _finish(items: Sequence[_Item], outcomes: Sequence[Outcome]) -> None:
        """Call each ``done`` once with its jobs (runs of the same callback together)."""
        for done, group in itertools.groupby(zip(items, outcomes, strict=True),
                                             key=lambda pair: pair[0].done):
            pairs = list(group)
            done([it.job for it, _ in pairs], [out for _, out in pairs])

    def _died(self, w: _Worker, generation: int) -> None:
        """``w``'s pipe broke: reap it, give up on traces out of attempts, restart it and
        hand it the rest again (first, in order)."""
        with self._lock:  # in one step, so that ``drain`` never sees them nowhere
            if w.generation != generation or self._stopping.is_set():
                return
            w.alive = False
            w.outbox.put(_STOP)  # ends this generation's sender (its peer is gone)
            held = [it for items in w.inflight.values() for it in items]
            w.inflight.clear()
            w.n_inflight = 0
            self.metrics.inflight(w.index, 0)  # not the dead one's until a restart succeeds
            if len(held) == 1:  # it alone can have killed the worker
                held[0].job.lone_deaths += 1
            lost = [it for it in held if it.job.lone_deaths >= self.max_attempts]
            again = [it for it in held if it.job.lone_deaths < self.max_attempts]
            w.backlog.extendleft(reversed(again))
            self._finishing += len(lost)
            self._running()
        code = None
        if w.process is not None:
            w.process.join(5.0)
            code = w.process.exitcode
        log.error("evaluation worker %d exited (code %s) holding %d trace(s); restarting it",
                  w.index, code, len(held))
        self.metrics.restarted(w.index, len(again))
        if lost:
            self._give_up(lost)
        self._restart(w)

    def _give_up(self, lost: list[_Item]) -> None:
        """Store ``lost`` (their worker died ``max_attempts`` times holding each alone) as
        evaluation errors, in this process (counted in ``_finishing`` by the caller); one
        a worker stored since it was first handed out keeps that evaluation. A store
        that refuses is an outcome (``give_up`` returns them ``unstored``): the engine keeps
        them and hands them back to ``run`` after its back-off, as any refused write."""
        log.error("storing %d trace(s) as evaluation errors: their worker died %d times "
                  "holding them alone", len(lost), self.max_attempts)
        error = WorkerLost(f"evaluation worker died {self.max_attempts} times holding "
                           "this trace alone")
        try:
            handed_out = {it.job.trace.trace_id: it.job.first_sent_ns for it in lost}
            self._finish(lost, self.give_up([it.job.trace for it in lost], error, handed_out))
        except Exception as e:  # results no longer reach the engine: be loud
            log.exception("finishing traces of a dead evaluation worker failed")
            self.failure = e
        finally:
            with self._lock:
                self._finishing -= len(lost)
                self._changed.notify_all()

    def _watch(self) -> None:
        """Kill a worker whose current message is older than ``timeout_s`` (hung: alive, never
        answering); its receiver then finds the pipe broken and ``_died`` does the rest."""
        while not self._stopping.wait(min(1.0, self.timeout_s / 4)):
            now = time.monotonic()
            with self._lock:
                hung = [w for w in self._workers
                        if w.alive and w.inflight and w.killed != w.generation
                        and now - w.busy_since > self.timeout_s and w.process is not None]
                for w in hung:
                    w.killed = w.generation
                    assert w.process is not None
                    w.process.kill()
            for w in hung:
                log.error("evaluation worker %d held a batch of traces for more than %g s; "
                          "killed as hung", w.index, self.timeout_s)
                self.metrics.hung(w.index)

    def _restart(self, w: _Worker) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                self._spawn(w)
                return
            except WorkerStartError as e:
                with self._lock:
                    w.failed_starts += 1
                delay = _BACKOFF.delay_s(attempt)
                log.error("evaluation worker %d failed to restart (%s); again in %.1f s",
                          w.index, e, delay)
                self._stopping.wait(delay)  # a stop ends the wait at once
                attempt += 1

    # --- processes ---------------------------------------------------------------------------

    def _spawn(self, w: _Worker) -> None:
        """Start ``w``'s process, wait for it to say it is ready, start its threads."""
        proc = WorkerProcess(w.index)
        parent = proc.conn
        try:
            parent.send(sys.path)  # as spawn does: the child imports what this process would
            parent.send(self.spec)
            if not parent.poll(self.start_timeout_s):
                raise WorkerStartError(f"not ready within {self.start_timeout_s:g} s")
            hello = parent.recv()
            if hello[0] != "ready":
                raise WorkerStartError(str(hello[1]))
        except (EOFError, OSError, WorkerStartError) as e:
            parent.close()
            proc.kill()
            proc.join()
            raise e if isinstance(e, WorkerStartError) else WorkerStartError(
                f"exited during start (code {proc.exitcode})") from e
        with self._lock:
            if self._stopping.is_set():  # shut down while it started: it is not wanted
                parent.close()
                proc.kill()
                proc.join()
                return
            w.process, w.outbox = proc, queue.SimpleQueue()
            w.generation += 1
            w.alive, w.failed_starts = True, 0
            pipe = _Pipe(parent)
            for target, args in ((self._send_loop, (pipe, w.outbox)),
                                 (self._receive_loop, (w, pipe, w.generation))):
                threading.Thread(target=target, args=args, daemon=True,
                                 name=f"otel-eval-worker-{w.index}-io").start()
            self._running()
            self._pump(w)

    def _running(self) -> None:  # lock held
        self.metrics.running(sum(w.alive for w in self._workers))
