"""What every stage stands on: the data model (``model``: spans and traces, ``steps``: the
trajectory, ``results``: findings, verdicts, evaluations, ``jsontext``: their JSON text), config
checks (``configcheck``), the event-loop thread (``aio``) and the Kafka client settings
(``kafka/``)."""
