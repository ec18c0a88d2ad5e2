"""Hearing one's own channel before reading what is stored there (issue 14).

A replica that shares a piece of state keeps it in the bus (a map, a key) and announces each change
on a channel, storing before announcing. A replica that starts subscribes to the channel, reads the
stored state, then applies what it hears. But a subscription stands some time after it was asked
for (Redis: a round trip or a few), and what is announced meanwhile never reaches it: read too
early, a change made in that window is neither in what was read nor heard.

:class:`Hello` closes the window. ``async with hello.reading():`` around the read publishes a
"hello" (``{"op": "hello", "by": replica}``) on the channel until the replica's own listener hears
it, and only then lets the read run. The listener gives every message to :meth:`Hello.heard` (a
hello, anyone's, is no change: skip it) and awaits :meth:`Hello.applied` before applying a change.

Invariants:
- the stored state is read only after this replica heard its own hello, or after ``HELLO_S`` at the
  most (then logged: a change made in the window may be missed here); at once while the bus is
  unhealthy (nothing can be heard then);
- an announcement heard after the hello is applied after the stored state, so an older stored value
  never overwrites a newer announced one; one heard before the hello was stored before the read
  (stored, announced, then the hello published, then read), so applying it first is harmless;
- the listener never waits on the read before it heard the hello (it could not hear it then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import json_object

if TYPE_CHECKING:
    from gateway.bus import Bus

log = logging.getLogger(__name__)

HELLO_S = 5.0  # longest a starting replica waits to hear its channel before it reads what is stored
_FIRST_EVERY_S = 0.01  # a subscription stands within a few round trips: ask again soon...
_MOST_EVERY_S = 0.25  # ...then less often, so that a slow bus is not flooded with hellos


class Hello:
    """One replica's handshake on one channel, used once, at start."""

    __slots__ = ("_applied", "_bus", "_channel", "_heard", "_message", "_replica", "_within_s")

    def __init__(self, bus: Bus, channel: str, replica: str, within_s: float = HELLO_S) -> None:
        self._bus = bus
        self._channel = channel
        self._replica = replica
        self._within_s = within_s
        self._message = orjson.dumps({"op": "hello", "by": replica})
        self._heard = asyncio.Event()
        self._applied = asyncio.Event()

    @property
    def listening(self) -> bool:
        """True once this replica heard its own hello."""
        return self._heard.is_set()

    @contextlib.asynccontextmanager
    async def reading(self) -> AsyncIterator[bool]:
        """Read and apply the stored state inside: entered once listening (or the bound passed; the
        value says which), left with the listener free to apply what it heard since."""
        try:
            yield await self.until_listening()
        finally:
            self._applied.set()

    async def until_listening(self) -> bool:
        """Publish hellos until the listener hears one (True); False when the bus is unhealthy or
        ``within_s`` passed first."""
        if not self._bus.healthy:
            return False  # nothing to hear now; the subscription stands again once the bus is back
        every_s = _FIRST_EVERY_S
        await asyncio.sleep(0)  # a listener task created just before reaches its subscribe() first
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._within_s):
                while not self._heard.is_set():
                    with contextlib.suppress(Exception):  # a failed hello is sent again
                        await self._bus.publish(self._channel, self._message)
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(every_s):
                            await self._heard.wait()
                    every_s = min(every_s * 2, _MOST_EVERY_S)
                return True
        log.warning("not hearing channel %s yet: a change made meanwhile may be missed here", self._channel)
        return False

    def heard(self, news: Mapping[str, Any] | None) -> bool:
        """True when ``news`` is a hello (the listener skips it); this replica's own means listening."""
        if news is None or news.get("op") != "hello":
            return False
        if news.get("by") == self._replica:
            self._heard.set()
        return True

    async def applied(self) -> None:
        """Return when the listener may apply a change: at once before its own hello was heard, after
        the stored state was read and applied (the ``reading`` block left) from then on."""
        if self._heard.is_set():
            await self._applied.wait()

    async def others(self, messages: AsyncIterator[bytes]) -> AsyncIterator[dict[str, Any]]:
        """The channel's announcements of other replicas, each naming what it changed (``name``),
        yielded when they may be applied; hellos and this replica's own announcements are left out."""
        async for data in messages:
            news = json_object(data)
            if self.heard(news):
                continue
            await self.applied()
            if news is not None and news.get("by") != self._replica and isinstance(news.get("name"), str):
                yield news
