"""subscriptions/listen through the gateway: a modern client hears list changes and resource
updates from a backend of either era, each tagged with its subscription id, and nothing else."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from gateway.sse import SSEParser
from tests.support import RunningGateway, modern_headers as _headers, modern_meta, run_gateway

pytestmark = [pytest.mark.timeout(60)]
META = modern_meta("listener")


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    parser = SSEParser()
    async for chunk in response.aiter_raw():
        for event in parser.feed(chunk):
            if event.data:
                yield json.loads(event.data)


async def _next(events: AsyncIterator[dict[str, Any]], method: str) -> dict[str, Any]:
    """The next notification of ``method``; only kinds the listener asked for may come in between."""
    async with asyncio.timeout(10):
        async for note in events:
            assert note["method"] in ("notifications/tools/list_changed", "notifications/resources/updated"), note
            assert note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 77
            if note["method"] == method:
                return note
    raise AssertionError(f"the stream ended before {method}")


async def _call(http: httpx.AsyncClient, url: str, tool: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": tool,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": META},
    }
    response = await http.post(url, json=body, headers=_headers("tools/call", tool))
    assert response.status_code == 200, response.text
    return response.json()


async def _listen_flow(gw: RunningGateway) -> None:
    listen = {
        "jsonrpc": "2.0",
        "id": 77,
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": True, "resourceSubscriptions": ["test://watched-resource"]},
            "_meta": META,
        },
    }
    async with httpx.AsyncClient(timeout=20) as http:
        async with http.stream("POST", gw.mcp, json=listen, headers=_headers("subscriptions/listen")) as stream:
            assert stream.status_code == 200
            events = _events(stream)
            ack = await asyncio.wait_for(anext(events), 10)
            assert ack["method"] == "notifications/subscriptions/acknowledged"
            assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 77
            assert ack["params"]["notifications"] == {
                "toolsListChanged": True,
                "resourceSubscriptions": ["test://watched-resource"],
            }
            await asyncio.sleep(0.5)  # let the gateway's own subscription toward the backend settle
            await _call(http, gw.mcp, "test_trigger_prompt_change")  # not asked for: must not arrive
            await _call(http, gw.mcp, "test_trigger_tool_change")
            await _next(events, "notifications/tools/list_changed")
            await _call(http, gw.mcp, "test_trigger_resource_update")
            updated = await _next(events, "notifications/resources/updated")
            assert updated["params"]["uri"] == "test://watched-resource"


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_listen_through_the_gateway(era: str, legacy_fixture_url: str, modern_fixture_url: str) -> None:
    url = legacy_fixture_url if era == "legacy" else modern_fixture_url
    with run_gateway({"backends": {"conf": {"transport": "http", "url": url, "required": True}}}) as gw:
        await _listen_flow(gw)
