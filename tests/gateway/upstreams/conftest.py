"""Every ``BackendConnection`` a test built with :func:`tests.gateway.upstreams.fakes.rig` is closed after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.gateway.upstreams.fakes import RIGS, WAIT_S


@pytest.fixture(autouse=True)
async def close_connections() -> AsyncIterator[None]:
    yield
    while RIGS:
        conn = RIGS.pop()
        async with asyncio.timeout(WAIT_S):
            await conn.close()
