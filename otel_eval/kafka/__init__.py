"""Kafka stages: consume OTLP records as a scaled-out worker, publish as a stateless receiver,
and publish evaluation results. See ``consumer``, ``publisher``, ``results``, ``offsets``."""
