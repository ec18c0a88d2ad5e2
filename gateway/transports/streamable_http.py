"""Streamable HTTP front door (MCP legacy era, 2025-03-26 … 2025-11-25): POST, GET and DELETE on one URL.

Written as a raw ASGI app: the decision between a plain JSON answer and an SSE stream is made
*after* the call started. A call that produces nothing but its result is answered as JSON (cheap);
the first progress, log or server-to-client request switches the answer to SSE at once, so nothing
is ever buffered until the end. Every SSE event carries ``<stream>-<seq>`` as its id, so a client
can resume any stream with ``GET`` + ``Last-Event-ID``. The SSE answers themselves are written by
gateway/transports/event_stream.py.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from adapters.mcp import LEGACY_VERSIONS
from adapters.mcp_modern import looks_modern
from gateway import jsonrpc
from gateway.transports.batches import serve_batch
from gateway.transports.coalesce import HOLD_KEY, CoalescingTransport
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
    http_status_of,
    read_body,
    retry_after,
    send_bytes,
    send_rpc_error,
    send_unauthorized,
    text,
    watch_disconnect,
)
from gateway.transports.lean import BODY_KEY, HEADERS_KEY, LeanCycle
from gateway.transports.resume import resume_point
from gateway.transports.streamable_http_modern import ModernExchange
from policies.auth import AuthError
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.channels import Channel
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
    # (_request, or the modern exchange's): no frame of theirs stays on the stack while the call
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
            return self._modern.handle(scope, receive, send, view, message, shape, self._request, table, version_header)
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
        return self._request(scope, receive, send, session, message, [], principal=principal)

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
        await self._request(
            scope, receive, send, session, message, [("mcp-session-id", session.id)], principal=session.principal
        )
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
        await self._request(scope, receive, send, session, message, [], principal=principal)
        await self._shared.settle(session)

    async def _received(
        self, send: Send, session: ClientSession, message: dict[str, Any], shape: jsonrpc.Shape, principal: Principal
    ) -> None:
        """A notification or a response from the client: handled, then acknowledged."""
        await self._router.handle(session, message, shape, session.standalone, principal)
        await send_bytes(send, 202, b"")

    async def _request(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: ClientSession,
        message: dict[str, Any],
        extra: list[tuple[str, str]],
        finish: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None,
        cancel_on_disconnect: bool = False,
        principal: Principal | None = None,
    ) -> None:
        """Run the call in this task. Only if something precedes the result does a writer task
        start an SSE response (at once, so nothing is buffered); otherwise the answer is JSON.

        ``finish`` maps the final response to (HTTP status, response) (the modern era stamps
        results and maps error codes to statuses). With ``cancel_on_disconnect`` a client that
        closes its connection cancels the call (the modern era's only cancellation).
        """
        # Kept for Last-Event-ID only once it streams (_start_streaming): most calls are answered as
        # JSON, and a channel kept per call would push the streams a client may resume out of the window.
        channel = session.new_stream(resumable=False)
        channel.attached = True
        gone: asyncio.Future[None] | None = None
        held: CoalescingTransport | None = None
        me: Any = None  # what the connection holds for this call, or its task (with a disconnect watch)
        cancel: Callable[..., object] | None = None
        if cancel_on_disconnect:
            held = scope.get(HOLD_KEY)
            if held is not None:
                # The gateway's own protocol: the connection cancels the call when the client leaves
                # (no future, no callback per call); released below on every way out. held.hold(), inline.
                if held.is_lost:
                    channel.close()
                    return  # gone already: there is no one to answer
                me = _current_task(held.loop)
                held.held.add(me)
            else:
                me = _current_task(_running_loop())
                assert me is not None
                gone = watch_disconnect(scope, receive)
                cancel = me.cancel
                # The task's own bound method as the callback (no closure per call): the client leaving
                # cancels the call. Taken off again before ``gone`` is cancelled (_forget), so that ending
                # the watch never cancels the call and schedules no callback.
                gone.add_done_callback(cancel)

        # The SSE writer, once something precedes the result (a partial, not a closure: the call's
        # variables stay plain locals rather than cells); it puts its task in ``started``.
        started: list[asyncio.Task[None]] = []
        channel.on_first_push = functools.partial(
            self._start_streaming, started, scope, receive, send, session, channel, extra, gone
        )
        try:
            response = await self._router.handle(session, message, _REQUEST, channel, principal)
        except asyncio.CancelledError:
            if not _client_left(held, me, gone, cancel):
                raise
            channel.close()
            if started:
                started[0].cancel()
            return  # the client left: the call was cancelled, there is no one to answer
        except Exception:
            log.exception("request %s failed inside the gateway", message.get("method"))
            response = jsonrpc.error(message.get("id"), jsonrpc.INTERNAL_ERROR, "Internal error in the gateway")
        finally:
            channel.on_first_push = None
        status = 200
        if response is not None:
            if finish is not None:
                status, response = finish(response)
            elif "error" in response:
                status = http_status_of(response)
            if status == 429 and (retry := retry_after(response)) is not None:
                extra = [*extra, ("retry-after", retry)]
        if not started:
            if held is not None:
                held.held.discard(me)  # held.release(me), inline
            elif gone is not None and cancel is not None:  # _forget, inline
                gone.remove_done_callback(cancel)
                gone.cancel()
            try:
                if response is not None:
                    body = jsonrpc.dumps(response)
                    # answered_now, inline: the lean cycle's answer in one write, without a coroutine.
                    if not (type(send) is LeanCycle and send.respond_now(status, _JSON, body, extra)):
                        await send_bytes(send, status, body, extra=extra)
                else:  # the request ended the session (the draft's exit): nothing to answer but receipt
                    await send_bytes(send, 202, b"", extra=extra)
            except OSError:
                pass  # the client left; the answer has nowhere to go
            finally:
                # After the answer left (off a lone call's critical path): the router has returned,
                # nothing is pushed here any more.
                channel.close()
                channel.attached = False
            return
        writer = started[0]
        if response is not None:
            channel.push(response)
        channel.close()
        try:
            await writer
        except asyncio.CancelledError:
            if not _client_left(held, me, gone, cancel):
                raise
        if held is not None:
            held.release(me)
        elif gone is not None and cancel is not None:
            _forget(gone, cancel)

    def _start_streaming(
        self,
        started: list[asyncio.Task[None]],
        scope: Scope,
        receive: Receive,
        send: Send,
        session: ClientSession,
        channel: Channel,
        extra: list[tuple[str, str]],
        gone: asyncio.Future[None] | None,
    ) -> None:
        """A call's answer becomes an SSE stream, written by its own task, from the first push on."""
        if session.codec.resumable_streams:
            session.keep_stream(channel)
        started.append(asyncio.create_task(self._sse.respond(scope, receive, send, session, channel, extra, gone)))

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


# asyncio.current_task is a Python function in 3.11 (it asks for the running loop, then this table).
_running_loop = asyncio.get_running_loop
_current_task = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]  # the loop -> task table, untyped


def _client_left(
    held: CoalescingTransport | None, me: Any, gone: asyncio.Future[None] | None, cancel: Callable[..., object] | None
) -> bool:
    """After the call's task was cancelled: end the watch, and say whether the client leaving did it.
    True: the task is uncancelled (the call ends quietly, there is no one to answer); False: the
    cancellation came from elsewhere and must propagate."""
    if held is not None:
        held.release(me)
        if not held.is_lost:
            return False
    elif gone is None or not gone.done() or gone.cancelled():
        if gone is not None and cancel is not None:
            _forget(gone, cancel)
        return False
    task = asyncio.current_task()
    assert task is not None  # the call runs in a task
    task.uncancel()
    return True


def _forget(gone: asyncio.Future[None], cancel: Callable[..., object]) -> None:
    """End a disconnect watch whose done callback is ``cancel`` (the call's ``Task.cancel``): the
    callback is taken off first, so that cancelling the watch neither cancels the task nor schedules
    a callback at all."""
    gone.remove_done_callback(cancel)
    gone.cancel()
