"""Whether a run worked, in the web view over HTTP: the run list's input preview, p_success and
steps; the run page's p_success, judge cost, folded critiques, inferred agent, the outcome
form and the disagreement it can reveal; the calibration page. The form's request is sent
here as its script sends it (JSON, same origin, the write token) through the real feedback
path, and refused as the feedback check refuses a cross-site one."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labelled import CRITIQUES, INFERRED, JUDGE_COST, JUDGED, labelled_admin, stored
from ui_server import get

from otel_eval.app.admin import AdminConfig
from otel_eval.evaluate.calibration import report
from otel_eval.evaluate.judge.config import JudgeConfig
from otel_eval.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = stored(tmp_path / "otel-eval.db")
    yield s
    s.close()


def post(url: str, body: dict[str, Any], **headers: str) -> tuple[int, dict[str, Any]]:
    """``POST /v1/feedback`` as ``static/outcome.js`` sends it, plus ``headers``."""
    host = url.split("//", 1)[1].split("/", 1)[0]
    request = urllib.request.Request(url + "/v1/feedback", data=json.dumps(body).encode(),
                                     method="POST", headers={
                                         "Content-Type": "application/json",
                                         "Origin": f"http://{host}",
                                         "Sec-Fetch-Site": "same-origin", **headers})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def _cells(page: bytes, trace_id: str) -> list[str]:
    row = page.decode().split(f'href="/ui/runs/{trace_id}"', 1)[1].split("</tr>", 1)[0]
    return [re.sub(r"<[^>]+>", "", c) for c in row.split("<td>")[1:]]


def test_the_list_shows_input_p_success_steps_and_an_inferred_agent(store: Store) -> None:
    with labelled_admin(store) as url:
        status, _, page = get(url + "/ui/")
    assert status == 200
    head = re.findall(r"<th[^>]*>([^<]*)</th>", page.decode())
    assert head[3:8] == ["input", "verdict", "p(success)", "findings", "steps"]
    cells = _cells(page, JUDGED)
    assert cells[1] == "docs-fixer"  # named by a span: no mark
    assert cells[2].startswith("The HTTP timeout should be 30 s as documented")
    assert cells[4] == f"{store.get(JUDGED)['prediction']['p_success']:.2f}"  # type: ignore
    assert cells[6] == "8" == str(store.get(JUDGED)["counts"]["steps"])  # type: ignore
    inferred = _cells(page, INFERRED)
    assert inferred[1] == "docs-fixer inferred"
    assert page.count(b'class="mark inferred"') == 1


def test_a_long_hostile_input_is_one_escaped_bounded_line() -> None:
    from otel_eval.outputs.ui.runs import PREVIEW_CHARS, preview

    shown = preview("<script>alert(1)</script>\n" + "x" * 20_000_000, None)
    assert "<script>" not in shown and "&lt;script&gt;" in shown and "\n" not in shown
    assert len(re.sub(r"<[^>]+>|&[a-z]+;", "", shown)) <= PREVIEW_CHARS
    assert preview({"messages": [{"role": "user", "content": "hi"}]}, None).count("hi") == 1
    redacted = preview("my key is sk-abcdefghijklmnopqrstuvwxyz0123456789", lambda t:
                       t.replace("sk-abcdefghijklmnopqrstuvwxyz0123456789", "[REDACTED]"))
    assert "[REDACTED]" in redacted and "sk-abc" not in redacted


def test_the_run_page_says_p_success_judge_cost_and_folds_critiques(store: Store) -> None:
    with labelled_admin(store) as url:
        _, _, page = get(url + f"/ui/runs/{JUDGED}")
    text = page.decode()
    outcome = text.split('<section class="outcome" id="outcome">', 1)[1].split("</section>")[0]
    assert "predicted to pass (pass threshold 0.5; model success-default@" in outcome
    assert f"judge: 1,234+56 tokens, ${JUDGE_COST}, 1 call" in outcome
    assert "judge: succeeded (outcome score 0.90 &gt;= 0.5)" in outcome
    # the guide run carries its outcome (otel_eval.outcome = success); the judge and the
    # predictor agree with it: nothing to say
    assert "recorded outcome: success" in outcome and 'class="disagree"' not in outcome
    step8 = text.split('id="step-8"', 1)[1].split("</section>", 1)[0]
    folded = step8.split('<details class="critiques">', 1)[1].split("</details>", 1)[0]
    assert "<summary>judge: 2 critiques, lowest 0.25</summary>" in folded
    assert all(c in folded for c in CRITIQUES)
    assert text.count('<details class="critiques">') == 1  # only step 8 has critiques
    assert '<form class="outcome" data-trace="' + JUDGED + '"' in text
    assert 'class="token"' not in text  # no write tokens configured


def test_a_recorded_outcome_the_judge_disagrees_with_is_said(store: Store) -> None:
    with labelled_admin(store) as url:
        status, body = post(url, {"trace_id": JUDGED, "outcome": "failure"})
        assert status == 200 and body["verdict"]["outcome"] == "failure"
        _, _, page = get(url + f"/ui/runs/{JUDGED}")
        _, _, other = get(url + f"/ui/runs/{INFERRED}")
    said = re.findall(r'<p class="disagree" role="note">([^<]*)</p>', page.decode())
    assert said == [
        "The judge disagrees with the recorded outcome (failure): it says the run succeeded "
        "(outcome score 0.90 &gt;= 0.5).",
        "The success predictor disagrees with the recorded outcome (failure): p_success "
        f"{body['prediction']['p_success']:.2f} against a pass threshold of 0.5."]
    assert b"recorded outcome: failure" in page
    assert b'class="disagree"' not in other  # no outcome recorded there


def test_agreement_is_not_disagreement(store: Store) -> None:
    with labelled_admin(store) as url:
        assert post(url, {"trace_id": JUDGED, "outcome": "success"})[0] == 200
        _, _, page = get(url + f"/ui/runs/{JUDGED}")
    assert b"recorded outcome: success" in page and b'class="disagree"' not in page


def _basic(token: str) -> str:
    return "Basic " + base64.b64encode(f"me:{token}".encode()).decode()


def test_under_write_tokens_the_form_asks_for_one_and_only_a_writer_records(
        store: Store) -> None:
    config = AdminConfig(endpoint="127.0.0.1:0", read_tokens={"grafana": "r3ad"},
                         write_tokens={"people": "wr1te"})
    with labelled_admin(store, config) as url:
        status, _, page = get(url + f"/ui/runs/{JUDGED}", basic="r3ad")
        assert status == 200 and b'type="password" class="token"' in page
        # submitted without the script, the form could only POST, and never sends the token
        assert b'method="post"' in page and b'name="token"' not in page
        assert b'type="submit" disabled' in page
        failure = {"trace_id": JUDGED, "outcome": "failure"}
        assert post(url, failure)[0] == 401
        assert post(url, failure, Authorization="Bearer r3ad")[0] == 403
        assert post(url, failure, Authorization=_basic("wr1te"))[0] == 401  # Bearer only
        assert store.labelled(10) == []
        assert post(url, failure, Authorization="Bearer wr1te")[0] == 200
        assert [o for o, _ in store.labelled(10)] == ["failure"]


def test_with_read_tokens_only_no_form_asks_for_a_token_that_cannot_exist(
        store: Store) -> None:
    """With admin.read_tokens and no write_tokens the page showed the form asking for a
    write token no one can have: every submission was a 403. It now says why it cannot
    record, and shows no form."""
    config = AdminConfig(endpoint="127.0.0.1:0", read_tokens={"grafana": "r3ad"})
    with labelled_admin(store, config) as url:
        status, _, page = get(url + f"/ui/runs/{JUDGED}", basic="r3ad")
        failure = {"trace_id": JUDGED, "outcome": "failure"}
        assert post(url, failure, Authorization="Bearer r3ad")[0] == 403
    assert status == 200 and b'class="recorded"' in page  # the facts are still shown
    assert b"<form" not in page and b'class="token"' not in page and b"<script" not in page
    assert b"admin.write_tokens" in page and b"POST /v1/feedback" in page


@pytest.mark.parametrize("headers", [{"Sec-Fetch-Site": "cross-site"},
                                     # a browser without Fetch Metadata (one with it
                                     # sends cross-site with this Origin)
                                     {"Origin": "http://evil.example", "Sec-Fetch-Site": ""},
                                     {"Content-Type": "text/plain"}])
def test_a_cross_site_post_records_nothing(store: Store, headers: dict[str, str]) -> None:
    with labelled_admin(store) as url:
        status, _ = post(url, {"trace_id": JUDGED, "outcome": "failure"}, **headers)
    assert status in (403, 415) and store.labelled(10) == []


def test_the_calibration_page_shows_the_report(store: Store) -> None:
    with labelled_admin(store) as url:
        _, _, empty = get(url + "/ui/calibration")
        assert b"No labelled run carries a judge score or p_success yet" in empty
        assert post(url, {"trace_id": JUDGED, "outcome": "failure"})[0] == 200
        assert post(url, {"trace_id": INFERRED, "outcome": "success"})[0] == 200
        status, _, page = get(url + "/ui/calibration")
    assert status == 200
    found = report(store, JudgeConfig())
    rows = {(r["service"], r["agent"], r["score"]): r for r in found["groups"]}
    text = page.decode()
    assert f"{found['labelled_runs']} runs with a recorded outcome" in text
    p = rows[("*", "*", "p_success")]
    assert (p["runs"], p["successes"], p["failures"]) == (2, 1, 1)
    assert p["auc"] == 0.5  # the same run twice: tied scores
    cells = re.findall(r"<tr[^>]*><td>\*</td><td>\*</td><td>p_success</td>(.*?)</tr>", text)
    values = re.findall(r"<td>([^<]*)</td>", cells[0])
    lo, hi = p["auc_ci95"]
    assert values == [p["model"], "2", "1", "1", "0.5", f"0.500 [{lo:.3f}, {hi:.3f}]",
                      f"{p['kappa']:.3f} [{p['kappa_ci95'][0]:.3f}, {p['kappa_ci95'][1]:.3f}]"]
    judged = rows[("*", "*", "outcome")]  # one labelled run has a judge: no AUC
    outcome = re.findall(r"<td>\*</td><td>\*</td><td>outcome</td>(.*?)</tr>", text)
    assert judged["runs"] == 1 and judged["auc"] is None
    assert re.findall(r"<td>([^<]*)</td>", outcome[0])[:6] == ["", "1", "0", "1", "0.5",
                                                                   "-"]


def test_the_calibration_page_marks_a_score_against_the_outcomes() -> None:
    from otel_eval.outputs.ui.calibration import calibration_page

    row = {"service": "s", "agent": "a", "score": "outcome", "runs": 40, "successes": 20,
           "failures": 20, "threshold": 0.5, "auc": 0.2, "auc_ci95": [0.05, 0.35],
           "kappa": -0.4, "kappa_ci95": [-0.7, -0.1]}
    fine = {**row, "auc": 0.8, "auc_ci95": [0.6, 0.95], "kappa": 0.5, "kappa_ci95": [0.2, 0.8]}
    page = calibration_page({"labelled_runs": 40, "groups": [row, {**fine, "agent": "b"}]})
    assert page.count('class="against"') == 1 and "0.200 [0.050, 0.350]" in page
    assert "not served" in calibration_page(None)
    cut = calibration_page({"labelled_runs": 40, "groups": [row], "groups_left_out": 3})
    assert "3 more rows, on fewer runs each, are left out" in cut  # GET's cap, said
    assert "left out" not in page
