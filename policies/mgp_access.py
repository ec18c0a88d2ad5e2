"""MGP access control (§5; draft 0.8 §5): which agent may call which tool of which server.

The gateway answers access control itself, for every backend (MGP or plain MCP) and every client
(MGP or plain MCP): agent id = the principal's name, ``server_id`` = the backend's name, ``tool_name``
= the backend's own tool name.

Precedence (§5.2), highest first: a ``tool_grant`` entry for (agent, server, tool), a ``server_grant``
entry for (agent, server), then ``mgp.default_access`` (§5.5: ``opt-in`` denies, ``opt-out`` allows).
At each level a runtime entry (``mgp/access/grant``, the ``mgp.access.grant`` kernel tool) shadows the
static one from ``mgp.access`` with the same key; ``revoke`` removes the runtime entry and masks the
static one, so after a revoke that level no longer decides. An expired entry decides nothing. Two
static entries with the same key and different permissions: deny wins.

Runtime entries live behind :class:`AccessStore`, a small Protocol: :class:`MemoryAccessStore` here, a
bus-backed store (a local replica kept current by a subscription, writes published) for many replicas.
Reads are synchronous (list filtering asks once per item); writes are async.

:class:`MgpAccessPolicy` is the one authorization check for calls and lists: it refuses a
``tools/call`` the table denies (a typed denial carrying the draft's §14.7 rejection body, code
``ACCESS_DENIED``) and, as a :class:`~policies.chain.Visibility`, hides the tools it would refuse.

Invariants: a call is forwarded only if :meth:`AccessTable.allows` says so at that moment; a tool is
listed only if a call to it would be; the decision is a function of the entries, the default and the
clock alone; grants and revocations apply to the next decision (live sessions included).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from gateway.errors import MgpCode
from gateway.events import Event
from policies.chain import Decision, Outcome, Stage, Target
from policies.mgp_permissions import TOOL_BLOCKED, iso, parse_iso, rejection
from policies.principal import Principal

POLICY = "mgp.access"

Clock = Callable[[], float]
EntryType = Literal["server_grant", "tool_grant"]
Permission = Literal["allow", "deny"]
DefaultAccess = Literal["opt-in", "opt-out"]
Source = Literal["tool_grant", "server_grant", "default_policy"]
EntryKey = tuple[str, str, str | None]  # (agent_id, server_id, tool_name or None for a server_grant)

# MGP §14.3 ACCESS_DENIED ("agent does not have access to this tool"), for the JSON-RPC error form.
MGP_ACCESS_DENIED = int(MgpCode.ACCESS_DENIED)
ACCESS_DENIED = "ACCESS_DENIED"  # the draft's §14.7.3 rejection code
_CALL_PREFIX = "mcp/request:tools/call:"


class AccessRequestError(ValueError):
    """Malformed ``mgp/access/*`` params (answered as invalid params)."""


@dataclass(frozen=True, slots=True)
class AccessEntry:
    """A §5.3 entry. Times are epoch seconds; ``revoked`` marks a runtime mask over a static entry."""

    entry_type: EntryType
    agent_id: str
    server_id: str
    tool_name: str | None
    permission: Permission
    granted_by: str | None = None
    granted_at: float | None = None
    expires_at: float | None = None
    justification: str | None = None
    revoked: bool = False

    @property
    def key(self) -> EntryKey:
        return (self.agent_id, self.server_id, self.tool_name)

    def active(self, now: float) -> bool:
        return not self.revoked and (self.expires_at is None or now < self.expires_at)

    def wire(self) -> dict[str, Any]:
        """The entry in the §5.4 grant shape."""
        return {
            "entry_type": self.entry_type,
            "agent_id": self.agent_id,
            "server_id": self.server_id,
            "tool_name": self.tool_name,
            "permission": self.permission,
            "granted_by": self.granted_by,
            "granted_at": iso(self.granted_at) if self.granted_at is not None else None,
            "expires_at": iso(self.expires_at) if self.expires_at is not None else None,
            "justification": self.justification,
        }

    @classmethod
    def static(cls, raw: Mapping[str, Any]) -> AccessEntry:
        """An entry of ``mgp.access`` (``{agent_id, server_id, tool_name?, permission}``, already validated
        by the config model): a tool_grant when it names a tool, else a server_grant."""
        tool = raw.get("tool_name")
        return cls(
            "tool_grant" if tool else "server_grant",
            str(raw["agent_id"]),
            str(raw["server_id"]),
            str(tool) if tool else None,
            "allow" if raw["permission"] == "allow" else "deny",
            granted_by="config",
        )


class AccessStore(Protocol):
    """Where runtime entries (grants and revocation masks) live; one per gateway, shared by replicas."""

    def get(self, key: EntryKey) -> AccessEntry | None:
        """The runtime entry at ``key`` (a local read: it runs for every call and list item)."""

    async def put(self, entry: AccessEntry) -> None:
        """Store ``entry`` at its key, replacing what was there."""

    async def delete(self, key: EntryKey) -> bool:
        """Remove the entry at ``key``; whether there was one."""

    def entries(self) -> list[AccessEntry]:
        """Every runtime entry (for an admin listing)."""

    def __len__(self) -> int:
        """How many runtime entries there are (asked on every call: no list is built)."""


class MemoryAccessStore:
    """The embedded :class:`AccessStore`: one replica, a dict."""

    def __init__(self) -> None:
        self._entries: dict[EntryKey, AccessEntry] = {}

    def get(self, key: EntryKey) -> AccessEntry | None:
        return self._entries.get(key)

    async def put(self, entry: AccessEntry) -> None:
        self._entries[entry.key] = entry

    async def delete(self, key: EntryKey) -> bool:
        return self._entries.pop(key, None) is not None

    def entries(self) -> list[AccessEntry]:
        return list(self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answer for one (agent, server, tool): the permission, which level decided, and its entry."""

    permission: Permission
    source: Source
    entry: AccessEntry | None = None

    @property
    def allowed(self) -> bool:
        return self.permission == "allow"

    def wire(self) -> dict[str, Any]:
        """The §5.4 ``mgp/access/query`` result."""
        entry = self.entry
        return {
            "permission": self.permission,
            "source": self.source,
            "granted_by": entry.granted_by if entry else None,
            "granted_at": iso(entry.granted_at) if entry and entry.granted_at is not None else None,
            "expires_at": iso(entry.expires_at) if entry and entry.expires_at is not None else None,
        }


def _text(params: Mapping[str, Any], name: str, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise AccessRequestError(f"{name} must be a non-empty string")
    return value


def _entry_type(params: Mapping[str, Any]) -> tuple[EntryType, str | None]:
    entry_type = params.get("entry_type")
    if entry_type not in ("server_grant", "tool_grant"):
        raise AccessRequestError("entry_type must be server_grant or tool_grant")
    tool = _text(params, "tool_name", required=False)
    if entry_type == "tool_grant" and tool is None:
        raise AccessRequestError("a tool_grant needs tool_name")
    if entry_type == "server_grant" and tool is not None:
        raise AccessRequestError("a server_grant covers the whole server: tool_name must be absent or null")
    return ("tool_grant" if entry_type == "tool_grant" else "server_grant"), tool


class AccessTable:
    """§5 access control: static entries (config), runtime entries (an :class:`AccessStore`), a default."""

    def __init__(
        self,
        entries: Iterable[AccessEntry | Mapping[str, Any]] = (),
        default: DefaultAccess = "opt-out",
        store: AccessStore | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.store: AccessStore = store if store is not None else MemoryAccessStore()
        self.clock = clock
        self.default: DefaultAccess = "opt-out"
        self._static: dict[EntryKey, AccessEntry] = {}
        self.configure(entries, default)

    def configure(self, entries: Iterable[AccessEntry | Mapping[str, Any]], default: DefaultAccess) -> None:
        """Replace the static entries and the default (config load and reload); runtime entries stay."""
        if default not in ("opt-in", "opt-out"):
            raise ValueError(f"default access must be opt-in or opt-out, not {default!r}")
        static: dict[EntryKey, AccessEntry] = {}
        for raw in entries:
            entry = raw if isinstance(raw, AccessEntry) else AccessEntry.static(raw)
            earlier = static.get(entry.key)
            if earlier is None or earlier.permission == "allow":  # a conflicting pair: deny wins
                static[entry.key] = entry
        self._static, self.default = static, default

    def _level(self, key: EntryKey, now: float) -> AccessEntry | None:
        runtime = self.store.get(key)
        if runtime is not None:
            if runtime.revoked:
                return None  # revoked: the static entry under it is masked too
            if runtime.active(now):
                return runtime
        entry = self._static.get(key)
        return entry if entry is not None and entry.active(now) else None

    def resolve(self, agent_id: str, server_id: str, tool_name: str | None = None) -> Resolution:
        """The §5.2 answer: tool_grant > server_grant > default_policy."""
        now = self.clock()
        if tool_name is not None:
            entry = self._level((agent_id, server_id, tool_name), now)
            if entry is not None:
                return Resolution(entry.permission, "tool_grant", entry)
        entry = self._level((agent_id, server_id, None), now)
        if entry is not None:
            return Resolution(entry.permission, "server_grant", entry)
        return Resolution("allow" if self.default == "opt-out" else "deny", "default_policy")

    def allows(self, agent_id: str, server_id: str, tool_name: str | None = None) -> bool:
        return self.resolve(agent_id, server_id, tool_name).allowed

    @property
    def open_to_all(self) -> bool:
        """No entry anywhere and ``opt-out``: every agent may call every tool (the common case, so the
        chain's member answers it without resolving)."""
        return self.default == "opt-out" and not self._static and not len(self.store)

    # ---- the wire: mgp/access/query|grant|revoke and the mgp.access.* kernel tools ----------------

    def query(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``mgp/access/query``: ``{agent_id, server_id, tool_name?}`` → the §5.4 result."""
        agent = _text(params, "agent_id")
        server = _text(params, "server_id")
        tool = _text(params, "tool_name", required=False)
        assert agent is not None and server is not None
        return self.resolve(agent, server, tool).wire()

    async def grant(self, params: Mapping[str, Any], granted_by: str) -> dict[str, Any]:
        """``mgp/access/grant``: store a runtime entry; the stored entry in the grant shape. ``granted_by``
        is the authenticated caller (a ``granted_by`` in params is not trusted). The caller checks that the
        principal may administer access."""
        entry_type, tool = _entry_type(params)
        agent = _text(params, "agent_id")
        server = _text(params, "server_id")
        assert agent is not None and server is not None
        permission = params.get("permission")
        if permission not in ("allow", "deny"):
            raise AccessRequestError("permission must be allow or deny")
        justification = params.get("justification")
        if justification is not None and not isinstance(justification, str):
            raise AccessRequestError("justification must be a string")
        now = self.clock()
        expires_at: float | None = None
        raw_expiry = params.get("expires_at")
        if raw_expiry is not None:
            try:
                expires_at = parse_iso(raw_expiry) if isinstance(raw_expiry, str) else None
            except ValueError:
                expires_at = None
            if expires_at is None:
                raise AccessRequestError("expires_at must be an RFC 3339 date-time or null")
            if expires_at <= now:
                raise AccessRequestError("expires_at is in the past")
        entry = AccessEntry(
            entry_type,
            agent,
            server,
            tool,
            "allow" if permission == "allow" else "deny",
            granted_by=granted_by,
            granted_at=now,
            expires_at=expires_at,
            justification=justification,
        )
        await self.store.put(entry)
        return {"granted": True, **entry.wire()}

    async def revoke(self, params: Mapping[str, Any], revoked_by: str) -> dict[str, Any]:
        """``mgp/access/revoke``: remove the entry at ``{agent_id, server_id, entry_type, tool_name?}`` (a
        runtime one is deleted, a static one masked); ``revoked`` says whether there was one in force."""
        entry_type, tool = _entry_type(params)
        agent = _text(params, "agent_id")
        server = _text(params, "server_id")
        assert agent is not None and server is not None
        key: EntryKey = (agent, server, tool)
        now = self.clock()
        had = self._level(key, now) is not None
        runtime = self.store.get(key)
        static = self._static.get(key)
        if static is not None:
            if runtime is None or not runtime.revoked:
                await self.store.put(replace(static, granted_by=revoked_by, granted_at=now, revoked=True))
        elif runtime is not None:
            await self.store.delete(key)
        return {"revoked": had, "entry_type": entry_type, "agent_id": agent, "server_id": server, "tool_name": tool}

    def entries(self) -> list[dict[str, Any]]:
        """Every entry in force (static ones not shadowed, runtime ones unexpired), for an admin listing."""
        now = self.clock()
        keys = list(dict.fromkeys([*self._static, *(e.key for e in self.store.entries())]))
        out = []
        for key in keys:
            entry = self._level(key, now)
            if entry is not None:
                out.append(entry.wire())
        return out


class MgpAccessPolicy:
    """Refuses a ``tools/call`` the access table denies, and hides such tools from lists (dispatch)."""

    name = POLICY
    stage: Stage = "dispatch"

    def __init__(self, table: AccessTable) -> None:
        self.table = table

    def idle(self) -> bool:
        """No entry anywhere and opt-out: nothing to decide (the chain skips the member)."""
        table = self.table  # its open_to_all, inlined (asked on every routed tools/call)
        return table.default == "opt-out" and not table._static and not len(table.store)

    def visible(self, action: str, principal: Principal, target: Target | None) -> bool:
        if target is None or target.name is None or not action.startswith(_CALL_PREFIX) or self.table.open_to_all:
            return True
        return self.table.allows(principal.name, target.backend, target.name)

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        if target is None or event.method != "tools/call" or target.name is None or self.table.open_to_all:
            return None
        resolution = self.table.resolve(principal.name, target.backend, target.name)
        if resolution.allowed:
            return None
        reason = (
            f"Access control denies agent {principal.name!r} the tool {target.name!r} of server "
            f"{target.backend!r} ({resolution.source.replace('_', ' ')}); the call was not executed."
        )
        data: dict[str, object] = {
            "rejection": rejection(ACCESS_DENIED, reason, "Ask an operator to grant access (mgp.access.grant)."),
            "_mgp": {"category": "security", "retryable": False},
            "event_type": TOOL_BLOCKED,
            "agent_id": principal.name,
            "server_id": target.backend,
            "tool_name": target.name,
            "source": resolution.source,
        }
        return Decision(False, POLICY, MGP_ACCESS_DENIED, reason, data, Outcome.DENIED)


# The operations MGP marks ``admin_only`` (MGP_SPEC.md §1.6.3), as methods: a kernel tool call is
# admitted as its method, so this one check covers both wires (adapters/mgp/names.py ADMIN_ONLY).
ADMIN_METHODS = frozenset(
    {
        "mgp/access/grant",
        "mgp/access/revoke",
        "mgp/lifecycle/shutdown",
        "mgp/discovery/register",
        "mgp/discovery/deregister",
    }
)


class MgpAccessAdminPolicy:
    """Who may change the gateway (§5.4, §1.6.3 admin-only): ``mgp/access/grant`` and ``revoke``,
    ``mgp/lifecycle/shutdown``, ``mgp/discovery/register`` and ``deregister`` need the admin
    capability ``mgp/request:<method>`` (``mgp/request:mgp/access/*`` covers both access changes)
    among the principal's capabilities; refused with 1000 PERMISSION_DENIED. Queries are open to
    every caller (admission)."""

    name = "mgp.access_admin"
    stage: Stage = "admission"
    methods = ADMIN_METHODS  # the chain asks about these only

    async def check(self, event: Event, principal: Principal, target: Target | None) -> Decision | None:
        method = event.method
        if method not in ADMIN_METHODS:
            return None
        needed = f"mgp/request:{method}"
        if principal.capabilities.allows(needed):
            return None
        reason = f"principal {principal.name!r} lacks the admin capability {needed!r}"
        data: dict[str, object] = {
            "_mgp": {"category": "security", "retryable": False},
            "action": needed,
            "principal": principal.name,
        }
        return Decision(False, self.name, int(MgpCode.PERMISSION_DENIED), reason, data, Outcome.DENIED)
