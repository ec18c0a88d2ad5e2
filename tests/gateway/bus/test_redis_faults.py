"""The Redis bus when Redis goes away, against a real redis-server stopped (SIGSTOP), killed (SIGKILL)
and started again on the same port: nothing hangs beyond the timeouts, ``healthy`` flips within ~3 s
and back, buckets and claims go local, other operations raise BusUnavailable at once, publishes made
during the outage reach the subscribers (of this replica and another) once Redis is back, and the
subscriptions come back by themselves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from gateway.bus import MemoryBus
from gateway.bus.base import BusUnavailable
from gateway.bus.redis import RedisBus
from tests.support import free_port, stop_process, wait_for_port

pytestmark = pytest.mark.timeout(90)

BINARY = shutil.which("redis-server")
needs_redis = pytest.mark.skipif(BINARY is None, reason="redis-server is not installed (make test installs it)")


class RedisProcess:
    """A redis-server of the test's own on a fixed port, to stop, kill and start again there; with
    ``tls`` that port speaks only TLS (the ``extra`` arguments name the certificates)."""

    def __init__(self, *extra: str, port: int | None = None, tls: bool = False) -> None:
        self.port = port or free_port()
        self.extra = extra
        self.tls = tls
        self.proc: subprocess.Popen[bytes] | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="switchboard-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def argv(self) -> list[str]:
        assert BINARY is not None
        persistence = ["--save", "", "--appendonly", "no", "--dir", self._workdir.name]
        ports = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        return [BINARY, *ports, "--bind", "127.0.0.1", *persistence, *self.extra]

    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(self.argv(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def start(self) -> None:
        self.proc = await asyncio.to_thread(self._spawn)
        await asyncio.to_thread(wait_for_port, "127.0.0.1", self.port, 10, self.proc)

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    async def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        await asyncio.to_thread(self.proc.wait, 10)

    async def stop(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            await asyncio.to_thread(stop_process, self.proc)
        self._workdir.cleanup()


@contextlib.asynccontextmanager
async def own_redis(*extra: str) -> AsyncIterator[RedisProcess]:
    server = RedisProcess(*extra)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@contextlib.asynccontextmanager
async def started(bus: RedisBus) -> AsyncIterator[RedisBus]:
    await bus.start()
    try:
        yield bus
    finally:
        async with asyncio.timeout(10):
            await bus.close()


async def until(check: Callable[[], bool], within_s: float, what: str) -> float:
    """Seconds until ``check()`` held; fails after ``within_s``."""
    began = time.monotonic()
    try:
        async with asyncio.timeout(within_s):
            while not check():  # noqa: ASYNC110
                await asyncio.sleep(0.02)
    except TimeoutError:
        pytest.fail(f"not within {within_s} s: {what}")
    return time.monotonic() - began


class Listener:
    """A subscription read by a task of its own; what it got, in order."""

    def __init__(self, bus: RedisBus | MemoryBus, channel: str) -> None:
        self.got: list[bytes] = []
        self._stream = bus.subscribe(channel)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for data in self._stream:
            self.got.append(data)

    def data(self) -> list[bytes]:
        return [d for d in self.got if not d.startswith(b"probe")]

    async def close(self) -> None:
        # Again until it ends: asyncio.wait_for inside redis-py (Python 3.11) may swallow a cancellation.
        async with asyncio.timeout(10):
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait([self._task], timeout=0.5)


async def subscribed(bus: RedisBus, channel: str, listeners: list[Listener]) -> None:
    """Publish probes until every listener heard one (subscribing is asynchronous on Redis)."""
    async with asyncio.timeout(10):
        n = 0
        while not all(any(d.startswith(b"probe") for d in listener.got) for listener in listeners):
            await bus.publish(channel, b"probe%d" % n)
            n += 1
            await asyncio.sleep(0.05)


async def bounded(operation: Callable[[], Awaitable[object]], limit_s: float) -> tuple[object, float]:
    """(result or the BusUnavailable raised, seconds taken); fails if it took longer than ``limit_s``."""
    began = time.monotonic()
    try:
        result: object = await operation()
    except BusUnavailable as exc:
        result = exc
    elapsed = time.monotonic() - began
    assert elapsed <= limit_s, f"took {elapsed:.2f} s, more than {limit_s} s"
    return result, elapsed


def test_bus_unavailable_is_a_connection_error() -> None:
    assert issubclass(BusUnavailable, ConnectionError)


async def test_the_memory_bus_is_always_healthy() -> None:
    bus = MemoryBus()
    seen: list[tuple[bool, str | None]] = []
    bus.on_health(lambda up, why: seen.append((up, why)))
    assert bus.healthy and bus.problem is None and seen == [(True, None)]
    assert bus.stats() == {}


@needs_redis
async def test_killed_and_restarted_redis(caplog: pytest.LogCaptureFixture) -> None:
    """SIGKILL: the outage is seen at once, everything degrades as documented, and comes back."""
    caplog.set_level(logging.INFO, logger="gateway.bus")
    prefix = f"test-{uuid.uuid4().hex}:"
    async with (
        own_redis() as server,
        started(RedisBus(server.url, prefix)) as bus,
        started(RedisBus(server.url, prefix)) as other,
    ):
        changes: list[bool] = []
        bus.on_health(lambda up, _why: changes.append(up))
        assert bus.healthy and bus.problem is None and changes == [True]
        mine, theirs = Listener(bus, "news"), Listener(other, "news")
        try:
            await subscribed(bus, "news", [mine, theirs])
            assert await bus.publish("news", b"before") == 2
            assert await bus.take("tb", per_s=0.01, burst=1) == 0.0
            assert await bus.take("tb", per_s=0.01, burst=1) > 0, "the shared bucket is empty"

            await server.kill()
            await until(lambda: not bus.healthy, 3.0, "the bus sees Redis is gone")
            assert bus.problem and "127.0.0.1" not in bus.problem.split(":", 1)[0]

            # Buckets and claims go local; nothing else waits: BusUnavailable at once.
            result, _ = await bounded(lambda: bus.take("tb", per_s=0.01, burst=1), 0.1)
            assert result == 0.0, "a fresh local bucket: fail-open to per-replica limits"
            result, _ = await bounded(lambda: bus.take("tb", per_s=0.01, burst=1), 0.1)
            assert isinstance(result, float) and result > 0, "the local bucket still limits"
            assert await bus.set("claim", b"1", ttl_s=60, only_if_absent=True)
            assert not await bus.set("claim", b"1", ttl_s=60, only_if_absent=True), "claimed locally"
            for operation in (
                lambda: bus.get("k"),
                lambda: bus.set("k", b"v"),
                lambda: bus.incr("n"),
                lambda: bus.delete("k"),
            ):
                result, _ = await bounded(operation, 0.1)
                assert isinstance(result, BusUnavailable)
            for n in range(3):
                result, _ = await bounded(lambda n=n: bus.publish("news", b"during%d" % n), 0.1)
                assert result == 0, "queued: no subscriber known to have it"

            await server.start()  # the same port, an empty Redis
            await until(lambda: bus.healthy, 4.0, "the bus sees Redis back")
            assert bus.problem is None
            want = [b"before", b"during0", b"during1", b"during2"]
            await until(lambda: mine.data() == want and theirs.data() == want, 10.0, "queued publishes delivered")
            await until(lambda: other.healthy, 4.0, "the other replica sees Redis back")
            await bus.publish("news", b"after")
            await until(lambda: mine.data()[-1:] == [b"after"] and theirs.data()[-1:] == [b"after"], 5.0, "after")

            assert not await bus.set("claim", b"1", ttl_s=60, only_if_absent=True), "the local claim still holds"
            await bus.delete("claim")
            assert await bus.set("claim", b"1", ttl_s=60, only_if_absent=True), "deleted, it can be claimed again"
            assert await bus.take("tb", per_s=0.01, burst=1) == 0.0, "shared again (the new Redis is empty)"
        finally:
            await mine.close()
            await theirs.close()
        assert changes == [True, False, True], "one change each way"
        stats = bus.stats()
        assert stats["outages"] == 1
        assert stats["take_local"] == 2 and stats["claim_local"] == 1
        assert stats["publish_queued"] == 3 and stats["publish_flushed"] == 3 and stats["publish_dropped"] == 0
        assert stats["unavailable"] >= 4
        assert stats["resubscribed"] >= 1 and other.stats()["resubscribed"] >= 1
    lost = [r for r in caplog.records if r.name == "gateway.bus" and "lost Redis" in r.getMessage()]
    back = [r for r in caplog.records if r.name == "gateway.bus" and "is back after" in r.getMessage()]
    assert len([r for r in lost if r.levelno == logging.WARNING]) == 2, "one warning per bus"
    assert len([r for r in back if r.levelno == logging.INFO]) == 2, "one info per bus"


@needs_redis
async def test_stopped_redis_bounds_every_operation_and_comes_back() -> None:
    """SIGSTOP: connections stay open but nothing answers. Operations in flight end within their
    timeouts (an answer or BusUnavailable), the bus turns unhealthy within ~3 s, and after SIGCONT
    the queued publishes arrive (at least once, in order) and the subscription keeps going."""
    prefix = f"test-{uuid.uuid4().hex}:"
    timeout_s = 1.0  # the default
    async with own_redis() as server, started(RedisBus(server.url, prefix)) as bus:
        listener = Listener(bus, "ch")
        try:
            await subscribed(bus, "ch", [listener])
            await bus.set("k", b"v")

            async def worker(n: int) -> list[float]:
                times = []
                for _ in range(n):
                    _, elapsed = await bounded(lambda: bus.get("k"), 2 * timeout_s + 0.5)
                    times.append(elapsed)
                    await asyncio.sleep(0.05)
                return times

            workers = [asyncio.create_task(worker(40)) for _ in range(5)]
            await asyncio.sleep(0.3)
            server.signal(signal.SIGSTOP)
            stopped_at = time.monotonic()
            await until(lambda: not bus.healthy, 3.5, "the bus sees Redis stopped")
            assert time.monotonic() - stopped_at <= 3.5
            takes = [await bounded(lambda: bus.take("b", per_s=1, burst=5), 0.1) for _ in range(3)]
            assert [t[0] for t in takes] == [0.0, 0.0, 0.0]
            for n in range(5):
                await bus.publish("ch", b"queued%d" % n)
            async with asyncio.timeout(2 * 40 * (2 * timeout_s + 0.5)):
                await asyncio.gather(*workers)  # bounded() asserted each one's time

            server.signal(signal.SIGCONT)
            await until(lambda: bus.healthy, 4.0, "the bus sees Redis answer again")
            want = [b"queued%d" % n for n in range(5)]
            await until(lambda: [d for d in listener.data() if d in want][-5:] == want, 10.0, "queued publishes")
            got = [d for d in listener.data() if d in want]
            assert sorted(set(got)) == want and got[-5:] == want, "at least once, in order"
            await bus.publish("ch", b"later")
            await until(lambda: listener.data()[-1:] == [b"later"], 5.0, "the subscription goes on")
            assert await bus.get("k") == b"v", "the same Redis, resumed"
        finally:
            await listener.close()


@needs_redis
async def test_a_bus_started_while_redis_is_away_serves_locally_and_connects_when_it_comes() -> None:
    server = RedisProcess()  # not started yet
    try:
        bus = RedisBus(server.url, f"test-{uuid.uuid4().hex}:", publish_queue=2)
        await bounded(bus.start, 3.0)
        try:
            assert not bus.healthy and bus.problem
            result, _ = await bounded(lambda: bus.get("k"), 0.1)
            assert isinstance(result, BusUnavailable)
            assert await bus.take("x", per_s=1, burst=1) == 0.0
            for n in range(4):
                await bus.publish("ch", b"m%d" % n)
            assert bus.stats()["publish_dropped"] == 2, "a bounded outbox drops the oldest"
            listener = Listener(bus, "ch")
            try:
                await server.start()
                await until(lambda: bus.healthy, 4.0, "the bus connects once Redis is there")
                await until(lambda: listener.data() == [b"m2", b"m3"], 10.0, "the newest queued publishes")
                assert bus.stats()["resubscribed"] == 0, "its first subscription, late"
            finally:
                await listener.close()
        finally:
            await bus.close()
    finally:
        await server.stop()


@needs_redis
async def test_an_unreachable_address_does_not_hang() -> None:
    """A port nobody listens on: refused at once; the bus starts unhealthy within its timeout."""
    bus = RedisBus(f"redis://127.0.0.1:{free_port()}/0", connect_timeout_s=0.5, health_interval_s=0.2)
    await bounded(bus.start, 1.5)
    try:
        assert not bus.healthy and bus.problem and "Error" in bus.problem
        assert await bus.set("c", b"1", ttl_s=1, only_if_absent=True)
    finally:
        await bus.close()


@needs_redis
async def test_closing_while_redis_is_stopped_does_not_hang() -> None:
    async with own_redis() as server:
        bus = RedisBus(server.url, f"test-{uuid.uuid4().hex}:", connect_timeout_s=0.5, publish_queue=0)
        await bus.start()
        listener = Listener(bus, "ch")
        await subscribed(bus, "ch", [listener])
        server.signal(signal.SIGSTOP)
        await until(lambda: not bus.healthy, 3.0, "the bus sees Redis stopped")
        assert await bus.publish("ch", b"lost") == 0
        assert bus.stats()["publish_dropped"] == 1, "no outbox: at most once"
        await bounded(bus.close, 2 * 0.5 + 1.0 + 0.5 + 0.5)
        await listener.close()  # the subscription ends with the bus
