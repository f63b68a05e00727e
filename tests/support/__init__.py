"""What the tests share, one of each (``pythonpath`` in pyproject.toml puts ``tests/`` on the
path, so every test imports ``support.<module>``; no test edits the import path):

- ``harness``: an in-process ``Service`` on port 0 with a hand-driven clock, and an SDK run;
- ``served``: ``otel-eval serve`` as a real process (ports read from its log);
- ``clock``: ``ManualClock``, the one hand-driven clock;
- ``poll``: ``poll`` / ``poll_async``, the one wait for a condition with a deadline;
- ``ports``: ``free_port``, for the programs that cannot report the port 0 they bound;
- ``otlp_capture``: ``Capture``, the one OTLP backend (gRPC and HTTP, scripted failures and
  RetryInfo throttling; gRPC over TLS/mTLS with a bearer token for the exporters' transport);
- ``kafka_server``, ``postgresql_server``, ``otel_collector``: the real external parts
  (Kafka broker, PostgreSQL, the OpenTelemetry Collector), each behind its marker;
- ``tls_certs``: a throw-away CA and its certificates; ``bench_module``: bench/ scripts as
  modules.
"""
