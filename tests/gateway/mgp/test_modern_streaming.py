"""MGP streaming (MGP_COMMUNICATION.md §12) for clients of the 2026-07-28 era (MGP_SECURITY.md §2.6),
through the real HTTP door: a ``_mgp.stream: true`` call's exchange answers on an SSE stream with
the chunks and progress under the client's id, then the result with its §12.5 ``_mgp`` summary;
``mgp.stream.cancel`` from a later exchange of the same principal finds the call."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from adapters import mcp_modern
from adapters.mgp import streaming as wire
from gateway import jsonrpc
from gateway.core import Gateway
from tests.gateway.transports.modern_door_support import META, client_for, headers_for, rpc

pytestmark = pytest.mark.timeout(30)

MGP = {"version": "0.8.0", "extensions": ["streaming", "progress"]}
# A modern client gets log lines (a synthesized stream's chunks) only at a level it asked for.
MGP_META = {
    **META,
    mcp_modern.CLIENT_CAPABILITIES_KEY: {"extensions": {"dev.cloto/mgp": MGP}},
    mcp_modern.LOG_LEVEL_KEY: "info",
}


@pytest.fixture
async def door() -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    async for pair in client_for({"federation": {"prefix": "never"}}):
        yield pair


def count(n: int, delay_s: float, rpc_id: Any, meta: Any = MGP_META) -> dict[str, Any]:
    params = {"name": "slow_count", "arguments": {"n": n, "delay_s": delay_s}, "_mgp": {"stream": True}}
    return rpc("tools/call", params, rpc_id, meta)


def events(answer: httpx.Response) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/event-stream"), "something preceded the result"
    return [json.loads(line[5:]) for line in answer.text.splitlines() if line.startswith("data:")]


def of(messages: list[dict[str, Any]], method: str) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == method]


async def test_a_modern_clients_call_streams_like_a_legacy_ones(door: tuple[httpx.AsyncClient, Gateway]) -> None:
    client, gw = door
    answer = await client.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=count(3, 0.01, "m-1"))
    messages = events(answer)
    chunks = of(messages, wire.CHUNK)
    assert [(c["request_id"], c["index"], c["content"]["text"]) for c in chunks] == [
        ("m-1", 0, "count 1/3"),
        ("m-1", 1, "count 2/3"),
        ("m-1", 2, "count 3/3"),
    ]
    assert [p["request_id"] for p in of(messages, wire.PROGRESS)] == ["m-1"] * 3
    assert of(messages, "notifications/progress") == [], "the gateway's progress token is not the client's"
    final = messages[-1]
    assert final["id"] == "m-1"
    marker = final["result"]["_mgp"]
    assert marker["streamed"] is True and marker["chunks_sent"] == 3
    assert final["result"]["resultType"] == "complete", "the modern era's stamp is kept"
    assert gw.mgp.streams.in_flight == 0


async def test_a_modern_client_without_streaming_gets_one_json_answer(door: tuple[httpx.AsyncClient, Gateway]) -> None:
    client, _ = door
    meta = {**META, mcp_modern.CLIENT_CAPABILITIES_KEY: {"extensions": {"dev.cloto/mgp": {"version": "0.8.0"}}}}
    answer = await client.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=count(2, 0.01, 1, meta))
    assert answer.headers["content-type"].startswith("application/json")
    assert "_mgp" not in answer.json()["result"]


async def test_cancel_from_a_later_exchange_of_the_same_principal(door: tuple[httpx.AsyncClient, Gateway]) -> None:
    client, gw = door
    first = asyncio.create_task(
        client.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=count(200, 0.02, 41))
    )
    async with asyncio.timeout(5):
        while gw.mgp.streams.in_flight == 0:  # noqa: ASYNC110 (the call's exchange runs in another task)
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # a few chunks arrive
    cancel = rpc("tools/call", {"name": "mgp.stream.cancel", "arguments": {"request_id": 41}}, 42, MGP_META)
    answer = await client.post("/mcp", headers=headers_for("tools/call", "mgp.stream.cancel"), json=cancel)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]["structuredContent"]
    assert result["cancelled"] is True
    assert result["partial_result"]["content"][0]["text"].startswith("count 1/200")
    messages = events(await first)
    assert messages[-1]["id"] == 41 and messages[-1]["error"]["code"] == jsonrpc.REQUEST_CANCELLED
    assert gw.mgp.streams.in_flight == 0
    again = await client.post("/mcp", headers=headers_for("tools/call", "mgp.stream.cancel"), json=cancel)
    assert "error" in json.dumps(again.json()), "nothing left to cancel"


async def test_a_cancel_naming_two_calls_of_the_principal_cancels_neither(
    door: tuple[httpx.AsyncClient, Gateway],
) -> None:
    client, gw = door
    calls = [
        asyncio.create_task(
            client.post("/mcp", headers=headers_for("tools/call", "slow_count"), json=count(15, 0.02, 7))
        )
        for _ in range(2)
    ]
    async with asyncio.timeout(5):
        while gw.mgp.streams.in_flight < 2:  # noqa: ASYNC110 (the calls' exchanges run in other tasks)
            await asyncio.sleep(0.01)
    cancel = rpc("tools/call", {"name": "mgp.stream.cancel", "arguments": {"request_id": 7}}, 8, MGP_META)
    answer = await client.post("/mcp", headers=headers_for("tools/call", "mgp.stream.cancel"), json=cancel)
    assert "ambiguous" in json.dumps(answer.json())
    for done in await asyncio.gather(*calls):
        assert events(done)[-1]["result"]["_mgp"]["chunks_sent"] == 15, "both ran to the end"
