"""MGP (permissions, access control, audit, lifecycle, streaming): detection and facets.

Servers answer at ``capabilities.mgp`` or ``capabilities.experimental.mgp`` (0.3 servers put it
under ``experimental`` although the spec names the top level); read both.
"""

from __future__ import annotations

from typing import Any

from gateway.events import Dialect, Event

DIALECT = Dialect.MGP


def capabilities(params_or_result: dict[str, Any]) -> dict[str, Any] | None:
    caps = params_or_result.get("capabilities")
    if not isinstance(caps, dict):
        return None
    found = caps.get("mgp")
    if not isinstance(found, dict):
        experimental = caps.get("experimental")
        found = experimental.get("mgp") if isinstance(experimental, dict) else None
    return found if isinstance(found, dict) else None


def speaks(initialize_params: dict[str, Any]) -> bool:
    return capabilities(initialize_params) is not None


def annotate(event: Event) -> None:
    params = event.params
    security = params.get("_mgp")
    if isinstance(security, dict):
        event.facets["mgp"] = security
    elif event.method and (event.method.startswith("mgp/") or event.method.startswith("notifications/mgp.")):
        event.facets["mgp"] = {}
