"""The service a resource names: its ``service.name``, but the SDK's default is none.

The resource conventions make SDKs send ``unknown_service`` or
``unknown_service:<executable>`` when the app set no ``OTEL_SERVICE_NAME``; separate apps
left on it are not one service, so it names none: their sessions, agent history, share of
the pending budget and metric series are kept apart only as any spans without a
``service.name`` are. The one reader of it: the trajectory (sessions, agent history,
metrics, results), admission (``assemble.service_load``) and held log records read the
service through ``service_name``; pass-through forwards the resource as it came.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SDK_DEFAULT_SERVICE", "service_name"]

SDK_DEFAULT_SERVICE = "unknown_service"


def service_name(resource: Mapping[str, Any]) -> Any:
    """A resource's ``service.name`` as given, None without one or with the SDK's default."""
    name = resource.get("service.name")
    if isinstance(name, str) and (name == SDK_DEFAULT_SERVICE
                                  or name.startswith(SDK_DEFAULT_SERVICE + ":")):
        return None
    return name
