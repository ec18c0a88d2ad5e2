"""Federation as a client sees it: live list changes, and names offered twice under ``prefix: never``."""

from __future__ import annotations

import asyncio

import mcp_types as types
import pytest
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from tests.support import dynamic_backend, run_gateway

pytestmark = [pytest.mark.timeout(60)]

DYNAMIC = dynamic_backend()


async def test_list_changed_refreshes_the_merged_catalog_and_notifies_clients() -> None:
    config = {"backends": {"dyn": DYNAMIC, "demo": {"transport": "builtin", "required": True}}}
    changed = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with run_gateway(config) as gw:
        async with Client(gw.mcp, mode="legacy", message_handler=on_message, read_timeout_seconds=20) as client:
            before = {t.name for t in (await client.list_tools()).tools}
            assert "dyn__grow" in before and "demo__echo" in before and "dyn__sprout" not in before
            await client.call_tool("dyn__grow", {"name": "sprout"})
            await asyncio.wait_for(changed.wait(), 10)
            after = {t.name for t in (await client.list_tools()).tools}
            assert "dyn__sprout" in after
            result = await client.call_tool("dyn__sprout", {})
            assert isinstance(result.content[0], types.TextContent) and result.content[0].text == "I am sprout"


async def test_never_prefix_withholds_colliding_names_and_routes_the_rest() -> None:
    config = {
        "backends": {"one": {"transport": "builtin"}, "dyn": DYNAMIC},
        "federation": {"prefix": "never"},
    }
    with run_gateway(config) as gw:
        async with Client(gw.mcp, mode="legacy", read_timeout_seconds=20) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"echo", "add", "slow_count", "grow"} <= names
            await client.call_tool("grow", {"name": "echo"})  # now both backends offer "echo"
            await asyncio.sleep(0.5)
            names = {t.name for t in (await client.list_tools()).tools}
            assert "echo" not in names and "add" in names
            with pytest.raises(MCPError) as raised:
                await client.call_tool("echo", {"text": "x"})
            assert raised.value.error.code == -32092
            assert "several backends" in raised.value.error.message
            added = await client.call_tool("add", {"a": 1, "b": 2})
            assert added.structured_content == {"sum": 3}
        assert "offered by several backends" in gw.log()
