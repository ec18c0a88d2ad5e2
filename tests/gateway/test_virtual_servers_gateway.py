"""Virtual servers inside a real Gateway (two in-process demo backends), driven through ``Router.handle``:
MGP discovery (§15 list, §16 tool index) sees them as it sees backends, collisions are counted, runtime
backends leave and rejoin them, and their names are never given to a backend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.config import Backend, Config
from gateway.core import Gateway
from gateway.probe import probe
from gateway.sessions import ClientSession
from policies.auth import Credentials
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.support import initialize_request

pytestmark = pytest.mark.timeout(30)

CONFIG: dict[str, Any] = {
    "backends": {"demo": {"transport": "builtin"}, "demo2": {"transport": "builtin"}},
    "virtual_servers": {
        "ops": {"tools": ["demo:echo", "demo2:add"], "rename": {"sum": "demo2:add"}},
        "clash": {"tools": ["demo:*", "demo2:*"]},
        "private": {"tools": ["demo:*"], "principals": ["alice"]},
    },
}
# May call the exposed name "sum" and discover, but not the real demo2 add behind it.
NARROW = Principal(
    "anonymous",
    CapabilitySet(
        ["mcp/request:*/list", "mcp/request:mgp/*", "mcp/request:tools/call:sum", "mcp/request:tools/call:echo"]
    ),
)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    gw = Gateway(Config.model_validate(CONFIG))
    await gw.start()
    try:
        for name in ("demo", "demo2"):
            assert await gw.connections[name].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def session_on(gw: Gateway, name: str | None = None) -> ClientSession:
    view = gw.federated if name is None else gw.view_named(name)
    assert view is not None
    session = gw.open_session("test", view, Credentials("anonymous", "anonymous"))
    answer = await gw.router.handle(session, initialize_request(0), jsonrpc.Shape.REQUEST, session.standalone)
    assert answer is not None and "result" in answer, answer
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await gw.router.handle(session, note, jsonrpc.Shape.NOTIFICATION, session.standalone)
    return session


async def ask(gw: Gateway, session: ClientSession, method: str, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    answer = await gw.router.handle(session, message, jsonrpc.Shape.REQUEST, session.standalone, **kw)
    assert answer is not None
    return answer


async def test_mgp_discovery_list_shows_virtual_servers_like_backends(gateway: Gateway) -> None:
    session = await session_on(gateway)
    servers = {s["id"]: s for s in (await ask(gateway, session, "mgp/discovery/list", {}))["result"]["servers"]}
    assert set(servers) == {"demo", "demo2", "ops", "clash"}, "private admits alice only: not listed to others"
    ops = servers["ops"]
    assert ops["source"] == "virtual" and ops["transport"] == "virtual" and ops["status"] == "connected"
    assert ops["backends"] == ["demo", "demo2"]
    assert sorted(ops["tools"]) == ["echo", "sum"] and ops["tool_count"] == 2
    assert servers["clash"]["tools"] == [], "every name collides there: nothing is shown"
    narrow = await ask(gateway, session, "mgp/discovery/list", {}, principal=NARROW)
    ops_narrow = next(s for s in narrow["result"]["servers"] if s["id"] == "ops")
    assert ops_narrow["tools"] == ["echo"], "sum is demo2's add, which NARROW may not call"
    alice = Principal("alice", CapabilitySet(["*"]))
    listed = await ask(gateway, session, "mgp/discovery/list", {}, principal=alice)
    assert "private" in {s["id"] for s in listed["result"]["servers"]}


async def test_mgp_tool_discovery_on_a_virtual_server_holds_to_the_real_tool(gateway: Gateway) -> None:
    session = await session_on(gateway, "ops")
    found = await ask(gateway, session, "mgp/tools/discover", {"query": "add two numbers"})
    assert [t["name"] for t in found["result"]["tools"]] == ["sum"]
    assert found["result"]["tools"][0]["server_id"] == "demo2"
    hidden = await ask(gateway, session, "mgp/tools/discover", {"query": "add two numbers"}, principal=NARROW)
    assert hidden["result"]["tools"] == [] and hidden["result"]["total_available"] == 1, "echo only: sum is hidden"
    nothing = await ask(gateway, session, "mgp/tools/discover", {"query": "slow count"})
    assert nothing["result"]["tools"] == [], "slow_count is not selected"


async def test_a_runtime_collision_is_withheld_and_counted(gateway: Gateway) -> None:
    session = await session_on(gateway, "clash")
    assert (await ask(gateway, session, "tools/list", {}))["result"]["tools"] == []
    refused = await ask(gateway, session, "tools/call", {"name": "echo", "arguments": {"text": "x"}})
    assert refused["error"]["code"] == jsonrpc.NAME_NOT_ROUTABLE
    assert "demo2:echo" in refused["error"]["message"] and "demo:echo" in refused["error"]["message"]
    assert "rename one of them in virtual_servers" in refused["error"]["message"]
    assert b'switchboard_name_collisions{kind="tools",view="clash"} 3.0' in gateway.metrics.render()


async def test_calls_route_by_exposed_name_and_the_real_one_is_checked(gateway: Gateway) -> None:
    session = await session_on(gateway, "ops")
    added = await ask(gateway, session, "tools/call", {"name": "sum", "arguments": {"a": 2, "b": 5}})
    assert added["result"]["structuredContent"] == {"sum": 7}
    denied = await ask(gateway, session, "tools/call", {"name": "sum", "arguments": {"a": 2, "b": 5}}, principal=NARROW)
    assert denied["error"]["code"] == -32093 and "tools/call:add" in denied["error"]["message"]
    unknown = await ask(gateway, session, "tools/call", {"name": "add", "arguments": {"a": 2, "b": 5}})
    assert unknown["error"]["code"] == jsonrpc.INVALID_PARAMS
    passthrough = await ask(gateway, session, "vendor/anything", {})
    assert passthrough["error"]["code"] == jsonrpc.METHOD_NOT_FOUND


async def test_a_removed_backend_leaves_the_virtual_server_and_rejoins_it(gateway: Gateway) -> None:
    session = await session_on(gateway, "ops")
    view = session.view
    mark = session.standalone.last_seq
    await gateway.runtime.remove("demo2", 0.5)
    assert list(view.backends) == ["demo"]
    assert {t["name"] for t in (await ask(gateway, session, "tools/list", {}))["result"]["tools"]} == {"echo"}
    async with asyncio.timeout(5):
        told = [m["method"] for _, m in await session.standalone.read(mark)]
    assert "notifications/tools/list_changed" in told
    conn = await gateway.runtime.add("demo2", Backend(transport="builtin"))
    assert await conn.wait_ready(10)
    assert list(view.backends) == ["demo", "demo2"]
    assert {t["name"] for t in (await ask(gateway, session, "tools/list", {}))["result"]["tools"]} == {"echo", "sum"}


async def test_a_virtual_servers_name_is_never_given_to_a_backend(gateway: Gateway) -> None:
    with pytest.raises(ValueError, match="virtual server"):
        await gateway.runtime.add("ops", Backend(transport="builtin"))
    assert gateway.view_named("ops") is gateway.virtual["ops"]
    assert gateway.view_named("demo") is gateway.single["demo"]
    assert gateway.view_named("nothing") is None


async def test_check_probe_reports_a_virtual_servers_collision() -> None:
    config = Config.model_validate({**CONFIG, "federation": {"prefix": "always"}})
    report = await probe(config, timeout_s=10)
    found = [c for c in report.collisions if c.server == "clash"]
    assert {(c.kind, c.name) for c in found} == {("tools", "echo"), ("tools", "add"), ("tools", "slow_count")}
    assert all(c.backends == ("demo2:" + c.name, "demo:" + c.name) for c in found)
    assert [c for c in report.collisions if c.server is None] == [], "/mcp prefixes: no collision there"
    assert not report.ok
    text = "\n".join(report.lines())
    assert "by virtual server 'clash': /servers/clash/mcp withholds it" in text
    assert report.to_json()["collisions"][0]["virtual_server"] == "clash"


def test_a_config_change_to_virtual_servers_needs_a_restart() -> None:
    gw = Gateway(Config.model_validate(CONFIG))
    changed = Config.model_validate({**CONFIG, "virtual_servers": {"ops": {"tools": ["demo:*"]}}})
    assert gw.reload(changed) == ["virtual_servers"]


async def test_mgp_registration_under_a_virtual_servers_name_is_refused(gateway: Gateway) -> None:
    session = await session_on(gateway)
    params = {"id": "ops", "transport": "http", "url": "http://127.0.0.1:9/mcp"}
    refused = await ask(
        gateway, session, "mgp/discovery/register", params, principal=Principal("admin", CapabilitySet(["*"]))
    )
    assert "error" in refused and "virtual server" in refused["error"]["message"], refused
    assert gateway.view_named("ops") is gateway.virtual["ops"] and "ops" not in gateway.connections
