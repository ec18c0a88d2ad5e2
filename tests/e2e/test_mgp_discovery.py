"""MGP §16 tool discovery over real stdio backends (plain MCP, no SDK): the gateway's index follows a backend's
``notifications/tools/list_changed`` and keeps a lost backend's tools as ``disconnected``.

The gateway runs in-process (driven through ``Router.handle``); the backends are real subprocesses:
tests/e2e/backends/dynamic.py (tool ``grow`` adds a tool and announces list_changed) and crashy.py (tool
``die`` exits the process; a long restart backoff keeps it down).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.config import Config
from gateway.core import Gateway
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc
from tests.support import crashy_backend, dynamic_backend

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    config = Config.model_validate(
        {
            "backends": {
                "dyn": dynamic_backend(),
                "crashy": crashy_backend(required=True, restart={"initial_backoff_s": 60}),
            },
            "federation": {"prefix": "always"},
        }
    )
    gw = Gateway(config)
    await gw.start()
    try:
        for conn in gw.connections.values():
            assert await conn.wait_ready(10), conn.last_error
        yield gw
    finally:
        await gw.stop()


async def names_found(gw: Gateway, session: Any, query: str, status: str = "connected") -> list[str]:
    params = {"query": query, "max_results": 10, "filter": {"status": status}}
    answer = await ask(gw, session, rpc("mgp/tools/discover", params))
    assert "result" in answer, answer
    return [tool["name"] for tool in answer["result"]["tools"]]


async def test_discovery_follows_list_changed_and_keeps_a_lost_backend_as_disconnected(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.3.0")
    assert await names_found(gateway, session, "grow") == ["dyn__grow"]
    assert await names_found(gateway, session, "weather") == []

    grown = await ask(gateway, session, rpc("tools/call", {"name": "dyn__grow", "arguments": {"name": "weather_now"}}))
    assert "result" in grown, grown
    # the backend announced list_changed before it answered: the catalog was invalidated in order
    assert await names_found(gateway, session, "weather") == ["dyn__weather_now"]

    assert (await names_found(gateway, session, "answers ok"))[0] == "crashy__ok"
    await ask(gateway, session, rpc("tools/call", {"name": "crashy__die", "arguments": {}}, 2))
    async with asyncio.timeout(5):
        # polled: a connection offers no "went down" event to wait on
        while gateway.connections["crashy"].state == "ready":  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    assert await names_found(gateway, session, "answers ok") == [], "only connected backends by default"
    assert (await names_found(gateway, session, "answers ok", "disconnected"))[0] == "crashy__ok"
    assert "crashy__ok" in await names_found(gateway, session, "answers ok", "all")
    assert await names_found(gateway, session, "grow", "disconnected") == []
