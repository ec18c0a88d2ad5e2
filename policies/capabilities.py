"""Deny an event whose action no capability of the principal covers."""

from __future__ import annotations

from gateway.errors import CAPABILITY_DENIED
from gateway.events import Dialect, Event, Kind
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

# Module constants: an enum member read costs ~0.1 µs, and this runs on every request.
_ANSWERS = frozenset({Kind.RESPONSE, Kind.ERROR})
_MCPX = Dialect.MCPX


class CapabilityPolicy:
    """Also a :class:`~policies.chain.Visibility`: a list shows only the items whose call is allowed."""

    name = "capabilities"
    stage: Stage = "admission"

    async def check(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        return self.check_now(event, principal, target)

    def check_now(self, event: Event, principal: Principal, target: Target | None = None) -> Decision | None:
        """``check`` without a coroutine (it never awaits): what the chain calls (policies/chain.py)."""
        if event.kind in _ANSWERS and event.dialect is not _MCPX:
            # An MCP client's answer to a request the gateway relayed: that request was checked.
            # An MCPx participant claims its envelope's kind itself, so responses are checked too.
            return None
        if principal.capabilities.everything:
            return None  # skip building the action string: nothing could be denied
        action = event.action
        if principal.capabilities.allows(action):
            return None
        return Decision(
            False,
            self.name,
            CAPABILITY_DENIED,
            f"principal {principal.name!r} lacks a capability for {action!r}",
            {"action": action, "principal": principal.name},
            outcome=Outcome.DENIED,
        )

    def visible(self, action: str, principal: Principal, target: Target | None = None) -> bool:
        return principal.capabilities.allows(action)
