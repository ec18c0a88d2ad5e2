"""The pipeline every client message takes: decode → admit → handle → audit, on one :class:`Call`.

The router never decides *whether* something may pass (that is ``policies/``, asked through the
chain) and never knows a dialect's quirks (that is ``adapters/``). Its handlers say where a request
goes: answered here (initialize, ping, setLevel, lists), to the backend a name or URI resolves to
(gateway/routing/catalog.py), or untouched to the one backend of a single-server view. Forwarding
is gateway/routing/forwarding.py; what backends send on their own is backend_events.py.

Invariants: every request gets exactly one answer; every decision, allowed or not, is one audit
record and one metrics observation; a session's requests are held to the principal of the
credential each presents. Telemetry (gateway/telemetry/) watches from two places only, each one
attribute check when off: around :meth:`Router.handle` (spans, log context) and after each audit
record (the access log).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

import adapters
from adapters import codecs, mcp as mcp_adapter, mcp_draft, mcpl as mcpl_adapter
from adapters.mcp import LOG_LEVELS
from adapters.mcpc import handshake as mcpc_handshake, metadata as mcpc_metadata
from gateway import jsonrpc
from gateway.events import Dialect, action_of
from gateway.federation import LIST_METHODS, ListKind, View
from gateway.routing.addressed_calls import AddressedCalls
from gateway.routing.call import Call, Handler, PolicyDenied, Routed
from gateway.routing.subscribe_calls import SubscribeCalls
from gateway.telemetry.conventions import error_type_of
from policies.chain import Decision, Target

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.channels import Channel
    from gateway.events import Event
    from gateway.mcpc.calls import McpcCalls
    from gateway.mcpl import McplRelay
    from gateway.metrics import Metrics
    from gateway.mgp.server import MgpServer
    from gateway.routing.catalog import Catalog
    from gateway.routing.client_messages import ClientMessages
    from gateway.routing.forwarding import Forwarder
    from gateway.routing.levels import BackendLevels
    from gateway.routing.subscriptions import Subscriptions
    from gateway.sessions import ClientSession, SessionStore
    from gateway.telemetry.observe import AuditTap, ServerObserver
    from policies.chain import PolicyChain
    from policies.principal import Principal

log = logging.getLogger(__name__)

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
        *mcpl_adapter.HOST_REQUESTS,
    }
)
_OUTCOME_OF_CODE = {jsonrpc.BACKEND_UNAVAILABLE: "unavailable", jsonrpc.BACKEND_TIMEOUT: "timeout"}
_DIALECT_NAME = {dialect: dialect.value for dialect in Dialect}  # the plain str the record holds
# Enum members read once: on Python 3.11 each ``Shape.X`` read costs about 0.1 µs, on every message.
_ANSWER_SHAPES = frozenset({jsonrpc.Shape.RESPONSE, jsonrpc.Shape.ERROR})
_NOTIFICATION = jsonrpc.Shape.NOTIFICATION

Identity = Callable[[View], dict[str, Any]]
# What MGP's members of the chain need for a tools/call (gateway/mgp/tool_facts.py), or None.
ToolFactsOf = Callable[[str, str, Mapping[str, Any] | None], dict[str, Any] | None]


class Router:
    def __init__(
        self,
        *,
        chain: PolicyChain,
        catalog: Catalog,
        subscriptions: Subscriptions,
        forwarder: Forwarder,
        client_messages: ClientMessages,
        levels: BackendLevels,
        mcpl: McplRelay,
        tool_facts: ToolFactsOf,
        mgp: MgpServer,
        mcpc: McpcCalls,
        sessions: SessionStore,
        identity: Identity,
        audit: AuditLog,
        metrics: Metrics,
        observer: ServerObserver | None = None,
        audit_tap: AuditTap | None = None,
    ) -> None:
        """``observer``: traces or log context around each client message; ``audit_tap``: the access
        log and span annotations after each audit record (gateway/telemetry/; None: off, one check)."""
        self._chain = chain
        self._catalog = catalog
        subscribe_calls = SubscribeCalls(catalog, subscriptions, forwarder)
        addressed = AddressedCalls(catalog, forwarder)
        self._forwarder = forwarder
        self._client = client_messages
        self._levels = levels
        self._mcpl = mcpl
        self._tool_facts = tool_facts
        self._mgp = mgp
        self._mcpc = mcpc
        self._sessions = sessions
        self._identity = identity
        self._audit = audit
        self._metrics = metrics
        self._observer = observer
        self._tap = audit_tap
        self._handlers: dict[str, Handler] = {
            "initialize": self._initialize,
            "ping": self._ping,
            "logging/setLevel": self._set_level,
            "tools/list": self._list,
            "prompts/list": self._list,
            "resources/list": self._list,
            "resources/templates/list": self._list,
            "tools/call": self._named_call,
            "prompts/get": self._named_call,
            "resources/read": addressed.uri_call,
            "resources/subscribe": subscribe_calls.subscribe,
            "resources/unsubscribe": subscribe_calls.unsubscribe,
            "completion/complete": addressed.complete,
            **dict.fromkeys(mcpl_adapter.HOST_REQUESTS, self._mcpl_request),
        }
        self._untouched: Handler = addressed.passthrough  # bound once: _handle's default, not a bound method per call

    def register(self, method: str, handler: Handler) -> None:
        """Let a dialect answer ``method`` itself (e.g. MGP's ``mgp/access/*``): the request still
        passes admission and audit; a core MCP method cannot be taken over."""
        if method in self._handlers:
            raise ValueError(f"{method} already has a handler")
        self._handlers[method] = handler

    # ---- the pipeline ------------------------------------------------------------------------

    def handle(
        self,
        session: ClientSession,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        channel: Channel,
        principal: Principal | None = None,
    ) -> Coroutine[Any, Any, dict[str, Any] | None]:
        """Handle one message from a client: a coroutine whose value is the response for a request,
        else None (callers await it at once).

        ``principal`` is who sends this message when its door authenticates every request
        (Streamable HTTP, legacy SSE POSTs); doors that authenticate once per connection omit it.

        Not itself a coroutine function: a plain request or notification (no draft alias, no
        observer) is handed its ``_handle`` coroutine directly, one coroutine layer less per message."""
        if self._observer is None and shape not in _ANSWER_SHAPES:
            method = message.get("method")
            if not (isinstance(method, str) and method in mcp_draft.ALIASES):
                session.touch()
                return self._handle(session, message, shape, channel, principal or session.principal)
        return self._handle_any(session, message, shape, channel, principal)

    async def _handle_any(
        self,
        session: ClientSession,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        channel: Channel,
        principal: Principal | None,
    ) -> dict[str, Any] | None:
        """:meth:`handle` for every message: answers, draft aliases, and everything when observed."""
        session.touch()
        if shape in _ANSWER_SHAPES:
            self._client.response(session, message)
            return None
        method = message.get("method")
        draft_ack: Any = None
        alias: str | None = None
        if isinstance(method, str) and method in mcp_draft.ALIASES:  # else nothing to normalize
            draft_ack = message.get("id") if method == "cancel" and "id" in message else None
            message, alias = mcp_draft.normalize(message)
            if alias is not None:
                if message.get("method", "").startswith("notifications/"):
                    shape = _NOTIFICATION
                if alias == "initialize":
                    session.codec = codecs.DRAFT
                if alias in mcp_draft.LOCAL_METHODS:
                    return self._draft_lifecycle(session, message, alias, channel)
        if self._observer is None:
            response = await self._handle(session, message, shape, channel, principal or session.principal)
        else:
            handled = self._handle(session, message, shape, channel, principal or session.principal)
            response = await self._observer.serve(session, message, handled)
        if draft_ack is not None:
            return jsonrpc.result(draft_ack, {})  # the draft acknowledges a cancel sent as a request
        if alias is not None and response is not None:
            response = mcp_draft.reshape_response(alias, response, self._identity(session.view)["serverInfo"])
        return response

    def _draft_lifecycle(
        self, session: ClientSession, message: dict[str, Any], alias: str, channel: Channel
    ) -> dict[str, Any] | None:
        """``shutdown`` is answered with null; ``exit`` ends the session (the draft's lifecycle).

        An ``exit`` sent as a request is answered too: its door delivers the answer after this
        returns, so the channel it goes on closes only once it holds it (``Channel.owe_answer``)."""
        answer = jsonrpc.result(message["id"], None) if "id" in message else None
        if alias == "exit":
            if answer is not None:
                channel.owe_answer(answer["id"])
            self._sessions.end(session)
        return answer

    async def _handle(
        self,
        session: ClientSession,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        channel: Channel,
        principal: Principal,
    ) -> dict[str, Any] | None:
        event = adapters.decode(message, shape, session.id, principal.name)  # annotate(mcp.decode(...)), one frame
        started = time.perf_counter()
        decision = self._chain.admit_now(event, principal)
        if not isinstance(decision, Decision):
            decision = await decision  # a member that must be awaited (policies/chain.py)
        guard = session.view.guard  # a virtual server's principals (policies/virtual_access.py)
        if guard is not None and decision.allowed:
            decision = guard.admits(principal) or decision
        if not decision.allowed:
            method = self._metric_method(event.method)
            self._metrics.observe_request(method, "gateway", decision.outcome, None)
            self.audit(session, event, decision.outcome, "gateway", started, decision.reason)
            if shape is _NOTIFICATION:
                log.info("dropped notification %s: %s", event.method, decision.reason)
                return None
            self._metrics.observe_server(method, str(decision.code), time.perf_counter() - started)
            refused = jsonrpc.error(event.rpc_id, decision.code, decision.reason, decision.data)
            return refused if session.mgp is None else self._mgp.own_error(refused)
        if shape is _NOTIFICATION:
            await self._client.notification(session, event)
            return None
        if not session.initialized and session.protocol_version is None and event.method not in ("initialize", "ping"):
            return jsonrpc.error(event.rpc_id, jsonrpc.INVALID_REQUEST, "Session not initialized")
        handler = self._handlers.get(event.method or "", self._untouched)
        backend = "gateway"
        decided = "allowed"
        reason = None
        error_type: str | None = None
        try:
            routed = await handler(Call(session, event, channel, principal))
            response, backend, error_type = routed.response, routed.backend, routed.error_type
            outcome = "error" if "error" in response else "ok"
        except PolicyDenied as denied:
            response = denied.response(event.rpc_id)
            decided = outcome = denied.decision.outcome
            backend, reason = denied.backend, denied.message
            if session.mgp is not None:
                response = self._mgp.own_error(response)  # §14: the gateway's own error, MGP's code
        except jsonrpc.RpcError as exc:
            response = jsonrpc.error_from(event.rpc_id, exc)
            outcome = _OUTCOME_OF_CODE.get(exc.code, "error")
            if session.mgp is not None:
                response = self._mgp.own_error(response)
        # One clock reading for the metrics and the record (its latency_ms, rounded as audit() does).
        seconds = time.perf_counter() - started
        called = event.method
        if error_type is None:  # not computed by the forwarder already (call.py: Routed)
            error_type = error_type_of(response)
        self._metrics.observe_call(
            called if called in _KNOWN_METHODS else "other", backend, outcome, error_type, seconds
        )
        # audit(), inline (every request passes here; its clock reading is the one above).
        latency_ms = round(seconds * 1000, 3)
        self._audit.record_request(
            decided,
            session.principal.name,
            _DIALECT_NAME[event.dialect],
            action_of(event),  # event.action, without the property's own call
            called,
            backend,
            session.id[:8],
            event.trace_id or event.id,
            latency_ms,
            reason,
            outcome,
        )
        if self._tap is not None:
            self._tap(session, event, decided, backend, latency_ms, reason, outcome)
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
        """One audit record per decision (the MGP adapter re-emits these as notifications/mgp.audit),
        and with it the access log line and the span's decision (``audit_tap``, when on)."""
        latency_ms = round((time.perf_counter() - started) * 1000, 3)
        self._audit.record_request(
            outcome,
            session.principal.name,
            _DIALECT_NAME[event.dialect],
            action_of(event),
            event.method,
            backend,
            session.id[:8],
            event.trace_id or event.id,
            latency_ms,
            reason,
            result,
        )
        if self._tap is not None:
            self._tap(session, event, outcome, backend, latency_ms, reason, result)

    @staticmethod
    def _metric_method(method: str | None) -> str:
        return method if method in _KNOWN_METHODS else "other"

    # ---- answered here -----------------------------------------------------------------------

    async def _initialize(self, call: Call) -> Routed:
        session = call.session
        if session.protocol_version is not None:
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "Session already initialized")
        params = call.params
        info = params.get("clientInfo")
        caps = params.get("capabilities")
        # Objects (InitializeRequest): another type is refused, never read as empty. Absent (or null, as
        # serializers of nil maps write it) stays lenient: hand-written legacy clients often leave them out.
        for key, value in (("capabilities", caps), ("clientInfo", info)):
            if value is not None and type(value) is not dict:
                raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"Invalid params: {key} must be an object")
        version = mcp_adapter.negotiate_version(params.get("protocolVersion"))
        session.protocol_version = version
        session.client_info = info or {}
        session.client_capabilities = caps or {}
        session.dialects = adapters.detect_dialects(params)
        await self._catalog.await_startup(session.view)
        result = self._identity(session.view)
        result["protocolVersion"] = version
        self._mcpl.on_initialize(session, params, result)
        self._mgp.on_initialize(session, params, result)
        return Routed(jsonrpc.result(call.rpc_id, result))

    async def _mcpl_request(self, call: Call) -> Routed:
        """MCPL host requests: the gateway is the MCPL server of its hosts (gateway/mcpl/)."""
        return Routed(await self._mcpl.on_host_request(call.session, call.event, call.channel))

    async def _ping(self, call: Call) -> Routed:
        return Routed(jsonrpc.result(call.rpc_id, {}))

    async def _set_level(self, call: Call) -> Routed:
        level = call.params.get("level")
        if level not in LOG_LEVELS:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS, f"Invalid log level {level!r}; one of {', '.join(LOG_LEVELS)}"
            )
        call.session.log_level = level
        await self._levels.sync(call.session.view.backends)
        return Routed(jsonrpc.result(call.rpc_id, {}))

    async def _list(self, call: Call) -> Routed:
        kind: ListKind = LIST_METHODS[call.event.method or ""]
        session, cursor = call.session, call.params.get("cursor")
        mgp = session.mgp is not None
        page = await self._catalog.page(session.view, kind, cursor, call.principal, mgp=mgp)
        if mgp and kind == "tools":
            merged = session.view.merged.get("tools")
            index = merged.index if merged is not None else {}
            page = self._mgp.list_tools(session, page, index.get, first_page=cursor is None)
        return Routed(jsonrpc.result(call.rpc_id, page))

    # ---- routed to a backend -----------------------------------------------------------------

    def _named_call(
        self,
        call: Call,
        resolved: tuple[str, str] | None = None,
        item: Any = None,
        fetched: bool = False,
        decision: Decision | None = None,
    ) -> Awaitable[Routed]:
        """A ``tools/call`` or ``prompts/get``: the forwarder's awaitable of its answer.

        Not a coroutine of its own (one await layer less on every call). Where it must wait (a name
        only the fetched list resolves, a tool definition to fetch, a chain member that must be
        awaited) a small coroutine waits and calls it again with what it waited for (``resolved``,
        ``item`` once ``fetched``, ``decision``): every step before those is pure or idempotent, so
        one sequence of checks serves both ways."""
        session, event = call.session, call.event
        tools = event.method == "tools/call"
        sent = event.params  # read once: the event's params are not replaced below but for MCPC ids
        name: Any = sent.get("name")  # after resolve_name: a non-empty str (the MCPC branch keeps it)
        if tools:
            if session.mgp is not None and self._mgp.is_kernel_call(session, name):  # only an MGP client's can be
                return self._mgp.call_kernel_tool(call)  # MGP §1.6: answered by the gateway itself
            facets = event.facets
            mcpc = facets.get("mcpc") if facets else None  # a plain call has no facets (adapters.annotate)
            if mcpc is not None:
                if mcpc.get("handshake"):
                    return _ready(self._mcpc.handshake(call, sent["name"]))  # the gateway is the MCPC server
                # A client's MCPC ids are the gateway's business (gateway/mcpc/calls.py): no policy
                # judges them as arguments and no backend ever sees them. (Again on a call made again:
                # the arguments are without them already, so the same.)
                arguments = mcpc_metadata.without_metadata(sent.get("arguments"))
                sent = {**sent, "arguments": arguments}
                event.payload = {**event.payload, "params": sent}
        if resolved is None:
            kind: ListKind = "tools" if tools else "prompts"
            resolved = self._catalog.resolve_name_now(session.view, kind, name)  # no coroutine when it can
            if resolved is None:
                return self._named_resolving(call, kind, name)
        backend, original = resolved
        if tools and original in mcpc_handshake.HANDSHAKE_TOOLS:
            return _ready(self._mcpc.handshake(call, original))  # a backend's own handshake tool, by its prefixed name
        guard = session.view.guard
        if guard is not None:  # a virtual server: the real tool or prompt is held to the capabilities too
            denied = guard.reaches(call.principal, event.method or "", backend, original)
            if denied is not None:
                raise PolicyDenied(denied, backend)
        # A new params object only when the name changes (a prefixing view): nothing downstream
        # modifies the params it is given (copy on write), so the client's own can go as they are.
        params = sent if original == name else {**sent, "name": original}
        if tools and self._chain.has_dispatch:
            if decision is None:
                if not fetched:
                    merged = session.view.merged.get("tools")
                    # resolve_name accepted it: name is a non-empty string.
                    item = merged.by_key.get(name) if merged is not None else None
                    if item is None:
                        # Never decide without the tool's listed definition (its security metadata feeds
                        # the MGP members): a call made before any list, or after lists were dropped, fetches it.
                        return self._named_fetching(call, resolved, name)
                # MCPL §7.7: what the scope check needs, only for calls that carry a scope.
                facts = self._mcpl.call_facts(session, backend, sent) if "scope" in params else None
                # MGP §3-§4: the tool's effective security metadata and its backend's grants.
                mgp_facts = self._tool_facts(backend, original, item)
                if mgp_facts is not None:
                    facts = {**facts, **mgp_facts} if facts else mgp_facts
                # Target made by tuple.__new__ (what its generated __new__ does, without that Python frame).
                target = tuple.__new__(Target, (backend, original, item, facts))
                decided = self._chain.dispatch_now(event, call.principal, target)
                if not isinstance(decided, Decision):
                    return self._named_deciding(call, resolved, item, decided)
                decision = decided
            if not decision.allowed:
                raise PolicyDenied(decision, backend, self._mgp.refusal_result(session, decision.data))
        if tools:
            mgp = session.mgp
            if mgp is not None and mgp.tool_session is not None:
                mgp.tool_session.touch(name)  # MGP §16.7: a used tool stays in context
            if "featureSet" in params:
                params = self._mcpl.backend_params(session, backend, params)
        return self._forwarder.forward(call, backend, params)

    async def _named_resolving(self, call: Call, kind: ListKind, name: Any) -> Routed:
        """:meth:`_named_call` for a name only the fetched list resolves."""
        resolved = await self._catalog.resolve_name(call.session.view, kind, name, call.principal)
        return await self._named_call(call, resolved)

    async def _named_fetching(self, call: Call, resolved: tuple[str, str], name: str) -> Routed:
        """:meth:`_named_call` for a tool whose listed definition is not at hand."""
        merged = await self._catalog.merged(call.session.view, "tools", call.principal)
        return await self._named_call(call, resolved, merged.by_key.get(name), True)

    async def _named_deciding(
        self, call: Call, resolved: tuple[str, str], item: Any, decided: Awaitable[Decision]
    ) -> Routed:
        """:meth:`_named_call` once a dispatch member that must be awaited has decided."""
        return await self._named_call(call, resolved, item, True, await decided)


async def _ready(routed: Routed) -> Routed:
    """An answer made without waiting, as the awaitable a handler returns (rare: MCPC handshakes)."""
    return routed
