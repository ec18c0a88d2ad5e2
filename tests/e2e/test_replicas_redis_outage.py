"""Redis stopped and restarted under load (issue 14): two gateway replicas on one real redis-server,
behind the round-robin balancer, serve several legacy sessions of the official SDK client at once
while Redis is killed (SIGKILL) for ~3 s and started again, empty, on the same port.

The outage runs once (the module's ``outage`` fixture) and the tests below each judge one part of
what was observed: nothing hangs (every call ends, with its answer or a JSON-RPC error, within a
bound); sessions both replicas already serve keep working on local copies; /readyz stays 200 and
says ``bus.healthy: false`` and back; ``switchboard_bus_up`` goes 0 and back to 1; after recovery
new sessions are served by both replicas, and the old ones too. With ``bus.required`` /readyz is
503 while Redis is away.

Also asserted: a copy marked stale just before the outage keeps working through it; a session begun
during the outage is shared once Redis is back; the bus does not fall again right after Redis is back
(pooled connections from before the outage are dropped); a Redis that came back empty gets the
records of the live sessions again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import mcp_types as types
import pytest
import redis
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tests.replicas.support import Replicas, replicas
from tests.support import (
    JSON_HEADERS,
    LEGACY_VERSION,
    fixture_stdio_backend,
    free_port,
    initialize_request,
    stop_process,
    wait_for_port,
)

BINARY = shutil.which("redis-server")

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
    pytest.mark.skipif(BINARY is None, reason="redis-server is not installed (make test installs it)"),
]

CONFIG = {"backends": {"fx": fixture_stdio_backend(required=True)}}
# A faster PING loop than the default 1 s, so that the outage is seen (and its end) well within 3 s.
BUS = {"kind": "redis", "timeout_s": 1.0, "health_interval_s": 0.25}
SESSIONS = 4  # concurrent legacy sessions under load
CALL_BOUND_S = 6.0  # a call ends within this, answer or error: bus operations wait at most 2 x timeout_s
OUTAGE_S = 3.0


class OwnRedis:
    """A redis-server on a fixed port, to kill and start again there (empty: no persistence)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="switchboard-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        assert BINARY is not None
        argv = [BINARY, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, "--dir", self._workdir.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_for_port("127.0.0.1", self.port, 10, self.proc)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
        self._workdir.cleanup()


@contextlib.contextmanager
def own_redis() -> Iterator[OwnRedis]:
    server = OwnRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def replicas_on(count: int, bus: dict[str, Any]) -> contextlib.AbstractContextManager[Replicas]:
    """tests.replicas.support.replicas with the whole ``bus`` section given (required, timeouts)."""
    return replicas(count, bus["url"], CONFIG, bus=bus)


# ---- probes (blocking urllib in a thread: the event loop keeps driving the clients) ------------------


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def readyz(base: str) -> tuple[int, dict[str, Any]]:
    status, body = _get(f"{base}/readyz")
    return status, json.loads(body)


def bus_up(base: str) -> float:
    _, body = _get(f"{base}/metrics")
    found = re.search(rb"^switchboard_bus_up(?:\{[^}]*\})? ([0-9.eE+-]+)$", body, re.MULTILINE)
    assert found, "switchboard_bus_up is exported"
    return float(found.group(1))


def served(group: Replicas) -> list[int]:
    _, body = _get(f"{group.url}/_balancer")
    return list(json.loads(body)["served"])


def texts(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


# ---- what the outage showed ----------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    session: int
    began: float  # monotonic
    took: float
    outcome: str  # "ok", "rpc-error: ...", "hung", or "error: <type>: ..."


@dataclass(slots=True)
class Observed:
    killed_at: float = 0.0
    restarted_at: float = 0.0
    calls: list[Call] = field(default_factory=list)
    down_readyz: list[tuple[int, dict[str, Any]]] = field(default_factory=list)  # one per replica
    down_metric: list[float] = field(default_factory=list)
    up_readyz: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    up_metric: list[float] = field(default_factory=list)
    down_seen_after_s: float = 0.0
    up_seen_after_s: float = 0.0
    during_here: tuple[int, Any] = (0, None)  # a session begun during the outage: a ping where it began
    during_there: tuple[int, Any] = (0, None)  # ... and on the other replica (status, JSON body)
    during_took: float = 0.0  # the slowest of those requests
    during_after: tuple[int, Any] = (0, None)  # that session on the other replica once Redis is back
    touched_during: list[str] = field(default_factory=list)  # the session changed just before the kill
    after_new: list[str] = field(default_factory=list)
    after_new_replicas: set[int] = field(default_factory=set)
    after_old: list[str] = field(default_factory=list)
    after_old_replicas: set[int] = field(default_factory=set)
    touched_after: list[str] = field(default_factory=list)
    records_after: int = 0  # records of the old sessions in Redis after recovery, those used again
    adopted: int = 0  # "adopted from the bus" lines in both replicas' logs before the outage
    logs: list[str] = field(default_factory=list)


async def bounded_call(operation: Callable[[], Awaitable[types.CallToolResult]], limit_s: float) -> tuple[str, float]:
    began = time.monotonic()
    try:
        async with asyncio.timeout(limit_s):
            result = await operation()
        outcome = "ok" if "simple text" in texts(result) else f"error: unexpected result {result!r}"[:300]
    except TimeoutError:
        outcome = "hung"
    except MCPError as exc:
        outcome = f"rpc-error: {exc}"
    except Exception as exc:  # recorded: the tests judge it
        outcome = f"error: {type(exc).__name__}: {exc}"[:300]
    return outcome, time.monotonic() - began


async def until(check: Callable[[], Awaitable[bool]], within_s: float, what: str) -> float:
    began = time.monotonic()
    try:
        async with asyncio.timeout(within_s):
            while not await check():  # noqa: ASYNC110 (polling other processes over HTTP)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not within {within_s} s: {what}") from None
    return time.monotonic() - began


def healthy_everywhere(group: Replicas, want: bool) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        answers = await asyncio.gather(*(asyncio.to_thread(readyz, gw.url) for gw in group.gateways))
        return all(body["bus"]["healthy"] is want for _, body in answers)

    return check


async def raw_session(http: httpx.AsyncClient, base: str) -> str:
    """A legacy session opened and initialized on the replica at ``base`` itself (not the balancer)."""
    opened = await http.post(f"{base}/mcp", json=initialize_request(1), headers=JSON_HEADERS)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    done = await http.post(
        f"{base}/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=raw_headers(session)
    )
    assert done.status_code == 202, done.text
    return session


def raw_headers(session: str) -> dict[str, str]:
    return {**JSON_HEADERS, "mcp-session-id": session, "mcp-protocol-version": LEGACY_VERSION}


async def raw_ping(http: httpx.AsyncClient, base: str, session: str) -> tuple[int, Any]:
    answer = await http.post(
        f"{base}/mcp", json={"jsonrpc": "2.0", "id": 7, "method": "ping"}, headers=raw_headers(session)
    )
    return answer.status_code, answer.json()


async def burst(group: Replicas, n: int = 16) -> None:
    """``n`` sessions opened at once on each replica: as many bus writes at once, as many pooled
    connections to Redis in use."""
    async with httpx.AsyncClient(timeout=CALL_BOUND_S) as http:
        await asyncio.gather(*(raw_session(http, gw.url) for gw in group.gateways for _ in range(n)))


async def some_calls(client: Client, n: int) -> list[str]:
    return [(await bounded_call(lambda: client.call_tool("test_simple_text", {}), CALL_BOUND_S))[0] for _ in range(n)]


async def scenario(group: Replicas, server: OwnRedis) -> Observed:
    seen = Observed()
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(SESSIONS):
            client = await stack.enter_async_context(Client(group.mcp, mode="legacy", read_timeout_seconds=20))
            # One at a time, in turn: consecutive requests alternate, so both replicas hold a copy.
            assert await some_calls(client, 4) == ["ok"] * 4
            clients.append(client)
        touched = await stack.enter_async_context(Client(group.mcp, mode="legacy", read_timeout_seconds=20))
        assert await some_calls(touched, 4) == ["ok"] * 4
        # The other replica logs each session's id (its first 8 characters) when it adopts it; log lines
        # reach the file within a tenth of a second (gateway/logs.py), so they are waited for, bounded.
        deadline = time.monotonic() + 3
        while True:
            old = [m for gw in group.gateways for m in re.findall(r"session (\S{8}) adopted from the bus", gw.log())]
            if len(old) >= SESSIONS + 1 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        seen.adopted = len(old)

        stop = asyncio.Event()

        async def load(n: int, client: Client) -> None:
            while not stop.is_set():
                began = time.monotonic()
                outcome, took = await bounded_call(lambda: client.call_tool("test_simple_text", {}), CALL_BOUND_S)
                seen.calls.append(Call(n, began, took, outcome))
                await asyncio.sleep(0.02)

        workers = [asyncio.create_task(load(n, c)) for n, c in enumerate(clients)]
        try:
            await asyncio.sleep(1.0)
            # A change of state announced by one replica a moment before Redis goes: the other marks
            # its copy stale, and meets the outage on its next request of that session.
            await touched.set_logging_level("debug")
            await burst(group)  # connections that will be idle in the pools when Redis goes
            await asyncio.sleep(0.3)

            await asyncio.to_thread(server.kill)
            seen.killed_at = time.monotonic()
            seen.down_seen_after_s = await until(healthy_everywhere(group, False), 4.0, "both replicas see Redis gone")
            seen.down_readyz = [await asyncio.to_thread(readyz, gw.url) for gw in group.gateways]
            seen.down_metric = [await asyncio.to_thread(bus_up, gw.url) for gw in group.gateways]
            seen.touched_during = await some_calls(touched, 2)

            here, there = (gw.url for gw in group.gateways)
            async with httpx.AsyncClient(timeout=CALL_BOUND_S) as http:
                began = time.monotonic()
                during_session = await raw_session(http, here)
                seen.during_here = await raw_ping(http, here, during_session)
                seen.during_there = await raw_ping(http, there, during_session)
                seen.during_took = time.monotonic() - began
            await asyncio.sleep(max(0.0, seen.killed_at + OUTAGE_S - time.monotonic()))

            await asyncio.to_thread(server.start)  # the same port, an empty Redis
            seen.restarted_at = time.monotonic()
            seen.up_seen_after_s = await until(healthy_everywhere(group, True), 6.0, "both replicas see Redis back")
            seen.up_readyz = [await asyncio.to_thread(readyz, gw.url) for gw in group.gateways]
            seen.up_metric = [await asyncio.to_thread(bus_up, gw.url) for gw in group.gateways]
            await asyncio.sleep(1.0)
        finally:
            stop.set()
            async with asyncio.timeout(2 * CALL_BOUND_S):
                await asyncio.gather(*workers)
        await burst(group)  # the pooled connections of before the outage used again, at once
        # Past a relapse of the bus after Redis is back (see the xfail below).
        await asyncio.sleep(1.0)
        await until(healthy_everywhere(group, True), 6.0, "both replicas see Redis back, for good")
        async with httpx.AsyncClient(timeout=CALL_BOUND_S) as http:
            await raw_ping(http, here, during_session)  # a request where it began, after recovery
            seen.during_after = await raw_ping(http, there, during_session)

        # After recovery: a new session, initialize on one replica and its calls on both.
        before = len(served(group))
        async with Client(group.mcp, mode="legacy", read_timeout_seconds=10) as fresh:
            seen.after_new = await some_calls(fresh, 4)
        seen.after_new_replicas = set(served(group)[before:])
        before = len(served(group))
        for client in clients:
            seen.after_old += await some_calls(client, 2)
        seen.after_old_replicas = set(served(group)[before:])
        with contextlib.closing(redis.Redis.from_url(server.url)) as store:
            for prefix in old:
                seen.records_after += bool(await asyncio.to_thread(store.keys, f"switchboard:session:{prefix}*"))
        seen.touched_after = await some_calls(touched, 2)
    seen.logs = [gw.log() for gw in group.gateways]
    return seen


@pytest.fixture(scope="module")
def outage() -> Iterator[Observed]:
    with own_redis() as server, replicas_on(2, {**BUS, "url": server.url}) as group:
        yield asyncio.run(scenario(group, server))


def during(seen: Observed) -> list[Call]:
    """Calls begun while Redis was away."""
    return [c for c in seen.calls if seen.killed_at <= c.began < seen.restarted_at]


# ---- the verdicts --------------------------------------------------------------------------------


def test_nothing_hangs(outage: Observed) -> None:
    assert outage.calls, "the load ran"
    assert not [c for c in outage.calls if c.outcome == "hung"], "every call ended within its bound"
    assert outage.during_took <= 3 * CALL_BOUND_S, "a session begun during the outage is answered at once"
    strange = [c for c in outage.calls if c.outcome != "ok" and not c.outcome.startswith("rpc-error")]
    assert not strange, f"failures are JSON-RPC errors: {strange[:3]}"


def test_sessions_both_replicas_know_keep_working_through_the_outage(outage: Observed) -> None:
    assert outage.adopted >= SESSIONS + 1, "before the outage, each session had a copy on the other replica"
    assert len(during(outage)) >= 2 * SESSIONS, "the load went on during the outage"
    failed = [c for c in outage.calls if c.outcome != "ok"]
    assert not failed, f"{len(failed)} of {len(outage.calls)} calls failed, e.g. {failed[:3]}"


def test_a_session_begun_during_the_outage_works_where_it_began_and_is_refused_clearly_elsewhere(
    outage: Observed,
) -> None:
    assert outage.during_here == (200, {"jsonrpc": "2.0", "id": 7, "result": {}})
    status, body = outage.during_there
    assert status == 404, "the other replica cannot know it while Redis is away"
    assert body["jsonrpc"] == "2.0" and body["error"]["code"] == -32600
    assert "Session not found" in body["error"]["message"]


def test_readyz_reports_the_outage_and_stays_ready(outage: Observed) -> None:
    assert outage.down_seen_after_s <= 3.0
    for status, body in outage.down_readyz:
        assert status == 200, "bus.required is off: a Redis outage does not take replicas out of service"
        assert body["ready"] is True
        assert body["bus"]["kind"] == "redis" and body["bus"]["healthy"] is False and body["bus"]["problem"]
    for status, body in outage.up_readyz:
        assert status == 200 and body["bus"]["healthy"] is True and body["bus"]["problem"] is None


def test_metrics_show_the_bus_down_then_up(outage: Observed) -> None:
    assert outage.down_metric == [0.0, 0.0]
    assert outage.up_metric == [1.0, 1.0]
    for log in outage.logs:
        assert "lost Redis" in log and "is back after" in log


def test_after_recovery_new_sessions_work_across_both_replicas(outage: Observed) -> None:
    assert outage.after_new == ["ok"] * 4
    assert outage.after_new_replicas == {0, 1}


def test_after_recovery_old_sessions_work_on_both_replicas(outage: Observed) -> None:
    assert outage.after_old == ["ok"] * (2 * SESSIONS)
    assert outage.after_old_replicas == {0, 1}


# ---- gateway bugs this outage shows (see the reasons) ---------------------------------------------


def test_a_session_changed_just_before_the_outage_keeps_working(outage: Observed) -> None:
    assert outage.touched_during == ["ok", "ok"], "served from the local copies during the outage"
    assert outage.touched_after == ["ok", "ok"]


def test_a_session_begun_during_the_outage_is_shared_once_redis_is_back(outage: Observed) -> None:
    assert outage.during_after == (200, {"jsonrpc": "2.0", "id": 7, "result": {}})


def test_the_bus_does_not_fall_again_right_after_redis_is_back(outage: Observed) -> None:
    for log in outage.logs:
        assert log.count("lost Redis") == 1, "one outage, one recovery"


def test_records_of_live_sessions_are_back_in_redis_after_it_returns_empty(outage: Observed) -> None:
    assert outage.records_after >= SESSIONS, "the sessions of the load, used since, have a record again"


def test_a_required_bus_takes_readyz_to_503_while_redis_is_away() -> None:
    with own_redis() as server, replicas_on(2, {**BUS, "url": server.url, "required": True}) as group:

        def statuses() -> list[int]:
            return [readyz(gw.url)[0] for gw in group.gateways]

        for gw in group.gateways:
            status, body = readyz(gw.url)
            assert status == 200 and body["ready"] is True and body["bus"]["healthy"] is True
        server.kill()
        poll(lambda: statuses() == [503, 503], 3.0, "readyz 503 on both replicas")
        for gw in group.gateways:
            status, body = readyz(gw.url)
            assert status == 503 and body["ready"] is False and body["bus"]["healthy"] is False
        server.start()
        poll(lambda: statuses() == [200, 200], 6.0, "readyz 200 on both replicas again")


def poll(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        time.sleep(0.05)
