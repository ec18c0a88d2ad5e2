"""A ``server_id`` naming no backend, in mgp/health/* and mgp/lifecycle/shutdown (gateway/mgp/health.py
``unknown_server``, drain.py): MGP_COMMUNICATION.md §14.3.1 gives a 0.8 client ``RESOURCE_NOT_FOUND``
(4004, validation, not retryable) whose message names the identifier; the seed has no 4004, so a 0.3
client (and a plain one) gets -32602. In-process, with the builtin demo backend."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway import jsonrpc
from gateway.core import Gateway
from gateway.errors import MgpCode
from tests.gateway.mgp.demo_gateway import ask, mgp_session_of, rpc, session_of, started

pytestmark = pytest.mark.timeout(30)

SHUTDOWN = {"server_id": "nope", "reason": "operator_request"}
CALLS = [("mgp/health/ping", {"server_id": "nope"}), ("mgp/health/status", {"server_id": "nope"})]
CALLS.append(("mgp/lifecycle/shutdown", SHUTDOWN))


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started():
        yield gw


async def test_a_draft_client_gets_resource_not_found_for_an_unknown_server(gateway: Gateway) -> None:
    session, _ = await mgp_session_of(gateway, "0.8.0")
    for method, params in CALLS:
        error = (await ask(gateway, session, rpc(method, params)))["error"]
        assert error["code"] == MgpCode.RESOURCE_NOT_FOUND, (method, error)
        assert "'nope'" in error["message"] and error["data"]["server_id"] == "nope"
        assert error["data"]["_mgp"] == {"category": "validation", "retryable": False}
        tool = "mgp." + method.removeprefix("mgp/").replace("/", ".")
        called = await ask(gateway, session, rpc("tools/call", {"name": tool, "arguments": params}))
        assert called["error"]["code"] == MgpCode.RESOURCE_NOT_FOUND, (tool, called)


@pytest.mark.parametrize("version", ["0.3.0", None])
async def test_seed_and_plain_clients_keep_invalid_params(gateway: Gateway, version: str | None) -> None:
    session = (await mgp_session_of(gateway, version))[0] if version else await session_of(gateway)
    for method, params in CALLS:
        error = (await ask(gateway, session, rpc(method, params)))["error"]
        assert error["code"] == jsonrpc.INVALID_PARAMS and "'nope'" in error["message"], (method, error)
    assert gateway.mgp.lifecycle.state("demo") == "connected", "nothing was shut down"
