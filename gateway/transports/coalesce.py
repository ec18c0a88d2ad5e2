"""One write syscall per response instead of two.

uvicorn writes the status line and headers, then the body, as separate ``transport.write`` calls.
On loopback each write is a syscall that also runs the receiver's TCP processing, which made it the
largest single cost of a proxied call (ADR 0005). The transport below gathers the writes made in
one event-loop iteration and sends them together on the next: no added latency beyond that
iteration, and SSE events still leave as soon as they are produced. Memory per connection stays
bounded: a large write leaves the coalescing buffer at once, so that flow control (pause_writing)
holds its sender.

It also carries what a connection's requests need of it (the scope keys below): cancel on a lost
connection, a future for that loss, and an abort. The protocol that installs it and holds clients to
the limits is transports/http_protocol.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT

from gateway.write_batch import write_batch

_current_task = asyncio.tasks._current_tasks.get  # type: ignore[attr-defined]  # the loop -> task table, untyped


class CoalescingTransport:
    # Slots: one per client connection, and what it carries beyond writes (the disconnect watchers)
    # lives here rather than in uvicorn's protocol object, whose instance dict would grow for it.
    __slots__ = (
        "_batch",
        "_buffer",
        "_lost_watchers",
        "_scheduled",
        "_transport",
        "close_while_sending",
        "held",
        "is_lost",
        "linger_s",
        "loop",
    )

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self.loop = loop
        self._batch = write_batch(loop)
        self._buffer: list[bytes] = []
        self._scheduled = False
        self.is_lost = False  # a plain attribute (read per request by the door's cancel-on-disconnect)
        self._lost_watchers: list[asyncio.Future[None]] | None = None
        # The tasks to cancel when the connection is lost (hold/release; the Streamable HTTP door's
        # RequestRunner.run adds and discards its task here itself, without the two calls).
        self.held: set[asyncio.Task[Any]] = set()
        # How long a close may wait for unsent bytes to leave (the protocol's response_send_timeout_s).
        self.linger_s = 60.0
        # What closes the connection instead while the client is still sending a request's body (the
        # protocol's lingering close; None otherwise): set and cleared by the protocol, read by close.
        self.close_while_sending: Callable[[], None] | None = None

    # ---- tasks cancelled when the connection is lost (``HOLD_KEY``) ----------------------------
    # What a request that the client's leaving must cancel (the 2026-07-28 wire's only cancellation)
    # registers here, instead of a future and a done-callback per request.

    def hold(self) -> asyncio.Task[Any] | None:
        """Cancel the running task if the connection is lost before :meth:`release`: that task, or
        None (nothing held) if the connection is lost already."""
        if self.is_lost:
            return None
        # The loop's table of running tasks, read directly: asyncio.current_task() asks for the
        # running loop, which costs a getpid() syscall in 3.11.
        task: asyncio.Task[Any] = _current_task(self.loop)
        self.held.add(task)
        return task

    def release(self, task: asyncio.Task[Any]) -> None:
        self.held.discard(task)

    def watch_lost(self) -> asyncio.Future[None]:
        """A future done once the connection is lost (``LOST_KEY``)."""
        watcher: asyncio.Future[None] = self.loop.create_future()
        if self.is_lost:
            watcher.set_result(None)
            return watcher
        watchers = self._lost_watchers
        if watchers is None:
            self._lost_watchers = [watcher]
            return watcher
        if len(watchers) >= 8:
            # A kept-alive connection serves many requests: forget the watchers of finished ones
            # (cancelled by their request), now and then rather than on every request.
            watchers[:] = [w for w in watchers if not w.done()]
        watchers.append(watcher)
        return watcher

    def lost(self) -> None:
        self.is_lost = True
        watchers, self._lost_watchers = self._lost_watchers or [], None
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)
        held, self.held = self.held, set()
        for task in held:
            task.cancel()

    def write(self, data: bytes) -> None:
        # Sent at the end of this loop iteration, with every other connection's writes of the
        # iteration (gateway/write_batch.py): uvicorn's headers and body leave as one.
        self._buffer.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._batch.flush_later(self)
        elif len(data) >= HIGH_WATER_LIMIT:
            # A large piece goes now, with what came before it: the socket's own transport then says
            # at once when it is full (pause_writing), and the sender waits for it to drain, instead of
            # a sender that does not yield piling its whole stream up here (memory stays bounded).
            self.flush()

    def write_whole(self, data: bytes) -> None:
        """A whole response in one piece (the lean cycle's): with nothing of this connection
        buffered it has nothing to be coalesced with, so it goes to the batch as it is, which sends
        it at once while the loop is quiet (gateway/write_batch.py); otherwise as :meth:`write`.
        (Straight to the batch: no flush of this transport's own per response; :meth:`close` sends
        it before closing.)"""
        if self._buffer:
            self.write(data)
        else:
            self._batch.write(self._transport, data)

    def flush(self) -> None:
        self._scheduled = False
        if self._buffer:
            data = b"".join(self._buffer) if len(self._buffer) > 1 else self._buffer[0]
            self._buffer.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        transport = self._transport
        if transport.is_closing():
            # Closed already (by a close or an abort, or by the loss of the connection, after which
            # uvicorn's connection_lost closes once more): nothing can be sent, the first close armed
            # the deadline below if one was due, and a second close is not harmless everywhere.
            # asyncio's SSL transport, closed twice, forgets its protocol, and every later call on it
            # but is_closing() and abort() raises AttributeError (get_write_buffer_size() below did, in
            # connection_lost, on every TLS connection that ended cleanly).
            return
        instead = self.close_while_sending
        if instead is not None:
            self.close_while_sending = None
            instead()
            return
        self._batch.flush_now()  # a whole response given to the batch (write_whole) leaves first
        self.flush()
        transport.close()
        if not self.is_lost and transport.get_write_buffer_size():
            # asyncio closes only once what is buffered has left, and a client that reads nothing
            # would keep the socket for good: past linger_s the close becomes an abort.
            self.loop.call_later(self.linger_s, self.abort_unless_lost)

    def abort_unless_lost(self) -> None:
        """Abort, unless the connection is gone already (a close's deadline: a timer's callback)."""
        if not self.is_lost:
            self._transport.abort()

    def is_closing(self) -> bool:
        # Asked after every response (uvicorn's on_response_complete): spelled out, since __getattr__
        # is reached only after a failed lookup, which costs more than the call.
        return self._transport.is_closing()

    # The rest of asyncio's Transport, spelled out rather than reached through ``__getattr__``: a class
    # with ``__getattr__`` has every attribute read go through its hook (the interpreter cannot
    # specialize them), ~300 instructions each, and the door reads ``held``, ``is_lost`` and ``loop``
    # per 2026-07-28 request (~1.2k instructions a request). uvicorn hands this wrapper to the
    # WebSocket protocol on an upgrade, so the whole interface is here.

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._transport.get_write_buffer_limits()

    def writelines(self, list_of_data: Any) -> None:
        self.write(b"".join(list_of_data))  # behind what is buffered, as the writes it stands for

    def can_write_eof(self) -> bool:
        return self._transport.can_write_eof()

    def write_eof(self) -> None:
        self._batch.flush_now()
        self.flush()  # what was written before the end goes first
        self._transport.write_eof()

    def abort(self) -> None:
        self._transport.abort()  # (what is buffered is dropped, as an abort drops the socket's own buffer)


ABORT_KEY = "switchboard.abort"
# A scope's ``LOST_KEY`` makes a future that resolves when the client's connection is lost: what a
# task blocked on ``receive()`` would learn, without a task per request (gateway/transports/http_common.py).
LOST_KEY = "switchboard.lost"
# A scope's ``HOLD_KEY`` is the connection's CoalescingTransport: ``hold()`` has the running task
# cancelled when the client's connection is lost, ``release(task)`` ends that (transports/streamable_http.py).
HOLD_KEY = "switchboard.hold"
