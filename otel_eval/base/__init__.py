"""What every stage stands on: the data model (``model``), config checks (``configcheck``),
the event-loop thread (``aio``) and the Kafka client settings (``kafka/``)."""
