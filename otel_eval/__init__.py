"""otel-eval: evaluate LLM agent traces as trajectories while they stream."""

__version__ = "0.1.0"
