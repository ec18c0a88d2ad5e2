"""Streamable HTTP front door (MCP legacy era, 2025-03-26 … 2025-11-25): POST, GET and DELETE on one URL.

Written as a raw ASGI app. A request is run and answered by gateway/transports/request_runner.py:
as JSON, or as an SSE stream from the first thing that precedes the result (nothing is buffered).
Every SSE event carries ``<stream>-<seq>`` as its id, so a client can resume any stream with ``GET`` +
``Last-Event-ID``. The SSE answers themselves are written by gateway/transports/event_stream.py.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from adapters.mcp import LEGACY_VERSIONS
from adapters.mcp_modern import looks_modern
from gateway import jsonrpc
from gateway.transports.batches import serve_batch
from gateway.transports.event_stream import TRANSPORT as TRANSPORT, EventStreamWriter
from gateway.transports.http_common import (
    BodyTooLarge,
    ClientGone,
    Receive,
    Scope,
    Send,
    accepts,
    header,
    headers_of,
    read_body,
    send_bytes,
    send_rpc_error,
    send_unauthorized,
    text,
    watch_disconnect,
)
from gateway.transports.lean import BODY_KEY, HEADERS_KEY
from gateway.transports.request_runner import RequestRunner
from gateway.transports.resume import resume_point
from gateway.transports.streamable_http_modern import ModernExchange
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

_ACCEPT_BOTH = b"application/json, text/event-stream"  # what the SDK clients send
_JSON = b"application/json"
# A module global: ``jsonrpc.Shape.REQUEST`` per request went through the enum metaclass's __getattr__
# hook (~200 ns each in 3.11, two or three times per request).
_REQUEST = jsonrpc.Shape.REQUEST


class StreamableHttpDoor:
    def __init__(
        self,
        view_of: Callable[[Scope], View | None],
        *,
        desk: FrontDesk,
        router: Router,
        sessions: SessionStore,
        limits: Limits,
        metrics: Metrics,
        modern: ModernExchange,
        shared: SessionSharing,
    ) -> None:
        self._view_of = view_of
        self._desk = desk
        self._router = router
        self._sessions = sessions
        self._limits = limits
        self._metrics = metrics
        self._sse = EventStreamWriter(limits, metrics)  # the answers that are SSE streams (event_stream.py)
        # A request run and answered, JSON or SSE (request_runner.py); the bound method kept: one lookup a request.
        self._run = RequestRunner(router, self._sse).run
        self._modern = modern  # the 2026-07-28 era's requests (streamable_http_modern.py)
        self._shared = shared  # sessions other replicas may serve too (gateway/replicas/)
        # One replica: a session is found without waiting and nothing is shared after a request.
        self._find_now: Callable[[str], ClientSession | None] | None = getattr(shared, "find_now", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.dispatch(scope, receive, send)

    def dispatch(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """``__call__`` without a coroutine frame of its own (gateway/app.py FastPath awaits it):
        the awaitable that answers the request."""
        if scope["type"] != "http":
            return _nothing()
        view = self._view_of(scope)
        if view is None:
            return send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "No such server")
        method = scope["method"]
        if method == "POST":
            return self._post(scope, receive, send, view)
        if method in ("GET", "DELETE") and not header(scope, b"mcp-session-id"):
            version = header(scope, b"mcp-protocol-version")
            if version is not None and looks_modern(version, None):
                # The modern era is POST only: no standalone stream, no session to delete.
                return send_rpc_error(
                    send, 405, jsonrpc.INVALID_REQUEST, "Method Not Allowed", extra=[("allow", "POST")]
                )
        if method == "GET":
            return self._get(scope, receive, send, view)
        if method == "DELETE":
            return self._delete(scope, send, view)
        return send_rpc_error(
            send,
            405,
            jsonrpc.INVALID_REQUEST,
            "Method Not Allowed",
            extra=[("allow", "GET, POST, DELETE")],
        )

    def post(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        """:meth:`dispatch` of a request known to be an HTTP POST (the lean cycle's: gateway/app.py)."""
        view = self._view_of(scope)
        if view is None:
            return send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "No such server")
        return self._post(scope, receive, send, view)

    # ---- helpers -----------------------------------------------------------------------------

    async def _session(
        self, scope: Scope, send: Send, view: View, read: tuple[str | None, str | None] | None = None
    ) -> tuple[ClientSession, Principal] | None:
        """The request's session and its sender, held to the credential this request presents.

        ``read``: the Mcp-Session-Id and MCP-Protocol-Version headers, if the caller has them already."""
        session_id, version = read if read is not None else (header(scope, b"mcp-session-id"), None)
        if not session_id:
            await send_rpc_error(send, 400, jsonrpc.INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required")
            return None
        if read is None:
            version = header(scope, b"mcp-protocol-version")
        found = self._admit(scope, send, view, await self._shared.find(session_id), version)
        if isinstance(found, tuple):
            return found
        await found
        return None

    def _admit(
        self, scope: Scope, send: Send, view: View, session: ClientSession | None, version: str | None
    ) -> tuple[ClientSession, Principal] | Awaitable[None]:
        """A found session held to this request (its view, its credential, its protocol version):
        the session and its sender, or the refusal to await."""
        if session is None or session.view is not view or session.transport != TRANSPORT:
            return send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "Session not found")
        try:
            principal = self._desk.caller_of(session, scope)
        except AuthError as exc:
            return send_unauthorized(send, scope, exc.reason, exc.error)
        if version is not None and version != session.protocol_version and version not in LEGACY_VERSIONS:
            return send_rpc_error(send, 400, jsonrpc.INVALID_REQUEST, f"Unsupported MCP-Protocol-Version: {version}")
        return session, principal

    # ---- POST --------------------------------------------------------------------------------
    # Plain functions that return what answers the request, down to the call's own coroutine
    # (RequestRunner.run, or the modern exchange's): no frame of theirs stays on the stack while the call
    # runs, and every wake-up of the call passes one frame less (issue 15).

    def _post(self, scope: Scope, receive: Receive, send: Send, view: View) -> Awaitable[None]:
        # The headers read once; the usual values of Content-Type and Accept pass without parsing.
        # headers_of, inline: the lean cycle's table (transports/lean.py), else made once here.
        table: dict[bytes, bytes] | None = scope.get(HEADERS_KEY)
        if table is None:
            table = headers_of(scope)
        raw_type = table.get(b"content-type")
        if raw_type != b"application/json" and (
            (raw_type or b"").decode("latin-1").split(";")[0].strip().lower() != "application/json"
        ):
            return send_rpc_error(send, 415, jsonrpc.INVALID_REQUEST, "Content-Type must be application/json")
        if table.get(b"accept") != _ACCEPT_BOTH and not accepts(scope, "application/json", "text/event-stream"):
            return send_rpc_error(
                send, 406, jsonrpc.INVALID_REQUEST, "Accept must list application/json and text/event-stream"
            )
        body: bytes | None = scope.pop(BODY_KEY, None)  # body_at_hand, inline
        if body is None:
            return self._read_post(scope, receive, send, view, table)
        return self._posted(scope, receive, send, view, table, body)

    async def _read_post(
        self, scope: Scope, receive: Receive, send: Send, view: View, table: dict[bytes, bytes]
    ) -> None:
        """A POST whose body the server did not read before the app started: read it, then answer."""
        try:
            body = await read_body(receive, self._limits.max_body_bytes, text(table.get(b"content-length")))
        except BodyTooLarge:
            await send_rpc_error(
                send,
                413,
                jsonrpc.INVALID_REQUEST,
                f"Request body exceeds {self._limits.max_body_bytes} bytes",
            )
            return
        except ClientGone:
            return
        await self._posted(scope, receive, send, view, table, body)

    def _posted(
        self, scope: Scope, receive: Receive, send: Send, view: View, table: dict[bytes, bytes], body: bytes
    ) -> Awaitable[None]:
        """The answer to a POST's body."""
        try:
            message = jsonrpc.loads(body)
        except jsonrpc.RpcError as exc:
            return send_rpc_error(send, 400, exc.code, exc.message)
        if isinstance(message, list):
            find_session = functools.partial(self._session, scope, send, view)
            return serve_batch(send, message, self._limits.max_inflight_per_session, find_session, self._router)
        try:
            shape = jsonrpc.classify(message)
        except jsonrpc.RpcError as exc:
            rpc_id = message.get("id") if isinstance(message, dict) else None
            return send_rpc_error(send, 400, exc.code, exc.message, rpc_id if jsonrpc.valid_id(rpc_id) else None)
        # text(), inline (two calls less per request).
        raw = table.get(b"mcp-protocol-version")
        version_header = raw.decode("latin-1") if raw is not None else None
        raw = table.get(b"mcp-session-id")
        session_id = raw.decode("latin-1") if raw is not None else None
        is_initialize = shape is _REQUEST and message["method"] == "initialize"
        if not session_id and (
            # initialize selects the legacy era, unless it comes dressed as a modern request.
            looks_modern(version_header, None) if is_initialize else looks_modern(version_header, message)
        ):
            return self._modern.handle(scope, receive, send, view, message, shape, self._run, table, version_header)
        if is_initialize:
            return self._initialize(scope, receive, send, view, message, session_id)
        if self._find_now is None or not session_id:
            return self._on_session(scope, receive, send, view, message, shape, session_id, version_header)
        # One replica: the session is at hand and nothing is shared after the request (LocalSessions).
        found = self._admit(scope, send, view, self._find_now(session_id), version_header)
        if not isinstance(found, tuple):
            return found
        session, principal = found
        if shape is not _REQUEST:
            return self._received(send, session, message, shape, principal)
        return self._run(scope, receive, send, session, message, [], principal=principal)

    async def _initialize(
        self, scope: Scope, receive: Receive, send: Send, view: View, message: dict[str, Any], session_id: str | None
    ) -> None:
        if session_id:
            await send_rpc_error(
                send,
                400,
                jsonrpc.INVALID_REQUEST,
                "initialize must not carry a session id",
                message["id"],
            )
            return
        refusal = self._desk.admit_session(TRANSPORT)
        if not refusal.allowed:
            await send_rpc_error(send, 503, refusal.code, refusal.reason, message["id"])
            return
        try:
            credentials = self._desk.authenticate(scope)
        except AuthError as exc:
            await send_unauthorized(send, scope, exc.reason, exc.error, message["id"])
            return
        session = self._desk.open_session(TRANSPORT, view, credentials)
        await self._run(
            scope, receive, send, session, message, [("mcp-session-id", session.id)], principal=session.principal
        )
        if session.protocol_version is None:
            # The initialize was refused (invalid params, a policy's denial): no session is left behind to
            # count against the limits until it idles out; the id its answer carried names nothing (404).
            self._sessions.end(session)
            return
        await self._shared.settle(session)

    async def _on_session(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        view: View,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        session_id: str | None,
        version_header: str | None,
    ) -> None:
        """A request or notification on a session that may live on other replicas too."""
        found = await self._session(scope, send, view, (session_id, version_header))
        if found is None:
            return
        session, principal = found
        if shape is not _REQUEST:
            await self._router.handle(session, message, shape, session.standalone, principal)
            await self._shared.settle(session)  # shared before the client hears it was taken
            await send_bytes(send, 202, b"")
            return
        await self._run(scope, receive, send, session, message, [], principal=principal)
        await self._shared.settle(session)

    async def _received(
        self, send: Send, session: ClientSession, message: dict[str, Any], shape: jsonrpc.Shape, principal: Principal
    ) -> None:
        """A notification or a response from the client: handled, then acknowledged."""
        await self._router.handle(session, message, shape, session.standalone, principal)
        await send_bytes(send, 202, b"")

    # ---- GET ---------------------------------------------------------------------------------

    async def _get(self, scope: Scope, receive: Receive, send: Send, view: View) -> None:
        if not accepts(scope, "text/event-stream"):
            await send_rpc_error(send, 406, jsonrpc.INVALID_REQUEST, "Accept must list text/event-stream")
            return
        found = await self._session(scope, send, view)
        if found is None:
            return
        session = found[0]
        last_event_id = header(scope, b"last-event-id")
        point = await resume_point(session, last_event_id, self._shared)
        if point is None:
            await send_rpc_error(send, 404, jsonrpc.INVALID_REQUEST, "Cannot resume: unknown or expired event id")
            return
        channel, after, missed = point
        if channel.attached:
            await send_rpc_error(send, 409, jsonrpc.INVALID_REQUEST, "Conflict: this stream already has a reader")
            return
        channel.attached = True
        gone = watch_disconnect(scope, receive)
        try:
            async with self._shared.holding(session):
                for message in missed:
                    channel.push_local(message)  # numbered on above the history: recorded again, sent below
                await self._sse.start_get(send, session, channel, after, bool(last_event_id))
                # Awaited here, not inside start_get: an idle stream holds one coroutine frame less.
                await self._sse.stream(scope, send, session, channel, after, None, gone)
        finally:
            channel.attached = False
            gone.cancel()

    # ---- DELETE ------------------------------------------------------------------------------

    async def _delete(self, scope: Scope, send: Send, view: View) -> None:
        found = await self._session(scope, send, view)
        if found is None:
            return
        await self._shared.ended(found[0])
        self._sessions.end(found[0])
        await send_bytes(send, 200, b"")


async def _nothing() -> None:
    return None
