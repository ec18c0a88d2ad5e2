"""The gateway's own errors as an MGP client reads them (MGP_COMMUNICATION.md §14.3-§14.5): MGP's
code and ``error.data._mgp`` for the gateway's refusals and failures; plain clients keep the
JSON-RPC codes; results are never touched."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway import errors
from gateway.config import Config
from gateway.core import Gateway
from gateway.errors import MgpCode
from tests.gateway.mgp.demo_gateway import ECHO, ask, mgp_session_of, rpc, session_of, started

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
async def gateway() -> AsyncIterator[Gateway]:
    async for gw in started():
        yield gw


def test_the_table_maps_meaning_not_numbers() -> None:
    limited = errors.as_mgp_error({"code": errors.RATE_LIMITED, "message": "slow", "data": {"retryAfterMs": 250}})
    assert limited["code"] == MgpCode.RATE_LIMITED
    assert limited["data"]["_mgp"] == {"category": "resource", "retryable": True, "retry_after_ms": 250}
    assert limited["data"]["retryAfterMs"] == 250, "what was there stays"
    gone = errors.as_mgp_error({"code": errors.BACKEND_UNAVAILABLE, "message": "down"})
    assert gone["code"] == MgpCode.UPSTREAM_UNAVAILABLE and gone["data"]["_mgp"]["category"] == "external"
    own = errors.as_mgp_error({"code": 1010, "message": "blocked", "data": {"_mgp": {"category": "security"}}})
    assert own["data"]["_mgp"] == {"category": "security"}, "an MGP error keeps its own recovery hints"
    plain = {"code": errors.INVALID_PARAMS, "message": "bad"}
    assert errors.as_mgp_error(plain) is plain
    # An MGP code is an application error (HTTP 200); the hint to wait is _mgp.retry_after_ms.
    assert errors.http_status(MgpCode.RATE_LIMITED, modern=False) == 200


async def test_a_rate_limit_reaches_an_mgp_client_as_3000_with_a_retry_hint() -> None:
    config = {
        "backends": {"demo": {"transport": "builtin"}},
        "rate_limits": {"per_principal": {"per_s": 0.01, "burst": 4}},
    }
    gw = Gateway(Config.model_validate(config))
    await gw.start()
    try:
        assert await gw.connections["demo"].wait_ready(10)
        session, _ = await mgp_session_of(gw)
        answers = [await ask(gw, session, rpc("tools/call", ECHO, n)) for n in range(5)]
        error = answers[-1]["error"]
        assert error["code"] == MgpCode.RATE_LIMITED
        assert error["data"]["_mgp"]["retryable"] is True and error["data"]["_mgp"]["retry_after_ms"] > 0
    finally:
        await gw.stop()


async def test_a_dead_backend_is_upstream_unavailable_for_mgp_and_unchanged_for_plain(gateway: Gateway) -> None:
    await gateway.connections["demo"].close()
    mgp, _ = await mgp_session_of(gateway)
    failed = (await ask(gateway, mgp, rpc("tools/call", ECHO)))["error"]
    assert failed["code"] == MgpCode.UPSTREAM_UNAVAILABLE and failed["data"]["_mgp"]["retryable"] is True
    plain = await session_of(gateway)
    assert (await ask(gateway, plain, rpc("tools/call", ECHO)))["error"]["code"] == errors.BACKEND_UNAVAILABLE
