"""Self-telemetry: every otel-eval metric (Prometheus), declared on an injected registry;
stages call verbs. Imported by every stage; imports only the base."""
