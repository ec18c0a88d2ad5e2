"""Fixtures shared by every test package."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from gateway.bus import Bus, MemoryBus
from gateway.bus.redis import RedisBus
from tests.conformance.conftest import start_fixture_server
from tests.conformance.runner import ConformanceError, ensure_installed
from tests.mcpc_peers.venv import mcpc_python as mcpc_python  # the mcpc library's own virtualenv
from tests.support import redis_server


@pytest.fixture(scope="session")
def conformance_suite() -> tuple[Path, Path]:
    """(node, entry point) of the installed conformance suite; installs it if needed."""
    try:
        return ensure_installed()
    except ConformanceError as exc:
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not available, so the MCP conformance suite cannot be installed ({exc})")
        raise


@pytest.fixture(scope="session")
def fixture_backend_url() -> Iterator[str]:
    """URL (http://127.0.0.1:PORT/mcp) of a running dual-era fixture backend, shared by the session."""
    with start_fixture_server() as url:
        yield url


@pytest.fixture(scope="session")
def legacy_fixture_url() -> Iterator[str]:
    """URL of a running fixture backend that serves only the initialize-handshake era (`--era legacy`)."""
    with start_fixture_server(era="legacy") as url:
        yield url


@pytest.fixture(scope="session")
def modern_fixture_url() -> Iterator[str]:
    """URL of a running fixture backend that serves only the 2026-07-28 era (`--era modern`)."""
    with start_fixture_server(era="modern") as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """URL of a throwaway redis-server shared by the session; tests keep their keys apart with their
    own prefixes or key names."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (make test installs it with apt-get)")
    with redis_server(binary) as (url, _):
        yield url


@pytest.fixture(params=["memory", "redis"])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    """Each Bus implementation in turn. The Redis server is shared by the session: a key prefix of
    the test's own keeps its keys apart."""
    instance: Bus = (
        MemoryBus()
        if request.param == "memory"
        else RedisBus(request.getfixturevalue("redis_url"), prefix=f"test-{uuid.uuid4().hex}:")
    )
    await instance.start()
    try:
        yield instance
    finally:
        await instance.close()
