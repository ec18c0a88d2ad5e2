"""MGP audit toward clients (gateway/mgp/audit_stream.py, MGP_SECURITY.md §6.3-§6.5): every record of
the one audit stream as notifications/mgp.audit to MGP clients that negotiated audit, with the
client's trace id, filtered to the principal's own records unless it holds mgp/request:mgp/audit/*,
and mgp/audit/replay (seed method and draft kernel tool) over a bounded ring."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import adapters
from adapters import mcp as mcp_adapter
from adapters.mgp import audit_event, names
from gateway import jsonrpc
from gateway.core import Gateway
from gateway.mgp.audit_stream import AuditStream
from gateway.routing.call import Call
from tests.gateway.mgp.demo_gateway import ECHO, ask, rpc, session_of
from tests.gateway.mgp.feature_support import client, gateway, pushed

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async for running in gateway():
        yield running


async def test_a_tool_call_is_pushed_in_the_6_3_shape_with_the_clients_trace_id(gw: Gateway) -> None:
    session = await client(gw, "alice")
    answer = await ask(gw, session, rpc("tools/call", {**ECHO, "trace_id": "trace-abc-1"}, 7))
    assert "result" in answer
    events = [e for e in await pushed(session, names.AUDIT) if e["event_type"] == "TOOL_EXECUTED"]
    assert len(events) == 1
    event = events[0]
    assert event["trace_id"] == "trace-abc-1"
    assert event["actor"] == {"type": "agent", "id": "alice"}
    assert event["target"] == {"server_id": "demo", "tool_name": "echo"}
    assert event["result"] == "SUCCESS"
    assert event["timestamp"].endswith("Z")
    assert isinstance(event["_mgp"]["seq"], int) and event["_mgp"]["seq"] > 0
    assert event["details"]["method"] == "tools/call" and "duration_ms" in event["details"]


async def test_an_otel_traceparent_in_meta_is_the_trace_id(gw: Gateway) -> None:
    session = await client(gw, "alice")
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    await ask(gw, session, rpc("tools/call", {**ECHO, "_meta": {"traceparent": parent}}, 8))
    events = [e for e in await pushed(session, names.AUDIT) if e["event_type"] == "TOOL_EXECUTED"]
    assert events[-1]["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"


async def test_without_a_trace_id_one_is_minted_per_request(gw: Gateway) -> None:
    session = await client(gw, "alice")
    await ask(gw, session, rpc("tools/call", ECHO, 1))
    await ask(gw, session, rpc("tools/call", ECHO, 2))
    traces = [e["trace_id"] for e in await pushed(session, names.AUDIT) if e["event_type"] == "TOOL_EXECUTED"]
    assert len(traces) == 2 and all(traces) and traces[0] != traces[1]


async def test_a_refused_call_is_tool_blocked() -> None:
    async for gw in gateway(mgp={"default_access": "opt-in"}):  # MGP §5.5: nobody may call anything
        session = await client(gw, "alice")
        await ask(gw, session, rpc("tools/call", {**ECHO, "trace_id": "t-refused"}, 3))
        events = [e for e in await pushed(session, names.AUDIT) if e.get("trace_id") == "t-refused"]
        assert [(e["event_type"], e["result"]) for e in events] == [("TOOL_BLOCKED", "BLOCKED")]
        assert events[0]["details"]["reason"]


async def test_each_client_sees_its_own_principal_and_an_auditor_sees_all(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    auditor = await client(gw, "auditor")
    await ask(gw, alice, rpc("tools/call", ECHO, 1))
    await ask(gw, bob, rpc("tools/call", ECHO, 1))
    actors = {
        name: {e["actor"]["id"] for e in await pushed(s, names.AUDIT)}
        for name, s in (("alice", alice), ("bob", bob), ("auditor", auditor))
    }
    assert actors["alice"] == {"alice"}
    assert actors["bob"] == {"bob"}
    assert {"alice", "bob", "auditor"} <= actors["auditor"]


async def test_clients_without_audit_and_plain_clients_get_nothing(gw: Gateway) -> None:
    without = await client(gw, "alice", extensions=["tool_security"])
    plain = await session_of(gw)
    await ask(gw, without, rpc("tools/call", ECHO, 1))
    await ask(gw, plain, rpc("tools/call", ECHO, 1))
    assert await pushed(without, names.AUDIT) == []
    assert await pushed(plain, names.AUDIT) == []


async def test_replay_since_seq_pages_through_what_the_caller_may_see(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    start = gw.mgp.audit.last_seq
    for i in range(3):
        await ask(gw, alice, rpc("tools/call", ECHO, 10 + i))
        await ask(gw, bob, rpc("tools/call", ECHO, 10 + i))
    page = (await ask(gw, alice, rpc("mgp/audit/replay", {"since_seq": start, "limit": 2})))["result"]
    assert page["has_more"] is True and len(page["events"]) == 2
    assert all(e["actor"]["id"] == "alice" for e in page["events"])
    assert page["next_seq"] == page["events"][-1]["seq"] + 1
    rest = (await ask(gw, alice, rpc("mgp/audit/replay", {"since_seq": page["next_seq"] - 1})))["result"]
    seqs = [e["seq"] for e in page["events"] + rest["events"]]
    assert seqs == sorted(set(seqs))
    executed = [e for e in page["events"] + rest["events"] if e["event_type"] == "TOOL_EXECUTED"]
    assert len(executed) == 3
    assert all(e["actor"]["id"] == "alice" for e in rest["events"])


async def test_replay_as_a_kernel_tool_and_by_timestamp(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    await ask(gw, alice, rpc("tools/call", ECHO, 1))
    answer = await ask(
        gw,
        alice,
        rpc("tools/call", {"name": "mgp.audit.replay", "arguments": {"since_timestamp": "2000-01-01T00:00:00Z"}}),
    )
    result = answer["result"]["structuredContent"]
    assert any(e["event_type"] == "TOOL_EXECUTED" for e in result["events"])
    future = await ask(gw, alice, rpc("mgp/audit/replay", {"since_timestamp": "2999-01-01T00:00:00Z"}))
    assert future["result"]["events"] == []


@pytest.mark.parametrize(
    "params",
    [{}, {"since_seq": -1}, {"since_seq": "3"}, {"since_timestamp": "yesterday"}, {"since_seq": 0, "limit": 0}],
)
async def test_bad_replay_params_are_invalid_params(gw: Gateway, params: dict[str, object]) -> None:
    alice = await client(gw, "alice")
    answer = await ask(gw, alice, rpc("mgp/audit/replay", params))
    assert answer["error"]["code"] == -32602


async def test_the_ring_is_bounded_and_records_are_numbered_once(gw: Gateway) -> None:
    stream = AuditStream(gw.audit, capacity=5)
    for _ in range(12):
        gw.audit.record("allowed", principal="alice", method="tools/list", action="mcp/request:tools/list")
    assert stream.last_seq == 12
    alice = await client(gw, "alice")
    request = rpc("mgp/audit/replay", {"since_seq": 0, "limit": 100})
    event = adapters.annotate(mcp_adapter.decode(request, jsonrpc.Shape.REQUEST, session=alice.id, principal="alice"))
    routed = await stream.replay(Call(alice, event, alice.standalone, alice.principal))
    seqs = [e["seq"] for e in routed.response["result"]["events"]]
    assert len(seqs) <= 5 and seqs == sorted(seqs) and seqs[-1] >= 12


def test_record_shapes() -> None:
    record = {
        "ts": "2026-01-01T00:00:00.000Z",
        "outcome": "callback_timeout",
        "event_type": "CALLBACK_TIMEOUT",
        "principal": "p",
        "backend": "b",
        "callback_id": "cb-1",
    }
    event = audit_event.audit_event(record, 9)
    assert event["event_type"] == "CALLBACK_TIMEOUT" and event["_mgp"] == {"seq": 9}
    assert event["target"] == {"server_id": "b"} and event["details"]["callback_id"] == "cb-1"
    assert audit_event.event_type_of({"outcome": "pin_approved"}) == "dev.switchboard.pin_approved"
    assert audit_event.event_type_of({"outcome": "invalid", "method": "tools/call"}) == "VALIDATION_FAILED"
    assert audit_event.trace_id_of({"params": {"trace_id": "bad id with spaces"}}) is None
    assert audit_event.trace_id_of({"trace_id": "top", "params": {}}) == "top"
    assert audit_event.trace_id_of({"params": {"_mgp": {"trace_id": "nested"}}}) == "nested"
