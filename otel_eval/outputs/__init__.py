"""Stage: outputs. Results written back as telemetry (``events``: gen_ai.evaluation.result,
``forward``: stamped spans, both through ``sender``), to Kafka (``kafka``), and recurring
issues clustered from them (``issues/``)."""
