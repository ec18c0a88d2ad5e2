"""A real headless Chromium (Debian's ``chromium`` + ``chromium-driver``) driven by Selenium, for the
dashboard tests and ``tools/screenshots.py``.

Selenium is synchronous: the async tests call :class:`Page` methods, which run the driver in a thread
(``asyncio.to_thread``) so that a test's own MCP client keeps its event loop. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Callable, Iterator
from typing import Any

CHROMIUM = ("chromium", "chromium-browser")
DRIVER = "chromedriver"
WAIT_S = 15.0


def binaries() -> tuple[str, str] | None:
    """(chromium, chromedriver) paths, None when either is missing."""
    browser = next((path for name in CHROMIUM if (path := shutil.which(name))), None)
    driver = shutil.which(DRIVER)
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[Any]:
    """A headless Chromium session; quit afterwards. Raises RuntimeError when it is not installed."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = binaries()
    if found is None:
        raise RuntimeError("chromium and chromium-driver are not installed (make test-deps installs them)")
    options = webdriver.ChromeOptions()
    options.binary_location = found[0]
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--no-first-run"):
        options.add_argument(arg)
    options.add_argument(f"--window-size={width},{height}")
    driver = webdriver.Chrome(service=Service(found[1]), options=options)
    driver.set_page_load_timeout(WAIT_S)
    driver.set_script_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


class Page:
    """What a person sees in the browser, asked from async tests."""

    def __init__(self, driver: Any, base: str) -> None:
        self.driver = driver
        self.base = base.rstrip("/")

    async def _run(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.to_thread(fn)

    async def open(self, page: str = "", *, token: str | None = None) -> None:
        """Load /ui/#page in a fresh tab state; with ``token``, sign in through the form first."""

        def go() -> None:
            self.driver.get(f"{self.base}/ui/")
            self.driver.execute_script("sessionStorage.clear()")
            self.driver.get(f"{self.base}/ui/#{page}")
            self.driver.refresh()  # only the hash changed: load the page again, signed out

        await self._run(go)
        if token is not None:
            await self.sign_in(token)
            await self.wait_visible("#nav")
            await self._run(lambda: self.driver.execute_script(f"location.hash = {page!r}"))

    async def sign_in(self, token: str) -> None:
        await self.wait_visible("#token")
        await self.type("#token", token)
        await self.click("#signin")

    async def go(self, page: str) -> None:
        await self._run(lambda: self.driver.execute_script(f"location.hash = {page!r}"))
        await self.wait(
            lambda d: d.find_element("css selector", "#main").get_attribute("data-page") == page.split("/")[0]
        )

    async def wait(self, condition: Callable[[Any], Any], timeout: float = WAIT_S, message: str = "") -> Any:
        from selenium.webdriver.support.ui import WebDriverWait

        def ignoring_stale(d: Any) -> Any:
            from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

            try:
                return condition(d)
            except (StaleElementReferenceException, NoSuchElementException):
                return False  # the page redraws its tables; ask again

        return await self._run(lambda: WebDriverWait(self.driver, timeout, 0.1).until(ignoring_stale, message))

    async def wait_visible(self, css: str, timeout: float = WAIT_S) -> Any:
        return await self.wait(
            lambda d: next((e for e in d.find_elements("css selector", css) if e.is_displayed()), False),
            timeout,
            f"{css} never became visible",
        )

    async def wait_text(self, css: str, text: str, timeout: float = WAIT_S) -> str:
        """The text of the first element matching ``css`` once it contains ``text``."""
        found: str = await self.wait(
            lambda d: next((t for e in d.find_elements("css selector", css) if text in (t := e.text)), False),
            timeout,
            f"no {css} ever showed {text!r}",
        )
        return found

    async def wait_gone(self, css: str, text: str, timeout: float = WAIT_S) -> None:
        await self.wait(
            lambda d: all(text not in e.text for e in d.find_elements("css selector", css)),
            timeout,
            f"{css} still shows {text!r}",
        )

    async def text(self, css: str) -> str:
        result: str = await self._run(lambda: self.driver.find_element("css selector", css).text)
        return result

    async def texts(self, css: str) -> list[str]:
        """The text of every element matching ``css`` (read again if the page redrew meanwhile)."""
        found: tuple[list[str]] = await self.wait(lambda d: ([e.text for e in d.find_elements("css selector", css)],))
        return found[0]

    async def click(self, css: str) -> None:
        await self.wait_visible(css)
        await self._run(lambda: self.driver.find_element("css selector", css).click())

    async def type(self, css: str, value: str) -> None:
        def typed() -> None:
            element = self.driver.find_element("css selector", css)
            element.clear()
            element.send_keys(value)

        await self._run(typed)

    async def source(self) -> str:
        """Everything the page holds: the DOM as now rendered, plus the text of every script it loaded."""
        result: str = await self._run(lambda: self.driver.page_source)
        return result

    async def screenshot(self, path: str) -> None:
        await self._run(lambda: self.driver.save_screenshot(path))
