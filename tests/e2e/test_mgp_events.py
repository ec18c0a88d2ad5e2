"""MGP events and callbacks through the gateway with a real subprocess backend
(tests/e2e/backends/mgp_events_server.py, MGP 0.8 over stdio; gateway/mgp/events.py, callbacks.py).

The gateway subscribes upstream once per backend channel however many clients want it, relays the
backend's notifications/mgp.event as ``BACKEND/CHANNEL`` with each client's own flat ``_mgp.seq``,
unsubscribes upstream when the last client goes; it relays a backend's callback request (sent twice,
as servers retry) once to the client whose call it belongs to, and that client's answer back to the
backend as mgp/callback/respond, which lets the call finish with it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.mgp import names
from gateway.config import Config
from gateway.core import Gateway
from gateway.sessions import ClientSession
from tests.gateway.mgp.demo_gateway import ask, rpc
from tests.gateway.mgp.feature_support import PRINCIPALS, client, pushed
from tests.support import stdio_backend

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    config = {
        "backends": {"ev": stdio_backend("tests.e2e.backends.mgp_events_server", required=True)},
        "federation": {"prefix": "never"},
        "principals": PRINCIPALS,
    }
    gateway = Gateway(Config.model_validate(config))
    await gateway.start()
    try:
        assert await gateway.connections["ev"].wait_ready(20)
        yield gateway
    finally:
        await gateway.stop()


async def arrived(session: ClientSession, method: str, count: int) -> list[dict[str, Any]]:
    """The ``method`` notifications pushed to ``session``, once ``count`` are there (5 s at most)."""
    for _ in range(250):
        if len(found := await pushed(session, method)) >= count:
            return found
        await asyncio.sleep(0.02)
    raise AssertionError(f"{count} x {method} expected, got {found}")


async def backend_log(gw: Gateway, session: ClientSession) -> dict[str, Any]:
    answer = await ask(gw, session, rpc("tools/call", {"name": "log", "arguments": {}}, "log"))
    return json.loads(answer["result"]["content"][0]["text"])  # type: ignore[no-any-return]


async def test_backend_channels_are_subscribed_once_and_relayed_to_every_subscriber(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    first = await ask(gw, alice, rpc("mgp/events/subscribe", {"channels": ["ev/system.alerts", "ev/nope", "audit"]}))
    assert first["result"]["subscribed"] == ["ev/system.alerts", "audit"]
    assert first["result"]["unsupported"] == ["ev/nope"]
    second = await ask(
        gw, bob, rpc("tools/call", {"name": "mgp.events.subscribe", "arguments": {"channels": ["ev/system.alerts"]}})
    )
    bob_sub = second["result"]["structuredContent"]["subscription_id"]
    assert (await backend_log(gw, alice))["received"].count("mgp/events/subscribe") == 2  # system.alerts, nope
    await ask(gw, alice, rpc("tools/call", {"name": "emit", "arguments": {"channel": "system.alerts", "text": "hot"}}))
    [to_bob] = await arrived(bob, names.EVENT, 1)
    assert to_bob["channel"] == "ev/system.alerts" and to_bob["subscription_id"] == bob_sub
    assert to_bob["data"] == {"text": "hot", "severity": "warning"} and to_bob["_mgp.seq"] == 1
    to_alice = [e for e in await arrived(alice, names.EVENT, 2) if e["channel"] == "ev/system.alerts"]
    assert len(to_alice) == 1
    alice_seqs = [e["_mgp.seq"] for e in await pushed(alice, names.EVENT)]
    assert alice_seqs == list(range(1, len(alice_seqs) + 1))
    # One client leaves: the backend keeps its subscription; the last one leaves: unsubscribed upstream.
    await ask(gw, bob, rpc("mgp/events/unsubscribe", {"subscription_id": bob_sub}))
    assert "mgp/events/unsubscribe" not in (await backend_log(gw, alice))["received"]
    gw.sessions.end(alice)
    carol = await client(gw, "bob")
    for _ in range(100):  # the upstream unsubscribe is sent in the background
        if not (log := await backend_log(gw, carol))["subscriptions"]:
            break
        await asyncio.sleep(0.05)
    assert log["subscriptions"] == {} and log["received"].count("mgp/events/unsubscribe") == 1


async def test_a_callback_reaches_the_caller_once_and_its_answer_finishes_the_call(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    call = asyncio.create_task(
        ask(gw, alice, rpc("tools/call", {"name": "confirm", "arguments": {"message": "Go?"}}, 41))
    )
    [asked] = await arrived(alice, names.CALLBACK_REQUEST, 1)
    assert asked["callback_id"].startswith("ev/cb-") and asked["request_id"] == 41 and asked["message"] == "Go?"
    await asyncio.sleep(0.1)  # the server's retry arrives meanwhile: not asked again
    assert len(await pushed(alice, names.CALLBACK_REQUEST)) == 1
    assert await pushed(bob, names.CALLBACK_REQUEST) == []
    answer = await ask(
        gw, alice, rpc("mgp/callback/respond", {"callback_id": asked["callback_id"], "response": "confirm"})
    )
    assert answer["result"]["delivered"] is True
    async with asyncio.timeout(5):
        result = await call
    assert json.loads(result["result"]["content"][0]["text"]) == {"answer": "confirm"}
    log = await backend_log(gw, bob)
    assert [r["response"] for r in log["responds"]] == ["confirm"]
