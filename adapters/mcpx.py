"""MCPx v0.1 envelopes: parse and validate the envelope shape and map it to an Event.

The topic front door (``/ws?topic=``) builds on this; envelopes carry MCP payloads untouched.
"""

from __future__ import annotations

from typing import Any

from gateway.events import Dialect, Event, Kind

PROTOCOL = "mcpx/v0.1"
_REQUIRED = ("protocol", "id", "ts", "from", "kind")


class EnvelopeError(ValueError):
    pass


def kind_of(kind: str) -> tuple[Kind, str | None, str | None]:
    """Split an MCPx kind into (event kind, method, context)."""
    if kind == "chat":
        return Kind.CHAT, None, None
    if kind.startswith("system/"):
        return (
            (Kind.PRESENCE if kind == "system/presence" else Kind.SYSTEM),
            kind.removeprefix("system/"),
            None,
        )
    head, _, rest = kind.partition(":")
    mapping = {"mcp/request": Kind.REQUEST, "mcp/response": Kind.RESPONSE, "mcp/proposal": Kind.PROPOSAL}
    if head not in mapping:
        raise EnvelopeError(f"unknown kind {kind!r}")
    method, _, context = rest.partition(":")
    return mapping[head], (method or None), (context or None)


def decode(envelope: Any) -> Event:
    if not isinstance(envelope, dict):
        raise EnvelopeError("an envelope must be a JSON object")
    missing = [k for k in _REQUIRED if k not in envelope]
    if missing:
        raise EnvelopeError(f"missing field(s): {', '.join(missing)}")
    if envelope["protocol"] != PROTOCOL:
        raise EnvelopeError(f"protocol must be {PROTOCOL!r}")
    if not isinstance(envelope["kind"], str):
        raise EnvelopeError("kind must be a string")
    kind, method, context = kind_of(envelope["kind"])
    to = envelope.get("to")
    # A malformed "to" must not fall back to broadcast: {"to": "bob"} would reach everyone.
    if to is not None and not (isinstance(to, list) and all(isinstance(t, str) for t in to)):
        raise EnvelopeError("to must be an array of participant ids")
    payload = envelope.get("payload")
    # Refused rather than replaced by {}: the gateway never drops what a peer sent.
    if payload is not None and not isinstance(payload, dict):
        raise EnvelopeError("payload must be an object")
    correlation_id = envelope.get("correlation_id")
    if correlation_id is not None and not isinstance(correlation_id, str):
        raise EnvelopeError("correlation_id must be a string")
    return Event(
        kind=kind,
        method=method,
        payload=payload if payload is not None else {},
        dialect=Dialect.MCPX,
        context=context,
        correlation_id=correlation_id,
        source=str(envelope["from"]),
        targets=tuple(to) if to else (),
    )
