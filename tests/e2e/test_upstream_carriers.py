"""Every backend carrier for real: gateway A reaches gateway B over legacy SSE, WebSocket and Streamable HTTP.

Gateway B runs the embedded default (the in-process demo backend); gateway A lists B three times,
once per carrier, so each carrier's client side meets a real server side.
"""

from __future__ import annotations

from collections.abc import Iterator

import mcp_types as types
import pytest
from mcp.client import Client

from tests.support import RunningGateway, run_gateway

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]
CARRIERS = ["viasse", "viaws", "viahttp"]


@pytest.fixture(scope="module")
def chained() -> Iterator[RunningGateway]:
    with run_gateway(None) as inner:
        ws_url = inner.url.replace("http://", "ws://")
        config = {
            "backends": {
                "viasse": {"transport": "sse", "url": f"{inner.url}/sse", "required": True},
                "viaws": {"transport": "ws", "url": f"{ws_url}/mcp/ws", "required": True},
                "viahttp": {"transport": "http", "url": f"{inner.url}/mcp", "required": True},
            }
        }
        with run_gateway(config) as outer:
            yield outer


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_calls_progress_and_logs_cross_each_carrier(chained: RunningGateway, carrier: str) -> None:
    logs: list[object] = []

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params.data)

    async with Client(chained.mcp, mode="legacy", logging_callback=on_log, read_timeout_seconds=20) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {f"{c}__echo" for c in CARRIERS} <= tools

        echoed = await client.call_tool(f"{carrier}__echo", {"text": f"hello over {carrier}"})
        assert isinstance(echoed.content[0], types.TextContent)
        assert echoed.content[0].text == f"hello over {carrier}"

        added = await client.call_tool(f"{carrier}__add", {"a": 2, "b": 40})
        assert added.structured_content == {"sum": 42}

        steps: list[float] = []

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            steps.append(value)

        counted = await client.call_tool(
            f"{carrier}__slow_count", {"n": 3, "delay_s": 0.01}, progress_callback=on_progress
        )
        assert isinstance(counted.content[0], types.TextContent) and counted.content[0].text == "counted to 3"
        assert steps == [1, 2, 3]
        assert [entry for entry in logs if isinstance(entry, str) and entry.startswith("count ")] == [
            "count 1/3",
            "count 2/3",
            "count 3/3",
        ]

        contents = (await client.read_resource(f"{carrier}+demo://readme")).contents
        assert isinstance(contents[0], types.TextResourceContents) and "demo backend" in contents[0].text


async def test_an_http_backend_that_only_speaks_legacy_sse_is_found() -> None:
    """Era detection over HTTP: modern probe, then initialize, then legacy HTTP+SSE at the same URL."""
    import httpx

    with run_gateway(None) as inner:
        config = {"backends": {"old": {"transport": "http", "url": f"{inner.url}/sse", "required": True}}}
        with run_gateway(config) as outer:
            async with httpx.AsyncClient(timeout=5) as http:
                backend = (await http.get(f"{outer.url}/readyz")).json()["backends"]["old"]
            assert backend["state"] == "ready" and backend["era"] == "legacy"
            async with Client(outer.mcp, mode="legacy", read_timeout_seconds=20) as client:
                echoed = await client.call_tool("echo", {"text": "found over SSE"})
                assert isinstance(echoed.content[0], types.TextContent)
                assert echoed.content[0].text == "found over SSE"
            assert "trying legacy HTTP+SSE" in outer.log()
