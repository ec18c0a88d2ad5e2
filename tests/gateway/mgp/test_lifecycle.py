"""MGP lifecycle and health through a real in-process Gateway (gateway/mgp/lifecycle.py, health.py,
drain.py; MGP §11): health of the gateway and of a backend, a graceful shutdown that drains (calls in
flight finish, new ones are refused) and only an operator may ask for, and ``notifications/mgp.lifecycle``
to MGP clients that negotiated ``lifecycle`` only."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from gateway import jsonrpc
from gateway.config import Config
from gateway.core import Gateway
from gateway.errors import MgpCode
from gateway.mgp.lifecycle import GATEWAY_ID, Lifecycle, Transition, derived_state
from gateway.sessions import ClientSession
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ADD, ECHO, ask, mgp_session_of, rpc, session_of, started
from tests.support import PROJECT_ROOT

pytestmark = pytest.mark.timeout(30)

OPS = Principal("ops", CapabilitySet(["mcp/*", "mgp/request:mgp/lifecycle/shutdown"]))
SLOW = {"name": "slow_count", "arguments": {"n": 3, "delay_s": 0.1}}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started():
        yield gw


async def pushed(session: ClientSession, after: int = 0) -> list[dict[str, Any]]:
    """What the gateway pushed to the session's own stream after ``after`` (nothing: empty)."""
    try:
        async with asyncio.timeout(0.05):
            return [m for _, m in await session.standalone.read(after)]
    except TimeoutError:
        return []


def lifecycle_notes(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"] for m in messages if m.get("method") == "notifications/mgp.lifecycle"]


async def until_state(gw: Gateway, backend: str, state: str) -> None:
    async with asyncio.timeout(10):
        while gw.mgp.lifecycle.state(backend) != state:  # noqa: ASYNC110 (the drain runs in its own task)
            await asyncio.sleep(0.01)


async def until_in_flight(gw: Gateway, backend: str) -> None:
    async with asyncio.timeout(5):
        while not gw.connections[backend].owners_inflight():  # noqa: ASYNC110 (the call runs in its own task)
            await asyncio.sleep(0.01)


# ---- health ---------------------------------------------------------------------------------------


async def test_the_gateway_answers_health_for_itself(gateway: Gateway) -> None:
    session = await session_of(gateway)
    for params in (None, {"server_id": GATEWAY_ID}):
        ping = (await ask(gateway, session, rpc("mgp/health/ping", params)))["result"]
        assert ping["status"] == "healthy" and ping["server_id"] == GATEWAY_ID
        assert ping["uptime_secs"] >= 0 and ping["timestamp"].endswith("Z")
    status = (await ask(gateway, session, rpc("mgp/health/status")))["result"]
    assert status["state"] == "connected" and status["status"] == "healthy"
    assert status["servers"]["demo"]["state"] == "connected"
    assert status["checks"] == {"demo": True} and status["pending_requests"] == 0


async def test_a_backend_health_is_a_real_round_trip(gateway: Gateway) -> None:
    session = await session_of(gateway)
    await ask(gateway, session, rpc("tools/list"))  # the tool count comes from the backend's list
    ping = (await ask(gateway, session, rpc("mgp/health/ping", {"server_id": "demo"})))["result"]
    assert ping["status"] == "healthy" and ping["server_id"] == "demo" and ping["state"] == "connected"
    assert isinstance(ping["latency_ms"], float) and ping["latency_ms"] >= 0
    assert gateway.mgp.health.last_probe("demo") is not None
    assert gateway.mgp.health.last_probe("demo").method == "ping", "a plain MCP backend gets MCP's ping"  # type: ignore[union-attr]
    status = (await ask(gateway, session, rpc("mgp/health/status", {"server_id": "demo"})))["result"]
    assert status["state"] == "connected" and status["tools_total"] == status["tools_available"] == 3
    assert status["checks"] == {"connected": True, "responding": True}
    assert status["pending_requests"] == 0 and status["resources"]["transport"] == "builtin"


async def test_an_unknown_server_is_invalid_params(gateway: Gateway) -> None:
    session = await session_of(gateway)
    for method in ("mgp/health/ping", "mgp/health/status", "mgp/lifecycle/shutdown"):
        answer = await ask(gateway, session, rpc(method, {"server_id": "nope", "reason": "operator_request"}))
        assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS, (method, answer)
    answer = await ask(gateway, session, rpc("mgp/health/ping", {"server_id": 7}))
    assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS


async def test_draft_clients_call_health_as_a_kernel_tool(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.8.0")
    listed = {t["name"] for t in (await ask(gateway, session, rpc("tools/list")))["result"]["tools"]}
    assert {"mgp.health.ping", "mgp.health.status"} <= listed
    called = await ask(
        gateway, session, rpc("tools/call", {"name": "mgp.health.ping", "arguments": {"server_id": "demo"}})
    )
    assert called["result"]["isError"] is False
    assert called["result"]["structuredContent"]["server_id"] == "demo"


# ---- graceful shutdown ----------------------------------------------------------------------------


async def test_shutdown_drains_calls_in_flight_and_refuses_new_ones(gateway: Gateway) -> None:
    session = await session_of(gateway)
    slow = asyncio.create_task(ask(gateway, session, rpc("tools/call", SLOW, 10)))
    await until_in_flight(gateway, "demo")
    params = {"server_id": "demo", "reason": "operator_request", "timeout_ms": 5000}
    accepted = (await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params, 11), principal=OPS))["result"]
    assert accepted == {"accepted": True, "pending_requests": 1, "estimated_drain_ms": 5000}
    assert gateway.mgp.lifecycle.state("demo") == "draining"
    refused = (await ask(gateway, session, rpc("tools/call", ECHO, 12)))["error"]
    assert refused["code"] == MgpCode.SERVER_DRAINING
    assert refused["data"]["_mgp"]["category"] == "lifecycle" and refused["data"]["_mgp"]["retryable"] is True
    again = await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params, 13), principal=OPS)
    assert again["error"]["code"] == MgpCode.SERVER_DRAINING
    finished = await slow
    assert finished["result"]["content"][0]["text"] == "counted to 3", "the call in flight finished"
    await until_state(gateway, "demo", "disconnected")
    assert gateway.connections["demo"].state == "closed"
    gone = await ask(gateway, session, rpc("mgp/health/ping", {"server_id": "demo"}, 14))
    assert gone["error"]["code"] == MgpCode.SERVER_NOT_READY
    status = (await ask(gateway, session, rpc("mgp/health/status", {"server_id": "demo"}, 15)))["result"]
    assert (status["state"], status["status"], status["reason"]) == ("disconnected", "unhealthy", "operator_request")
    gateway_status = (await ask(gateway, session, rpc("mgp/health/status", None, 16)))["result"]
    assert gateway_status["status"] == "degraded"
    done = await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params, 17), principal=OPS)
    assert done["error"]["code"] == MgpCode.SERVER_NOT_READY


async def test_a_drain_past_its_timeout_closes_all_the_same(gateway: Gateway) -> None:
    session = await session_of(gateway)
    slow = asyncio.create_task(
        ask(gateway, session, rpc("tools/call", {"name": "slow_count", "arguments": {"n": 50, "delay_s": 0.1}}, 10))
    )
    await until_in_flight(gateway, "demo")
    params = {"server_id": "demo", "timeout_ms": 100}
    assert "result" in await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params, 11), principal=OPS)
    cut = await slow
    assert cut["error"]["code"] == jsonrpc.BACKEND_UNAVAILABLE, "the call still in flight fails when it closes"
    await until_state(gateway, "demo", "disconnected")


async def test_only_an_operator_may_shut_a_backend_down(gateway: Gateway) -> None:
    session = await session_of(gateway)
    reader = Principal("reader", CapabilitySet(["mcp/*"]))
    refused = await ask(gateway, session, rpc("mgp/lifecycle/shutdown", {"server_id": "demo"}), principal=reader)
    assert refused["error"]["code"] == MgpCode.PERMISSION_DENIED
    assert refused["error"]["data"]["action"] == "mgp/request:mgp/lifecycle/shutdown"
    assert gateway.mgp.lifecycle.state("demo") == "connected"
    assert (await ask(gateway, session, rpc("tools/call", ADD, 2)))["result"]["structuredContent"] == {"sum": 3}


async def test_draft_operators_shut_down_with_the_kernel_tool(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.8.0")
    arguments = {"server_id": "demo", "reason": "idle_timeout"}
    reader = Principal("reader", CapabilitySet(["mcp/*"]))
    call = rpc("tools/call", {"name": "mgp.lifecycle.shutdown", "arguments": arguments})
    refused = await ask(gateway, session, call, principal=reader)
    assert refused["error"]["code"] == MgpCode.PERMISSION_DENIED, "a reader is no operator"
    call = rpc("tools/call", {"name": "mgp.lifecycle.shutdown", "arguments": arguments}, 2)
    done = await ask(gateway, session, call, principal=OPS)
    assert done["result"]["structuredContent"] == {"accepted": True, "pending_requests": 0, "estimated_drain_ms": 0}
    await until_state(gateway, "demo", "disconnected")
    assert gateway.mgp.lifecycle.reason("demo") == "idle_timeout"


async def test_malformed_shutdown_params_are_invalid_params(gateway: Gateway) -> None:
    session = await session_of(gateway)
    for params in (
        {},
        {"server_id": GATEWAY_ID},
        {"server_id": "demo", "reason": "because"},
        {"server_id": "demo", "timeout_ms": -1},
        {"server_id": "demo", "timeout_ms": True},
    ):
        answer = await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params), principal=OPS)
        assert answer["error"]["code"] == jsonrpc.INVALID_PARAMS, (params, answer)
    assert gateway.mgp.lifecycle.state("demo") == "connected"


# ---- notifications --------------------------------------------------------------------------------


async def test_transitions_reach_mgp_clients_with_lifecycle_only(gateway: Gateway) -> None:
    wants, _ = await mgp_session_of(gateway, "0.3.0", ["lifecycle", "audit"])
    without, _ = await mgp_session_of(gateway, "0.3.0", ["audit"])
    plain = await session_of(gateway)
    marks = {s.id: s.standalone.last_seq for s in (wants, without, plain)}
    params = {"server_id": "demo", "reason": "configuration_change", "timeout_ms": 1000}
    assert "result" in await ask(gateway, plain, rpc("mgp/lifecycle/shutdown", params), principal=OPS)
    await until_state(gateway, "demo", "disconnected")
    notes = lifecycle_notes(await pushed(wants, marks[wants.id]))
    assert [(n["previous_state"], n["new_state"]) for n in notes] == [
        ("connected", "draining"),
        ("draining", "disconnected"),
    ]
    assert all(n["server_id"] == "demo" and n["reason"] == "configuration_change" for n in notes)
    assert notes[0]["timestamp"].endswith("Z")
    for other in (without, plain):
        assert lifecycle_notes(await pushed(other, marks[other.id])) == [], "only clients that negotiated lifecycle"
    assert not any(
        m.get("method", "").startswith("notifications/mgp.") for m in await pushed(plain, marks[plain.id])
    ), "a plain client sees no MGP notification"


async def test_transitions_are_audited_as_server_events(gateway: Gateway) -> None:
    records: list[dict[str, Any]] = []
    gateway.audit.add_listener(lambda record: records.append(dict(record)))
    session = await session_of(gateway)
    params = {"server_id": "demo", "timeout_ms": 1000}
    assert "result" in await ask(gateway, session, rpc("mgp/lifecycle/shutdown", params), principal=OPS)
    await until_state(gateway, "demo", "disconnected")
    lifecycle = [r for r in records if r.get("outcome") == "lifecycle"]
    assert [(r["event_type"], r["new_state"]) for r in lifecycle] == [
        ("dev.switchboard.lifecycle", "draining"),
        ("SERVER_DISCONNECTED", "disconnected"),
    ]
    assert all(r["backend"] == "demo" and r["reason"] == "operator_request" for r in lifecycle)


async def test_a_backend_that_says_it_drains_is_refused_new_calls(gateway: Gateway) -> None:
    wants, _ = await mgp_session_of(gateway, "0.3.0", ["lifecycle"])
    mark = wants.standalone.last_seq
    conn = gateway.connections["demo"]
    say = {"jsonrpc": "2.0", "method": "notifications/mgp.lifecycle", "params": {"new_state": "draining"}}
    assert gateway.mgp.news.notification(conn, {**say, "params": {**say["params"], "reason": "maintenance"}})
    refused = await ask(gateway, wants, rpc("tools/call", ECHO, 2))
    assert refused["error"]["code"] == MgpCode.SERVER_DRAINING
    gateway.mgp.news.notification(conn, {**say, "params": {"new_state": "connected"}})
    assert (await ask(gateway, wants, rpc("tools/call", ECHO, 3)))["result"]["content"][0]["text"] == "hi"
    notes = lifecycle_notes(await pushed(wants, mark))
    assert [(n["new_state"], n["reason"]) for n in notes] == [
        ("draining", "maintenance"),
        ("connected", "server said connected"),
    ]
    gateway.mgp.news.notification(conn, {**say, "params": {"new_state": "sleeping"}})  # not a §11.2 state
    assert gateway.mgp.lifecycle.state("demo") == "connected"


async def test_the_gateway_announces_its_own_shutdown() -> None:
    async for gw in started():
        wants, _ = await mgp_session_of(gw, "0.3.0", ["lifecycle"])
        mark = wants.standalone.last_seq
    notes = lifecycle_notes(await pushed(wants, mark))
    assert notes[0]["server_id"] == GATEWAY_ID
    assert (notes[0]["new_state"], notes[0]["reason"]) == ("draining", "kernel_shutdown")


# ---- the state machine ----------------------------------------------------------------------------


class FakeConn:
    def __init__(self, name: str = "b") -> None:
        self.name = name
        self.state = "connecting"
        self.gave_up = False
        self.connected_at: float | None = None
        self.last_error: str | None = None


def test_states_follow_the_connection_and_each_transition_is_told_once() -> None:
    life = Lifecycle(clock=lambda: 1000.0)
    seen: list[Transition] = []
    life.on_transition(seen.append)
    conn = FakeConn()
    assert life.state("b") == "registered"
    life.observe(conn)
    life.observe(conn)
    conn.state, conn.connected_at = "ready", 1.0
    life.on_state(conn, "ready", "")
    conn.state, conn.last_error = "down", "exit 3"
    life.on_state(conn, "disconnected", "exit 3")
    conn.state = "connecting"
    life.observe(conn)  # reconnecting: still restarting
    conn.state, conn.gave_up = "down", True
    life.observe(conn)
    assert [(t.previous_state, t.new_state) for t in seen] == [
        ("registered", "connecting"),
        ("connecting", "connected"),
        ("connected", "restarting"),
        ("restarting", "error"),
    ]
    assert seen[-1].reason == "restart_limit_exceeded"
    assert seen[2].params() == {
        "server_id": "b",
        "previous_state": "connected",
        "new_state": "restarting",
        "reason": "exit 3",
        "timestamp": "1970-01-01T00:16:40.000Z",
    }
    assert derived_state(conn) == "error"


def test_an_operator_drain_holds_whatever_the_connection_does() -> None:
    life = Lifecycle()
    conn = FakeConn()
    conn.state = "ready"
    life.observe(conn)
    life.begin_drain("b", "idle_timeout")
    assert life.draining("b")
    conn.state = "down"
    life.observe(conn)
    assert life.state("b") == "draining"
    conn.state = "closed"
    life.end_drain("b", "idle_timeout")
    conn.state = "ready"  # nothing brings it back but a new connection's connect
    life.observe(conn)
    assert (life.state("b"), life.draining("b")) == ("disconnected", False)


# ---- an MGP backend that speaks lifecycle ---------------------------------------------------------


@pytest.fixture
async def lifecycle_backend(tmp_path: Path) -> AsyncIterator[Gateway]:
    """A gateway whose kernel offers ``lifecycle``, in front of tests/e2e/backends/mgp_lifecycle_server.py."""
    backend = {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "tests.e2e.backends.mgp_lifecycle_server"],
        "cwd": str(PROJECT_ROOT),
        "env": {"MGP_LIFECYCLE_LOG": str(tmp_path / "received.log")},
    }
    gw = Gateway(Config.model_validate({"backends": {"life": backend}, "federation": {"prefix": "never"}}))
    await gw.start()
    try:
        assert await gw.connections["life"].wait_ready(10)
        yield gw
    finally:
        await gw.stop()


async def received_by(gw: Gateway, session: ClientSession) -> list[str]:
    answer = await ask(gw, session, rpc("tools/call", {"name": "pid", "arguments": {}}, 99))
    return list(json.loads(answer["result"]["content"][0]["text"])["received"])


async def test_a_lifecycle_backend_is_asked_with_mgp_methods(lifecycle_backend: Gateway, tmp_path: Path) -> None:
    gw = lifecycle_backend
    session = await session_of(gw)
    ping = (await ask(gw, session, rpc("mgp/health/ping", {"server_id": "life"})))["result"]
    assert ping["status"] == "healthy" and ping["server_id"] == "life"
    status = (await ask(gw, session, rpc("mgp/health/status", {"server_id": "life"}, 2)))["result"]
    assert status["mgp"] is True and status["checks"]["self_test"] is True and "pid" in status["resources"]
    assert {"mgp/health/ping", "mgp/health/status"} <= set(await received_by(gw, session))
    params = {"server_id": "life", "reason": "resource_limit", "timeout_ms": 2000}
    assert "result" in await ask(gw, session, rpc("mgp/lifecycle/shutdown", params, 3), principal=OPS)
    await until_state(gw, "life", "disconnected")
    assert gw.connections["life"].state == "closed"
    received = (tmp_path / "received.log").read_text().split()
    assert "mgp/lifecycle/shutdown" in received, "it was told to shut down itself before the gateway closed it"


async def test_a_backend_that_never_connects_is_given_up_on_and_seen_as_error() -> None:
    restart = {"initial_backoff_s": 0.05, "max_restarts": 1, "window_s": 60}
    failing = {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-c", "raise SystemExit(1)"],
        "restart": restart,
    }
    gw = Gateway(Config.model_validate({"backends": {"broken": failing}}))
    seen: list[Transition] = []
    gw.mgp.lifecycle.on_transition(seen.append)
    await gw.start()
    try:
        conn = gw.connections["broken"]
        async with asyncio.timeout(10):
            while not conn.gave_up:  # noqa: ASYNC110 (the supervisor runs in its own task)
                await asyncio.sleep(0.01)
        await gw.mgp.health.tick()  # no event for a connect that failed: the watcher's tick sees it
        assert gw.mgp.lifecycle.state("broken") == "error"
        assert [t.new_state for t in seen if t.server_id == "broken"][-1] == "error"
        assert "restart_limit_exceeded" in (conn.last_error or "")
    finally:
        await gw.stop()


def test_a_backend_told_gone_while_still_connected_stays_disconnected() -> None:
    life = Lifecycle()
    conn = FakeConn()
    conn.state = "ready"
    life.on_state(conn, "ready", "")
    life.on_state(conn, "disconnected", "deregistered")  # its connection closes only after its calls
    life.observe(conn)
    assert (life.state("b"), life.reason("b")) == ("disconnected", "deregistered")
    life.on_state(conn, "ready", "")  # registered again: a new life
    assert life.state("b") == "connected"


def test_reading_a_backend_never_seen_does_not_create_it() -> None:
    life = Lifecycle()
    assert life.state("ghost") == "registered" and not life.draining("ghost")
    life.forget("ghost", "deregistered")  # forgetting a name that never was: nothing to tell
    seen: list[object] = []
    life.on_transition(seen.append)
    life.forget("ghost", "deregistered")
    assert seen == [], "the read made no life for the name"
