"""The one internal language of the gateway.

Every message that crosses Switchboard, whatever its dialect or carrier, becomes an :class:`Event`.
Routing and policy look only at the event's fields; the original payload is kept untouched so that
nothing is lost when the event is re-emitted in another dialect.

This module imports nothing of ours on purpose: every other room depends on it.
"""

from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """Direction and shape of an event."""

    REQUEST = "request"
    RESPONSE = "response"
    NOTIFICATION = "notification"
    ERROR = "error"
    PROPOSAL = "proposal"
    CHAT = "chat"
    PRESENCE = "presence"
    SYSTEM = "system"


class Dialect(StrEnum):
    """The protocol family member a peer speaks. MCP is the base every other one extends."""

    MCP = "mcp"
    MCPL = "mcpl"
    MGP = "mgp"
    MCPC = "mcpc"
    MCPX = "mcpx"


# Event ids only need to be unique within a process run; a random prefix keeps replicas apart
# without paying for a uuid4 on every message of the hot path.
_EVENT_PREFIX = os.urandom(4).hex()
_event_counter = itertools.count(1)


def new_event_id() -> str:
    return f"{_EVENT_PREFIX}-{next(_event_counter)}"


# MCPx kind prefixes for MCP-shaped events (MCPx §3).
_ACTION_PREFIX: dict[Kind, str] = {
    Kind.REQUEST: "mcp/request",
    Kind.NOTIFICATION: "mcp/request",  # MCPx files notifications under requests (§4.1)
    Kind.RESPONSE: "mcp/response",
    Kind.ERROR: "mcp/response",
    Kind.PROPOSAL: "mcp/proposal",
}


# Read once: on Python 3.11 each ``Kind.X`` read costs about 0.1 µs, and actions are made per request.
_CHAT, _PRESENCE = Kind.CHAT, Kind.PRESENCE
_now = time.time


def action_string(kind: Kind, method: str | None, context: str | None = None) -> str:
    """The event's action in MCPx kind syntax, e.g. ``mcp/request:tools/call:echo``.

    One capability matcher (policies.patterns) then serves every dialect.
    """
    prefix = _ACTION_PREFIX.get(kind)
    if prefix is None:  # the kinds without an MCP prefix
        if kind is _CHAT:
            return "chat"
        if kind is _PRESENCE:
            return "system/presence"
        return f"system/{method}" if method else "system"  # Kind.SYSTEM
    if method is None:
        return prefix
    if context:
        return f"{prefix}:{method}:{context}"
    return f"{prefix}:{method}"


def action_of(event: Event) -> str:
    """``event.action``: its action string, with action_string inlined for the MCP kinds (asked on every
    request, by its audit record)."""
    prefix = _ACTION_PREFIX.get(event.kind)
    method = event.method
    if prefix is None or method is None:
        return action_string(event.kind, method, event.context)
    context = event.context
    return f"{prefix}:{method}:{context}" if context else f"{prefix}:{method}"


@dataclass(slots=True, init=False)
class Event:
    """One message crossing the gateway, normalized.

    ``payload`` is the raw JSON-RPC message (or MCPx envelope payload) exactly as received.
    ``facets`` holds extension data that adapters fill only when present (feature_set, scope,
    mgp, mcpc, ...), so that the core never needs a field per dialect.
    """

    kind: Kind
    method: str | None
    payload: dict[str, Any]
    dialect: Dialect = Dialect.MCP
    context: str | None = None
    rpc_id: Any = None
    correlation_id: str | None = None
    principal: str | None = None
    session: str | None = None
    source: str | None = None
    targets: tuple[str, ...] = ()
    trace_id: str | None = None
    facets: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=new_event_id)
    ts: float = field(default_factory=time.time)

    # Written by hand (the fields above still give eq, repr, fields() and replace()): the generated one
    # calls a default factory per field and new_event_id per event; this saves about a microsecond per message.
    def __init__(
        self,
        kind: Kind,
        method: str | None,
        payload: dict[str, Any],
        dialect: Dialect = Dialect.MCP,
        context: str | None = None,
        rpc_id: Any = None,
        correlation_id: str | None = None,
        principal: str | None = None,
        session: str | None = None,
        source: str | None = None,
        targets: tuple[str, ...] = (),
        trace_id: str | None = None,
        facets: dict[str, Any] | None = None,
        id: str | None = None,
        ts: float | None = None,
    ) -> None:
        self.kind = kind
        self.method = method
        self.payload = payload
        self.dialect = dialect
        self.context = context
        self.rpc_id = rpc_id
        self.correlation_id = correlation_id
        self.principal = principal
        self.session = session
        self.source = source
        self.targets = targets
        self.trace_id = trace_id
        self.facets = {} if facets is None else facets
        self.id = f"{_EVENT_PREFIX}-{next(_event_counter)}" if id is None else id  # new_event_id, inlined
        self.ts = _now() if ts is None else ts

    # The event's action string: action_of as the getter itself (the router calls action_of directly, a
    # cheaper call than a property's).
    action = property(action_of)

    @property
    def params(self) -> dict[str, Any]:
        params = self.payload.get("params")
        return params if isinstance(params, dict) else {}
