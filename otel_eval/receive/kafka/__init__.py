"""Kafka front ends: consume OTLP records as a scaled-out worker (``consumer``, ``offsets``),
publish as a stateless receiver (``publisher``, ``frontend``)."""
