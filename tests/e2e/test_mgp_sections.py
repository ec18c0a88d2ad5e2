"""MGP through the gateway, end to end, sections §6 and §11-§16, in both versions (issue 12 "Proof").

The sequel of tests/e2e/test_mgp_through_gateway.py (§2-§5): one real gateway process over its
legacy Streamable HTTP door, clients written from the spec (tests/mgp_peers/client.py: 0.3 calls
the seed's ``mgp/...`` methods, 0.8 the draft's ``mgp.*`` kernel tools) and the official SDK as a
plain MCP client. Backends:

- ``seeds``: tests/mgp_peers/server.py (0.3, stdio); its ``run_shell`` needs ``shell.execute``,
  which this config does not approve, so calls to it are blocked (the §6 "blocked" audit);
- ``plain``: the builtin demo (plain MCP: ``echo``, ``add``, ``slow_count`` with progress);
- ``streamer``, ``ev``, ``life``: the MGP 0.8 streaming, 0.8 events/callbacks and 0.3 lifecycle
  test servers of tests/e2e/backends/;
- ``drain03``/``drain08``: builtin demos an operator drains, one per client version (§11.4), so
  that no other test loses a backend; ``crashy``: killed by its tool ``die`` and never restarted.

Wire shapes asserted are the spec's: MGP_SECURITY.md §6.3-§6.5, MGP_COMMUNICATION.md §11-§14,
MGP_DISCOVERY.md §15-§16 (the seed keeps the numbers).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.test_mgp_through_gateway import sdk_client
from tests.mgp_peers.client import MgpTestClient, RpcFailure, has_mgp_field, text_of
from tests.support import RunningGateway, crashy_backend, http_server, run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(30)]

ADMIN, ALICE, BOB, CAROL = "admin-token", "alice-token", "bob-token", "carol-token"
VERSIONS = ["0.3", "0.8"]
AUDIT, LIFECYCLE, EVENT = "notifications/mgp.audit", "notifications/mgp.lifecycle", "notifications/mgp.event"
CHUNK, PROGRESS = "notifications/mgp.stream.chunk", "notifications/mgp.stream.progress"
CALLBACK = "notifications/mgp.callback.request"
RATE_LIMITED_MCP = -32029  # the gateway's own code toward plain clients


def _config() -> dict[str, Any]:
    demo = {"transport": "builtin", "server": "demo", "required": True}
    return {
        "backends": {
            "seeds": stdio_backend("tests.mgp_peers.server", "--version", "0.3", required=True),
            "plain": demo,
            "streamer": stdio_backend("tests.e2e.backends.mgp_stream_server", required=True),
            "ev": stdio_backend("tests.e2e.backends.mgp_events_server", required=True),
            "life": stdio_backend("tests.e2e.backends.mgp_lifecycle_server", required=True),
            "drain03": demo,
            "drain08": demo,
            "crashy": crashy_backend(required=True, restart={"initial_backoff_s": 60}),
        },
        "auth": {"admin_token": "operator-secret"},
        "principals": {
            "admin": {"tokens": [ADMIN], "capabilities": ["*"]},
            "alice": {"tokens": [ALICE], "capabilities": ["mcp/*"]},
            "bob": {"tokens": [BOB], "capabilities": ["mcp/*"]},
            "carol": {"tokens": [CAROL], "capabilities": ["mcp/*"]},
        },
        # One call of plain__add per principal, then §14.3 RATE_LIMITED (3000) / -32029.
        "rate_limits": {"per_tool": {"plain__add": {"per_s": 0.001, "burst": 1}}},
        "mgp": {"permission_policy": "config_only", "approved_permissions": []},
    }


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    with run_gateway(_config()) as running:
        yield running


def client(gw: RunningGateway, version: str | None = "0.8", token: str = ADMIN, **kw: Any) -> MgpTestClient:
    return MgpTestClient(gw.mcp, version=version, token=token, **kw)


async def op(c: MgpTestClient, tool: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    """A kernel operation in the client's version: the seed's method (0.3) or the kernel tool (0.8)."""
    result = await c.kernel_tool(tool, arguments)
    assert not result.get("isError"), result
    return result


def mgp_notes(notes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [n for n in notes if str(n.get("method", "")).startswith("notifications/mgp.")]


# ---- §6 audit ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_audit_reaches_the_client_for_its_own_calls_with_its_trace_id(gw: RunningGateway, version: str) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e47" + ("03" if version == "0.3" else "08")
    async with client(gw, version, token=ALICE) as c, client(gw, None, token=ALICE) as plain:
        assert "audit" in c.negotiated.extensions
        await c.tools()
        await c.call("tools/call", {"name": "plain__echo", "arguments": {"text": "hi"}, "trace_id": trace})  # §6.5
        await c.call("tools/call", {"name": "seeds__run_shell", "arguments": {"command": "ls"}})
        await plain.call("tools/call", {"name": "plain__echo", "arguments": {"text": "plain"}})
        notes = [n["params"] for n in await c.notifications(AUDIT, count=2, within_s=5)]
        # target.tool_name is the name the client called (plain__echo): the gateway is its one server.
        mine = [n for n in notes if str(n["target"].get("tool_name")).endswith(("echo", "run_shell"))]
        assert {(n["target"]["server_id"], n["event_type"], n["result"]) for n in mine} >= {
            ("plain", "TOOL_EXECUTED", "SUCCESS"),
            ("seeds", "TOOL_BLOCKED", "BLOCKED"),
        }, json.dumps(notes, indent=1)
        for n in notes:  # §6.3: every field of the format
            assert {"timestamp", "trace_id", "event_type", "actor", "target", "result", "details"} <= set(n)
            assert n["actor"]["id"] == "alice" and isinstance(n["_mgp"]["seq"], int)
        executed = next(n for n in mine if n["event_type"] == "TOOL_EXECUTED")
        assert executed["trace_id"] == trace, "§6.5: the request's trace id is propagated"
        blocked = next(n for n in mine if n["event_type"] == "TOOL_BLOCKED")
        assert isinstance(blocked["trace_id"], str) and blocked["trace_id"], "one is made when none was sent"
        replay = await op(c, "mgp.audit.replay", {"since_seq": executed["_mgp"]["seq"] - 1, "limit": 50})
        replayed = [e for e in replay["events"] if e["seq"] == executed["_mgp"]["seq"]]
        assert replayed and replayed[0]["trace_id"] == trace and replay["has_more"] is False
        assert replay["next_seq"] > executed["_mgp"]["seq"]
        assert all(e["actor"]["id"] == "alice" for e in replay["events"]), "only its own principal's records"
        await asyncio.sleep(0.2)
        assert mgp_notes(await plain.notifications(within_s=0)) == [], "a plain client gets no audit"


# ---- §11 lifecycle and health ------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_health_of_the_gateway_and_of_a_backend(gw: RunningGateway, version: str) -> None:
    async with client(gw, version, token=ALICE) as c:
        ping = await op(c, "mgp.health.ping", {"server_id": "life"})
        assert ping["status"] == "healthy" and isinstance(ping["uptime_secs"], int) and ping["timestamp"]
        status = await op(c, "mgp.health.status", {"server_id": "life"})
        assert status["status"] == "healthy" and status["tools_available"] == status["tools_total"] == 3
        assert isinstance(status["pending_requests"], int) and isinstance(status["checks"], dict)
        await c.tools()  # a plain backend's tool count is the gateway's own: known once its list was fetched
        plain = await op(c, "mgp.health.status", {"server_id": "plain"})
        assert plain["status"] == "healthy" and plain["tools_available"] >= 3
        # The gateway itself: by the server_id it declared (0.8 requires one), or none (the seed's form).
        own = {"server_id": c.negotiated.mgp["server_id"]} if c.draft and c.negotiated.mgp else {}
        assert (await op(c, "mgp.health.ping", own))["status"] == "healthy"
        gateway = await op(c, "mgp.health.status", own)
        assert gateway["servers"]["life"]["state"] == "connected"
        with pytest.raises(RpcFailure) as unknown:
            await c.kernel_tool("mgp.health.ping", {"server_id": "nope"})
        # §14.3.1 (0.8): RESOURCE_NOT_FOUND names what is missing; the seed has no 4004: -32602.
        assert unknown.value.code == (4004 if c.draft else -32602) and "nope" in unknown.value.message


@pytest.mark.parametrize("version", VERSIONS)
async def test_an_operator_drains_a_backend_calls_in_flight_finish_new_ones_get_2001(
    gw: RunningGateway, version: str
) -> None:
    target = "drain03" if version == "0.3" else "drain08"
    async with client(gw, version) as admin, client(gw, version, token=ALICE) as alice:
        await alice.tools()
        with pytest.raises(RpcFailure) as refused:
            await alice.kernel_tool("mgp.lifecycle.shutdown", {"server_id": target, "reason": "operator_request"})
        assert refused.value.code == 1000, "an operator's operation"
        slow = asyncio.create_task(alice.call_tool(f"{target}__slow_count", {"n": 8, "delay_s": 0.1}))
        await asyncio.sleep(0.2)
        accepted = await op(admin, "mgp.lifecycle.shutdown", {"server_id": target, "reason": "operator_request"})
        assert accepted["accepted"] is True and accepted["pending_requests"] >= 1
        with pytest.raises(RpcFailure) as draining:
            await alice.call_tool(f"{target}__echo", {"text": "late"})
        # §14.7.1: a lifecycle error is a JSON-RPC error in both versions, never a rejection envelope.
        assert draining.value.code == 2001 and draining.value.mgp is not None
        assert draining.value.mgp["category"] == "lifecycle" and draining.value.mgp["retryable"] is True
        async with asyncio.timeout(5):
            finished = await slow
        assert text_of(finished) == "counted to 8", "the call in flight finished"
        notes = [n["params"] for n in await alice.notifications(LIFECYCLE, count=2, within_s=5)]
        mine = [n for n in notes if n["server_id"] == target]
        assert ("connected", "draining") in {(n["previous_state"], n["new_state"]) for n in mine}, notes
        assert mine[-1]["new_state"] == "disconnected" and all(n["reason"] and n["timestamp"] for n in mine)
        with pytest.raises(RpcFailure) as gone:
            await alice.call_tool(f"{target}__echo", {"text": "later"})
        # A shut-down backend is ``disconnected`` (§11.2): SERVER_NOT_READY (2000) or, as the gateway
        # answers, UPSTREAM_UNAVAILABLE (5002); an MGP error with its recovery data either way.
        assert gone.value.code in (2000, 5002) and gone.value.mgp is not None, gone.value


# ---- §12 streaming -----------------------------------------------------------------------------------


def _for(notes: list[dict[str, Any]], method: str, rpc_id: Any) -> list[dict[str, Any]]:
    return [n["params"] for n in notes if n.get("method") == method and n["params"].get("request_id") == rpc_id]


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_streamed_call_to_a_streaming_backend_and_to_a_plain_one(gw: RunningGateway, version: str) -> None:
    async with client(gw, version, token=ALICE) as c:
        assert "streaming" in c.negotiated.extensions
        stream = {"_mgp": {"stream": True}}
        answer = await c.call("tools/call", {"name": "streamer__generate", "arguments": {"n": 3}, **stream})
        chunks = _for(await c.notifications(CHUNK, count=3), CHUNK, answer["id"])
        assert [(ch["index"], ch["content"]["text"]) for ch in chunks] == [(i, f"part{i} ") for i in range(3)]
        final = answer["result"]
        assert text_of(final) == "part0 part1 part2 " and final["_mgp"]["streamed"] is True
        assert final["_mgp"]["chunks_sent"] == 3 and isinstance(final["_mgp"]["duration_ms"], (int, float))

        args = {"n": 3, "delay_s": 0.01}
        answer = await c.call("tools/call", {"name": "plain__slow_count", "arguments": args, **stream})
        notes = await c.notifications(PROGRESS, count=3)
        progress = [p["progress"] for p in _for(notes, PROGRESS, answer["id"])]
        assert progress == pytest.approx([1 / 3, 2 / 3, 1.0], abs=1e-5)
        assert answer["result"]["_mgp"]["streamed"] is True and answer["result"]["_mgp"]["chunks_sent"] == 3


@pytest.mark.parametrize("version", VERSIONS)
async def test_stream_cancel_returns_the_partial_result(gw: RunningGateway, version: str) -> None:
    async with client(gw, version, token=ALICE) as c:
        params = {"name": "streamer__generate", "arguments": {"n": 300, "delay_s": 0.02}, "_mgp": {"stream": True}}
        call = asyncio.create_task(c.call("tools/call", params))
        [first, *_] = [n["params"] for n in await c.notifications(CHUNK, count=2, within_s=5)]
        cancelled = await c.request(
            "mgp/stream/cancel", {"request_id": first["request_id"], "reason": "user_cancelled"}
        )
        assert cancelled["cancelled"] is True
        assert text_of(cancelled["partial_result"]).startswith("part0 part1 ")
        async with asyncio.timeout(5):
            original = await call
        assert original["error"]["code"] == -32800


# ---- §13 events and callbacks ------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_events_of_a_backend_channel_and_of_audit_with_a_per_client_seq(gw: RunningGateway, version: str) -> None:
    async with client(gw, version, token=BOB) as c:
        channels = ["ev/system.alerts", "ev/nope", "lifecycle", "audit"]
        sub = await op(c, "mgp.events.subscribe", {"channels": channels})
        assert sub["subscribed"] == ["ev/system.alerts", "lifecycle", "audit"] and sub["unsupported"] == ["ev/nope"]
        await c.call_tool("ev__emit", {"channel": "system.alerts", "text": "hot"})
        # Three events: the audit of its own subscribe call, the alert and the audit of its ev__emit call.
        events = [n["params"] for n in await c.notifications(EVENT, count=3, within_s=5)]
        alert = next(e for e in events if e["channel"] == "ev/system.alerts")
        assert alert["subscription_id"] == sub["subscription_id"] and alert["data"]["text"] == "hot"
        audited = {e["data"]["target"].get("tool_name") for e in events if e["channel"] == "audit"}
        assert "ev__emit" in audited, "its own call, on the audit channel (its records only)"
        # §13.3: one sequence per client, from 1, no gaps (streams may interleave: order by seq).
        seqs = sorted(e["_mgp.seq"] for e in events)
        assert seqs == list(range(1, len(seqs) + 1)), seqs
        replay = await op(c, "mgp.events.replay", {"subscription_id": sub["subscription_id"], "after_seq": 0})
        assert [e["_mgp.seq"] for e in replay["events"]][: len(seqs)] == seqs
        assert replay["truncated"] is False and isinstance(replay["has_more"], bool)
        await op(c, "mgp.events.unsubscribe", {"subscription_id": sub["subscription_id"]})
        before = len(await c.notifications(EVENT, within_s=0))
        await c.call_tool("ev__emit", {"channel": "system.alerts", "text": "cold"})
        await asyncio.sleep(0.3)
        assert len(await c.notifications(EVENT, within_s=0)) == before, "nothing after unsubscribing"


@pytest.mark.parametrize("version", VERSIONS)
async def test_a_backend_callback_reaches_the_caller_and_its_answer_finishes_the_call(
    gw: RunningGateway, version: str
) -> None:
    async with client(gw, version, token=BOB) as c, client(gw, version, token=CAROL) as other:
        call = asyncio.create_task(c.call_tool("ev__confirm", {"message": "Go?"}))
        [asked] = [n["params"] for n in await c.notifications(CALLBACK, within_s=5)]
        assert asked["type"] == "confirmation" and asked["message"] == "Go?" and asked["callback_id"]
        answer = await c.request("mgp/callback/respond", {"callback_id": asked["callback_id"], "response": "confirm"})
        assert answer.get("delivered", True) is True
        async with asyncio.timeout(5):
            result = await call
        assert json.loads(text_of(result)) == {"answer": "confirm"}
        assert len(await c.notifications(CALLBACK, within_s=0)) == 1, "the server's retry is not asked again"
        assert await other.notifications(CALLBACK, within_s=0) == [], "only the caller is asked"


# ---- §14 errors --------------------------------------------------------------------------------------


async def test_rate_limits_give_3000_to_mgp_clients_and_32029_to_plain_ones(gw: RunningGateway) -> None:
    for version, token in (("0.3", ALICE), ("0.8", BOB)):
        async with client(gw, version, token=token) as c:
            await c.call_tool("plain__add", {"a": 1, "b": 2})
            with pytest.raises(RpcFailure) as limited:
                await c.call_tool("plain__add", {"a": 1, "b": 2})
            assert limited.value.code == 3000, (version, limited.value)
            mgp = limited.value.mgp
            assert mgp is not None and mgp["category"] == "resource" and mgp["retryable"] is True
            assert mgp["retry_after_ms"] > 0
    async with client(gw, None, token=CAROL) as plain:
        await plain.call_tool("plain__add", {"a": 1, "b": 2})
        answer = await plain.call("tools/call", {"name": "plain__add", "arguments": {"a": 1, "b": 2}})
        assert answer["error"]["code"] == RATE_LIMITED_MCP and not has_mgp_field(answer["error"].get("data"))


async def test_a_dead_backend_gives_5002(gw: RunningGateway) -> None:
    async with client(gw, "0.3") as seed, client(gw, "0.8") as draft, client(gw, None) as plain:
        await seed.tools()
        for c, tool in ((seed, "crashy__die"), (draft, "crashy__ok")):
            with pytest.raises(RpcFailure) as dead:
                await c.call_tool(tool)
            assert dead.value.code == 5002 and dead.value.mgp is not None, dead.value
            assert dead.value.mgp["category"] == "external"
        answer = await plain.call("tools/call", {"name": "crashy__ok", "arguments": {}})
        assert answer["error"]["code"] != 5002 and not has_mgp_field(answer["error"].get("data"))


# ---- §15 discovery (the server registry) -------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_list_register_call_and_deregister_an_http_backend(gw: RunningGateway, version: str) -> None:
    name = "extra03" if version == "0.3" else "extra08"
    argv = [sys.executable, "-m", "tests.mgp_peers.server", "--version", version, "--http"]
    async with client(gw, version) as admin, client(gw, version, token=ALICE) as alice:
        listed = {s["id"]: s for s in (await op(alice, "mgp.discovery.list"))["servers"]}
        assert listed["seeds"]["status"] == "connected" and "seeds__echo" in listed["seeds"]["tools"]
        assert listed["seeds"]["mgp_version"].startswith("0.3") and listed["plain"]["trust_level"]
        only = await op(alice, "mgp.discovery.list", {"filter": {"extensions": ["streaming"]}})
        assert [s["id"] for s in only["servers"]] == ["streamer"]
        with http_server(lambda port: [*argv, str(port)]) as url:
            register = {"id": name, "command": url, "transport": "http", "created_by": "test"}
            with pytest.raises(RpcFailure) as refused:
                await alice.kernel_tool("mgp.discovery.register", register)
            assert refused.value.code == 1000
            added = await op(admin, "mgp.discovery.register", register)
            assert added["id"] == name and added["status"] == "connected"
            assert f"{name}__echo" in {t["name"] for t in await alice.tools()}
            assert text_of(await alice.call_tool(f"{name}__echo", {"text": "new"})) == "echo: new"
            with pytest.raises(RpcFailure) as refused:
                await alice.kernel_tool("mgp.discovery.deregister", {"id": name})
            assert refused.value.code == 1000
            await op(admin, "mgp.discovery.deregister", {"id": name, "reason": "test done"})
            assert f"{name}__echo" not in {t["name"] for t in await alice.tools()}
            listed = {s["id"] for s in (await op(alice, "mgp.discovery.list"))["servers"]}
            assert name not in listed


# ---- §16 tool discovery ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
async def test_discover_request_session_and_evict(gw: RunningGateway, version: str) -> None:
    async with client(gw, version, token=CAROL) as c:
        found = await op(c, "mgp.tools.discover", {"query": "echo text back", "max_results": 5})
        tools = found["tools"]
        assert tools and len(tools) <= 5 and found["search_strategy"] == "keyword"
        scores = [t["relevance_score"] for t in tools]
        assert scores == sorted(scores, reverse=True) and "echo" in tools[0]["name"]
        assert all({"name", "server_id", "description", "inputSchema", "security"} <= set(t) for t in tools)
        query = {"query": "run a shell command or fetch a url", "filter": {"risk_level_max": "moderate"}}
        capped = {t["name"]: t["security"] for t in (await op(c, "mgp.tools.discover", query))["tools"]}
        assert "seeds__fetch" in capped and "seeds__run_shell" not in capped, "§16.5 risk_level_max"
        assert all(sec["effective_risk_level"] in ("safe", "moderate") for sec in capped.values())

        requirements = {"capabilities": ["add numbers"], "preferred_risk_level": "moderate"}
        loaded = await op(
            c, "mgp.tools.request", {"reason": "capability_gap", "context": "sum", "requirements": requirements}
        )
        assert loaded["status"] in ("fulfilled", "partial") and loaded["tools_loaded"]
        first = loaded["tools_loaded"][0]
        assert {"name", "server_id", "inputSchema", "security"} <= set(first)
        session = await op(c, "mgp.tools.session")
        assert first["name"] in session["cached"] and session["pinned"]
        assert 0 < session["total_tokens"] <= session["max_tokens"]
        evicted = await op(c, "mgp.tools.session.evict", {"tools": [first["name"]], "reason": "done"})
        assert evicted["evicted"] == [first["name"]]
        assert first["name"] not in (await op(c, "mgp.tools.session"))["cached"]


# ---- a plain MCP client sees none of it --------------------------------------------------------------


async def test_a_plain_sdk_client_sees_no_mgp_operation_or_notification(gw: RunningGateway) -> None:
    http, sdk = sdk_client(gw, CAROL)
    async with http, sdk as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert "plain__slow_count" in names and not any(n.startswith("mgp.") for n in names)
        result = await c.call_tool("plain__slow_count", {"n": 2, "delay_s": 0.01})
        assert not has_mgp_field(result.model_dump(by_alias=True, exclude_none=True))
    # The same on the wire, with an MGP flag it did not negotiate. (An ``mgp/...`` method it names is
    # answered: gateway/mgp/server.py's documented choice; nothing MGP is ever sent unasked.)
    async with client(gw, None, token=CAROL) as raw:
        params = {"name": "plain__slow_count", "arguments": {"n": 2, "delay_s": 0.01}, "_mgp": {"stream": True}}
        answer = await raw.call("tools/call", params)
        assert "result" in answer and not has_mgp_field(answer["result"])
        await asyncio.sleep(0.2)
        assert mgp_notes(await raw.notifications(within_s=0)) == []
