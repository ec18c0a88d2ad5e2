"""A client written from the seed draft (specs/mcp-draft-2025-06-18.md) works end to end.

It speaks only the draft's words: initialize with mcpVersion/clientCapabilities, initialized,
tools/invoke with its {status, output} answer, progress {id, percent}, cancel {id}, shutdown and
exit. The backend (the demo) only ever sees real MCP: had any draft name reached it, it would have
answered -32601.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
import websockets

from tests.support import RunningGateway, run_gateway

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    with run_gateway(None) as gw:
        yield gw


class Wire:
    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []

    async def send(self, message: dict[str, Any]) -> None:
        await self.ws.send(json.dumps({"jsonrpc": "2.0", **message}))

    async def answer(self, rpc_id: Any, timeout: float = 10) -> dict[str, Any]:
        """Read until the response to ``rpc_id``; everything else read meanwhile is kept."""
        async with asyncio.timeout(timeout):
            while True:
                message = json.loads(await self.ws.recv())
                if message.get("id") == rpc_id and "method" not in message:
                    return message
                self.seen.append(message)


async def test_a_draft_client_session(gateway: RunningGateway) -> None:
    url = gateway.ws()
    async with websockets.connect(url, subprotocols=["mcp"]) as ws:  # type: ignore[list-item]
        wire = Wire(ws)
        await wire.send(
            {
                "id": 1,
                "method": "initialize",
                "params": {"mcpVersion": "2025-06-18", "clientCapabilities": {"supportsProgress": True}},
            }
        )
        init = (await wire.answer(1))["result"]
        assert init["server"]["name"] == "switchboard"
        assert init["serverCapabilities"]["supportsToolDiscovery"] is True
        assert init["mcpVersion"] == "2025-06-18"
        await wire.send({"method": "initialized", "params": {}})

        tools = (await wire.send({"id": 2, "method": "tools/list"}), await wire.answer(2))[1]["result"]["tools"]
        assert {"echo", "add", "slow_count"} <= {t["name"] for t in tools}

        await wire.send({"id": 3, "method": "tools/invoke", "params": {"name": "echo", "arguments": {"text": "hi"}}})
        assert (await wire.answer(3))["result"]["status"] == "success"
        assert wire.seen == []

        await wire.send({"id": 4, "method": "tools/invoke", "params": {"name": "add", "arguments": {"a": 1, "b": 2}}})
        added = (await wire.answer(4))["result"]
        assert added["status"] == "success" and added["output"] == {"sum": 3}

        await wire.send({"id": 5, "method": "tools/invoke", "params": {"name": "echo", "arguments": {}}})
        assert (await wire.answer(5))["result"]["status"] == "error"

        await wire.send(
            {
                "id": 6,
                "method": "tools/invoke",
                "params": {"name": "slow_count", "arguments": {"n": 4, "delay_s": 0.02}},
            }
        )
        counted = await wire.answer(6)
        assert counted["result"] == {
            "status": "success",
            "output": "counted to 4",
            "content": counted["result"]["content"],
        }
        progress = [m["params"] for m in wire.seen if m.get("method") == "progress"]
        assert [p["id"] for p in progress] == [6, 6, 6, 6]
        assert [p["percent"] for p in progress] == [25, 50, 75, 100]
        assert not any(str(m.get("method", "")).startswith("notifications/progress") for m in wire.seen)

        await wire.send(
            {
                "id": 7,
                "method": "tools/invoke",
                "params": {"name": "slow_count", "arguments": {"n": 100, "delay_s": 0.1}},
            }
        )
        await asyncio.sleep(0.3)
        await wire.send({"method": "cancel", "params": {"id": 7}})
        cancelled = await wire.answer(7, timeout=3)
        assert cancelled["error"]["code"] == -32800

        await wire.send({"id": 8, "method": "shutdown"})
        assert await wire.answer(8) == {"jsonrpc": "2.0", "id": 8, "result": None}
        await wire.send({"method": "exit"})
        async with asyncio.timeout(5):
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await ws.recv()
