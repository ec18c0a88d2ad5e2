"""``BackendConnection`` against a scripted in-memory backend: id and token remapping, routing of
what the backend sends, cancellation, death and reconnection, and the modern listen stream.

The fakes (tests/gateway/upstreams/fakes.py) play a backend of either era; only the connection's
public surface is used, so these tests hold across refactors of its insides.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters import mcp_modern
from gateway import errors, jsonrpc
from tests.gateway.upstreams.fakes import FakeBackend, FakeCarrier, Owner, Rig, config, finished, rig

pytestmark = pytest.mark.timeout(30)


# ---- ids and progress tokens ---------------------------------------------------------------------


async def test_concurrent_calls_answered_out_of_order_reach_their_own_callers() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    first = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, Owner("s1")))
    second = asyncio.create_task(r.conn.request("tools/call", {"name": "b", "arguments": {}}, Owner("s2")))
    held = await r.backend.held_request("tools/call", 2)
    by_name = {m["params"]["name"]: (c, m) for c, m in held}
    ids = [m["id"] for _, m in held]
    assert len(set(ids)) == 2, "each request gets its own upstream id"
    assert all(isinstance(i, int) for i in ids)
    carrier_b, message_b = by_name["b"]
    carrier_b.answer(message_b["id"], {"content": [{"type": "text", "text": "B"}]})
    assert (await finished(second))["result"]["content"][0]["text"] == "B"
    assert not first.done()
    carrier_a, message_a = by_name["a"]
    carrier_a.answer(message_a["id"], {"content": [{"type": "text", "text": "A"}]})
    assert (await finished(first))["result"]["content"][0]["text"] == "A"
    assert r.conn.inflight == 0


async def test_an_answer_under_our_id_as_a_string_still_matches() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    carrier.answer(str(message["id"]), {"ok": True})
    assert (await finished(call))["result"] == {"ok": True}


async def test_the_same_client_token_from_two_sessions_is_two_upstream_tokens() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    alice, bob = Owner("alice"), Owner("bob")
    params: dict[str, Any] = {"name": "slow", "arguments": {}, "_meta": {"progressToken": "t"}}
    calls = [
        asyncio.create_task(r.conn.request("tools/call", params, alice)),
        asyncio.create_task(r.conn.request("tools/call", params, bob)),
    ]
    held = await r.backend.held_request("tools/call", 2)
    tokens = [m["params"]["_meta"]["progressToken"] for _, m in held]
    assert len(set(tokens)) == 2 and "t" not in tokens
    assert params["_meta"]["progressToken"] == "t", "the caller's params are not changed"
    (carrier, first), (_, second) = held
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[1], "progress": 1}))
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[0], "progress": 7}))
    # A token naming no call (or an array, which names nothing) is dropped.
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": 999, "progress": 1}))
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": [1], "progress": 1}))
    owners = {first["id"]: alice, second["id"]: bob}
    assert owners[second["id"]].delivered == [
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}}
    ]
    assert owners[first["id"]].delivered == [
        {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 7}}
    ]
    assert r.handler.notifications == [], "progress is only ever the caller's"
    for c, m in held:
        c.answer(m["id"], {})
    for call in calls:
        await finished(call)
    carrier.deliver(jsonrpc.notification("notifications/progress", {"progressToken": tokens[0], "progress": 8}))
    assert len(alice.delivered) + len(bob.delivered) == 2, "progress after the result goes nowhere"


async def test_messages_related_to_a_call_go_to_its_owner_and_global_ones_to_the_handler() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    owner = Owner("s")
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, owner))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    log_line = jsonrpc.notification("notifications/message", {"level": "info", "data": "x"})
    carrier.deliver(log_line, related=message["id"])
    changed = jsonrpc.notification("notifications/tools/list_changed")
    carrier.deliver(changed, related=message["id"])
    sampling = jsonrpc.request("srv-1", "sampling/createMessage", {"messages": []})
    carrier.deliver(sampling, related=message["id"])
    unrelated = jsonrpc.request("srv-2", "roots/list", {})
    carrier.deliver(unrelated)
    assert owner.delivered == [log_line]
    assert r.handler.notifications == [changed], "a list change concerns every session"
    assert r.handler.server_requests == [(sampling, owner), (unrelated, None)]
    carrier.answer(message["id"], {})
    await finished(call)


async def test_a_log_line_without_relation_goes_to_the_one_call_in_flight_else_to_everyone() -> None:
    r = await rig(FakeBackend("legacy"), config("stdio"))
    first, second = Owner("1"), Owner("2")
    one = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}, first))
    await r.backend.held_request("tools/call")
    carrier = r.backend.carrier
    line = jsonrpc.notification("notifications/message", {"level": "info", "data": "one"})
    carrier.deliver(line)
    assert first.delivered == [line]
    two = asyncio.create_task(r.conn.request("tools/call", {"name": "b", "arguments": {}}, second))
    held = await r.backend.held_request("tools/call", 2)
    other = jsonrpc.notification("notifications/message", {"level": "info", "data": "two"})
    carrier.deliver(other)
    assert first.delivered == [line] and second.delivered == [] and r.handler.notifications == [other]
    for c, m in held:
        c.answer(m["id"], {})
    await finished(one)
    await finished(two)


async def test_answers_to_server_requests_go_back_to_the_backend_as_sent() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    carrier = r.backend.carrier
    carrier.deliver(jsonrpc.request("srv-9", "roots/list", {}))
    [(message, owner)] = r.handler.server_requests
    assert message["id"] == "srv-9" and owner is None
    await r.conn.send(jsonrpc.result("srv-9", {"roots": []}))
    assert carrier.sent[-1] == ({"jsonrpc": "2.0", "id": "srv-9", "result": {"roots": []}}, None)


async def test_an_answer_with_an_array_or_object_id_is_dropped_and_the_connection_lives() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    for bad_id in ([message["id"]], {"id": message["id"]}):
        carrier.deliver({"jsonrpc": "2.0", "id": bad_id, "result": {"wrong": True}})  # must not raise
    carrier.deliver({"jsonrpc": "2.0", "method": 42})  # a method that is no string: dropped too
    carrier.deliver({"jsonrpc": "2.0", "id": 12345, "result": {}})  # an id we never used: ignored
    assert r.conn.state == "ready" and not call.done()
    carrier.answer(message["id"], {"right": True})
    assert (await finished(call))["result"] == {"right": True}
    assert (await r.conn.request("ping", {}))["result"] == {}
    assert len(r.backend.carriers) == 1, "the connection was never dropped"


# ---- cancellation and timeouts -------------------------------------------------------------------


async def test_cancel_tells_a_legacy_backend_and_answers_the_caller_with_32800() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    r.conn.cancel(pending, "the user gave up")
    answer = await finished(call)
    assert answer["error"]["code"] == errors.REQUEST_CANCELLED
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    [note] = carrier.find("notifications/cancelled")
    assert note["params"] == {"requestId": message["id"], "reason": "the user gave up"}
    assert "id" not in note
    carrier.answer(message["id"], {"late": True})  # the backend answers anyway: nobody is waiting
    assert r.conn.inflight == 0 and r.conn.state == "ready"


async def test_cancel_of_a_modern_http_call_cuts_the_exchange_without_a_notification() -> None:
    r = await rig(FakeBackend("modern", blocking=True), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, _)] = await r.backend.held_request("tools/call")
    r.conn.cancel(pending, "bye")
    answer = await finished(call)
    assert answer["error"]["code"] == errors.REQUEST_CANCELLED
    await asyncio.sleep(0.02)
    assert carrier.find("notifications/cancelled") == [], "closing the stream is the modern era's cancel"
    assert r.conn.state == "ready"


async def test_cancel_after_the_answer_is_a_no_op() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    pending = r.conn.begin("tools/call", {"name": "a", "arguments": {}}, Owner("s"))
    call = asyncio.create_task(r.conn.call(pending))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    carrier.answer(message["id"], {"done": True})
    assert (await finished(call))["result"] == {"done": True}
    r.conn.cancel(pending, "too late")
    await asyncio.sleep(0.02)
    assert carrier.find("notifications/cancelled") == [], "nothing to cancel once answered"


async def test_a_modern_http_call_that_times_out_is_abandoned_without_a_notification() -> None:
    r = await rig(FakeBackend("modern", blocking=True), config("http"))
    with pytest.raises(jsonrpc.RpcError) as timed_out:
        await r.conn.request("tools/call", {"name": "a", "arguments": {}}, timeout=0.05)
    assert timed_out.value.code == errors.BACKEND_TIMEOUT
    await asyncio.sleep(0.02)
    assert r.backend.carrier.find("notifications/cancelled") == []
    assert r.conn.inflight == 0 and r.conn.state == "ready"


async def test_a_call_that_times_out_is_cancelled_upstream() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    with pytest.raises(jsonrpc.RpcError) as timed_out:
        await r.conn.request("tools/call", {"name": "a", "arguments": {}}, timeout=0.05)
    assert timed_out.value.code == errors.BACKEND_TIMEOUT
    [(carrier, message)] = await r.backend.held_request("tools/call")
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    assert carrier.find("notifications/cancelled")[0]["params"]["requestId"] == message["id"]
    assert r.conn.inflight == 0


async def test_a_caller_that_goes_away_abandons_its_call_upstream() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    [(carrier, message)] = await r.backend.held_request("tools/call")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await finished(call)
    await r.backend.until(lambda: bool(carrier.find("notifications/cancelled")))
    assert carrier.find("notifications/cancelled")[0]["params"]["requestId"] == message["id"]
    assert r.conn.inflight == 0


# ---- death and reconnection ----------------------------------------------------------------------


async def test_a_dying_backend_fails_calls_in_flight_and_is_reconnected() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    first = r.backend.carrier
    calls = [asyncio.create_task(r.conn.request("tools/call", {"name": n, "arguments": {}})) for n in "ab"]
    await r.backend.held_request("tools/call", 2)
    first.die("process exited with code 1")
    for call in calls:
        # The gateway's own failure is raised, like a call to a backend that is not connected.
        with pytest.raises(jsonrpc.RpcError) as lost:
            await finished(call)
        assert lost.value.code == errors.BACKEND_UNAVAILABLE
        assert "process exited with code 1" in lost.value.message
    await r.backend.until(lambda: len(r.handler.connected) == 2)
    assert r.handler.disconnected == ["process exited with code 1"]
    assert r.conn.state == "ready" and r.conn.restarts == 1
    second = r.backend.carrier
    assert second is not first and len(r.backend.carriers) == 2
    assert second.methods() == ["initialize", "notifications/initialized"], "the era is remembered"
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "c", "arguments": {}}))
    held = await r.backend.held_request("tools/call", 3)
    carrier, message = held[-1]
    assert carrier is second
    carrier.answer(message["id"], {"again": True})
    assert (await finished(call))["result"] == {"again": True}


async def test_a_modern_backend_stays_modern_across_a_reconnect() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    r.backend.carrier.die("stream reset")
    await r.backend.until(lambda: len(r.handler.connected) == 2)
    assert r.conn.era == "modern"
    assert r.backend.carrier.methods() == ["server/discover"]


async def test_while_down_calls_fail_fast_and_notifications_are_dropped() -> None:
    backend = FakeBackend("legacy")
    r = await rig(backend, config("http", restart={"initial_backoff_s": 5, "max_backoff_s": 5}))
    r.backend.carrier.die("gone")
    await r.backend.until(lambda: r.conn.state == "down")
    with pytest.raises(jsonrpc.RpcError) as refused:
        await r.conn.request("ping", {})
    assert refused.value.code == errors.BACKEND_UNAVAILABLE
    assert "gone" in refused.value.message
    await r.conn.notify("notifications/roots/list_changed")  # dropped quietly, no exception
    assert "notifications/roots/list_changed" not in r.backend.carrier.methods()


async def test_close_fails_what_is_in_flight_and_stops_reconnecting() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    call = asyncio.create_task(r.conn.request("tools/call", {"name": "a", "arguments": {}}))
    await r.backend.held_request("tools/call")
    await r.conn.close()
    with pytest.raises(jsonrpc.RpcError) as lost:
        await finished(call)
    assert lost.value.code == errors.BACKEND_UNAVAILABLE
    assert r.conn.state == "closed"
    assert r.backend.carrier.closed.is_set()
    await asyncio.sleep(0.05)
    assert len(r.backend.carriers) == 1, "a closed connection does not reconnect"
    assert r.handler.disconnected == [], "closing on purpose is no outage"


async def test_close_during_the_handshake_returns_promptly() -> None:
    backend = FakeBackend("legacy")
    backend.hang_on_initialize = True
    r = await rig(backend, config("stdio"), ready=False)
    await backend.until(lambda: bool(backend.carriers) and "initialize" in backend.carrier.methods())
    async with asyncio.timeout(1.0):
        await r.conn.close()
    assert r.conn.state == "closed"
    assert not await r.conn.wait_ready(0.01)
    assert backend.carrier.closed.is_set()
    assert r.handler.connected == [] and r.handler.disconnected == []


async def test_notify_reaches_a_ready_backend() -> None:
    r = await rig(FakeBackend("legacy"), config("http"))
    await r.conn.notify("notifications/roots/list_changed", {"x": 1})
    assert r.backend.carrier.find("notifications/roots/list_changed") == [
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed", "params": {"x": 1}}
    ]


# ---- the modern listen stream --------------------------------------------------------------------


async def listen_stream(caps: dict[str, Any]) -> tuple[Rig, FakeCarrier, dict[str, Any]]:
    r = await rig(FakeBackend("modern", modern_caps=caps), config("http"))
    [(carrier, listen)] = await r.backend.held_request("subscriptions/listen")
    tagged = {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"]}
    ack = jsonrpc.notification("notifications/subscriptions/acknowledged", {"_meta": tagged})
    carrier.deliver(ack, related=listen["id"])
    return r, carrier, listen


async def test_a_modern_backend_with_list_changes_gets_one_listen_stream() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}, "resources": {"subscribe": True}})
    assert listen["params"]["notifications"] == {
        "toolsListChanged": True,
        "promptsListChanged": False,
        "resourcesListChanged": False,
        "resourceSubscriptions": [],
    }
    assert r.handler.notifications == [], "the acknowledgement is the stream's own business"
    tagged = {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"], "other": 1}
    log_line = jsonrpc.notification("notifications/message", {"level": "info", "data": "x", "_meta": tagged})
    carrier.deliver(log_line, related=listen["id"])
    changed = jsonrpc.notification("notifications/tools/list_changed", {"_meta": tagged})
    carrier.deliver(changed, related=listen["id"])
    assert [n["method"] for n in r.handler.notifications] == [
        "notifications/message",
        "notifications/tools/list_changed",
    ]
    assert r.handler.notifications[0]["params"] == {"level": "info", "data": "x", "_meta": {"other": 1}}
    assert r.backend.carrier.methods().count("subscriptions/listen") == 1


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("notifications/tools/list_changed", {}),
        ("notifications/resources/updated", {"uri": "demo://r"}),
    ],
)
async def test_what_the_listen_stream_carries_arrives_without_its_subscription_id(
    method: str, params: dict[str, Any]
) -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}, "resources": {"subscribe": True}})
    tagged = {**params, "_meta": {mcp_modern.SUBSCRIPTION_ID_KEY: listen["id"]}}
    carrier.deliver(jsonrpc.notification(method, tagged), related=listen["id"])
    assert r.handler.notifications == [{"jsonrpc": "2.0", "method": method, "params": params}]


async def test_a_listen_stream_refused_as_method_not_found_is_not_reopened() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}})
    carrier.deliver(jsonrpc.error(listen["id"], errors.METHOD_NOT_FOUND, "Method not found"))
    await asyncio.sleep(0.1)  # several restart backoffs (10-50 ms)
    assert carrier.methods().count("subscriptions/listen") == 1
    assert r.conn.state == "ready"


async def test_a_listen_stream_that_ends_is_reopened() -> None:
    r, carrier, listen = await listen_stream({"tools": {"listChanged": True}})
    carrier.answer(listen["id"], {"resultType": "complete"})
    await r.backend.held_request("subscriptions/listen", 2)
    assert r.conn.state == "ready"


async def test_a_modern_backend_without_list_changes_gets_no_listen_stream() -> None:
    r = await rig(FakeBackend("modern"), config("http"))
    assert (await r.conn.request("ping", {}))["result"] == {}
    assert "subscriptions/listen" not in r.backend.carrier.methods()
