"""Era detection over stdio asks ``initialize`` first, and still finds modern-only servers.

Invariants: a stdio backend of any era is ready without waiting out a timeout; a server that serves
the handshake is spoken to in the legacy era (the stdio connection's era is fixed by its first
request); a modern-only server, which refuses ``initialize``, is then probed with ``server/discover``
and spoken to in the modern era; the era found is kept for reconnects.
"""

from __future__ import annotations

import pytest

from gateway.config import Backend
from tests.support import fixture_stdio_backend, ready_then_call

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("fixture_era", "expected"), [("legacy", "legacy"), ("dual", "legacy"), ("modern", "modern")])
async def test_each_stdio_era_is_found_without_a_timeout(fixture_era: str, expected: str) -> None:
    config = Backend.model_validate(fixture_stdio_backend("--era", fixture_era))
    call = {"name": "test_simple_text", "arguments": {}}
    conn, elapsed, answer = await ready_then_call("fx", config, "tools/call", call)
    assert conn.era == expected
    assert conn.restarts == 0
    assert answer["result"]["content"][0]["type"] == "text"
    assert elapsed < 10, f"{fixture_era} stdio backend ready after {elapsed:.2f}s"
