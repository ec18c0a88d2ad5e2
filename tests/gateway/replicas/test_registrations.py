"""Backends registered at runtime on every replica (gateway/replicas/registrations.py, MGP §15).

Replicas here are real in-process Gateways, each with its own Redis bus on one real redis-server:
a registration on one is added on the others (their own connection), audited once, and added by a
replica that starts later; a deregistration anywhere removes it everywhere; a name held by another
replica is refused like a local duplicate, also when two replicas race for it. The claim itself
is checked on each bus (memory and Redis), and with the memory bus nothing is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest

from gateway import jsonrpc
from gateway.bus import Bus
from gateway.bus.maps import maps_for
from gateway.config import Config
from gateway.core import Gateway
from gateway.errors import MgpCode
from gateway.replicas.registrations import CHANNEL, KEY, SharedRegistrations
from tests.gateway.mgp.demo_gateway import ask, rpc, session_of
from tests.support import redis_server

pytestmark = pytest.mark.timeout(60)

MGP_SERVER = {
    "id": "dyn",
    "transport": "stdio",
    "command": sys.executable,
    "args": ["-m", "tests.e2e.backends.mgp_server", "--none"],
    "mgp": {"trust_level": "untrusted"},
}
UNREACHABLE = {"id": "dyn", "transport": "http", "url": "http://127.0.0.1:9/mcp"}


@contextlib.asynccontextmanager
async def replica(redis_url: str, prefix: str, *, register_commands: bool = True) -> AsyncIterator[Gateway]:
    config = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}},
            "federation": {"prefix": "never"},
            "mgp": {"register_commands": register_commands},
            "bus": {"kind": "redis", "url": redis_url, "prefix": prefix},
        }
    )
    gw = Gateway(config)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def eventually(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - polled: a registry offers no "backend added" event
            await asyncio.sleep(0.02)


def audited(gw: Gateway, outcome: str) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    gw.audit.add_listener(lambda record: records.append(record) if record["outcome"] == outcome else None)
    return records


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex}:"


async def test_a_registration_reaches_every_replica_and_a_later_one(redis_url: str, prefix: str) -> None:
    async with replica(redis_url, prefix) as first, replica(redis_url, prefix) as second:
        registered = [audited(first, "backend_registered"), audited(second, "backend_registered")]
        conn, record = await first.mgp.registry.add_server(MGP_SERVER, "alice")
        assert conn.state == "ready" and record.registered_by == "alice"
        await eventually(lambda: second.mgp.registry.is_runtime("dyn"))
        there = second.connections["dyn"]
        assert there is not conn and await there.wait_ready(10), "its own connection, its own child"
        described = await second.mgp.registry.describe("dyn")
        assert described is not None
        assert described["source"] == "runtime" and described["registered_by"] == "alice"
        assert described["trust_level"] == "untrusted"
        session = await session_of(second)
        called = await ask(second, session, rpc("tools/call", {"name": "handshake_log", "arguments": {}}))
        assert "result" in called and not called["result"].get("isError"), called
        assert [len(r) for r in registered] == [1, 0], "audited once, where it happened"

        async with replica(redis_url, prefix) as later:
            assert later.mgp.registry.is_runtime("dyn"), "a replica starting later adds the stored ones"
            assert await later.connections["dyn"].wait_ready(10)

        deregistered = audited(first, "backend_deregistered")
        gone = await second.mgp.registry.remove_server({"id": "dyn"}, "bob")
        assert gone == {"id": "dyn", "deregistered": True, "registered_by": "alice"}
        await eventually(lambda: "dyn" not in first.connections)
        assert not first.mgp.registry.is_runtime("dyn") and deregistered == []
        assert await maps_for(first.bus).items(KEY) == {}


async def test_a_name_held_by_another_replica_is_refused(redis_url: str, prefix: str) -> None:
    async with (
        replica(redis_url, prefix) as first,
        replica(redis_url, prefix, register_commands=False) as strict,
    ):
        await first.mgp.registry.add_server(MGP_SERVER, "alice")
        # The strict replica refuses to run the command itself (logged), yet the name is taken everywhere.
        with pytest.raises(jsonrpc.RpcError) as refused:
            await strict.mgp.registry.add_server(UNREACHABLE, "bob")
        assert refused.value.code == MgpCode.SERVER_ALREADY_REGISTERED
        assert "dyn" not in strict.connections
        await first.mgp.registry.remove_server({"id": "dyn"}, "alice")
        conn, _ = await strict.mgp.registry.add_server(UNREACHABLE, "bob")  # free again
        assert conn.state != "ready"
        await eventually(lambda: first.mgp.registry.is_runtime("dyn"))
        await strict.mgp.registry.remove_server({"id": "dyn"}, "bob")
        await eventually(lambda: "dyn" not in first.connections)


async def test_two_replicas_racing_for_one_name_one_wins_and_both_have_it(redis_url: str, prefix: str) -> None:
    async with replica(redis_url, prefix) as first, replica(redis_url, prefix) as second:
        outcomes = await asyncio.gather(
            *(gw.mgp.registry.add_server({**UNREACHABLE, "id": "race"}, "x") for gw in (first, second)),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], jsonrpc.RpcError), outcomes
        assert errors[0].code == MgpCode.SERVER_ALREADY_REGISTERED
        await eventually(lambda: all(gw.mgp.registry.is_runtime("race") for gw in (first, second)))
        stored = await maps_for(first.bus).items(KEY)
        assert list(stored) == ["race"]
        await first.mgp.registry.remove_server({"id": "race"}, "x")
        await eventually(lambda: "race" not in second.connections)


async def test_the_claim_on_each_bus(bus: Bus) -> None:
    one, two = SharedRegistrations(bus, "one"), SharedRegistrations(bus, "two")
    heard = bus.subscribe(CHANNEL)
    listening = asyncio.ensure_future(anext(heard))
    await asyncio.sleep(0.2)  # the subscription stands (Redis: one round trip)
    assert await one.claim("x", {"id": "x"}, "alice") is True
    assert await two.claim("x", {"id": "x"}, "bob") is False, "one name, one replica"
    stored = orjson.loads((await maps_for(bus).items(KEY))["x"])
    assert stored == {"params": {"id": "x"}, "registered_by": "alice", "by": "one"}
    await one.announce("x", {"id": "x"}, "alice")
    async with asyncio.timeout(5):
        news = orjson.loads(await listening)
    assert news == {"op": "registered", "name": "x", "params": {"id": "x"}, "registered_by": "alice", "by": "one"}
    await one.withdraw("x")
    assert await maps_for(bus).items(KEY) == {}
    assert await two.claim("x", {"id": "x"}, "bob") is True, "free again once withdrawn"
    await heard.aclose()  # type: ignore[attr-defined]


async def test_with_the_memory_bus_nothing_is_shared() -> None:
    gw = Gateway(Config.model_validate({"backends": {"demo": {"transport": "builtin"}}}))
    assert gw.replicas.registrations is None and gw.replicas.permissions is None


async def test_a_bus_that_went_away_leaves_the_registration_here() -> None:
    with redis_server() as (url, proc):
        async with replica(url, "gone:") as gw:
            proc.terminate()
            proc.wait(10)
            conn, _ = await gw.mgp.registry.add_server(UNREACHABLE, "alice")
            assert gw.mgp.registry.is_runtime("dyn") and conn is gw.connections["dyn"]
            await gw.mgp.registry.remove_server({"id": "dyn"}, "alice")
            assert "dyn" not in gw.connections
