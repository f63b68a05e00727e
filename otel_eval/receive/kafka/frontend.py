"""``--kafka-publish``: the gRPC/HTTP receivers as stateless front ends.

``PublishingEngine`` stands where the receivers' ``Engine`` stands (``Ingest`` only calls
``submit``): the spans of a request go to the topic, one record per trace id, keyed and
encoded as the collector's kafka exporter writes them, and the request is acknowledged only
after Kafka acknowledged every record (``acks=all`` by default). Log records go to the logs
topic the same way, every one the receiver took (GenAI events and any other log record, with
or without a trace id), each under its resource and scope: the front end stands where the
collector's kafka exporter would, and what it acknowledges is the user's telemetry, passed on
whole (``Ingest(every_log_record=True)``). When Kafka does not answer in time the request is
throttled (the exporter retries; a record that did land meanwhile is written twice, and the
evaluator drops the second copy of a span as ``duplicate_span``, of a log record as
``duplicate_log_record``).
A trace whose record is larger than a Kafka record may be can never be written: its spans
(log records) are rejected with reason ``record_too_large`` (a partial success, not retried)
and the request's other traces are taken.
While Kafka is down every request is throttled: said in a line per ``PUBLISH_LOG_INTERVAL_S``,
with a count of the requests left out, not a line per request.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence

from otel_eval.assemble.engine import Admission
from otel_eval.base.aio import LoopThread
from otel_eval.base.kafka.stats import RECORD_TOO_LARGE
from otel_eval.base.loglimit import LogLimiter, limited_line
from otel_eval.base.model import LogEvent, Span
from otel_eval.decode.encode import encode_spans
from otel_eval.decode.otlp_logs import HeldRecord
from otel_eval.receive.kafka.publisher import KafkaPublisher, RecordsTooLarge

log = logging.getLogger(__name__)

# Seconds between two lines of failed publishes (the rest counted in the next).
PUBLISH_LOG_INTERVAL_S = 10.0


class PublishingEngine:
    def __init__(self, publisher: KafkaPublisher, loop: LoopThread,
                 timeout_s: float = 10.0, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """``clock``: the time of the limit on the failed publishes' lines (the receivers'
        threads share it)."""
        self.publisher = publisher
        self.loop = loop
        self.timeout_s = timeout_s
        self._failure_log = LogLimiter(PUBLISH_LOG_INTERVAL_S, clock)

    def submit(self, items: Sequence[Span] | Sequence[LogEvent] | Sequence[HeldRecord],
               source: str = "otlp",
               on_stored: Callable[[], None] | None = None, *, signal: str = "traces",
               request: bytes | Callable[[], bytes] | None = None,
               sender: str = "") -> Admission:
        """Spans (``signal="traces"``) to ``kafka.topic``, records (``"logs"``) to
        ``kafka.logs_topic``. ``request`` is not spooled: the request is acknowledged once
        Kafka, the log, has it. ``sender`` is not carried: a Kafka worker cannot tell who
        sent a record."""
        if signal == "logs":
            return self._logs(items)  # type: ignore[arg-type]
        return self._spans(items)  # type: ignore[arg-type]

    def _logs(self, records: Sequence[LogEvent | HeldRecord]) -> Admission:
        """Log records go to ``kafka.logs_topic`` (one record per trace id, keyed by it),
        acknowledged once Kafka has them; without a logs topic they are acknowledged and
        counted as ignored (``kafka_publish_mode``)."""
        if not records:
            return Admission()
        if not self.publisher.config.logs_topic:
            return Admission(ignored=Counter({"kafka_publish_mode": len(records)}))
        try:
            self.loop.run(self.publisher.publish_logs(records), timeout_s=self.timeout_s)
        except RecordsTooLarge as e:
            return _partly(records, e)
        except Exception as e:  # as for spans: the exporter retries
            limited_line(self._failure_log, log, "kafka publish of log records failed (%s: "
                         "%s); throttling the exporter", type(e).__name__, e,
                         counted="failed kafka publishes")
            return Admission(throttled="kafka_unavailable")
        return Admission(accepted=len(records))

    def _spans(self, spans: Sequence[Span]) -> Admission:
        # a span otel-eval cannot evaluate (``Span.unevaluable``) is refused with its reason,
        # as a worker without pass-through would refuse it
        unevaluable = Counter(s.unevaluable for s in spans if s.unevaluable)
        spans = [s for s in spans if not s.unevaluable] if unevaluable else spans
        if not spans:
            return Admission(rejected=Counter(unevaluable))
        data = encode_spans(spans).SerializeToString()
        try:
            self.loop.run(self.publisher.publish(data), timeout_s=self.timeout_s)
        except RecordsTooLarge as e:
            adm = _partly(spans, e)
            adm.rejected.update(unevaluable)
            return adm
        except Exception as e:  # broker down, timeout, record too large: the client retries
            limited_line(self._failure_log, log, "kafka publish failed (%s: %s); throttling "
                         "the exporter", type(e).__name__, e, counted="failed kafka publishes")
            return Admission(throttled="kafka_unavailable")
        return Admission(accepted=len(spans), rejected=Counter(unevaluable))


def _partly(items: Sequence[Span] | Sequence[LogEvent | HeldRecord],
            too_large: RecordsTooLarge) -> Admission:
    """The items of the traces written taken, those of the traces too large rejected."""
    n = sum(1 for it in items if it.trace_id in too_large.trace_ids)
    return Admission(accepted=len(items) - n,
                     rejected=Counter({RECORD_TOO_LARGE: n}) if n else Counter())
