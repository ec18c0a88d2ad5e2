"""The routing pipeline in-process (no sockets, no subprocess): a routing bug shows up here first.

A real Gateway with the builtin demo backend; requests go straight to ``Router.handle`` on a
session, as every door hands them over.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.config import Config
from gateway.core import Gateway
from gateway.sessions import ClientSession
from policies.auth import Credentials
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.support import initialize_request

pytestmark = pytest.mark.timeout(30)

REQUEST = jsonrpc.Shape.REQUEST
NOTIFICATION = jsonrpc.Shape.NOTIFICATION


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, **({"params": params} if params is not None else {})}


INIT = initialize_request(0)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    config = Config.model_validate(
        {"backends": {"demo": {"transport": "builtin"}}, "federation": {"page_size": 2, "prefix": "never"}}
    )
    gw = Gateway(config)
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def handle(gw: Gateway, session: ClientSession, message: dict[str, Any], **kw: Any) -> dict[str, Any]:
    shape = NOTIFICATION if "id" not in message else REQUEST
    answer = await gw.router.handle(session, message, shape, session.standalone, **kw)
    assert answer is not None
    return answer


async def ready_session(gw: Gateway) -> ClientSession:
    session = gw.open_session("test", gw.federated, Credentials("anonymous", "anonymous"))
    assert "result" in await handle(gw, session, INIT)
    await gw.router.handle(
        session, {"jsonrpc": "2.0", "method": "notifications/initialized"}, NOTIFICATION, session.standalone
    )
    return session


async def test_a_call_reaches_the_backend_and_comes_back_under_the_client_id(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    answer = await handle(gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 2, "b": 3}}, "x-7"))
    assert answer["id"] == "x-7"
    assert answer["result"]["structuredContent"] == {"sum": 5}
    assert "_sb_backend" not in answer, "the answering backend travels beside the answer, not in it"
    assert not session.inflight


async def test_requests_before_initialize_are_refused_but_ping_is_answered(gateway: Gateway) -> None:
    session = gateway.open_session("test", gateway.federated, Credentials("anonymous", "anonymous"))
    refused = await handle(gateway, session, rpc("tools/list"))
    assert refused["error"]["code"] == jsonrpc.INVALID_REQUEST
    assert (await handle(gateway, session, rpc("ping")))["result"] == {}


@pytest.mark.parametrize("key", ["capabilities", "clientInfo"])
@pytest.mark.parametrize("value", ["x", 5, [], True])
async def test_initialize_refuses_a_non_object_capabilities_or_client_info(
    gateway: Gateway, key: str, value: Any
) -> None:
    session = gateway.open_session("test", gateway.federated, Credentials("anonymous", "anonymous"))
    message = initialize_request(0)
    message["params"][key] = value
    refused = await handle(gateway, session, message)
    assert refused["error"] == {"code": jsonrpc.INVALID_PARAMS, "message": f"Invalid params: {key} must be an object"}
    assert session.protocol_version is None, "not initialized: the client may try again"
    assert "result" in await handle(gateway, session, INIT)


@pytest.mark.parametrize("absent", [None, "missing"])
async def test_initialize_reads_absent_capabilities_and_client_info_as_empty(
    gateway: Gateway, absent: str | None
) -> None:
    """Hand-written legacy clients leave them out, and serializers of nil maps write null."""
    session = gateway.open_session("test", gateway.federated, Credentials("anonymous", "anonymous"))
    message = initialize_request(0)
    for key in ("capabilities", "clientInfo"):
        if absent is None:
            message["params"][key] = None
        else:
            del message["params"][key]
    assert "result" in await handle(gateway, session, message)
    assert session.client_capabilities == {} and session.client_info == {}


async def test_lists_are_paged_with_opaque_cursors(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    names: list[str] = []
    cursor = None
    for _ in range(5):
        answer = await handle(gateway, session, rpc("tools/list", {"cursor": cursor} if cursor else {}))
        names += [tool["name"] for tool in answer["result"]["tools"]]
        cursor = answer["result"].get("nextCursor")
        if cursor is None:
            break
    assert sorted(names) == ["add", "echo", "slow_count"]
    bad = await handle(gateway, session, rpc("tools/list", {"cursor": "not-a-cursor"}))
    assert bad["error"]["code"] == jsonrpc.INVALID_PARAMS


async def test_each_request_is_held_to_its_own_principal(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    narrow = Principal("anonymous", CapabilitySet(["mcp/request:tools/list", "mcp/request:tools/call:echo"]))
    denied = await handle(
        gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}), principal=narrow
    )
    assert denied["error"]["code"] == jsonrpc.CAPABILITY_DENIED
    listed = await handle(gateway, session, rpc("tools/list"), principal=narrow)
    assert [t["name"] for t in listed["result"]["tools"]] == ["echo"], "lists show only what may be called"
    allowed = await handle(gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 1}}))
    assert "result" in allowed, "the session's own principal still may"


async def test_every_decision_is_audited_with_its_backend(gateway: Gateway) -> None:
    records: list[dict[str, Any]] = []
    gateway.audit.add_listener(records.append)
    session = await ready_session(gateway)
    await handle(gateway, session, rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}}))
    await handle(gateway, session, rpc("tools/call", {"name": "nope", "arguments": {}}))  # the backend says no
    await handle(gateway, session, rpc("tools/call", {"name": 7}))  # the gateway says no
    calls = [r for r in records if r.get("method") == "tools/call"]
    assert [(r["outcome"], r["backend"], r["result"]) for r in calls] == [
        ("allowed", "demo", "ok"),
        ("allowed", "demo", "error"),
        ("allowed", "gateway", "error"),
    ]


async def test_an_unknown_method_passes_through_to_the_one_backend(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    answer = await handle(gateway, session, rpc("vendor/custom"))
    assert answer["error"]["code"] == jsonrpc.METHOD_NOT_FOUND  # the demo backend does not know it


async def test_cancellation_with_any_request_id_never_breaks_the_session(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    for request_id in ([1], {"a": 1}, None, True, 1.5, "unknown"):
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        assert await gateway.router.handle(session, note, NOTIFICATION, session.standalone) is None
    assert "result" in await handle(gateway, session, rpc("ping", rpc_id=9))


async def test_the_drafts_exit_request_is_answered_and_ends_the_session(gateway: Gateway) -> None:
    session = await ready_session(gateway)
    answer = await handle(gateway, session, rpc("exit", rpc_id=3))
    assert answer == {"jsonrpc": "2.0", "id": 3, "result": None}
    assert session.closed


async def test_a_dispatch_decision_that_must_be_awaited_is_waited_for(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """_named_call is a plain function: a dispatch member that must be awaited continues in a small
    coroutine that calls it again with the decision (allowed: forwarded; refused: the refusal)."""
    from policies.chain import ALLOW, Decision

    session = await ready_session(gateway)
    chain = gateway.router._chain
    if not chain.has_dispatch:
        pytest.skip("no dispatch members in this chain")
    verdicts: list[Decision] = []

    async def decide(*_: Any) -> Decision:
        return verdicts.pop(0)

    monkeypatch.setattr(chain, "dispatch_now", lambda *args: decide(*args))
    verdicts.append(ALLOW)
    answer = await handle(gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, 5))
    assert answer["result"]["structuredContent"] == {"sum": 3}
    verdicts.append(Decision(False, "test", jsonrpc.INVALID_REQUEST, "refused here", None, "denied"))
    refused = await handle(gateway, session, rpc("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, 6))
    assert refused["id"] == 6
    assert refused["error"]["message"] == "refused here"
    assert not session.inflight
