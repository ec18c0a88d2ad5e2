"""Legacy sessions across replicas (issue 14): two and three gateway processes on one real Redis behind
a round-robin balancer with no stickiness; the official SDK client (legacy era) does everything a
client does, each request landing on another replica than the last.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.sse import sse_client

from tests.replicas.support import ACCEPT, INIT, Replicas, replicas
from tests.support import dynamic_backend, fixture_stdio_backend, redis_server

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

CONFIG = {"backends": {"fx": fixture_stdio_backend(required=True)}}


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as (url, _proc):
        yield url


@pytest.fixture(scope="module")
def two(redis_url: str) -> Iterator[Replicas]:
    with replicas(2, redis_url, CONFIG) as running:
        yield running


def served(group: Replicas) -> list[int]:
    with urllib.request.urlopen(f"{group.url}/_balancer", timeout=5) as response:
        data: dict[str, Any] = json.loads(response.read())
    return list(data["served"])


def texts(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_a_legacy_session_is_served_by_every_replica(two: Replicas) -> None:
    before = len(served(two))
    logs: list[Any] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with Client(two.mcp, mode="legacy", logging_callback=on_log, read_timeout_seconds=20) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert "test_simple_text" in tools
        for _ in range(4):
            result = await client.call_tool("test_simple_text", {})
            assert "simple text" in texts(result)
        steps: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            steps.append(value)

        await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert steps == [0.0, 50.0, 100.0]
        await client.set_logging_level("debug")
        await client.call_tool("test_tool_with_logging", {})
    used = set(served(two)[before:])
    assert used == {0, 1}, "requests of one session landed on both replicas"
    assert logs, "log lines of a call reached the client"


async def test_a_session_outlives_the_replica_that_created_it(redis_url: str) -> None:
    with replicas(3, redis_url, CONFIG) as three:
        async with Client(three.mcp, mode="legacy", read_timeout_seconds=20) as client:
            await client.list_tools()
            creator = served(three)[0]  # initialize was the first request through the balancer
            three.gateways[creator].proc.kill()
            three.gateways[creator].proc.wait(10)
            for _ in range(4):
                result = await client.call_tool("test_simple_text", {})
                assert "simple text" in texts(result)


async def test_a_legacy_sse_session_answers_on_its_stream_wherever_its_posts_land(two: Replicas) -> None:
    before = len(served(two))
    async with Client(sse_client(f"{two.url}/sse"), mode="legacy", read_timeout_seconds=20) as client:
        for _ in range(3):
            result = await client.call_tool("test_simple_text", {})
            assert "simple text" in texts(result)
    assert set(served(two)[before:]) == {0, 1}


async def test_delete_on_one_replica_ends_the_session_on_every_replica(two: Replicas) -> None:
    headers = ACCEPT
    async with httpx.AsyncClient(timeout=10) as http:
        first = await http.post(two.mcp, json=INIT, headers=headers)
        session = first.headers["mcp-session-id"]
        headers = {**headers, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        await http.post(two.mcp, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
        for n in range(2):  # one on each replica
            ping = await http.post(two.mcp, json={"jsonrpc": "2.0", "id": 10 + n, "method": "ping"}, headers=headers)
            assert ping.status_code == 200 and ping.json()["result"] == {}
        assert (await http.delete(two.mcp, headers=headers)).status_code == 200
        await asyncio.sleep(0.3)  # the end reaches the other replica through the bus
        for n in range(2):
            gone = await http.post(two.mcp, json={"jsonrpc": "2.0", "id": 20 + n, "method": "ping"}, headers=headers)
            assert gone.status_code == 404


async def test_an_elicitation_answered_through_another_replica_reaches_the_waiting_backend(two: Replicas) -> None:
    asked: list[str] = []

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    before = len(served(two))
    async with Client(two.mcp, mode="legacy", elicitation_callback=on_elicit, read_timeout_seconds=20) as client:
        for _ in range(2):  # the call and the answer land on different replicas at least once
            result = await client.call_tool("test_elicitation", {"message": "who are you?"})
            assert not result.is_error and "ada" in texts(result)
    assert asked == ["who are you?", "who are you?"]
    assert set(served(two)[before:]) == {0, 1}


@pytest.mark.parametrize("mode", ["2026-07-28", "auto"])
async def test_a_modern_client_answers_an_elicitation_parked_on_another_replica(two: Replicas, mode: str) -> None:
    """A legacy stdio backend asks; the gateway parks its call and hands the client a requestState; the
    client's retry lands on the other replica, which runs it on the owner through the bus."""
    asked: list[str] = []

    async def on_elicit(ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"username": "ada", "email": "ada@example.com"})

    steps: list[float] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        steps.append(value)

    async with Client(two.mcp, mode=mode, elicitation_callback=on_elicit, read_timeout_seconds=20) as client:
        assert "test_elicitation" in {t.name for t in (await client.list_tools()).tools}
        for _ in range(3):
            result = await client.call_tool("test_elicitation", {"message": "who are you?"})
            assert not result.is_error and "ada" in texts(result)
        await client.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
    assert asked == ["who are you?"] * 3
    assert steps == [0.0, 50.0, 100.0]
    assert any("relayed by replica" in gw.log() for gw in two.gateways), "a retry ran on its owner"


async def read_events(response: httpx.Response, want: int, timeout_s: float = 10.0) -> list[tuple[str, dict[str, Any]]]:
    """The next ``want`` SSE events with data (id, message) of a streamed response."""
    events: list[tuple[str, dict[str, Any]]] = []
    event_id, data = "", ""
    async with asyncio.timeout(timeout_s):
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data += line[5:].strip()
            elif line == "" and data:
                events.append((event_id, json.loads(data)))
                data = ""
                if len(events) >= want:
                    return events
    return events


async def test_last_event_id_resumes_the_sessions_stream_on_another_replica(redis_url: str) -> None:
    """The stream is held on A and its client leaves; a notification for the session is produced on B
    while nobody holds it; the client reconnects to B with its Last-Event-ID and gets what it missed."""
    config = {"backends": {"dyn": {**dynamic_backend(), "required": True}}}
    with replicas(2, redis_url, config) as group:
        a, b = (gw.mcp for gw in group.gateways)
        async with httpx.AsyncClient(timeout=10) as http:
            opened = await http.post(a, json=INIT, headers=ACCEPT)
            sid = opened.headers["mcp-session-id"]
            headers = {**ACCEPT, "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
            await http.post(a, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers)
            get_headers = {"accept": "text/event-stream", "mcp-session-id": sid, "mcp-protocol-version": "2025-06-18"}
            grow = {
                "jsonrpc": "2.0",
                "id": 5,
                "method": "tools/call",
                "params": {"name": "grow", "arguments": {"name": "t1"}},
            }
            async with http.stream("GET", a, headers=get_headers) as stream:
                await asyncio.sleep(0.3)  # the holder is registered
                assert (await http.post(a, json=grow, headers=headers)).status_code == 200
                [(first_id, first)] = await read_events(stream, 1)
            assert first["method"] == "notifications/tools/list_changed"
            await asyncio.sleep(0.3)
            grow["id"] = 6
            grow["params"]["arguments"]["name"] = "t2"
            assert (await http.post(b, json=grow, headers=headers)).status_code == 200  # nobody holds the stream
            await asyncio.sleep(0.3)
            resumed = {**get_headers, "last-event-id": first_id}
            async with http.stream("GET", b, headers=resumed) as stream:
                assert stream.status_code == 200
                [(second_id, second)] = await read_events(stream, 1)
            assert second["method"] == "notifications/tools/list_changed"
            assert int(second_id.rsplit("-", 1)[1]) > int(first_id.rsplit("-", 1)[1]), "ids keep increasing"
            await asyncio.sleep(0.5)  # B notices that reader left
            unknown = {**get_headers, "last-event-id": first_id.rsplit("-", 1)[0] + "-99999"}
            assert (await http.get(b, headers=unknown)).status_code == 404
