"""MCPL 0.4 (push events, context hooks, feature sets, scopes, channels): the dialect's wire shapes.

Everything MCPL-specific about *reading and writing* messages lives here: where the capabilities sit
(``capabilities.experimental.mcpl``), the two shapes real servers use for ``featureSets`` (an object
keyed by name, or an array of ``{name, ...}``) and for ``channels`` (an object or a plain boolean),
which methods travel in which direction, and the error codes. What may pass is decided in
``policies/feature_sets.py`` and ``policies/scopes.py``; who gets what is ``gateway/mcpl/``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

# Appendix A and §14.6 (the numbers live in the one error table).
from gateway.errors import (
    CHANNEL_NOT_PERMITTED as CHANNEL_NOT_PERMITTED,
    CHANNEL_OPEN_FAILED as CHANNEL_OPEN_FAILED,
    CHECKPOINT_NOT_FOUND as CHECKPOINT_NOT_FOUND,
    FEATURE_SET_NOT_ENABLED as FEATURE_SET_NOT_ENABLED,
    UNKNOWN_CHANNEL as UNKNOWN_CHANNEL,
    UNKNOWN_FEATURE_SET as UNKNOWN_FEATURE_SET,
)
from gateway.events import Dialect, Event

DIALECT = Dialect.MCPL
VERSION = "0.4"
_MCPL_METHODS = ("push/", "context/", "inference/", "featureSets/", "scope/", "channels/", "state/", "model/")


# Server -> host requests and notifications the gateway answers or routes (never passed through blind).
SERVER_REQUESTS = frozenset(
    {
        "push/event",
        "inference/request",
        "model/info",
        "scope/elevate",
        "channels/register",
        "channels/list",
        "channels/incoming",
    }
)
SERVER_NOTIFICATIONS = frozenset({"featureSets/changed", "channels/changed"})
# Host -> server requests and notifications.
HOST_REQUESTS = frozenset(
    {
        "featureSets/update",  # a request from 0.5 on (what 0.5 peers send); a notification in 0.4
        "context/beforeInference",
        "context/afterInference",
        "state/rollback",
        "channels/list",
        "channels/open",
        "channels/close",
        "channels/publish",
    }
)
HOST_NOTIFICATIONS = frozenset(
    {
        "featureSets/update",
        "context/afterInference",
        "inference/chunk",
        "channels/outgoing/chunk",
        "channels/outgoing/complete",
        "channels/publish",
    }
)

POSITIONS = ("system", "beforeUser", "afterUser")

# What `uses` values mean for routing.
USES_PUSH = "pushEvents"
USES_BEFORE = "contextHooks.beforeInference"
USES_AFTER = "contextHooks.afterInference"
USES_INFERENCE = "inferenceRequest"
USES_TOOLS = "tools"
USES_PUBLISH = "channels.publish"
USES_OBSERVE = "channels.observe"

_CHANNEL_FLAGS = ("register", "publish", "observe", "lifecycle", "streaming")

# What the gateway, as the host of every backend, tells backends it supports: it relays all of it to
# its own hosts (and answers what no host can, so a server never waits for nothing).
HOST_CAPABILITIES: dict[str, Any] = {
    "version": VERSION,
    "pushEvents": True,
    "contextHooks": {"beforeInference": True, "afterInference": {"blocking": True}},
    "inferenceRequest": {"streaming": True},
    "modelInfo": True,
    "featureSets": True,
    "channels": dict.fromkeys(_CHANNEL_FLAGS, True),
}


def capabilities(params_or_result: dict[str, Any]) -> dict[str, Any] | None:
    """The ``experimental.mcpl`` object of an initialize request or result (None: not MCPL)."""
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


def feature_sets(mcpl_caps: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """Declared feature sets by name, whichever of the two wire shapes the server used.

    Object form ``{"memory.retrieval": {...}}`` and array form ``[{"name": "memory.retrieval", ...}]``
    both come out as ``{name: declaration}`` with ``uses`` always a list of strings. Entries without
    a usable name are skipped rather than failing the whole backend.
    """
    raw = (mcpl_caps or {}).get("featureSets")
    pairs: Iterable[tuple[Any, Any]]
    if isinstance(raw, dict):
        pairs = raw.items()
    elif isinstance(raw, list):
        pairs = ((item.get("name"), item) for item in raw if isinstance(item, dict))
    else:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for name, decl in pairs:
        if not isinstance(name, str) or not name:
            continue
        decl = {k: v for k, v in decl.items() if k != "name"} if isinstance(decl, dict) else {}
        uses = decl.get("uses")
        decl["uses"] = [u for u in uses if isinstance(u, str)] if isinstance(uses, list) else []
        out[name] = decl
    return out


def channel_capabilities(mcpl_caps: dict[str, Any] | None) -> dict[str, bool]:
    """``channels`` as flags: ``true`` means every channel feature, an object names them."""
    raw = (mcpl_caps or {}).get("channels")
    if raw is True:
        return dict.fromkeys(_CHANNEL_FLAGS, True)
    if isinstance(raw, dict):
        return {flag: bool(raw.get(flag)) for flag in _CHANNEL_FLAGS}
    return {}


def hook_flags(mcpl_caps: dict[str, Any] | None) -> tuple[bool, bool, bool]:
    """(beforeInference, afterInference, afterInference is blocking) as the server declared them."""
    hooks = (mcpl_caps or {}).get("contextHooks")
    if not isinstance(hooks, dict):
        return False, False, False
    after = hooks.get("afterInference")
    blocking = isinstance(after, dict) and bool(after.get("blocking"))
    return bool(hooks.get("beforeInference")), bool(after), blocking


def uses(declaration: dict[str, Any], what: str) -> bool:
    return what in declaration.get("uses", ())


def update_params(params: dict[str, Any]) -> tuple[list[str], list[str], dict[str, Any]]:
    """(enabled, disabled, scopes) of a host's ``featureSets/update``, tolerating wrong types."""

    def names(value: Any) -> list[str]:
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    scopes = params.get("scopes")
    return names(params.get("enabled")), names(params.get("disabled")), scopes if isinstance(scopes, dict) else {}


def host_capabilities(declared: dict[str, dict[str, Any]], backend_caps: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The merged ``experimental.mcpl`` one host is shown: the union of what the backends offer,
    with ``declared`` already carrying the names as that host sees them."""
    caps = list(backend_caps)
    before = after = blocking = False
    for c in caps:
        b, a, blk = hook_flags(c)
        before, after, blocking = before or b, after or a, blocking or blk
    merged: dict[str, Any] = {"version": VERSION}
    if any(c.get("pushEvents") for c in caps):
        merged["pushEvents"] = True
    if before or after:
        hooks: dict[str, Any] = {}
        if before:
            hooks["beforeInference"] = True
        if after:
            hooks["afterInference"] = {"blocking": blocking}
        merged["contextHooks"] = hooks
    inference = [c.get("inferenceRequest") for c in caps if c.get("inferenceRequest")]
    if inference:
        merged["inferenceRequest"] = {"streaming": any(isinstance(i, dict) and i.get("streaming") for i in inference)}
    if any(c.get("modelInfo") for c in caps):
        merged["modelInfo"] = True
    channel_flags = [channel_capabilities(c) for c in caps]
    if any(channel_flags):
        merged["channels"] = {flag: any(f.get(flag) for f in channel_flags) for flag in _CHANNEL_FLAGS}
    merged["featureSets"] = declared
    return merged


def without_mcpl(capabilities: dict[str, Any]) -> dict[str, Any]:
    """A backend's capabilities minus ``experimental.mcpl`` (the gateway speaks MCPL for it)."""
    experimental = capabilities.get("experimental")
    if not isinstance(experimental, dict) or "mcpl" not in experimental:
        return capabilities
    rest = {k: v for k, v in experimental.items() if k != "mcpl"}
    out = {k: v for k, v in capabilities.items() if k != "experimental"}
    if rest:
        out["experimental"] = rest
    return out
