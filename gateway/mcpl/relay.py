"""The MCPL relay: to each host one MCPL server merging every MCPL backend; to each backend, one host.

Backends are shared by every session (one connection each, ADR 0002), so a backend is told the
*union* of what its MCPL host sessions enabled (intersected with what the operator allows each
principal), and every message it initiates is checked and delivered per session: a push reaches
only the sessions that have its feature set enabled. Decisions are made by the policy chain
(``policies.feature_sets``, ``policies.scopes``, ``policies.scope_elevation``,
``policies.channel_access``, ``policies.hook_answers``, ``policies.hook_inference``); this module
and its parts (state.py, directory.py, plumbing.py, server_requests.py, channels.py, hooks.py,
mcpc_push.py) gather their inputs as facts, route, and record every decision in the audit stream.
Every request a backend sends gets an answer, an error when no host can give one. An MCPC backend's
messages reach hosts as pushes under a feature set ``mcpc`` the gateway declares for it (mcpc_push.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from adapters import mcpl
from gateway import jsonrpc
from gateway.audit import AuditLog
from gateway.bus import Bus
from gateway.channels import Channel
from gateway.events import Event
from gateway.federation import View
from gateway.mcpl.channels import ChannelRouter
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.hooks import HookFanout
from gateway.mcpl.mcpc_push import McpcPush
from gateway.mcpl.plumbing import McplAudit, Peers, announce_feature_sets
from gateway.mcpl.server_requests import ServerRequests
from gateway.mcpl.state import BackendMcpl, McplSession, RelayState, exposed
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from policies.auth import PrincipalRegistry
from policies.chain import PolicyChain
from policies.load import LoadPolicy
from policies.scopes import SCOPES_POLICY, ScopedCallFacts, ScopeRules, merge_for_backend, to_wire

if TYPE_CHECKING:
    from gateway.config import Mcpl
    from gateway.telemetry.observe import Tracing
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

MAX_HOST_SCOPES = 1024  # scope entries (by feature-set name) one host session may configure
NOT_NEGOTIATED = "MCPL was not negotiated on this session (initialize without capabilities.experimental.mcpl)"


class McplRelay:
    """The MCPL server of every host and the MCPL host of every backend.

    It gets what it uses: the live ``mcpl`` config section (replaced through ``reconfigure``), the
    session store, the backend connections (the gateway's one mapping, filled after this is made),
    the principal registry (operator rules per principal), the policy chain, the audit log, metrics
    and the bus (push de-duplication across replicas). Its parts share one ``RelayState``.
    """

    def __init__(
        self,
        *,
        config: Mcpl,
        sessions: Iterable[ClientSession],
        connections: Mapping[str, BackendConnection],
        principals: PrincipalRegistry,
        chain: PolicyChain,
        audit: AuditLog,
        metrics: Metrics,
        bus: Bus,
        load: LoadPolicy,
        tracing: Tracing | None = None,
    ) -> None:
        state = self._state = RelayState(config)
        self._load = load
        self._connections = connections
        self._dir = McplDirectory(state, sessions, principals)
        self._peers = Peers(state, connections, tracing)  # tracing: a CLIENT span per backend request
        self._audit = McplAudit(audit, metrics)
        self._requests = ServerRequests(state, self._dir, self._peers, chain, self._audit, bus, metrics)
        self._channels = ChannelRouter(state, self._dir, self._peers, chain, self._audit, self._requests.check_tag)
        self._hooks = HookFanout(state, self._dir, self._peers, chain, self._audit, metrics, self._channels.params_for)
        self._mcpc = McpcPush(state, self._dir, self._peers, chain, self._audit, metrics)

    def reconfigure(self, config: Mcpl) -> None:
        """The ``mcpl`` section or the principals changed (a reload, the admin API): what the operator
        allows is computed afresh, and backends are told at once."""
        self._state.config = config
        self._state.operator_cache.clear()
        self._state.forget()
        for name in list(self._state.backends):
            self.sync(name)

    # ============================================================================== negotiation

    def host_capabilities(self, view: View) -> dict[str, Any]:
        caps = [self._state.backend(b).caps for b in self._dir.mcpl_backends(view)]
        if any(self._state.gateway_declared(b) for b in view.backends):
            caps.append({"pushEvents": True})  # the gateway's own sets (mcpc_push.py) only push events
        return mcpl.host_capabilities(self._dir.declared_for(view), caps)

    def on_initialize(self, session: ClientSession, params: dict[str, Any], result: dict[str, Any]) -> None:
        """An MCPL host's initialize: remember it and show it the merged MCPL capabilities."""
        host = mcpl.capabilities(params)
        if host is None or session.codec.modern:
            return
        session.mcpl = McplSession(host)
        caps = result.setdefault("capabilities", {})
        caps.setdefault("experimental", {})["mcpl"] = self.host_capabilities(session.view)

    def session_ended(self, session: ClientSession) -> None:
        if session.mcpl is None:
            return
        self._state.session_ended(session.id)
        self.sync_view(session.view)

    # ================================================================ configuration to backends

    def backend_config(self, backend: str) -> dict[str, Any]:
        """The ``featureSets/update`` a backend shared by several sessions is sent: the union of what
        they enabled, and for each enabled set scope patterns every one of them accepts."""
        directory = self._dir
        declared = self._state.backend(backend).feature_sets
        per_session = [(s, directory.effective(s, backend)) for s in directory.sessions_of(backend)]
        enabled = sorted(set().union(*(e for _, e in per_session)) if per_session else set())
        scopes: dict[str, Any] = {}
        for fs in enabled:
            rules = []
            for session, eff in per_session:
                if fs in eff:
                    host = directory.host_scopes(session, backend, fs)
                    operator = directory.operator_scopes(session.principal.name, backend, fs)
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
        conn = self._connections.get(backend)
        if conn is None or conn.state != "ready" or not self._state.is_mcpl(backend):
            return
        params = self.backend_config(backend)
        sent = self._state.sent
        if not force and sent.get(backend) == params:
            return
        sent[backend] = params
        self._audit(
            "configured",
            None,
            backend,
            "featureSets/update",
            enabled=params["enabled"],
            disabled=params["disabled"],
        )
        if self._state.backend(backend).version.startswith("0.4"):
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
        state = self._state
        old = state.backends.get(conn.name)
        fresh = BackendMcpl(caps)
        state.backends[conn.name] = fresh
        state.forget()
        if old is not None:
            if old.channels:
                self._channels.announce(conn.name, removed=list(old.channels))
            added = {n: d for n, d in fresh.feature_sets.items() if old.feature_sets.get(n) != d}
            removed = [n for n in old.feature_sets if n not in fresh.feature_sets]
            if added or removed:
                self._announce_feature_sets(conn.name, added, removed)
        state.sent.pop(conn.name, None)
        if caps:
            self.sync(conn.name, force=True)

    def backend_disconnected(self, conn: BackendConnection) -> None:
        found = self._state.backends.get(conn.name)
        if found is not None and found.channels:
            gone = list(found.channels)
            found.channels.clear()
            self._channels.announce(conn.name, removed=gone)

    def _announce_feature_sets(self, backend: str, added: dict[str, Any], removed: list[str]) -> None:
        announce_feature_sets(self._dir.sessions_of(backend), backend, added, removed)

    # ==================================================================== MCPC (mcpc_push.py)

    def mcpc_backend(self, backend: str, speaks: bool) -> None:
        """Whether ``backend`` speaks MCPC: while it does, hosts see (and may enable) its ``mcpc``
        feature set, which the backend itself never hears of."""
        self._mcpc.declare(backend, speaks)

    async def push_mcpc(
        self, backend: str, event_id: str, payload: dict[str, Any], sessions: Iterable[ClientSession]
    ) -> int:
        """One MCPC message as ``push/event`` to those of ``sessions`` with that set enabled (and
        allowed); how many hosts accepted it. Never raises."""
        return await self._mcpc.push(backend, event_id, payload, sessions)

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
            self._hooks.after_notification(session, params)
        elif method == "channels/publish":
            await self._channels.publish(session, params, False)
        else:
            await self._channels.observe(session, method, params)
        return True

    async def on_host_request(self, session: ClientSession, event: Event, channel: Channel) -> dict[str, Any]:
        if session.mcpl is None:
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, f"Method not found: {event.method} ({NOT_NEGOTIATED})")
        method, params, rpc_id = event.method or "", event.params, event.rpc_id
        if method == "featureSets/update":
            self.apply_update(session, params)
            return jsonrpc.result(rpc_id, self.receipt(session))
        if method == "context/beforeInference":
            return jsonrpc.result(rpc_id, await self._hooks.before(session, params))
        if method == "context/afterInference":
            return jsonrpc.result(rpc_id, await self._hooks.after(session, params))
        if method == "state/rollback":
            return await self._rollback(session, event)
        return jsonrpc.result(rpc_id, await self._channels.host_request(session, method, params))

    def selection_changed(self, session: ClientSession) -> None:
        """Another replica recorded this host's feature-set choices (gateway/replicas/): backends
        here are told the new union."""
        self._state.forget()
        self.sync_view(session.view)

    def apply_update(self, session: ClientSession, params: dict[str, Any]) -> None:
        assert session.mcpl is not None
        enabled, disabled, scopes = mcpl.update_params(params)
        session.mcpl.selection.apply(enabled, disabled)
        self._state.forget()
        for name, rules in scopes.items():
            if isinstance(name, str) and (name in session.mcpl.scopes or len(session.mcpl.scopes) < MAX_HOST_SCOPES):
                session.mcpl.scopes[name] = ScopeRules.from_wire(rules)
        self._audit("configured", session, None, "featureSets/update", enabled=enabled, disabled=disabled)
        self.sync_view(session.view)

    def snapshot(self) -> dict[str, Any]:
        """What the admin API shows: each MCPL backend's declaration and what it was last told, and
        each MCPL host session's effective feature sets."""
        state = self._state
        backends = {
            name: {
                "version": found.version,
                "featureSets": sorted(found.feature_sets),
                "channels": list(found.channels),
                "told": state.sent.get(name),
                "inHook": state.in_hook.get(name, 0),
            }
            for name, found in state.backends.items()
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
            for s in self._dir.host_sessions()
        ]
        return {"backends": backends, "sessions": sessions}

    def receipt(self, session: ClientSession) -> dict[str, Any]:
        """What a 0.5 host's ``featureSets/update`` request is answered: the effective result."""
        directory = self._dir
        enabled = sorted(
            {
                exposed(session.view, b, fs)
                for b in session.view.backends
                for fs in directory.effective(session, b) | directory.gateway_enabled(session, b)
            }
        )
        return {"enabled": enabled, "disabled": sorted(set(self._dir.declared_for(session.view)) - set(enabled))}

    def _chunk(self, session: ClientSession, params: dict[str, Any]) -> None:
        route = self._state.chunk_routes.get((session.id, str(params.get("requestId"))))
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
            targets = self._dir.resolve_feature_set(session.view, name)
            if not targets:
                raise jsonrpc.RpcError(mcpl.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
            backend, own = targets[0]
            forward = {**params, "featureSet": own}
        else:
            mcpl_backends = self._dir.mcpl_backends(session.view)
            if len(mcpl_backends) != 1:
                raise jsonrpc.RpcError(mcpl.UNKNOWN_FEATURE_SET, "Unknown feature set", {"featureSet": name})
            backend, own, forward = mcpl_backends[0], None, params
        response = await self._peers.call_backend(backend, "state/rollback", forward)
        self._audit("relayed", session, backend, "state/rollback", feature_set=own)
        return {**response, "id": event.rpc_id}

    def backend_params(self, session: ClientSession, backend: str, params: dict[str, Any]) -> dict[str, Any]:
        """A host's call params with a ``featureSet`` it named in its own words put in the backend's."""
        named = params.get("featureSet")
        if isinstance(named, str):
            for b, own in self._dir.resolve_feature_set(session.view, named):
                if b == backend:
                    return {**params, "featureSet": own}
        return params

    def call_facts(self, session: ClientSession, backend: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """What the chain's scope check (``policies.scopes.ScopePolicy``) needs for a scoped
        ``tools/call``: the feature sets that may govern the tool (the one the host names, else every
        scoped ``tools`` set of the backend) with the host's and the operator's patterns for each."""
        directory = self._dir
        if not self._state.is_mcpl(backend):
            return None
        scope = params.get("scope")
        label = scope.get("label") if isinstance(scope, dict) else None
        declared = self._state.backend(backend).feature_sets
        named = params.get("featureSet")
        named_unknown = None
        if isinstance(named, str):
            candidates = [fs for b, fs in directory.resolve_feature_set(session.view, named) if b == backend]
            named_unknown = None if candidates else named
        else:
            candidates = [n for n, d in declared.items() if d.get("scoped") and mcpl.uses(d, mcpl.USES_TOOLS)]
        enabled = directory.effective(session, backend)
        facts = ScopedCallFacts(
            label=label,
            candidates=tuple(
                (
                    exposed(session.view, backend, fs),
                    directory.host_scopes(session, backend, fs),
                    directory.operator_scopes(session.principal.name, backend, fs),
                    fs in enabled,
                )
                for fs in candidates
            ),
            needs_enabled=session.mcpl is not None,
            can_enable=bool(candidates) and directory.can_enable(backend, candidates[0]),
            named_unknown=named_unknown,
        )
        return {SCOPES_POLICY: facts}

    # ========================================================================= backend -> relay

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> bool:
        method = message.get("method")
        if method not in mcpl.SERVER_REQUESTS:
            return False
        serving = self._state.serving
        # Counted here, synchronously, as each request is read; the decision is policies/load.py's.
        load = self._load.answer_backend(serving[conn.name], self._state.config.max_serving_per_backend)
        if not load.allowed:
            self._audit(load.outcome, None, conn.name, str(method), reason=load.reason)
            conn.spawn(conn.send(jsonrpc.error(message.get("id"), load.code, load.reason)))
            return True
        serving[conn.name] += 1
        conn.spawn(self._answer(conn, message, owner))
        return True

    def on_server_notification(self, conn: BackendConnection, message: dict[str, Any]) -> bool:
        method = message.get("method")
        if method not in mcpl.SERVER_NOTIFICATIONS:
            return False
        params = p if isinstance(p := message.get("params"), dict) else {}
        if method == "featureSets/changed":
            added, removed = self._state.backend(conn.name).changed(params.get("added"), params.get("removed"))
            self._state.forget()
            found = self._state.backend(conn.name)
            if added or removed:
                self._announce_feature_sets(conn.name, {n: found.feature_sets[n] for n in added}, removed)
                self.sync(conn.name)
        else:
            self._channels.server_changed(conn.name, params)
        return True

    async def _answer(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        """Every request a backend sends is answered: with the result, or with an error."""
        try:
            await self._answer_one(conn, message, owner)
        finally:
            self._state.serving[conn.name] -= 1

    async def _answer_one(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        method = message["method"]
        params = p if isinstance(p := message.get("params"), dict) else {}
        result: object
        try:
            if method == "push/event":
                result = await self._requests.push(conn, params)
            elif method == "inference/request":
                result = await self._requests.inference(conn, message.get("id"), params, owner)
            elif method == "model/info":
                result = await self._requests.model_info(conn, owner)
            elif method == "scope/elevate":
                result = await self._requests.elevate(conn, params, owner)
            else:
                result = await self._channels.server_request(conn, method, params, owner)
            reply = jsonrpc.result(message.get("id"), result)
        except jsonrpc.RpcError as exc:
            reply = jsonrpc.error_from(message.get("id"), exc)
        except Exception as exc:  # the backend must still get an answer
            log.exception("backend %s: %s failed in the gateway", conn.name, method)
            reply = jsonrpc.error(message.get("id"), jsonrpc.INTERNAL_ERROR, f"gateway error: {type(exc).__name__}")
        await conn.send(reply)
