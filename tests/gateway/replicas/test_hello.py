"""The start-up handshake of shared state (gateway/replicas/hello.py), on each bus.

A replica hears its own hello before it reads what is stored; anyone's hello is no change; a change
heard after the hello waits for the read, one heard before it does not (or the hello could never be
heard); with nobody listening the wait ends at its bound, with few hellos; on a bus that is down it
ends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway.bus import Bus
from gateway.bus.memory import MemoryBus
from gateway.bus.redis import RedisBus
from gateway.replicas.hello import Hello
from tests.support import redis_server

pytestmark = pytest.mark.timeout(30)

CHANNEL = "test:hello"


@dataclass(slots=True)
class Listener:
    """A listener loop as SharedPrincipals and SharedRegistrations run it, recording what it does."""

    hello: Hello
    everything: list[dict[str, Any]] = field(default_factory=list)
    received: list[dict[str, Any]] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)

    async def run(self, bus: Bus) -> None:
        async for data in bus.subscribe(CHANNEL):
            news = orjson.loads(data)
            self.everything.append(news)
            if self.hello.heard(news):
                continue
            self.received.append(news)
            await self.hello.applied()
            self.applied.append(news)


@contextlib.asynccontextmanager
async def listening(bus: Bus, replica: str = "me", within_s: float = 5.0) -> AsyncIterator[Listener]:
    listener = Listener(Hello(bus, CHANNEL, replica, within_s))
    task = asyncio.create_task(listener.run(bus))
    try:
        yield listener
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():  # noqa: ASYNC110 - polled: the listener offers no "received" event
            await asyncio.sleep(0.01)


async def test_the_read_runs_once_the_replica_hears_itself(bus: Bus) -> None:
    async with listening(bus) as listener:
        assert not listener.hello.listening
        async with listener.hello.reading() as heard:
            assert heard is True and listener.hello.listening
        assert listener.received == [], "a hello is no change"


def test_anyones_hello_is_skipped_and_only_ones_own_means_listening() -> None:
    hello = Hello(MemoryBus(), CHANNEL, "me")
    assert hello.heard({"op": "hello", "by": "other"}) and not hello.listening
    assert not hello.heard(None) and not hello.heard({"op": "registered", "by": "me", "name": "x"})
    assert not hello.heard({"by": "me", "name": "x", "config": None}), "a principal change has no op"
    assert not hello.listening
    assert hello.heard({"op": "hello", "by": "me"}) and hello.listening


async def test_a_change_heard_after_the_hello_waits_for_the_read(bus: Bus) -> None:
    async with listening(bus) as listener:
        async with listener.hello.reading():
            await bus.publish(CHANNEL, orjson.dumps({"by": "other", "name": "x"}))
            await eventually(lambda: bool(listener.received))
            await asyncio.sleep(0.05)  # time to apply it, were it not held
            assert listener.applied == [], "the stored state is applied first"
        await eventually(lambda: bool(listener.applied))
        assert listener.applied == [{"by": "other", "name": "x"}]


async def test_a_change_heard_before_the_hello_does_not_hold_the_listener(bus: Bus) -> None:
    async with listening(bus) as listener:
        change = orjson.dumps({"by": "other", "name": "early"})
        async with asyncio.timeout(5):
            while not listener.applied:  # sent until the subscription stands, like a hello
                await bus.publish(CHANNEL, change)
                await asyncio.sleep(0.01)
        assert not listener.hello.listening
        started = time.monotonic()
        async with listener.hello.reading() as heard:
            assert heard is True
        assert time.monotonic() - started < 2.0, "the hello was heard behind the change"


async def test_with_nobody_listening_the_wait_is_bounded_and_hellos_are_few(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    async with listening(bus, replica="someone-else") as other:
        async with other.hello.reading():
            pass  # the subscription of the other one stands: it counts the hellos sent
        hello = Hello(bus, CHANNEL, "unheard", within_s=1.0)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="gateway.replicas.hello"):
            assert await hello.until_listening() is False
        waited = time.monotonic() - started
        assert 1.0 <= waited < 2.0, waited
        assert "not hearing channel test:hello yet" in caplog.text
        assert other.received == [], "a hello is never handed on as a change"
        # Every 10 ms for a second would be 100 hellos; backing off to 250 ms, about 10.
        sent = [news for news in other.everything if news == {"op": "hello", "by": "unheard"}]
        assert 3 <= len(sent) <= 15, len(sent)


async def test_on_a_bus_that_is_down_the_read_is_not_held() -> None:
    with redis_server() as (url, proc):
        bus = RedisBus(url, prefix=f"test-{uuid.uuid4().hex}:")
        await bus.start()
        try:
            proc.terminate()
            proc.wait(10)
            with contextlib.suppress(Exception):
                await bus.get("anything")  # a failed operation marks the bus down at once
            assert not bus.healthy
            hello = Hello(bus, CHANNEL, "me")
            started = time.monotonic()
            async with hello.reading() as heard:
                assert heard is False
            assert time.monotonic() - started < 1.0
            await hello.applied()  # never held: nothing was heard
        finally:
            await bus.close()
