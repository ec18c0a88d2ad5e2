"""Who gets each message: client requests to backends, backend messages to the right client.

The router never decides *whether* something may pass (that is ``policies/``) and never knows a
dialect's quirks (that is ``adapters/``). It owns the mapping between a client's names, ids and
tokens and the backends', in both directions.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import adapters
from adapters import mcp as mcp_adapter
from adapters import mcp_draft, mcp_modern, mcpl
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.events import Event
from gateway.federation import (
    CAPABILITY_OF,
    LIST_METHODS,
    ListKind,
    Merged,
    View,
    rewrite_result,
)
from gateway.sessions import ClientSession, Outgoing, level_rank
from gateway.upstreams.connection import BackendConnection
from policies.chain import Decision, Target
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.core import Gateway

log = logging.getLogger(__name__)

LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
_LIST_CHANGED: dict[ListKind, str] = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
    "resourceTemplates": "notifications/resources/list_changed",
}
_KINDS_OF_CHANGE: dict[str, tuple[ListKind, ...]] = {
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "resourceTemplates"),
}
# Which client capability a backend's request to the client needs.
_CLIENT_CAPABILITY = {
    "sampling/createMessage": "sampling",
    "elicitation/create": "elicitation",
    "roots/list": "roots",
}
_KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "completion/complete",
        *mcpl.HOST_REQUESTS,
    }
)
# How many input_required rounds a modern backend may ask for one call.
_MAX_INPUT_ROUNDS = 16
# How long the first requests after start wait for a backend that is still connecting.
_STARTUP_GRACE_S = 5.0

# A handler gets the principal of *this* request: on a session, each request is held to the
# credential it presents (Gateway.caller_of), which may grant less than the one that opened it.
Handler = Callable[["Router", ClientSession, Event, Channel, Principal], Awaitable[dict[str, Any]]]


class PolicyDenied(jsonrpc.RpcError):
    """A dispatch-stage policy said no (the request's target was already known)."""

    def __init__(self, decision: Decision, backend: str) -> None:
        super().__init__(decision.code, decision.reason, decision.data)
        self.decision = decision
        self.backend = backend


class CallSink:
    """Delivers the messages related to one forwarded call to the stream that carries the call."""

    __slots__ = ("channel", "session", "session_id")

    def __init__(self, session: ClientSession, channel: Channel) -> None:
        self.session = session
        self.session_id = session.id
        self.channel = channel

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self.session.client_capabilities

    @property
    def log_level(self) -> str | None:
        """The level a modern backend is asked to log at for this call.

        A legacy client that never called setLevel leaves logging to the server's discretion; a
        modern backend logs nothing without a level, so the gateway asks for ``info`` on its behalf.
        """
        if self.session.log_level is None and not self.session.mrtr:
            return "info"
        return self.session.log_level

    def deliver(self, message: dict[str, Any]) -> None:
        if message.get("method") == "notifications/message":
            params = message.get("params")
            if isinstance(params, dict) and not self.session.wants_log(params.get("level")):
                return
        if not self.channel.push(message) and not self.channel.overflowed:
            # The call's stream is finished; anything late belongs on the session's own stream.
            self.session.standalone.push(message)


def _encode_cursor(offset: int) -> str:
    return base64.urlsafe_b64encode(f"sb1:{offset}".encode()).decode()


def _decode_cursor(cursor: Any) -> int:
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(str(cursor).encode()).decode()
        tag, _, offset = text.partition(":")
        if tag == "sb1" and offset.isascii() and offset.isdigit():
            return int(offset)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "Invalid cursor")


class Router:
    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self._limits = gateway.config.limits
        # (backend, uri) -> ids of sessions subscribed to it, so each backend sees one subscription.
        self._subscriptions: dict[tuple[str, str], set[str]] = {}
        self._backend_levels: dict[str, str] = {}
        self._handlers: dict[str, Handler] = {
            "initialize": Router._initialize,
            "ping": Router._ping,
            "logging/setLevel": Router._set_level,
            "tools/list": Router._list,
            "prompts/list": Router._list,
            "resources/list": Router._list,
            "resources/templates/list": Router._list,
            "tools/call": Router._named_call,
            "prompts/get": Router._named_call,
            "resources/read": Router._uri_call,
            "resources/subscribe": Router._subscribe,
            "resources/unsubscribe": Router._unsubscribe,
            "completion/complete": Router._complete,
            **dict.fromkeys(mcpl.HOST_REQUESTS, Router._mcpl),
        }

    # ================================================================================ client side

    async def handle(
        self,
        session: ClientSession,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        channel: Channel,
        principal: Principal | None = None,
    ) -> dict[str, Any] | None:
        """Handle one message from a client; return the response for a request, else None.

        ``principal`` is who sends this message when its door authenticates every request
        (Streamable HTTP, legacy SSE POSTs); doors that authenticate once per connection omit it."""
        session.touch()
        if shape in (jsonrpc.Shape.RESPONSE, jsonrpc.Shape.ERROR):
            self._client_response(session, message)
            return None
        draft_ack = message.get("id") if message.get("method") == "cancel" and "id" in message else None
        message, alias = mcp_draft.normalize(message)
        if alias is not None:
            if message.get("method", "").startswith("notifications/"):
                shape = jsonrpc.Shape.NOTIFICATION
            if alias == "initialize":
                session.draft = True
            if alias in mcp_draft.LOCAL_METHODS:
                return self._draft_lifecycle(session, message, alias)
        response = await self._handle(session, message, shape, channel, principal or session.principal)
        if draft_ack is not None:
            return jsonrpc.result(draft_ack, {})  # the draft acknowledges a cancel sent as a request
        if alias is not None and response is not None:
            response = mcp_draft.reshape_response(alias, response, self._gw.server_identity(session.view)["serverInfo"])
        return response

    def _draft_lifecycle(self, session: ClientSession, message: dict[str, Any], alias: str) -> dict[str, Any] | None:
        """``shutdown`` is answered with null; ``exit`` ends the session (the draft's lifecycle)."""
        if alias == "exit":
            self._gw.sessions.end(session)
            return jsonrpc.result(message["id"], None) if "id" in message else None
        return jsonrpc.result(message.get("id"), None) if "id" in message else None

    async def _handle(
        self,
        session: ClientSession,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        channel: Channel,
        principal: Principal,
    ) -> dict[str, Any] | None:
        event = adapters.annotate(
            mcp_adapter.decode(message, shape, session=session.id, principal=session.principal.name)
        )
        started = time.perf_counter()
        decision = await self._gw.chain.admit(event, principal)
        if not decision.allowed:
            self._gw.metrics.observe_request(self._metric_method(event.method), "gateway", decision.outcome, None)
            self.audit(session, event, decision.outcome, "gateway", started, decision.reason)
            if shape is jsonrpc.Shape.NOTIFICATION:
                log.info("dropped notification %s: %s", event.method, decision.reason)
                return None
            return jsonrpc.error(event.rpc_id, decision.code, decision.reason, decision.data)
        if shape is jsonrpc.Shape.NOTIFICATION:
            await self._client_notification(session, event)
            return None
        if not session.initialized and session.protocol_version is None and event.method not in ("initialize", "ping"):
            return jsonrpc.error(event.rpc_id, jsonrpc.INVALID_REQUEST, "Session not initialized")
        handler = self._handlers.get(event.method or "", Router._passthrough)
        backend = "gateway"
        decided = "allowed"
        reason = None
        try:
            response = await handler(self, session, event, channel, principal)
            backend = response.pop("_sb_backend", "gateway") if isinstance(response, dict) else "gateway"
            outcome = "error" if "error" in response else "ok"
        except PolicyDenied as denied:
            response = jsonrpc.error_from(event.rpc_id, denied)
            decided = outcome = denied.decision.outcome
            backend, reason = denied.backend, denied.message
        except jsonrpc.RpcError as exc:
            response = jsonrpc.error_from(event.rpc_id, exc)
            outcome = {
                jsonrpc.BACKEND_UNAVAILABLE: "unavailable",
                jsonrpc.BACKEND_TIMEOUT: "timeout",
            }.get(exc.code, "error")
        method_label = self._metric_method(event.method)
        self._gw.metrics.observe_request(method_label, backend, outcome, time.perf_counter() - started)
        self.audit(session, event, decided, backend, started, reason, result=outcome)
        return response

    def audit(
        self,
        session: ClientSession,
        event: Event,
        outcome: str,
        backend: str,
        started: float,
        reason: str | None = None,
        result: str | None = None,
    ) -> None:
        """One audit record per decision (the MGP adapter re-emits these as notifications/mgp.audit)."""
        self._gw.audit.record(
            outcome,
            principal=session.principal.name,
            dialect=event.dialect.value,
            action=event.action,
            method=event.method,
            backend=backend,
            session=session.id[:8],
            trace_id=event.trace_id or event.id,
            latency_ms=round((time.perf_counter() - started) * 1000, 3),
            **({"reason": reason} if reason else {}),
            **({"result": result} if result else {}),
        )

    @staticmethod
    def _metric_method(method: str | None) -> str:
        return method if method in _KNOWN_METHODS else "other"

    # ---- local answers -----------------------------------------------------------------------

    async def _initialize(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        if session.protocol_version is not None:
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "Session already initialized")
        params = event.params
        version = mcp_adapter.negotiate_version(params.get("protocolVersion"))
        session.protocol_version = version
        info = params.get("clientInfo")
        caps = params.get("capabilities")
        session.client_info = info if isinstance(info, dict) else {}
        session.client_capabilities = caps if isinstance(caps, dict) else {}
        session.dialects = adapters.detect_dialects(params)
        await self._await_startup(session.view)
        result = self._gw.server_identity(session.view)
        result["protocolVersion"] = version
        self._gw.mcpl.on_initialize(session, params, result)
        return jsonrpc.result(event.rpc_id, result)

    async def _mcpl(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        """MCPL host requests: the gateway is the MCPL server of its hosts (gateway/mcpl/)."""
        return await self._gw.mcpl.on_host_request(session, event, channel)

    async def _ping(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        return jsonrpc.result(event.rpc_id, {})

    async def _set_level(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        level = event.params.get("level")
        if level not in LOG_LEVELS:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS, f"Invalid log level {level!r}; one of {', '.join(LOG_LEVELS)}"
            )
        session.log_level = level
        await self._sync_backend_levels(session.view.backends)
        return jsonrpc.result(event.rpc_id, {})

    async def _sync_backend_levels(self, backends: tuple[str, ...]) -> None:
        """A backend shared by many sessions logs at the most verbose level any of them asked for;
        each session then sees only what its own level admits."""
        updates = []
        for name in backends:
            conn = self._gw.connections[name]
            if not conn.state == "ready" or "logging" not in conn.capabilities or conn.era == "modern":
                continue  # a modern backend gets each call's level in its _meta instead
            levels = [s.log_level for s in self._gw.sessions if s.log_level and name in s.view.backends]
            if not levels:
                continue
            wanted = min(levels, key=level_rank)
            if self._backend_levels.get(name) != wanted:
                self._backend_levels[name] = wanted
                updates.append(conn.request("logging/setLevel", {"level": wanted}, timeout=10.0))
        for outcome in await asyncio.gather(*updates, return_exceptions=True):
            if isinstance(outcome, Exception):
                log.info("logging/setLevel toward a backend failed: %s", outcome)

    # ---- lists -------------------------------------------------------------------------------

    async def _list(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        kind = LIST_METHODS[event.method or ""]
        offset = _decode_cursor(event.params.get("cursor"))
        merged = await self.merged(session.view, kind)
        items = merged.items
        if kind == "tools" and self._gw.config.pinning.mode == "enforce":
            # A tool whose definition changed is withheld until an administrator approves it.
            items = [i for i in items if not self._gw.pins.is_hidden(*merged.index[i["name"]])]
        if not principal.capabilities.everything:
            items = [i for i in items if self._gw.chain.visible(self._item_action(kind, i), principal)]
        size = self._gw.config.federation.page_size
        page = items[offset : offset + size]
        result: dict[str, Any] = {kind: page}
        if offset + size < len(items):
            result["nextCursor"] = _encode_cursor(offset + size)
        return jsonrpc.result(event.rpc_id, result)

    @staticmethod
    def _item_action(kind: ListKind, item: dict[str, Any]) -> str:
        if kind == "tools":
            return f"mcp/request:tools/call:{item['name']}"
        if kind == "prompts":
            return f"mcp/request:prompts/get:{item['name']}"
        if kind == "resources":
            return f"mcp/request:resources/read:{item['uri']}"
        return f"mcp/request:resources/read:{item['uriTemplate']}"

    async def merged(self, view: View, kind: ListKind) -> Merged:
        await self._await_startup(view)
        names = [
            name
            for name in view.backends
            if self._gw.connections[name].state == "ready"
            and CAPABILITY_OF[kind] in self._gw.connections[name].capabilities
        ]

        async def one(name: str) -> list[dict[str, Any]]:
            conn = self._gw.connections[name]

            async def fetch(method: str, params: dict[str, Any] | None) -> dict[str, Any]:
                response = await conn.request(method, params)
                if "error" in response:
                    raise jsonrpc.RpcError.from_error(response["error"])
                result = response.get("result")
                return result if isinstance(result, dict) else {}

            items = await self._gw.catalogs[name].get(kind, fetch)
            if kind == "tools":
                # Kept for the modern era's Mcp-Param-* headers toward this backend.
                conn.tool_schemas = {t["name"]: t.get("inputSchema") for t in items}
                await self._gw.pins.observe(name, items)
            return items

        outcomes = await asyncio.gather(*(one(n) for n in names), return_exceptions=True)
        per_backend: list[tuple[str, list[dict[str, Any]]]] = []
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                log.warning("backend %s: listing %s failed: %s", name, kind, outcome)
                continue
            per_backend.append((name, outcome))
        merged = view.merge(kind, per_backend)
        self._gw.metrics.name_collisions.labels(view.name, kind).set(len(merged.collisions))
        return merged

    async def _await_startup(self, view: View) -> None:
        """Right after start, give backends that never connected yet a moment before answering."""
        waits = [
            conn.wait_ready(min(_STARTUP_GRACE_S, conn.config.connect_timeout_s))
            for conn in (self._gw.connections[n] for n in view.backends)
            if conn.first_attempt_pending
        ]
        if waits:
            await asyncio.gather(*waits)

    # ---- routed calls ------------------------------------------------------------------------

    async def _resolve_name(self, view: View, kind: ListKind, exposed: Any) -> tuple[str, str]:
        if not isinstance(exposed, str) or not exposed:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.name must be a non-empty string")
        found = view.namer.name_in(exposed)
        if found is not None:
            return found
        merged = view.merged.get(kind)
        if merged is None or exposed not in merged.index:
            merged = await self.merged(view, kind)
        if exposed in merged.collisions:
            raise jsonrpc.RpcError(
                jsonrpc.NAME_NOT_ROUTABLE,
                f"{exposed!r} is offered by several backends ({', '.join(merged.collisions[exposed])}); "
                "set federation.prefix to 'conditional' or 'always'",
            )
        hit = merged.index.get(exposed)
        if hit is None:
            label = "tool" if kind == "tools" else "prompt"
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown {label}: {exposed}")
        return hit

    async def resolve_uri(self, view: View, exposed: Any) -> tuple[str, str]:
        if not isinstance(exposed, str) or not exposed:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.uri must be a non-empty string")
        found = view.namer.uri_in(exposed)
        if found is not None:
            return found
        if view.namer.prefixed:
            raise jsonrpc.RpcError(jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", {"uri": exposed})
        resources = await self.merged(view, "resources")
        hit = resources.index.get(exposed)
        if hit is not None:
            return hit
        # Never-prefixed federation: a URI from a template belongs to the backend whose template's
        # literal head it starts with (longest head wins).
        templates = await self.merged(view, "resourceTemplates")
        best: tuple[int, tuple[str, str]] | None = None
        for template, (backend, _original) in templates.index.items():
            head = template.split("{", 1)[0]
            if head and exposed.startswith(head) and (best is None or len(head) > best[0]):
                best = (len(head), (backend, exposed))
        if best is None:
            raise jsonrpc.RpcError(jsonrpc.RESOURCE_NOT_FOUND, "Resource not found", {"uri": exposed})
        return best[1]

    async def _named_call(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        kind: ListKind = "tools" if event.method == "tools/call" else "prompts"
        backend, original = await self._resolve_name(session.view, kind, event.params.get("name"))
        params = {**event.params, "name": original}
        if kind == "tools" and self._gw.chain.has_dispatch:
            merged = session.view.merged.get("tools")
            item = merged.by_key.get(event.params.get("name")) if merged is not None else None
            # MCPL §7.7: what the scope check needs, only for calls that carry a scope.
            facts = self._gw.mcpl.call_facts(session, backend, event.params) if "scope" in params else None
            decision = await self._gw.chain.dispatch(event, principal, Target(backend, original, item, facts))
            if not decision.allowed:
                raise PolicyDenied(decision, backend)
        if kind == "tools" and "featureSet" in params:
            params = self._gw.mcpl.backend_params(session, backend, params)
        return await self._forward(session, event, backend, params, channel)

    async def _uri_call(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        backend, original = await self.resolve_uri(session.view, event.params.get("uri"))
        return await self._forward(session, event, backend, {**event.params, "uri": original}, channel)

    async def _complete(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        ref = event.params.get("ref")
        if not isinstance(ref, dict):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.ref must be an object")
        if ref.get("type") == "ref/prompt":
            backend, original = await self._resolve_name(session.view, "prompts", ref.get("name"))
            new_ref = {**ref, "name": original}
        elif ref.get("type") == "ref/resource":
            backend, original = await self.resolve_uri(session.view, ref.get("uri"))
            new_ref = {**ref, "uri": original}
        else:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Unknown ref type {ref.get('type')!r}")
        return await self._forward(session, event, backend, {**event.params, "ref": new_ref}, channel)

    def add_subscription(self, session: ClientSession, backend: str, uri: str) -> None:
        """Record that ``session`` wants ``notifications/resources/updated`` for (backend, uri), and
        make sure the backend is watching it (listen filter for modern backends)."""
        key = (backend, uri)
        first = key not in self._subscriptions
        self._subscriptions.setdefault(key, set()).add(session.id)
        session.subscriptions.add(key)
        conn = self._gw.connections[backend]
        if first and conn.state == "ready":
            if conn.era == "modern":
                conn.listen_resources.add(uri)
                conn.relisten()
            else:
                conn.spawn(conn.request("resources/subscribe", {"uri": uri}, timeout=10.0))

    async def _subscribe(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        exposed = event.params.get("uri")
        backend, original = await self.resolve_uri(session.view, exposed)
        key = (backend, original)
        holders = self._subscriptions.get(key)
        if holders:
            holders.add(session.id)
            session.subscriptions.add(key)
            return jsonrpc.result(event.rpc_id, {})
        conn = self._gw.connections[backend]
        if conn.era == "modern":
            # The modern era has no resources/subscribe: the URI joins the backend's listen filter.
            self._subscriptions.setdefault(key, set()).add(session.id)
            session.subscriptions.add(key)
            conn.listen_resources.add(original)
            conn.relisten()
            return jsonrpc.result(event.rpc_id, {})
        response = await self._forward(session, event, backend, {**event.params, "uri": original}, channel)
        if "result" in response:
            self._subscriptions.setdefault(key, set()).add(session.id)
            session.subscriptions.add(key)
        return response

    async def _unsubscribe(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        backend, original = await self.resolve_uri(session.view, event.params.get("uri"))
        key = (backend, original)
        session.subscriptions.discard(key)
        holders = self._subscriptions.get(key, set())
        holders.discard(session.id)
        if holders:
            return jsonrpc.result(event.rpc_id, {})
        self._subscriptions.pop(key, None)
        conn = self._gw.connections[backend]
        if conn.era == "modern":
            conn.listen_resources.discard(original)
            conn.relisten()
            return jsonrpc.result(event.rpc_id, {})
        return await self._forward(session, event, backend, {**event.params, "uri": original}, channel)

    async def _passthrough(
        self, session: ClientSession, event: Event, channel: Channel, principal: Principal
    ) -> dict[str, Any]:
        """A method the gateway does not interpret goes, untouched, to the one backend that can take it."""
        backends = session.view.backends
        if len(backends) != 1:
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND,
                f"Method not found: {event.method} (not routable across {len(backends)} backends; "
                "use /servers/NAME/mcp to reach one backend directly)",
            )
        params = event.payload.get("params")
        return await self._forward(session, event, backends[0], params if isinstance(params, dict) else None, channel)

    async def _forward(
        self,
        session: ClientSession,
        event: Event,
        backend: str,
        params: dict[str, Any] | None,
        channel: Channel,
    ) -> dict[str, Any]:
        conn = self._gw.connections[backend]
        if conn.state != "ready" and not (
            conn.first_attempt_pending and await conn.wait_ready(min(_STARTUP_GRACE_S, conn.config.connect_timeout_s))
        ):
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_UNAVAILABLE,
                f"backend {backend} is unavailable: {conn.last_error or conn.state}",
            )
        if len(session.inflight) >= self._limits.max_inflight_per_session:
            raise jsonrpc.RpcError(
                jsonrpc.SESSION_OVERLOADED,
                f"too many requests in flight on this session (limit {self._limits.max_inflight_per_session})",
            )
        method = event.method or ""
        if session.mrtr:
            return await self._forward_for_modern_client(session, event, backend, conn, params, channel)
        response = await self._call(session, event.rpc_id, conn, method, params, channel)
        if conn.era == "modern":
            response = await self._fulfil_input_requests(session, event.rpc_id, conn, method, params, channel, response)
        return self._finish(session, event.rpc_id, backend, method, response)

    async def _forward_for_modern_client(
        self,
        session: ClientSession,
        event: Event,
        backend: str,
        conn: BackendConnection,
        params: dict[str, Any] | None,
        channel: Channel,
    ) -> dict[str, Any]:
        """A modern client: requests for input become ``input_required`` results, never requests."""
        method = event.method or ""
        parking = self._gw.parking
        principal = session.principal.name
        state = (params or {}).get("requestState")
        responses = (params or {}).get("inputResponses")
        clean = {k: v for k, v in (params or {}).items() if k not in ("requestState", "inputResponses")}
        if conn.era == "modern":
            # Both ends speak MRTR: pass it through, with the backend's state wrapped and bound.
            forward = dict(clean)
            if state is not None:
                forward["requestState"] = parking.unwrap(state, principal, backend)
            if responses is not None:
                forward["inputResponses"] = responses
            response = await self._call(session, event.rpc_id, conn, method, forward, channel)
            result = response.get("result")
            if isinstance(result, dict) and isinstance(result.get("requestState"), str):
                response = {
                    **response,
                    "result": {**result, "requestState": parking.wrap(result["requestState"], principal, backend)},
                }
            return self._finish(session, event.rpc_id, backend, method, response)
        if state is not None:
            parked = parking.resume(state, principal, backend, method)
            answers = responses if isinstance(responses, dict) else {}
            for key, gid in list(parked.keys.items()):
                if key not in answers:
                    continue
                out = parked.session.outgoing.pop(gid, None)
                if out is not None and out.conn is not None:
                    out.conn.spawn(out.conn.send(jsonrpc.result(out.upstream_id, answers[key])))
                del parked.keys[key]
            work_session, sink, task = parked.session, parked.sink, parked.task
            work_session.client_capabilities = session.client_capabilities
            work_session.log_level = session.log_level
            sink.channel = channel
            if parked.keys:  # some answers are missing: ask for exactly those again
                return self._input_required(
                    event.rpc_id,
                    parking.park(
                        backend=backend,
                        method=method,
                        principal=principal,
                        task=task,
                        session=work_session,
                        sink=sink,
                        keys=parked.keys,
                        requests={k: parked.requests[k] for k in parked.keys},
                    ),
                    {k: parked.requests[k] for k in parked.keys},
                )
        else:
            work_session = session
            sink = CallSink(session, channel)
            pending = conn.begin(method, clean or None, sink)
            task = asyncio.ensure_future(conn.call(pending))
            session.inflight[event.rpc_id] = (conn, pending)
        return await self._await_or_park(work_session, event.rpc_id, backend, method, task, sink)

    async def _await_or_park(
        self,
        session: ClientSession,
        client_id: Any,
        backend: str,
        method: str,
        task: asyncio.Future[dict[str, Any]],
        sink: CallSink,
    ) -> dict[str, Any]:
        if session.input_ready is None:
            session.input_ready = asyncio.Event()
        while not session.input_requests and not session.missing_capabilities:
            session.input_ready.clear()
            waiter = asyncio.ensure_future(session.input_ready.wait())
            try:
                await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                task.cancel()  # the client closed its stream: that cancels the backend call too
                raise
            finally:
                waiter.cancel()
            if task.done():
                session.inflight.pop(client_id, None)
                return self._finish(session, client_id, backend, method, task.result())
        if session.missing_capabilities:
            task.cancel()
            session.inflight.pop(client_id, None)
            missing = sorted(set(session.missing_capabilities))
            raise jsonrpc.RpcError(
                mcp_modern.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"this request needs the client capabilities {missing}, which the request did not declare",
                {"requiredCapabilities": {name: {} for name in missing}},
            )
        await asyncio.sleep(0)  # let requests the backend sent together arrive together
        keys: dict[str, str] = {}
        requests: dict[str, Any] = {}
        for n, (gid, req_method, req_params) in enumerate(session.input_requests, 1):
            key = f"input-{n}"
            keys[key] = gid
            requests[key] = {"method": req_method, **({"params": req_params} if req_params is not None else {})}
        session.input_requests.clear()
        state = self._gw.parking.park(
            backend=backend,
            method=method,
            principal=session.principal.name,
            task=task,  # type: ignore[arg-type]
            session=session,
            sink=sink,
            keys=keys,
            requests=requests,
        )
        return self._input_required(client_id, state, requests)

    @staticmethod
    def _input_required(client_id: Any, state: str, requests: dict[str, Any]) -> dict[str, Any]:
        return jsonrpc.result(
            client_id, {"resultType": "input_required", "inputRequests": requests, "requestState": state}
        )

    def _finish(
        self, session: ClientSession, client_id: Any, backend: str, method: str, response: dict[str, Any]
    ) -> dict[str, Any]:
        """The backend's answer under the client's id, with names rewritten for the client's view.
        A legacy client does not see the modern era's result fields."""
        if "result" in response:
            result = response["result"]
            if not session.mrtr:
                result = mcp_modern.strip_modern_fields(result)
            out = jsonrpc.result(client_id, rewrite_result(session.view.namer, backend, method, result))
        else:
            error = response.get("error")
            out = {"jsonrpc": "2.0", "id": client_id, "error": error if isinstance(error, dict) else {}}
        out["_sb_backend"] = backend
        return out

    async def _call(
        self,
        session: ClientSession,
        client_id: Any,
        conn: BackendConnection,
        method: str,
        params: dict[str, Any] | None,
        channel: Channel,
    ) -> dict[str, Any]:
        pending = conn.begin(method, params, CallSink(session, channel))
        session.inflight[client_id] = (conn, pending)
        try:
            return await conn.call(pending)
        finally:
            if session.inflight.get(client_id, (None, None))[1] is pending:
                del session.inflight[client_id]

    async def _fulfil_input_requests(
        self,
        session: ClientSession,
        client_id: Any,
        conn: BackendConnection,
        method: str,
        params: dict[str, Any] | None,
        channel: Channel,
        response: dict[str, Any],
    ) -> dict[str, Any]:
        """A modern backend answered ``input_required``: ask this (legacy) client for real, with
        sampling/elicitation/roots requests on the call's own stream, and retry with the answers."""
        for _ in range(_MAX_INPUT_ROUNDS):
            result = response.get("result")
            if not isinstance(result, dict) or result.get("resultType") != "input_required":
                return response
            requests = result.get("inputRequests") or {}
            if not isinstance(requests, dict):
                raise jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, f"backend {conn.name} sent malformed inputRequests")
            answers = await self._ask_client_all(session, channel, requests)
            retry = {k: v for k, v in (params or {}).items() if k not in ("inputResponses", "requestState")}
            retry["inputResponses"] = answers
            if "requestState" in result:
                retry["requestState"] = result["requestState"]
            response = await self._call(session, client_id, conn, method, retry, channel)
        raise jsonrpc.RpcError(
            jsonrpc.INTERNAL_ERROR, f"backend {conn.name} still needed input after {_MAX_INPUT_ROUNDS} rounds"
        )

    async def _ask_client_all(
        self, session: ClientSession, channel: Channel, requests: dict[str, Any]
    ) -> dict[str, Any]:
        keys = list(requests)
        answers = await asyncio.gather(*(self._ask_client(session, channel, requests[k]) for k in keys))
        return dict(zip(keys, answers, strict=True))

    async def _ask_client(self, session: ClientSession, channel: Channel, request: Any) -> Any:
        """Send one request to the client on the call's stream and return its result."""
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            raise jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, "a backend input request lacks a method")
        method = request["method"]
        needed = _CLIENT_CAPABILITY.get(method)
        if needed is not None and needed not in session.client_capabilities:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_REQUEST,
                f"the backend needs {method} from the client, which did not declare the {needed!r} capability",
            )
        params = request.get("params") if isinstance(request.get("params"), dict) else None
        return await session.ask(channel, method, params, self._limits.client_request_timeout_s)

    # ---- client notifications and responses --------------------------------------------------

    async def _client_notification(self, session: ClientSession, event: Event) -> None:
        method = event.method
        params = event.params
        if method == "notifications/initialized":
            session.initialized = True
            return
        if method == "notifications/cancelled":
            request_id = params.get("requestId")
            # Any JSON value may arrive; only a string or number can name a request (or be hashed).
            hashable = isinstance(request_id, (str, int, float)) and not isinstance(request_id, bool)
            entry = session.inflight.get(request_id) if hashable else None
            if entry is not None:
                conn, pending = entry
                reason = params.get("reason")
                conn.cancel(pending, reason if isinstance(reason, str) else None)
            return
        if method == "notifications/progress":
            return  # progress on a client's own work for a backend request: no backend tracks it
        if await self._gw.mcpl.on_host_notification(session, event):
            return
        # Everything else (roots/list_changed, extension notifications) goes to every backend it may concern.
        for name in session.view.backends:
            conn = self._gw.connections[name]
            if conn.state == "ready":
                conn.spawn(conn.send(event.payload))

    def _client_response(self, session: ClientSession, message: dict[str, Any]) -> None:
        out = session.outgoing.pop(str(message.get("id")), None)
        if out is None:
            log.debug("session %s answered unknown request id %r", session.id[:8], message.get("id"))
            return
        if out.timer is not None:
            out.timer.cancel()
        if out.future is not None:
            if not out.future.done():
                out.future.set_result(message)
            return
        assert out.conn is not None
        reply = {k: v for k, v in message.items() if k != "id"}
        reply["id"] = out.upstream_id
        out.conn.spawn(out.conn.send(reply))

    def session_ended(self, session: ClientSession) -> None:
        for conn, pending in list(session.inflight.values()):
            conn.cancel(pending, "client session ended")
        session.inflight.clear()
        for out in session.outgoing.values():
            if out.timer is not None:
                out.timer.cancel()
            if out.future is not None:
                if not out.future.done():
                    out.future.set_result(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, "client session ended"))
            elif out.conn is not None:
                out.conn.spawn(
                    out.conn.send(jsonrpc.error(out.upstream_id, jsonrpc.INTERNAL_ERROR, "client session ended"))
                )
        session.outgoing.clear()
        for key in session.subscriptions:
            holders = self._subscriptions.get(key)
            if holders is None:
                continue
            holders.discard(session.id)
            if not holders:
                del self._subscriptions[key]
                conn = self._gw.connections[key[0]]
                if conn.era == "modern":
                    conn.listen_resources.discard(key[1])
                    conn.relisten()
                elif conn.state == "ready":
                    conn.spawn(conn.request("resources/unsubscribe", {"uri": key[1]}, timeout=10.0))

    # =============================================================================== backend side

    def _sessions_of(self, backend: str) -> list[ClientSession]:
        return [s for s in self._gw.sessions if not s.closed and backend in s.view.backends]

    def on_connected(self, conn: BackendConnection) -> None:
        self._gw.catalogs[conn.name].invalidate()
        self._gw.metrics.backend_up.labels(conn.name).set(1)
        if conn.restarts:
            self._gw.metrics.backend_restarts.labels(conn.name).inc()
        self._backend_levels.pop(conn.name, None)
        self._gw.mcpl.backend_connected(conn)
        conn.spawn(self._sync_backend_levels((conn.name,)))
        for backend, uri in list(self._subscriptions):
            if backend == conn.name:
                if conn.era == "modern":
                    conn.listen_resources.add(uri)
                else:
                    conn.spawn(conn.request("resources/subscribe", {"uri": uri}, timeout=10.0))
        self._announce_list_changes(conn, initial=True)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self._gw.catalogs[conn.name].invalidate()
        self._gw.metrics.backend_up.labels(conn.name).set(0)
        self._gw.mcpl.backend_disconnected(conn)
        for session in self._sessions_of(conn.name):
            for gid, out in list(session.outgoing.items()):
                if out.conn is conn:
                    self._drop_outgoing(session, gid, notify_client=True, reason=f"backend went away: {reason}")
        self._announce_list_changes(conn, initial=False)

    def _announce_list_changes(self, conn: BackendConnection, initial: bool) -> None:
        caps = conn.capabilities
        methods = {
            _LIST_CHANGED[k] for k in ("tools", "prompts", "resources") if CAPABILITY_OF[k] in caps or not initial
        }
        for session in self._sessions_of(conn.name):
            if session.initialized:
                for method in sorted(methods):
                    session.standalone.push(jsonrpc.notification(method))

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        method = message.get("method", "")
        upstream_id = message.get("id")
        if method == "ping":
            conn.spawn(conn.send(jsonrpc.result(upstream_id, {})))
            return
        if self._gw.mcpl.on_server_request(conn, message, owner):
            return
        session: ClientSession | None = None
        channel: Channel | None = None
        if isinstance(owner, CallSink) and not owner.session.closed:
            session, channel = owner.session, owner.channel
        else:
            session, channel = self._attribute(conn, method)
        needed = _CLIENT_CAPABILITY.get(method)
        if session is None or channel is None:
            self._refuse(conn, upstream_id, f"no client session is available to answer {method}")
            return
        if needed is not None and needed not in session.client_capabilities:
            self._refuse(conn, upstream_id, f"the client did not declare the {needed!r} capability")
            if session.mrtr:
                # A modern client is told which capability its request needs (-32021).
                session.missing_capabilities.append(needed)
                if session.input_ready is not None:
                    session.input_ready.set()
            return
        gid = session.next_outgoing_id()
        out = Outgoing(conn, upstream_id, method)
        if session.mrtr:
            # Collected, not sent: the modern client gets them as an input_required result.
            session.outgoing[gid] = out
            session.input_requests.append((gid, method, message.get("params")))
            if session.input_ready is not None:
                session.input_ready.set()
            return
        out.timer = asyncio.get_running_loop().call_later(
            self._limits.client_request_timeout_s,
            self._drop_outgoing,
            session,
            gid,
            True,
            f"the client did not answer {method} within {self._limits.client_request_timeout_s:g}s",
            True,
        )
        session.outgoing[gid] = out
        forwarded = {**message, "id": gid}
        if not (channel.push(forwarded) or session.standalone.push(forwarded)):
            self._drop_outgoing(session, gid, False, "the client's stream is gone", True)

    def _attribute(self, conn: BackendConnection, method: str) -> tuple[ClientSession | None, Channel | None]:
        """A server request that arrived without relation to a call (stdio, WebSocket, legacy SSE):
        the session with the newest call in flight on that backend gets it, else the most recently
        active session that can answer it."""
        owners = [o for o in conn.owners_inflight() if isinstance(o, CallSink) and not o.session.closed]
        if owners:
            newest = owners[-1]
            return newest.session, newest.channel
        needed = _CLIENT_CAPABILITY.get(method)
        candidates = [s for s in self._sessions_of(conn.name) if needed is None or needed in s.client_capabilities]
        if not candidates:
            return None, None
        best = max(candidates, key=lambda s: s.last_seen)
        return best, best.standalone

    def _refuse(self, conn: BackendConnection, upstream_id: Any, reason: str) -> None:
        log.info("backend %s: refused a request to the client: %s", conn.name, reason)
        conn.spawn(conn.send(jsonrpc.error(upstream_id, jsonrpc.METHOD_NOT_FOUND, reason)))

    def _drop_outgoing(
        self, session: ClientSession, gid: str, notify_client: bool, reason: str, answer_backend: bool = False
    ) -> None:
        out = session.outgoing.pop(gid, None)
        if out is None:
            return
        if out.timer is not None:
            out.timer.cancel()
        if out.future is not None:
            if not out.future.done():
                out.future.set_result(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, reason))
        elif answer_backend and out.conn is not None:
            out.conn.spawn(out.conn.send(jsonrpc.error(out.upstream_id, jsonrpc.INTERNAL_ERROR, reason)))
        if notify_client:
            session.standalone.push(
                jsonrpc.notification("notifications/cancelled", {"requestId": gid, "reason": reason})
            )

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        method = message.get("method", "")
        params = message.get("params") if isinstance(message.get("params"), dict) else {}
        if self._gw.mcpl.on_server_notification(conn, message):
            return
        kinds = _KINDS_OF_CHANGE.get(method)
        if kinds is not None:
            for kind in kinds:
                self._gw.catalogs[conn.name].invalidate(kind)
            for session in self._sessions_of(conn.name):
                session.standalone.push(message)
            return
        if method == "notifications/resources/updated":
            uri = params.get("uri")
            for sid in self._subscriptions.get((conn.name, uri), ()):
                session = self._gw.sessions.get(sid)
                if session is not None:
                    exposed = session.view.namer.uri_out(conn.name, uri)
                    session.standalone.push({**message, "params": {**params, "uri": exposed}})
            return
        if method == "notifications/cancelled":
            upstream_id = params.get("requestId")
            for session in self._sessions_of(conn.name):
                for gid, out in list(session.outgoing.items()):
                    if out.conn is conn and out.upstream_id == upstream_id:
                        self._drop_outgoing(session, gid, True, str(params.get("reason") or "cancelled by the server"))
            return
        for session in self._sessions_of(conn.name):
            if method == "notifications/message" and not session.wants_log(params.get("level")):
                continue
            session.standalone.push(message)
