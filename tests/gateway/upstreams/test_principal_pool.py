"""Per-principal stdio backends through a real gateway (issue 17): one child per principal, its own env.

The backend is tests/gateway/upstreams/env_backend.py (it reports its pid, ``API_KEY`` and principal);
clients are the official SDK over Streamable HTTP with static tokens.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.support import RunningGateway, alive, gone, run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(60)]

ALICE, BOB, CAROL = "alice-token", "bob-token", "carol-token"
ADMIN = "admin-token"


def env_backend(**extra: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "sharing": "per-principal",
        "principal_env": {"alice": {"API_KEY": "alice-key"}, "bob": {"API_KEY": "bob-key"}},
    }
    return stdio_backend("tests.gateway.upstreams.env_backend", **{**fields, **extra})


def config(backend: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "backends": {"envs": backend, "demo": {"transport": "builtin", "required": True}},
        "principals": {
            "alice": {"tokens": [ALICE], "capabilities": ["mcp/*"]},
            "bob": {"tokens": [BOB], "capabilities": ["mcp/*"]},
            "carol": {"tokens": [CAROL], "capabilities": ["mcp/*"]},
        },
        "auth": {"admin_token": ADMIN},
        **extra,
    }


@asynccontextmanager
async def client_for(gw: RunningGateway, token: str | None, url: str | None = None, **kw: Any) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(headers=headers, timeout=20)
    transport = streamable_http_client(url or gw.mcp, http_client=http)
    kw.setdefault("mode", "legacy")
    async with http, Client(transport, read_timeout_seconds=20, **kw) as client:
        yield client


async def whoami(client: Client, name: str = "envs__whoami") -> dict[str, Any]:
    result = await client.call_tool(name, {})
    assert not result.is_error, result
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    value: dict[str, Any] = json.loads(block.text)
    return value


async def get(gw: RunningGateway, path: str, token: str | None = None) -> httpx.Response:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient(timeout=5, headers=headers) as http:
        return await http.get(f"{gw.url}{path}")


async def children(gw: RunningGateway) -> dict[str, Any]:
    ready = (await get(gw, "/readyz")).json()
    pool: dict[str, Any] = ready["backends"]["envs"]
    return pool


async def test_each_principal_gets_its_own_child_and_environment() -> None:
    with run_gateway(config(env_backend())) as gw:
        pool = await children(gw)
        assert pool["state"] == "ready" and pool["sharing"] == "per-principal"
        assert pool["children"]["ready"] == 0  # nothing is spawned before a principal asks
        assert pool["era"] is None and pool["max_children"] == 16 and pool["idle_s"] == 300
        async with client_for(gw, CAROL, gw.server("envs")) as carol_single:
            # Before any child: the single-backend view still announces lists; carol (no env) sees none.
            assert (await carol_single.list_tools()).tools == []
        async with client_for(gw, ALICE) as alice, client_for(gw, BOB) as bob:
            a, b = await whoami(alice), await whoami(bob)
            assert a["api_key"] == "alice-key" and a["principal"] == "alice"
            assert b["api_key"] == "bob-key" and b["principal"] == "bob"
            assert a["pid"] != b["pid"]
            # Lists are the caller's own child's: each sees its own tool, never the other's.
            alice_tools = {t.name for t in (await alice.list_tools()).tools}
            bob_tools = {t.name for t in (await bob.list_tools()).tools}
            assert "envs__only_alice" in alice_tools and "envs__only_bob" not in alice_tools
            assert "envs__only_bob" in bob_tools and "envs__only_alice" not in bob_tools
            assert "demo__echo" in alice_tools  # the shared backends are merged as before
            with pytest.raises(MCPError):
                await alice.call_tool("envs__only_bob", {})  # reaches alice's child, which has no such tool
            assert (await whoami(alice, "envs__only_alice"))["pid"] == a["pid"]
            # Another session of the same principal reuses its child.
            async with client_for(gw, ALICE) as alice2:
                assert (await whoami(alice2))["pid"] == a["pid"]
            # The single-backend view routes to the caller's child too (never prefixed).
            async with client_for(gw, BOB, gw.server("envs")) as bob_single:
                assert (await whoami(bob_single, "whoami"))["pid"] == b["pid"]
            pool = await children(gw)
            assert pool["children"]["ready"] == 2 and pool["era"] == "legacy" and pool["protocol"]
            metrics = (await get(gw, "/metrics")).text
            assert 'switchboard_backend_children{backend="envs",state="ready"} 2.0' in metrics
            assert 'switchboard_backend_up{backend="envs"} 1.0' in metrics
            # Who has a process: behind the admin token only, never with its environment.
            assert (await get(gw, "/admin/pools")).status_code == 401
            admin = (await get(gw, "/admin/pools", ADMIN)).json()["envs"]
            assert set(admin["by_principal"]) == {"alice", "bob"} and admin["children"]["ready"] == 2
            assert admin["by_principal"]["alice"]["state"] == "ready" and "key" not in json.dumps(admin)
    # Stopping the gateway stops every child.
    assert await gone(a["pid"]) and await gone(b["pid"])


async def test_a_modern_client_reaches_its_own_child_too() -> None:
    with run_gateway(config(env_backend())) as gw:
        async with client_for(gw, ALICE, mode="auto") as alice, client_for(gw, BOB) as bob:
            assert alice.protocol_version >= "2026"  # the modern era, through the era bridge
            a, b = await whoami(alice), await whoami(bob)
            assert a["api_key"] == "alice-key" and b["api_key"] == "bob-key" and a["pid"] != b["pid"]
            assert "envs__only_alice" in {t.name for t in (await alice.list_tools()).tools}


@pytest.mark.filterwarnings("ignore:The .* capability is deprecated")
async def test_what_a_child_sends_reaches_only_its_principal() -> None:
    asked: list[str] = []
    logs: dict[str, list[str]] = {"alice": [], "bob": []}
    both = asyncio.Event()
    twice = asyncio.Event()

    def roots_for(who: str) -> Any:
        async def list_roots(context: Any) -> types.ListRootsResult:
            asked.append(who)
            if len(asked) == 2:
                twice.set()
            return types.ListRootsResult(roots=[types.Root(uri=f"file:///{who}")])

        return list_roots

    def log_for(who: str) -> Any:
        async def on_log(params: types.LoggingMessageNotificationParams) -> None:
            logs[who].append(str(params.data))
            if logs["alice"] and logs["bob"]:
                both.set()

        return on_log

    with run_gateway(config(env_backend())) as gw:
        async with (
            client_for(gw, ALICE, list_roots_callback=roots_for("alice"), logging_callback=log_for("alice")) as alice,
            client_for(gw, BOB, list_roots_callback=roots_for("bob"), logging_callback=log_for("bob")) as bob,
        ):
            await whoami(bob)  # bob has a child and a session that could answer roots/list
            answer = await alice.call_tool("envs__ask_roots", {})
            block = answer.content[0]
            assert isinstance(block, types.TextContent) and "file:///alice" in block.text
            assert asked == ["alice"]
            await alice.send_roots_list_changed()  # a client's notification reaches its own child only
            for _ in range(100):  # a notification has no answer: ask the child until it counted it
                if (await whoami(alice))["roots_changed"]:
                    break
                await asyncio.sleep(0.05)
            assert (await whoami(alice))["roots_changed"] == 1 and (await whoami(bob))["roots_changed"] == 0
            # Outside any call (nothing to relate it to): still alice's session, although bob, who
            # could answer too, was active more recently (the shared backends' heuristic would pick him).
            await alice.call_tool("envs__ask_later", {})
            await whoami(bob)
            async with asyncio.timeout(10):
                await twice.wait()
            assert asked == ["alice", "alice"]
            for _ in range(100):  # the answer travels back to the child after the callback returned
                if (await whoami(alice))["later"] is not None:
                    break
                await asyncio.sleep(0.05)
            assert (await whoami(alice))["later"] == {"roots": [{"uri": "file:///alice"}]}
            await alice.call_tool("envs__say", {})
            await bob.call_tool("envs__say", {})
            async with asyncio.timeout(5):
                await both.wait()
            assert logs["alice"] == ["alice says hi"] and logs["bob"] == ["bob says hi"]


@pytest.mark.filterwarnings("ignore:The .* capability is deprecated")
async def test_each_child_is_told_the_log_level_its_principals_sessions_asked_for() -> None:
    with run_gateway(config(env_backend())) as gw:
        async with client_for(gw, ALICE) as alice, client_for(gw, BOB) as bob:
            await alice.set_logging_level("error")  # before alice has a child: told when it connects
            assert (await whoami(alice))["level"] == "error"
            assert (await whoami(bob))["level"] is None  # bob asked for nothing
            await bob.set_logging_level("debug")  # the most verbose level overall from now on
            assert (await whoami(bob))["level"] == "debug"
            await alice.set_logging_level("info")  # alice's own level still reaches her child
            assert (await whoami(alice))["level"] == "info"


async def test_a_list_does_not_wait_for_a_slow_child_which_announces_itself_when_ready() -> None:
    slow = {"alice": {"API_KEY": "alice-key", "ENV_BACKEND_DELAY_S": "3"}}
    changed = asyncio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    with run_gateway(config(env_backend(principal_env=slow), limits={"startup_wait_s": 0.2})) as gw:
        async with client_for(gw, ALICE, message_handler=on_message) as alice:
            names = {t.name for t in (await alice.list_tools()).tools}
            assert "demo__echo" in names and "envs__whoami" not in names  # answered with what was ready
            async with asyncio.timeout(10):
                await changed.wait()
            assert "envs__whoami" in {t.name for t in (await alice.list_tools()).tools}


async def test_an_idle_child_is_stopped_and_spawned_again_on_the_next_call(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    with run_gateway(config(env_backend(idle_s=0.5), audit={"file": str(audit)})) as gw:
        async with client_for(gw, ALICE) as alice:
            first = (await whoami(alice))["pid"]
            assert await gone(first, timeout_s=10)
            assert (await children(gw))["children"]["ready"] == 0
            second = (await whoami(alice))["pid"]
            assert second != first and alive(second)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    pool = [(r["outcome"], r["principal"], r.get("reason")) for r in records if r["outcome"].startswith("child_")]
    spawned, stopped = ("child_spawned", "alice", None), ("child_stopped", "alice", "idle for 0.5s")
    assert pool[:3] == [spawned, stopped, spawned]
    assert "alice-key" not in audit.read_text()  # who got a process is recorded, never its secrets


async def test_max_children_stops_the_least_recently_used_idle_child_and_refuses_when_all_are_busy() -> None:
    release = asyncio.Event()
    holding = asyncio.Event()

    async def slow_roots(context: Any) -> types.ListRootsResult:
        holding.set()
        async with asyncio.timeout(20):
            await release.wait()
        return types.ListRootsResult(roots=[])

    with run_gateway(config(env_backend(max_children=1))) as gw:
        async with client_for(gw, ALICE, list_roots_callback=slow_roots) as alice, client_for(gw, BOB) as bob:
            a = (await whoami(alice))["pid"]
            b = (await whoami(bob))["pid"]  # alice's idle child makes room
            assert await gone(a)
            assert (await children(gw))["children"]["ready"] == 1
            # Alice's new child holds a call in flight (her client holds the roots/list answer).
            held = asyncio.create_task(alice.call_tool("envs__ask_roots", {}))
            async with asyncio.timeout(15):
                await holding.wait()
            assert not alive(b)
            with pytest.raises(MCPError) as refused:
                await bob.call_tool("envs__whoami", {})
            assert refused.value.error.code == -32094
            assert "max" in refused.value.error.message or "limit" in refused.value.error.message
            release.set()
            async with asyncio.timeout(15):
                assert not (await held).is_error
        assert "per-principal children, all busy" in gw.log_with("all busy")


async def test_a_principal_without_environment_and_an_anonymous_caller_spawn_nothing() -> None:
    anonymous = {"auth": {"anonymous": {"capabilities": ["mcp/*"]}}}
    with run_gateway(config(env_backend(), **anonymous)) as gw:
        async with client_for(gw, CAROL) as carol, client_for(gw, None) as nobody:
            for client in (carol, nobody):
                names = {t.name for t in (await client.list_tools()).tools}
                assert "demo__echo" in names and not any(n.startswith("envs__") for n in names)
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("envs__whoami", {})
                assert refused.value.error.code == -32093
                assert "per principal" in refused.value.error.message
            pool = await children(gw)
            assert sum(pool["children"].values()) == 0
        audit = gw.log()
        assert "alice-key" not in audit and "bob-key" not in audit  # no secret in the log


async def test_default_env_serves_unnamed_principals_and_never_lends_a_named_ones_values() -> None:
    backend = env_backend(default_env={"API_KEY": "shared-low-key"}, principal_env_var="SWITCHBOARD_PRINCIPAL")
    with run_gateway(config(backend)) as gw:
        async with client_for(gw, CAROL) as carol, client_for(gw, ALICE) as alice:
            c, a = await whoami(carol), await whoami(alice)
            assert c["api_key"] == "shared-low-key" and c["principal"] == "carol"
            assert a["api_key"] == "alice-key" and a["pid"] != c["pid"]


def test_subscribe_on_a_per_principal_backend_is_refused_clearly() -> None:
    with run_gateway(config(env_backend())) as gw, httpx.Client(timeout=10) as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}}
        headers = {"authorization": f"Bearer {ALICE}", "accept": "application/json, text/event-stream"}
        sid = http.post(gw.mcp, json=init, headers=headers).headers["mcp-session-id"]
        headers["mcp-session-id"] = sid
        sub = {"jsonrpc": "2.0", "id": 2, "method": "resources/subscribe", "params": {"uri": "envs+file:///x"}}
        answer = http.post(gw.mcp, json=sub, headers=headers).json()
        assert answer["error"]["code"] == -32601 and "per-principal" in answer["error"]["message"]
