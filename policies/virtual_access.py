"""Who may use a virtual server, and why a virtual server never widens what a principal may do.

A virtual server (gateway/config_virtual.py, gateway/virtual_servers.py) is a view: it chooses and
may rename what its clients see, and the policy chain still decides every request as at any door
(admission on the action as the client names it: ``mcp/request:tools/call:EXPOSED``). Two more
decisions belong to a virtual server, both here:

- ``principals``: only the listed principals may use it (:meth:`VirtualServerAccess.admits`; empty:
  everyone the chain admits). A refusal is a capability denial (``CAPABILITY_DENIED``, audited like
  every admission refusal), asked on every request, so no session, stream or exchange escapes it.
- the real item: a tool or prompt reached through a virtual server must also be allowed under a
  name it has at a door that exists without the virtual server (:meth:`VirtualServerAccess.reaches`):
  its backend's own ``/servers/BACKEND/mcp`` (the original name) or the federated ``/mcp`` (the name
  ``federation.prefix`` gives it). A rename therefore never turns a forbidden tool into an allowed
  one; lists hide what would be refused (:meth:`VirtualServerAccess.visible`, the same rule).

Capability patterns only allow (there is no deny pattern), so "allowed at some existing door" is
exactly "no wider than without the virtual server"; with the admission check on the exposed name,
a virtual server can only narrow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gateway.errors import CAPABILITY_DENIED
from policies.chain import Decision, Outcome
from policies.principal import Principal

# (backend, original name) → the names the item has at the doors that exist without virtual servers.
DoorNames = Callable[[str, str], tuple[str, ...]]

_ACTION_OF_KIND = {"tools": "tools/call", "prompts": "prompts/get"}


class VirtualServerAccess:
    __slots__ = ("_door_names", "name", "principals")

    def __init__(self, name: str, principals: Iterable[str], door_names: DoorNames) -> None:
        self.name = name
        self.principals = frozenset(principals)
        self._door_names = door_names

    def admits(self, principal: Principal) -> Decision | None:
        """None when ``principal`` may use this virtual server; else the refusal."""
        if not self.principals or principal.name in self.principals:
            return None
        return Decision(
            False,
            "virtual_servers",
            CAPABILITY_DENIED,
            f"principal {principal.name!r} may not use virtual server {self.name!r}",
            {"server": self.name, "principal": principal.name},
            outcome=Outcome.DENIED,
        )

    def reaches(self, principal: Principal, method: str, backend: str, original: str) -> Decision | None:
        """None when ``principal`` may take ``method`` (``tools/call``, ``prompts/get``,
        ``completion/complete``) on the real item ``(backend, original)``; else the refusal."""
        if principal.capabilities.everything:
            return None
        actions = [f"mcp/request:{method}:{name}" for name in self._door_names(backend, original)]
        if any(principal.capabilities.allows(action) for action in actions):
            return None
        return Decision(
            False,
            "virtual_servers",
            CAPABILITY_DENIED,
            f"principal {principal.name!r} lacks a capability for {actions[0]!r} (reached through virtual server "
            f"{self.name!r})",
            {"action": actions[0], "principal": principal.name, "server": self.name},
            outcome=Outcome.DENIED,
        )

    def visible(self, principal: Principal, kind: str, backend: str, original: str) -> bool:
        """Whether a listed tool or prompt may be shown: the rule of :meth:`reaches` (other kinds keep
        their URIs, so the chain's own check on them already is the real one)."""
        method = _ACTION_OF_KIND.get(kind)
        return method is None or self.reaches(principal, method, backend, original) is None
