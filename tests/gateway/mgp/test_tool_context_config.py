"""The configured §16.8 budget (``mgp.tool_context``) and §16.7 per-agent pins (``mgp.pinned_tools``)
apply to a real Gateway's tool cache (gateway/mgp/assembly.py -> gateway/mgp/discovery_service.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.core import Gateway
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, started

pytestmark = pytest.mark.timeout(30)

CONFIG = {
    "tool_context": {"max_tokens": 5000, "discovery_reserve": 1000, "cache_limit": 1500},
    "pinned_tools": {"*": ["echo"], "nobody": ["add"]},
}


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async for running in started(CONFIG):
        yield running


async def test_the_configured_budget_and_pins_shape_the_session(gw: Gateway) -> None:
    session, _ = await mgp_session_of(gw)
    status = (await ask(gw, session, rpc("mgp/tools/session", {})))["result"]
    assert status["max_tokens"] == 5000, "mgp.tool_context.max_tokens"
    assert "echo" in status["pinned"], "pinned for every agent ('*')"
    assert "add" not in status["pinned"], "pinned only for the agent 'nobody'"
    evicted = (await ask(gw, session, rpc("mgp/tools/session/evict", {"tools": ["echo"]}, 2)))["result"]
    assert evicted["not_evicted"] == [{"name": "echo", "reason": "pinned"}]


async def test_the_default_gateway_pins_no_backend_tool() -> None:
    async for gw in started():
        session, _ = await mgp_session_of(gw)
        status = (await ask(gw, session, rpc("mgp/tools/session", {})))["result"]
        assert status["max_tokens"] == 8000 and "echo" not in status["pinned"]
