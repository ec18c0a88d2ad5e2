"""The dashboard's two other modes: open without an ``auth`` section (loopback only, like everything
else then), and absent with ``ui.enabled: false``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.gateway.ui.browser import Page
from tests.support import fixture_stdio_backend, run_gateway

pytestmark = [pytest.mark.timeout(90)]


async def test_without_an_auth_section_the_dashboard_is_open(driver: Any) -> None:
    with run_gateway({"backends": {"fx": fixture_stdio_backend(required=True)}}) as gw:
        page = Page(driver, gw.url)
        await page.open("overview")
        await page.wait_visible("#nav")
        assert not await page.texts("#login:not([hidden])"), "no sign-in form"
        assert "open" in await page.text("#who")
        await page.wait_text('#backends-table tr[data-name="fx"]', "ready")
        await page.go("config")
        await page.wait_text("#config-unavailable", "no admin API")


async def test_disabled_means_404_everywhere_under_ui() -> None:
    config = {"backends": {"fx": fixture_stdio_backend(required=True)}, "ui": {"enabled": False}}
    with run_gateway(config) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            for path in ("/ui", "/ui/", "/ui/static/js/main.js", "/ui/api/overview", "/ui/api/events"):
                assert (await http.get(path)).status_code == 404, path
            assert (await http.get("/healthz")).status_code == 200


async def test_static_files_and_api_carry_a_same_origin_only_policy() -> None:
    with run_gateway({"backends": {"fx": fixture_stdio_backend(required=True)}}) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:
            assert (await http.get("/ui")).headers["location"] == "ui/"
            for path in ("/ui/", "/ui/static/js/main.js", "/ui/api/overview"):
                response = await http.get(path)
                assert response.status_code == 200, path
                policy = response.headers["content-security-policy"]
                assert "connect-src 'self'" in policy and "script-src 'self'" in policy, path
                assert response.headers["x-frame-options"] == "DENY"


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    """No URL with a scheme in the page, its stylesheet or scripts: no CDN, no font, no beacon."""
    from gateway.ui.routes import STATIC

    files = [p for p in STATIC.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} == {".html", ".css", ".js"}
    for path in files:
        text = path.read_text()
        assert "://" not in text and "@import" not in text, path


async def test_a_viewer_that_leaves_is_forgotten() -> None:
    """The events stream ends its viewer when the browser goes (no queue left behind, no listener)."""
    import asyncio

    with run_gateway({"backends": {"fx": fixture_stdio_backend(required=True)}}) as gw:
        async with httpx.AsyncClient(base_url=gw.url, timeout=10) as http:

            async def viewers() -> int:
                count: int = (await http.get("/ui/api/overview")).json()["viewers"]
                return count

            async with http.stream("GET", "/ui/api/events") as events:
                assert events.headers["content-type"].startswith("text/event-stream")
                first = await anext(events.aiter_text())
                assert first.startswith("event: hello")
                assert await viewers() == 1
            async with asyncio.timeout(10):
                while await viewers() != 0:  # noqa: ASYNC110 - polled over HTTP, bounded
                    await asyncio.sleep(0.05)


def test_every_static_file_ships_in_the_wheel() -> None:
    """pyproject's package-data names each static file's pattern: a new file in a new folder is not forgotten."""
    import tomllib
    from pathlib import PurePosixPath

    from gateway.ui.routes import STATIC
    from tests.support import PROJECT_ROOT

    patterns = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "gateway.ui"
    ]
    for path in STATIC.rglob("*"):
        if path.is_file():
            relative = PurePosixPath(path.relative_to(STATIC.parent).as_posix())
            assert any(relative.match(p) and len(relative.parts) == len(PurePosixPath(p).parts) for p in patterns), path
