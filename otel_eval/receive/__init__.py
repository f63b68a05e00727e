"""Stage: receive. OTLP/gRPC and OTLP/HTTP front ends over one ``Ingest`` core, the Kafka
consumer and publisher (``kafka/``), and the offline input: trace files (``loaders/``)."""
