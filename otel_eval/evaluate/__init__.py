"""Stage: evaluate. A released trace -> trajectory (``trajectory/``: the passes over the steps
the readers of ``conventions/`` read) -> findings and verdict (``detectors/``), the optional
LLM judge (``judge/``) and success predictor (``predict/``); ``evaluator`` is the one entry,
``stage`` evaluates and stores behind ``handoff`` (the interface the engine knows),
``feedback`` re-judges a stored verdict on a known outcome."""
