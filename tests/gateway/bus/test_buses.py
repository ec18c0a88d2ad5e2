"""The Bus contract, held against both implementations: memory, and a real Redis server."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time

import pytest

from gateway.bus import Bus, MemoryBus
from gateway.bus.redis import RedisBus


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


# ---- token buckets (Bus.take) ----------------------------------------------------------------


async def test_bucket_allows_its_burst_then_refuses_with_the_time_to_the_next_token(bus: Bus) -> None:
    for _ in range(5):
        assert await bus.take("tb", per_s=2.0, burst=5) == 0.0
    wait = await bus.take("tb", per_s=2.0, burst=5)
    # One token comes every 0.5 s; a few ms of it may already have been refilled.
    assert 0.4 < wait <= 0.5
    again = await bus.take("tb", per_s=2.0, burst=5)
    assert 0.4 < again <= wait, "a refusal takes nothing, so the wait only shrinks"


async def test_bucket_refills_over_time_up_to_its_burst(bus: Bus) -> None:
    # A token every 250 ms; each assertion below has at least 150 ms of slack for a slow machine.
    for _ in range(3):
        assert await bus.take("refill", per_s=4.0, burst=3) == 0.0
    assert await bus.take("refill", per_s=4.0, burst=3) > 0
    await asyncio.sleep(0.3)  # 1.2 tokens back
    assert await bus.take("refill", per_s=4.0, burst=3) == 0.0
    assert await bus.take("refill", per_s=4.0, burst=3) > 0
    await asyncio.sleep(1.0)  # would be 4 tokens, but the bucket holds 3
    results = [await bus.take("refill", per_s=4.0, burst=3) for _ in range(4)]
    assert results[:3] == [0.0, 0.0, 0.0]
    assert results[3] > 0


async def test_concurrent_takers_never_overspend(bus: Bus) -> None:
    results = await asyncio.gather(*(bus.take("race", per_s=0.01, burst=10) for _ in range(50)))
    assert sum(1 for wait in results if wait == 0.0) == 10
    assert all(wait > 0 for wait in results if wait != 0.0)


async def test_buckets_are_independent_per_key(bus: Bus) -> None:
    assert await bus.take("a", per_s=0.01, burst=1) == 0.0
    assert await bus.take("a", per_s=0.01, burst=1) > 0
    assert await bus.take("b", per_s=0.01, burst=1) == 0.0
    assert await bus.take("b", per_s=0.01, burst=1) > 0


async def test_cost_takes_several_tokens_at_once(bus: Bus) -> None:
    assert await bus.take("cost", per_s=1.0, burst=10, cost=4) == 0.0
    assert await bus.take("cost", per_s=1.0, burst=10, cost=4) == 0.0
    wait = await bus.take("cost", per_s=1.0, burst=10, cost=4)
    assert 1.9 < wait <= 2.0, "2 tokens left, 2 more needed at 1/s"
    assert await bus.take("cost", per_s=1.0, burst=10, cost=2) == 0.0, "the refused take spent nothing"
    assert await bus.take("cost", per_s=1.0, burst=10, cost=11) == math.inf, "more than the bucket holds"


async def test_bucket_rejects_nonsense_parameters(bus: Bus) -> None:
    for per_s, burst, cost in [(0, 1, 1), (1, 0, 1), (1, 1, -1), (math.nan, 1, 1), (1, math.inf, 1)]:
        with pytest.raises(ValueError):
            await bus.take("bad", per_s=per_s, burst=burst, cost=cost)


async def test_idle_bucket_is_forgotten_once_full_again(bus: Bus) -> None:
    assert await bus.take("idle", per_s=20.0, burst=2) == 0.0
    if isinstance(bus, RedisBus):
        # 1 token at 20/s: full again in 50 ms, which is when the key expires.
        ttl = await bus.redis.pttl(bus.key("idle"))
        assert 0 < ttl <= 50
        await asyncio.sleep(0.15)
        assert await bus.redis.exists(bus.key("idle")) == 0
    else:
        assert isinstance(bus, MemoryBus)
        assert "idle" in bus._buckets
        # The sweep runs on a later take once the table has grown or a minute has passed.
        bus._sweep_at = time.monotonic()
        await asyncio.sleep(0.1)
        assert await bus.take("other", per_s=1.0, burst=1) == 0.0
        assert "idle" not in bus._buckets
    assert await bus.take("idle", per_s=20.0, burst=2, cost=2) == 0.0, "a forgotten bucket is a full one"


async def test_a_bucket_that_refills_over_centuries_still_works(bus: Bus) -> None:
    assert await bus.take("glacial", per_s=1e-18, burst=1e6) == 0.0
    wait = await bus.take("glacial", per_s=1e-18, burst=1e6, cost=1e6)
    assert wait > 1e17
    if isinstance(bus, RedisBus):
        assert await bus.redis.pttl(bus.key("glacial")) > 0


async def test_memory_bucket_table_does_not_grow_without_bound() -> None:
    bus = MemoryBus()
    for i in range(5000):
        assert await bus.take(f"k{i}", per_s=1e6, burst=2) == 0.0  # full again within microseconds
    assert len(bus._buckets) < 2100


async def test_memory_bus_forgets_expired_claims_nobody_reads_again() -> None:
    """De-duplication claims are written once and never read: they must not pile up."""
    bus = MemoryBus()
    for n in range(3000):
        assert await bus.set(f"claim:{n}", b"1", ttl_s=0.01, only_if_absent=True)
    await asyncio.sleep(0.02)
    for n in range(3000):
        await bus.set(f"fresh:{n}", b"1", ttl_s=60, only_if_absent=True)
    assert not [k for k in bus._values if k.startswith("claim:")], "expired claims were swept"
    assert await bus.get("fresh:0") == b"1"
