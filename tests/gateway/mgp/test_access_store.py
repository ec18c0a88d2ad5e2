"""MGP §5 runtime access entries stored through the bus (gateway/mgp/access_store.py): two
replicas on one bus (in-memory, then a real redis-server) agree at once; a late replica replays
the log; a hole in the log does not stall it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from gateway import jsonrpc
from gateway.bus import Bus
from gateway.bus.memory import MemoryBus
from gateway.bus.redis import RedisBus
from gateway.config import Config
from gateway.core import Gateway
from gateway.mgp.access_store import BusAccessStore
from policies.mgp_access import AccessEntry
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ADD, ask, rpc, session_of

pytestmark = pytest.mark.timeout(30)

ADMIN = Principal("ops", CapabilitySet(["mcp/*", "mgp/request:mgp/access/*"]))
DENY_ADD = {
    "entry_type": "tool_grant",
    "agent_id": "anonymous",
    "server_id": "demo",
    "tool_name": "add",
    "permission": "deny",
}


@asynccontextmanager
async def replica(bus: Bus) -> AsyncIterator[Gateway]:
    config = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, "federation": {"prefix": "never"}})
    gw = Gateway(config, bus=bus)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def eventually(check: Callable[[], bool], within_s: float = 5.0) -> None:
    """Replicas converge through the bus: polled, as a client of two replicas would see it."""
    async with asyncio.timeout(within_s):
        while not check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


async def test_a_grant_on_one_replica_applies_on_the_other_at_once(bus: Bus) -> None:
    async with replica(bus) as one, replica(bus) as two:
        watcher = await session_of(two)
        granted = await ask(one, await session_of(one), rpc("mgp/access/grant", DENY_ADD), principal=ADMIN)
        assert "result" in granted, granted
        await eventually(lambda: not two.mgp_access.allows("anonymous", "demo", "add"))
        refused = await ask(two, watcher, rpc("tools/call", ADD, 2))
        assert refused["error"]["code"] == 1001
        async with asyncio.timeout(5):
            told = [m for _, m in await watcher.standalone.read(0)]
        assert jsonrpc.notification("notifications/tools/list_changed") in told, (
            "the other replica's clients list again"
        )
        revoke = {k: v for k, v in DENY_ADD.items() if k != "permission"}
        await ask(two, watcher, rpc("mgp/access/revoke", revoke, 3), principal=ADMIN)
        await eventually(lambda: one.mgp_access.allows("anonymous", "demo", "add"))


async def test_a_replica_that_starts_later_replays_the_log() -> None:
    bus = MemoryBus()
    async with replica(bus) as first:
        await ask(first, await session_of(first), rpc("mgp/access/grant", DENY_ADD), principal=ADMIN)
        async with replica(bus) as late:
            assert not late.mgp_access.allows("anonymous", "demo", "add")
            assert [e["tool_name"] for e in late.mgp_access.entries()] == ["add"]


async def test_a_hole_in_the_log_is_skipped_after_a_while() -> None:
    bus = MemoryBus()
    store = BusAccessStore(bus, gap_s=0.05)
    await bus.incr("mgp:access:seq")  # a writer numbered an operation and died before storing it
    await store.put(AccessEntry("server_grant", "a", "s", None, "deny"))
    assert store.get(("a", "s", None)) is None, "held back behind the hole for now"
    await asyncio.sleep(0.06)
    await store.catch_up()
    entry = store.get(("a", "s", None))
    assert entry is not None and entry.permission == "deny"
    assert await store.delete(("a", "s", None)) and store.get(("a", "s", None)) is None


async def test_two_replicas_with_their_own_redis_connections_agree(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex}:"
    bus_one, bus_two = RedisBus(redis_url, prefix=prefix), RedisBus(redis_url, prefix=prefix)
    async with replica(bus_one) as one, replica(bus_two) as two:
        await ask(one, await session_of(one), rpc("mgp/access/grant", DENY_ADD), principal=ADMIN)
        await eventually(lambda: not two.mgp_access.allows("anonymous", "demo", "add"))
