"""Live events across replicas: two gateway processes on one real redis-server; a person watching the
events page of one sees the denied call made through the other, tagged with that replica."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.gateway.ui.browser import Page
from tests.support import fixture_stdio_backend, run_gateway

pytestmark = [pytest.mark.timeout(120)]

ADMIN = "ui-replicas-admin-8e21"
BOB = "bob-replicas-6f0a"


def config(redis_url: str, prefix: str) -> dict[str, Any]:
    return {
        "backends": {"fx": fixture_stdio_backend(required=True)},
        "bus": {"kind": "redis", "url": redis_url, "prefix": prefix},
        "auth": {"admin_token": ADMIN},
        "principals": {"bob": {"tokens": [BOB], "capabilities": ["mcp/request:initialize", "mcp/request:tools/list"]}},
    }


async def test_a_viewer_on_one_replica_sees_a_denied_call_made_on_the_other(driver: Any, redis_url: str) -> None:
    prefix = f"ui-{uuid.uuid4().hex[:8]}:"
    with run_gateway(config(redis_url, prefix)) as one, run_gateway(config(redis_url, prefix)) as two:
        page = Page(driver, one.url)
        await page.open("events", token=ADMIN)
        await page.wait_text("#stream-status", "live")
        async with httpx.AsyncClient(base_url=two.url, timeout=10) as http:
            whoami = (await http.get("/ui/api/whoami", headers={"authorization": f"Bearer {ADMIN}"})).json()
        other = whoami["replica"]
        assert other not in await page.text("#stream-status"), "two distinct replicas"
        await page.type("#filter-principal", "bob")
        # The other replica publishes once it has heard the viewer (announced every 5 s): call until seen.
        http_client = httpx2.AsyncClient(headers={"authorization": f"Bearer {BOB}"}, timeout=30)
        async with http_client, Client(streamable_http_client(two.mcp, http_client=http_client)) as bob:
            for _ in range(30):
                with pytest.raises(MCPError):
                    await bob.call_tool("test_simple_text", {})
                rows = await page.texts("#events-table tr.event")
                if any(other in row for row in rows):
                    break
                await asyncio.sleep(0.5)
        row = await page.wait_text("#events-table tr.event", other)
        assert "bob" in row and "denied" in row and "tools/call" in row
