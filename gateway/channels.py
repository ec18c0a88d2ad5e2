"""Ordered, bounded streams of messages toward one client, with a log for SSE resumption.

A channel decouples whoever produces messages (backend reader tasks, which must never block) from
the one consumer that writes them to a socket. Each message gets a sequence number; an SSE event id
is ``<channel id>-<seq>``, so ``Last-Event-ID`` names both the stream and the position to resume at.

Bounds: while a consumer is attached, more than ``max_pending`` undelivered messages means the
client is too slow, and the channel is closed as overflowed (the transport disconnects it with a
logged reason). While nobody is attached, it keeps only the newest ``replay`` messages.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
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
        self._wake = asyncio.Event()
        self.closed = False
        self.overflowed = False
        self.attached = False
        # Called once, on the first push: lets a front door start streaming only when there is
        # something to stream (see transports/streamable_http.py).
        self.on_first_push: Callable[[], None] | None = None

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def push(self, message: dict[str, Any]) -> bool:
        """Queue a message; False if the channel is closed or just overflowed. Never blocks."""
        if self.closed:
            return False
        seq = self._next_seq
        self._next_seq += 1
        self._log.append((seq, message))
        if seq == 1 and self.on_first_push is not None:
            self.on_first_push()
        if self.attached:
            if seq - self._delivered > self._max_pending:
                self.overflowed = True
                self.close()
                return False
        else:
            keep = max(self._replay, 1)
            while len(self._log) > keep:
                self._log.popleft()
        self._trim()
        self._wake.set()
        return True

    def _trim(self) -> None:
        # Delivered messages are kept only as far back as the replay window reaches.
        floor = self._delivered - self._replay
        while self._log and self._log[0][0] <= floor:
            self._log.popleft()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

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
            self._wake.clear()
            await self._wake.wait()
