"""A lean request cycle for plain POSTs to the MCP doors (issue 15): uvicorn's cycle minus what they never use.

The gateway's protocol (transports/http_protocol.py) gives this cycle, instead of uvicorn's
``RequestResponseCycle``, to a keep-alive HTTP/1.1 ``POST`` to an exact door path (no query) with a
``Content-Length`` body within ``limits.max_body_bytes``, no ``Expect``, no ``Transfer-Encoding``, no
``Connection: close``, no upgrade and no repeated header. Everything else keeps uvicorn's cycle.

What it saves, per request: the ``asyncio.Event`` (the cycle is its own ``message_event``; a real
event is made only if someone waits), the ``receive()`` round for the body (the body, whole, is in
the scope under ``BODY_KEY`` when the app starts), the header scans (the protocol's table of them is
in the scope under ``HEADERS_KEY``), and, for a fixed response (:meth:`LeanCycle.respond`, used by
``http_common.send_bytes`` and, without a coroutine, ``http_common.answered_now`` and the Streamable
HTTP door), the two ASGI message dicts, the per-header checks of fixed headers and one of the two
writes.

Invariants, the same as uvicorn's cycle (its ``send`` is inherited and serves every other message,
so streaming answers, errors and chunked responses are uvicorn's own code):
- the request's task is in uvicorn's ``server_state.tasks`` from its start until ``run_asgi`` ends
  (graceful shutdown waits on that set), without a done-callback per task;
- the app starts only once the whole body arrived; a client gone before that gets no app call;
- ``receive()`` gives the body once (unless the app took it from the scope), then waits until the
  response completed or the client left, and says ``http.disconnect``;
- a response waits for the socket to drain when the transport paused writing (flow control), and
  is dropped silently once the client left;
- pipelining, keep-alive and ``Connection: close`` work through uvicorn's protocol as before: the
  cycle has the attributes it reads (``response_complete``, ``disconnected``, ``keep_alive``, ...).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from uvicorn._types import ASGI3Application, ASGIReceiveEvent, HTTPScope
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE, RequestResponseCycle

BODY_KEY = "switchboard.body"  # the whole request body (bytes), for whoever takes it first
HEADERS_KEY = "switchboard.headers"  # lowercase name -> raw value (http_common.header's table)
# Set (to the HEADERS_KEY table) only when no header name repeats: the table then is the whole truth,
# and the Host/Origin rule (transports/origin.py) may read it instead of scanning the list.
UNIQUE_HEADERS_KEY = "switchboard.unique_headers"

log = logging.getLogger("uvicorn.error")


# asyncio.current_task is a Python function in 3.11 (it asks for the running loop, then this table).
_current_task = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]  # the loop -> task table, untyped


def _noop() -> None:
    return None


_heads: dict[tuple[int, bytes], bytes] = {}
_heads_for: list[list[tuple[bytes, bytes]]] = [[]]


def _head(status: int, content_type: bytes, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """Status line, uvicorn's default headers (Date, each second a new list), Content-Type and the
    name of Content-Length: the same bytes for every response of a second, so made once."""
    if _heads_for[0] is not default_headers or len(_heads) > 64:
        _heads.clear()
        _heads_for[0] = default_headers
    head = _heads.get((status, content_type))
    if head is None:
        parts = [STATUS_LINE[status]]
        for name, value in default_headers:
            parts += (name, b": ", value, b"\r\n")
        parts += (b"content-type: ", content_type, b"\r\ncontent-length: ")
        head = _heads[(status, content_type)] = b"".join(parts)
    return head


class LeanCycle(RequestResponseCycle):
    """One request/response on a connection; see the module docstring."""

    # What every request starts with, as class attributes: an instance gets its own on first write.
    logger = log
    access_logger = log
    access_log = False  # the gateway runs uvicorn with access_log=False (gateway/cli.py)
    disconnected = False
    waiting_for_100_continue = False
    more_body = True
    response_started = False
    response_complete = False
    chunked_encoding: bool | None = None
    expected_content_length = 0
    _event: asyncio.Event | None = None

    def __init__(
        self,
        scope: HTTPScope,
        transport: asyncio.Transport,
        flow: FlowControl,
        default_headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        on_response: Callable[[], None],
        tasks: set[asyncio.Task[None]] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        # With the class attributes above, every attribute uvicorn's RequestResponseCycle.send and
        # HttpToolsProtocol read; its __init__ is not called (it makes an asyncio.Event per request).
        self.scope = scope
        self.transport = transport
        self.flow = flow
        self.default_headers = default_headers
        self.on_response = on_response
        self.keep_alive = keep_alive
        self.body = bytearray()  # per instance: on_body extends it in place
        # uvicorn's set of request tasks (server_state.tasks: shutdown waits on it); run_asgi leaves it
        # itself at its end, where uvicorn adds a done-callback (a loop callback per request).
        self._tasks = tasks
        self._loop = loop  # for the current task: asyncio.get_running_loop() costs a getpid() syscall in 3.11

    # ---- message_event ------------------------------------------------------------------------

    @property
    def message_event(self) -> LeanCycle:  # type: ignore[override]  # uvicorn's Event attribute; read-only: nothing assigns it
        """The cycle stands in for uvicorn's per-request ``asyncio.Event`` (see :meth:`set`). A
        property, not ``self.message_event = self``: that reference cycle made every finished request
        garbage for the cyclic collector (8 containers a call, 3 ms pauses every ~100 calls at c=64)."""
        return self

    def set(self) -> None:
        """uvicorn's protocol and send call ``message_event.set()`` on body, end of body, response
        completion and connection loss; the cycle stands in for that event and wakes a real one
        only if a waiter made it."""
        if self._event is not None:
            self._event.set()

    async def _wait(self) -> None:
        event = self._event
        if event is None:
            event = self._event = asyncio.Event()
        await event.wait()
        event.clear()

    # ---- running the app ----------------------------------------------------------------------

    async def run_asgi(self, app: ASGI3Application) -> None:
        try:
            while self.more_body and not self.disconnected:
                self.flow.resume_reading()  # as uvicorn's receive() does before it waits
                await self._wait()
            if self.disconnected:
                return  # gone before its body was whole: uvicorn's app would read http.disconnect and stop
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]  # a plain dict at runtime
            scope[BODY_KEY] = bytes(self.body)
            self.body = bytearray()
            result = await app(self.scope, self.receive, self)  # type: ignore[func-returns-value]  # as uvicorn checks
        except BaseException as exc:
            self.logger.error("Exception in ASGI application\n", exc_info=exc)
            if not self.response_started:
                await self.send_500_response()
            else:
                self.transport.close()
        else:
            if result is not None:
                self.logger.error("ASGI callable should return None, but returned '%s'.", result)
                self.transport.close()
            elif not self.response_started and not self.disconnected:
                self.logger.error("ASGI callable returned without starting response.")
                await self.send_500_response()
            elif not self.response_complete and not self.disconnected:
                self.logger.error("ASGI callable returned without completing response.")
                self.transport.close()
        finally:
            self.on_response = _noop
            if self._tasks is not None:
                self._tasks.discard(_current_task(self._loop))

    async def receive(self) -> ASGIReceiveEvent:
        body = self.scope.pop(BODY_KEY, None)  # type: ignore[misc]  # a plain dict at runtime
        if body is not None:
            return {"type": "http.request", "body": body, "more_body": False}
        while not self.disconnected and not self.response_complete:
            await self._wait()
        return {"type": "http.disconnect"}

    # The cycle is the app's ``send`` too (uvicorn's, inherited), so that http_common.send_bytes can
    # recognise it and take respond() instead.
    __call__ = RequestResponseCycle.send

    # ---- the whole response in one write ------------------------------------------------------

    async def respond(self, status: int, content_type: bytes, body: bytes, extra: Iterable[tuple[str, str]]) -> None:
        """``http.response.start`` + one ``http.response.body`` with a Content-Length, as one write."""
        if not self.respond_now(status, content_type, body, extra):
            await self.flow.drain()
            self.respond_now(status, content_type, body, extra, drained=True)

    def respond_now(
        self, status: int, content_type: bytes, body: bytes, extra: Iterable[tuple[str, str]], drained: bool = False
    ) -> bool:
        """:meth:`respond` without a coroutine: False (nothing done) if it must first wait for the
        socket to drain (flow control, as uvicorn's send waits)."""
        if self.flow.write_paused and not self.disconnected and not drained:
            return False
        if self.disconnected:
            return True  # dropped, as uvicorn's send drops what comes after a disconnect
        if self.response_started:
            raise RuntimeError("Unexpected response: one already started.")
        # The head of this second's answers, looked up here rather than in a call to _head.
        head = _heads.get((status, content_type)) if _heads_for[0] is self.default_headers else None
        if head is None:
            head = _head(status, content_type, self.default_headers)
        parts = [head, b"%d" % len(body), b"\r\n"]
        close_sent = False
        for key, text in extra:
            name, value = key.lower().encode(), text.encode()
            # The checks uvicorn makes of every header; the fixed ones above need none.
            if HEADER_RE.search(name):
                raise RuntimeError("Invalid HTTP header name.")
            if HEADER_VALUE_RE.search(value):
                raise RuntimeError("Invalid HTTP header value.")
            if name == b"connection" and b"close" in (t.strip() for t in value.lower().split(b",")):
                self.keep_alive = False
                close_sent = True
            parts += (name, b": ", value, b"\r\n")
        if not self.keep_alive and not close_sent:
            parts.append(b"connection: close\r\n")
        parts += (b"\r\n", body)
        self.response_started = True  # only now: a refused header above leaves a 500 possible
        # Whole responses may leave at once on a quiet loop (gateway/write_batch.py; CoalescingTransport.write_whole).
        transport = self.transport
        try:
            write = transport.write_whole  # type: ignore[attr-defined]  # the gateway's CoalescingTransport
        except AttributeError:
            write = transport.write
        write(b"".join(parts))
        self.response_complete = True
        if self._event is not None:  # set(), inline: a waiter only if someone read receive() meanwhile
            self._event.set()
        if not self.keep_alive:
            self.transport.close()
        self.on_response()
        return True
