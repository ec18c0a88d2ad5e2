"""What a backend asks of its hosts (MCPL §7.4, §9, §11, §12), checked and delivered per session.

Each request is first checked against the feature sets its sessions have enabled (-32001/-32003),
then goes to the host session(s) it may reach: a push to every session with the set enabled (and is
de-duplicated by ``eventId`` through the bus), an inference request to one (pinned by
``conversationId``; refused while the backend is inside a context hook, §10.7), a scope elevation
answered by the operator's and the host's patterns or, when they leave it open, by the host. Every
decision is the policy chain's (``policies.feature_sets``, ``policies.hook_inference``,
``policies.scope_elevation``); the caller answers the backend with whatever these return or raise.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from gateway import jsonrpc
from gateway.bus import Bus
from gateway.bus.base import BusUnavailable
from gateway.mcpl.directory import McplDirectory
from gateway.mcpl.plumbing import McplAudit, Peers, backend_principal, backend_request
from gateway.mcpl.state import RelayState, exposed
from gateway.metrics import Metrics
from gateway.sessions import ClientSession
from policies.chain import PolicyChain, Target
from policies.feature_sets import POLICY as FEATURE_SETS_POLICY, TagFacts
from policies.globs import compile_glob
from policies.hook_inference import POLICY as HOOK_INFERENCE_POLICY, HookCallsFacts
from policies.scope_elevation import POLICY as ELEVATION_POLICY, ElevationFacts, approved_by_rules

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection


class ServerRequests:
    def __init__(
        self,
        state: RelayState,
        directory: McplDirectory,
        peers: Peers,
        chain: PolicyChain,
        audit: McplAudit,
        bus: Bus,
        metrics: Metrics,
    ) -> None:
        self._state = state
        self._dir = directory
        self._peers = peers
        self._chain = chain
        self._audit = audit
        self._bus = bus
        self._metrics = metrics

    async def check_tag(
        self, conn: BackendConnection, method: str, params: dict[str, Any]
    ) -> tuple[str, list[ClientSession]]:
        """The feature-set check every server-initiated message passes, made by the policy chain
        (``policies.feature_sets.FeatureSetPolicy``); returns the tag and the sessions that have it
        enabled, or raises the MCPL error (-32001 / -32003 / -32602)."""
        directory = self._dir
        fs = params.get("featureSet")
        sessions = directory.sessions_of(conn.name)
        eligible = [s for s in sessions if isinstance(fs, str) and fs in directory.effective(s, conn.name)]
        declared = self._state.backend(conn.name).feature_sets
        can = directory.can_enable(conn.name, fs, sessions) if isinstance(fs, str) and fs in declared else False
        facts = {FEATURE_SETS_POLICY: TagFacts(declared, bool(eligible), can)}
        decision = await self._chain.dispatch(
            backend_request(conn.name, method, params), backend_principal(conn.name), Target(conn.name, facts=facts)
        )
        if not decision.allowed:
            self._audit(
                decision.outcome,
                None,
                conn.name,
                method,
                feature_set=fs if isinstance(fs, str) else None,
                reason=decision.reason,
            )
            raise jsonrpc.RpcError(decision.code, decision.reason, decision.data)
        assert isinstance(fs, str)  # the feature-set policy refuses any other tag
        return fs, eligible

    async def push(self, conn: BackendConnection, params: dict[str, Any]) -> dict[str, Any]:
        fs, eligible = await self.check_tag(conn, "push/event", params)
        event_id = params.get("eventId")
        if not isinstance(event_id, str) or not event_id:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "push/event needs a non-empty string eventId (MCPL §9.2)")
        metrics = self._metrics
        key = f"mcpl:push:{conn.name}:{event_id}"
        if not await self._bus.set(key, b"1", ttl_s=self._state.config.push_dedup_ttl_s, only_if_absent=True):
            metrics.mcpl_push.labels("duplicate").inc()
            self._audit("duplicate", None, conn.name, "push/event", feature_set=fs, event_id=event_id)
            return {"accepted": False, "reason": "duplicate"}
        hosts = [s for s in eligible if s.mcpl is not None and s.mcpl.supports("pushEvents")]
        answers = await asyncio.gather(
            *(
                self._peers.ask_host(
                    s, "push/event", {**params, "featureSet": exposed(s.view, conn.name, fs)}, conn=conn
                )
                for s in hosts
            ),
            return_exceptions=True,
        )
        accepted = [a for a in answers if isinstance(a, dict) and a.get("accepted") is True]
        if accepted:
            metrics.mcpl_push.labels("accepted").inc()
            self._audit(
                "delivered", None, conn.name, "push/event", feature_set=fs, event_id=event_id, hosts=len(accepted)
            )
            first = next((a for a in accepted if isinstance(a.get("inferenceId"), str)), accepted[0])
            return {"accepted": True, **({"inferenceId": first["inferenceId"]} if "inferenceId" in first else {})}
        # Nobody took it: forget the claim so that the server's retry with the same eventId is delivered
        # (with Redis away the claim was local and is gone already; the shared one expires).
        with contextlib.suppress(BusUnavailable):
            await self._bus.delete(key)
        reasons = [a.get("reason") for a in answers if isinstance(a, dict) and isinstance(a.get("reason"), str)]
        reasons += [e.message for e in answers if isinstance(e, jsonrpc.RpcError)]
        reason = reasons[0] if reasons else "no host session accepts push events"
        metrics.mcpl_push.labels("rejected").inc()
        self._audit("rejected", None, conn.name, "push/event", feature_set=fs, event_id=event_id, reason=reason)
        return {"accepted": False, "reason": reason}

    async def inference(self, conn: BackendConnection, upstream_id: Any, params: dict[str, Any], owner: Any) -> object:
        """The host's result, relayed as it answered."""
        state = self._state
        facts = {HOOK_INFERENCE_POLICY: HookCallsFacts(state.in_hook[conn.name])}
        decision = await self._chain.dispatch(
            backend_request(conn.name, "inference/request", params),
            backend_principal(conn.name),
            Target(conn.name, facts=facts),
        )
        if not decision.allowed:
            self._audit(decision.outcome, None, conn.name, "inference/request", reason=decision.reason)
            raise jsonrpc.RpcError(decision.code, decision.reason, decision.data)
        fs, eligible = await self.check_tag(conn, "inference/request", params)
        hosts = [s for s in eligible if s.mcpl is not None and s.mcpl.supports("inferenceRequest")]
        conversation = params.get("conversationId")
        pinned = state.pinned(conversation) if isinstance(conversation, str) else None
        session = next((s for s in hosts if s.id == pinned), None) or self._peers.pick(hosts, owner)
        if session is None:
            reason = f"no host session with {fs} enabled can serve inference/request"
            self._audit("unanswerable", None, conn.name, "inference/request", feature_set=fs, reason=reason)
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, reason)
        forward = {**params, "featureSet": exposed(session.view, conn.name, fs)}
        hints = self._routing_hints(conn.name, fs)
        if hints:
            prefs = p if isinstance(p := params.get("preferences"), dict) else {}
            forward["preferences"] = {**prefs, **hints}
        if isinstance(conversation, str):
            state.pin_conversation(conversation, session.id)

        def route(gid: str) -> None:
            state.route_chunks(session.id, gid, conn, upstream_id)

        try:
            result = await self._peers.ask_host(
                session, "inference/request", forward, on_id=route, conn=conn, owner=owner
            )
        finally:
            state.drop_chunk_routes(session.id, conn, upstream_id)
        self._audit(
            "relayed",
            session,
            conn.name,
            "inference/request",
            feature_set=fs,
            model=result.get("model") if isinstance(result, dict) else None,
        )
        return result

    def _routing_hints(self, backend: str, feature_set: str) -> dict[str, Any]:
        hints: dict[str, Any] = {}
        for pattern, keys in self._state.config.routing.get(backend, {}).items():
            if compile_glob(pattern, None)(feature_set):
                hints.update(keys)
        return hints

    async def model_info(self, conn: BackendConnection, owner: Any) -> object:
        """The host's result, relayed as it answered, else the model the latest context hook named."""
        hosts = [s for s in self._dir.sessions_of(conn.name) if s.mcpl is not None]
        session = self._peers.pick(hosts, owner)
        state = self._state
        if session is not None:
            try:
                return await self._peers.ask_host(session, "model/info", {}, conn=conn, owner=owner)
            except jsonrpc.RpcError:
                if state.last_model is None:
                    raise
        if state.last_model is not None:
            return dict(state.last_model)  # the model the latest context hook named
        raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, "no host session can answer model/info")

    async def elevate(self, conn: BackendConnection, params: dict[str, Any], owner: Any) -> dict[str, Any]:
        """The chain answers where the operator's and the host's patterns decide
        (``policies.scope_elevation``); otherwise the host does, and its approval is remembered."""
        fs, eligible = await self.check_tag(conn, "scope/elevate", params)
        scope = params.get("scope")
        label = scope.get("label") if isinstance(scope, dict) else None
        if not isinstance(label, str):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "scope/elevate needs params.scope.label (MCPL §7.3)")
        payload = scope.get("payload") if isinstance(scope, dict) else None
        session = self._peers.pick(eligible, owner)
        assert session is not None and session.mcpl is not None  # eligible is not empty after check_tag
        facts = ElevationFacts(
            label,
            self._dir.host_scopes(session, conn.name, fs),
            self._dir.operator_scopes(session.principal.name, conn.name, fs),
            tuple(session.mcpl.approved(conn.name, fs)),
        )
        decision = await self._chain.dispatch(
            backend_request(conn.name, "scope/elevate", params),
            backend_principal(conn.name),
            Target(conn.name, facts={ELEVATION_POLICY: facts}),
        )
        if not decision.allowed:  # the patterns decided: the host is not asked
            approved = approved_by_rules(decision)
            self._audit(
                "approved" if approved else "denied",
                session,
                conn.name,
                "scope/elevate",
                feature_set=fs,
                scope=label,
                reason=decision.reason,
                by=(decision.data or {}).get("by"),
            )
            if approved:
                return {"approved": True, **({"payload": payload} if payload is not None else {})}
            return {"approved": False, "reason": decision.reason}
        answer = await self._peers.ask_host(
            session,
            "scope/elevate",
            {**params, "featureSet": exposed(session.view, conn.name, fs)},
            conn=conn,
            owner=owner,
        )
        approved = isinstance(answer, dict) and answer.get("approved") is True
        if approved:
            session.mcpl.approve(conn.name, fs, label)
        self._audit(
            "approved" if approved else "denied",
            session,
            conn.name,
            "scope/elevate",
            feature_set=fs,
            scope=label,
            by="host",
            reason=answer.get("reason") if isinstance(answer, dict) else None,
        )
        return answer if isinstance(answer, dict) else {"approved": False, "reason": "the host gave no answer"}
