"""Issue stage, step 1: take the critiques of a window from per-trace evaluation objects.

Input is the v1 evaluation JSON (``results.Evaluation.to_json()``), as stored or as printed by
``otel-eval eval --format jsonl``. Two sources:

- detector findings: ``findings[*].message``; a finding with span ids is a *node* critique of
  the agent node of its first step, one without is a *system* critique; a note
  (``results.NOTE_KINDS``: a finding the code reports at info alone because nothing failed:
  the calls matched the reference, a failure was recovered from, the cost was partly
  unpriced, the stored result was cut to its bounds) is no critique, as a judge critique
  scoring at or above the threshold is none: clustered, "calls match the reference" joined
  "calls do not match" and the matched runs were counted in that issue, and every run of an
  unpriced model was an issue "cost partly unknown"; nor is otel-eval's own failure to
  evaluate a part (``results.OWN_FAILURE_KINDS``: ``evaluation/evaluation_error``, an issue
  of the agent named after a reader's exception);
- judge critiques: see ``judge_critiques`` (the one place that knows the judge's shape),
  of the judges whose grades stand (``base.judgement.graded``, as the evaluation events).

A step that names no agent node belongs to the run's agent (``evaluation.agent``, an inferred
one included: a hung run's agent spans never arrived, so its steps name none); ``root`` only
when the run's agent is unknown too.

Malformed parts are skipped and counted (``Extraction.skipped``), never raised: one bad
evaluation must not stop the clustering of the others. Critiques leave here as valid UTF-8
(``base.text.valid_text``): the clustering hashes them and the gauges label with them. And at
most ``MAX_CRITIQUE_CHARS`` long: a finding message carries span content (a tool name) and a
judge critique can be as long as a stored value, while every later step reads each critique
in full (normalize, the embedder, the examples shown to the namer and the synthesis).
A finding message quotes span content (a run's error text, a code action), and an issue's
title and description are a critique's words, published on ``/v1/issues``, the web view, the
gauges' ``title`` label and Grafana annotations: ``extract``'s ``redact`` (``serve`` and
``otel-eval issues`` give the judge's, ``judge.redaction``, as the web view redacts finding
messages) is applied to each critique's text before anything reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from otel_eval.base.judgement import graded
from otel_eval.base.results import NOT_ENDED_KINDS, NOTE_KINDS, OWN_FAILURE_KINDS
from otel_eval.base.text import valid_text
from otel_eval.store.base import stored_text

Level = Literal["system", "node"]

_SEVERITIES = ("info", "warning", "error")
ROOT_NODE = "root"  # node of step critiques whose step and run name no agent
# Characters of a critique's text the clustering reads: what failed is said at the start, a
# longer text is a value pasted in (a 40,000-character tool name) that says no more about
# the failure but makes each later step pay for it (the finding messages of the public
# datasets are at most 300 characters).
MAX_CRITIQUE_CHARS = 2_000
# Characters read past that cut before redacting, so a value across the cut is still seen
# whole by its pattern (as the web view reads past its cuts).
_REDACT_MARGIN = 512
# A redaction (``judge.redact.Redactor.redact``), or None to keep texts as stored.
Redact = Callable[[str], str] | None


@dataclass(frozen=True, slots=True)
class Critique:
    trace_id: str
    span_id: str | None  # None for trace-level (system) critiques
    node: str  # agent node of the step, else the run's agent, else ROOT_NODE; "" for system
    level: Level
    text: str
    agent: str  # the evaluation's agent (service-level name), "" when unknown
    source: str = "finding"  # finding:<detector> | judge:<judge name>
    severity: str = "warning"  # a finding's (info | warning | error); a judge's: warning
    # Critiques with one problem key are one issue whatever their words: "not_ended" for
    # the findings that mean the run did not end (results.NOT_ENDED_KINDS: "the run never
    # finished" at the root and "tool calls that never ran" on the last step are one
    # problem seen from two sides); "" for the rest, clustered by their words.
    problem: str = ""
    # the evaluation's service, "" when unknown: an agent is a name within its service (two
    # services' "planner" are two agents, as the per-trace metrics count them)
    service: str = ""


@dataclass(slots=True)
class Extraction:
    critiques: list[Critique] = field(default_factory=list)
    trace_ids: set[str] = field(default_factory=set)  # every evaluated trace of the window
    skipped: int = 0  # malformed evaluations / critiques ignored


def _node_of(span_id: str | None, nodes: Mapping[str, str], agent: str) -> str:
    return nodes.get(span_id or "", "") or agent or ROOT_NODE


def _step_nodes(evaluation: Mapping[str, Any]) -> tuple[dict[str, str], dict[int, str]]:
    by_span: dict[str, str] = {}
    by_index: dict[int, str] = {}
    for step in evaluation.get("steps") or ():
        if not isinstance(step, Mapping):
            continue
        node = step.get("node") or ""
        if isinstance(step.get("span_id"), str):
            by_span[step["span_id"]] = node
        if isinstance(step.get("index"), int):
            by_index[step["index"]] = node
    return by_span, by_index


def finding_critiques(evaluation: Mapping[str, Any]) -> Iterator[Critique]:
    trace_id, agent = str(evaluation["trace_id"]), str(evaluation.get("agent") or "")
    by_span, by_index = _step_nodes(evaluation)
    for f in evaluation.get("findings") or ():
        message = f.get("message") if isinstance(f, Mapping) else None
        if (not isinstance(message, str) or not message.strip()
                or (f.get("detector"), f.get("kind")) in NOTE_KINDS | OWN_FAILURE_KINDS):
            continue
        source = f"finding:{f.get('detector', '')}"
        spans = [s for s in f.get("span_ids") or () if isinstance(s, str)]
        indexes = [i for i in f.get("step_indexes") or () if isinstance(i, int)]
        severity = f.get("severity") if f.get("severity") in _SEVERITIES else "warning"
        problem = "not_ended" if f.get("kind") in NOT_ENDED_KINDS else ""
        if not spans and not indexes:
            yield Critique(trace_id, None, "", "system", message, agent, source, severity,
                           problem)
            continue
        span = spans[0] if spans else None
        node = by_span.get(span or "") or (by_index.get(indexes[0], "") if indexes else "")
        yield Critique(trace_id, span, node or agent or ROOT_NODE, "node", message, agent,
                       source, severity, problem)


def _low(score: Any, threshold: float) -> bool:
    if score is None:
        return True
    return isinstance(score, int | float) and not isinstance(score, bool) and score < threshold


def judge_critiques(evaluation: Mapping[str, Any], threshold: float) -> Iterator[Critique]:
    """Critiques of the judge object: ``judge.judges[name].critiques`` (per span: span_id,
    node, score, text; per trace: score, text, no span_id). Adapt here if the shape changes."""
    judge = evaluation.get("judge")
    if not isinstance(judge, Mapping) or not isinstance(judge.get("judges"), Mapping):
        return
    trace_id, agent = str(evaluation["trace_id"]), str(evaluation.get("agent") or "")
    by_span, _ = _step_nodes(evaluation)
    for name, result in judge["judges"].items():
        # a failed judge's critiques stand for no grade (``base.judgement``)
        items = result.get("critiques") if isinstance(result, Mapping) and graded(result) \
            else None
        for c in items or ():
            text = c.get("text") if isinstance(c, Mapping) else None
            if not isinstance(text, str) or not text.strip() or not _low(c.get("score"),
                                                                         threshold):
                continue
            span = c.get("span_id") if isinstance(c.get("span_id"), str) else None
            if span is None:
                yield Critique(trace_id, None, "", "system", text, agent, f"judge:{name}")
            else:
                node = c.get("node") if isinstance(c.get("node"), str) else None
                yield Critique(trace_id, span, node or _node_of(span, by_span, agent),
                               "node", text, agent, f"judge:{name}")


def critique_fields(evaluation: dict[str, Any]) -> dict[str, Any]:
    """What ``extract`` (and ``latest_revisions``) read of a v1 evaluation, and nothing else:
    the issues job keeps this of each stored body of its window (``Store.since(keep=...)``)
    instead of whole bodies (10,000 of 47 kB were 1.3 GB)."""
    findings = evaluation.get("findings")
    steps = evaluation.get("steps")
    return {
        "trace_id": evaluation.get("trace_id"), "revision": evaluation.get("revision"),
        "service": evaluation.get("service"), "agent": evaluation.get("agent"),
        "judge": evaluation.get("judge"),
        "findings": [{k: f.get(k) for k in ("detector", "kind", "severity", "message",
                                                 "span_ids", "step_indexes")}
                     if isinstance(f, Mapping) else f for f in findings]
        if isinstance(findings, list) else findings,
        "steps": [{k: s.get(k) for k in ("span_id", "index", "node")}
                  if isinstance(s, Mapping) else s for s in steps]
        if isinstance(steps, list) else steps,
    }


def extract(evaluations: Iterable[Mapping[str, Any]], threshold: float,
            include_findings: bool = True, redact: Redact = None) -> Extraction:
    """All critiques of ``evaluations`` (judge critiques scoring below ``threshold``), their
    texts ``redact``-ed."""
    out = Extraction()
    for ev in evaluations:
        if not isinstance(ev, Mapping) or not isinstance(ev.get("trace_id"), str):
            out.skipped += 1
            continue
        out.trace_ids.add(ev["trace_id"])
        try:
            found = list(judge_critiques(ev, threshold))
            if include_findings:
                found.extend(finding_critiques(ev))
        except (AttributeError, TypeError):  # a malformed part: skip this evaluation
            out.skipped += 1
            continue
        service = ev.get("service")
        if isinstance(service, str) and service:
            found = [replace(c, service=service) for c in found]
        out.critiques.extend(_clean(c, redact) for c in found)
    return out


def _clean(c: Critique, redact: Redact = None) -> Critique:
    """``c`` with its text redacted and cut to ``MAX_CRITIQUE_CHARS`` (cut past it first:
    work bounded whatever the text's length), and with text every encoder and
    hash takes: a stored body keeps a lone surrogate as a JSON escape, and reading it back
    gives it again (U+FFFD instead). The node and the service, which the catalogue keeps an
    issue by, with NUL as U+FFFD, as the catalogue holds them (``store.base.stored_text``):
    compared as read, a stored issue never matched its own critiques again."""
    if redact is not None:
        c = replace(c, text=redact(valid_text(c.text[:MAX_CRITIQUE_CHARS + _REDACT_MARGIN])))
    if len(c.text) > MAX_CRITIQUE_CHARS:
        c = replace(c, text=c.text[:MAX_CRITIQUE_CHARS])
    texts = (c.trace_id, c.span_id or "", c.node, c.text, c.agent, c.source, c.service)
    if all(valid_text(t) is t for t in texts) and "\x00" not in c.node + c.service:
        return c
    return replace(c, trace_id=valid_text(c.trace_id),
                   span_id=c.span_id and valid_text(c.span_id),
                   node=stored_text(valid_text(c.node)), text=valid_text(c.text),
                   agent=valid_text(c.agent), source=valid_text(c.source),
                   service=stored_text(valid_text(c.service)))
