"""Sink: evaluation results as OpenTelemetry events (``gen_ai.evaluation.result`` log records).

One log record per finding and one per verdict, following the GenAI semantic conventions
(event ``gen_ai.evaluation.result``; attributes ``gen_ai.evaluation.name`` (required),
``gen_ai.evaluation.score.value`` / ``.score.label`` (when applicable),
``gen_ai.evaluation.explanation``, ``error.type`` when the evaluation itself failed,
``gen_ai.response.id`` when the evaluated span is an LLM call that recorded its response id).
The record's trace id / span id are those of the evaluated span, so backends show the result
on that span. Our extras are under ``otel_eval.*``; every record of a run (its findings',
verdict's and judge's) names the run evaluated as the pass-through root does
(``run_stamps``): ``otel_eval.trace.revision``, and ``otel_eval.trace.release_reason`` for a
run not released ``complete`` (a run cut for room is judged on what came before the cut).

Evaluator provenance (who evaluated, which revision, how) follows the names of
semantic-conventions-genai pull request 359, still open (the released conventions name no
evaluator attribute yet): ``gen_ai.evaluation.evaluator.id`` (``otel-eval/<detector>``,
``otel-eval/verdict``, ``otel-eval/session.verdict``, ``otel-eval/judge.<judge>``),
``gen_ai.evaluation.evaluator.version`` (otel-eval's version) and
``gen_ai.evaluation.evaluator.type`` (``deterministic`` for the detectors and the verdicts,
``llm_judge`` for the judge). ``otel_eval.evaluator.version`` stays, for the queries written
against it.

    finding -> name = detector ("loop", "tool_call", ...), label = finding kind,
               explanation = message, span = first flagged span (else the root span);
               severity_number from the finding's severity (info / warning / error)
    verdict -> name = "otel_eval.verdict", value = 1.0 / 0.0, label = "pass" / "fail",
               explanation = the reasons; span = the root span
    session -> name = "otel_eval.session.verdict" (a completed conversation, from the session
               completion job), value = 1.0 / 0.0, label = pass / fail, explanation = the
               reasons, ``gen_ai.conversation.id`` = the session id,
               ``otel_eval.session.completion`` = the record's ``completion``; span = the
               last turn's root span
    judge   -> name = judge or judge.dimension ("trace", "process.goal_alignment"), value =
               the score, label = pass / fail, explanation = the critique; span = the judged
               step (else the root); sent later, when the asynchronous judge is done

Records are built here as OTLP protobuf (not through the SDK's LoggerProvider) so that the
trace context is explicit per record and every dropped record is counted with a reason
(``results.sender``); the SDK's batch processor drops silently when its queue is full.

A trace's findings and verdict are sent at least once (``base.component.DeliveringSink``):
the spool keeps the trace until its records are delivered or dropped for good, so a stop
whose flush could not deliver them, or a crash, sends them after the restart, from the
evaluation the store holds. The judge's, sent later, are held in its journal until delivered
(``evaluate.judge.journal``); a session's, in the store's ``sessions`` row
(``evaluate.sessions.job``).
"""

from __future__ import annotations

import time
from importlib import metadata
from typing import Any

from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.logs.v1 import logs_pb2
from opentelemetry.proto.resource.v1.resource_pb2 import Resource

from otel_eval.base import model
from otel_eval.base.component import Held
from otel_eval.base.judgement import graded, judged_at
from otel_eval.base.results import Evaluation
from otel_eval.decode.encode import dict_to_attributes
from otel_eval.outputs.batcher import LOGS
from otel_eval.outputs.config import ExportConfig
from otel_eval.outputs.deps import Deps
from otel_eval.outputs.sender import OtlpSender, SenderSink
from otel_eval.telemetry.metrics import Metrics

EVENT_NAME = "gen_ai.evaluation.result"
VERDICT_NAME = "otel_eval.verdict"
SESSION_VERDICT_NAME = "otel_eval.session.verdict"
SINK = "events"
_SEVERITY = {"info": (9, "INFO"), "warning": (13, "WARN"), "error": (17, "ERROR")}
# semantic-conventions-genai PR 359 (open): evaluator provenance on gen_ai.evaluation.result.
EVALUATOR_ID = "gen_ai.evaluation.evaluator.id"
EVALUATOR_VERSION = "gen_ai.evaluation.evaluator.version"
EVALUATOR_TYPE = "gen_ai.evaluation.evaluator.type"
# the completion evaluated ("Recommended when available"), on a record of an LLM step's span
RESPONSE_ID = "gen_ai.response.id"
EVALUATOR_PREFIX = "otel-eval/"
DETERMINISTIC = "deterministic"
LLM_JUDGE = "llm_judge"


def _version() -> str:
    try:
        return metadata.version("otel-eval")
    except metadata.PackageNotFoundError:
        return "0.0.0"


def provenance(evaluator: str, version: str, kind: str) -> dict[str, Any]:
    """The evaluator attributes of one record: ``evaluator`` is the detector, ``verdict`` or
    ``judge.<judge>``; ``kind`` ``deterministic`` or ``llm_judge``."""
    return {EVALUATOR_ID: EVALUATOR_PREFIX + evaluator, EVALUATOR_VERSION: version,
            EVALUATOR_TYPE: kind, "otel_eval.evaluator.version": version}


def run_stamps(evaluation: Evaluation) -> dict[str, Any]:
    """What every record of a run says of the run evaluated, named as the pass-through
    root's stamps (``outputs.forward``): its ``otel_eval.trace.revision`` and, for a run
    not released ``complete``, ``otel_eval.trace.release_reason`` (the v1 object's
    ``release_reason``: a run cut for room, ``pressure``, is judged on what came before the
    cut; a consumer of the events tells it from a whole run's by this)."""
    t = evaluation.trajectory
    return _run(t.revision, t.cut_reason)


def _run(revision: int, cut_reason: str) -> dict[str, Any]:
    return {"otel_eval.trace.revision": revision,
            **({"otel_eval.trace.release_reason": cut_reason} if cut_reason else {})}


def _record(trace_id: str, span_id: str, severity: str, time_ns: int,
            attrs: dict[str, Any]) -> logs_pb2.LogRecord:
    number, text = _SEVERITY.get(severity, _SEVERITY["info"])
    return logs_pb2.LogRecord(
        time_unix_nano=time_ns, observed_time_unix_nano=time_ns,
        severity_number=number, severity_text=text,  # type: ignore[arg-type]
        event_name=EVENT_NAME, attributes=dict_to_attributes(attrs),
        trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex(span_id) if span_id else b"",
        flags=1 if span_id else 0,
    )


def response_ids(evaluation: Evaluation) -> dict[str, str]:
    """Span id -> the provider's id of the reply (``gen_ai.response.id``) of each LLM step of
    the evaluation that recorded one: a record on that span evaluates that completion, and
    the conventions recommend naming it ("when available"). A stored evaluation sent again
    (``results.stored_evaluation``) names the same: its steps are the stored LLM steps' ids."""
    return {s.span_id: s.response_id for s in evaluation.trajectory.steps
            if s.kind == "llm" and s.response_id}


def _on_response(attrs: dict[str, Any], span: str, ids: dict[str, str]) -> dict[str, Any]:
    rid = ids.get(span)
    if rid is not None:
        attrs[RESPONSE_ID] = rid
    return attrs


def finding_records(evaluation: Evaluation, root: str, version: str,
                    time_ns: int) -> list[logs_pb2.LogRecord]:
    out = []
    ids = response_ids(evaluation)
    stamps = run_stamps(evaluation)
    for f in evaluation.findings:
        attrs: dict[str, Any] = {
            "gen_ai.evaluation.name": f.detector,
            "gen_ai.evaluation.score.label": f.kind,
            "gen_ai.evaluation.explanation": f.message,
            "otel_eval.detector": f.detector,
            "otel_eval.severity": f.severity,
            **provenance(f.detector, version, DETERMINISTIC),
            **stamps,
        }
        if f.span_ids:
            attrs["otel_eval.span_ids"] = list(f.span_ids)
        span = f.span_ids[0] if f.span_ids else root
        out.append(_record(evaluation.trace_id, span, f.severity, time_ns,
                           _on_response(attrs, span, ids)))
    return out


def verdict_record(evaluation: Evaluation, root: str, version: str,
                   time_ns: int) -> logs_pb2.LogRecord | None:
    v = evaluation.verdict
    if v is None:
        return None
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": VERDICT_NAME,
        "gen_ai.evaluation.score.value": 1.0 if v.passed else 0.0,
        "gen_ai.evaluation.score.label": "pass" if v.passed else "fail",
        "gen_ai.evaluation.explanation": "; ".join(v.reasons) or "no failing findings",
        **provenance("verdict", version, DETERMINISTIC),
        **run_stamps(evaluation),
    }
    if v.outcome is not None:
        attrs["otel_eval.outcome"] = v.outcome
    return _record(evaluation.trace_id, root, "info", time_ns,
                   _on_response(attrs, root, response_ids(evaluation)))


def judge_records(evaluation: Evaluation, root: str, version: str, time_ns: int,
                  low_score: float = 0.5) -> list[logs_pb2.LogRecord]:
    """Records for the LLM judge's grades (``evaluation.judge``): one per critique (on the
    judged step's span, else the root), one per aggregate score without its own critique
    (``step``, ``step_min``, ``process``), and one with ``error.type`` per failed judge.
    Names: the judge (``trace``, ``outcome``, ``step``) or judge.dimension
    (``process.goal_alignment``); label ``pass`` / ``fail`` against ``low_score``."""
    judged = evaluation.judge or {}
    model_name = str(judged.get("model") or "")
    out: list[logs_pb2.LogRecord] = []
    ids = response_ids(evaluation)
    for judge, entry in (judged.get("judges") or {}).items():
        if not graded(entry):
            status = entry.get("status", "ok")
            out.append(failure_record(evaluation.trace_id, root, judge, status,
                                      str(entry.get("error") or status), version, time_ns,
                                      run_stamps(evaluation)))
            continue
        at_root = set()
        for c in entry.get("critiques", []):
            if c.get("span_id") is None:
                at_root.add(c["dimension"])
            out.append(_grade(evaluation, c.get("span_id") or root, judge, c["dimension"],
                              float(c["score"]), str(c.get("text", "")), model_name, version,
                              time_ns, low_score, ids))
        for dim, value in entry.get("scores", {}).items():
            if dim not in at_root:
                out.append(_grade(evaluation, root, judge, dim, float(value),
                                  f"aggregate of the {judge} judge's scores", model_name,
                                  version, time_ns, low_score, ids))
    return out


def _grade(evaluation: Evaluation, span: str, judge: str, dimension: str, score: float,
           explanation: str, model_name: str, version: str, time_ns: int,
           low_score: float, ids: dict[str, str]) -> logs_pb2.LogRecord:
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": judge if dimension == judge else f"{judge}.{dimension}",
        "gen_ai.evaluation.score.value": score,
        "gen_ai.evaluation.score.label": "pass" if score >= low_score else "fail",
        "gen_ai.evaluation.explanation": explanation,
        "otel_eval.judge.model": model_name,
        **provenance(f"judge.{judge}", version, LLM_JUDGE),
        **run_stamps(evaluation),
    }
    return _record(evaluation.trace_id, span, "info", time_ns, _on_response(attrs, span, ids))


def failure_record(trace_id: str, span_id: str, name: str, error_type: str, explanation: str,
                   version: str, time_ns: int,
                   run: dict[str, Any] | None = None) -> logs_pb2.LogRecord:
    """An evaluation that could not be made (judge timeout, parse error): ``error.type`` set,
    no score. ``name``: the judge (``trace``) or ``judge.<judge>``; only the judge fails.
    ``run``: the run judged as the judge's grades name it (``run_stamps``: its revision and
    why it was cut), when known."""
    judge = name if name.startswith("judge.") else f"judge.{name}"
    attrs: dict[str, Any] = {"gen_ai.evaluation.name": name, "error.type": error_type,
                             "gen_ai.evaluation.explanation": explanation,
                             **provenance(judge, version, LLM_JUDGE), **(run or {})}
    return _record(trace_id, span_id, "warning", time_ns, attrs)


def session_record(record: dict[str, Any], trace_id: str, span_id: str, version: str,
                   time_ns: int) -> logs_pb2.LogRecord | None:
    """The verdict of a completed session (``evaluate.sessions``): name
    ``otel_eval.session.verdict``, value 1.0 / 0.0, label pass / fail, explanation the reasons;
    ``gen_ai.conversation.id`` the session id, ``otel_eval.session.service`` its service
    (none for turns without one) and ``otel_eval.session.completion`` which completion of the
    conversation it is (the record's ``completion``: 0, one more each time a re-opened session
    is completed again), on the last turn's root span; None for a
    session with no verdict (its evaluation failed) or no trace id."""
    verdict = record.get("verdict")
    if not isinstance(verdict, dict) or len(trace_id) != 32:
        return None
    passed = bool(verdict.get("passed"))
    findings = record.get("findings") or []
    attrs: dict[str, Any] = {
        "gen_ai.evaluation.name": SESSION_VERDICT_NAME,
        "gen_ai.evaluation.score.value": 1.0 if passed else 0.0,
        "gen_ai.evaluation.score.label": "pass" if passed else "fail",
        "gen_ai.evaluation.explanation": "; ".join(str(r) for r in verdict.get("reasons")
                                                   or ()) or "no failing findings",
        "gen_ai.conversation.id": str(record.get("session_id")),
        "otel_eval.session.turns": int(record.get("turns") or 0),
        "otel_eval.session.findings": ",".join(sorted(
            {f"{f.get('detector')}.{f.get('kind')}" for f in findings})),
        **provenance("session.verdict", version, DETERMINISTIC),
    }
    completion = record.get("completion")
    if type(completion) is int and completion >= 0:  # 0 the first time, one more each again
        attrs["otel_eval.session.completion"] = completion
    service = record.get("service")
    if isinstance(service, str) and service:  # a session is an id within its service
        attrs["otel_eval.session.service"] = service
    p = (record.get("prediction") or {}).get("p_success")
    if isinstance(p, int | float):
        attrs["otel_eval.prediction.p_success"] = float(p)
    try:
        return _record(trace_id, span_id if len(span_id) == 16 else "",
                       "info" if passed else "warning", time_ns, attrs)
    except ValueError:  # a trace or span id that is not hex
        return None


class EvaluationEvents(SenderSink):
    """Sink exporting ``gen_ai.evaluation.result`` records to ``config.events_endpoint``."""

    name = SINK

    def __init__(self, config: ExportConfig, metrics: Metrics, *,
                 evaluator_version: str | None = None,
                 resource: dict[str, Any] | None = None) -> None:
        if not config.events_endpoint:
            raise ValueError("export.events_endpoint is empty: events are off")
        self.version = evaluator_version or _version()
        res = resource if resource is not None else {"service.name": "otel-eval",
                                                     "service.version": self.version}
        self._resource = Resource(attributes=dict_to_attributes(res))
        self._scope = InstrumentationScope(name="otel_eval.outputs.events", version=self.version)
        self._sender: OtlpSender[logs_service_pb2.ExportLogsServiceRequest] = OtlpSender(
            SINK, config.events_endpoint,
            lambda ch: logs_service_pb2_grpc.LogsServiceStub(ch).Export,
            logs_service_pb2.ExportLogsServiceRequest, LOGS,
            lambda resp: int(resp.partial_success.rejected_log_records),
            metrics.sinks.events_emitted, metrics, config)

    def items(self, trace: model.Trace, evaluation: Evaluation | None) -> int:
        """One record per finding and one for the verdict; none without an evaluation."""
        if evaluation is None:
            return 0
        return len(evaluation.findings) + (evaluation.verdict is not None)

    def export(self, trace: model.Trace, evaluation: Evaluation,
               held: Held | None = None) -> None:
        now = evaluation.evaluated_at_ns or time.time_ns()
        root = model.run_span_id(trace.spans)
        records = finding_records(evaluation, root, self.version, now)
        verdict = verdict_record(evaluation, root, self.version, now)
        if verdict is not None:
            records.append(verdict)
        self._submit(records, (held,) if held is not None else ())

    def pass_on(self, trace: model.Trace, held: Held | None = None) -> None:
        """No evaluation, no event."""

    def export_judge(self, evaluation: Evaluation, root: str, low_score: float,
                     held: tuple[Held, ...] = ()) -> None:
        """The judge's grades, sent once the (asynchronous) judge is done with the trace;
        ``held`` taken with them (the judge's journal entry, cleared once they are delivered
        or dropped for good). Their time is the judgement's (``judged_at``: one sent again
        after a restart, from the store, keeps it), else now."""
        at = judged_at(evaluation.judge) or time.time_ns()
        self._submit(judge_records(evaluation, root, self.version, at, low_score), held)

    def evaluation_failed(self, trace: model.Trace, name: str, error_type: str,
                          explanation: str) -> None:
        """One record with ``error.type`` for an evaluation that failed (e.g. the judge)."""
        rec = failure_record(trace.trace_id, model.run_span_id(trace.spans), name, error_type,
                             explanation, self.version, time.time_ns(),
                             _run(trace.revision,
                                  trace.release_reason if trace.status != "complete" else ""))
        self._submit([rec])

    def export_session(self, record: dict[str, Any], trace_id: str, span_id: str,
                       held: tuple[Held, ...] = ()) -> None:
        """A completed session: one record on its last turn's root span (``session_record``);
        ``held`` taken with it (the completion's event owed in the store until delivered or
        dropped for good). Its time is the completion's (an event owed since before a
        restart, sent by the next process, keeps it)."""
        at = record.get("completed_at_unix_nano")
        at = at if type(at) is int and 0 < at < 2**63 else time.time_ns()
        rec = session_record(record, trace_id, span_id, self.version, at)
        if rec is not None:
            self._submit([rec], held)

    def _submit(self, records: list[logs_pb2.LogRecord], held: tuple[Held, ...] = ()) -> None:
        if not records:
            return
        req = logs_service_pb2.ExportLogsServiceRequest()
        rl = req.resource_logs.add(resource=self._resource)
        rl.scope_logs.add(scope=self._scope, log_records=records)
        self._sender.submit(req, len(records), held)


def build(config: ExportConfig, deps: Deps) -> EvaluationEvents | None:
    """The events sink when ``export.events_endpoint`` is set."""
    return EvaluationEvents(config, deps.metrics) if config.events_endpoint else None
