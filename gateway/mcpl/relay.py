"""The MCPL relay: to each host one MCPL server merging every MCPL backend; to each backend, one host.

Backends are shared by every session (one connection each, ADR 0002), so a backend is told the
*union* of what its MCPL host sessions enabled (intersected with what the operator allows each
principal), and every message it initiates is checked and delivered per session: a push reaches
only the sessions that have its feature set enabled. Decisions are made by ``policies.feature_sets``
and ``policies.scopes``; this module gathers their inputs, routes, and records every decision in the
audit stream. Every request a backend sends gets an answer, an error when no host can give one.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.events import Event
from gateway.federation import View
from gateway.mcpl.state import BackendMcpl, McplSession, exposed, resolve
from gateway.routing.call import CallSink
from gateway.sessions import ClientSession
from policies.feature_sets import OperatorRules
from policies.globs import is_literal
from policies.scopes import SCOPES_POLICY, ScopedCallFacts, ScopeRules, for_feature_set, merge_for_backend, to_wire

if TYPE_CHECKING:
    from gateway.core import Gateway
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

_MAX_CONVERSATIONS = 4096  # conversationId -> session pins kept (oldest forgotten first)
MAX_SERVING_PER_BACKEND = 256  # MCPL requests of one backend being answered at once
MAX_HOST_SCOPES = 1024  # scope entries (by feature-set name) one host session may configure
NOT_NEGOTIATED = "MCPL was not negotiated on this session (initialize without capabilities.experimental.mcpl)"


class McplRelay:
    def __init__(self, gateway: Gateway) -> None:
        from gateway.mcpl.channels import ChannelRouter
        from gateway.mcpl.hooks import HookFanout
        from gateway.mcpl.server_requests import ServerRequests

        self._gw = gateway
        self.backends: dict[str, BackendMcpl] = {}
        self._sent: dict[str, dict[str, Any]] = {}
        self.in_hook: Counter[str] = Counter()
        self._serving: Counter[str] = Counter()
        self._conversations: OrderedDict[str, str] = OrderedDict()
        self._chunk_routes: dict[tuple[str, str], tuple[BackendConnection, Any]] = {}
        self.last_model: dict[str, Any] | None = None
        self._operator_cache: dict[str | None, OperatorRules] = {}
        self._effective: dict[tuple[str, str], frozenset[str]] = {}
        self.hooks = HookFanout(self)
        self.requests = ServerRequests(self)
        self.channels = ChannelRouter(self)

    @property
    def config(self) -> Any:
        return self._gw.config.mcpl

    @property
    def gateway(self) -> Gateway:
        return self._gw

    # ================================================================== who, what, which names

    def backend(self, name: str) -> BackendMcpl:
        return self.backends.get(name) or BackendMcpl({})

    def is_mcpl(self, name: str) -> bool:
        found = self.backends.get(name)
        return found is not None and bool(found.caps)

    def sessions_of(self, backend: str) -> list[ClientSession]:
        """MCPL host sessions whose view includes ``backend``."""
        return [s for s in self._gw.sessions if not s.closed and s.mcpl is not None and backend in s.view.backends]

    def operator_rules(self, principal: str | None) -> OperatorRules:
        """What the operator lets ``principal``'s hosts enable (None: the default for any principal)."""
        rules = self._operator_cache.get(principal)
        if rules is None:
            own = self._gw.principals.get(principal) if principal is not None else None  # the live registry
            chosen = own.mcpl.feature_sets if own is not None and own.mcpl.feature_sets is not None else None
            chosen = chosen or self.config.feature_sets
            rules = self._operator_cache[principal] = OperatorRules(chosen.allow, chosen.deny)
        return rules

    def operator_scopes(self, principal: str, backend: str, feature_set: str) -> ScopeRules:
        own = self._gw.principals.get(principal)
        table = own.mcpl.scopes if own is not None and own.mcpl.scopes is not None else self.config.scopes
        return for_feature_set(table.items(), f"{backend}.{feature_set}", feature_set)

    def host_scopes(self, session: ClientSession, backend: str, feature_set: str) -> ScopeRules:
        if session.mcpl is None:
            return ScopeRules()  # a plain MCP client has no host patterns; the operator's still apply
        name = exposed(session.view, backend, feature_set)
        found = session.mcpl.scopes.get(name)
        if found is not None:
            return found
        # Keys may also be feature-set patterns ("files.*"): their patterns add up.
        return for_feature_set(((k, r) for k, r in session.mcpl.scopes.items() if not is_literal(k)), name)

    def effective(self, session: ClientSession, backend: str) -> frozenset[str]:
        """The feature sets of ``backend`` enabled for ``session``: host enabled ∩ operator allows."""
        if session.mcpl is None:
            return frozenset()
        key = (session.id, backend)
        found = self._effective.get(key)
        if found is None:
            # Read on every message a backend initiates and every hook, for every session; written
            # only when a host, the operator or a backend changes something (see forget()).
            rules = self.operator_rules(session.principal.name)
            selection = session.mcpl.selection
            found = self._effective[key] = frozenset(
                name
                for name in self.backend(backend).feature_sets
                if selection.is_enabled(exposed(session.view, backend, name)) and rules.allows(backend, name)
            )
        return found

    def forget(self) -> None:
        """Drop every cached effective set: a selection, an operator rule or a declaration changed."""
        self._effective.clear()

    def can_enable(self, backend: str, feature_set: str, sessions: list[ClientSession] | None = None) -> bool:
        """Whether some host of ``backend`` (``sessions``, default: all of them) could enable it: the
        operator allows it that host's principal, or any principal when there is no host."""
        if sessions is None:
            sessions = self.sessions_of(backend)
        if not sessions:
            return self.operator_rules(None).allows(backend, feature_set)
        return any(self.operator_rules(s.principal.name).allows(backend, feature_set) for s in sessions)

    def declared_for(self, view: View) -> dict[str, dict[str, Any]]:
        """Every feature set of the view's MCPL backends under the names its hosts see."""
        out: dict[str, dict[str, Any]] = {}
        for name in view.backends:
            for fs, decl in self.backend(name).feature_sets.items():
                out.setdefault(exposed(view, name, fs), decl)
        return out

    def resolve_feature_set(self, view: View, name: str) -> list[tuple[str, str]]:
        return resolve(view, name, {b: self.backend(b).feature_sets for b in view.backends})

    def order(self, view: View) -> list[str]:
        """Backends in hook order: ``mcpl.hook_order`` first, then configuration order (stable)."""
        first = [b for b in self.config.hook_order if b in view.backends]
        return first + [b for b in view.backends if b not in first]

    # ============================================================================== negotiation

    def host_capabilities(self, view: View) -> dict[str, Any]:
        caps = [self.backend(b).caps for b in view.backends if self.is_mcpl(b)]
        return mcpl.host_capabilities(self.declared_for(view), caps)

    def on_initialize(self, session: ClientSession, params: dict[str, Any], result: dict[str, Any]) -> None:
        """An MCPL host's initialize: remember it and show it the merged MCPL capabilities."""
        host = mcpl.capabilities(params)
        if host is None or session.modern_client:
            return
        session.mcpl = McplSession(host)
        caps = result.setdefault("capabilities", {})
        caps.setdefault("experimental", {})["mcpl"] = self.host_capabilities(session.view)

    def session_ended(self, session: ClientSession) -> None:
        if session.mcpl is None:
            return
        for key in [k for k in self._chunk_routes if k[0] == session.id]:
            del self._chunk_routes[key]
        for key in [k for k in self._effective if k[0] == session.id]:
            del self._effective[key]
        self.sync_view(session.view)

    def principals_changed(self) -> None:
        self._operator_cache.clear()
        self.forget()
        for name in list(self.backends):
            self.sync(name)

    # ================================================================ configuration to backends

    def backend_config(self, backend: str) -> dict[str, Any]:
        """The ``featureSets/update`` a backend shared by several sessions is sent: the union of what
        they enabled, and for each enabled set scope patterns every one of them accepts."""
        declared = self.backend(backend).feature_sets
        per_session = [(s, self.effective(s, backend)) for s in self.sessions_of(backend)]
        enabled = sorted(set().union(*(e for _, e in per_session)) if per_session else set())
        scopes: dict[str, Any] = {}
        for fs in enabled:
            rules = []
            for session, eff in per_session:
                if fs in eff:
                    host = self.host_scopes(session, backend, fs)
                    operator = self.operator_scopes(session.principal.name, backend, fs)
                    rules.append(ScopeRules(host.whitelist + operator.whitelist, operator.blacklist + host.blacklist))
            merged = merge_for_backend(rules)
            if merged.whitelist or merged.blacklist:
                scopes[fs] = to_wire(merged)
        params: dict[str, Any] = {"enabled": enabled, "disabled": sorted(set(declared) - set(enabled))}
        if scopes:
            params["scopes"] = scopes
        return params

    def sync(self, backend: str, force: bool = False) -> None:
        """Send ``featureSets/update`` to a connected MCPL backend when its configuration changed."""
        conn = self._gw.connections.get(backend)
        if conn is None or conn.state != "ready" or not self.is_mcpl(backend):
            return
        params = self.backend_config(backend)
        if not force and self._sent.get(backend) == params:
            return
        self._sent[backend] = params
        self.audit(
            "configured",
            None,
            backend,
            "featureSets/update",
            enabled=params["enabled"],
            disabled=params["disabled"],
        )
        if self.backend(backend).version.startswith("0.4"):
            conn.spawn(conn.notify("featureSets/update", params))
        else:
            conn.spawn(self._update_request(conn, params))  # 0.5 made it a request with a receipt

    async def _update_request(self, conn: BackendConnection, params: dict[str, Any]) -> None:
        try:
            response = await conn.request("featureSets/update", params, timeout=10.0)
        except jsonrpc.RpcError as exc:
            log.info("backend %s: featureSets/update failed: %s", conn.name, exc.message)
            return
        if "error" in response:
            log.info("backend %s refused featureSets/update: %s", conn.name, response["error"])

    def sync_view(self, view: View) -> None:
        for name in view.backends:
            self.sync(name)

    def backend_connected(self, conn: BackendConnection) -> None:
        caps = mcpl.capabilities(conn.init_result) or {}
        old = self.backends.get(conn.name)
        fresh = BackendMcpl(caps)
        self.backends[conn.name] = fresh
        self.forget()
        if old is not None:
            if old.channels:
                self.channels.announce(conn.name, removed=list(old.channels))
            added = {n: d for n, d in fresh.feature_sets.items() if old.feature_sets.get(n) != d}
            removed = [n for n in old.feature_sets if n not in fresh.feature_sets]
            if added or removed:
                self._announce_feature_sets(conn.name, added, removed)
        self._sent.pop(conn.name, None)
        if caps:
            self.sync(conn.name, force=True)

    def backend_disconnected(self, conn: BackendConnection) -> None:
        found = self.backends.get(conn.name)
        if found is not None and found.channels:
            gone = list(found.channels)
            found.channels.clear()
            self.channels.announce(conn.name, removed=gone)

    def _announce_feature_sets(self, backend: str, added: dict[str, Any], removed: list[str]) -> None:
        for session in self.sessions_of(backend):
            params: dict[str, Any] = {}
            if added:
                params["added"] = {exposed(session.view, backend, n): d for n, d in added.items()}
            if removed:
                params["removed"] = [exposed(session.view, backend, n) for n in removed]
            session.standalone.push(jsonrpc.notification("featureSets/changed", params))

    # ============================================================================ host -> relay

    async def on_host_notification(self, session: ClientSession, event: Event) -> bool:
        """Handle an MCPL notification from a host; False when it is not one."""
        method = event.method or ""
        if method not in mcpl.HOST_NOTIFICATIONS:
            return False
        if session.mcpl is None:
            log.info("session %s: dropped %s: %s", session.id[:8], method, NOT_NEGOTIATED)
            return True
        params = event.params
        if method == "featureSets/update":
            self.apply_update(session, params)
        elif method == "inference/chunk":
            self._chunk(session, params)
        elif method == "context/afterInference":
            self.hooks.after_notification(session, params)
        elif method == "channels/publish":
            await self.channels.publish(session, params, False)
        else:
            self.channels.observe(session, method, params)
        return True

    async def on_host_request(self, session: ClientSession, event: Event, channel: Channel) -> dict[str, Any]:
        if session.mcpl is None:
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {event.method} ({NOT_NEGOTIATED})")
        method, params, rpc_id = event.method or "", event.params, event.rpc_id
        if method == "featureSets/update":
            self.apply_update(session, params)
            return jsonrpc.result(rpc_id, self.receipt(session))
        if method == "context/beforeInference":
            return jsonrpc.result(rpc_id, await self.hooks.before(session, params))
        if method == "context/afterInference":
            return jsonrpc.result(rpc_id, await self.hooks.after(session, params))
        if method == "state/rollback":
            return await self._rollback(session, event)
        return jsonrpc.result(rpc_id, await self.channels.host_request(session, method, params))

    def apply_update(self, session: ClientSession, params: dict[str, Any]) -> None:
        assert session.mcpl is not None
        enabled, disabled, scopes = mcpl.update_params(params)
        session.mcpl.selection.apply(enabled, disabled)
        self.forget()
        for name, rules in scopes.items():
            if isinstance(name, str) and (name in session.mcpl.scopes or len(session.mcpl.scopes) < MAX_HOST_SCOPES):
                session.mcpl.scopes[name] = ScopeRules.from_wire(rules)
        self.audit("configured", session, None, "featureSets/update", enabled=enabled, disabled=disabled)
        self.sync_view(session.view)

    def snapshot(self) -> dict[str, Any]:
        """What the admin API shows: each MCPL backend's declaration and what it was last told, and
        each MCPL host session's effective feature sets."""
        backends = {
            name: {
                "version": found.version,
                "featureSets": sorted(found.feature_sets),
                "channels": list(found.channels),
                "told": self._sent.get(name),
                "inHook": self.in_hook.get(name, 0),
            }
            for name, found in self.backends.items()
            if found.caps
        }
        sessions = [
            {
                "session": s.id[:8],
                "principal": s.principal.name,
                "view": s.view.name,
                "enabled": self.receipt(s)["enabled"],
                "approvals": len(s.mcpl.approvals) if s.mcpl is not None else 0,
            }
            for s in self._gw.sessions
            if not s.closed and s.mcpl is not None
        ]
        return {"backends": backends, "sessions": sessions}

    def receipt(self, session: ClientSession) -> dict[str, Any]:
        """What a 0.5 host's ``featureSets/update`` request is answered: the effective result."""
        enabled = sorted(
            exposed(session.view, b, fs) for b in session.view.backends for fs in self.effective(session, b)
        )
        return {"enabled": enabled, "disabled": sorted(set(self.declared_for(session.view)) - set(enabled))}

    def _chunk(self, session: ClientSession, params: dict[str, Any]) -> None:
        route = self._chunk_routes.get((session.id, str(params.get("requestId"))))
        if route is None:
            log.debug("session %s: inference/chunk for no pending request", session.id[:8])
            return
        conn, upstream_id = route
        conn.spawn(conn.notify("inference/chunk", {**params, "requestId": upstream_id}))

    async def _rollback(self, session: ClientSession, event: Event) -> dict[str, Any]:
        """``state/rollback`` goes to the backend owning its feature set, in that backend's name; with
        no feature set named, to the view's one MCPL backend if there is exactly one."""
        params = event.params
        name = params.get("featureSet")
        if isinstance(name, str):
            targets = self.resolve_feature_set(session.view, name)
            if not targets:
                raise jsonrpc.RpcError(mcpl.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
            backend, own = targets[0]
            forward = {**params, "featureSet": own}
        else:
            mcpl_backends = [b for b in session.view.backends if self.is_mcpl(b)]
            if len(mcpl_backends) != 1:
                raise jsonrpc.RpcError(mcpl.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
            backend, own, forward = mcpl_backends[0], None, params
        response = await self.call_backend(backend, "state/rollback", forward)
        self.audit("relayed", session, backend, "state/rollback", feature_set=own)
        return {**response, "id": event.rpc_id}

    async def call_backend(
        self, backend: str, method: str, params: dict[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """A request to one backend; its answer message (result or error) as it came."""
        conn = self._gw.connections[backend]
        if conn.state != "ready":
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_UNAVAILABLE, f"backend {backend} is unavailable: {conn.last_error or conn.state}"
            )
        response = await conn.request(method, params, timeout=timeout)
        return {k: v for k, v in response.items() if k != "id"}

    def backend_params(self, session: ClientSession, backend: str, params: dict[str, Any]) -> dict[str, Any]:
        """A host's call params with a ``featureSet`` it named in its own words put in the backend's."""
        named = params.get("featureSet")
        if isinstance(named, str):
            for b, own in self.resolve_feature_set(session.view, named):
                if b == backend:
                    return {**params, "featureSet": own}
        return params

    def call_facts(self, session: ClientSession, backend: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """What the chain's scope check (``policies.scopes.ScopePolicy``) needs for a scoped
        ``tools/call``: the feature sets that may govern the tool (the one the host names, else every
        scoped ``tools`` set of the backend) with the host's and the operator's patterns for each."""
        if not self.is_mcpl(backend):
            return None
        scope = params.get("scope")
        label = scope.get("label") if isinstance(scope, dict) else None
        declared = self.backend(backend).feature_sets
        named = params.get("featureSet")
        named_unknown = None
        if isinstance(named, str):
            candidates = [fs for b, fs in self.resolve_feature_set(session.view, named) if b == backend]
            named_unknown = None if candidates else named
        else:
            candidates = [n for n, d in declared.items() if d.get("scoped") and mcpl.uses(d, mcpl.USES_TOOLS)]
        enabled = self.effective(session, backend)
        facts = ScopedCallFacts(
            label=label,
            candidates=tuple(
                (
                    exposed(session.view, backend, fs),
                    self.host_scopes(session, backend, fs),
                    self.operator_scopes(session.principal.name, backend, fs),
                    fs in enabled,
                )
                for fs in candidates
            ),
            needs_enabled=session.mcpl is not None,
            can_enable=bool(candidates) and self.can_enable(backend, candidates[0]),
            named_unknown=named_unknown,
        )
        return {SCOPES_POLICY: facts}

    # ========================================================================= backend -> relay

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> bool:
        method = message.get("method")
        if method not in mcpl.SERVER_REQUESTS:
            return False
        if self._serving[conn.name] >= MAX_SERVING_PER_BACKEND:
            # Each of these may wait on a host for a while: a flooding backend is refused, not queued.
            reason = f"too many MCPL requests from this backend in flight (limit {MAX_SERVING_PER_BACKEND})"
            self.audit("refused", None, conn.name, str(method), reason=reason)
            conn.spawn(conn.send(jsonrpc.error(message.get("id"), jsonrpc.SESSION_OVERLOADED, reason)))
            return True
        self._serving[conn.name] += 1
        conn.spawn(self._answer(conn, message, owner))
        return True

    def on_server_notification(self, conn: BackendConnection, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if method not in mcpl.SERVER_NOTIFICATIONS:
            return False
        params = p if isinstance(p := message.get("params"), dict) else {}
        if method == "featureSets/changed":
            added, removed = self.backend(conn.name).changed(params.get("added"), params.get("removed"))
            self.forget()
            found = self.backend(conn.name)
            if added or removed:
                self._announce_feature_sets(conn.name, {n: found.feature_sets[n] for n in added}, removed)
                self.sync(conn.name)
        else:
            self.channels.server_changed(conn.name, params)
        return True

    async def _answer(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        """Every request a backend sends is answered: with the result, or with an error."""
        try:
            await self._answer_one(conn, message, owner)
        finally:
            self._serving[conn.name] -= 1

    async def _answer_one(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        method = message["method"]
        params = p if isinstance(p := message.get("params"), dict) else {}
        result: object
        try:
            if method == "push/event":
                result = await self.requests.push(conn, params)
            elif method == "inference/request":
                result = await self.requests.inference(conn, message.get("id"), params, owner)
            elif method == "model/info":
                result = await self.requests.model_info(conn, owner)
            elif method == "scope/elevate":
                result = await self.requests.elevate(conn, params, owner)
            else:
                result = await self.channels.server_request(conn, method, params, owner)
            reply = jsonrpc.result(message.get("id"), result)
        except jsonrpc.RpcError as exc:
            reply = jsonrpc.error_from(message.get("id"), exc)
        except Exception as exc:  # the backend must still get an answer
            log.exception("backend %s: %s failed in the gateway", conn.name, method)
            reply = jsonrpc.error(message.get("id"), jsonrpc.INTERNAL_ERROR, f"gateway error: {type(exc).__name__}")
        await conn.send(reply)

    def route_chunks(self, session: ClientSession, gid: str, conn: BackendConnection, upstream_id: Any) -> None:
        """``inference/chunk`` from ``session`` for request ``gid`` goes to ``conn`` as ``upstream_id``."""
        self._chunk_routes[(session.id, gid)] = (conn, upstream_id)

    def drop_chunk_routes(self, session: ClientSession, conn: BackendConnection, upstream_id: Any) -> None:
        for key in [k for k, v in self._chunk_routes.items() if k[0] == session.id and v == (conn, upstream_id)]:
            del self._chunk_routes[key]

    def pinned(self, conversation: str) -> str | None:
        """The session id a conversation was last seen in."""
        return self._conversations.get(conversation)

    def pin_conversation(self, conversation: str, session: ClientSession) -> None:
        self._conversations[conversation] = session.id
        self._conversations.move_to_end(conversation)
        while len(self._conversations) > _MAX_CONVERSATIONS:
            self._conversations.popitem(last=False)

    # ================================================================================ plumbing

    def pick(self, candidates: list[ClientSession], owner: Any) -> ClientSession | None:
        """The session whose call the backend is serving, if it qualifies, else the most recently active."""
        # The owners of forwarded calls are CallSinks; a subscriptions/listen stream's has no session.
        if isinstance(owner, CallSink) and owner.session in candidates:
            return owner.session
        live = [s for s in candidates if not s.closed]
        return max(live, key=lambda s: s.last_seen) if live else None

    async def ask_host(
        self,
        session: ClientSession,
        method: str,
        params: dict[str, Any],
        timeout: float | None = None,
        on_id: Callable[[str], None] | None = None,
        conn: BackendConnection | None = None,
        owner: Any = None,
    ) -> Any:
        """Send one request to a host session and return its result (RpcError for an error answer).

        It travels on the stream of the host's call the backend is serving when there is one (an
        HTTP host may have no standalone stream open), else on the session's own stream.
        """
        channel = self._channel_for(session, conn, owner)
        return await session.ask(channel, method, params, timeout or self.config.host_request_timeout_s, on_id)

    @staticmethod
    def _channel_for(session: ClientSession, conn: BackendConnection | None, owner: Any) -> Channel:
        if isinstance(owner, CallSink) and owner.session is session:
            return owner.channel
        if conn is not None:
            # Carriers without relation (stdio, WebSocket): the newest call of this session in flight there.
            for other in reversed(conn.owners_inflight()):
                if isinstance(other, CallSink) and other.session is session:
                    return other.channel
        return session.standalone

    def audit(
        self,
        outcome: str,
        session: ClientSession | None,
        backend: str | None,
        method: str,
        feature_set: str | None = None,
        **fields: Any,
    ) -> None:
        """One audit record (and one counted decision) per MCPL decision."""
        self._gw.metrics.mcpl_decisions.labels(method, outcome).inc()
        self._gw.audit.record(
            outcome,
            dialect="mcpl",
            action=f"mcpl/{method}",
            method=method,
            principal=session.principal.name if session is not None else None,
            session=session.id[:8] if session is not None else None,
            backend=backend,
            feature_set=feature_set,
            **fields,
        )
