"""Writes made during one event-loop iteration, sent together at its end (issue 15, ADR 0017).

On this kind of machine a ``send`` on loopback is the most expensive single step of a proxied call:
the kernel runs the receiver's TCP path and wakes it inside the sender's syscall. Under load many
calls finish a step in the same loop iteration (one ``epoll`` batch): sending their writes back to
back at the end of the iteration, rather than each as it is made, wakes each peer once per batch
and keeps the loop's own work together. ``make bench`` measured about 15 % less gateway CPU per
``tools/call`` at c=16..64 for the backend side alone.

A quiet loop (one call at a time, issue 15's c=1) has nothing to batch: every flush sends one
write, and deferring it costs an extra loop iteration (an ``epoll_pwait`` that returns at once, the
loop's bookkeeping, the flush callback) on the call's critical path, twice per proxied call. So
after ``QUIET_AFTER`` flushes in a row that each sent a single item, :meth:`WriteBatch.write` sends
at once while nothing is pending (:meth:`WriteBatch.send_now`); one write in ``PROBE_EVERY``
still goes through the batch, and a flush that finds company there (the loop got busy) ends the
quiet spell until lone flushes come back. Under load (c=16..64) batches hold tens of writes and
lone runs that long are rare (0.4 % of writes went out at once at c=64), so batching stays as it
was.

Invariants: a write is delayed by at most one loop iteration (``call_soon``), never by a timer, so
SSE events and progress still leave as they are produced; writes to one transport keep their
order (a write is sent at once only when nothing at all is pending in the batch); a transport
closing meanwhile gets nothing (as a direct write to it would be dropped), so a transport that
gives the batch whole writes sends them first when it closes (:meth:`WriteBatch.flush_now`,
transports/coalesce.py); a failing write never raises into the writer, sent at once or batched.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Protocol

log = logging.getLogger(__name__)

# Lone flushes in a row (each sent one item) after which the loop counts as quiet.
QUIET_AFTER = 4
# While quiet, one write in this many goes through the batch anyway: the probe that notices load.
PROBE_EVERY = 16


class Flushable(Protocol):
    def flush(self) -> None: ...


class WriteBatch:
    __slots__ = ("__weakref__", "_direct", "_lone", "_loop", "_pending", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._pending: list[tuple[asyncio.WriteTransport, bytes] | Flushable] = []
        self._scheduled = False
        self._lone = 0  # flushes in a row that sent a single item
        self._direct = 0  # writes still to send at once before the next probe (0: batching)

    def write(self, transport: asyncio.WriteTransport, data: bytes) -> None:
        """``transport.write(data)`` at the end of this loop iteration (at once while the loop is quiet)."""
        if self._direct and self.send_now(transport, data):
            return
        self._pending.append((transport, data))
        if not self._scheduled:  # _schedule(), inline: one call less per write
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def send_now(self, transport: asyncio.WriteTransport, data: bytes) -> bool:
        """``transport.write(data)`` at once if the loop is quiet and nothing is pending (nothing to
        batch with, nothing this write could overtake); False, having done nothing, otherwise."""
        if not self._direct or self._scheduled:
            return False
        self._direct -= 1
        try:
            if not transport.is_closing():
                transport.write(data)
        except Exception:  # as in _flush: the writer learns of a broken connection by reading it
            log.debug("a direct write failed", exc_info=True)
        return True

    def flush_later(self, buffered: Flushable) -> None:
        """``buffered.flush()`` at the end of this iteration (a transport gathering its own writes)."""
        self._pending.append(buffered)
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def flush_now(self) -> None:
        """What is pending, sent now rather than at the end of the iteration (a transport closing
        must not lose what it gave the batch)."""
        if self._pending:
            self._flush()

    def _flush(self) -> None:
        self._scheduled = False
        pending, self._pending = self._pending, []
        if not pending:
            return  # sent early by flush_now: this iteration's flush has nothing left
        if len(pending) == 1:
            self._lone += 1
            if self._lone >= QUIET_AFTER:
                self._direct = PROBE_EVERY - 1  # quiet (again): send at once until the next probe
        else:
            self._lone = self._direct = 0  # company: the loop is busy, batch
        for item in pending:
            try:
                if isinstance(item, tuple):
                    transport, data = item
                    if not transport.is_closing():
                        transport.write(data)
                else:
                    item.flush()
            except Exception:  # one broken transport must not keep the others' writes back
                log.debug("a batched write failed", exc_info=True)


_BATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WriteBatch] = weakref.WeakKeyDictionary()


def write_batch(loop: asyncio.AbstractEventLoop | None = None) -> WriteBatch:
    """The batch of ``loop`` (the running loop by default)."""
    loop = loop or asyncio.get_running_loop()
    batch = _BATCHES.get(loop)
    if batch is None:
        batch = _BATCHES[loop] = WriteBatch(loop)
    return batch
