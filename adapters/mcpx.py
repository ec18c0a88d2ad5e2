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
    payload = envelope.get("payload")
    return Event(
        kind=kind,
        method=method,
        payload=payload if isinstance(payload, dict) else {},
        dialect=Dialect.MCPX,
        context=context,
        correlation_id=envelope.get("correlation_id"),
        source=str(envelope["from"]),
        targets=tuple(to) if isinstance(to, list) else (),
    )
