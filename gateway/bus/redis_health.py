"""Whether Redis answers: one flag per bus, flipped by failed operations and a PING loop.

Invariants: the state changes only in :meth:`Health.lost` and :meth:`Health.back`; each change is
logged once (a warning when lost, info when back) and told to every ``on_change`` callback; a
failed operation marks the bus down at once, and only a successful PING of the loop marks it up
again, so callers stop waiting on a dead server after one timeout. ``outages`` counts the changes
to down, so that a long-lived connection can tell it lived through one (a partition leaves no
error on an idle subscription). Problems never carry credentials: they name the exception, not URLs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from redis import exceptions as redis_errors

from gateway.bus.base import HealthCallback

log = logging.getLogger("gateway.bus")

# What "Redis cannot answer now" looks like; anything else (a script error, a wrong type) is a bug
# and propagates. BusyLoading, Authentication and MasterNotFound are redis ConnectionErrors; a
# read-only replica answers writes during a Sentinel failover until the clients follow the new master.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,
    TimeoutError,
    OSError,
)


def describe(exc: BaseException) -> str:
    """A short reason for logs and /readyz: the exception's kind and message, never a URL."""
    if isinstance(exc, TimeoutError | redis_errors.TimeoutError):
        return "Redis did not answer in time"
    text = str(exc).split("\n", 1)[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Health:
    def __init__(self, what: str) -> None:
        self._what = what  # names the server in logs, e.g. "Redis 127.0.0.1:6379" (no credentials)
        self._healthy = False
        self._checked = False  # until the first answer or failure, the bus is neither up nor down
        self._problem: str | None = "not connected yet"
        self._since = time.monotonic()
        self._callbacks: list[HealthCallback] = []
        self._changed = asyncio.Event()
        self.outages = 0

    @property
    def healthy(self) -> bool:
        return self._healthy

    @property
    def down(self) -> bool:
        """Known to be down (not merely not asked yet): operations fail at once then."""
        return self._checked and not self._healthy

    @property
    def problem(self) -> str | None:
        return self._problem

    def on_change(self, callback: HealthCallback) -> None:
        self._callbacks.append(callback)
        callback(self._healthy, self._problem)

    async def changed(self) -> None:
        """Wait for the next change of state."""
        await self._changed.wait()

    def lost(self, problem: str) -> None:
        if not self._healthy:
            if not self._checked:
                self._checked = True
                log.warning("bus: %s unavailable (%s); serving locally until it answers", self._what, problem)
            self._problem = problem  # the newest reason, without logging each failure again
            return
        self.outages += 1
        log.warning(
            "bus: lost %s (%s); serving locally: rate limits per replica, publishes queued, shared keys unavailable",
            self._what,
            problem,
        )
        self._set(False, problem)

    def back(self) -> None:
        if self._healthy:
            return
        if not self._checked:
            self._checked = True
            log.info("bus: connected to %s", self._what)
        else:
            log.info("bus: %s is back after %.1f s", self._what, time.monotonic() - self._since)
        self._set(True, None)

    def _set(self, healthy: bool, problem: str | None) -> None:
        self._healthy, self._problem, self._since = healthy, problem, time.monotonic()
        self._changed.set()
        self._changed = asyncio.Event()
        for callback in self._callbacks:
            try:
                callback(healthy, problem)
            except Exception:  # a broken gauge must not break the bus
                log.exception("bus: a health callback failed")

    async def watch(
        self, ping: Callable[[], Awaitable[object]], interval_s: float, timeout_s: float, running: Callable[[], bool]
    ) -> None:
        """PING every ``interval_s`` (each bounded by ``timeout_s``) and keep the flag, while ``running()``."""
        while running():
            await asyncio.sleep(interval_s)  # first: whoever started the loop has just asked
            try:
                async with asyncio.timeout(timeout_s):
                    await ping()
            except UNAVAILABLE as exc:
                self.lost(describe(exc))
            else:
                self.back()
