"""Telemetry that is off costs nothing: no OpenTelemetry import, no hook; the extra missing is a clear
warning, not a failure."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from gateway.config_ops import Telemetry
from gateway.telemetry import MISSING_EXTRA, tracing_from_config
from tests.support import PROJECT_ROOT

PROBE = """
import sys
from gateway.config import Config
from gateway.core import Gateway
gw = Gateway(Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, "logging": {"format": LOGS}}))
router, forwarder = gw.router, gw.router._forwarder
hooks = [gw.tracing, router._observer, router._tap, forwarder._tracing, gw.topics._tracing]
print(sorted(m for m in sys.modules if m.startswith("opentelemetry") or m == "gateway.telemetry.otel"))
print([type(h).__name__ for h in hooks])
"""


def probe(logs: str) -> list[str]:
    code = PROBE.replace("LOGS", repr(logs))
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return proc.stdout.splitlines()


def test_without_an_endpoint_nothing_is_imported_and_no_hook_is_set() -> None:
    modules, hooks = probe("text")
    assert modules == "[]"
    assert hooks == str(["NoneType"] * 5)


def test_json_logs_alone_only_watch_requests_for_their_ids() -> None:
    modules, hooks = probe("json")
    assert modules == "[]"
    assert hooks == str(["NoneType", "LogIdsOnly", "NoneType", "NoneType", "NoneType"])


def test_an_endpoint_without_the_extra_is_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # As if the extra were not installed: importing the tracer fails.
    monkeypatch.setitem(sys.modules, "gateway.telemetry.otel", None)
    with caplog.at_level(logging.WARNING, logger="gateway.telemetry"):
        assert tracing_from_config(Telemetry(otlp_endpoint="http://127.0.0.1:4318"), "0") is None
    assert MISSING_EXTRA in caplog.text
    assert "pip install 'switchboard-gateway[otel]'" in caplog.text
    assert tracing_from_config(Telemetry(), "0") is None
