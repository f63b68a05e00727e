"""``Declarer``: the one way to declare a self-metric, on the injected registry.

Every subsystem's metrics object (``ingest.IngestMetrics``, ``traces.TraceMetrics``,
``judge.JudgeMetrics``, ...) is handed one by ``metrics.Metrics`` and declares its series in
its constructor: name without the ``otel_eval_`` namespace, help, labels. The order they are
declared in is the order ``/metrics`` lists them.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.registry import Collector

NAMESPACE = "otel_eval"


class Declarer:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry

    def counter(self, name: str, doc: str, labels: Iterable[str] = ()) -> Counter:
        return Counter(name, doc, list(labels), namespace=NAMESPACE, registry=self.registry)

    def gauge(self, name: str, doc: str, labels: Iterable[str] = ()) -> Gauge:
        return Gauge(name, doc, list(labels), namespace=NAMESPACE, registry=self.registry)

    def histogram(self, name: str, doc: str, labels: Iterable[str],
                  buckets: Iterable[float]) -> Histogram:
        return Histogram(name, doc, list(labels), namespace=NAMESPACE,
                         registry=self.registry, buckets=tuple(buckets))

    def collector(self, collector: Collector) -> None:
        """A value known only when Prometheus scrapes (the predictor's rolling AUC)."""
        self.registry.register(collector)
