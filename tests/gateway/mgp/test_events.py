"""MGP events served by the gateway (gateway/mgp/events.py, MGP_COMMUNICATION.md §13.2-§13.3, §13.6):
subscribe/unsubscribe/replay as seed methods and draft kernel tools, the gateway's own channels
``audit`` and ``lifecycle``, each delivery numbered with the flat ``_mgp.seq`` of the client.
(Backend channels, subscribed upstream: tests/e2e/test_mgp_events.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.mgp import names
from gateway.core import Gateway
from tests.gateway.mgp.demo_gateway import ECHO, ask, rpc, session_of
from tests.gateway.mgp.feature_support import client, gateway, pushed

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def gw() -> AsyncIterator[Gateway]:
    async for running in gateway():
        yield running


async def test_subscribe_to_the_gateways_channels_and_get_audit_events(gw: Gateway) -> None:
    session = await client(gw, "alice")
    answer = await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["audit", "lifecycle", "nope"]}))
    result = answer["result"]
    assert result["subscribed"] == ["audit", "lifecycle"] and result["unsupported"] == ["nope"]
    sub = result["subscription_id"]
    await ask(gw, session, rpc("tools/call", {**ECHO, "trace_id": "ev-1"}, 2))
    events = await pushed(session, names.EVENT)
    mine = [e for e in events if e["channel"] == "audit" and e["data"].get("trace_id") == "ev-1"]
    assert len(mine) == 1
    assert mine[0]["subscription_id"] == sub and mine[0]["data"]["event_type"] == "TOOL_EXECUTED"
    seqs = [e["_mgp.seq"] for e in events]
    assert seqs == list(range(1, len(seqs) + 1)), "per client, consecutive"


async def test_lifecycle_changes_of_backends_in_view_are_events(gw: Gateway) -> None:
    session = await client(gw, "alice")
    await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["lifecycle"]}))
    conn = gw.connections["demo"]
    gw.mgp.news.state(conn, "disconnected", "test: gone")
    gw.mgp.news.state(conn, "ready")
    changes = [e["data"] for e in await pushed(session, names.EVENT) if e["channel"] == "lifecycle"]
    assert [(c["server_id"], c["previous_state"], c["new_state"]) for c in changes] == [
        ("demo", "connected", "disconnected"),
        ("demo", "disconnected", "connected"),
    ]
    assert changes[0]["reason"] == "test: gone"


async def test_min_severity_filters_and_unsubscribe_stops(gw: Gateway) -> None:
    session = await client(gw, "alice")
    warned = await ask(
        gw, session, rpc("mgp/events/subscribe", {"channels": ["lifecycle"], "filter": {"min_severity": "warning"}})
    )
    conn = gw.connections["demo"]
    gw.mgp.news.state(conn, "disconnected", "x")
    gw.mgp.news.state(conn, "ready")
    assert [e["data"]["new_state"] for e in await pushed(session, names.EVENT)] == ["disconnected"]
    sub = warned["result"]["subscription_id"]
    done = await ask(gw, session, rpc("mgp/events/unsubscribe", {"subscription_id": sub}))
    assert done["result"]["unsubscribed"] is True
    gw.mgp.news.state(conn, "disconnected", "y")
    assert len(await pushed(session, names.EVENT)) == 1
    again = await ask(gw, session, rpc("mgp/events/unsubscribe", {"subscription_id": sub}))
    assert again["error"]["code"] == 4001


async def test_audit_channel_follows_the_visibility_rule(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    auditor = await client(gw, "auditor")
    for session in (alice, auditor):
        await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["audit"]}))
    bob = await client(gw, "bob")
    await ask(gw, bob, rpc("tools/call", ECHO, 5))
    seen_by = {
        name: {e["data"]["actor"]["id"] for e in await pushed(s, names.EVENT)}
        for name, s in (("alice", alice), ("auditor", auditor))
    }
    assert "bob" not in seen_by["alice"]
    assert "bob" in seen_by["auditor"]


async def test_replay_returns_what_was_delivered_after_a_seq(gw: Gateway) -> None:
    session = await client(gw, "alice")
    sub = (await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["audit"]})))["result"]["subscription_id"]
    for i in range(3):
        await ask(gw, session, rpc("tools/call", ECHO, 10 + i))
    delivered = await pushed(session, names.EVENT)
    answer = await ask(
        gw,
        session,
        rpc("tools/call", {"name": "mgp.events.replay", "arguments": {"subscription_id": sub, "after_seq": 1}}),
    )
    replayed = answer["result"]["structuredContent"]
    assert replayed["subscription_id"] == sub and replayed["truncated"] is False
    assert [e["_mgp.seq"] for e in replayed["events"]][: len(delivered) - 1] == [e["_mgp.seq"] for e in delivered[1:]]
    page = await ask(gw, session, rpc("mgp/events/replay", {"subscription_id": sub, "after_seq": 0, "limit": 1}))
    assert page["result"]["has_more"] is True and len(page["result"]["events"]) == 1


async def test_another_principal_may_not_replay_or_cancel(gw: Gateway) -> None:
    alice = await client(gw, "alice")
    bob = await client(gw, "bob")
    sub = (await ask(gw, alice, rpc("mgp/events/subscribe", {"channels": ["audit"]})))["result"]["subscription_id"]
    for method, params in (
        ("mgp/events/replay", {"subscription_id": sub, "after_seq": 0}),
        ("mgp/events/unsubscribe", {"subscription_id": sub}),
    ):
        answer = await ask(gw, bob, rpc(method, params))
        assert answer["error"]["code"] == 1000
        assert answer["error"]["data"]["_mgp"]["category"] == "security"


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"channels": []},
        {"channels": "audit"},
        {"channels": [1]},
        {"channels": ["audit"], "filter": {"min_severity": "x"}},
    ],
)
async def test_bad_subscribe_params_are_invalid_params(gw: Gateway, params: dict[str, object]) -> None:
    session = await client(gw, "alice")
    assert (await ask(gw, session, rpc("mgp/events/subscribe", params)))["error"]["code"] == -32602


async def test_plain_clients_cannot_subscribe_and_subscriptions_end_with_the_session(gw: Gateway) -> None:
    plain = await session_of(gw)
    assert (await ask(gw, plain, rpc("mgp/events/subscribe", {"channels": ["audit"]})))["error"]["code"] == -32600
    session = await client(gw, "alice")
    sub = (await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["audit"]})))["result"]["subscription_id"]
    gw.sessions.end(session)
    other = await client(gw, "alice")
    gone = await ask(gw, other, rpc("mgp/events/replay", {"subscription_id": sub, "after_seq": 0}))
    assert gone["error"]["code"] == 4001


async def test_a_session_has_a_bounded_number_of_subscriptions(gw: Gateway) -> None:
    session = await client(gw, "alice")
    answers = [await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["audit"]}, i)) for i in range(17)]
    assert all("result" in a for a in answers[:16])
    assert answers[16]["error"]["code"] == 3001


async def test_a_backend_channel_of_a_plain_mcp_backend_is_unsupported(gw: Gateway) -> None:
    session = await client(gw, "alice")
    result = (await ask(gw, session, rpc("mgp/events/subscribe", {"channels": ["demo/system.x", "ghost/a"]})))["result"]
    assert result == {"subscribed": [], "unsupported": ["demo/system.x", "ghost/a"], "subscription_id": None}


async def test_draft_clients_are_listed_the_kernel_tools_of_audit_events_and_callbacks(gw: Gateway) -> None:
    session = await client(gw, "alice")
    listed = {t["name"] for t in (await ask(gw, session, rpc("tools/list", {})))["result"]["tools"]}
    assert {
        "mgp.audit.replay",
        "mgp.events.subscribe",
        "mgp.events.unsubscribe",
        "mgp.events.replay",
        "mgp.events.pending_callbacks",
        "mgp.callback.respond",
    } <= listed
