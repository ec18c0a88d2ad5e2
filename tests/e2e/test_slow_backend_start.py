"""A backend still starting does not hold up initialize: what is ready answers, the rest is announced.

Issue 11: while a backend was still connecting, a legacy initialize waited more than 8 s (a modern
request 5 s). Now initialize and lists wait at most ``limits.startup_wait_s``; a backend that
connects later reaches the session as ``notifications/tools/list_changed`` on its standalone
stream, and the next ``tools/list`` has its tools.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.support import (
    JSON_HEADERS as HEADERS,
    LEGACY_VERSION as VERSION,
    crashy_backend,
    initialize_request,
    run_gateway,
)

pytestmark = pytest.mark.timeout(60)


def test_initialize_answers_within_the_bound_and_the_late_backend_is_announced() -> None:
    config = {
        "backends": {
            "demo": {"transport": "builtin", "required": True},
            "late": crashy_backend(env={"CRASHY_START_DELAY_S": "4"}, connect_timeout_s=20),
        },
        "limits": {"startup_wait_s": 0.5},
    }
    with run_gateway(config) as gw, httpx.Client(timeout=15) as http:
        started = time.monotonic()
        response = http.post(gw.mcp, headers=HEADERS, json=initialize_request(1))
        assert response.status_code == 200 and time.monotonic() - started < 2.5, "initialize waited for the late one"
        session = {**HEADERS, "mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": VERSION}
        http.post(gw.mcp, headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        listed = http.post(gw.mcp, headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).json()
        names = {tool["name"] for tool in listed["result"]["tools"]}
        assert names and not any(name.startswith("late") for name in names), names
        with http.stream("GET", gw.mcp, headers={**session, "accept": "text/event-stream"}) as stream:
            deadline = time.monotonic() + 15
            for line in stream.iter_lines():
                if line.startswith("data:") and line[5:].strip():
                    if json.loads(line[5:]).get("method") == "notifications/tools/list_changed":
                        break
                assert time.monotonic() < deadline, "no list_changed after the late backend connected"
        listed = http.post(gw.mcp, headers=session, json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).json()
        assert any(tool["name"].startswith("late") for tool in listed["result"]["tools"]), listed
