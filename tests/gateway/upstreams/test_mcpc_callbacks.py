"""``BackendConnection`` and MCPC callbacks: an unsolicited response with the id ``"MCPC_CALLBACK"``
goes to the handler's ``on_mcpc_callback`` before any id matching, and never answers, fails or
disturbs a call in flight (gateway/upstreams/connection.py, gateway/mcpc/intake.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.mcpc.callback import MCPC_CALLBACK, callback_envelope, callback_messages
from adapters.mcpc.translate import task_message
from gateway import jsonrpc
from tests.gateway.upstreams.fakes import FakeBackend, Owner, config, finished, rig

pytestmark = pytest.mark.timeout(30)


def call(name: str) -> dict[str, Any]:
    return {"name": name, "arguments": {}}


@pytest.mark.parametrize("blocking", [False, True], ids=["stream", "request-response"])
async def test_a_callback_among_pending_calls_goes_to_the_handler_and_answers_none(blocking: bool) -> None:
    r = await rig(FakeBackend("legacy", blocking=blocking), config("http"))
    alice, bob = Owner("alice"), Owner("bob")
    first = asyncio.create_task(r.conn.request("tools/call", call("a"), alice))
    second = asyncio.create_task(r.conn.request("tools/call", call("b"), bob))
    held = await r.backend.held_request("tools/call", 2)
    by_name = {m["params"]["name"]: (c, m) for c, m in held}
    carrier = held[0][0]

    update = task_message("update", "sb-session-1", "sb-task-1", "slow_task", {"step": 1})
    envelope = callback_envelope(update)
    # On a call's own stream (related to the first call) and on no stream at all.
    carrier.deliver(envelope, related=by_name["a"][1]["id"])
    carrier.deliver({"jsonrpc": "2.0", "id": MCPC_CALLBACK, "result": {"content": []}})
    await asyncio.sleep(0.05)

    assert r.handler.callbacks == [envelope, {"jsonrpc": "2.0", "id": MCPC_CALLBACK, "result": {"content": []}}]
    assert callback_messages(r.handler.callbacks[0]) == [update]
    assert not first.done() and not second.done(), "a callback answers no call"
    assert r.conn.inflight == 2
    assert alice.delivered == [] and bob.delivered == [], "nor does it reach a caller's stream"
    assert r.handler.notifications == [] and r.handler.server_requests == []

    # The calls are still matched by their own ids afterwards, in any order.
    carrier_b, message_b = by_name["b"]
    carrier_b.answer(message_b["id"], {"content": [{"type": "text", "text": "B"}]})
    assert (await finished(second))["result"]["content"][0]["text"] == "B"
    assert not first.done()
    carrier.deliver(callback_envelope(task_message("complete", "sb-session-1", "sb-task-1", "slow_task", "ok")))
    carrier_a, message_a = by_name["a"]
    carrier_a.answer(message_a["id"], {"content": [{"type": "text", "text": "A"}]})
    assert (await finished(first))["result"]["content"][0]["text"] == "A"
    assert len(r.handler.callbacks) == 3 and r.conn.inflight == 0


async def test_an_error_under_the_callback_id_is_no_answer_either() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    pending = asyncio.create_task(r.conn.request("tools/call", call("a"), Owner("alice")))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    carrier.deliver(jsonrpc.error(MCPC_CALLBACK, -32603, "not a callback"))
    await asyncio.sleep(0.05)
    assert not pending.done() and r.conn.inflight == 1
    assert len(r.handler.callbacks) == 1, "whatever comes under that id is the MCPC side's (it reads no message)"
    assert callback_messages(r.handler.callbacks[0]) == []
    carrier.answer(message["id"], {"ok": True})
    assert (await finished(pending))["result"] == {"ok": True}


async def test_a_request_whose_id_is_the_callback_id_is_a_server_request() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    request = {"jsonrpc": "2.0", "id": MCPC_CALLBACK, "method": "ping"}
    r.backend.carrier.deliver(request)
    await asyncio.sleep(0.05)
    assert r.handler.callbacks == []
    assert [m for m, _ in r.handler.server_requests] == [request]
