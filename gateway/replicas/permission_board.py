"""MGP permission requests waiting on any replica, listed by every replica (issue 14).

A backend's ``interactive`` permission request waits in the memory of the replica whose connection
asked (``policies/mgp_permissions.py``); its id names that replica, and an operator's answer sent
elsewhere is run there (gateway/admin.py, gateway/replicas/owner_relay.py). With the Redis bus the
waiting requests are also mirrored into the map ``mgp:permissions`` (field: the request id; value:
its listing, ``expires_at`` included), so that ``GET /admin/mgp/permissions`` on any replica lists
them all: the map merged with the replica's own, oldest first.

Invariants: the request path never waits for Redis: a change is put on one bounded queue
(``changed``, synchronous) and one writer task, started and stopped with ``Replicas``, writes it; a
change that finds the queue full is dropped and counted (a request then missing elsewhere, or
listed elsewhere until it expires). The listing drops, and removes from the map, every entry past
its ``expires_at`` (a dead replica's requests vanish so) and every entry of this replica that no
longer waits here (a removal lost or not written yet): this replica's own list is the truth about
its requests. Bus failures leave the listing local (logged), never fail it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.bus.base import json_object
from gateway.bus.maps import maps_for
from policies.mgp_permissions import owner_of, parse_iso

if TYPE_CHECKING:
    from gateway.bus import Bus
    from policies.mgp_permissions import PendingRequest

log = logging.getLogger(__name__)

KEY = "mgp:permissions"
QUEUE = 1024  # changes waiting for the writer; far above max_pending's opens and closes in a burst
FLUSH_S = 1.0  # what a stopping replica gives the writer to write what is queued
_OPENED = "_opened"  # in the map only: when the request was opened (epoch seconds, not listed)


class PermissionBoard:
    def __init__(self, bus: Bus, replica: str, queue: int = QUEUE) -> None:
        self._maps = maps_for(bus)
        self._replica = replica
        self._queue: asyncio.Queue[tuple[str, bytes | None]] = asyncio.Queue(queue)
        self._writer: asyncio.Task[None] | None = None
        self.dropped = 0  # changes the full queue refused
        # When this replica's waiting requests were opened, to the microsecond: the listing's
        # created_at has whole seconds, too coarse to order requests opened in one second.
        self._opened: dict[str, float] = {}

    def changed(self, request: PendingRequest, opened: bool) -> None:
        """``PendingPermissions``'s ``on_change``: mirror an opened request, forget a resolved one."""
        if opened:
            self._opened[request.request_id] = request.created_at
        else:
            self._opened.pop(request.request_id, None)
        value = orjson.dumps({**request.listing(), _OPENED: request.created_at}) if opened else None
        try:
            self._queue.put_nowait((request.request_id, value))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 100 == 0:
                log.warning("%d permission request change(s) not shared: the writer is behind", self.dropped)

    async def start(self) -> None:
        self._writer = asyncio.create_task(self._write(), name="mgp-permission-board")

    async def stop(self) -> None:
        if self._writer is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FLUSH_S):
                await self._queue.join()
        self._writer.cancel()
        await asyncio.gather(self._writer, return_exceptions=True)
        self._writer = None

    async def listing(self, local: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every replica's waiting requests, oldest first. ``local()`` is asked after the map is read:
        an entry of this replica that is in the map then but not in ``local()`` no longer waits."""
        try:
            stored = await self._maps.items(KEY)
        except Exception as exc:
            log.warning("permission requests of other replicas not listed (the bus is unavailable: %s)", exc)
            return local()
        mine = local()
        here = {entry["request_id"] for entry in mine}
        out = [(self._opened.get(entry["request_id"]) or parse_iso(entry["created_at"]), entry) for entry in mine]
        now = time.time()
        for request_id, raw in stored.items():
            entry = _entry(raw)
            if entry is not None and not _expired(entry, now) and owner_of(request_id) != self._replica:
                opened = entry.pop(_OPENED, None)
                out.append((opened if isinstance(opened, float) else parse_iso(entry["created_at"]), entry))
            elif request_id not in here:
                await self._forget(request_id, raw)
        out.sort(key=lambda pair: pair[0])  # stable: this replica's own order is kept
        return [entry for _, entry in out]

    async def _forget(self, request_id: str, raw: bytes) -> None:
        with contextlib.suppress(Exception):  # only if unchanged: another lister may have removed it
            await self._maps.remove(KEY, request_id, raw)

    async def _write(self) -> None:
        while True:
            request_id, value = await self._queue.get()
            try:
                if value is None:
                    await self._maps.remove(KEY, request_id)
                else:
                    await self._maps.claim(KEY, request_id, value)
            except Exception as exc:
                log.warning("permission request %s: not shared (the bus is unavailable: %s)", request_id, exc)
            finally:
                self._queue.task_done()


def _entry(raw: bytes) -> dict[str, Any] | None:
    value = json_object(raw)
    return value if value is not None and isinstance(value.get("request_id"), str) else None


def _expired(entry: dict[str, Any], now: float) -> bool:
    """Past its ``expires_at`` (whole seconds: up to a second early), or not a listing at all."""
    try:
        parse_iso(str(entry.get("created_at")))
        return now >= parse_iso(str(entry.get("expires_at")))
    except ValueError:
        return True
