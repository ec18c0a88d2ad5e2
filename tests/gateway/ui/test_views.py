"""What the overview, sessions and backends pages are built from (gateway/ui/snapshot.py), read from a
real Gateway: the builtin demo backend and a real MCPL backend process, an MGP client and an MCPL host
driven through the router."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.config import Config
from gateway.core import Gateway
from gateway.ui import dashboard_for
from policies.auth import Credentials
from tests.e2e.mcpl_support import mcpl_backend
from tests.gateway.mgp.demo_gateway import ECHO, ask, mgp_session_of, rpc
from tests.support import initialize_request

pytestmark = pytest.mark.timeout(60)

ECHO_DEMO = {**ECHO, "name": "demo__echo"}  # two backends: names are prefixed
MCPL_HOST = {"experimental": {"mcpl": {"version": "0.4", "featureSets": True}}}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    config = Config.model_validate(
        {
            "backends": {"demo": {"transport": "builtin"}, "notes": mcpl_backend("notes")},
            "mgp": {"tools": {"demo": {"echo": {"risk_level": "moderate", "side_effects": ["network"]}}}},
        }
    )
    gw = Gateway(config)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        assert await gw.connections["notes"].wait_ready(20)
        yield gw
    finally:
        await gw.stop()


async def test_sessions_show_dialects_era_mcpl_and_mgp(gateway: Gateway) -> None:
    dashboard = dashboard_for(gateway)
    views = dashboard._sessions
    mgp, _ = await mgp_session_of(gateway, "0.8.0", ["tool_security", "access_control"])
    host = gateway.open_session("streamable_http", gateway.federated, Credentials("anonymous", "anonymous"))
    request = initialize_request(0, capabilities=MCPL_HOST)
    assert "result" in await ask(gateway, host, request)
    await ask(gateway, mgp, rpc("tools/call", ECHO_DEMO))
    rows = {row["id"]: row for row in views.rows()}
    mgp_row, host_row = rows[mgp.id[:8]], rows[host.id[:8]]
    assert mgp_row["dialects"] == ["MCP", "MGP"] and mgp_row["era"] == "legacy" and mgp_row["door"] == "test"
    assert mgp_row["mgp_extensions"] == ["access_control", "tool_security"] and mgp_row["mcpl_feature_sets"] is None
    assert host_row["principal"] == "anonymous" and host_row["dialects"] == ["MCP", "MCPL"]
    assert isinstance(host_row["mcpl_feature_sets"], list) and host_row["mgp_extensions"] is None
    assert all(len(row["id"]) == 8 for row in rows.values()), "never a whole session id"
    summary = views.summary()
    assert summary["total"] == 2 and summary["by_dialect"]["MGP"] == 1 and summary["by_dialect"]["MCPL"] == 1
    gateway.sessions.end(host)
    assert host.id[:8] not in {row["id"] for row in views.rows()}


async def test_backends_show_dialects_latency_and_tool_security(gateway: Gateway) -> None:
    backends = dashboard_for(gateway)._backends
    session, _ = await mgp_session_of(gateway)
    for _ in range(3):
        await ask(gateway, session, rpc("tools/call", ECHO_DEMO))
    rows = {row["name"]: row for row in backends.rows()}
    assert rows["notes"]["dialects"][:2] == ["MCP", "MCPL"] and rows["notes"]["transport"] == "stdio"
    assert rows["demo"]["state"] == "ready" and rows["demo"]["calls"] >= 3
    assert rows["demo"]["p50_ms"] is not None and rows["demo"]["p99_ms"] >= rows["demo"]["p50_ms"]
    detail = await backends.detail("demo")
    assert detail is not None and detail["trust_level"] == "standard"
    [echo] = [t for t in detail["catalog"]["tools"] if t["name"] == "echo"]
    assert echo["security"]["risk_level"] == "moderate" and echo["security"]["side_effects"] == ["network"]
    assert echo["pin"]["state"] in ("pinned", "off")
    assert await backends.detail("nope") is None
