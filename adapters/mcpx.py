"""MCPx v0.1 envelopes: parse and validate the envelope shape and map it to an Event.

The topic front door (``/ws?topic=``) builds on this; envelopes carry MCP payloads untouched.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
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
    if not isinstance(envelope["id"], str) or not envelope["id"]:
        raise EnvelopeError("id must be a non-empty string")
    if not isinstance(envelope["from"], str):
        raise EnvelopeError("from must be a string")
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


# ---- envelopes the gateway writes ------------------------------------------------------------

GATEWAY_ID = "system:gateway"


def _now() -> str:
    # RFC 3339 in UTC with milliseconds, the form the reference gateway emits.
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def envelope(
    sender: str,
    kind: str,
    payload: dict[str, Any],
    to: list[str] | None = None,
    correlation_id: str | None = None,
) -> dict[str, Any]:
    """A complete envelope; ``to`` None or empty means broadcast (the key is then left out)."""
    env: dict[str, Any] = {"protocol": PROTOCOL, "id": str(uuid.uuid4()), "ts": _now(), "from": sender}
    if to:
        env["to"] = list(to)
    env["kind"] = kind
    if correlation_id is not None:
        env["correlation_id"] = correlation_id
    env["payload"] = payload
    return env


def welcome(you: dict[str, Any], participants: list[dict[str, Any]]) -> dict[str, Any]:
    return envelope(GATEWAY_ID, "system/welcome", {"you": you, "participants": participants}, to=[you["id"]])


def presence(event: str, participant: dict[str, Any]) -> dict[str, Any]:
    return envelope(GATEWAY_ID, "system/presence", {"event": event, "participant": participant})


def error(to: str, code: str, message: str, correlation_id: str | None = None, **details: Any) -> dict[str, Any]:
    """A ``system/error`` to one participant; ``correlation_id`` names the offending envelope (§3)."""
    payload = {"error": code, "message": message, **details}
    return envelope(GATEWAY_ID, "system/error", payload, to=[to], correlation_id=correlation_id)


def kind_mismatch(kind: str, payload: dict[str, Any]) -> str | None:
    """Why the kind's METHOD/CONTEXT disagree with an MCP payload (§4.3), or None when they agree.

    Only ``mcp/*`` kinds carry a METHOD; a CONTEXT is checked for the methods that name their target
    (tool and prompt names, resource URIs). Other contexts are the sender's business.
    """
    event_kind, method, context = kind_of(kind)
    if event_kind not in (Kind.REQUEST, Kind.PROPOSAL) or method is None:
        return None
    if payload.get("method") != method:
        return f"kind names method {method!r} but payload.method is {payload.get('method')!r}"
    if context is None:
        return None
    params = payload.get("params")
    params = params if isinstance(params, dict) else {}
    field = _CONTEXT_FIELD.get(method)
    if field is not None and params.get(field) != context:
        return f"kind names {field} {context!r} but payload.params.{field} is {params.get(field)!r}"
    return None


_CONTEXT_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri", "resources/subscribe": "uri"}
