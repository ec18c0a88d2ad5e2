"""Who may say what on an MCPx topic, beyond capabilities: the sender and the reserved namespace.

Two admission members of the one chain, for MCPx envelopes only (other dialects pass untouched):

- :class:`McpxSenderPolicy`: an envelope's ``from`` (MCPx v0.1 §3: the participant's stable id) must
  be the authenticated participant id of the socket it came in on (the principal the door hands the
  chain). Anything else is sender spoofing, however the capabilities read.
- :class:`McpxReservedKindPolicy`: ``system/*`` kinds (welcome, presence, error...) are the gateway's
  own; "the gateway MUST reject any such attempts" (§4.1, Reserved Namespace), whatever a
  participant's capabilities say.

They run first, in that order, before capabilities and the envelope rate, so an envelope refused
here costs its sender no rate token. The door answers the denials by their
:class:`~policies.chain.Outcome` (``SPOOFED`` as ``invalid_envelope``, ``RESERVED`` as
``reserved_kind``; gateway/errors.py holds that table).
"""

from __future__ import annotations

from gateway.errors import CAPABILITY_DENIED, INVALID_REQUEST
from gateway.events import Dialect, Event, Kind
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

# The event kinds adapters.mcpx gives every ``system/*`` envelope kind (and only those).
_RESERVED_KINDS = frozenset({Kind.SYSTEM, Kind.PRESENCE})


class McpxSenderPolicy:
    """Deny an MCPx envelope whose ``from`` (the event's source) is not the principal sending it."""

    name = "mcpx_sender"
    stage: Stage = "admission"
    dialects = frozenset({Dialect.MCPX})  # the chain asks it about MCPx envelopes only

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        if event.dialect is not Dialect.MCPX or event.source == principal.name:
            return None
        return Decision(
            False,
            self.name,
            INVALID_REQUEST,
            f"from must be your participant id {principal.name!r}",
            {"from": event.source, "principal": principal.name},
            outcome=Outcome.SPOOFED,
        )


class McpxReservedKindPolicy:
    """Deny an MCPx envelope of a ``system/*`` kind: that namespace is the gateway's alone."""

    name = "mcpx_reserved_kind"
    stage: Stage = "admission"
    dialects = frozenset({Dialect.MCPX})  # the chain asks it about MCPx envelopes only

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        if event.dialect is not Dialect.MCPX or event.kind not in _RESERVED_KINDS:
            return None
        return Decision(
            False,
            self.name,
            CAPABILITY_DENIED,
            "the system/* namespace is reserved to the gateway",
            {"action": event.action, "principal": principal.name},
            outcome=Outcome.RESERVED,
        )
