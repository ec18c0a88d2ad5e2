"""MGP §16 tool discovery answered by the gateway (gateway/mgp/discovery_service.py, federated_index.py),
in-process on a real Gateway with the builtin (plain MCP) demo backend: tools echo, add, slow_count."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.core import Gateway
from gateway.mgp.discovery_service import DiscoveryService
from gateway.sessions import ClientSession
from gateway.upstreams import demo
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, session_of, started

pytestmark = pytest.mark.timeout(30)

# Trust core: the declared risk is the effective one (§4.6), so each tool has a distinct level.
SECURED = {
    "trust": {"demo": "core"},
    "tools": {
        "demo": {
            "echo": {"risk_level": "safe"},
            "add": {"risk_level": "moderate"},
            "slow_count": {"risk_level": "dangerous"},
        }
    },
}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started(SECURED):
        yield gw


async def discover(gw: Gateway, session: ClientSession, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
    answer = await ask(gw, session, rpc("mgp/tools/discover", params), **kw)
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    return result


async def kernel(gw: Gateway, session: ClientSession, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A draft kernel tool call; returns its structured result (after checking the text twin)."""
    answer = await ask(gw, session, rpc("tools/call", {"name": tool, "arguments": arguments}))
    assert "result" in answer, answer
    result = answer["result"]
    assert result["isError"] is False
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def names_of(result: dict[str, Any]) -> list[str]:
    return [tool["name"] for tool in result["tools"]]


# -- mgp/tools/discover -------------------------------------------------------------------------------------


async def test_discover_ranks_federated_tools_with_their_effective_security(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.3.0")
    result = await discover(gateway, session, {"query": "add two numbers"})
    first = result["tools"][0]
    assert first["name"] == "add" and first["server_id"] == "demo"
    assert first["description"] == "Add two numbers."
    assert first["inputSchema"]["required"] == ["a", "b"]
    listed = {t["name"]: t for t in (await ask(gateway, session, rpc("tools/list", rpc_id=2)))["result"]["tools"]}
    assert first["security"] == listed["add"]["security"], "the security an MGP client lists"
    assert first["security"]["risk_level"] == "moderate", "configured by the operator for a plain backend"
    assert 0 < first["relevance_score"] <= 1
    assert result["total_available"] == 3
    assert result["search_strategy"] == "keyword"
    assert isinstance(result["query_time_ms"], float) and result["query_time_ms"] >= 0


async def test_the_seed_method_and_the_draft_kernel_tool_answer_alike(gateway: Gateway) -> None:
    seed, _ = await mgp_session_of(gateway, "0.3.0")
    draft, _ = await mgp_session_of(gateway, "0.8.0")
    by_method = await discover(gateway, seed, {"query": "echo text"})
    by_tool = await kernel(gateway, draft, "mgp.tools.discover", {"query": "echo text"})
    assert names_of(by_tool) == names_of(by_method) and names_of(by_tool)[0] == "echo"
    assert by_tool["tools"][0]["relevance_score"] == by_method["tools"][0]["relevance_score"]
    assert by_tool["total_available"] == by_method["total_available"] == 3
    listed = (await ask(gateway, draft, rpc("tools/list")))["result"]["tools"]
    assert {"mgp.tools.discover", "mgp.tools.request", "mgp.tools.session", "mgp.tools.session.evict"} <= {
        t["name"] for t in listed
    }


async def test_risk_filter_uses_operator_configured_security_of_a_plain_backend(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    everything = {"query": "", "max_results": 10}
    assert names_of(await discover(gateway, session, everything)) == ["add", "echo", "slow_count"]
    safe = await discover(gateway, session, {**everything, "filter": {"risk_level_max": "safe"}})
    assert names_of(safe) == ["echo"] and safe["total_available"] == 1
    moderate = await discover(gateway, session, {**everything, "filter": {"risk_level_max": "moderate"}})
    assert names_of(moderate) == ["add", "echo"]
    by_category = await discover(gateway, session, {**everything, "filter": {"categories": ["demo"]}})
    assert by_category["total_available"] == 3
    assert (await discover(gateway, session, {**everything, "filter": {"categories": ["nope"]}}))["tools"] == []


async def test_a_tool_the_caller_may_not_call_is_never_discovered(gateway: Gateway) -> None:
    session = await session_of(gateway)
    reader = Principal("reader", CapabilitySet(["mcp/request:mgp/tools/discover", "mcp/request:tools/call:echo"]))
    result = await discover(gateway, session, {"query": "add two numbers"}, principal=reader)
    assert result["tools"] == [] and result["total_available"] == 1, "add is hidden, even from the count"
    assert names_of(await discover(gateway, session, {"query": "echo"}, principal=reader)) == ["echo"]


async def test_mgp_access_control_hides_tools_from_discovery_too() -> None:
    deny = {"agent_id": "anonymous", "server_id": "demo", "tool_name": "add", "permission": "deny"}
    async for gw in started({"access": [deny]}):
        session, _ = await mgp_session_of(gw)
        result = await discover(gw, session, {"query": "add numbers", "max_results": 10})
        assert "add" not in names_of(result) and result["total_available"] == 2


async def test_malformed_params_are_invalid_params(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    cases = [
        ("mgp/tools/discover", {"query": 5}, "query"),
        ("mgp/tools/discover", {"query": "x", "filter": {"risk_level_max": "extreme"}}, "risk_level_max"),
        ("mgp/tools/discover", {"query": "x", "filter": []}, "filter"),
        ("mgp/tools/request", {"reason": "capability_gap", "context": "x", "requirements": []}, "requirements"),
        ("mgp/tools/request", {"reason": 3, "context": "x", "requirements": {}}, "reason"),
        ("mgp/tools/request", {"reason": "capability_gap", "context": "", "requirements": {}}, "needed"),
        ("mgp/tools/request", {"context": "x", "requirements": {"capabilities": [""]}}, "capabilities"),
        ("mgp/tools/session/evict", {"tools": "echo"}, "tools"),
        ("mgp/tools/session/evict", {}, "tools"),
        ("mgp/tools/session/evict", {"tools": ["echo"], "reason": 1}, "reason"),
    ]
    for method, params, word in cases:
        answer = await ask(gateway, session, rpc(method, params))
        assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS, (method, params, answer)
        assert word in answer["error"]["message"], answer
    through_tool = await ask(
        gateway, session, rpc("tools/call", {"name": "mgp.tools.discover", "arguments": {"query": 1}})
    )
    assert through_tool["error"]["code"] == jsonrpc.INVALID_PARAMS, "a kernel tool's error stays an error"


# -- the index follows the catalog --------------------------------------------------------------------------


async def test_list_changed_refreshes_the_index_and_nothing_else_does(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = await mgp_session_of(gateway)
    assert (await discover(gateway, session, {"query": "weather"}))["tools"] == []
    view_index = await gateway.mgp.discovery.index.current(gateway.federated)
    indexed = view_index.indexed["demo"]
    await discover(gateway, session, {"query": "echo"})
    assert view_index.indexed["demo"] is indexed, "an unchanged catalog is not re-indexed"

    forecast = {
        "name": "forecast",
        "description": "Weather forecast for a city.",
        "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    monkeypatch.setattr(demo, "TOOLS", [*demo.TOOLS[:2], forecast])  # slow_count goes, forecast comes
    note = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    gateway._backend_events.on_notification(gateway.connections["demo"], note)
    result = await discover(gateway, session, {"query": "weather forecast"})
    assert names_of(result) == ["forecast"] and result["tools"][0]["server_id"] == "demo"
    assert result["tools"][0]["security"] == {"effective_risk_level": "safe"}, "trusted core, nothing configured"
    assert (await discover(gateway, session, {"query": "slow count"}))["tools"] == []
    assert view_index.indexed["demo"] is not indexed


async def test_a_single_server_view_has_its_own_index(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    session.view = gateway.single["demo"]
    result = await discover(gateway, session, {"query": "add"})
    assert names_of(result)[0] == "add" and result["tools"][0]["server_id"] == "demo"
    assert gateway.single["demo"] is not gateway.federated


# -- mgp/tools/request, session, evict ----------------------------------------------------------------------

REQUEST_ADD = {
    "reason": "capability_gap",
    "context": "I need arithmetic",
    "requirements": {"capabilities": ["add numbers"], "preferred_risk_level": "moderate"},
}


async def test_request_loads_the_best_tool_and_session_and_evict_manage_the_cache(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    loaded = await kernel(gateway, session, "mgp.tools.request", REQUEST_ADD)
    assert loaded["status"] == "fulfilled" and loaded["tools_unavailable"] == []
    assert [(t["name"], t["server_id"]) for t in loaded["tools_loaded"]] == [("add", "demo")]
    assert loaded["tools_loaded"][0]["security"]["risk_level"] == "moderate"
    assert loaded["context_tokens_added"] > 0
    status = await kernel(gateway, session, "mgp.tools.session", {})
    assert status["pinned"] == ["mgp.tools.discover", "mgp.tools.request"], "§16.8: the LLM's meta-tools"
    assert status["cached"] == ["add"] and loaded["session_tools_count"] == 3
    assert 0 < status["total_tokens"] <= status["max_tokens"] == 8000

    evicted = await kernel(
        gateway, session, "mgp.tools.session.evict", {"tools": ["add", "mgp.tools.discover", "nope"], "reason": "done"}
    )
    assert evicted["evicted"] == ["add"]
    assert evicted["not_evicted"] == [
        {"name": "mgp.tools.discover", "reason": "pinned"},
        {"name": "nope", "reason": "not_cached"},
    ]
    after = (await ask(gateway, session, rpc("mgp/tools/session", {})))["result"]
    assert after["cached"] == [] and after["pinned"] == status["pinned"]
    assert after["total_tokens"] == evicted["total_tokens"] < status["total_tokens"]


async def test_a_seed_client_pins_its_meta_tools_by_method_name(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.3.0")
    status = (await ask(gateway, session, rpc("mgp/tools/session")))["result"]
    assert status["pinned"] == ["mgp/tools/discover", "mgp/tools/request"]
    loaded = (await ask(gateway, session, rpc("mgp/tools/request", REQUEST_ADD)))["result"]
    assert loaded["status"] == "fulfilled"
    refused = await ask(gateway, session, rpc("mgp/tools/session/evict", {"tools": ["mgp/tools/discover"]}))
    assert refused["result"]["not_evicted"] == [{"name": "mgp/tools/discover", "reason": "pinned"}]


async def test_request_respects_risk_and_visibility(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    too_risky = {**REQUEST_ADD, "requirements": {"capabilities": ["count"], "preferred_risk_level": "moderate"}}
    answer = (await ask(gateway, session, rpc("mgp/tools/request", too_risky)))["result"]
    assert answer["status"] == "unavailable" and answer["tools_unavailable"] == ["count"]
    mixed = {**REQUEST_ADD, "requirements": {"capabilities": ["echo", "add"]}}
    reader = Principal("reader", CapabilitySet(["mcp/request:mgp/tools/*", "mcp/request:tools/call:echo"]))
    partial = (await ask(gateway, session, rpc("mgp/tools/request", mixed), principal=reader))["result"]
    assert partial["status"] == "partial" and [t["name"] for t in partial["tools_loaded"]] == ["echo"]
    assert partial["tools_unavailable"] == ["add"]


async def test_a_cached_tool_that_leaves_the_catalog_leaves_the_cache(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    session, _ = await mgp_session_of(gateway)
    await ask(gateway, session, rpc("mgp/tools/request", REQUEST_ADD))
    assert (await ask(gateway, session, rpc("mgp/tools/session")))["result"]["cached"] == ["add"]
    monkeypatch.setattr(demo, "TOOLS", [demo.TOOLS[0]])
    gateway._backend_events.on_notification(
        gateway.connections["demo"], {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    )
    assert (await ask(gateway, session, rpc("mgp/tools/session")))["result"]["cached"] == []


async def test_a_plain_session_gets_a_transient_cache(gateway: Gateway) -> None:
    session = await session_of(gateway)
    loaded = (await ask(gateway, session, rpc("mgp/tools/request", REQUEST_ADD)))["result"]
    assert loaded["status"] == "fulfilled" and loaded["tools_loaded"][0]["name"] == "add"
    assert loaded["session_tools_count"] == 1, "no meta-tools pinned for a client that has none"
    status = (await ask(gateway, session, rpc("mgp/tools/session")))["result"]
    assert status == {"pinned": [], "cached": [], "total_tokens": 0, "max_tokens": 8000}
    evicted = (await ask(gateway, session, rpc("mgp/tools/session/evict", {"tools": ["add"]})))["result"]
    assert evicted["not_evicted"] == [{"name": "add", "reason": "not_cached"}]
    assert session.mgp is None


async def test_operator_pins_per_agent_are_pinned_only_when_visible(gateway: Gateway) -> None:
    service = DiscoveryService(
        gateway.mgp.discovery.index, gateway.chain, pinned={"*": ["echo"], "anonymous": ["add", "missing"]}
    )
    session, _ = await mgp_session_of(gateway)
    event_call = await _call(gateway, session, "mgp/tools/session", {})
    status = (await service.session(event_call)).response["result"]
    assert status["pinned"] == ["mgp.tools.discover", "mgp.tools.request", "echo", "add"]
    evict = await _call(gateway, session, "mgp/tools/session/evict", {"tools": ["echo"]}, principal=None)
    assert (await service.evict(evict)).response["result"]["not_evicted"] == [{"name": "echo", "reason": "pinned"}]

    other, _ = await mgp_session_of(gateway)
    reader = Principal("reader", CapabilitySet(["mcp/request:mgp/tools/*", "mcp/request:tools/call:add"]))
    status = await service.session(await _call(gateway, other, "mgp/tools/session", {}, principal=reader))
    assert status.response["result"]["pinned"] == ["mgp.tools.discover", "mgp.tools.request"], (
        "echo is not reader's to see; add is pinned for anonymous only"
    )


async def _call(
    gw: Gateway, session: ClientSession, method: str, params: dict[str, Any], principal: Principal | None = None
) -> Any:
    """A :class:`Call` as the router makes it (decoded and annotated), for a service built in the test."""
    import adapters
    from adapters import mcp as mcp_adapter
    from gateway.routing.call import Call

    who = principal or session.principal
    event = adapters.annotate(
        mcp_adapter.decode(rpc(method, params), jsonrpc.Shape.REQUEST, session=session.id, principal=who.name)
    )
    return Call(session, event, session.standalone, who)


async def test_a_call_keeps_a_cached_tool_the_most_recently_used(gateway: Gateway) -> None:
    """§16.7: the cache holds the tools used in the session; a call marks its tool used (LRU)."""
    session, _ = await mgp_session_of(gateway)
    await kernel(gateway, session, "mgp.tools.request", REQUEST_ADD)
    echo = {**REQUEST_ADD, "context": "repeat a text back", "requirements": {"capabilities": ["echo"]}}
    await kernel(gateway, session, "mgp.tools.request", echo)
    assert (await kernel(gateway, session, "mgp.tools.session", {}))["cached"] == ["add", "echo"]
    assert "result" in await ask(gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}))
    assert (await kernel(gateway, session, "mgp.tools.session", {}))["cached"] == ["echo", "add"]
