"""Fixtures of the modern door tests (test_modern_door_*.py): an in-process gateway behind httpx.

A test module that defines a fixture of the same name (``door``, ``auth_door``) uses its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from gateway.core import Gateway
from tests.gateway.transports.modern_door_support import BODY_LIMIT, SECRET, client_for


@pytest.fixture
async def door() -> AsyncIterator[httpx.AsyncClient]:
    async for client, _ in client_for({"limits": {"max_body_bytes": BODY_LIMIT}}):
        yield client


@pytest.fixture
async def door_and_gateway() -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    async for pair in client_for({}):
        yield pair


@pytest.fixture
async def auth_door() -> AsyncIterator[httpx.AsyncClient]:
    config = {
        "auth": {"jwt": {"hs256_secret": SECRET}},
        "principals": {"carol": {"capabilities": ["mcp/*"]}},
    }
    async for client, _ in client_for(config):
        yield client
