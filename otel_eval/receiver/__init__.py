"""Stage: receive. OTLP/gRPC and OTLP/HTTP front ends over one ``Ingest`` core."""
