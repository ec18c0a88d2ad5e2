"""The Bus contract, held against both implementations: memory, and a real Redis server."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator

import pytest

from gateway.bus import Bus, MemoryBus
from gateway.bus.redis import RedisBus
from tests.support import free_port, stop_process, wait_for_port


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="switchboard-redis-")
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port("127.0.0.1", port, 10, proc)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        stop_process(proc)


@pytest.fixture(params=["memory", "redis"])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    instance: Bus = MemoryBus() if request.param == "memory" else RedisBus(request.getfixturevalue("redis_url"))
    await instance.start()
    try:
        yield instance
    finally:
        await instance.close()


async def test_publish_reaches_current_subscribers(bus: Bus) -> None:
    received: list[bytes] = []
    ready = asyncio.Event()

    async def listen() -> None:
        stream = bus.subscribe("topic")
        reader = stream.__anext__()
        ready.set()
        received.append(await reader)
        received.append(await stream.__anext__())
        await stream.aclose()  # type: ignore[attr-defined]

    task = asyncio.create_task(listen())
    await ready.wait()
    for _ in range(50):  # subscription is asynchronous on Redis: publish until someone hears
        if await bus.publish("topic", b"one"):
            break
        await asyncio.sleep(0.02)
    await bus.publish("topic", b"two")
    await asyncio.wait_for(task, 5)
    assert received == [b"one", b"two"]


async def test_set_get_delete_and_atomic_claim(bus: Bus) -> None:
    assert await bus.get("k") is None
    assert await bus.set("k", b"v1")
    assert await bus.get("k") == b"v1"
    assert not await bus.set("k", b"v2", only_if_absent=True), "a claim on a taken key must lose"
    assert await bus.get("k") == b"v1"
    await bus.delete("k")
    assert await bus.set("k", b"v3", only_if_absent=True)
    assert await bus.get("k") == b"v3"
    await bus.delete("k")


async def test_values_expire(bus: Bus) -> None:
    await bus.set("short", b"x", ttl_s=0.2)
    assert await bus.get("short") == b"x"
    await asyncio.sleep(0.35)
    assert await bus.get("short") is None


async def test_counters_are_atomic_and_keep_their_first_ttl(bus: Bus) -> None:
    results = await asyncio.gather(*(bus.incr("c", 1, ttl_s=0.5) for _ in range(20)))
    assert sorted(results) == list(range(1, 21))
    assert await bus.incr("c", 5, ttl_s=100) == 25
    await asyncio.sleep(0.7)
    assert await bus.incr("c", 1, ttl_s=0.5) == 1, "the TTL set at creation must still apply"
    with contextlib.suppress(Exception):
        await bus.delete("c")
