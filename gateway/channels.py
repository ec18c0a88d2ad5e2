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

Idle cost (issue 15: 10,000 idle SSE streams in one process): a channel nobody pushes to holds no
queue and no event (both are made on first use), and a reader waiting for its next batch, a
disconnect or its keep-alive (:meth:`Channel.next_batch`) holds one future: no task of its own, no
``asyncio.wait``, no timer of its own (the loop's one :class:`KeepAliveWheel` wakes it).
"""

from __future__ import annotations

import asyncio
import heapq
import math
from collections.abc import Awaitable, Callable
from typing import Any

Batch = list[tuple[int, dict[str, Any]]]


class ChannelOverflow(Exception):
    """The consumer fell too far behind."""


class Channel:
    # Slots: one of these per session and per kept stream, most of them idle (see the module docstring).
    __slots__ = (
        "_delivered",
        "_finishing",
        "_log",
        "_max_pending",
        "_next_seq",
        "_others",
        "_owed",
        "_replay",
        "_waiter",
        "attached",
        "closed",
        "forward",
        "id",
        "on_first_push",
        "on_overflow",
        "overflowed",
        "record",
        "writing",
    )

    def __init__(self, channel_id: str, max_pending: int, replay: int) -> None:
        self.id = channel_id
        self._max_pending = max_pending
        self._replay = replay
        # (seq, message), seqs consecutive. A list: an empty deque alone is 760 bytes (an empty list
        # 56), and most channels hold nothing or a message or two.
        self._log: list[tuple[int, dict[str, Any]]] = []
        self._next_seq = 1
        self._delivered = 0
        # What the one waiting reader awaits (True: its keep-alive is due); None while nobody waits.
        self._waiter: asyncio.Future[bool] | None = None
        self._others: list[asyncio.Future[bool]] | None = None  # readers beyond the one (never, normally)
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
        return [message for _, message in self._log[-count:]]

    def push_local(self, message: dict[str, Any]) -> bool:
        """:meth:`push`, never forwarded (a message another replica forwarded here)."""
        if self.closed:
            return False
        seq = self._next_seq
        self._next_seq += 1
        log = self._log
        log.append((seq, message))
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
            if len(log) > keep:
                del log[: len(log) - keep]
        self._trim()
        if self._owed is not None and _answers(message, self._owed[0]):
            self._owed = None
            if self._finishing:
                self.close()  # its last message: the reader drains it, then sees the end
                return True
        self._wake()
        return True

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(False)
        if self._others is not None:
            for other in self._others:
                if not other.done():
                    other.set_result(False)

    def _trim(self) -> None:
        # Delivered messages are kept only as far back as the replay window reaches.
        floor = self._delivered - self._replay
        log = self._log
        if log and log[0][0] <= floor:
            # One slice, not one pop per message: the front of a list is not a deque's.
            drop = 1
            while drop < len(log) and log[drop][0] <= floor:
                drop += 1
            del log[:drop]

    def bind_writer(self) -> None:
        """The current task writes this channel out: an overflow cancels its blocked send."""
        task = asyncio.current_task()
        self.on_overflow = task.cancel if task is not None else None

    def close(self) -> None:
        """No more messages; the reader still gets what is queued, then the end."""
        self.closed = True
        self._wake()

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

    async def read(self, after: int) -> Batch:
        """Messages after ``after``; waits for one. Empty list: closed with nothing more to give."""
        while True:
            batch = self._take(after)
            if batch is not None:
                return batch
            waiter, key = self._wait(None)
            try:
                await waiter
            finally:
                self._unwait(waiter, key)

    async def next_batch(
        self, after: int, keepalive: float | None = None, gone: asyncio.Future[Any] | None = None
    ) -> Batch | None:
        """What a stream writes next: messages after ``after``; [] when the channel ended (see
        :attr:`closed`) or when ``keepalive`` seconds passed without one; None once ``gone`` (the
        client's disconnect) is done. Messages win over the end, the end over a disconnect."""
        watching = gone is not None and not gone.done()
        if watching:
            assert gone is not None
            gone.add_done_callback(self._gone)
        try:
            while True:
                batch = self._take(after)
                if batch is not None:
                    return batch
                if gone is not None and gone.done():
                    return None
                waiter, key = self._wait(keepalive)
                try:
                    if await waiter:
                        return []
                finally:
                    self._unwait(waiter, key)
        finally:
            if watching:
                assert gone is not None
                gone.remove_done_callback(self._gone)  # bound methods compare equal: this one goes

    def _gone(self, _gone: asyncio.Future[Any]) -> None:
        self._wake()

    def _take(self, after: int) -> Batch | None:
        """Messages after ``after``, [] if closed with nothing more, None if there is nothing yet."""
        if self.overflowed:
            raise ChannelOverflow(self.id)
        log = self._log
        if log and log[-1][0] > after:
            batch = [(seq, msg) for seq, msg in log if seq > after]
            self._delivered = max(self._delivered, batch[-1][0])
            self._trim()
            return batch
        return [] if self.closed else None

    def _wait(self, keepalive: float | None) -> tuple[asyncio.Future[bool], int]:
        """A future resolved by a push, the end, or (True) ``keepalive`` seconds; its wheel key.
        Awaited by the caller (one coroutine frame less per idle stream), then :meth:`_unwait`."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        # One reader at a time is the rule (the one consumer); a second one still gets woken.
        if self._waiter is None:
            self._waiter = waiter
        else:
            if self._others is None:
                self._others = []
            self._others.append(waiter)
        key = KeepAliveWheel.of(loop).add(waiter, keepalive) if keepalive is not None else 0
        return waiter, key

    def _unwait(self, waiter: asyncio.Future[bool], key: int) -> None:
        if key:
            KeepAliveWheel.of(asyncio.get_running_loop()).discard(waiter, key)
        if self._waiter is waiter:
            self._waiter = None
        elif self._others is not None:
            self._others.remove(waiter)
            if not self._others:
                self._others = None


class KeepAliveWheel:
    """One timer per event loop for every waiting reader's keep-alive: readers' futures are filed
    by due time in buckets of ``TICK`` seconds, and the loop's one timer handle is set for the
    earliest bucket only. 10,000 idle streams thus hold no timer handle each and wake the loop once
    per bucket (at most 1/``TICK`` times a second), not once per stream. A keep-alive is at most
    ``TICK`` late. A reader woken earlier (a message came) takes its future out of its bucket."""

    TICK = 0.05
    # Not a WeakKeyDictionary: a wheel refers to its loop (its timer handle does), which would keep
    # the key alive. The wheels of closed loops (tests make many) go when the next loop gets one.
    _wheels: dict[asyncio.AbstractEventLoop, KeepAliveWheel] = {}

    __slots__ = ("_armed", "_buckets", "_handle", "_keys", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._buckets: dict[int, set[asyncio.Future[bool]]] = {}
        self._keys: list[int] = []  # a heap of the buckets' keys
        self._handle: asyncio.TimerHandle | None = None
        self._armed = 0  # the key the handle fires for (0: none)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> KeepAliveWheel:
        wheel = cls._wheels.get(loop)
        if wheel is None:
            for closed in [other for other in cls._wheels if other.is_closed()]:
                del cls._wheels[closed]
            wheel = cls._wheels[loop] = cls(loop)
        return wheel

    def add(self, waiter: asyncio.Future[bool], delay: float) -> int:
        """Resolve ``waiter`` with True in ``delay`` seconds (if nothing did before); its bucket's key."""
        key = math.ceil((self._loop.time() + delay) / self.TICK)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = set()
            heapq.heappush(self._keys, key)
            if not self._armed or key < self._armed:
                self._arm(key)
        bucket.add(waiter)
        return key

    def __len__(self) -> int:
        """Waiters filed."""
        return sum(len(bucket) for bucket in self._buckets.values())

    def discard(self, waiter: asyncio.Future[bool], key: int) -> None:
        bucket = self._buckets.get(key)
        if bucket is not None:
            bucket.discard(waiter)  # an emptied bucket stays filed until its time (one key per tick at most)

    def _arm(self, key: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed = key
        self._handle = self._loop.call_at(key * self.TICK, self._fire)

    def _fire(self) -> None:
        self._handle, self._armed = None, 0
        # A timer may fire a hair early (the loop's clock resolution): that much early counts as due.
        now = self._loop.time() + 0.002
        keys, buckets = self._keys, self._buckets
        while keys and keys[0] * self.TICK <= now:
            for waiter in buckets.pop(heapq.heappop(keys)):
                if not waiter.done():
                    waiter.set_result(True)
        if keys:
            self._arm(keys[0])


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
