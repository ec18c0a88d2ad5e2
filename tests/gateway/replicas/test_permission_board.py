"""MGP permission requests waiting on any replica, listed by every replica
(gateway/replicas/permission_board.py), on each bus (memory and a real Redis): a request opened on
one replica is listed on another until it is answered there; expired entries (a dead replica's)
and this replica's entries that no longer wait are dropped and removed; the request path never
waits (a full queue drops and counts); a bus that went away leaves the listing local.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway.bus import Bus
from gateway.bus.maps import maps_for
from gateway.bus.redis import RedisBus
from gateway.replicas.permission_board import KEY, PermissionBoard
from policies.mgp_permissions import PendingPermissions, iso
from tests.support import redis_server

pytestmark = pytest.mark.timeout(30)

_ids = itertools.count(1)


class Replica:
    """One replica's side: its board and the pending store that tells it of every change."""

    def __init__(self, bus: Bus, name: str, clock: Callable[[], float] | None = None, queue: int = 1024) -> None:
        self.board = PermissionBoard(bus, name, queue)
        extra: dict[str, Any] = {"clock": clock} if clock is not None else {}
        self.pending = PendingPermissions(
            new_id=lambda: f"perm-{next(_ids)}@{name}", on_change=self.board.changed, **extra
        )

    async def listed(self) -> list[str]:
        return [entry["request_id"] for entry in await self.board.listing(self.pending.list)]


@pytest.fixture
async def pair(bus: Bus) -> AsyncIterator[tuple[Replica, Replica]]:
    one, two = Replica(bus, "one"), Replica(bus, "two")
    await one.board.start()
    await two.board.start()
    try:
        yield one, two
    finally:
        await one.board.stop()
        await two.board.stop()


async def listed_soon(replica: Replica, want: list[str]) -> list[str]:
    """The listing once it is ``want`` (the writer runs beside the request path), bounded."""
    got: list[str] = []
    async with asyncio.timeout(5):
        while (got := await replica.listed()) != want:  # noqa: ASYNC110 - polled: the map has no change event
            await asyncio.sleep(0.01)
    return got


async def test_a_request_is_listed_on_every_replica_until_answered(pair: tuple[Replica, Replica]) -> None:
    one, two = pair
    first = one.pending.open("fs", ["shell.execute"]).request_id
    await asyncio.sleep(0.01)
    second = two.pending.open("db", ["db.write"]).request_id
    assert await listed_soon(two, [first, second]) == [first, second], "oldest first"
    assert await listed_soon(one, [first, second]) == [first, second]
    [entry] = [e for e in await two.board.listing(two.pending.list) if e["request_id"] == first]
    assert entry == one.pending.list()[0], "listed as the replica that holds it lists it, expires_at included"
    one.pending.answer(first, {"shell.execute": "approved"})
    assert await listed_soon(two, [second]) == [second]
    two.pending.cancel(second)
    assert await listed_soon(one, []) == []


async def test_expired_and_stale_entries_are_dropped_and_removed(bus: Bus) -> None:
    one = Replica(bus, "one")
    maps = maps_for(bus)
    dead = {"request_id": "perm-x@dead", "created_at": iso(1.0), "expires_at": iso(2.0), "server_id": "s"}
    await maps.claim(KEY, "perm-x@dead", orjson.dumps(dead))
    mine = {"request_id": "perm-y@one", "created_at": iso(1.0), "expires_at": iso(4e9), "server_id": "s"}
    await maps.claim(KEY, "perm-y@one", orjson.dumps(mine))  # one's, but it no longer waits there
    await maps.claim(KEY, "perm-z@two", b"not json")
    assert await one.listed() == []
    assert await maps.items(KEY) == {}, "removed from the map too"


async def test_the_request_path_never_waits_a_full_queue_drops_and_counts(bus: Bus) -> None:
    one = Replica(bus, "one", queue=2)  # its writer not started: nothing drains the queue
    for _ in range(3):
        one.pending.open("fs", ["x"])
    assert one.board.dropped == 1
    await one.board.start()
    await one.board.stop()  # flushes what was queued, bounded
    assert len(await maps_for(bus).items(KEY)) == 2


async def test_a_request_that_expires_leaves_the_listing_of_others(bus: Bus) -> None:
    now = [1000.0]
    one, two = Replica(bus, "one", clock=lambda: now[0]), Replica(bus, "two")
    await one.board.start()
    try:
        one.pending.open("fs", ["x"])
        await one.board.stop()  # written
        assert len(await maps_for(bus).items(KEY)) == 1
        # expires_at (1300, in 1970) is long past for ``two``, which reads the real clock
        assert await two.listed() == []
        assert await maps_for(bus).items(KEY) == {}
    finally:
        await one.board.stop()


async def test_a_bus_that_went_away_leaves_the_listing_local() -> None:
    with redis_server() as (url, proc):
        bus = RedisBus(url, prefix="gone:")
        await bus.start()
        one = Replica(bus, "one")
        await one.board.start()
        try:
            proc.terminate()
            proc.wait(10)
            request = one.pending.open("fs", ["x"])
            assert await one.listed() == [request.request_id]
        finally:
            await one.board.stop()
            await bus.close()


async def test_the_board_hears_every_opening_and_every_resolution_once() -> None:
    """``PendingPermissions.on_change``: opened, then resolved once, however it ends."""
    now = [1000.0]
    heard: list[tuple[str, bool]] = []
    pending = PendingPermissions(
        timeout_s=10, clock=lambda: now[0], on_change=lambda request, opened: heard.append((request.server_id, opened))
    )
    answered, cancelled, expired = (pending.open(name, ["x"]) for name in ("answered", "cancelled", "expired"))
    pending.answer(answered.request_id, {"x": "approved"})
    pending.cancel(cancelled.request_id)
    pending.cancel(cancelled.request_id)  # nothing waits any more: nothing to hear
    now[0] += 11
    assert pending.list() == []  # the sweep expires the last one
    assert await pending.wait(expired) == expired.answer  # already resolved: heard once only
    waited = PendingPermissions(timeout_s=0.05, on_change=lambda request, opened: heard.append(("waited", opened)))
    await waited.wait(waited.open("waited", ["x"]))  # expires in real time
    assert heard == [
        ("answered", True),
        ("cancelled", True),
        ("expired", True),
        ("answered", False),
        ("cancelled", False),
        ("expired", False),
        ("waited", True),
        ("waited", False),
    ]
