"""Screenshots of every dashboard page (docs/ui/*.png, linked from the README's "Dashboard" section).

    python tools/screenshots.py [--out docs/ui]      (or: make screenshots)

Starts a real gateway (three real backends, an MCPx topic, MGP ``interactive`` permissions, tool
pinning), makes real traffic through it with the official MCP SDK (an allowed session, a refused
caller, a tool whose definition changes), and photographs each page in the same headless Chromium
the tests use (Debian's ``chromium`` + ``chromium-driver``). Nothing in the pictures is a real secret.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from mcp.client import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from tests.e2e.mcpx_client import Peer  # noqa: E402
from tests.gateway.ui.browser import Page, chromium  # noqa: E402
from tests.support import dynamic_backend, fixture_stdio_backend, run_gateway, stdio_backend  # noqa: E402

ADMIN = "demo-admin-token"
TOKENS = {"alice": "alice-demo-token", "bob": "bob-demo-token", "trainee": "trainee-demo-token"}


def config() -> dict[str, Any]:
    return {
        "backends": {
            "fx": fixture_stdio_backend(required=True),
            "mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True),
            "dyn": dynamic_backend(),
        },
        "auth": {"admin_token": ADMIN},
        "principals": {
            "alice": {"tokens": [TOKENS["alice"]], "capabilities": ["*"]},
            "bob": {"tokens": [TOKENS["bob"]], "capabilities": ["mcp/request:initialize", "mcp/request:tools/list"]},
            "trainee": {"tokens": [TOKENS["trainee"]], "capabilities": ["chat", "mcp/response:*"]},
        },
        "pinning": {"mode": "enforce"},
        "mcpx": {"topics": {"room": {"participants": ["fx"]}}},
        "mgp": {
            "permission_policy": "interactive",
            "approved_permissions": ["filesystem.*"],
            "tools": {
                "fx": {
                    "test_simple_text": {"risk_level": "safe"},
                    "test_image_content": {"risk_level": "moderate", "side_effects": ["network"]},
                }
            },
        },
    }


@contextlib.asynccontextmanager
async def client(url: str, token: str) -> AsyncIterator[Client]:
    # The SDK's transport is written against httpx2 (its own HTTP client, not httpx): it catches
    # httpx2's stream and SSE errors and reads responses with httpx2.EventSource.
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(url, http_client=http), mode="legacy") as session:
        yield session


async def traffic(url: str, alice: Client) -> None:
    for _ in range(6):
        await alice.call_tool("fx__test_simple_text", {})
    await alice.list_tools()
    await alice.call_tool("dyn__grow", {"name": "sprout"})
    await alice.list_tools()
    await alice.call_tool("dyn__redescribe", {"name": "sprout", "description": "now deletes files"})
    await alice.list_tools()
    async with client(url, TOKENS["bob"]) as bob:
        for tool in ("fx__test_simple_text", "mgp__handshake_log"):
            with contextlib.suppress(Exception):
                await bob.call_tool(tool, {})


async def shoot(out: Path) -> None:
    with run_gateway(config()) as gw, chromium(1400, 900) as driver:
        page = Page(driver, gw.url)
        await page.open("overview")
        await page.wait_visible("#token")
        await page.screenshot(str(out / "login.png"))
        await page.sign_in(ADMIN)
        await page.go("events")
        await page.wait_text("#stream-status", "live")
        trainee = await Peer.join(gw.url, "room", TOKENS["trainee"])
        try:
            async with client(gw.mcp, TOKENS["alice"]) as alice:
                await traffic(gw.mcp, alice)
                await page.wait_text("#events-table tr.event", "denied")
                await page.screenshot(str(out / "events.png"))
                shots = [
                    ("overview", '#backends-table tr[data-name="fx"]', "ready"),
                    ("sessions", "#sessions-table", "alice"),
                    ("backends/fx", "#tools-table", "test_simple_text"),
                    ("backends/dyn", '#tools-table tr[data-tool="sprout"]', "changed"),
                    ("topics", "#main", "trainee"),
                    ("permissions", ".request", "shell.execute"),
                    ("config", "#config-json", "***"),
                ]
                for name, css, text in shots:
                    await page.go(name)
                    await page.wait_text(css, text)
                    await asyncio.sleep(0.3)  # the last redraw settles
                    await page.screenshot(str(out / f"{name.replace('/', '-')}.png"))
                    print(f"wrote {out / name.replace('/', '-')}.png")
        finally:
            await trainee.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "ui")
    out: Path = parser.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    asyncio.run(shoot(out))


if __name__ == "__main__":
    main()
