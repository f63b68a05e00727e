"""Fixtures of the web view tests: one store with the guide example, conformance recordings
and a hostile run, served by a real admin server; one headless Chromium per module."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from hostile import judge, write_trace
from support.bench_module import load_bench
from ui_server import CRITIQUE, GUIDE, GUIDE_ID, GUIDE_REFS, ISSUES, admin, evaluate

from otel_eval.store import Store


@pytest.fixture(scope="session")
def ui_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    tmp = tmp_path_factory.mktemp("ui")
    store = Store(str(tmp / "otel-eval.db"))
    [guide] = evaluate([str(GUIDE)], str(GUIDE_REFS), {"steps": 5})
    store.put_many([guide])
    step8 = guide.trajectory.steps[8]
    assert store.put_judge(GUIDE_ID, 0, {"judges": {"combined": {"status": "ok", "critiques": [
        {"dimension": "efficiency", "score": 0.25, "text": CRITIQUE, "span_id": step8.span_id,
         "node": "docs-fixer", "step_index": None}]}},
        "overall": {"status": "ok", "process_score": 0.4, "outcome_score": 1.0}})
    [bad] = evaluate([str(write_trace(tmp / "hostile.json"))])
    store.put_many([bad])
    assert store.put_judge(bad.trace_id, 0, judge(bad.trajectory.steps[2].span_id))
    yield store
    store.close()


@pytest.fixture(scope="session")
def ui_url(ui_store: Store) -> Iterator[str]:
    with admin(ui_store, ISSUES) as url:
        yield url


@pytest.fixture(scope="session")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A run of several pages: bench/ui.py's (an agent calling one tool 800 times, 4 kB
    results: 1,600 steps, 1,195 of them on the first page), every call the same, so its
    loop finding sits on the last page and names steps of the first; evaluated, stored and
    served. Yields (admin URL, trace id)."""
    bench = load_bench("ui.py", "bench_ui")
    tmp = tmp_path_factory.mktemp("long-run")
    [run] = evaluate([str(bench.trace_file(tmp / "run.json", 1600, 4000, same_call=True))])
    store = Store(str(tmp / "otel-eval.db"))
    store.put_many([run])
    with admin(store) as url:
        yield url, run.trace_id
    store.close()


CONFORMANCE_SCENARIOS = ("loop", "tool_error", "non_terminating")


@pytest.fixture(scope="session")
def conformance_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list]]:
    """The conformance recordings sent as spans only (every stack whose recording has no log
    requests), except the cells expected.yaml lists as known wrong (their findings are not
    the truth to place), evaluated and stored; yields (admin URL, [(stack, scenario, body)])."""
    from conformance.corpus import known_wrong, recorded, recording

    tmp = tmp_path_factory.mktemp("conformance-ui")
    paths = {}
    for stack, scenario in recorded():
        rec = recording(stack, scenario)
        if scenario in CONFORMANCE_SCENARIOS and f"{stack}/{scenario}" not in known_wrong() \
                and all(r["signal"] == "traces" for r in rec["requests"]):
            path = tmp / f"{stack}.{scenario}.json"
            path.write_text("\n".join(json.dumps(r["body"]) for r in rec["requests"]) + "\n")
            paths[str(path)] = (stack, scenario)
    store = Store(str(tmp / "otel-eval.db"))
    evaluations = evaluate(list(paths))
    store.put_many(evaluations)
    runs = [(*paths[ev.trajectory.source], ev.to_json()) for ev in evaluations]
    with admin(store) as url:
        yield url, runs
    store.close()
