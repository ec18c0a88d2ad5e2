"""Principals changed at runtime reach a replica that has just started (gateway/replicas/principals.py).

The regression of issue 14's start-up race: a replica's subscription stands some time after it was
asked for, so a change announced in that window was lost when the stored changes had been read
before. Replicas here are real SharedPrincipals, each with its own Redis bus on one real
redis-server, and real in-process Gateways whose admin API is called over ASGI.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest

from gateway.app import build_app
from gateway.bus import Bus
from gateway.bus.maps import maps_for
from gateway.bus.memory import MemoryBus
from gateway.bus.redis import RedisBus
from gateway.config import Config, PrincipalConfig
from gateway.core import Gateway
from gateway.replicas.principals import KEY, LEGACY_KEY, SharedPrincipals
from policies.auth import PrincipalRegistry

pytestmark = pytest.mark.timeout(60)

ADMIN = "admin-secret"
ROUNDS = 5


@pytest.fixture
def prefix() -> str:
    return f"test-{uuid.uuid4().hex}:"


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - polled: a registry offers no "principal added" event
            await asyncio.sleep(0.01)


Replica = Callable[[str], contextlib.AbstractAsyncContextManager[tuple[SharedPrincipals, PrincipalRegistry]]]


@pytest.fixture(params=["memory", "redis"])
def replica(request: pytest.FixtureRequest, prefix: str) -> Replica:
    """A replica's SharedPrincipals, stopped on exit: with the memory bus every replica of the test
    shares one bus (in one process, a subscription stands once its task first runs: the start-up race
    happens every time); with Redis each has its own bus on one redis-server."""
    memory = MemoryBus()

    @contextlib.asynccontextmanager
    async def replica(name: str) -> AsyncIterator[tuple[SharedPrincipals, PrincipalRegistry]]:
        bus: Bus = memory if request.param == "memory" else RedisBus(request.getfixturevalue("redis_url"), prefix)
        await bus.start()
        registry = PrincipalRegistry({})
        principals = SharedPrincipals(bus, registry, lambda: None, name)
        try:
            yield principals, registry
        finally:
            await principals.stop()
            if bus is not memory:
                await bus.close()

    return replica


def knows(registry: PrincipalRegistry, token: str, name: str | None) -> Callable[[], bool]:
    return lambda: registry.by_token(token) == name


def newbie(i: int) -> PrincipalConfig:
    return PrincipalConfig.model_validate({"tokens": [f"token-{i}"], "capabilities": ["mcp/request:*"]})


async def test_a_change_right_after_a_replica_started_is_known_there(replica: Replica) -> None:
    async with replica("a") as (a, _):
        await a.start()
        for i in range(ROUNDS):
            async with replica(f"b{i}") as (b, there):
                await b.start()
                await a.share(f"newbie{i}", newbie(i))  # announced as soon as b is up
                await eventually(knows(there, f"token-{i}", f"newbie{i}"))


async def test_a_change_while_a_replica_starts_is_known_there(replica: Replica) -> None:
    async with replica("a") as (a, _):
        await a.start()
        for i in range(ROUNDS):
            async with replica(f"b{i}") as (b, there):
                # Found in the store or heard: whichever side of b's read the change falls on.
                await asyncio.gather(b.start(), a.share(f"newbie{i}", newbie(i)))
                await eventually(knows(there, f"token-{i}", f"newbie{i}"))
                assert there.names() == [f"newbie{j}" for j in range(i + 1)], "and every one made before"


async def test_a_removal_heard_while_starting_is_not_undone_by_the_stored_state(replica: Replica) -> None:
    async with replica("a") as (a, _):
        await a.start()
        await a.share("old", newbie(0))
        for i in range(ROUNDS):
            async with replica(f"b{i}") as (b, there):
                await asyncio.gather(b.start(), a.share("old", None if i % 2 == 0 else newbie(0)))
                want = None if i % 2 == 0 else "old"
                await eventually(knows(there, "token-0", want))
                await asyncio.sleep(0.05)  # anything still in flight would land now
                assert there.by_token("token-0") == want


async def test_changes_stored_by_the_first_release_are_moved_into_the_map(redis_url: str, prefix: str) -> None:
    """The first multi-replica release kept the changes as one JSON object under LEGACY_KEY: a replica
    of this release moves them field by field (a field the map already holds is newer and wins),
    applies them, and deletes the old key; a malformed old value is dropped, never applied."""
    bus = RedisBus(redis_url, prefix)
    await bus.start()
    try:
        await bus.set(LEGACY_KEY, orjson.dumps({"old": newbie(1).model_dump(), "both": newbie(2).model_dump()}))
        await maps_for(bus).put(KEY, "both", orjson.dumps(newbie(3).model_dump()))
        registry = PrincipalRegistry({})
        principals = SharedPrincipals(bus, registry, lambda: None, "a")
        try:
            await principals.start()
            assert registry.by_token("token-1") == "old"
            assert registry.by_token("token-3") == "both" and registry.by_token("token-2") is None
            assert await bus.get(LEGACY_KEY) is None
            assert set(await maps_for(bus).items(KEY)) == {"old", "both"}
        finally:
            await principals.stop()
        await bus.set(LEGACY_KEY, b"[not an object")
        again = PrincipalRegistry({})
        principals = SharedPrincipals(bus, again, lambda: None, "b")
        try:
            await principals.start()
            assert await bus.get(LEGACY_KEY) is None and again.names() == ["both", "old"]
        finally:
            await principals.stop()
    finally:
        await bus.close()


@contextlib.asynccontextmanager
async def gateway(redis_url: str, prefix: str) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    config = Config.model_validate(
        {
            "auth": {"admin_token": ADMIN},
            "principals": {"ops": {"tokens": ["ops-token"], "capabilities": ["*"]}},
            "backends": {"demo": {"transport": "builtin"}},
            "bus": {"kind": "redis", "url": redis_url, "prefix": prefix},
        }
    )
    gw = Gateway(config)
    app = build_app(config, gw)
    await gw.start()
    try:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8787") as http:
            yield gw, http
    finally:
        await gw.stop()


async def test_a_principal_put_on_one_gateway_right_after_another_started_is_known_there(
    redis_url: str, prefix: str
) -> None:
    async with gateway(redis_url, prefix) as (first, admin):
        for i in range(ROUNDS):
            async with gateway(redis_url, prefix) as (second, _):
                put = await admin.put(
                    f"/admin/principals/newbie{i}",
                    json={"tokens": [f"token-{i}"], "capabilities": ["mcp/request:*"]},
                    headers={"authorization": f"Bearer {ADMIN}"},
                )
                assert put.status_code == 200, put.text
                await eventually(knows(second.principals, f"token-{i}", f"newbie{i}"))
                assert second.principals.by_token("ops-token") == "ops"
        assert sorted(first.principals.names()) == sorted(["ops", *(f"newbie{i}" for i in range(ROUNDS))])


async def test_changes_of_different_principals_made_at_once_on_two_replicas_are_all_stored(replica: Replica) -> None:
    # Stored one field per principal: neither replica's write may overwrite the other's.
    async with replica("a") as (a, _), replica("b") as (b, _):
        await a.start()
        await b.start()
        await asyncio.gather(*(r.share(f"p{i}", newbie(i)) for i in range(20) for r in ((a, b)[i % 2],)))
        async with replica("c") as (c, registry):
            await c.start()
            for i in range(20):
                assert registry.by_token(f"token-{i}") == f"p{i}"
