"""MCP over WebSocket (subprotocol ``mcp``): one JSON-RPC message per text frame, one session per socket."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from starlette.responses import JSONResponse
from starlette.websockets import WebSocket, WebSocketDisconnect

from gateway.channels import ChannelOverflow, absorb_overflow
from gateway.transports.framed import handle_frame, pump_out
from gateway.transports.http_common import Scope, bearer_challenge
from policies.auth import AuthError

if TYPE_CHECKING:
    from gateway.config import Limits
    from gateway.federation import View
    from gateway.metrics import Metrics
    from gateway.routing import Router
    from gateway.sessions import ClientSession, SessionStore
    from gateway.transports.front_desk import FrontDesk

log = logging.getLogger(__name__)

TRANSPORT = "ws"
_POLICY_VIOLATION = 1008
_TOO_BIG = 1009
_TRY_AGAIN_LATER = 1013


class WebSocketDoor:
    def __init__(
        self,
        view_of: Callable[[Scope], View | None],
        *,
        desk: FrontDesk,
        router: Router,
        sessions: SessionStore,
        limits: Limits,
        metrics: Metrics,
    ) -> None:
        self._view_of = view_of
        self._desk = desk
        self._router = router
        self._sessions = sessions
        self._limits = limits
        self._metrics = metrics

    async def serve(self, ws: WebSocket) -> None:
        view = self._view_of(ws.scope)
        if view is None:
            await ws.close(code=_POLICY_VIOLATION, reason="No such server")
            return
        refusal = self._desk.admit_session(TRANSPORT)
        if not refusal.allowed:
            await ws.close(code=_TRY_AGAIN_LATER, reason=refusal.reason)
            return
        try:
            credentials = self._desk.authenticate(ws.scope)
        except AuthError as exc:
            # Refused before the upgrade: a real 401 where the server can send one, else a close.
            if "websocket.http.response" in ws.scope.get("extensions", {}):
                challenge = bearer_challenge(ws.scope, exc.reason, exc.error)
                await ws.send_denial_response(
                    JSONResponse(
                        {"error": f"Unauthorized: {exc.reason}"},
                        status_code=401,
                        headers={"www-authenticate": challenge},
                    )
                )
            else:
                await ws.close(code=_POLICY_VIOLATION, reason=f"Unauthorized: {exc.reason}")
            return
        offered = ws.scope.get("subprotocols") or []
        await ws.accept(subprotocol="mcp" if "mcp" in offered else None)
        session = self._desk.open_session(TRANSPORT, view, credentials)
        session.standalone.attached = True
        writer = asyncio.create_task(self._write(ws, session))
        tasks: set[asyncio.Task[None]] = set()
        try:
            while True:
                frame = await ws.receive()
                if frame["type"] == "websocket.disconnect":
                    break
                data = frame.get("text")
                if data is None:
                    data = frame.get("bytes") or b""
                if len(data) > self._limits.max_message_bytes:
                    await ws.close(code=_TOO_BIG, reason=f"message exceeds {self._limits.max_message_bytes} bytes")
                    break
                if writer.done():
                    break
                task = asyncio.create_task(handle_frame(self._router, session, data))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        except WebSocketDisconnect:
            pass
        finally:
            for task in tasks:
                task.cancel()
            self._sessions.end(session)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

    async def _write(self, ws: WebSocket, session: ClientSession) -> None:
        channel = session.standalone
        try:
            await pump_out(session, ws.send_text)
            # The session ended on the gateway's side (e.g. the draft's exit): say so.
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await ws.close(code=1000, reason="session ended")
        except (ChannelOverflow, asyncio.CancelledError) as exc:
            if not absorb_overflow(channel, exc):
                raise
            self._metrics.dropped_clients.labels(TRANSPORT).inc()
            log.warning(
                "WebSocket session %s dropped: the client stopped reading with more than %d messages behind",
                session.id[:8],
                self._limits.session_queue,
            )
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await ws.close(code=_TRY_AGAIN_LATER, reason="client too slow")
        except (WebSocketDisconnect, RuntimeError, OSError):
            return
