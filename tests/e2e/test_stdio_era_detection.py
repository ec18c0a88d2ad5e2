"""Era detection over stdio asks ``initialize`` first, and still finds modern-only servers.

Invariants: a stdio backend of any era is ready without waiting out a timeout; a server that serves
the handshake is spoken to in the legacy era (the stdio connection's era is fixed by its first
request); a modern-only server, which refuses ``initialize``, is then probed with ``server/discover``
and spoken to in the modern era; the era found is kept for reconnects.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from gateway.config import Backend, Limits
from gateway.upstreams import make_carrier
from gateway.upstreams.connection import BackendConnection, CallOwner
from tests.support import PROJECT_ROOT

pytestmark = pytest.mark.timeout(60)


class _Handler:
    def on_connected(self, conn: BackendConnection) -> None: ...
    def on_disconnected(self, conn: BackendConnection, reason: str) -> None: ...
    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None: ...
    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...


@pytest.mark.parametrize(("fixture_era", "expected"), [("legacy", "legacy"), ("dual", "legacy"), ("modern", "modern")])
async def test_each_stdio_era_is_found_without_a_timeout(fixture_era: str, expected: str) -> None:
    config = Backend(
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.conformance.fixture_server", "--stdio", "--era", fixture_era],
        cwd=str(PROJECT_ROOT),
    )
    client_info = {"name": "switchboard", "version": "0"}
    conn = BackendConnection("fx", config, lambda: make_carrier("fx", config, Limits()), _Handler(), client_info)
    started = time.monotonic()
    await conn.start()
    try:
        assert await conn.wait_ready(20), conn.last_error
        elapsed = time.monotonic() - started
        answer = await conn.request("tools/call", {"name": "test_simple_text", "arguments": {}}, timeout=10)
    finally:
        await conn.close()
    assert conn.era == expected
    assert conn.restarts == 0
    assert answer["result"]["content"][0]["type"] == "text"
    assert elapsed < 10, f"{fixture_era} stdio backend ready after {elapsed:.2f}s"
