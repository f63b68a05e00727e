"""Output (part): on the run page, between the header and the steps, whether the run worked
as each grader sees it, and the form that records what really happened.

    p_success (predictor) · the judge's outcome and its cost · the recorded outcome
    -> where a grader disagrees with the recorded outcome, said in words
    -> form: success | failure [write token] -> static/outcome.js -> POST /v1/feedback

The form is sent by this package's one script (``/ui/static/outcome.js``; the policy allows
``script-src 'self'`` and ``connect-src 'self'``, nothing inline) as ``POST /v1/feedback``
with ``Content-Type: application/json`` from this origin: the endpoint's own checks
(``app.admin_access.cross_site``: JSON only, ``Sec-Fetch-Site`` same-origin, else
``Origin`` this host) are what keep another site's page from sending it. Under
``admin.write_tokens`` the form asks for a write token, sent as ``Authorization: Bearer``
and kept nowhere (not in storage, not in the URL). A page is read with a read token; the
write is authorized on its own. With ``admin.read_tokens`` and no write token, no write can
succeed: the page says so instead of showing the form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from otel_eval.outputs.ui.html import Html, h
from otel_eval.outputs.ui.values import short
from otel_eval.outputs.ui.verdicts import (
    disagreement,
    judge_cost,
    judge_outcome,
    p_badge,
    p_success,
    recorded,
)

SCRIPT = "/ui/static/outcome.js"
# Who may record an outcome (POST /v1/feedback): anyone (no admin tokens), the holder of a
# write token (admin.write_tokens), or no one (admin.read_tokens only: every write is 403)
Writes = Literal["open", "token", "closed"]


def _facts(body: Mapping[str, Any], threshold: float) -> list[Any]:
    prediction = body.get("prediction") if isinstance(body.get("prediction"), dict) else {}
    p = p_success(body)
    facts: list[Any] = []
    if p is not None:
        verdict = "predicted to fail" if p < threshold else "predicted to pass"
        facts.append(h("span", "p(success) ", p_badge(body, threshold),
                       f" {verdict} (pass threshold {threshold:g}; model "
                       f"{short((prediction or {}).get('model') or '-', 60)})"))
    else:
        facts.append(h("span", "no prediction (prediction.model_path is empty)"))
    judged = judge_outcome(body.get("judge"))
    if judged is not None:
        facts.append(h("span", f"judge: {'succeeded' if judged[0] else 'failed'} "
                               f"({judged[1]})"))
    cost = judge_cost(body)
    if cost:
        facts.append(h("span", cost, class_="judge-cost"))
    outcome = recorded(body)
    facts.append(h("span", f"recorded outcome: {outcome}" if outcome
                   else "no outcome recorded", class_="recorded"))
    return facts


def _form(trace_id: str, writes: Writes) -> Html:
    if writes == "closed":
        return h("p", "Recording an outcome (POST /v1/feedback) needs a write token, and this "
                      "endpoint has read tokens only: set admin.write_tokens.",
                 class_="no-writes", role="note")
    choices = [h("label", h("input", type="radio", name="outcome", value=v, required=True),
                 " " + v) for v in ("success", "failure")]
    # the token has no name, the form posts and its button waits for the script: submitted
    # natively (no script yet, or none) it must never put the token in a URL or a request
    token = h("label", "write token ", h("input", type="password", class_="token",
                                         autocomplete="off", required=True,
                                         placeholder="admin.write_tokens")) \
        if writes == "token" else None
    return h("form", h("span", "What happened? ", class_="label"), choices, token,
             h("button", "record outcome", type="submit", disabled=True),
             h("output", "", class_="status", role="status", aria_live="polite"),
             h("noscript", "Recording needs the page's script (or POST /v1/feedback)."),
             class_="outcome", data_trace=trace_id, data_endpoint="/v1/feedback",
             method="post")


def outcome_section(body: Mapping[str, Any], threshold: float, writes: Writes = "open",
                    form: bool = True) -> Html:
    """``body``: the stored per-trace object (its whole ``judge`` record); ``threshold``:
    ``prediction.pass_threshold``; ``writes``: who may record an outcome (the form asks
    for a write token, or is replaced by why none can be recorded)."""
    disagree = disagreement(body, threshold)
    trace_id = str(body.get("trace_id") or "")
    facts = [x for f in _facts(body, threshold) for x in (f, " · ")][:-1]
    return h("section", h("p", facts, class_="facts"),
             [h("p", d, class_="disagree", role="note") for d in disagree],
             _form(trace_id, writes) if form else None,
             h("script", src=SCRIPT, defer=True) if form and writes != "closed" else None,
             class_="outcome", id="outcome")
