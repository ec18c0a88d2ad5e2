"""Every MGP operation of the gateway, seed method and draft kernel tool alike, against hostile
params: each answers with a result or a clear JSON-RPC error (never -32603, never an exception,
never a hang), and the gateway keeps serving (issue 12; "attackers are users too").

A seeded generator (reproducible) makes params of every JSON shape, with the operations' own
field names so that the values reach the handlers' checks, not just the first "not an object".
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import pytest

from adapters.mgp import names
from gateway.core import Gateway
from gateway.mgp.server import tool_of_method
from policies.patterns import CapabilitySet
from policies.principal import Principal
from tests.gateway.mgp.demo_gateway import ECHO, ask, mgp_session_of, rpc, session_of, started

pytestmark = pytest.mark.timeout(120)

ADMIN = Principal("ops", CapabilitySet(["*"]))
FIELDS = sorted(
    {field for schema in names.KERNEL_TOOL_SCHEMAS.values() for field in schema.get("properties", {})}
    | {"server_id", "request_id", "callback_id", "subscription_id", "channels", "filter", "since_seq", "id"}
)
PER_OPERATION = 60


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(11 if depth < 3 else 8)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**63, -(2**63), 10**30, 7])
    if kind == 3:
        return rng.choice([0.5, -1e308, 1e308, 1e-9])
    if kind == 4:
        return rng.choice(["", "demo", "switchboard", "x" * 5000, "\u0000", "../..", "mgp.access.grant", "*"])
    if kind == 5:
        return rng.choice(["2026-01-01T00:00:00Z", "not a date", "9999-99-99", "1970-01-01T00:00:00+00:00"])
    if kind == 6:
        return rng.choice(["safe", "moderate", "dangerous", "keyword", "semantic", "all", "tool_grant"])
    if kind == 7:
        return rng.choice(["allow", "deny", "server_grant", "stdio", "http", "capability_gap"])
    if kind == 8:
        return [value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {rng.choice(FIELDS): value(rng, depth + 1) for _ in range(rng.randrange(5))}


def params_for(rng: random.Random) -> Any:
    if rng.random() < 0.1:
        return value(rng)  # not even an object, sometimes
    return {rng.choice(FIELDS): value(rng) for _ in range(rng.randrange(7))}


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started({"permission_policy": "auto_approve"}):
        yield gw


async def test_every_operation_answers_hostile_params_with_a_result_or_a_clear_error(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway)
    rng = random.Random(12)
    methods = sorted(gateway.mgp.server.methods())
    assert len(methods) >= 20
    rpc_id = 0
    for method in methods:
        for _ in range(PER_OPERATION):
            rpc_id += 1
            params = params_for(rng)
            if isinstance(params, dict) and params.get("server_id") == "demo" and "shutdown" in method:
                params["server_id"] = "nope"  # keep the one backend for the rest of the run
            tool = tool_of_method(method)
            if tool in names.KERNEL_TOOL_SCHEMAS and rng.random() < 0.5:
                message = rpc("tools/call", {"name": tool, "arguments": params}, rpc_id)
            else:
                message = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}
            async with asyncio.timeout(10):
                answer = await ask(gateway, session, message, principal=ADMIN)
            assert answer.get("id") == rpc_id, (method, params, answer)
            assert ("result" in answer) != ("error" in answer), (method, params, answer)
            if "error" in answer:
                error = answer["error"]
                assert isinstance(error.get("code"), int) and isinstance(error.get("message"), str)
                assert error["code"] != -32603, (method, params, error)
    # Still serving after all of it.
    assert "result" in await ask(gateway, session, rpc("tools/call", ECHO, rpc_id + 1))
    assert gateway.connections["demo"].state == "ready"


async def test_hostile_mgp_news_from_a_backend_is_absorbed(gateway: Gateway, caplog: pytest.LogCaptureFixture) -> None:
    """A backend that sends garbage MGP notifications (every method the gateway takes, random params):
    no handler fails (nothing logged as an exception), a plain client hears nothing of it, and calls
    go on."""
    plain = await session_of(gateway)
    mgp, _ = await mgp_session_of(gateway)
    conn = gateway.connections["demo"]
    rng = random.Random(21)
    methods = [names.STREAM_CHUNK, names.STREAM_PROGRESS, names.EVENT, names.LIFECYCLE, names.CALLBACK_REQUEST]
    before = plain.standalone.last_seq
    for _ in range(400):
        message = {"jsonrpc": "2.0", "method": rng.choice(methods), "params": params_for(rng)}
        assert gateway.mgp.news.notification(conn, message)
    await asyncio.sleep(0.05)
    assert not [r for r in caplog.records if r.exc_info], "a handler raised"
    async with asyncio.timeout(5):
        heard = [m for _, m in await plain.standalone.read(before)] if plain.standalone.last_seq > before else []
    assert not [m for m in heard if str(m.get("method", "")).startswith("notifications/mgp.")]
    assert "result" in await ask(gateway, mgp, rpc("tools/call", ECHO, 1))
