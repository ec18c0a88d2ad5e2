"""MCPL (push events, context hooks, feature sets, scopes): detection and facets.

Capabilities live at ``capabilities.experimental.mcpl`` (WIRE.md). The full MCPL relay (feature-set
enforcement, hooks fan-out) builds on these facets.
"""

from __future__ import annotations

from typing import Any

from gateway.events import Dialect, Event

DIALECT = Dialect.MCPL
_MCPL_METHODS = ("push/", "context/", "inference/", "featureSets/", "scope/", "channels/", "state/", "model/")


def capabilities(params_or_result: dict[str, Any]) -> dict[str, Any] | None:
    caps = params_or_result.get("capabilities")
    if not isinstance(caps, dict):
        return None
    experimental = caps.get("experimental")
    mcpl = experimental.get("mcpl") if isinstance(experimental, dict) else None
    return mcpl if isinstance(mcpl, dict) else None


def speaks(initialize_params: dict[str, Any]) -> bool:
    return capabilities(initialize_params) is not None


def annotate(event: Event) -> None:
    params = event.params
    if event.method and event.method.startswith(_MCPL_METHODS):
        event.facets["mcpl"] = True
    feature_set = params.get("featureSet")
    if isinstance(feature_set, str):
        event.facets["feature_set"] = feature_set
    if "scope" in params:
        event.facets["scope"] = params["scope"]
