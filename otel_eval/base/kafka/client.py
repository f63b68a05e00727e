"""Kafka client settings shared by the consumer and the producers (aiokafka keyword args).

Turns ``KafkaConfig`` (brokers, client id, SASL/TLS) into the keyword arguments every aiokafka
client takes, so security is configured in one place.
"""

from __future__ import annotations

import ssl
from typing import Any

from otel_eval.base.kafka.config import KafkaConfig, KafkaSecurityConfig


def ssl_context(sec: KafkaSecurityConfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=sec.tls_ca_file or None)
    if sec.tls_cert_file:
        ctx.load_cert_chain(sec.tls_cert_file, sec.tls_key_file)
    if sec.tls_insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def client_kwargs(cfg: KafkaConfig) -> dict[str, Any]:
    """Connection keyword arguments for AIOKafkaConsumer / AIOKafkaProducer."""
    sec = cfg.security
    kw: dict[str, Any] = {
        "bootstrap_servers": [b.strip() for b in cfg.brokers.split(",") if b.strip()],
        "client_id": cfg.client_id,
        "security_protocol": sec.protocol,
    }
    if sec.protocol in ("SSL", "SASL_SSL"):
        kw["ssl_context"] = ssl_context(sec)
    if sec.protocol.startswith("SASL"):
        kw["sasl_mechanism"] = sec.sasl_mechanism
        kw["sasl_plain_username"] = sec.sasl_username
        kw["sasl_plain_password"] = sec.sasl_password
    return kw
