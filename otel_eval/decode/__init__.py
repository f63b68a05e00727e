"""Stage: decode. OTLP requests (protobuf or JSON, traces and logs) into spans and GenAI
events, bounded (``body``); and the OTLP encoding the outputs and Kafka publisher use."""
