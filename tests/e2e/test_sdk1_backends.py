"""Servers built on released SDK 1.x versions as backends: era detection must cost them nothing.

- An SDK 1.x Streamable HTTP server refuses the ``server/discover`` probe at once (HTTP 400,
  ``"id": "server-error"``): the backend must be ready in well under the 5 s probe timeout.
- An SDK 1.6 stdio server dies on ``server/discover`` and then hangs: over stdio the gateway must
  ask ``initialize`` first, so such a backend is ready at once and its tools work, through a real
  gateway process.

The SDKs live in their own virtualenvs under ``.cache/peers/`` (built once, see ``sdk_peers``); the
tests skip only when the package index is unreachable.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import mcp_types as types
import pytest
from mcp.client import Client

from gateway.config import Backend
from tests.e2e.sdk_peers import SDK1_6, SDK1_LATEST, SERVER_SCRIPT, PeerUnavailable, sdk_python
from tests.support import PROJECT_ROOT, http_server, ready_then_call, run_gateway

pytestmark = [
    pytest.mark.timeout(900),  # the first run builds two virtualenvs
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]
_PROBE_TIMEOUT_S = 5.0


def _peer(name: str, requirements: tuple[str, ...]) -> Path:
    try:
        return sdk_python(name, requirements)
    except PeerUnavailable as exc:
        if exc.offline:
            pytest.skip(f"the package index is unreachable: {exc}")
        raise


@pytest.fixture(scope="session")
def sdk1_python() -> Path:
    return _peer("sdk-1.x", SDK1_LATEST)


@pytest.fixture(scope="session")
def sdk16_python() -> Path:
    return _peer("sdk-1.6", SDK1_6)


@pytest.fixture
def sdk1_http_url(sdk1_python: Path) -> Iterator[str]:
    with http_server(lambda port: [str(sdk1_python), str(SERVER_SCRIPT), "http", str(port)], 30) as url:
        yield url


@pytest.mark.timeout(120)
async def test_an_sdk1_http_server_that_refuses_the_probe_is_ready_at_once(sdk1_http_url: str) -> None:
    config = Backend(transport="http", url=sdk1_http_url)
    conn, elapsed, answer = await ready_then_call(
        "sdk1", config, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}
    )
    print(f"SDK 1.x HTTP backend ready after {elapsed:.2f}s")
    assert conn.era == "legacy"
    assert answer["result"]["content"][0]["text"] == "hi"
    assert elapsed < _PROBE_TIMEOUT_S / 3, f"ready after {elapsed:.2f}s: the refused probe was waited out"


@pytest.mark.timeout(180)
async def test_an_sdk16_stdio_server_survives_era_detection(sdk16_python: Path) -> None:
    backend = {
        "transport": "stdio",
        "command": str(sdk16_python),
        "args": [str(SERVER_SCRIPT), "stdio"],
        "cwd": str(PROJECT_ROOT),
        "required": True,
    }
    started = time.monotonic()
    with run_gateway({"backends": {"old": backend}}, timeout_s=60) as gateway:
        elapsed = time.monotonic() - started
        async with httpx.AsyncClient(timeout=5) as http:
            state = (await http.get(f"{gateway.url}/readyz")).json()["backends"]["old"]
        assert state["era"] == "legacy" and state["error"] is None, state
        async with Client(gateway.mcp, mode="legacy", read_timeout_seconds=20) as client:
            tools = {tool.name for tool in (await client.list_tools()).tools}
            assert {"echo", "add"} <= tools
            echoed = await client.call_tool("echo", {"text": "still alive"})
            assert isinstance(echoed.content[0], types.TextContent) and echoed.content[0].text == "still alive"
            added = await client.call_tool("add", {"a": 2, "b": 40})
            assert isinstance(added.content[0], types.TextContent) and added.content[0].text == "42"
    print(f"gateway with an SDK 1.6 stdio backend ready after {elapsed:.2f}s")
    # Before: the probe killed the server, which hung until the 15 s connect timeout and a restart.
    assert elapsed < 8.0, f"gateway with an SDK 1.6 backend ready after {elapsed:.1f}s"
