"""The MCP dialect (legacy era): decode wire messages into Events, negotiate versions.

MCP is also the base every other dialect extends, so this adapter is the one that always runs;
the extension adapters only add facets to the Event it produces.
"""

from __future__ import annotations

from typing import Any

from gateway import jsonrpc
from gateway.events import Dialect, Event, Kind

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_LEGACY = LEGACY_VERSIONS[-1]
# From 2025-11-25 on, a server opens each SSE stream with a priming event (an id and an empty data
# field, SEP-1699), so that a client can resume a stream that broke before its first message;
# older clients do not understand an event without data.
PRIMES_SSE_FROM = "2025-11-25"
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
# Which client capability a server's request to the client needs.
CLIENT_CAPABILITY_OF = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}

_MCP = Dialect.MCP  # read once: a ``Dialect.X`` read costs about 0.1 µs on Python 3.11
# The Event kind of each JSON-RPC shape (also read by adapters.decode).
SHAPE_KIND = {
    jsonrpc.Shape.REQUEST: Kind.REQUEST,
    jsonrpc.Shape.NOTIFICATION: Kind.NOTIFICATION,
    jsonrpc.Shape.RESPONSE: Kind.RESPONSE,
    jsonrpc.Shape.ERROR: Kind.ERROR,
}


def negotiate_version(requested: Any) -> str:
    """The version to answer an ``initialize`` with: the client's if we speak it, else our latest."""
    return requested if requested in LEGACY_VERSIONS else LATEST_LEGACY


def context_of(method: str | None, params: dict[str, Any]) -> str | None:
    """The CONTEXT part of the action: tool or prompt name, resource URI, completion target."""
    if method in ("tools/call", "prompts/get"):
        name = params.get("name")
        return name if isinstance(name, str) else None
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        uri = params.get("uri")
        return uri if isinstance(uri, str) else None
    if method == "completion/complete":
        ref = params.get("ref")
        if isinstance(ref, dict):
            target = ref.get("name") if ref.get("type") == "ref/prompt" else ref.get("uri")
            return target if isinstance(target, str) else None
    return None


def decode(message: dict[str, Any], shape: jsonrpc.Shape, *, session: str | None, principal: str | None) -> Event:
    method = message.get("method")
    params = message.get("params")
    if method == "tools/call" and type(params) is dict:  # context_of, inlined for the commonest request
        name = params.get("name")
        context = name if isinstance(name, str) else None
    else:
        context = context_of(method, params if isinstance(params, dict) else {}) if method else None
    # Positional, in Event's field order (kind, method, payload, dialect, context, rpc_id,
    # correlation_id, principal, session): on every message, keywords cost a third more.
    return Event(SHAPE_KIND[shape], method, message, _MCP, context, message.get("id"), None, principal, session)
