"""How the Streamable HTTP door runs one request on a session and answers it: JSON, or SSE from the
first thing that precedes the result (MCP 2025-11-25 "Streamable HTTP"; both eras' POSTs come here).

The decision between a plain JSON answer and an SSE stream is made *after* the call started. A call
that produces nothing but its result is answered as JSON (cheap); the first progress, log or
server-to-client request switches the answer to SSE at once (a writer task, gateway/transports/
event_stream.py), so nothing is ever buffered until the end. A stream is kept for ``Last-Event-ID``
only once it streams.

Invariants: every request gets an answer, unless its client left (then the call is cancelled and
nothing is written); a call that ends in an exception inside the gateway is answered with -32603;
with ``cancel_on_disconnect`` (the 2026-07-28 era's only cancellation) the client's leaving cancels
the call, through the connection's registry of held tasks (``HOLD_KEY``) when the gateway's own HTTP
protocol serves it, else through a disconnect watch; no frame of the door's stays on the stack while
the call runs.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway import jsonrpc
from gateway.transports.coalesce import HOLD_KEY, CoalescingTransport
from gateway.transports.http_common import (
    Receive,
    Scope,
    Send,
    http_status_of,
    retry_after,
    send_bytes,
    watch_disconnect,
)
from gateway.transports.lean import LeanCycle
from policies.principal import Principal

if TYPE_CHECKING:
    from gateway.channels import Channel
    from gateway.routing import Router
    from gateway.sessions import ClientSession
    from gateway.transports.event_stream import EventStreamWriter

log = logging.getLogger(__name__)

_JSON = b"application/json"
# A module global: ``jsonrpc.Shape.REQUEST`` per request went through the enum metaclass's __getattr__
# hook (~200 ns each in 3.11).
_REQUEST = jsonrpc.Shape.REQUEST


class RequestRunner:
    """``run``: one request through the router, answered (the door's and the 2026-07-28 exchange's
    ``RunRequest``, gateway/transports/streamable_http_modern.py)."""

    def __init__(self, router: Router, sse: EventStreamWriter) -> None:
        self._router = router
        self._sse = sse  # the answers that become SSE streams

    async def run(
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
