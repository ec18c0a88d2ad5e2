"""The admin API and the protected-resource metadata (RFC 9728).

Admin calls carry ``Authorization: Bearer <auth.admin_token>``; without an admin token in config
there is no admin API (every call is 404). Changes to principals apply to live sessions at once.
MGP: permission requests waiting for an operator (§3, ``interactive``) and backends registered at
runtime (§15: ``/admin/mgp/servers``, the same registry as ``mgp/discovery/register``).
``GET /admin/config``: the effective config with every secret redacted (:func:`redacted`), the file
it came from and what the last reload did (gateway/reload_status.py).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from gateway import jsonrpc
from gateway.config import PrincipalConfig
from gateway.errors import MgpCode
from gateway.protected_resource import configured_resources, gateway_resource, server_of_metadata, server_resource
from gateway.transports.http_common import base_url
from policies.auth import bearer_token
from policies.mgp_permissions import owner_of

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config import Auth, Config
    from gateway.federation import BackendCatalog
    from gateway.mcpl import McplRelay
    from gateway.mgp.kernel import Kernel
    from gateway.mgp.registry import Registry
    from gateway.reload_status import ReloadStatus
    from gateway.replicas.owner_relay import OwnerRelay
    from gateway.sessions import SessionStore
    from gateway.upstreams.principal_pool import PrincipalPool
    from policies.auth import PrincipalRegistry
    from policies.pinning import PinStore


# A refused registration as an HTTP status (the method answers the same refusals as JSON-RPC errors).
_REGISTRY_STATUS = {
    int(MgpCode.SERVER_ALREADY_REGISTERED): 409,
    int(MgpCode.PERMISSION_DENIED): 403,
    jsonrpc.INVALID_PARAMS: 400,
}


def error_response(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


class AdminApi:
    def __init__(
        self,
        *,
        auth: Callable[[], Auth | None],
        principals: PrincipalRegistry,
        principals_changed: Callable[[], None],
        sessions: SessionStore,
        audit: AuditLog,
        mcpl: McplRelay,
        pins: PinStore,
        catalogs: Mapping[str, BackendCatalog],
        mgp: Kernel,
        registry: Registry,
        config: Callable[[], Config],
        reload_status: ReloadStatus,
        share_principal: Callable[[str, PrincipalConfig | None], Awaitable[None]] | None = None,
        relay: OwnerRelay | None = None,
        pools: Mapping[str, PrincipalPool] | None = None,
    ) -> None:
        self._auth = auth  # asked on every call: a config reload replaces it
        self._principals = principals
        self._principals_changed = principals_changed
        self._sessions = sessions
        self._audit = audit
        self._mcpl = mcpl
        self._pins = pins
        self._catalogs = catalogs
        self._mgp = mgp
        self._registry = registry
        self._share = share_principal  # many replicas: every replica applies the change (gateway/replicas/)
        self._relay = relay  # many replicas: an answer for a request another replica holds runs there
        self._config = config  # asked on every call: a reload replaces the gateway's config
        self._reload_status = reload_status
        self._pools = pools if pools is not None else {}  # per-principal stdio backends (issue 17)

    def routes(self) -> list[Route]:
        return [
            Route("/.well-known/oauth-protected-resource", self.resource_metadata, methods=["GET"]),
            Route("/.well-known/oauth-protected-resource/{path:path}", self.resource_metadata, methods=["GET"]),
            Route("/admin/config", self.effective_config, methods=["GET"]),
            Route("/admin/principals", self.list_principals, methods=["GET"]),
            Route("/admin/principals/{name}", self.put_principal, methods=["PUT"]),
            Route("/admin/principals/{name}", self.delete_principal, methods=["DELETE"]),
            Route("/admin/principals/{name}/capabilities", self.change_capabilities, methods=["POST"]),
            Route("/admin/pins", self.list_pins, methods=["GET"]),
            Route("/admin/mcpl", self.mcpl_state, methods=["GET"]),
            Route("/admin/pools", self.pools_state, methods=["GET"]),
            Route("/admin/pins/{backend}/{tool}/approve", self.approve_pin, methods=["POST"]),
            Route("/admin/mgp/permissions", self.mgp_permissions, methods=["GET"]),
            Route("/admin/mgp/permissions/{request_id}", self.answer_mgp_permissions, methods=["POST"]),
            Route("/admin/mgp/servers", self.mgp_servers, methods=["GET"]),
            Route("/admin/mgp/servers", self.register_mgp_server, methods=["POST"]),
            Route("/admin/mgp/servers/{server_id}", self.deregister_mgp_server, methods=["DELETE"]),
        ]

    async def resource_metadata(self, request: Request) -> Response:
        """RFC 9728 §3: the gateway's metadata, or a backend's under .../servers/NAME/mcp (§3.1)."""
        auth = self._auth()
        base = base_url(request.scope)
        path = request.path_params.get("path", "")
        server = server_of_metadata(path) if path.startswith("servers/") else None
        if server is not None:
            resources = configured_resources(self._config())
            if server not in resources:
                return error_response(404, "no such server")
            resource = server_resource(server, auth, resources, base)
            name = f"Switchboard: {server}"
        elif path.startswith("servers/"):
            return error_response(404, "no such server")
        else:
            resource, name = gateway_resource(auth, base), "Switchboard"
        return JSONResponse(
            {
                "resource": resource,
                "authorization_servers": list(auth.authorization_servers) if auth else [],
                "bearer_methods_supported": ["header"],
                "resource_name": name,
            }
        )

    def _authorized(self, request: Request) -> Response | None:
        auth = self._auth()
        if auth is None or not auth.admin_token:
            return error_response(404, "no admin API: set auth.admin_token")
        token = bearer_token(request.headers.get("authorization"))
        if token is None or not hmac.compare_digest(token.encode(), auth.admin_token.encode()):
            return JSONResponse(
                {"error": "admin token required"},
                status_code=401,
                headers={"www-authenticate": 'Bearer realm="switchboard-admin"'},
            )
        return None

    async def _json(self, request: Request) -> Any:
        try:
            return orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"body is not JSON: {exc}") from None

    async def effective_config(self, request: Request) -> Response:
        """The config the gateway runs with (secrets redacted), its file, and the last reload's result."""
        if (refused := self._authorized(request)) is not None:
            return refused
        config, status = self._config, self._reload_status
        return JSONResponse(
            {"config": redacted(config().model_dump(mode="json")), "source": status.source, "reload": status.to_json()}
        )

    async def list_principals(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        registry = self._principals
        principals = {}
        for name in registry.names():
            config = registry.get(name)
            assert config is not None
            principals[name] = {"capabilities": config.capabilities, "tokens": len(config.tokens)}
            if config.mcpl.feature_sets is not None or config.mcpl.scopes is not None:
                principals[name]["mcpl"] = config.mcpl.model_dump(exclude_none=True)
        sessions: dict[str, int] = {}
        for session in self._sessions:
            sessions[session.principal.name] = sessions.get(session.principal.name, 0) + 1
        return JSONResponse({"principals": principals, "sessions": sessions})

    async def put_principal(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        name = request.path_params["name"]
        try:
            body = await self._json(request)
            config = PrincipalConfig.model_validate(body)
        except (ValueError, ValidationError) as exc:
            return error_response(400, str(exc))
        existing = self._principals.get(name)
        if existing is not None and "tokens" not in (body or {}):
            config = config.model_copy(update={"tokens": existing.tokens})  # keep tokens unless given
        self._principals.upsert(name, config)
        self._principals_changed()
        if self._share is not None:
            await self._share(name, config)
        self._audit.record("principal_changed", principal=name, capabilities=config.capabilities)
        return JSONResponse({"principal": name, "capabilities": config.capabilities})

    async def change_capabilities(self, request: Request) -> Response:
        """``{add: [...], remove: [...]}``, the shape MCPx §11.3 uses for capability promotion."""
        if (refused := self._authorized(request)) is not None:
            return refused
        name = request.path_params["name"]
        existing = self._principals.get(name)
        if existing is None:
            return error_response(404, f"no principal {name!r}")
        try:
            body = await self._json(request)
        except ValueError as exc:
            return error_response(400, str(exc))
        add = body.get("add", []) if isinstance(body, dict) else None
        remove = body.get("remove", []) if isinstance(body, dict) else None
        if (
            not isinstance(add, list)
            or not isinstance(remove, list)
            or not all(isinstance(c, str) for c in add + remove)
        ):
            return error_response(400, "body must be {add: [patterns], remove: [patterns]}")
        capabilities = [c for c in existing.capabilities if c not in remove] + [
            c for c in add if c not in existing.capabilities
        ]
        changed = existing.model_copy(update={"capabilities": capabilities})
        self._principals.upsert(name, changed)
        self._principals_changed()
        if self._share is not None:
            await self._share(name, changed)
        self._audit.record("principal_changed", principal=name, capabilities=capabilities)
        return JSONResponse({"principal": name, "capabilities": capabilities})

    async def delete_principal(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        name = request.path_params["name"]
        if not self._principals.remove(name):
            return error_response(404, f"no principal {name!r}")
        self._principals_changed()
        if self._share is not None:
            await self._share(name, None)
        self._audit.record("principal_removed", principal=name)
        return Response(status_code=204)

    async def mcpl_state(self, request: Request) -> Response:
        """MCPL at a glance: what each backend declared and was last told, what each host has enabled."""
        if (refused := self._authorized(request)) is not None:
            return refused
        return JSONResponse(self._mcpl.snapshot())

    async def pools_state(self, request: Request) -> Response:
        """Per-principal stdio backends: each child by principal (names only here, behind the admin
        token; /readyz shows counts), its state, calls in flight and idle time. Never its environment."""
        if (refused := self._authorized(request)) is not None:
            return refused
        return JSONResponse(
            {name: {**pool.describe(), "by_principal": pool.detail()} for name, pool in self._pools.items()}
        )

    async def list_pins(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        return JSONResponse({"mode": self._pins.mode, "pending": self._pins.pending()})

    async def approve_pin(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        backend, tool = request.path_params["backend"], request.path_params["tool"]
        if not await self._pins.approve(backend, tool):
            return error_response(404, f"no changed definition of {backend}/{tool} awaits approval")
        self._catalogs[backend].invalidate("tools") if backend in self._catalogs else None
        return JSONResponse({"approved": f"{backend}/{tool}"})

    async def mgp_permissions(self, request: Request) -> Response:
        """MGP ``interactive``: the backends' permission requests waiting for an operator, on every replica."""
        if (refused := self._authorized(request)) is not None:
            return refused
        return JSONResponse({"pending": await self._mgp.pending_everywhere()})

    async def answer_mgp_permissions(self, request: Request) -> Response:
        """An operator's answer ``{"grants": {perm: "approved" | "denied" | {"decision": ...}}}``; the
        grants go to the backend at once, and permissions left out are denied."""
        if (refused := self._authorized(request)) is not None:
            return refused
        request_id = request.path_params["request_id"]
        owner = owner_of(request_id)
        relay = self._relay
        if relay is not None and owner is not None and owner != relay.replica and not relay.relayed(request.scope):
            status, headers, content = await relay.collect(owner, request.scope, await request.body())
            return Response(content, status, {k.decode("latin-1"): v.decode("latin-1") for k, v in headers})
        try:
            body = await self._json(request)
            if not isinstance(body, dict) or not isinstance(body.get("grants"), dict):
                raise ValueError('the body must be {"grants": {permission: decision}}')
            params = await self._mgp.answer(request_id, body["grants"], "admin")
        except KeyError:
            return error_response(404, f"no permission request {request_id!r} waits for an answer")
        except ValueError as exc:
            return error_response(400, str(exc))
        self._audit.record("mgp_permissions", principal="admin", action="mgp/permission/grant", grants=params["grants"])
        return JSONResponse(params)

    # ---- MGP §15: backends registered at runtime, with the admin token ------------------------------

    async def mgp_servers(self, request: Request) -> Response:
        """Every backend (from config and registered at runtime), with its own tools."""
        if (refused := self._authorized(request)) is not None:
            return refused
        return JSONResponse({"servers": [await self._registry.describe(name) for name in self._catalogs]})

    async def register_mgp_server(self, request: Request) -> Response:
        """``mgp/discovery/register`` for operators: the body is its §15.4 params."""
        if (refused := self._authorized(request)) is not None:
            return refused
        try:
            body = await self._json(request)
            if not isinstance(body, dict):
                raise ValueError("the body must be the registration object (§15.4)")
            _, record = await self._registry.add_server(body, "admin")
        except ValueError as exc:
            return error_response(400, str(exc))
        except jsonrpc.RpcError as exc:
            return error_response(_REGISTRY_STATUS.get(exc.code, 400), exc.message)
        return JSONResponse(await self._registry.describe(record.name), status_code=201)

    async def deregister_mgp_server(self, request: Request) -> Response:
        if (refused := self._authorized(request)) is not None:
            return refused
        server_id = request.path_params["server_id"]
        if not self._registry.is_runtime(server_id):
            if server_id in self._catalogs:
                return error_response(409, f"{server_id!r} comes from the configuration file: remove it there")
            return error_response(404, f"no server registered at runtime is named {server_id!r}")
        reason = request.query_params.get("reason")
        try:
            result = await self._registry.remove_server({"id": server_id, "reason": reason}, "admin")
        except jsonrpc.RpcError as exc:  # deregistered meanwhile
            return error_response(404, exc.message)
        return JSONResponse(result)


# ---- redaction (GET /admin/config, and every page that shows the config) ----------------------------

REDACTED = "***"
_SECRET_NAME = re.compile(r"secret|password|token|key", re.IGNORECASE)
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@]*@")
_QUERY_PAIR = re.compile(r"([?&;])([^=&;#]*)=([^&;#]*)")
# Maps whose every value is a credential, whatever its key: a backend's headers and environment.
_SECRET_MAPS = frozenset(
    {
        ("backends", "*", "headers"),
        ("backends", "*", "env"),
        ("backends", "*", "principal_env"),  # issue 17: every principal's child environment
        ("backends", "*", "default_env"),
    }
)
# Header maps of a backend's upstream auth (issue 17: static headers, per-principal and connection headers).
_AUTH_HEADER_MAPS = frozenset({"headers", "principals", "default", "connection"})


def redacted(value: Any, path: tuple[str, ...] = ()) -> Any:
    """A config dump (``model_dump(mode="json")``) with every secret replaced by ``"***"``: the strings
    under a key naming a secret, password, token or key (at any depth, free-form maps included),
    every value of ``backends.*.headers`` and ``backends.*.env``, the value of a secret-named flag in
    ``backends.*.args`` (``--token V``, ``--api-key=V``), and the userinfo (and secret-named
    query values) of every URL. Numbers, booleans and nulls stay: they carry no secret (``max_token_bytes``)."""
    if isinstance(value, dict):
        wildcard = (*path[:1], "*", *path[2:]) if len(path) == 3 else path
        every = wildcard in _SECRET_MAPS
        if wildcard == ("backends", "*", "auth"):
            value = {k: _hidden(v) if k in _AUTH_HEADER_MAPS and isinstance(v, dict) else v for k, v in value.items()}
        return {
            key: _hidden(item) if every or _SECRET_NAME.search(str(key)) else redacted(item, (*path, str(key)))
            for key, item in value.items()
        }
    if isinstance(value, list):
        if len(path) == 3 and path[0] == "backends" and path[2] == "args":
            return _redacted_args(value)
        return [redacted(item, path) for item in value]
    if isinstance(value, str):
        return _redact_url(value)
    return value


def _redacted_args(args: list[Any]) -> list[Any]:
    """A stdio command line: ``--api-key=V`` and the word after ``--token`` are credentials too."""
    out: list[Any] = []
    follows_flag = False  # the previous word was a secret-named flag without "=": this one is its value
    for arg in args:
        if not isinstance(arg, str):
            out.append(arg)
            follows_flag = False
            continue
        flag, eq, _ = arg.partition("=")
        is_flag = arg.startswith("-")
        if follows_flag and not is_flag:
            out.append(REDACTED)
        elif eq and is_flag and _SECRET_NAME.search(flag):
            out.append(f"{flag}={REDACTED}")
        else:
            out.append(_redact_url(arg))
        follows_flag = is_flag and not eq and bool(_SECRET_NAME.search(arg))
    return out


def _hidden(value: Any) -> Any:
    if isinstance(value, str):
        return REDACTED
    if isinstance(value, list):
        return [_hidden(item) for item in value]
    if isinstance(value, dict):
        return {key: _hidden(item) for key, item in value.items()}
    return value


def _redact_url(text: str) -> str:
    if "://" not in text:
        return text
    text = _USERINFO.sub(rf"\1{REDACTED}@", text)
    return _QUERY_PAIR.sub(
        lambda m: f"{m[1]}{m[2]}={REDACTED}" if _SECRET_NAME.search(m[2]) else m[0],
        text,
    )
