"""The gateway answering MGP's server registry itself (§15): ``mgp/discovery/list``,
``mgp/discovery/register`` and ``mgp/discovery/deregister`` (and the draft's kernel tools
``mgp.discovery.*``, MGP_DISCOVERY.md §15.4), backed by the live backend registry.

- ``list`` shows every backend of the *caller's* view (the federated view, or the one backend of a
  ``/servers/NAME/`` session) in the §15.2 result shape ``{id, status, mgp_version?, extensions?,
  tools, trust_level}``, plus ``transport``, ``state`` (the connection state), ``tool_count``,
  ``permissions_required`` and ``source`` (``config`` or ``runtime``). ``tools`` are the names the
  caller calls them by, and only those it may call (the chain decides, as for ``tools/list``).
  Virtual servers (issue 17) are listed in the federated view like backends (``source: virtual``,
  ``transport: virtual``, ``backends``: those they draw on, ``tools``: their exposed names the caller
  may call there; connected while one of their backends is; the least trust level of their backends);
  one whose ``principals`` exclude the caller is not listed.
  ``mgp_version``/``extensions`` are present only when the kernel negotiated MGP with the backend.
- ``register`` adds a backend at runtime from the §15.4 params, mapped onto the config's ``Backend``
  model and validated by it; it connects, joins the federated view (and gets its own
  ``/servers/NAME/`` view), and every session is told ``notifications/tools/list_changed``.
- ``deregister`` removes a backend registered at runtime: it leaves every view at once (new calls
  no longer resolve), calls in flight are drained (bounded), then the connection is closed.

Invariants: whether the caller may register or deregister is the chain's decision
(``policies.mgp_access.MgpAccessAdminPolicy``, admin capability ``mgp/request:<method>``), taken
before these handlers run. A name already in use is refused (``SERVER_ALREADY_REGISTERED``, 4101);
a backend from the config file is never deregistered. A stdio registration spawns a program the
request names, so it is refused unless the operator enabled ``mgp.register_commands`` (default
off). A runtime backend's trust level is the operator's ``mgp.trust`` entry when there is one, else
the one the registration declares, else ``experimental`` (§15.4: dynamic registrations get stricter
treatment). Malformed params are -32602 with the validation's message.

Many replicas (``shared``, gateway/replicas/registrations.py): a name is claimed deployment-wide
before the backend joins (a name another replica holds is refused like a local one), and the
registration or deregistration is then announced; the other replicas apply it with ``from_replica``
(their own connection, no announcement, no second audit record: it is audited where it happened).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.mgp import extensions, names, security, versions
from adapters.mgp.security import TRUST_LEVELS
from gateway import jsonrpc
from gateway.config import BACKEND_NAME, Backend as BackendConfig
from gateway.errors import MgpCode, mgp_error_data
from gateway.routing.call import Call, Routed
from gateway.routing.catalog import item_action
from policies.chain import Target

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.federation import View
    from gateway.mgp.kernel import Kernel
    from gateway.routing.catalog import Catalog
    from gateway.upstreams.connection import BackendConnection
    from policies.chain import PolicyChain
    from policies.principal import Principal

LIST, REGISTER, DEREGISTER = "mgp/discovery/list", "mgp/discovery/register", "mgp/discovery/deregister"
RUNTIME_TRUST = "experimental"  # §15.4: a dynamic registration that declares none
DRAIN_S = 10.0  # longest a deregistration waits for calls in flight
_STATUSES = ("connected", "disconnected", "all")
# §15.4's transports, and the config's other network ones under their config names.
_TRANSPORTS = {"stdio": "stdio", "http": "http", "sse": "sse", "ws": "ws", "websocket": "ws"}

AddBackend = Callable[[str, BackendConfig], Awaitable["BackendConnection"]]
RemoveBackend = Callable[[str, float], Awaitable[None]]


class SharedRegistry(Protocol):
    """Runtime backends on every replica (gateway/replicas/registrations.py)."""

    def serve(self, registry: Registry) -> None:
        """The registry what other replicas registered is applied to."""
        ...

    async def claim(self, name: str, params: Mapping[str, Any], registered_by: str) -> bool:
        """Take ``name`` for the whole deployment; False: another replica holds it."""
        ...

    async def announce(self, name: str, params: Mapping[str, Any], registered_by: str) -> None:
        """``name`` joined here: the other replicas add it too."""
        ...

    async def withdraw(self, name: str) -> None:
        """``name`` left here (or did not join after its claim): everywhere, and the claim goes."""
        ...


class _Declared(BaseModel):
    """The registration's ``mgp`` section (§15.2 ``[servers.mgp]``)."""

    model_config = ConfigDict(extra="ignore")
    extensions: list[str] = Field(default_factory=list)
    permissions_required: list[str] = Field(default_factory=list)
    trust_level: str | None = None


class RegisterParams(BaseModel):
    """``mgp/discovery/register`` params (§15.4); ``url`` is the gateway's addition for network
    transports (without it, a ``command`` that is a URL is read as the URL)."""

    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1)
    transport: str
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    url: str | None = None
    mgp: _Declared = Field(default_factory=_Declared)
    created_by: str | None = None
    justification: str | None = None


@dataclass(frozen=True, slots=True)
class RuntimeBackend:
    """What the registry remembers of a backend registered at runtime."""

    name: str
    trust_level: str
    registered_by: str  # the authenticated principal
    created_by: str | None  # as the request declared it (informational)
    justification: str | None
    declared: tuple[str, ...]  # extensions the registration declared (informational)
    registered_at: float


class Registry:
    def __init__(
        self,
        *,
        connections: Mapping[str, BackendConnection],
        catalog: Catalog,
        chain: PolicyChain,
        kernel: Kernel,
        trust: Mapping[str, str],
        add: AddBackend,
        remove: RemoveBackend,
        audit: AuditLog,
        register_commands: bool = False,
        shared: SharedRegistry | None = None,
        federated: View | None = None,
        virtual: Mapping[str, View] | None = None,
    ) -> None:
        """``federated`` and ``virtual``: the ``/mcp`` view, whose ``list`` also shows the virtual servers."""
        self._connections = connections
        self._catalog = catalog
        self._chain = chain
        self._kernel = kernel
        self._trust = trust  # the operator's mgp.trust
        self._add = add
        self._remove = remove
        self._audit = audit
        self._register_commands = register_commands
        self._shared = shared
        self._runtime: dict[str, RuntimeBackend] = {}
        self._federated = federated
        self._virtual = virtual if virtual is not None else {}

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {LIST: self.list_servers, REGISTER: self.register, DEREGISTER: self.deregister}

    def trust_of(self, backend: str) -> str | None:
        """The trust level the operator or the registration set for ``backend`` (None: unset)."""
        configured = self._trust.get(backend)
        if configured is not None:
            return configured
        found = self._runtime.get(backend)
        return found.trust_level if found is not None else None

    def trust_level(self, backend: str) -> str:
        """The trust level ``backend`` is held to (§2.3, §4.6): as set, else the default."""
        return security.effective_trust(self.trust_of(backend))

    def is_runtime(self, backend: str) -> bool:
        return backend in self._runtime

    # ---- list -----------------------------------------------------------------------------------

    async def list_servers(self, call: Call) -> Routed:
        wanted_status, wanted_ext, wanted_perms = _filter(call.params)
        view = call.session.view
        tools = await self._visible_tools(view, call.principal)
        facet = call.session.mgp
        servers = []
        for name in view.backends:
            conn = self._connections.get(name)
            if conn is None:
                continue
            entry = self._entry(name, conn, tools.get(name, []), facet.version if facet is not None else None)
            if wanted_status != "all" and entry["status"] != wanted_status:
                continue
            record = self._kernel.backend(name)
            if wanted_ext and (record is None or not wanted_ext <= record.active):
                continue
            if wanted_perms and (record is None or not wanted_perms <= set(record.permissions_required)):
                continue
            servers.append(entry)
        if view is self._federated and not wanted_ext and not wanted_perms:  # no kernel record to filter on
            for name, virtual in self._virtual.items():
                shown = await self._virtual_entry(name, virtual, call.principal)
                if shown is not None and (wanted_status == "all" or shown["status"] == wanted_status):
                    servers.append(shown)
        return Routed(jsonrpc.result(call.rpc_id, {"servers": servers}))

    async def _virtual_entry(self, name: str, view: View, principal: Principal) -> dict[str, Any] | None:
        """A virtual server as a §15.2 entry (see the module); None when the caller may not use it."""
        if view.guard is not None and view.guard.admits(principal) is not None:
            return None
        tools = [t for names_of in (await self._visible_tools(view, principal)).values() for t in names_of]
        conns = [c for c in (self._connections.get(b) for b in view.backends) if c is not None]
        ready = any(c.state == "ready" for c in conns)
        trust = max((self.trust_level(c.name) for c in conns), key=TRUST_LEVELS.index, default=TRUST_LEVELS[-1])
        return {
            "id": name,
            "status": "connected" if ready else "disconnected",
            "state": "ready" if ready else "disconnected",
            "transport": "virtual",
            "backends": [c.name for c in conns],
            "tools": tools,
            "tool_count": len(tools),
            "trust_level": trust,
            "source": "virtual",
        }

    def _entry(self, name: str, conn: BackendConnection, tools: list[str], version: str | None) -> dict[str, Any]:
        ready = conn.state == "ready"
        entry: dict[str, Any] = {
            "id": name,
            "status": "connected" if ready else "disconnected",
            "state": conn.state,
            "transport": conn.config.transport,
        }
        record = self._kernel.backend(name) if ready else None
        if record is not None:
            spoken = version or record.negotiation.version
            entry["mgp_version"] = versions.wire(record.negotiation.version)
            entry["extensions"] = extensions.to_wire(record.active, spoken)
            entry["permissions_required"] = list(record.permissions_required)
        entry["tools"] = tools
        entry["tool_count"] = len(tools)
        entry["trust_level"] = self.trust_level(name)
        entry["source"] = "runtime" if name in self._runtime else "config"
        return entry

    async def _visible_tools(self, view: View, principal: Principal) -> dict[str, list[str]]:
        """Tool names per backend as this caller sees them in its view, only those it may call."""
        merged = await self._catalog.merged(view, "tools")
        guard = view.guard  # a virtual server's: the real tool must be allowed too (as Catalog.page)
        out: dict[str, list[str]] = {}
        for item in merged.items:
            exposed = item["name"]
            hit = merged.index.get(exposed)
            if hit is None or names.is_reserved_tool_name(hit[1]):
                continue
            if guard is not None and not guard.visible(principal, "tools", hit[0], hit[1]):
                continue
            if self._chain.visible(item_action("tools", item), principal, Target(hit[0], hit[1], item)):
                out.setdefault(hit[0], []).append(exposed)
        return out

    # ---- register -------------------------------------------------------------------------------

    async def register(self, call: Call) -> Routed:
        conn, record = await self.add_server(call.params, call.principal.name)
        tools = (await self._visible_tools(call.session.view, call.principal)).get(record.name, [])
        facet = call.session.mgp
        entry = self._entry(record.name, conn, tools, facet.version if facet is not None else None)
        entry.update(registered=True, registered_by=record.registered_by)
        if conn.last_error is not None and conn.state != "ready":
            entry["error"] = conn.last_error
        return Routed(jsonrpc.result(call.rpc_id, entry))

    async def describe(self, name: str) -> dict[str, Any] | None:
        """One backend's entry as an operator sees it (the admin API: its own tool names, no view)."""
        conn = self._connections.get(name)
        if conn is None:
            return None
        tools = [
            t["name"]
            for t in await self._catalog.of_backend(name, "tools")
            if isinstance(t.get("name"), str) and not names.is_reserved_tool_name(t["name"])
        ]
        entry = self._entry(name, conn, tools, None)
        record = self._runtime.get(name)
        if record is not None:
            entry["registered_by"] = record.registered_by
        if conn.last_error is not None and conn.state != "ready":
            entry["error"] = conn.last_error
        return entry

    async def add_server(
        self, raw: Mapping[str, Any], registered_by: str, from_replica: str | None = None
    ) -> tuple[BackendConnection, RuntimeBackend]:
        """Register and connect a backend from §15.4 params (the method, and the admin API with the
        admin token); raises RpcError for params the gateway refuses. ``from_replica``: registered
        there and applied here (not claimed, announced, audited, nor waited for)."""
        params = _parse(RegisterParams, raw)
        name = params.id
        if not BACKEND_NAME.fullmatch(name):
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS,
                f"server id {name!r} must be a lowercase DNS label ([a-z0-9-], 1-63 chars): "
                "it becomes part of tool names and resource URIs",
            )
        if name in self._connections:
            raise _taken(f"a server named {name!r} already exists")
        if name in self._virtual:
            raise _taken(f"{name!r} is the name of a virtual server")
        config = self._backend_config(params)
        shared = self._shared if from_replica is None else None
        if shared is not None and not await shared.claim(name, raw, registered_by):
            raise _taken(f"a server named {name!r} is already registered on another replica")
        trust = self._trust.get(name) or security.normalize_trust(params.mgp.trust_level) or RUNTIME_TRUST
        record = RuntimeBackend(
            name=name,
            trust_level=trust,
            registered_by=registered_by,
            created_by=params.created_by,
            justification=params.justification,
            declared=tuple(params.mgp.extensions),
            registered_at=time.time(),
        )
        self._runtime[name] = record  # before it connects: its tools are listed at its trust level
        try:
            conn = await self._add(name, config)
        except ValueError as exc:  # taken meanwhile
            self._runtime.pop(name, None)
            if shared is not None:
                await shared.withdraw(name)
            raise _taken(str(exc)) from None
        if from_replica is not None:
            return conn, record
        if shared is not None:
            await shared.announce(name, raw, registered_by)  # the others connect while this one does
        await conn.wait_settled(config.connect_timeout_s)  # the first attempt, either way: reported
        self._audit.record(
            "backend_registered",
            principal=registered_by,
            backend=name,
            transport=config.transport,
            trust_level=trust,
            created_by=params.created_by,
            justification=params.justification,
        )
        return conn, record

    def _backend_config(self, params: RegisterParams) -> BackendConfig:
        transport = _TRANSPORTS.get(params.transport)
        if transport is None:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"transport must be one of {', '.join(sorted(_TRANSPORTS))}")
        if security.normalize_trust(params.mgp.trust_level) is None and params.mgp.trust_level is not None:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS, f"mgp.trust_level must be one of {', '.join(security.TRUST_LEVELS)}"
            )
        fields: dict[str, Any] = {"transport": transport}
        if transport == "stdio":
            if not self._register_commands:
                code = MgpCode.PERMISSION_DENIED
                raise jsonrpc.RpcError(
                    code,
                    "registering stdio servers at runtime is disabled (it would run a program the request "
                    "names); the operator enables it with mgp.register_commands: true",
                    mgp_error_data(code),
                )
            fields.update(command=params.command, args=params.args)
        else:
            url = params.url
            if url is None and params.command is not None and "://" in params.command:
                url = params.command
            fields["url"] = url
        try:
            return BackendConfig.model_validate(fields)
        except ValidationError as exc:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, _message(exc)) from None

    # ---- deregister -----------------------------------------------------------------------------

    async def deregister(self, call: Call) -> Routed:
        return Routed(jsonrpc.result(call.rpc_id, await self.remove_server(call.params, call.principal.name)))

    async def remove_server(
        self, params: Mapping[str, Any], by: str, from_replica: str | None = None
    ) -> dict[str, Any]:
        """Deregister a backend registered at runtime (the method, and the admin API); raises RpcError.
        ``from_replica``: deregistered there and applied here (not announced nor audited)."""
        name = params.get("id")
        reason = params.get("reason")
        if not isinstance(name, str) or not name:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.id must be a non-empty string")
        if reason is not None and not isinstance(reason, str):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.reason must be a string")
        if name not in self._runtime:
            if name in self._connections:
                raise jsonrpc.RpcError(
                    jsonrpc.INVALID_PARAMS,
                    f"server {name!r} comes from the configuration file and cannot be deregistered at runtime; "
                    "remove it from the config (or stop it with mgp/lifecycle/shutdown)",
                )
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"no server registered at runtime is named {name!r}")
        record = self._runtime.pop(name)  # at once: a second deregistration finds nothing
        if self._shared is not None and from_replica is None:
            await self._shared.withdraw(name)  # the others drain theirs meanwhile
        await self._remove(name, DRAIN_S)
        result: dict[str, Any] = {"id": name, "deregistered": True, "registered_by": record.registered_by}
        if from_replica is not None:
            return result
        self._audit.record("backend_deregistered", principal=by, backend=name, reason=reason or None)
        if reason:
            result["reason"] = reason
        return result


def _taken(message: str) -> jsonrpc.RpcError:
    code = MgpCode.SERVER_ALREADY_REGISTERED
    return jsonrpc.RpcError(code, message, mgp_error_data(code))


def _filter(params: Mapping[str, Any]) -> tuple[str, frozenset[str], frozenset[str]]:
    raw = params.get("filter", {})
    if not isinstance(raw, dict):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.filter must be an object")
    status = raw.get("status", "all")
    if status not in _STATUSES:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"filter.status must be one of {', '.join(_STATUSES)}")
    wanted: list[frozenset[str]] = []
    for key in ("extensions", "permissions"):
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"filter.{key} must be an array of strings")
        wanted.append(frozenset(value))
    return status, extensions.canonical(sorted(wanted[0])), wanted[1]


def _parse(model: type[RegisterParams], params: Mapping[str, Any]) -> RegisterParams:
    try:
        return model.model_validate(dict(params))
    except ValidationError as exc:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, _message(exc)) from None


def _message(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ())) or "params"
    return f"invalid registration: {where}: {first.get('msg', 'invalid')}"
