"""What the pipeline says about a run and stores for it (the bottom layer).

    Finding         what one detector says about a trajectory
    Verdict         pass or fail, with the reasons
    Evaluation      trajectory + findings + verdict (+ judge, + prediction); ``to_json()`` is
                    the v1 object
    stored_evaluation   what a stored v1 object says of a trace, to send it again

Promises: ``Evaluation.to_json`` is the v1 per-trace object with only finite floats (NaN and
+-Infinity as the protobuf JSON mapping's strings), and ``to_json_text`` its JSON text for
storing (``jsontext.json_text``), encoded once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from otel_eval.base.jsontext import ascii_json, finite, json_text
from otel_eval.base.model import Span, Trace, run_span
from otel_eval.base.steps import Step, Trajectory

Severity = Literal["info", "warning", "error"]


# Finding kinds (of the non-termination detector) that mean the run did not end; they alone
# count as a non-terminated trace in metrics and alerts (a failed or silent run did end).
NOT_ENDED_KINDS = frozenset({"incomplete", "truncated", "halted", "length_stop",
                             "pending_tool_calls"})

# Release reasons (``model.Trace.release_reason``) of a run otel-eval itself cut while it went
# on, for room (``release_oldest``'s overflow, slot pressure) or because spans of it were
# refused for their service's share: no evidence about how the run ended (``non_termination``
# reports the note ``evaluation/run_cut``, not ``truncated``).
OWN_CUT_REASONS = frozenset({"overflow", "pressure", "service_share"})


# (detector, kind) of the findings that are notes, not problems: the code reports them at
# severity info alone (never a reason) because they say no part of the run failed: it went
# right (the calls or the answer matched the reference, as far as a cut trace shows too, a
# failed call was recovered from) or they describe the measurement, not the agent (a cost
# partly unpriced, an answer not known whole, the stored result cut to its bounds, spans of
# an ended run not read). No critique of the agent (outputs/issues). A kind reported at a
# severity a user sets is never one of them (a loop at info is still a loop); every kind the
# code writes at "info" is one
# (tests/issues/test_issues_critiques.py).
NOTE_KINDS = frozenset({("reference", "match"), ("reference", "unknown"),
                        ("reference", "answer_match"), ("reference", "answer_unknown"),
                        ("recovery", "recovered"),
                        ("budget", "cost_unknown"), ("evaluation", "result_truncated"),
                        ("evaluation", "spans_cut"), ("evaluation", "run_cut")})

# (detector, kind) of the findings that say otel-eval itself failed to evaluate part of the
# run (a detector or reader raised: ``evaluate.detectors.evaluation_error``). Reported at
# error (a run not fully checked is no pass) and counted, but no critique of the agent: the
# issues job would otherwise make otel-eval's own fault an issue of the agent.
OWN_FAILURE_KINDS = frozenset({("evaluation", "evaluation_error")})


def budget_exceeded(detector: Any, kind: Any) -> bool:
    """A finding that says a budget was blown (``budget/<name>_exceeded``); the budget
    detector's ``cost_unknown`` (a cost within it, partly unpriced) is none."""
    return detector == "budget" and str(kind).endswith("_exceeded")


@dataclass(slots=True)
class Finding:
    detector: str  # loop | non_termination | budget | tool_call | reference | recovery | lucky_pass
    kind: str
    severity: Severity
    message: str
    span_ids: list[str] = field(default_factory=list)
    step_indexes: list[int] = field(default_factory=list)
    attributes: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "kind": self.kind,
            "severity": self.severity,
            "message": self.message,
            "span_ids": list(self.span_ids),
            "step_indexes": list(self.step_indexes),
            "attributes": dict(self.attributes),
        }


@dataclass(slots=True)
class Verdict:
    passed: bool
    reasons: list[str]
    outcome: str | None = None  # success | failure when known
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. "reference": {...}

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reasons": list(self.reasons), "outcome": self.outcome,
                **self.extra}


# Keys of the v1 object set after it was bounded (``Evaluation.bounded`` is read without them).
_LATER = frozenset(("judge", "error", "prediction"))


@dataclass(slots=True)
class Evaluation:
    """What the pipeline stores and exports for one trace."""

    trajectory: Trajectory
    findings: list[Finding] = field(default_factory=list)
    verdict: Verdict | None = None
    judge: dict[str, Any] | None = None
    evaluated_at_ns: int = 0
    error: str | None = None  # set when evaluation itself failed (the trace is still stored)
    # {"p_success", "model"} from the success predictor; None without a model (no default)
    prediction: dict[str, Any] | None = None
    # The v1 object as cut to ``trajectory.max_result_bytes`` (``evaluate.bounds``), when
    # the whole one was larger; ``to_json`` returns it instead of building the object anew,
    # with the judge, error and prediction as they are now (the judge is set after)
    bounded: dict[str, Any] | None = None
    # the released trace's ``content_digest``, stored in its own column (not in the v1 object)
    content_digest: str | None = None
    # the released trace's span ids and log records' keys (``model.content_ids``), sorted,
    # space-separated, stored in their own column (not in the v1 object): whether a later
    # trace of this id holds the whole stored run (``evaluate.stage``: a fragment of it is
    # ``late``, never stored over it)
    span_ids: str | None = None
    # ``json_text`` of the v1 object as ``evaluate.bounds`` encoded it, with the judge, the
    # prediction and the number of findings it was made with: ``to_json_text`` reuses it while
    # they are the same (issue 34: a stored body is encoded once); None: encode anew
    encoded: tuple[str, Any, Any, int] | None = None

    @property
    def trace_id(self) -> str:
        return self.trajectory.trace_id

    def to_json(self, finite_floats: bool = True) -> dict[str, Any]:
        """The v1 per-trace object; ``finite_floats=False`` leaves NaN / +-Infinity floats
        as they are (``to_json_text`` replaces them only when there is one)."""
        if self.bounded is not None:
            # cut before the judge was set (and the prediction set again): those, and the
            # error, are the live ones, last as in the whole object
            out = {k: v for k, v in self.bounded.items() if k not in _LATER}
        else:
            t = self.trajectory
            out = {
                "trace_id": t.trace_id,
                "source": t.source,
                "service": t.service,
                "agent": t.agent,
                "agent_source": t.agent_source,
                "task_id": t.task_id,
                "status": t.status,
                **({"release_reason": t.cut_reason} if t.cut_reason else {}),
                "convention": t.convention,
                "revision": t.revision,
                "start_time_unix_nano": t.start_ns,
                "duration_s": round(t.duration_s, 6),
                "input": t.task,
                "output": t.answer,
                "counts": t.counts(),
                "usage": t.usage(),
                "steps": [s.to_json() for s in t.steps],
                "findings": [f.to_json() for f in self.findings],
                "verdict": self.verdict.to_json() if self.verdict else None,
            }
            if t.input_messages is not None:
                out["input_messages"] = t.input_messages
            if t.output_messages is not None:
                out["output_messages"] = t.output_messages
            if t.unrecorded:
                out["unrecorded"] = dict(t.unrecorded)
            if t.code_actions:
                out["code_actions"] = dict(t.code_actions)
            if t.session_id is not None:  # a turn of a conversation, and the conversation's user
                out["session_id"] = t.session_id
                if t.user_id is not None:
                    out["user_id"] = t.user_id
                if t.other_session_ids:  # ids it also carried, not counted under
                    out["other_session_ids"] = list(t.other_session_ids)
        if self.judge is not None:
            out["judge"] = self.judge
        if self.error is not None:
            out["error"] = self.error
        if self.prediction is not None:
            out["prediction"] = self.prediction
        return finite(out) if finite_floats else out

    def to_json_text(self) -> str:
        """``json.dumps(self.to_json())``, without first walking the whole object for
        non-finite floats (~4 us a span): strict encoding raises on one, and only then is the
        object walked and encoded again. Nearly every object has none. The text ``bound``
        encoded is reused while the judge, prediction and findings it saw are the same."""
        done = self.encoded
        if (done is not None and done[1] is self.judge and done[2] is self.prediction
                and done[3] == len(self.findings)):
            return done[0]
        return json_text(self.to_json(finite_floats=False))

    def to_json_ascii(self) -> str:
        """``json.dumps(self.to_json())`` (non-ASCII escaped), from ``to_json_text``."""
        return ascii_json(self.to_json_text())


def stored_evaluation(trace: Trace, record: Mapping[str, Any],
                      evaluated_at_ns: int = 0) -> Evaluation:
    """The evaluation a stored v1 object holds (findings, verdict, judge, prediction), made at
    ``evaluated_at_ns`` (the row's: its events are timed by it; 0 unknown), for
    what is sent again from it (a replay the store already holds: ``assemble.finishing``;
    the judgement of a stopped process: ``judge.stage``). No trajectory is rebuilt: its steps
    are the stored LLM steps that name their reply's ``response_id``, with their span id and
    that id alone (what the events of the first send named, ``outputs.events``). Read as
    found: what is not of the expected shape is left out (the object is ours, but may have
    been cut to its bound). Its ``to_json`` is the stored object itself."""
    findings = []
    for f in record.get("findings") or ():
        if isinstance(f, Mapping):
            severity = f.get("severity")
            findings.append(Finding(
                str(f.get("detector", "")), str(f.get("kind", "")),
                cast(Severity, severity if severity in ("info", "warning", "error") else "info"),
                str(f.get("message", "")), _strings(f.get("span_ids")),
                [i for i in f.get("step_indexes") or () if isinstance(i, int)]
                if isinstance(f.get("step_indexes"), list) else [],
                dict(f["attributes"]) if isinstance(f.get("attributes"), Mapping) else {}))
    v = record.get("verdict")
    verdict = None
    if isinstance(v, Mapping):
        extra = {k: x for k, x in v.items() if k not in ("passed", "reasons", "outcome")}
        outcome = v.get("outcome")
        verdict = Verdict(bool(v.get("passed")), _strings(v.get("reasons")),
                          outcome if isinstance(outcome, str) else None, extra)
    judge, prediction = record.get("judge"), record.get("prediction")
    # the revision and status stored, not the replay's: a restart's assembler starts every
    # trace at revision 0, while the record may be a re-opened run's later revision
    revision, status = record.get("revision"), record.get("status")
    error = record.get("error")
    reason = record.get("release_reason")
    return Evaluation(
        Trajectory(trace.trace_id, trace.source,
                   status if status in ("complete", "incomplete", "truncated") else trace.status,
                   steps=_replied(record.get("steps")), span_count=len(trace.spans),
                   revision=revision if type(revision) is int and revision >= 0
                   else trace.revision,
                   release_reason=reason[:64] if isinstance(reason, str) else ""),
        findings, verdict, dict(judge) if isinstance(judge, Mapping) else None,
        evaluated_at_ns=evaluated_at_ns, error=error if isinstance(error, str) else None,
        prediction=dict(prediction) if isinstance(prediction, Mapping) else None,
        bounded=dict(record))  # ``to_json``: the object as stored (the results topic's)


def stored_run_span_id(record: Mapping[str, Any]) -> str:
    """The span a stored v1 object's run results go on: ``model.run_span`` of its steps'
    spans (the root, else the earliest span; rebuilt steps are no spans), "" with no step.
    The trajectory's ``run_span_id`` read over every span, which the object does not keep;
    read back from its steps by what is sent again from a stored row (a completed session's
    last turn, a judgement an older version's journal named no span for)."""
    steps = record.get("steps")
    spans = [Span("", str(s["span_id"]), _id(s.get("parent_span_id")), "",
                  _ns(s.get("start_time_unix_nano")), _ns(s.get("end_time_unix_nano")))
             for s in steps if isinstance(s, Mapping) and s.get("span_id")
             and not s.get("rebuilt")] if isinstance(steps, list) else []
    found = run_span(spans)
    return found.span_id if found is not None else ""


def _id(value: Any) -> str | None:
    return str(value) if value else None


def _ns(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _replied(steps: Any) -> list[Step]:
    """The stored LLM steps that name their reply (``response_id``), as bare steps."""
    return [Step(s["index"] if type(s.get("index")) is int else 0, s["span_id"], None, "llm",
                 "", response_id=s["response_id"])
            for s in steps if isinstance(s, Mapping) and s.get("kind") == "llm"
            and isinstance(s.get("span_id"), str) and isinstance(s.get("response_id"), str)
            and s["response_id"]] if isinstance(steps, list) else []


def _strings(value: Any) -> list[str]:
    return [str(x) for x in value] if isinstance(value, list) else []
