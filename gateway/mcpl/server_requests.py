"""What a backend asks of its hosts (MCPL §7.4, §9, §11, §12), checked and delivered per session.

Each request is first checked against the feature sets its sessions have enabled (-32001/-32003),
then goes to the host session(s) it may reach: a push to every session with the set enabled (and is
de-duplicated by ``eventId`` through the bus), an inference request to one (pinned by
``conversationId``), a scope elevation decided by operator and host patterns or, failing those, by
the host. The caller answers the backend with whatever these return or raise.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import adapters
from adapters import mcp as mcp_adapter
from gateway import jsonrpc
from gateway.mcpl.state import exposed
from gateway.sessions import ClientSession
from policies.chain import Target
from policies.feature_sets import POLICY as FEATURE_SETS_POLICY, TagFacts
from policies.globs import compile_glob
from policies.patterns import CapabilitySet
from policies.principal import Principal
from policies.scopes import evaluate

if TYPE_CHECKING:
    from gateway.mcpl.relay import McplRelay
    from gateway.upstreams.connection import BackendConnection


def _backend_principal(backend: str) -> Principal:
    """Who a backend is when the chain decides on what it initiates: trusted for everything but MCPL
    feature sets (its requests to hosts are held to the sets the hosts enabled)."""
    return Principal(f"backend:{backend}", CapabilitySet(["*"]))


class ServerRequests:
    def __init__(self, relay: McplRelay) -> None:
        self._relay = relay

    async def check_tag(
        self, conn: BackendConnection, method: str, params: dict[str, Any]
    ) -> tuple[str, list[ClientSession]]:
        """The feature-set check every server-initiated message passes, made by the policy chain
        (``policies.feature_sets.FeatureSetPolicy``); returns the tag and the sessions that have it
        enabled, or raises the MCPL error (-32001 / -32003 / -32602)."""
        relay = self._relay
        fs = params.get("featureSet")
        sessions = relay.sessions_of(conn.name)
        eligible = [s for s in sessions if isinstance(fs, str) and fs in relay.effective(s, conn.name)]
        declared = relay.backend(conn.name).feature_sets
        can = relay.can_enable(conn.name, fs, sessions) if isinstance(fs, str) and fs in declared else False
        event = adapters.annotate(
            mcp_adapter.decode(
                {"jsonrpc": "2.0", "id": 0, "method": method, "params": params},
                jsonrpc.Shape.REQUEST,
                session=None,
                principal=f"backend:{conn.name}",
            )
        )
        facts = {FEATURE_SETS_POLICY: TagFacts(declared, bool(eligible), can)}
        gateway = relay.gateway
        decision = await gateway.chain.dispatch(
            event, _backend_principal(conn.name), Target(conn.name, None, None, facts)
        )
        if not decision.allowed:
            relay.audit(
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
        relay = self._relay
        fs, eligible = await self.check_tag(conn, "push/event", params)
        event_id = params.get("eventId")
        if not isinstance(event_id, str) or not event_id:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "push/event needs a non-empty string eventId (MCPL §9.2)")
        metrics = relay.gateway.metrics
        key = f"mcpl:push:{conn.name}:{event_id}"
        if not await relay.gateway.bus.set(key, b"1", ttl_s=relay.config.push_dedup_ttl_s, only_if_absent=True):
            metrics.mcpl_push.labels("duplicate").inc()
            relay.audit("duplicate", None, conn.name, "push/event", feature_set=fs, event_id=event_id)
            return {"accepted": False, "reason": "duplicate"}
        hosts = [s for s in eligible if s.mcpl is not None and s.mcpl.supports("pushEvents")]
        answers = await asyncio.gather(
            *(
                relay.ask_host(s, "push/event", {**params, "featureSet": exposed(s.view, conn.name, fs)}, conn=conn)
                for s in hosts
            ),
            return_exceptions=True,
        )
        accepted = [a for a in answers if isinstance(a, dict) and a.get("accepted") is True]
        if accepted:
            metrics.mcpl_push.labels("accepted").inc()
            relay.audit(
                "delivered", None, conn.name, "push/event", feature_set=fs, event_id=event_id, hosts=len(accepted)
            )
            first = next((a for a in accepted if isinstance(a.get("inferenceId"), str)), accepted[0])
            return {"accepted": True, **({"inferenceId": first["inferenceId"]} if "inferenceId" in first else {})}
        # Nobody took it: forget the claim so that the server's retry with the same eventId is delivered.
        await relay.gateway.bus.delete(key)
        reasons = [a.get("reason") for a in answers if isinstance(a, dict) and isinstance(a.get("reason"), str)]
        reasons += [e.message for e in answers if isinstance(e, jsonrpc.RpcError)]
        reason = reasons[0] if reasons else "no host session accepts push events"
        metrics.mcpl_push.labels("rejected").inc()
        relay.audit("rejected", None, conn.name, "push/event", feature_set=fs, event_id=event_id, reason=reason)
        return {"accepted": False, "reason": reason}

    async def inference(self, conn: BackendConnection, upstream_id: Any, params: dict[str, Any], owner: Any) -> object:
        """The host's result, relayed as it answered."""
        relay = self._relay
        if relay.in_hook[conn.name]:
            reason = (
                "inference/request from inside a context hook is refused (MCPL §10.7: hooks must not trigger inference)"
            )
            relay.audit("denied", None, conn.name, "inference/request", reason=reason)
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, reason)
        fs, eligible = await self.check_tag(conn, "inference/request", params)
        hosts = [s for s in eligible if s.mcpl is not None and s.mcpl.supports("inferenceRequest")]
        conversation = params.get("conversationId")
        pinned = relay.pinned(conversation) if isinstance(conversation, str) else None
        session = next((s for s in hosts if s.id == pinned), None) or relay.pick(hosts, owner)
        if session is None:
            reason = f"no host session with {fs} enabled can serve inference/request"
            relay.audit("unanswerable", None, conn.name, "inference/request", feature_set=fs, reason=reason)
            raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, reason)
        forward = {**params, "featureSet": exposed(session.view, conn.name, fs)}
        hints = self._routing_hints(conn.name, fs)
        if hints:
            prefs = p if isinstance(p := params.get("preferences"), dict) else {}
            forward["preferences"] = {**prefs, **hints}
        if isinstance(conversation, str):
            relay.pin_conversation(conversation, session)

        def route(gid: str) -> None:
            relay.route_chunks(session, gid, conn, upstream_id)

        try:
            result = await relay.ask_host(session, "inference/request", forward, on_id=route, conn=conn, owner=owner)
        finally:
            relay.drop_chunk_routes(session, conn, upstream_id)
        relay.audit(
            "relayed",
            session,
            conn.name,
            "inference/request",
            feature_set=fs,
            model=result.get("model") if isinstance(result, dict) else None,
        )
        return result

    def _routing_hints(self, backend: str, feature_set: str) -> dict[str, Any]:
        relay = self._relay
        hints: dict[str, Any] = {}
        for pattern, keys in relay.config.routing.get(backend, {}).items():
            if compile_glob(pattern, None)(feature_set):
                hints.update(keys)
        return hints

    async def model_info(self, conn: BackendConnection, owner: Any) -> object:
        """The host's result, relayed as it answered, else the model the latest context hook named."""
        relay = self._relay
        hosts = [s for s in relay.sessions_of(conn.name) if s.mcpl is not None]
        session = relay.pick(hosts, owner)
        if session is not None:
            try:
                return await relay.ask_host(session, "model/info", {}, conn=conn, owner=owner)
            except jsonrpc.RpcError:
                if relay.last_model is None:
                    raise
        if relay.last_model is not None:
            return dict(relay.last_model)  # the model the latest context hook named
        raise jsonrpc.RpcError(jsonrpc.METHOD_NOT_FOUND, "no host session can answer model/info")

    async def elevate(self, conn: BackendConnection, params: dict[str, Any], owner: Any) -> dict[str, Any]:
        relay = self._relay
        fs, eligible = await self.check_tag(conn, "scope/elevate", params)
        scope = params.get("scope")
        label = scope.get("label") if isinstance(scope, dict) else None
        if not isinstance(label, str):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "scope/elevate needs params.scope.label (MCPL §7.3)")
        payload = scope.get("payload") if isinstance(scope, dict) else None
        session = relay.pick(eligible, owner)
        assert session is not None and session.mcpl is not None  # eligible is not empty after check_tag
        verdict = evaluate(
            label,
            relay.host_scopes(session, conn.name, fs),
            relay.operator_scopes(session.principal.name, conn.name, fs),
            session.mcpl.approved(conn.name, fs),
        )
        if verdict.outcome != "ask":
            outcome = "approved" if verdict.outcome == "approve" else "denied"
            relay.audit(
                outcome,
                session,
                conn.name,
                "scope/elevate",
                feature_set=fs,
                scope=label,
                reason=verdict.reason,
                by=verdict.by,
            )
            if verdict.outcome == "approve":
                return {"approved": True, **({"payload": payload} if payload is not None else {})}
            return {"approved": False, "reason": verdict.reason}
        answer = await relay.ask_host(
            session,
            "scope/elevate",
            {**params, "featureSet": exposed(session.view, conn.name, fs)},
            conn=conn,
            owner=owner,
        )
        approved = isinstance(answer, dict) and answer.get("approved") is True
        if approved:
            session.mcpl.approve(conn.name, fs, label)
        relay.audit(
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
