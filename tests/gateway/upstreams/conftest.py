"""Every ``BackendConnection`` a test built with :func:`tests.gateway.upstreams.fakes.rig` is closed after it;
``quick`` records which calls went the quick way (gateway/upstreams/quick.py), for the tests that must test it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from gateway.upstreams.http import HttpCarrier
from gateway.upstreams.quick import QuickExchange
from tests.gateway.upstreams.fakes import RIGS, WAIT_S
from tests.support_oauth import OAuthServer


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    yield
    while RIGS:
        conn = RIGS.pop()
        async with asyncio.timeout(WAIT_S):
            await conn.close()


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tool names of the calls that went the quick way (so that these tests test it)."""
    names: list[str] = []
    original = HttpCarrier.start_request

    def recording(self: HttpCarrier, message: dict[str, Any], headers: Any) -> QuickExchange | None:
        exchange = original(self, message, headers)
        if exchange is not None:
            names.append(message["params"]["name"])
        return exchange

    monkeypatch.setattr(HttpCarrier, "start_request", recording)
    return names


@pytest.fixture(scope="module")
def oauth() -> Iterator[OAuthServer]:
    """A real authorization server (tests/support_oauth.py) that knows the gateway as client ``gw``."""
    with OAuthServer() as server:
        server.add_client("gw", "gw-secret")
        yield server
