"""Ordered, bounded streams of messages toward one client, with a log for SSE resumption.

A channel decouples whoever produces messages (backend reader tasks, which must never block) from
the one consumer that writes them to a socket. Each message gets a sequence number; an SSE event id
is ``<channel id>-<seq>``, so ``Last-Event-ID`` names both the stream and the position to resume at.

Bounds: a client is too slow when more than ``max_pending`` messages wait while its writer is
stuck in a send (the socket is full). Then the channel is closed as overflowed and the writer's
blocked send is interrupted (``on_overflow``), so the transport drops the client with a logged
reason. A burst to an attentive client (writer not blocked) is not counted against it, up to
8 x ``max_pending``. While nobody is attached, the channel keeps only the newest ``replay`` messages.

Closing lets the reader drain what is queued before it sees the end; ``finish`` (how a session ends
its channels) also waits for an answer the channel still owes (``owe_answer``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any


class ChannelOverflow(Exception):
    """The consumer fell too far behind."""


class Channel:
    def __init__(self, channel_id: str, max_pending: int, replay: int) -> None:
        self.id = channel_id
        self._max_pending = max_pending
        self._replay = replay
        self._log: deque[tuple[int, dict[str, Any]]] = deque()
        self._next_seq = 1
        self._delivered = 0
        self._wake: asyncio.Event | None = None  # created by the first reader that has to wait
        self.closed = False
        self._owed: tuple[Any] | None = None  # the id of an answer still to come (see owe_answer)
        self._finishing = False
        self.overflowed = False
        self.attached = False
        # Called once, on the first push: lets a front door start streaming only when there is
        # something to stream (see transports/streamable_http.py).
        self.on_first_push: Callable[[], None] | None = None
        # Set by the consumer around a send that may block; see the module docstring.
        self.writing = False
        self.on_overflow: Callable[[], object] | None = None
        # Many replicas (gateway/replicas/shared_sessions.py): a session's stream held by another
        # replica gets what is pushed here while no reader is attached here.
        self.forward: Callable[[dict[str, Any]], None] | None = None
        # ... and the replica holding it records what it queues for its reader (Last-Event-ID anywhere).
        self.record: Callable[[int, dict[str, Any]], None] | None = None

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def push(self, message: dict[str, Any]) -> bool:
        """Queue a message; False if the channel is closed or just overflowed. Never blocks."""
        if self.forward is not None and not self.attached:
            self.forward(message)
        return self.push_local(message)

    def restart_above(self, seq: int) -> None:
        """Number on above ``seq`` with nothing queued (a stream resumed from another replica's history)."""
        self._log.clear()
        self._next_seq = max(self._next_seq, seq + 1)
        self._delivered = self._next_seq - 1

    def recent(self, count: int) -> list[dict[str, Any]]:
        """The latest ``count`` messages still held (newest last)."""
        return [message for _, message in list(self._log)[-count:]]

    def push_local(self, message: dict[str, Any]) -> bool:
        """:meth:`push`, never forwarded (a message another replica forwarded here)."""
        if self.closed:
            return False
        seq = self._next_seq
        self._next_seq += 1
        self._log.append((seq, message))
        if self.record is not None and self.attached:
            self.record(seq, message)
        if seq == 1 and self.on_first_push is not None:
            self.on_first_push()
        if self.attached:
            pending = seq - self._delivered
            if pending > self._max_pending and (self.writing or pending > 8 * self._max_pending):
                self.overflowed = True
                self.close()
                callback, self.on_overflow = self.on_overflow, None
                if callback is not None:
                    callback()
                return False
        else:
            keep = max(self._replay, 1)
            while len(self._log) > keep:
                self._log.popleft()
        self._trim()
        if self._owed is not None and _answers(message, self._owed[0]):
            self._owed = None
            if self._finishing:
                self.close()  # its last message: the reader drains it, then sees the end
                return True
        if self._wake is not None:
            self._wake.set()
        return True

    def _trim(self) -> None:
        # Delivered messages are kept only as far back as the replay window reaches.
        floor = self._delivered - self._replay
        while self._log and self._log[0][0] <= floor:
            self._log.popleft()

    def bind_writer(self) -> None:
        """The current task writes this channel out: an overflow cancels its blocked send."""
        task = asyncio.current_task()
        self.on_overflow = task.cancel if task is not None else None

    def close(self) -> None:
        """No more messages; the reader still gets what is queued, then the end."""
        self.closed = True
        if self._wake is not None:
            self._wake.set()

    def owe_answer(self, rpc_id: Any) -> None:
        """The answer to request ``rpc_id`` is still to be pushed here: :meth:`finish` waits for it.

        A request that ends its own session (the draft's ``exit``) is answered by its door after the
        router returned, that is after the session ended and finished its channels; a door that
        answers elsewhere (an HTTP body) closes the channel itself."""
        self._owed = (rpc_id,)

    def finish(self) -> None:
        """Close now or, if an answer is owed, as soon as it is pushed (it is then the last message)."""
        if self._owed is None:
            self.close()
        else:
            self._finishing = True

    def can_resume(self, after: int) -> bool:
        """Whether every message after ``after`` is still held (or none was ever sent after it)."""
        if after >= self.last_seq:
            return True
        return bool(self._log) and self._log[0][0] <= after + 1

    async def read(self, after: int) -> list[tuple[int, dict[str, Any]]]:
        """Messages after ``after``; waits for one. Empty list: closed with nothing more to give."""
        while True:
            if self.overflowed:
                raise ChannelOverflow(self.id)
            batch = [(seq, msg) for seq, msg in self._log if seq > after]
            if batch:
                self._delivered = max(self._delivered, batch[-1][0])
                self._trim()
                return batch
            if self.closed:
                return []
            if self._wake is None:
                self._wake = asyncio.Event()
            self._wake.clear()
            await self._wake.wait()


def _answers(message: dict[str, Any], rpc_id: Any) -> bool:
    """Whether ``message`` is the answer to request ``rpc_id``."""
    return "id" in message and message["id"] == rpc_id and ("result" in message or "error" in message)


async def guarded_write(channel: Channel, write: Awaitable[Any]) -> None:
    """One write that may block on a full socket: while it blocks, the channel counts as behind,
    and an overflow during it is raised here (see the module docstring)."""
    channel.writing = True
    try:
        await write
    finally:
        channel.writing = False
    if channel.overflowed:
        raise ChannelOverflow(channel.id)


def absorb_overflow(channel: Channel, exc: BaseException) -> bool:
    """Whether ``exc`` is this channel's overflow (possibly as the cancellation of a blocked write);
    if so it is handled, and the writer just stops."""
    if not channel.overflowed:
        return False
    if isinstance(exc, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    return True
