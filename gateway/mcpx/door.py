"""The MCPx topic socket, ``GET /ws?topic=NAME[&mode=directed][&token=...]`` (MCPx v0.1 §6.2).

One text frame is one envelope. Each frame from a participant passes, in order: size, JSON, rate,
envelope shape, ``from`` = the authenticated id, the reserved ``system/*`` namespace, capabilities
(the shared matcher), and optionally kind-vs-payload. Any failure answers the sender alone with a
``system/error`` carrying the offending envelope's id as ``correlation_id`` when it is known; the
connection stays open and the envelope reaches nobody.

Refusals before joining (bad token, a JWT for another topic, a duplicate id) accept the socket and
close it with 1008 and a reason, as the reference gateway does, so that clients see a close code
rather than a bare HTTP 403; a full topic closes with 1013 (try again later).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING, Any, TypeGuard

import orjson
from starlette.websockets import WebSocket, WebSocketDisconnect

from adapters import mcpx
from gateway.mcpx.hub import JoinRefused, Mode, Participant, Topic
from policies.auth import AuthError, Credentials, bearer_token
from policies.chain import Decision
from policies.patterns import CapabilitySet
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.core import Gateway

# system/error codes that are decisions (counted as refused), as opposed to malformed envelopes.
_REFUSALS = frozenset({"capability_violation", "rate_limited", "reserved_kind", "envelope_too_large"})

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


class _Outbox:
    """A participant's bounded queue of frames toward its socket, drained by one writer task."""

    def __init__(self, size: int) -> None:
        self.queue: asyncio.Queue[str] = asyncio.Queue(maxsize=size)

    def deliver(self, _envelope: dict[str, Any], text: str) -> bool:
        try:
            self.queue.put_nowait(text)
        except asyncio.QueueFull:
            return False
        return True


class McpxDoor:
    def __init__(self, gateway: Gateway) -> None:
        self._gw = gateway
        self._cfg = gateway.config.mcpx
        self._queue_size = gateway.config.limits.session_queue

    async def _refuse(self, ws: WebSocket, code: int, reason: str) -> None:
        await ws.accept()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(ws.close(code=code, reason=reason[:120]), _CLOSE_WAIT_S)

    def _credentials(self, ws: WebSocket, topic: str) -> Credentials:
        credentials = self._gw.authenticate(ws.scope, token_of(ws))
        if credentials.topic is not None and credentials.topic != topic:
            raise AuthError(f"token is for topic {credentials.topic!r}, not {topic!r}", True)
        return credentials

    def capabilities_of(self, credentials: Credentials, topic: str) -> CapabilitySet:
        capabilities = self._gw.principal_of(credentials).capabilities
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
        outbox = _Outbox(self._queue_size)
        participant = Participant(
            credentials.name,
            self.capabilities_of(credentials, topic_name),
            outbox.deliver,
            mode,
        )
        await ws.accept()
        try:
            topic = self._gw.topics.join(topic_name, participant)
        except JoinRefused as exc:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=exc.code, reason=exc.reason[:120]), _CLOSE_WAIT_S)
            return
        self._gw.metrics.sessions.labels(TRANSPORT).inc()
        writer = asyncio.create_task(self._write(ws, outbox))
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
            self._gw.topics.leave(topic_name, participant)
            self._gw.metrics.sessions.labels(TRANSPORT).dec()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

    def _kick(self, ws: WebSocket, writer: asyncio.Task[None], reason: str) -> None:
        writer.cancel()  # it may be stuck sending to a socket nobody reads
        self._gw.metrics.dropped_clients.labels(TRANSPORT).inc()

        async def close() -> None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(ws.close(code=_TRY_AGAIN_LATER, reason=reason), _CLOSE_WAIT_S)

        task = asyncio.get_running_loop().create_task(close())
        self._background: set[asyncio.Task[None]] = getattr(self, "_background", set())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _write(self, ws: WebSocket, outbox: _Outbox) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError, OSError):
            while True:
                await ws.send_text(await outbox.queue.get())

    # ---- one frame ---------------------------------------------------------------------------

    def _error(self, topic: Topic, participant: Participant, code: str, message: str, **details: Any) -> None:
        # Every refusal of a participant's envelope is answered through here, so it is counted here.
        self._gw.metrics.mcpx_envelopes.labels("refused" if code in _REFUSALS else "invalid").inc()
        correlation_id = details.pop("correlation_id", None)
        self._gw.topics.send(
            topic, participant.id, mcpx.error(participant.id, code, message, correlation_id, **details)
        )

    async def _on_frame(self, topic: Topic, participant: Participant, data: str | bytes) -> None:
        size = len(data) if isinstance(data, bytes) or data.isascii() else len(data.encode())
        try:
            envelope = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            if size > self._cfg.max_envelope_bytes:
                envelope = None  # size is the complaint that matters; fall through to it
            else:
                self._error(topic, participant, "invalid_message", f"frame is not JSON: {exc}")
                return
        env_id = envelope.get("id") if isinstance(envelope, dict) else None
        env_id = env_id if isinstance(env_id, str) else None
        if size > self._cfg.max_envelope_bytes:
            self._error(
                topic,
                participant,
                "envelope_too_large",
                f"envelope of {size} bytes exceeds the limit of {self._cfg.max_envelope_bytes}",
                correlation_id=env_id,
                max_envelope_bytes=self._cfg.max_envelope_bytes,
            )
            return
        try:
            event = mcpx.decode(envelope)
        except mcpx.EnvelopeError as exc:
            self._error(topic, participant, "invalid_envelope", str(exc), correlation_id=env_id)
            return
        kind = envelope["kind"]
        if envelope["from"] != participant.id:
            self._error(
                topic,
                participant,
                "invalid_envelope",
                f"from must be your participant id {participant.id!r}",
                correlation_id=env_id,
            )
            return
        if kind.startswith("system/") or kind == "system":
            self._error(
                topic,
                participant,
                "reserved_kind",
                "the system/* namespace is reserved to the gateway",
                correlation_id=env_id,
                attempted_kind=kind,
            )
            return
        # What may pass is decided by the policy chain, as for every dialect: the envelope rate and
        # the participant's capabilities (the kind is the event's action).
        principal = Principal(participant.id, participant.capabilities)
        decision = await self._gw.chain.admit(event, principal)
        if not decision.allowed:
            self._refuse_envelope(topic, participant, envelope, decision, env_id)
            return
        problem = self.check(participant, envelope)
        if problem is not None:
            code, message, details = problem
            self._error(topic, participant, code, message, correlation_id=env_id, **details)
            return
        delivered = self._gw.topics.route(
            topic, participant.id, envelope, data if isinstance(data, str) else data.decode()
        )
        self._gw.metrics.mcpx_envelopes.labels("routed").inc()
        self._gw.metrics.mcpx_deliveries.inc(delivered)
        to = envelope.get("to")
        missing = [r for r in to if r not in topic.participants] if isinstance(to, list) else []
        if missing:
            # Delivered to whoever is there; the sender learns who was not (no silent loss).
            self._gw.topics.send(
                topic,
                participant.id,
                mcpx.error(
                    participant.id,
                    "unknown_recipient",
                    f"not in topic {topic.name!r}: {', '.join(missing)}",
                    env_id,
                    recipients=missing,
                ),
            )

    def _refuse_envelope(
        self, topic: Topic, participant: Participant, envelope: dict[str, Any], decision: Decision, env_id: str | None
    ) -> None:
        kind = envelope["kind"]
        self._gw.audit.record(
            decision.outcome, transport=TRANSPORT, principal=participant.id, topic=topic.name, action=kind
        )
        if decision.outcome == "rate_limited":
            self._error(
                topic, participant, "rate_limited", decision.reason, correlation_id=env_id, **(decision.data or {})
            )
        elif decision.policy == "capabilities":
            # The §3.5.2 shape: what was attempted and what the participant may do.
            details = {"attempted_kind": kind, "your_capabilities": participant.capabilities.describe()}
            self._error(
                topic,
                participant,
                "capability_violation",
                f"You lack capability for {kind!r}",
                correlation_id=env_id,
                **details,
            )
        else:
            self._error(topic, participant, decision.policy or "denied", decision.reason, correlation_id=env_id)

    def check(self, participant: Participant, envelope: Any) -> tuple[str, str, dict[str, Any]] | None:
        """Protocol problems of an envelope the chain admitted: (error code, message, details), or None."""
        kind = envelope["kind"]
        correlation_id = envelope.get("correlation_id")
        if kind.startswith("mcp/proposal:") and correlation_id is not None:
            return "invalid_envelope", "proposals must not carry a correlation_id (§3.2.1)", {}
        if kind.startswith("mcp/response:") and correlation_id is None:
            return "invalid_envelope", "responses must carry the request's id as correlation_id (§3.1.2)", {}
        if self._cfg.validate_kind:
            mismatch = mcpx.kind_mismatch(kind, envelope.get("payload") or {})
            if mismatch is not None:
                return "kind_mismatch", mismatch, {"attempted_kind": kind}
        return None
