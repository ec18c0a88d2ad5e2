"""MGP's reserved tool namespace (draft §1.6.3): a backend's tool named ``mgp.*`` is withheld.

The ``mgp.`` prefix belongs to the kernel's own tools. A backend that offers a tool so named is
refused at the gateway, whatever the caller may otherwise do, with TOOL_NAME_CONFLICT (4003), and
the tool is hidden from every list (the same rule, as a :class:`~policies.chain.Visibility`), so
no client can be tricked into calling a backend's impostor of a kernel tool.
"""

from __future__ import annotations

from adapters.mgp.names import RESERVED_TOOL_PREFIX, is_reserved_tool_name
from gateway.errors import MgpCode, mgp_error_data
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.principal import Principal

POLICY = "mgp.reserved_names"
_CALL_PREFIX = "mcp/request:tools/call:"


class MgpReservedNamePolicy:
    name = POLICY
    stage: Stage = "dispatch"

    def visible(self, action: str, principal: Principal, target: Target | None) -> bool:
        if target is None or not action.startswith(_CALL_PREFIX):
            return True
        return not is_reserved_tool_name(target.name)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        return self.check_now(event, principal, target)

    def check_now(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        """``check`` without a coroutine (it never awaits): what the chain calls (policies/chain.py)."""
        if target is None or event.method != "tools/call":
            return None
        name = target.name  # is_reserved_tool_name, inlined (asked on every routed tools/call)
        if not isinstance(name, str) or not name.startswith(RESERVED_TOOL_PREFIX):
            return None
        reason = (
            f"server {target.backend!r} offers a tool named {target.name!r} in the kernel's reserved mgp.* "
            "namespace; it is withheld"
        )
        data: dict[str, object] = {**mgp_error_data(MgpCode.TOOL_NAME_CONFLICT), "server_id": target.backend}
        return Decision(False, POLICY, int(MgpCode.TOOL_NAME_CONFLICT), reason, data, Outcome.DENIED)
