"""Fixtures of the dashboard tests: one headless Chromium per module (skipped when not installed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.gateway.ui.browser import binaries, chromium


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if binaries() is None:
        pytest.skip("chromium and chromium-driver are not installed (make test-deps installs them from Debian)")
    pytest.importorskip("selenium", reason="selenium is a test dependency (pip install -e '.[dev]')")
    with chromium() as browser:
        yield browser
