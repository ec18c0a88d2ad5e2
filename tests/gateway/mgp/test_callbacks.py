"""MGP callbacks relayed by the gateway (gateway/mgp/callbacks.py, MGP_COMMUNICATION.md §13.4): a
backend's notifications/mgp.callback.request goes to the MGP client whose call it belongs to, is
de-duplicated by callback_id, answered with mgp/callback/respond (seed method or draft kernel tool)
which the gateway sends to the backend, listed by mgp/events/pending_callbacks, and expires with 3003
and a CALLBACK_TIMEOUT audit event. The backend here is a stand-in connection that records what the
gateway sends it (a real subprocess backend: tests/e2e/test_mgp_events.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from adapters.mgp import names
from gateway.core import Gateway
from gateway.routing.call import CallSink
from tests.gateway.mgp.demo_gateway import ask, rpc, session_of
from tests.gateway.mgp.feature_support import client, gateway, pushed

pytestmark = pytest.mark.timeout(30)


class Backend:
    """What the callbacks feature uses of a backend connection, recording what it is sent."""

    def __init__(self, name: str = "demo") -> None:
        self.name = name
        self.state = "ready"
        self.owners: list[Any] = []
        self.sent: list[dict[str, Any]] = []
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self._tasks: set[asyncio.Task[Any]] = set()

    def owners_inflight(self) -> list[Any]:
        return list(self.owners)

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    async def request(self, method: str, params: dict[str, Any], owner: Any = None, timeout: Any = None) -> Any:
        self.requests.append((method, params))
        return {"jsonrpc": "2.0", "id": 1, "result": {"acknowledged": True}}


def callback(callback_id: str = "cb-1", **params: Any) -> dict[str, Any]:
    body = {
        "callback_id": callback_id,
        "type": "confirmation",
        "message": "Delete 15 files?",
        "options": ["confirm", "cancel"],
    }
    return {"jsonrpc": "2.0", "method": names.CALLBACK_REQUEST, "params": {**body, **params}}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async for running in gateway():
        yield running


async def test_the_owner_of_the_call_is_asked_and_its_answer_reaches_the_backend(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    backend = Backend()
    alice.inflight["call-9"] = (backend, SimpleNamespace(upstream_id=42))
    backend.owners = [CallSink(alice, alice.standalone)]
    assert gw.mgp.news.notification(backend, callback(request_id=42, timeout_ms=60000, **{"_mgp.attempt": 1}))
    [asked] = await pushed(alice, names.CALLBACK_REQUEST)
    assert asked["callback_id"] == "demo/cb-1" and asked["server_id"] == "demo"
    assert asked["request_id"] == "call-9", "the client's own id of the call"
    assert "_mgp.attempt" not in asked
    assert await pushed(bob, names.CALLBACK_REQUEST) == []
    listed = (await ask(gw, alice, rpc("mgp/events/pending_callbacks", {})))["result"]["callbacks"]
    assert [c["callback_id"] for c in listed] == ["demo/cb-1"] and 0 < listed[0]["remaining_ms"] <= 60000
    assert (await ask(gw, bob, rpc("mgp/events/pending_callbacks", {})))["result"]["callbacks"] == []
    refused = await ask(gw, bob, rpc("mgp/callback/respond", {"callback_id": "demo/cb-1", "response": "confirm"}))
    assert refused["error"]["code"] == 1000
    answer = await ask(
        gw,
        alice,
        rpc(
            "tools/call",
            {"name": "mgp.callback.respond", "arguments": {"callback_id": "demo/cb-1", "response": "confirm"}},
        ),
    )
    assert answer["result"]["structuredContent"]["delivered"] is True
    assert backend.requests == [("mgp/callback/respond", {"callback_id": "cb-1", "response": "confirm"})]
    again = await ask(gw, alice, rpc("mgp/callback/respond", {"callback_id": "demo/cb-1", "response": "cancel"}))
    assert again["error"]["code"] == -32602 and "already answered" in again["error"]["message"]
    alice.inflight.clear()  # the stand-in call never really went out


async def test_retries_are_not_asked_twice_and_get_the_recorded_answer(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    backend = Backend()
    gw.mgp.news.notification(backend, callback("cb-2"))
    gw.mgp.news.notification(backend, callback("cb-2", **{"_mgp.attempt": 2}))
    assert len(await pushed(alice, names.CALLBACK_REQUEST)) == 1
    await ask(gw, alice, rpc("mgp/callback/respond", {"callback_id": "demo/cb-2", "response": {"choice": "confirm"}}))
    gw.mgp.news.notification(backend, callback("cb-2", **{"_mgp.attempt": 3}))
    await settle()
    assert len(await pushed(alice, names.CALLBACK_REQUEST)) == 1
    assert (
        backend.requests == [("mgp/callback/respond", {"callback_id": "cb-2", "response": {"choice": "confirm"}})] * 2
    )


async def test_an_unanswered_callback_expires_with_3003_and_is_audited(gw: Gateway) -> None:
    auditor = await client(gw, "auditor")
    alice = await client(gw, "alice")  # the most recently active session that can answer: asked
    backend = Backend()
    gw.mgp.news.notification(backend, callback("cb-3", timeout_ms=50))
    await asyncio.sleep(0.2)
    await settle()
    [(method, params)] = backend.requests
    assert method == "mgp/callback/respond" and params["callback_id"] == "cb-3" and params["response"] is None
    assert params["error"]["code"] == 3003 and params["error"]["data"]["_mgp"]["category"] == "resource"
    audited = [e for e in await pushed(auditor, names.AUDIT) if e["event_type"] == "CALLBACK_TIMEOUT"]
    assert len(audited) == 1 and audited[0]["details"]["callback_id"] == "cb-3"
    assert audited[0]["actor"]["id"] == "alice" and audited[0]["target"]["server_id"] == "demo"
    late = await ask(gw, alice, rpc("mgp/callback/respond", {"callback_id": "demo/cb-3", "response": "confirm"}))
    assert late["error"]["code"] == -32602


async def test_without_any_client_that_can_answer_the_backend_is_told_at_once(gw: Gateway) -> None:
    await client(gw, "alice", extensions=["tool_security"])  # MGP, but no callbacks
    await session_of(gw)  # plain MCP
    backend = Backend()
    gw.mgp.news.notification(backend, callback("cb-4"))
    await settle()
    assert [p["error"]["code"] for _, p in backend.requests] == [3003]


async def test_the_request_form_is_answered_as_a_result(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    backend = Backend()
    message = {**callback("cb-5"), "id": 77}
    assert gw.mgp.news.request(backend, message, None)
    await ask(gw, alice, rpc("mgp/callback/respond", {"callback_id": "demo/cb-5", "response": "cancel"}))
    assert backend.sent == [{"jsonrpc": "2.0", "id": 77, "result": {"callback_id": "cb-5", "response": "cancel"}}]
    assert backend.requests == []


async def test_informational_callbacks_wait_for_nothing_and_bad_ones_are_refused(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    backend = Backend()
    gw.mgp.news.notification(backend, callback("cb-6", type="notification"))
    assert len(await pushed(alice, names.CALLBACK_REQUEST)) == 1
    assert (await ask(gw, alice, rpc("mgp/events/pending_callbacks", {})))["result"]["callbacks"] == []
    gw.mgp.news.notification(backend, {"jsonrpc": "2.0", "method": names.CALLBACK_REQUEST, "params": {"type": "input"}})
    gw.mgp.news.request(backend, {"jsonrpc": "2.0", "id": 3, "method": names.CALLBACK_REQUEST, "params": []}, None)
    await settle()
    assert len(await pushed(alice, names.CALLBACK_REQUEST)) == 1
    assert backend.sent[0]["error"]["code"] == -32602


@pytest.mark.parametrize("params", [{}, {"callback_id": 5, "response": "x"}, {"callback_id": "demo/x"}])
async def test_bad_respond_params_are_invalid_params(gw: Gateway, params: dict[str, Any]) -> None:
    alice = await client(gw, "alice")
    assert (await ask(gw, alice, rpc("mgp/callback/respond", params)))["error"]["code"] == -32602
