"""The dashboard at /ui in a real headless Chromium, against a real gateway process with real backends
and the official MCP SDK as the client: what a person sees.

- sign-in: a wrong token is refused on the form; the admin token opens every page;
- overview and backends: the configured backends are listed with their state and catalog;
- sessions: a client's session appears while it is open and leaves when it closes;
- live events: a denied call shows who, what and why, and the filters narrow the tail;
- permissions: an MGP ``interactive`` request waiting for an operator is approved by a click, and
  the backend receives the grant;
- pins: a changed tool definition is approved by a click;
- topics: a live MCPx participant is listed with its capabilities, promoted and demoted by clicks;
- readers (``ui.readers``) see the read-only pages without the actions; others are refused;
- config: the effective config with secrets redacted, and a refused reload saying why;
- no secret (admin token, principals' tokens, a backend's env value) ever appears in a page.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.e2e.mcpx_client import Peer
from tests.gateway.ui.browser import Page
from tests.support import RunningGateway, dynamic_backend, fixture_stdio_backend, run_gateway, stdio_backend

pytestmark = [pytest.mark.timeout(120)]

ADMIN = "ui-admin-secret-4f1c"
ALICE = "alice-token-9d2e"
BOB = "bob-token-77aa"
CAROL = "carol-reader-31b0"
DAVE = "dave-token-0c0c"
TRAINEE = "trainee-token-5b5b"
BACKEND_SECRET = "backend-env-secret-5521"
SECRETS = (ADMIN, ALICE, BOB, CAROL, DAVE, TRAINEE, BACKEND_SECRET)


def config() -> dict[str, Any]:
    return {
        "backends": {
            "fx": fixture_stdio_backend(required=True, env={"FIXTURE_API_KEY": BACKEND_SECRET}),
            "mgp": stdio_backend("tests.e2e.backends.mgp_server", required=True),
            "dyn": dynamic_backend(),
        },
        "auth": {"admin_token": ADMIN},
        "principals": {
            "alice": {"tokens": [ALICE], "capabilities": ["*"]},
            # bob may list but not call: his tools/call is refused by the capability policy
            "bob": {"tokens": [BOB], "capabilities": ["mcp/request:initialize", "mcp/request:tools/list"]},
            "carol": {"tokens": [CAROL], "capabilities": []},
            "dave": {"tokens": [DAVE], "capabilities": ["*"]},
            "trainee": {"tokens": [TRAINEE], "capabilities": ["chat"]},
        },
        "mcpx": {"topics": {"room": {}}},
        "ui": {"readers": ["carol"]},
        "pinning": {"mode": "enforce"},
        "mgp": {"permission_policy": "interactive", "approved_permissions": ["filesystem.*"]},
    }


@pytest.fixture(scope="module")
def gw() -> Iterator[RunningGateway]:
    with run_gateway(config()) as running:
        yield running


@pytest.fixture
def page(driver: Any, gw: RunningGateway) -> Page:
    return Page(driver, gw.url)


@asynccontextmanager
async def client(gw: RunningGateway, token: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
    async with http, Client(streamable_http_client(gw.mcp, http_client=http), mode="legacy") as session:
        yield session


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_a_wrong_token_is_refused_and_the_admin_token_signs_in(page: Page) -> None:
    await page.open("overview")
    await page.sign_in("not-the-token")
    error = await page.wait_text("#login-error", "Refused")
    assert "token refused" in error
    assert not await page._run(lambda: page.driver.find_element("css selector", "#nav").is_displayed())
    assert await page._run(lambda: page.driver.execute_script("return sessionStorage.length")) == 0
    await page.sign_in(ADMIN)
    await page.wait_visible("#nav")
    assert "admin" in await page.text("#who")
    assert await page._run(lambda: page.driver.find_element("css selector", "#token").get_attribute("value")) == ""


async def test_the_backends_are_listed_with_their_state_and_catalog(page: Page) -> None:
    await page.open("overview", token=ADMIN)
    row = await page.wait_text('#backends-table tr[data-name="fx"]', "ready")
    assert "stdio" in row and "legacy" in row and "MCP" in row
    mgp_row = await page.wait_text('#backends-table tr[data-name="mgp"]', "MGP")
    assert "ready" in mgp_row
    await page.go("backends/fx")
    await page.wait_text("#backend-name", "fx")
    tool = await page.wait_text('#tools-table tr[data-tool="test_simple_text"]', "test_simple_text")
    assert "Returns a fixed text block" in tool and "pinned" in tool
    await page.go("backends/mgp")
    handshake = await page.wait_text('#tools-table tr[data-tool="handshake_log"]', "handshake_log")
    assert "handshake_log" in handshake


async def test_a_session_appears_and_leaves(page: Page, gw: RunningGateway) -> None:
    await page.open("sessions", token=ADMIN)
    await page.wait_text("#sessions-table", "no session")
    async with client(gw, DAVE) as session:
        await session.list_tools()
        row = await page.wait_text('#sessions-table tr[data-principal="dave"]', "dave")
        assert "streamable-http" in row or "http" in row
        assert "legacy" in row and "MCP" in row
    await page.wait_gone("#sessions-table", "dave")


async def test_a_denied_call_shows_its_reason_in_live_events(page: Page, gw: RunningGateway) -> None:
    await page.open("events", token=ADMIN)
    await page.wait_text("#stream-status", "live")
    async with client(gw, BOB) as session:
        with pytest.raises(MCPError):
            await session.call_tool("fx__test_simple_text", {})
    await page.type("#filter-principal", "bob")
    await page._run(
        lambda: page.driver.execute_script(
            "const s = document.getElementById('filter-outcome'); s.value = 'refused';"
            "s.dispatchEvent(new Event('input'))"
        )
    )
    row = await page.wait_text("#events-table tr.event", "tools/call")
    assert "bob" in row and "denied" in row
    assert "capabilit" in row.lower(), f"the reason is shown: {row}"
    rows = await page.texts("#events-table tr.event")
    assert all("bob" in r for r in rows), "the principal filter holds"
    await page.type("#filter-principal", "nobody-at-all")
    await page.wait_text("#events-table", "no event yet")


async def test_an_mgp_permission_request_is_approved_with_a_click(page: Page, gw: RunningGateway) -> None:
    await page.open("permissions", token=ADMIN)
    waiting = await page.wait_text('.request[data-server="mgp"]', "shell.execute")
    assert "asks for" in waiting
    await page.click('.request[data-server="mgp"] button.approve')
    await page.wait_text("#answered", "Answer sent")
    await page.wait_visible("#no-requests")
    async with client(gw, ALICE) as session:
        seen = json.loads(text_of(await session.call_tool("mgp__handshake_log", {})))
    assert seen["grants"]["shell.execute"]["decision"] == "approved", "the click reached the backend"


async def test_a_changed_tool_definition_is_approved_with_a_click(page: Page, gw: RunningGateway) -> None:
    async with client(gw, ALICE) as session:
        await session.call_tool("dyn__grow", {"name": "sprout"})
        assert "dyn__sprout" in {t.name for t in (await session.list_tools()).tools}
        await session.call_tool("dyn__redescribe", {"name": "sprout", "description": "now does something else"})
        await page.open("backends/dyn", token=ADMIN)
        row = await page.wait_text('#tools-table tr[data-tool="sprout"]', "changed")
        assert "now does something else" in row
        await page.click('#tools-table tr[data-tool="sprout"] button.approve-pin')
        await page.wait_text('#tools-table tr[data-tool="sprout"]', "pinned")
        assert text_of(await session.call_tool("dyn__sprout", {})) == "I am sprout"


async def test_a_participant_is_promoted_and_demoted_with_clicks(page: Page, gw: RunningGateway) -> None:
    peer = await Peer.join(gw.url, "room", TRAINEE)
    try:
        await page.open("topics", token=ADMIN)
        row = 'tr[data-participant="trainee"]'
        assert "chat" in await page.wait_text(row, "trainee")
        await page.type(f"{row} input.pattern", "mcp/request:tools/*")
        await page.click(f"{row} button.promote")
        await page.wait_text(row, "mcp/request:tools/*")
        welcome = await peer.recv_kind("system/welcome")
        assert "mcp/request:tools/*" in welcome["payload"]["you"]["capabilities"], "applied to the live connection"
        await page.type(f"{row} input.pattern", "mcp/request:tools/*")
        await page.click(f"{row} button.demote")
        await page.wait_gone(row, "mcp/request:tools/*")
    finally:
        await peer.close()


async def test_a_reader_sees_the_pages_but_not_the_actions(page: Page, gw: RunningGateway) -> None:
    await page.open("overview", token=CAROL)
    assert "carol" in await page.text("#who") and "reader" in await page.text("#who")
    await page.wait_text('#backends-table tr[data-name="fx"]', "ready")
    await page.go("permissions")
    await page.wait_visible("#permission-requests")
    assert not await page.texts("button.approve")
    await page.go("config")
    await page.wait_text("#config-unavailable", "admin token")
    async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
        reader = {"authorization": f"Bearer {CAROL}"}
        assert (await http.get("/ui/api/overview", headers=reader)).status_code == 200
        assert (await http.post("/admin/pins/dyn/sprout/approve", headers=reader)).status_code == 401
        other = await http.get("/ui/api/overview", headers={"authorization": f"Bearer {DAVE}"})
        assert other.status_code == 403, "a principal not in ui.readers"
        assert (await http.get("/ui/api/overview")).status_code == 401
        assert (await http.get("/ui/api/sessions", headers={"authorization": "Bearer wrong"})).status_code == 401
        # the page itself carries no data: it loads for anyone (the sign-in form is on it)
        assert (await http.get("/ui/")).status_code == 200


async def test_no_secret_appears_in_any_page(page: Page, gw: RunningGateway) -> None:
    async with client(gw, ALICE) as session:
        await session.list_tools()
        await page.open("overview", token=ADMIN)
        await page.wait_text('#backends-table tr[data-name="fx"]', "ready")
        seen = [await page.source()]
        for name, ready in [
            ("sessions", "#sessions-table"),
            ("backends/fx", "#tools-table"),
            ("topics", "#main h1"),
            ("events", "#stream-status"),
            ("permissions", "#permission-requests"),
            ("config", "#main h1"),
        ]:
            await page.go(name)
            await page.wait_visible(ready)
            seen.append(await page.source())
    async with httpx.AsyncClient(base_url=gw.url, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10) as http:
        for path in ("whoami", "overview", "sessions", "backends/fx", "pins", "topics", "permissions"):
            seen.append((await http.get(f"/ui/api/{path}")).text)
    for text in seen:
        for secret in SECRETS:
            assert secret not in text


async def test_the_config_page_shows_the_redacted_config_and_a_refused_reload(page: Page, gw: RunningGateway) -> None:
    """Last in this module: it breaks the gateway's config file (the running config stays)."""
    await page.open("config", token=ADMIN)
    shown = await page.wait_text("#config-json", '"fx"')
    assert '"***"' in shown and '"readers"' in shown
    assert all(secret not in shown for secret in SECRETS)
    assert await page.text("#config-source") == str(gw.config_path)
    await page.wait_text("#reload-status", "No reload")
    gw.config_path.write_text("backends: [this is not a mapping\n")
    gw.proc.send_signal(signal.SIGHUP)
    status = await page.wait_text("#reload-status", "FAILED")
    assert "running config was kept" in status and str(gw.config_path) in status
    await page.go("overview")
    await page.wait_text("#card-reload", "FAILED")
