"""Sessions (issue 27): the conversation's p_success against its reward, the session job's
cost, and what an open session costs.

    python bench/sessions.py [--datasets DIR] [--sessions 100000] [--json FILE]

- **AUC** (dev half, tau-bench airline, 100 runs of 25 tasks): each run replayed as a chat
  service sends it, one OTLP trace per user message (``tests/sessions/conversations.py``
  ``tau_turns``), each turn evaluated as ``serve`` does, the turns grouped into a session and
  ``prediction.p_success`` computed on the conversation (``evaluate.sessions.predict``).
  Against the run's reward: (a) the shipped default model (trained on these very runs: an
  in-sample figure), (b) task-disjoint 5-fold cross-validation (GroupKFold by task; each fold
  trains what ``otel-eval train`` trains on the training tasks' whole runs, one trace each,
  as the shipped model was, and predicts the held-out tasks' sessions), and the baseline in
  the same folds: the same models on the held-out runs as one trace (the trace-level figure
  of ``bench/predictor.py``).
- **Cost of session evaluation**: the job completing the sessions on a SQLite store (claim,
  read the turns, evaluate across turns, predict, store the record), against evaluating the
  same turns as traces (the baseline, in the same run): ratio.
- **Open sessions**: ``--sessions`` idle open sessions (one turn each) in a SQLite store; the
  store's bytes per session (the sessions row and its index) against the bytes of the turn
  itself; a check of the job over all of them (nothing due) and the Python memory it
  allocates (tracemalloc peak), against the same check over 1 % of them (baseline: the
  process holds nothing per open session, so the ratio should be ~1); the bound
  (``max_open_sessions`` = the count) held, and one session past it evicted.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

from otel_eval.app.config import Config
from otel_eval.base.results import Evaluation, Verdict
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.evaluator import Evaluator
from otel_eval.evaluate.predict import Predictor
from otel_eval.evaluate.predict.config import PredictionConfig
from otel_eval.evaluate.predict.labels import Labels, row
from otel_eval.evaluate.predict.modelfile import from_document
from otel_eval.evaluate.predict.train import fit
from otel_eval.evaluate.sessions.config import SessionsConfig
from otel_eval.evaluate.sessions.evaluate import in_turn_order
from otel_eval.evaluate.sessions.job import SessionJob
from otel_eval.evaluate.sessions.predict import conversation_evaluation
from otel_eval.receive.loaders import load_path
from otel_eval.store import open_store
from otel_eval.telemetry.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASETS = ROOT.parent / "shared" / "datasets"
TAU_RUNS = Path("tau-bench/airline/gpt-4o-airline.runs.json")
FOLDS = 5


def _tau_turns() -> Any:
    spec = importlib.util.spec_from_file_location(
        "conversations", ROOT / "tests" / "sessions" / "conversations.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tau_turns


def turn_evaluations(runs: list[dict[str, Any]], evaluator: Evaluator,
                     work: Path) -> tuple[list[list[Evaluation]], float]:
    """Per run, its turns evaluated (as serve does: OTLP/JSON in, one trace each); the
    seconds spent evaluating them (the loading of the files not counted)."""
    tau_turns = _tau_turns()
    out, spent = [], 0.0
    for index, run in enumerate(runs):
        turns = []
        for trace_id, body in tau_turns(run, index, "gen_ai.conversation.id", f"tau-{index}"):
            path = work / f"{trace_id}.json"
            path.write_text(json.dumps(body))
            [trace] = list(load_path(path))
            start = time.perf_counter()
            ev = evaluator.evaluate(trace)
            spent += time.perf_counter() - start
            assert ev is not None
            turns.append(ev)
        out.append(turns)
    return out, spent


def _auc(y: list[int], p: list[float]) -> float:
    return round(float(roc_auc_score(y, p)), 3)


def auc_figures(runs: list[dict[str, Any]], sessions: list[list[dict[str, Any]]],
                predictor: Predictor, datasets: Path) -> dict[str, Any]:
    y = [int(float(r["reward"]) >= 1.0) for r in runs]
    groups = [str(r["task_id"]) for r in runs]
    conv = [conversation_evaluation(f"tau-{i}", s) for i, s in enumerate(sessions)]
    shipped = [predictor.predict(c)["p_success"] for c in conv]
    evaluator = Evaluator(Config(prediction=PredictionConfig(model_path="")))
    whole = [evaluator.evaluate(t) for t in load_path(datasets / TAU_RUNS)]
    assert len(whole) == len(runs)
    labels = Labels()
    rows = [row(ev, bool(y[i])) for i, ev in enumerate(whole) if ev is not None
            and labels.of(ev) is not None]
    assert len(rows) == len(runs)
    conv_rows = [row(c, bool(y[i])) for i, c in enumerate(conv)]
    p_session, p_trace = [0.0] * len(runs), [0.0] * len(runs)
    per_fold = []
    for train, test in GroupKFold(n_splits=FOLDS).split(rows, y, groups):
        assert not {groups[i] for i in train} & {groups[i] for i in test}
        m = from_document({**fit([rows[i] for i in train]), "version": "bench"})
        for i in test:
            p_session[i] = m.p_success(conv_rows[i].values, conv_rows[i].text)
            p_trace[i] = m.p_success(rows[i].values, rows[i].text)
        fy = [y[i] for i in test]
        per_fold.append((_auc(fy, [p_session[i] for i in test]),
                         _auc(fy, [p_trace[i] for i in test])) if len(set(fy)) == 2 else None)
    return {"runs": len(runs), "tasks": len(set(groups)), "successes": sum(y),
            "turns": sum(len(s) for s in sessions),
            "shipped_model_session_auc_in_sample": _auc(y, shipped),
            "cv_session_auc": _auc(y, p_session), "cv_whole_run_trace_auc": _auc(y, p_trace),
            "cv_auc_per_fold_session_vs_trace": per_fold}


def job_cost(turns: list[list[Evaluation]], turn_seconds: float,
             predictor: Predictor, work: Path) -> dict[str, Any]:
    store = open_store(str(work / "cost.db"))
    store.put_many([ev for run in turns for ev in run])
    last = max(ev.evaluated_at_ns for run in turns for ev in run)
    job = SessionJob(store, SessionsConfig(idle_timeout_s=1.0), Metrics(), predictor)
    start = time.perf_counter()
    done = job.tick(last / 1e9 + 2)
    spent = time.perf_counter() - start
    store.close()
    n_turns = sum(len(r) for r in turns)
    return {"sessions": done, "turns": n_turns, "session_job_s": round(spent, 3),
            "turn_evaluation_s": round(turn_seconds, 3),
            "ms_per_session": round(1000 * spent / done, 2),
            "ms_per_turn_evaluation": round(1000 * turn_seconds / n_turns, 2),
            "session_job_over_turn_evaluations": round(spent / turn_seconds, 3)}


def _open(store: Any, n: int, at_s: float, first: int = 0) -> None:
    batch = []
    for i in range(first, first + n):
        t = Trajectory(f"{i:032x}", "otlp", "complete", [], service="s", agent="a",
                       session_id=f"conversation-{i:09d}")
        batch.append(Evaluation(t, [], Verdict(True, []),
                                evaluated_at_ns=int(at_s * 1e9)))
        if len(batch) == 5000:
            store.put_many(batch)
            batch = []
    if batch:
        store.put_many(batch)


def _check(job: SessionJob, now_s: float) -> tuple[float, int, int]:
    tracemalloc.start()
    start = time.perf_counter()
    done = job.tick(now_s)
    spent = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return spent, peak, done


def open_sessions(n: int, work: Path) -> dict[str, Any]:
    now = time.time()
    out: dict[str, Any] = {"sessions": n}
    small = max(1, n // 100)
    for label, count in (("baseline", small), ("all", n)):
        path = work / f"open-{label}.db"
        store = open_store(str(path))
        _open(store, count, now)
        config = SessionsConfig(idle_timeout_s=1800, max_open_sessions=count)
        job = SessionJob(store, config, Metrics())
        job.tick(now + 60)  # warm: the first statement of a connection prepares its plans
        spent, peak, done = _check(job, now + 60)
        out[label] = {"open": store.open_session_count(), "completed": done,
                      "check_ms": round(1000 * spent, 1), "check_peak_kib": peak // 1024}
        if label == "all":
            with store._lock:  # type: ignore[attr-defined]
                db = store._db  # type: ignore[attr-defined]
                pages = {name: db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = ?",
                                          (name,)).fetchone()[0] or 0
                         for name in ("sessions", "sessions_by_state", "sqlite_autoindex_"
                                       "sessions_1", "evaluations")}
            out["store_bytes_per_open_session"] = round(
                sum(v for k, v in pages.items() if k != "evaluations") / count, 1)
            out["store_bytes_per_turn_row"] = round(pages["evaluations"] / count, 1)
            _open(store, 1, now + 1, first=count)  # one past the bound
            spent, peak, done = _check(job, now + 61)
            out["one_past_the_bound"] = {"open": store.open_session_count(),
                                         "evicted": done, "check_ms": round(1000 * spent, 1)}
        store.close()
    out["check_peak_ratio_all_over_baseline"] = round(
        out["all"]["check_peak_kib"] / max(1, out["baseline"]["check_peak_kib"]), 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--datasets", type=Path, default=DEFAULT_DATASETS)
    ap.add_argument("--sessions", type=int, default=100_000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    runs = json.loads((args.datasets / TAU_RUNS).read_text())
    config = Config()
    evaluator = Evaluator(config)
    assert evaluator.predictor is not None
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        turns, turn_seconds = turn_evaluations(runs, evaluator, work)
        sessions = [in_turn_order([ev.to_json() for ev in run]) for run in turns]
        figures = {"auc": auc_figures(runs, sessions, evaluator.predictor, args.datasets),
                   "cost": job_cost(turns, turn_seconds, evaluator.predictor, work),
                   "open": open_sessions(args.sessions, work), "cpus": os.cpu_count()}
    text = json.dumps(figures, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
