"""The MCPx topic socket, ``GET /ws?topic=NAME[&mode=directed][&token=...]`` (MCPx v0.1 §6.2).

One text frame is one envelope. Each frame from a participant passes, in order: size, JSON,
envelope shape, then the policy chain's admission stage (policies/: ``from`` = the authenticated id
and the reserved ``system/*`` namespace in policies/mcpx_envelope.py, capabilities with the shared
matcher, the envelope rate), and optionally kind-vs-payload. Any failure answers the sender alone
with a ``system/error`` carrying the offending envelope's id as ``correlation_id`` when it is known;
the connection stays open and the envelope reaches nobody. A denial's code comes from its typed
outcome (gateway/errors.py, ``mcpx_denial_code``), never from the denying policy's name.

Frames toward a participant leave through its Outbox (gateway/mcpx/outbox.py): written straight to
the socket, batched per event-loop iteration, while the socket keeps up; queued (bounded) otherwise.

The door is given what it uses (the topic hub, the chain, audit, metrics, how to authenticate),
not the whole gateway.

Refusals before joining (bad token, a JWT for another topic, a duplicate id) accept the socket and
close it with 1008 and a reason, as the reference gateway does, so that clients see a close code
rather than a bare HTTP 403; a full topic closes with 1013 (try again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from adapters import mcpx
from gateway.errors import (
    MCPX_CAPABILITY_VIOLATION,
    MCPX_ENVELOPE_TOO_LARGE,
    MCPX_INVALID_ENVELOPE,
    MCPX_INVALID_MESSAGE,
    MCPX_KIND_MISMATCH,
    MCPX_RATE_LIMITED,
    MCPX_RESERVED_KIND,
    MCPX_UNKNOWN_RECIPIENT,
    mcpx_denial_code,
)
from gateway.mcpx.hub import JoinRefused, Mode, Participant, Topic
from gateway.mcpx.outbox import FrameCache, Outbox, server_protocol
from policies.auth import AuthError, Credentials, bearer_token
from policies.chain import Decision, Outcome
from policies.patterns import CapabilitySet
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.config import Mcpx
    from gateway.mcpx.hub import TopicHub
    from gateway.metrics import Metrics
    from gateway.transports.http_common import Scope
    from policies.chain import PolicyChain

# system/error codes that are decisions (counted as refused), as opposed to malformed envelopes.
_REFUSALS = frozenset({MCPX_CAPABILITY_VIOLATION, MCPX_RATE_LIMITED, MCPX_RESERVED_KIND, MCPX_ENVELOPE_TOO_LARGE})

log = logging.getLogger(__name__)

TRANSPORT = "mcpx"
_POLICY_VIOLATION = 1008
_TRY_AGAIN_LATER = 1013
_TOPIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}$")
_CLOSE_WAIT_S = 2.0


def token_of(ws: WebSocket) -> str | None:
    """The bearer token, from the Authorization header or (as reference clients send it) ?token=."""
    if ws.headers.get("authorization"):
        return bearer_token(ws.headers.get("authorization"))
    return ws.query_params.get("token") or None


def _is_mode(value: str) -> TypeGuard[Mode]:
    return value in ("all", "directed")


class Authenticate(Protocol):
    """Who is calling (raises AuthError): the token is the door's when it found one, else the
    Authorization header's (``Gateway.authenticate``)."""

    def __call__(self, scope: Scope, token: str | None = None) -> Credentials: ...


class McpxDoor:
    def __init__(
        self,
        config: Mcpx,
        *,
        queue_size: int,
        topics: TopicHub,
        chain: PolicyChain,
        audit: AuditLog,
        metrics: Metrics,
        authenticate: Authenticate,
        principal_of: Callable[[Credentials], Principal],
    ) -> None:
        """``queue_size``: frames a participant's outbox holds (``limits.session_queue``);
        ``principal_of``: the principal credentials stand for now (``Gateway.principal_of``)."""
        self._cfg = config
        self._queue_size = queue_size
        self._topics = topics
        self._chain = chain
        self._audit = audit
        self._metrics = metrics
        self._authenticate = authenticate
        self._principal_of = principal_of
        self._background: set[asyncio.Task[None]] = set()
        self._frames = FrameCache()

    async def _refuse(self, ws: WebSocket, code: int, reason: str) -> None:
        await ws.accept()
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_CLOSE_WAIT_S):
                await ws.close(code=code, reason=reason[:120])

    def _credentials(self, ws: WebSocket, topic: str) -> Credentials:
        credentials = self._authenticate(ws.scope, token_of(ws))
        if credentials.topic is not None and credentials.topic != topic:
            raise AuthError(f"token is for topic {credentials.topic!r}, not {topic!r}", True)
        return credentials

    def capabilities_of(self, credentials: Credentials, topic: str) -> CapabilitySet:
        capabilities = self._principal_of(credentials).capabilities
        spec = self._cfg.topics.get(topic)
        narrowing = spec.capabilities.get(credentials.name) if spec is not None else None
        return capabilities if narrowing is None else capabilities.narrowed(CapabilitySet(narrowing))

    async def serve(self, ws: WebSocket) -> None:
        topic_name = ws.query_params.get("topic", "")
        mode = ws.query_params.get("mode", "all")
        if not _TOPIC_NAME.match(topic_name):
            await self._refuse(ws, _POLICY_VIOLATION, "topic query parameter missing or not a valid name")
            return
        if not _is_mode(mode):
            await self._refuse(ws, _POLICY_VIOLATION, "mode must be 'all' or 'directed'")
            return
        try:
            credentials = self._credentials(ws, topic_name)
        except AuthError as exc:
            await self._refuse(ws, _POLICY_VIOLATION, f"Unauthorized: {exc.reason}")
            return
        outbox = Outbox(self._queue_size, server_protocol(ws), self._frames)
        participant = Participant(
            credentials.name,
            self.capabilities_of(credentials, topic_name),
            outbox.deliver,
            mode,
        )
        await ws.accept()
        try:
            topic = await self._topics.enter(topic_name, participant)
        except JoinRefused as exc:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await ws.close(code=exc.code, reason=exc.reason[:120])
            return
        self._metrics.sessions.labels(TRANSPORT).inc()
        writer = asyncio.create_task(outbox.write(ws))
        participant.on_drop = lambda reason: self._kick(ws, writer, reason)
        try:
            while True:
                frame = await ws.receive()
                if frame["type"] == "websocket.disconnect" or writer.done():
                    break
                data = frame.get("text")
                if data is None:
                    data = frame.get("bytes") or b""
                await self._on_frame(topic, participant, data)
        except (WebSocketDisconnect, RuntimeError):
            pass
        finally:
            self._topics.leave(topic_name, participant)
            self._metrics.sessions.labels(TRANSPORT).dec()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

    def _kick(self, ws: WebSocket, writer: asyncio.Task[None], reason: str) -> None:
        writer.cancel()  # it may be stuck sending to a socket nobody reads
        self._metrics.dropped_clients.labels(TRANSPORT).inc()

        async def close() -> None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(_CLOSE_WAIT_S):
                    await ws.close(code=_TRY_AGAIN_LATER, reason=reason)

        task = asyncio.get_running_loop().create_task(close())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- one frame ---------------------------------------------------------------------------

    def _error(self, topic: Topic, participant: Participant, code: str, message: str, **details: Any) -> None:
        # Every refusal of a participant's envelope is answered through here, so it is counted here.
        self._metrics.mcpx_envelopes.labels("refused" if code in _REFUSALS else "invalid").inc()
        correlation_id = details.pop("correlation_id", None)
        self._topics.send(topic, participant.id, mcpx.error(participant.id, code, message, correlation_id, **details))

    async def _on_frame(self, topic: Topic, participant: Participant, data: str | bytes) -> None:
        size = len(data) if isinstance(data, bytes) or data.isascii() else len(data.encode())
        try:
            envelope = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if size > self._cfg.max_envelope_bytes:
                envelope = None  # size is the complaint that matters; fall through to it
            else:
                self._error(topic, participant, MCPX_INVALID_MESSAGE, f"frame is not JSON: {exc}")
                return
        env_id = envelope.get("id") if isinstance(envelope, dict) else None
        env_id = env_id if isinstance(env_id, str) else None
        if size > self._cfg.max_envelope_bytes:
            self._error(
                topic,
                participant,
                MCPX_ENVELOPE_TOO_LARGE,
                f"envelope of {size} bytes exceeds the limit of {self._cfg.max_envelope_bytes}",
                correlation_id=env_id,
                max_envelope_bytes=self._cfg.max_envelope_bytes,
            )
            return
        try:
            event = mcpx.decode(envelope)
        except mcpx.EnvelopeError as exc:
            self._error(topic, participant, MCPX_INVALID_ENVELOPE, str(exc), correlation_id=env_id)
            return
        # What may pass is decided by the policy chain, as for every dialect: the sender (``from``
        # is this participant), the reserved system/* namespace, the participant's capabilities
        # (the kind is the event's action) and the envelope rate.
        principal = Principal(participant.id, participant.capabilities)
        decision = await self._chain.admit(event, principal)
        if not decision.allowed:
            self._refuse_envelope(topic, participant, envelope, decision, env_id)
            return
        problem = self.check(participant, envelope)
        if problem is not None:
            code, message, details = problem
            self._error(topic, participant, code, message, correlation_id=env_id, **details)
            return
        delivered = self._topics.route(
            topic, participant.id, envelope, data if isinstance(data, str) else data.decode()
        )
        self._metrics.mcpx_envelopes.labels("routed").inc()
        self._metrics.mcpx_deliveries.inc(delivered)
        to = envelope.get("to")
        missing = [r for r in to if not topic.has(r)] if isinstance(to, list) else []
        if missing:
            # Delivered to whoever is there; the sender learns who was not (no silent loss).
            self._topics.send(
                topic,
                participant.id,
                mcpx.error(
                    participant.id,
                    MCPX_UNKNOWN_RECIPIENT,
                    f"not in topic {topic.name!r}: {', '.join(missing)}",
                    env_id,
                    recipients=missing,
                ),
            )

    def _refuse_envelope(
        self, topic: Topic, participant: Participant, envelope: dict[str, Any], decision: Decision, env_id: str | None
    ) -> None:
        kind = envelope["kind"]
        # Every denial is audited, a spoofed ``from`` and a reserved kind included: they are what an
        # impersonation attempt looks like, whatever else they have in common with malformed envelopes.
        self._audit.record(
            decision.outcome, transport=TRANSPORT, principal=participant.id, topic=topic.name, action=kind
        )
        code = mcpx_denial_code(decision.outcome) or decision.policy or "denied"
        message = decision.reason
        details: dict[str, Any] = {}
        match decision.outcome:
            case Outcome.RATE_LIMITED:
                details = dict(decision.data or {})
            case Outcome.DENIED:
                # The §3.5.2 shape: what was attempted and what the participant may do.
                message = f"You lack capability for {kind!r}"
                details = {"attempted_kind": kind, "your_capabilities": participant.capabilities.describe()}
            case Outcome.RESERVED:
                details = {"attempted_kind": kind}
        self._error(topic, participant, code, message, correlation_id=env_id, **details)

    def check(self, participant: Participant, envelope: Any) -> tuple[str, str, dict[str, Any]] | None:
        """Protocol problems of an envelope the chain admitted: (error code, message, details), or None."""
        kind = envelope["kind"]
        correlation_id = envelope.get("correlation_id")
        if kind.startswith("mcp/proposal:") and correlation_id is not None:
            return MCPX_INVALID_ENVELOPE, "proposals must not carry a correlation_id (§3.2.1)", {}
        if kind.startswith("mcp/response:") and correlation_id is None:
            return MCPX_INVALID_ENVELOPE, "responses must carry the request's id as correlation_id (§3.1.2)", {}
        if self._cfg.validate_kind:
            mismatch = mcpx.kind_mismatch(kind, envelope.get("payload") or {})
            if mismatch is not None:
                return MCPX_KIND_MISMATCH, mismatch, {"attempted_kind": kind}
        return None
