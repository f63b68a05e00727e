"""Whether a run worked, in a real browser (headless Chromium over the DevTools protocol): the
run list's new columns fit 1,400 and 800 px, a person records an outcome with the run page's
form (its script posts to /v1/feedback under the strict policy, the page then says the judge
disagrees), and the calibration page shows the report that outcome fed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import Browser
from labelled import INFERRED, JUDGED, labelled_admin, stored
from test_ui_browser import _HEADERS_WHOLE, _safe, _shot, artefacts  # noqa: F401

from otel_eval.store import Store


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("chromium-profile"))
    yield b
    b.close()


@pytest.fixture
def site(tmp_path: Path) -> Iterator[tuple[str, Store]]:
    store = stored(tmp_path / "otel-eval.db")
    try:
        with labelled_admin(store) as url:
            yield url, store
    finally:
        store.close()


def _width(b: Browser, width: int) -> None:
    b.call("Emulation.setDeviceMetricsOverride", session=b.session, width=width, height=900,
           deviceScaleFactor=1, mobile=False)


# The list's header words, each whole on one line (the issues view's check, on table.runlist)
_LIST_HEADERS_WHOLE = _HEADERS_WHOLE.replace("table.issues", "table.runlist")
_SHOWN = ("[...document.querySelectorAll('table.runlist th')]"
          ".filter(th => th.offsetParent !== null).map(th => th.textContent)")


@pytest.mark.parametrize("width", [1400, 800])
def test_the_run_list_fits_1400_and_800_px(browser: Browser, site: tuple[str, Store],
                                           artefacts: Path, width: int) -> None:  # noqa: F811
    url, _ = site
    _width(browser, width)
    try:
        browser.open(url + "/ui/")
        _safe(browser)
        assert browser.js(_LIST_HEADERS_WHOLE) == []
        assert browser.js("document.documentElement.scrollWidth") <= width
        shown = browser.js(_SHOWN)
        assert {"input", "p(success)", "verdict", "steps", "agent"} <= set(shown)
        assert ("tokens" in shown) == (width > 1000)
        # a p_success and a count never break; the input preview is one cut line of text
        lines = browser.js("[...document.querySelectorAll('table.runlist td:nth-child(6)"
                           " .p')].map(e => e.getClientRects().length)")
        assert lines == [1, 1]
        preview = browser.js("document.querySelector('table.runlist .preview').innerText")
        assert preview.startswith("The HTTP timeout should be 30 s") and "\n" not in preview
        mark = browser.js("[document.querySelector('.mark.inferred').innerText,"
                          " document.querySelector('.mark.inferred').getClientRects().length]")
        assert mark == ["inferred", 1]  # one box, never "inferre / d"
        # the time: one line, or at 800 px the date over the time, never a broken word
        time = browser.js("[...document.querySelectorAll('table.runlist td:first-child"
                          " .nobr')].slice(0, 2).map(e => [e.textContent,"
                          " e.getClientRects().length, Math.round(e.getBoundingClientRect().top)])")
        assert [t[:2] for t in time] == [["2024-12-31", 1], ["23:59:59Z", 1]]
        assert (time[0][2] == time[1][2]) == (width > 1000)  # one line, else date over time
        browser.screenshot(artefacts / f"runs-{width}.png", full_page=False)  # not docs
    finally:
        _width(browser, 1280)


def test_a_person_records_an_outcome_and_the_page_says_the_judge_disagrees(
        browser: Browser, site: tuple[str, Store], artefacts: Path) -> None:  # noqa: F811
    url, store = site
    browser.open(url + f"/ui/runs/{JUDGED}")
    _safe(browser)
    assert browser.js("document.querySelectorAll('.disagree').length") == 0
    facts = browser.js("document.querySelector('section.outcome .facts').innerText")
    assert "predicted to pass" in facts and "judge: 1,234+56 tokens, $0.0042" in facts
    browser.js("document.querySelector('form.outcome input[value=failure]').click()")
    before = len(browser.events)
    browser.js("document.querySelector('form.outcome button').click()")
    browser.wait_load(before, "the reload after recording")  # the script reloads on 200
    _safe(browser)
    assert [o for o, _ in store.labelled(10)] == ["failure"]  # through the real endpoint
    said = browser.js("[...document.querySelectorAll('.disagree')].map(p => p.innerText)")
    assert said[0].startswith("The judge disagrees with the recorded outcome (failure)")
    assert "recorded outcome: failure" in browser.js(
        "document.querySelector('section.outcome').innerText")
    browser.screenshot(artefacts / "run-outcome.png", full_page=False)  # not in the docs


def test_a_refused_outcome_is_said_on_the_form(browser: Browser,
                                               site: tuple[str, Store]) -> None:
    url, store = site
    browser.open(url + f"/ui/runs/{INFERRED}")
    # the trace id the form carries, tampered with: the endpoint's 400, said as text
    browser.js("document.querySelector('form.outcome').dataset.trace = '<b>x</b>';"
               "document.querySelector('form.outcome input[value=success]').click();"
               "document.querySelector('form.outcome button').click()")
    status = browser.js("new Promise(done => { const o = document.querySelector("
                        "'form.outcome output'); const look = () => o.textContent.startsWith("
                        "'not recorded') ? done(o.textContent) : setTimeout(look, 20); look();"
                        " })")
    assert status.startswith("not recorded (400): trace_id: must be 32 hex digits")
    assert browser.js("document.querySelectorAll('form.outcome output b').length") == 0
    assert store.labelled(10) == []
    _safe(browser)


def test_the_calibration_page_shows_what_the_outcomes_say(
        browser: Browser, site: tuple[str, Store], artefacts: Path) -> None:  # noqa: F811
    url, _ = site
    for trace_id, outcome in ((JUDGED, "failure"), (INFERRED, "success")):
        browser.open(url + f"/ui/runs/{trace_id}")
        browser.js(f"document.querySelector('form.outcome input[value={outcome}]').click()")
        before = len(browser.events)
        browser.js("document.querySelector('form.outcome button').click()")
        browser.wait_load(before)
    browser.open(url + "/ui/calibration")
    _safe(browser)
    rows = browser.js("[...document.querySelectorAll('table.calibration tbody tr')]"
                      ".map(r => [...r.cells].map(c => c.innerText))")
    every = {r[2]: r for r in rows if r[:2] == ["*", "*"]}
    assert every["p_success"][4:8] == ["2", "1", "1", "0.5"]  # after the model's label
    assert every["p_success"][8].startswith("0.500 [")
    assert browser.js("document.querySelector('nav a.on').innerText") == "calibration"
    _shot(browser, artefacts, "calibration")  # docs/images/ui-calibration.png
