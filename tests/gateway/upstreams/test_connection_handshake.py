"""``BackendConnection`` against a scripted in-memory backend: era detection and the handshake.

The fakes (tests/gateway/upstreams/fakes.py) play a backend of either era; only the connection's
public surface is used, so these tests hold across refactors of its insides.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters import mcp_modern
from gateway import errors, jsonrpc
from tests.gateway.upstreams.fakes import LEGACY_RESULT, WAIT_S, FakeBackend, ProbeAnswer, config, finished, rig

pytestmark = pytest.mark.timeout(30)


# ---- era detection ------------------------------------------------------------------------------


async def test_auto_over_http_probes_then_falls_back_to_the_legacy_handshake() -> None:
    r = await rig(FakeBackend("legacy", "method-not-found"), config("http"))
    carrier = r.backend.carrier
    assert carrier.methods() == ["server/discover", "initialize", "notifications/initialized"]
    assert r.conn.era == "legacy" and r.conn.state == "ready"
    assert r.conn.init_result == LEGACY_RESULT
    assert r.conn.capabilities == {"tools": {}, "logging": {}}
    assert carrier.ready_calls == 1, "the carrier hears once that the handshake completed"
    assert r.handler.connected == [r.conn]
    init = carrier.find("initialize")[0]
    assert init["params"]["protocolVersion"] == "2025-11-25"
    assert init["params"]["clientInfo"] == {"name": "switchboard-test", "version": "0"}
    assert "mcpl" in init["params"]["capabilities"]["experimental"], "every backend is offered MCPL"
    assert "_meta" not in init["params"], "the legacy handshake goes out without the modern envelope"
    assert carrier.sent[1][1] is None, "no modern routing headers on a legacy request"


async def test_auto_over_http_finds_a_modern_backend_with_server_discover() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    carrier = r.backend.carrier
    assert carrier.methods() == ["server/discover"], "no initialize for a modern backend"
    assert r.conn.era == "modern" and r.conn.state == "ready"
    assert r.conn.init_result == {
        "protocolVersion": mcp_modern.LATEST_MODERN,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "fake-modern", "version": "2"},
        "instructions": "be nice",
    }
    probe, headers = carrier.sent[0]
    meta = probe["params"]["_meta"]
    assert meta[mcp_modern.PROTOCOL_VERSION_KEY] == mcp_modern.LATEST_MODERN
    assert meta[mcp_modern.CLIENT_INFO_KEY] == {"name": "switchboard-test", "version": "0"}
    assert isinstance(meta[mcp_modern.CLIENT_CAPABILITIES_KEY], dict)
    assert headers is not None
    assert headers["Mcp-Method"] == "server/discover"
    assert headers["MCP-Protocol-Version"] == mcp_modern.LATEST_MODERN


async def test_a_modern_call_carries_the_envelope_and_the_routing_headers() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    assert message["params"]["name"] == "echo"
    assert message["params"]["_meta"][mcp_modern.PROTOCOL_VERSION_KEY] == mcp_modern.LATEST_MODERN
    headers = next(h for m, h in carrier.sent if m is message)
    assert headers is not None and headers["Mcp-Method"] == "tools/call" and headers["Mcp-Name"] == "echo"
    carrier.answer(message["id"], {"content": [], "resultType": "complete"})
    assert (await finished(call))["result"] == {"content": [], "resultType": "complete"}


async def test_over_stdio_initialize_goes_first_and_a_legacy_server_never_sees_server_discover() -> None:
    r = await rig(FakeBackend("legacy"), config("stdio"))
    assert r.backend.carrier.methods() == ["initialize", "notifications/initialized"]
    assert r.conn.era == "legacy"
    assert r.conn.init_result["serverInfo"] == {"name": "fake-legacy", "version": "1"}


async def test_over_stdio_a_server_that_refuses_initialize_is_asked_server_discover() -> None:
    r = await rig(FakeBackend("modern"), config("stdio"))
    assert r.backend.carrier.methods() == ["initialize", "server/discover"]
    assert r.conn.era == "modern"
    assert r.conn.init_result["serverInfo"] == {"name": "fake-modern", "version": "2"}


@pytest.mark.parametrize("probe_answer", ["server-error-id", "null-id"])
async def test_a_probe_refused_under_an_id_of_its_own_is_a_decisive_no_at_once(probe_answer: ProbeAnswer) -> None:
    # The probe may wait up to min(5 s, connect timeout); a decisive "no" must not wait at all.
    loop = asyncio.get_running_loop()
    started = loop.time()
    r = await rig(FakeBackend("legacy", probe_answer), config("http"), ready=False)
    assert await r.conn.wait_ready(1.0), r.conn.last_error
    assert loop.time() - started < 1.0
    assert r.conn.era == "legacy"
    assert r.backend.carrier.methods() == ["server/discover", "initialize", "notifications/initialized"]
    assert len(r.backend.carriers) == 1, "no reconnect was needed"


async def test_an_error_only_a_modern_server_uses_fails_the_connect() -> None:
    r = await rig(FakeBackend("legacy", "modern-error"), config("http"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.state in ("down", "connecting")
    assert r.conn.last_error is not None and "refused the modern envelope" in r.conn.last_error
    assert "initialize" not in r.backend.carriers[0].methods()


async def test_a_probe_that_kills_the_connection_is_remembered_and_the_retry_initializes() -> None:
    r = await rig(FakeBackend("legacy", "die", blocking=True), config("http"))
    first, second = r.backend.carriers
    assert first.methods() == ["server/discover"]
    assert second.methods() == ["initialize", "notifications/initialized"], "no second probe"
    assert r.conn.era == "legacy" and r.conn.init_result == LEGACY_RESULT


@pytest.mark.parametrize(
    ("init_result", "reason"),
    [
        pytest.param({"capabilities": {}}, "lacks protocolVersion", id="no-version"),
        pytest.param(["not", "an", "object"], "lacks protocolVersion", id="not-an-object"),
    ],
)
async def test_a_malformed_initialize_result_fails_the_connect(init_result: Any, reason: str) -> None:
    backend = FakeBackend("legacy")
    backend.init_result = init_result
    r = await rig(backend, config("http", era="legacy"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.last_error is not None and reason in r.conn.last_error
    assert "notifications/initialized" not in backend.carriers[0].methods()


async def test_an_unknown_legacy_version_is_accepted() -> None:
    backend = FakeBackend("legacy")
    backend.init_result = {**LEGACY_RESULT, "protocolVersion": "2030-01-01"}
    r = await rig(backend, config("http", era="legacy"))
    assert r.conn.protocol_version == "2030-01-01" and r.conn.state == "ready"


async def test_a_backend_that_dies_during_the_handshake_fails_the_attempt_at_once() -> None:
    backend = FakeBackend("legacy")
    backend.die_on_initialize = True
    r = await rig(backend, config("stdio"), ready=False)  # connect_timeout_s is 10
    settled = await r.conn.wait_settled(1.0)
    assert settled, "the attempt is still waiting for an answer from a dead backend"
    assert r.conn.last_error is not None and "during initialize" in r.conn.last_error


async def test_era_legacy_skips_the_probe() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="legacy"))
    assert r.backend.carrier.methods() == ["initialize", "notifications/initialized"]


async def test_era_modern_does_not_fall_back_to_initialize() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="modern"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert not await r.conn.wait_ready(0.05)
    assert r.conn.last_error is not None and "2026-07-28" in r.conn.last_error
    assert all("initialize" not in c.methods() for c in r.backend.carriers)


async def test_a_refused_handshake_is_retried_with_backoff() -> None:
    r = await rig(FakeBackend("modern"), config("http", era="legacy"), ready=False)
    assert await r.conn.wait_settled(WAIT_S)
    assert r.conn.last_error is not None and "initialize refused" in r.conn.last_error
    await r.backend.until(lambda: len(r.backend.carriers) >= 3)
    assert r.handler.connected == [] and r.handler.disconnected == [], "never up, so never announced down"
    with pytest.raises(jsonrpc.RpcError) as refused:
        await r.conn.request("tools/list", {})
    assert refused.value.code == errors.BACKEND_UNAVAILABLE


async def test_mcpl_can_be_left_out_of_the_offer() -> None:
    r = await rig(FakeBackend("legacy"), config("http", era="legacy"), offer_mcpl=False)
    init = r.backend.carrier.find("initialize")[0]
    assert "experimental" not in init["params"]["capabilities"]
