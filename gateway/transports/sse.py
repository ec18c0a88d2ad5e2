"""Legacy HTTP+SSE front door (2024-11-05): ``GET /sse`` opens the stream, ``POST /messages`` feeds it.

The first event names the POST endpoint (``event: endpoint``); every answer and server message then
flows on the one SSE stream. Both ``session_id`` and ``sessionId`` query names are accepted, as
real peers use both.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

from gateway import jsonrpc, sse
from gateway.channels import ChannelOverflow, absorb_overflow, guarded_write
from gateway.transports.http_common import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    accepts,
    drop_hook,
    header,
    read_body,
    send_bytes,
    send_rpc_error,
    send_unauthorized,
    watch_disconnect,
)
from policies.auth import AuthError
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.config import Limits
    from gateway.federation import View
    from gateway.metrics import Metrics
    from gateway.replicas import SessionSharing
    from gateway.routing import Router
    from gateway.sessions import ClientSession, SessionStore
    from gateway.transports.front_desk import FrontDesk

log = logging.getLogger(__name__)

TRANSPORT = "sse"


class LegacySseDoor:
    """Serves both the stream (GET) and the message endpoint (POST) of one view."""

    def __init__(
        self,
        view_of: Callable[[Scope], View | None],
        messages_path: Callable[[Scope], str],
        *,
        desk: FrontDesk,
        router: Router,
        sessions: SessionStore,
        limits: Limits,
        metrics: Metrics,
        shared: SessionSharing,
    ) -> None:
        self._shared = shared  # sessions other replicas may serve too (gateway/replicas/)
        self._view_of = view_of
        self._messages_path = messages_path
        self._desk = desk
        self._router = router
        self._sessions = sessions
        self._limits = limits
        self._metrics = metrics
        self._tasks: set[asyncio.Task[Any]] = set()

    async def stream(self, scope: Scope, receive: Receive, send: Send) -> None:
        view = self._view_of(scope)
        if view is None:
            await send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "No such server")
            return
        if scope["method"] != "GET":
            await send_rpc_error(send, 405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", extra=[("allow", "GET")])
            return
        if not accepts(scope, "text/event-stream"):
            await send_rpc_error(send, 406, jsonrpc.INVALID_REQUEST, "Accept must list text/event-stream")
            return
        refusal = self._desk.admit_session(TRANSPORT)
        if not refusal.allowed:
            await send_rpc_error(send, 503, refusal.code, refusal.reason)
            return
        try:
            credentials = self._desk.authenticate(scope)
        except AuthError as exc:
            await send_unauthorized(send, scope, exc.reason, exc.error)
            return
        session = self._desk.open_session(TRANSPORT, view, credentials)
        channel = session.standalone
        channel.attached = True
        endpoint = f"{scope.get('root_path', '')}{self._messages_path(scope)}?session_id={session.id}"
        gone = watch_disconnect(scope, receive)
        channel.on_overflow = drop_hook(scope)
        # Its POSTs may land on any replica; their answers come back to this stream through the bus.
        # Entered and left by hand: an AsyncExitStack (and its deque) is 0.8 KB more per idle stream.
        held = self._shared.holding(session)
        entered = False
        try:
            await held.__aenter__()
            entered = True
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream"),
                        (b"cache-control", b"no-cache, no-transform"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            await send(
                {
                    "type": "http.response.body",
                    "body": sse.encode(endpoint, event="endpoint"),
                    "more_body": True,
                }
            )
            after = 0
            keepalive = self._limits.sse_keepalive_s
            while True:
                # One future while idle (gateway/channels.py): no task, no asyncio.wait per keep-alive.
                batch = await channel.next_batch(after, keepalive, gone)
                if batch is None:
                    break
                if not batch and not channel.closed:
                    await send({"type": "http.response.body", "body": sse.KEEPALIVE, "more_body": True})
                    continue
                if not batch:
                    # The session ended on the gateway's side (the draft's exit, shutdown): end the response.
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    break
                after = batch[-1][0]
                # Encoded inside the call, not into a local: while idle, this frame would hold it.
                await guarded_write(
                    channel, send({"type": "http.response.body", "body": _events(session, batch), "more_body": True})
                )
        except (ChannelOverflow, asyncio.CancelledError) as exc:
            if not absorb_overflow(channel, exc):
                raise
            self._metrics.dropped_clients.labels(TRANSPORT).inc()
            log.warning("SSE session %s dropped: the client stopped reading", session.id[:8])
        except OSError:
            pass
        finally:
            gone.cancel()
            channel.writing = False
            channel.on_overflow = None
            channel.attached = False
            if entered:
                await held.__aexit__(None, None, None)
            await self._shared.ended(session)
            self._sessions.end(session)

    async def messages(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await send_rpc_error(send, 405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", extra=[("allow", "POST")])
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        session_id = (query.get("session_id") or query.get("sessionId") or [None])[0]
        if not session_id:
            await send_rpc_error(send, 400, jsonrpc.INVALID_REQUEST, "session_id is required")
            return
        session = await self._shared.find(session_id)
        if session is None or session.transport != TRANSPORT or session.view is not self._view_of(scope):
            await send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "Session not found")
            return
        try:
            principal = self._desk.caller_of(session, scope)
        except AuthError as exc:
            await send_unauthorized(send, scope, exc.reason, exc.error)
            return
        try:
            body = await read_body(receive, self._limits.max_body_bytes, header(scope, b"content-length"))
        except BodyTooLarge:
            await send_rpc_error(
                send, 413, jsonrpc.INVALID_REQUEST, f"Body exceeds {self._limits.max_body_bytes} bytes"
            )
            return
        except ClientGone:
            return
        try:
            parsed = jsonrpc.loads(body)
            messages = self._batch(parsed) if isinstance(parsed, list) else [parsed]
            shapes = [jsonrpc.classify(message) for message in messages] if len(messages) == 1 else None
        except jsonrpc.RpcError as exc:
            # The error also goes on the stream, where a legacy client looks for answers.
            session.standalone.push(jsonrpc.error_from(None, exc))
            await send_rpc_error(send, 400, exc.code, exc.message)
            return
        await send_bytes(send, 202, b"Accepted", content_type="text/plain")
        for index, message in enumerate(messages):
            if shapes is not None:
                shape = shapes[index]
            else:
                try:  # a batch member that is no message is answered alone; the others go on
                    shape = jsonrpc.classify(message)
                except jsonrpc.RpcError as exc:
                    rpc_id = message.get("id") if isinstance(message, dict) else None
                    session.standalone.push(
                        jsonrpc.error_from(rpc_id if jsonrpc.names_a_request(rpc_id) else None, exc)
                    )
                    continue
            task = asyncio.create_task(self._handle(session, message, shape, principal))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _batch(self, batch: list[Any]) -> list[Any]:
        """A JSON-RPC batch (clients of 2025-03-26 may send them): its members are handled one by
        one, each answered on the stream; bounded like everything a session has in flight."""
        if not batch:
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch")
        if len(batch) > self._limits.max_inflight_per_session:
            limit = self._limits.max_inflight_per_session
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, f"Invalid Request: batch over {limit} items")
        if any(isinstance(m, dict) and m.get("method") == "initialize" for m in batch):
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "Invalid Request: initialize cannot be batched")
        return batch

    async def _handle(
        self, session: ClientSession, message: dict[str, Any], shape: jsonrpc.Shape, principal: Principal
    ) -> None:
        try:
            response = await self._router.handle(session, message, shape, session.standalone, principal)
        except Exception:
            log.exception("request %s failed inside the gateway", message.get("method"))
            response = jsonrpc.error(message.get("id"), jsonrpc.INTERNAL_ERROR, "Internal error in the gateway")
        if response is not None:
            session.standalone.push(response)
        await self._shared.settle(session)


def _events(session: ClientSession, batch: list[tuple[int, dict[str, Any]]]) -> bytes:
    """A batch as the session's SSE ``message`` events."""
    return b"".join(
        sse.encode(jsonrpc.dumps(rendered), event="message")
        for _, m in batch
        if (rendered := session.render(m)) is not None
    )
