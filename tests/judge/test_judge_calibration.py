"""The judge checked against people (``otel-eval calibrate``, ``GET /v1/calibration``): AUC
and Cohen's kappa of every judge score and of p_success against the outcomes recorded
through POST /v1/feedback, compared with the same figures computed by hand."""

from __future__ import annotations

import io
import json
import sqlite3
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from otel_eval.app.admin import AdminApi, AdminConfig, AdminServer
from otel_eval.app.calibrate import print_table
from otel_eval.app.cli import main
from otel_eval.base.results import Evaluation
from otel_eval.base.steps import Trajectory
from otel_eval.evaluate.calibration import (
    Thresholds,
    build,
    calibrate,
    capped,
    hanley_mcneil,
    kappa,
    report,
    scores_of,
)
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.outputs.deps import Deps
from otel_eval.store import SqliteStore, filters
from otel_eval.store.migrations import LATEST
from otel_eval.telemetry.calibration import CalibrationMetrics
from otel_eval.telemetry.declare import Declarer
from otel_eval.telemetry.labels import SeriesCap

# (agent, trace judge score, p_success, outcome): agent a's three runs, then agent b's
RUNS = [("a", 0.9, 0.6, "success"), ("a", 0.7, 0.6, "failure"), ("a", 0.4, 0.9, "success"),
        ("b", 0.8, 0.7, "success"), ("b", 0.3, 0.1, "failure"), ("b", 0.2, 0.2, "failure")]


def _body(agent: str, trace: float, p: float) -> dict[str, Any]:
    return {"service": "shop", "agent": agent,
            "judge": {"judges": {"trace": {"status": "ok", "scores": {"trace": trace}},
                                 "step": {"status": "ok", "scores": {}}}},
            "prediction": {"p_success": p, "model": "m"},
            "verdict": {"passed": True}}  # never read: the outcome decided it


def _row(found: dict[str, Any], agent: str, score: str) -> dict[str, Any]:
    rows = [g for g in found["groups"] if g["agent"] == agent and g["score"] == score]
    assert len(rows) == 1
    return rows[0]


def test_auc_and_kappa_match_the_figures_computed_by_hand() -> None:
    found = calibrate([(o, _body(a, t, p)) for a, t, p, o in RUNS])
    every = _row(found, "*", "trace")
    # successes score 0.9, 0.4, 0.8; failures 0.7, 0.3, 0.2: of the 9 (success, failure)
    # pairs, the success scores higher in 8 (0.4 < 0.7 is the one miss)
    assert every["auc"] == round(8 / 9, 4)
    # pass at 0.5: 0.9 0.7 0.8 pass, 0.4 0.3 0.2 fail; agree on 4 of 6 runs (po = 2/3);
    # 3 of 6 predicted and 3 of 6 actual successes: pe = 0.5; kappa = (2/3 - 1/2) / (1/2)
    assert every["kappa"] == round(1 / 3, 4)
    assert (every["runs"], every["successes"], every["failures"]) == (6, 3, 3)
    assert every["threshold"] == 0.5
    # the interval: the AUCs t that 8/9 is within 1.96 SE(t) of, SE(t) Hanley-McNeil's at t:
    # V(t) = (t (1 - t) + 2 (Q1 - t^2) + 2 (Q2 - t^2)) / 9, Q1 = t/(2-t), Q2 = 2t^2/(1+t)
    def inside(t: float) -> bool:
        v = (t * (1 - t) + 2 * (t / (2 - t) - t * t) + 2 * (2 * t * t / (1 + t) - t * t)) / 9
        return (8 / 9 - t) ** 2 <= 1.959964 ** 2 * v
    lo, hi = every["auc_ci95"]  # each bound where t leaves the interval, to the 4th decimal
    assert not inside(lo - 5e-5) and inside(lo + 5e-5) and inside(hi - 5e-5)
    assert not inside(hi + 5e-5) and (lo, hi) == (0.401, 0.9884)
    # per agent: a = successes 0.9, 0.4 against the failure 0.7: one of two pairs
    assert _row(found, "a", "trace")["auc"] == 0.5
    assert _row(found, "b", "trace")["auc"] == 1.0


def test_p_success_ties_count_half_and_kappa_is_at_its_threshold() -> None:
    found = calibrate([(o, _body(a, t, p)) for a, t, p, o in RUNS],
                      Thresholds(p_success=0.65))
    row = _row(found, "*", "p_success")
    # successes 0.6, 0.9, 0.7; failures 0.6, 0.1, 0.2: 0.6 ties 0.6 (half) and beats the
    # other two, 0.9 and 0.7 beat all three: (2.5 + 3 + 3) / 9
    assert row["auc"] == round(8.5 / 9, 4) and row["threshold"] == 0.65
    # pass at 0.65: 0.9, 0.7 (both successes); agree on 5 of 6; predicted 2/6, actual 3/6:
    # pe = 1/3 * 1/2 + 2/3 * 1/2 = 1/2; kappa = (5/6 - 1/2) / (1/2) = 2/3
    assert row["kappa"] == round(2 / 3, 4)
    assert calibrate([("success", {"agent": "a"})])["groups"] == []  # no score: no row


def test_one_class_gives_no_auc_and_total_chance_agreement_no_kappa() -> None:
    found = calibrate([("success", _body("a", 0.9, 0.9)), ("success", _body("a", 0.8, 0.9))])
    row = _row(found, "a", "trace")
    assert row["auc"] is None and row["auc_ci95"] is None
    assert row["kappa"] is None  # everyone says yes: agreement by chance is total



def test_one_outcome_only_gives_no_kappa_whatever_the_score_says() -> None:
    """Outcomes of one class make kappa 0 for any rating: with only failures recorded (users
    reporting what went wrong), a judge that passed all 30 of them and one that failed 29 of
    them both showed kappa 0.0 ("chance") with an interval, and the gauge said 0. Like the
    AUC it needs both outcomes; a score on one side of its threshold with both outcomes is
    a gate that lets everything through: kappa 0 there is a finding, kept."""
    wrong = calibrate([("failure", _body("a", 0.9, 0.9)) for _ in range(30)])
    right = calibrate([("failure", _body("a", 0.1 if i else 0.9, 0.1)) for i in range(30)])
    for found in (wrong, right):
        row = _row(found, "a", "trace")
        assert (row["runs"], row["failures"]) == (30, 30)
        assert row["kappa"] is None and row["kappa_ci95"] is None
    assert kappa([False], [True]) is None  # one run rated unlike
    gate = _row(calibrate([("success", _body("a", 0.9, 0.9)),
                           ("failure", _body("a", 0.8, 0.9))]), "a", "trace")
    assert gate["kappa"] == 0.0 and gate["kappa_ci95"] is not None  # passes every run


def test_intervals_do_not_collapse_at_perfect_agreement() -> None:
    """The Wald intervals were [1, 1] for 1 success and 1 failure ranked right, and for two
    runs rated alike: as certain as a million runs. By hand: with one run of each class
    V(t) = t (1 - t), so (1 - t)^2 <= z^2 t (1 - t) from t = 1 / (1 + z^2); kappa's Wilson
    bound of po = 1 over n = 2 is n / (n + z^2), through (po - 1/2) / (1 - 1/2)."""
    z2 = 1.959964 ** 2
    row = calibrate([("success", _body("a", 0.9, 0.9)), ("failure", _body("a", 0.1, 0.1))])[
        "groups"][0]
    assert row["auc"] == 1.0 and row["auc_ci95"] == [round(1 / (1 + z2), 4), 1.0]
    assert row["kappa"] == 1.0 and row["kappa_ci95"] == [round((2 / (2 + z2) - 0.5) / 0.5, 4),
                                                         1.0]
    assert hanley_mcneil(0.0, 2, 2)[1] > 0.5  # all ranked wrong: [0, 0] before
    k, lo, hi = kappa([False, True], [True, False])  # type: ignore[misc]  # rated unlike
    assert (k, lo) == (-1.0, -1.0) and hi == pytest.approx((z2 / (2 + z2) - 0.5) / 0.5)


def test_scores_are_every_judge_dimension_and_p_success_never_the_verdict() -> None:
    body = {"judge": {"judges": {
        "process": {"scores": {"process": 0.7, "efficiency": 0.4}},
        "outcome": {"status": "error"}}}, "verdict": {"passed": False},
        "prediction": {"p_success": 0.3}}
    assert scores_of(body) == {"process": 0.7, "efficiency": 0.4, "p_success": 0.3}
    assert Thresholds(tau_task=0.5, tau_process=0.6).of("efficiency") == 0.6


@pytest.fixture
def store(tmp_path: Path) -> Any:
    s = SqliteStore(str(tmp_path / "store.db")).open()
    evs = []
    for i, (agent, trace, p, _) in enumerate(RUNS):
        ev = Evaluation(Trajectory(f"{i + 1:032x}", "otlp", "complete", [], service="shop",
                                   agent=agent), judge=_body(agent, trace, p)["judge"],
                        prediction={"p_success": p, "model": "m"})
        evs.append(ev)
    s.put_many(evs)
    for i, (*_, outcome) in enumerate(RUNS):
        s.put_feedback(f"{i + 1:032x}", outcome, i)
    yield s
    s.close()


def test_calibrate_cli_reads_the_recorded_outcomes_from_the_store(
        store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--store", str(tmp_path / "store.db"), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["labelled_runs"] == 6
    assert _row(found, "*", "trace")["auc"] == round(8 / 9, 4)
    assert main(["calibrate", "--store", str(tmp_path / "store.db")]) == 0
    table = capsys.readouterr().out
    assert "shop  a  trace  -  3  2  1  0.5  0.500 [" in table


def test_p_success_s_kappa_is_taken_at_the_configured_pass_threshold(
        store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """prediction.pass_threshold 0.8: only the 0.9 run is predicted to pass; by hand over the
    six runs po = 4/6, pe = 1/6 * 3/6 + 5/6 * 3/6 = 1/2, kappa = (4/6 - 1/2) / (1/2) = 1/3
    (at the default 0.5 it is 2/3)."""
    (tmp_path / "cfg.yaml").write_text("prediction:\n  pass_threshold: 0.8\n")
    assert main(["calibrate", "--store", str(tmp_path / "store.db"), "--config",
                 str(tmp_path / "cfg.yaml"), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    row = _row(found, "*", "p_success")
    assert (row["threshold"], row["kappa"]) == (0.8, round(1 / 3, 4))
    assert found["thresholds"]["p_success"] == 0.8
    assert main(["calibrate", "--store", str(tmp_path / "store.db"), "--format", "json"]) == 0
    assert _row(json.loads(capsys.readouterr().out), "*", "p_success")["kappa"] == round(2 / 3,
                                                                                          4)


def test_a_run_of_service_and_agent_star_is_counted_once() -> None:
    """Service and agent names are span content, and "*" names every agent's row: a run of
    service "*" and agent "*" went into that row twice (2 labelled runs, a row of 3)."""
    star = {"service": "*", "agent": "*", "prediction": {"p_success": 0.9, "model": "m"}}
    found = calibrate([("success", star), ("failure", _body("a", 0.5, 0.2))])
    row = _row(found, "*", "p_success")
    assert (found["labelled_runs"], row["runs"], row["successes"], row["failures"]) == (
        2, 2, 1, 1)


@pytest.mark.parametrize("limit", ["-1", "0", "x", "99999999999999999999"])
def test_calibrate_refuses_a_limit_that_is_no_number_of_runs(
        limit: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--limit went into LIMIT as given: -1 read every run on SQLite and was an error
    PostgreSQL raised; 0 read none and said no outcome was recorded."""
    with pytest.raises(SystemExit) as e:
        main(["calibrate", "--store", str(tmp_path / "store.db"), "--limit", limit])
    assert e.value.code == 2 and "not a number of runs" in capsys.readouterr().err


def test_calibrate_cli_without_a_store_says_so(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--store", str(tmp_path / "none.db")]) == 1
    assert "no store at" in capsys.readouterr().err


def test_calibrate_only_reads_the_store_it_is_given(
        store: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The store is only read: calibrate opened it as serve does, migrating it. An empty
    file became a 94 kB store (and a report of no outcome); an older store was migrated.
    Now neither is touched, and each is refused saying why (exit 1)."""
    empty = tmp_path / "empty.db"
    empty.touch()
    assert main(["calibrate", "--store", str(empty)]) == 1
    assert "not an otel-eval store" in capsys.readouterr().err
    assert empty.stat().st_size == 0
    db = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
    db.execute(f"DELETE FROM schema_version WHERE version = {LATEST}")
    assert main(["calibrate", "--store", str(tmp_path / "store.db")]) == 1
    assert f"version {LATEST - 1} is older than" in capsys.readouterr().err
    assert db.execute("SELECT MAX(version) FROM schema_version").fetchone() == (LATEST - 1,)
    db.close()


def test_calibrate_reads_a_postgresql_store_without_migrating_it(
        postgresql_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty database was given the store's tables; now it is refused, left empty."""
    import psycopg

    assert main(["calibrate", "--store", postgresql_url]) == 1
    assert "not an otel-eval store" in capsys.readouterr().err
    with psycopg.connect(postgresql_url) as conn:
        assert conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
                            ).fetchone() == (0,)


def test_the_table_escapes_service_and_agent_names() -> None:
    """Service and agent names are span content: printed raw, an OSC 52 sequence wrote the
    operator's clipboard and a carriage return rewrote the row. Escaped as ``show`` does."""
    evil = "bot\x1b]52;c;ZWNobyBwd25lZA==\x07\r\x1b[2K"
    found = calibrate([(o, {**_body(evil, t, p), "service": "s\x9b2J"}) for _, t, p, o in RUNS])
    out = io.StringIO()
    print_table(found, out)
    table = out.getvalue()
    assert not any(c in table for c in "\x1b\x07\r\x9b")
    assert "s\\x9b2J  bot\\x1b]52;c;ZWNobyBwd25lZA==\\x07\\r\\x1b[2K  trace  -  6" in table

def test_get_v1_calibration_serves_the_same_object(store: Any) -> None:
    api = AdminApi(CollectorRegistry(), store.query, store.get, lambda _t, _o: None,
                   lambda: True, lambda: True,
                   calibration=lambda: report(store, JudgeConfig()))
    server = AdminServer("127.0.0.1:0", api, AdminConfig(endpoint="127.0.0.1:0"))
    server.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/calibration",
                                    timeout=30) as r:
            found = json.loads(r.read())
    finally:
        server.stop()
    assert found == calibrate(store.labelled(100))
    assert _row(found, "b", "p_success")["auc"] == 1.0


def test_agreement_gauges_per_service_agent_score_refresh_when_stale(store: Any) -> None:
    registry, now, calls = CollectorRegistry(), [0.0], []
    d = Declarer(registry)
    cap = SeriesCap(d, 250, 10_000)
    gauges = CalibrationMetrics(d, cap, refresh_s=300, clock=lambda: now[0])
    cap.pair("shop", "a"), cap.pair("shop", "b")  # the traces seen

    def source() -> dict[str, Any]:
        calls.append(now[0])
        return report(store, JudgeConfig())

    gauges.serve_from(source)
    assert registry.get_sample_value("otel_eval_judge_agreement_auc", {
        "service": "*", "agent": "*", "score": "trace"}) == round(8 / 9, 4)
    assert registry.get_sample_value("otel_eval_judge_agreement_kappa", {
        "service": "shop", "agent": "b", "score": "p_success"}) == 1.0
    assert registry.get_sample_value("otel_eval_judge_agreement_runs", {
        "service": "shop", "agent": "a", "score": "trace"}) == 3
    now[0] = 299.0
    registry.get_sample_value("otel_eval_judge_agreement_runs", {})
    assert calls == [0.0]  # served from the last report
    now[0] = 300.0
    registry.get_sample_value("otel_eval_judge_agreement_runs", {})
    assert calls == [0.0, 300.0]


def test_get_v1_calibration_is_computed_once_per_refresh_and_capped(store: Any) -> None:
    """GET read every labelled run's stored body on every request; it now shares the gauges'
    report (computed again after refresh_s), and answers with at most MAX_GROUPS rows,
    every agent's first, then those resting on the most runs, the rest counted."""
    now, reads = [0.0], []

    class Counting:
        def labelled(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
            reads.append(now[0])
            return store.labelled(limit)

        def feedback_version(self) -> tuple[int, ...]:
            return tuple(store.feedback_version())

    d = Declarer(CollectorRegistry())
    gauges = CalibrationMetrics(d, SeriesCap(d, 250, 10_000), refresh_s=300,
                                clock=lambda: now[0])
    deps = cast(Deps, SimpleNamespace(metrics=SimpleNamespace(calibration=gauges),
                                      store=Counting()))
    served = build(JudgeConfig(), deps)
    first = served()
    assert served() == first and reads == [0.0]
    assert first["groups_left_out"] == 0 and len(first["groups"]) == 6  # (*, a, b) x 2
    now[0] = 300.0
    served()
    assert reads == [0.0, 300.0]
    gauges.outcome_recorded()  # POST /v1/feedback: the person who recorded it sees it
    served()
    served()
    assert reads == [0.0, 300.0, 300.0]
    reads.clear()

    def recorded_meanwhile() -> dict[str, Any]:  # an outcome recorded while computing
        reads.append(now[0])
        if len(reads) == 1:
            gauges.outcome_recorded()
        return report(store, JudgeConfig())
    gauges.serve_from(recorded_meanwhile)
    gauges.outcome_recorded()
    gauges.report(), gauges.report(), gauges.report()
    assert len(reads) == 2  # the report begun before it was not kept as fresh
    few = capped(first, max_groups=3)
    assert [(g["agent"], g["score"]) for g in few["groups"]] == [
        ("*", "p_success"), ("*", "trace"), ("a", "p_success")]  # a and b tie on 3 runs
    assert few["groups_left_out"] == 3


def test_agreement_gauges_take_no_pair_and_leave_colliding_labels_out() -> None:
    """The gauges admitted every labelled pair into the per-trace metrics' budget (the live
    agent then became _other); and rows whose labels coincide once cut to 128 characters, or
    "" and "unknown", gave two samples with the same labels."""
    registry = CollectorRegistry()
    d = Declarer(registry)
    cap = SeriesCap(d, 4, 10_000)
    gauges = CalibrationMetrics(d, cap)
    long = "planner-" + "x" * 130
    runs = []
    for agent in ("retired-1", "retired-2", "retired-3", "retired-4", long + "A", long + "B",
                  "", "unknown", "live"):
        runs += [("success", _body(agent, 0.9, 0.9)), ("failure", _body(agent, 0.1, 0.1))]
    gauges.calibrated(calibrate(runs))
    for seen in ("live", long + "A", None):  # the traces seen: the long B and "unknown"
        cap.pair("shop", seen)  # share the labels of these
    text = generate_latest(registry).decode()
    assert cap.pair("shop", "late") == ("shop", "late")  # the 4th pair: the budget is intact
    auc = [line.rsplit(" ", 1)[0] for line in text.splitlines()
           if line.startswith("otel_eval_judge_agreement_auc{")]
    assert len(auc) == len(set(auc))
    agents = {s.split('agent="', 1)[1].split('"', 1)[0] for s in auc}
    assert agents == {"*", "live"}  # retired: not admitted; long and unknown: collide


def test_labelled_runs_are_read_without_the_writers_lock(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The labelled runs were read under the SQLite store's one lock (10,000 runs: 3 s in
    which every write and get waited). Read on a reading connection, the lock is free while
    the rows come in (asked without waiting: held, the write would wait forever)."""
    read_run, seen = filters.labelled_run, []

    def checking(row: Any) -> tuple[str, dict[str, Any]]:
        assert store._lock.acquire(blocking=False), "the read holds the writer's lock"
        store._lock.release()
        seen.append(row)
        return read_run(row)

    monkeypatch.setattr(filters, "labelled_run", checking)
    assert len(store.labelled(100)) == len(seen) == 6


def test_p_success_is_checked_per_model_the_serving_one_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """After a model swap (a retrain and a restart with --model, an upgrade changing the
    default), the outcomes recorded are of runs either model predicted: p_success was pooled
    into one row, so its AUC and kappa mixed the old model with the new (here 0.5: neither).
    Each model's runs are now a row of their own (``model``), the serving model's first
    (``serving_model``), and the gauges carry the serving model's."""
    from otel_eval.app.config import Config
    from otel_eval.evaluate.evaluator import Evaluator

    predictor = Evaluator(Config()).predictor
    assert predictor is not None
    serving, old = predictor.model.label, "success@0123456789ab"
    s = SqliteStore(str(tmp_path / "store.db")).open()
    # the old model ranked its runs right, the serving model ranks its runs wrong
    runs = [(old, 0.9, "success"), (old, 0.1, "failure"),
            (serving, 0.2, "success"), (serving, 0.8, "failure")]
    s.put_many([Evaluation(Trajectory(f"{i + 1:032x}", "otlp", "complete", [],
                                      service="shop", agent="a"),
                           prediction={"p_success": p, "model": model})
                for i, (model, p, _) in enumerate(runs)])
    for i, (*_, outcome) in enumerate(runs):
        s.put_feedback(f"{i + 1:032x}", outcome, i)
    registry = CollectorRegistry()
    d = Declarer(registry)
    cap = SeriesCap(d, 250, 10_000)
    cap.pair("shop", "a")
    gauges = CalibrationMetrics(d, cap)
    served = build(JudgeConfig(), cast(Deps, SimpleNamespace(
        metrics=SimpleNamespace(calibration=gauges), store=s)), serving=serving)()
    s.close()
    assert main(["calibrate", "--store", str(tmp_path / "store.db"), "--format", "json"]) == 0
    found = json.loads(capsys.readouterr().out)
    for report_ in (served, found):
        assert report_["serving_model"] == serving
        rows = [(g["agent"], g["model"], g["auc"], g["runs"]) for g in report_["groups"]
                if g["score"] == "p_success"]
        assert rows == [("*", serving, 0.0, 2), ("*", old, 1.0, 2),
                        ("a", serving, 0.0, 2), ("a", old, 1.0, 2)]
    for agent in ("*", "a"):
        assert registry.get_sample_value("otel_eval_judge_agreement_auc", {
            "service": "shop" if agent == "a" else "*", "agent": agent,
            "score": "p_success"}) == 0.0
    assert main(["calibrate", "--store", str(tmp_path / "store.db")]) == 0
    table = capsys.readouterr().out
    assert f"shop  a  p_success  {serving}  2  1  1  0.5  0.000 [" in table
