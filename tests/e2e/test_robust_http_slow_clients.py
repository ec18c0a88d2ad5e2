"""Robustness of the Streamable HTTP front door against slow clients, against a real gateway process over
real sockets: a client that stops reading its stream (or reads too slowly for a flood of notifications) is
cut off with a logged reason and a metric, without hurting the other clients; a burst larger than the
session queue may shed progress but never the result. Raw sockets, so the tests control exactly what is
read; every wait is bounded. (The rest of the front door is in test_robust_http.py.)
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.robust_http_support import (
    SseReader,
    call,
    open_session,
    port_of,
    raw_post,
    session_headers,
    tool_call,
    wait_until,
)
from tests.support import (
    JSON_HEADERS as BASE_HEADERS,
    LEGACY_VERSION as VERSION,
    RunningGateway,
    crashy_backend,
    run_gateway,
)

pytestmark = pytest.mark.timeout(60)


# ---------------------------------------------------------------------------------------------- slow clients


@pytest.fixture(scope="module")
def flood_gw() -> Iterator[RunningGateway]:
    config = {
        "backends": {
            "demo": {"transport": "builtin", "required": True},
            "crashy": crashy_backend(required=True),
        },
        "limits": {"session_queue": 16},
    }
    with run_gateway(config) as running:
        yield running


def _post_unread(gw: RunningGateway, session_id: str, message: dict[str, Any]) -> socket.socket:
    headers = {
        "Accept": BASE_HEADERS["accept"],
        "Content-Type": "application/json",
        "Mcp-Session-Id": session_id,
        "MCP-Protocol-Version": VERSION,
    }
    return raw_post(port_of(gw), "/mcp", headers, json.dumps(message).encode())


def _others_still_served(gw: RunningGateway) -> None:
    with httpx.Client(timeout=5) as other:
        other_id = open_session(other, gw.mcp)
        started = time.monotonic()
        answer = call(other, gw.mcp, other_id, tool_call(1, "demo__echo", {"text": "hello"}))
        assert answer["result"]["content"][0]["text"] == "hello"
        assert time.monotonic() - started < 2.0
        assert other.get(f"{gw.url}/healthz").status_code == 200


def test_client_that_never_reads_a_demo_stream_does_not_hurt_others(flood_gw: RunningGateway) -> None:
    """slow_count n=500 is ~150 KB of events: socket buffers absorb it, the other clients are unaffected."""
    with httpx.Client(timeout=10) as client:
        session_id = open_session(client, flood_gw.mcp)
        sock = _post_unread(flood_gw, session_id, tool_call(2, "demo__slow_count", {"n": 500, "delay_s": 0}, token="t"))
        try:
            time.sleep(0.5)
            _others_still_served(flood_gw)
            # The stalled client's own session still answers on another connection.
            assert call(client, flood_gw.mcp, session_id, {"jsonrpc": "2.0", "id": 3, "method": "ping"})["result"] == {}
        finally:
            sock.close()


def _drain(sock: socket.socket, timeout_s: float) -> bytes:
    """Reads until the chunked response ends (or the peer closes, or the time is up)."""
    data = bytearray()
    deadline = time.monotonic() + timeout_s
    sock.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(1 << 20)
        except TimeoutError:
            continue
        if not chunk:
            break
        data += chunk
        if data.endswith(b"\r\n0\r\n\r\n"):
            break
    return bytes(data)


def _flood(session_id: str, gw: RunningGateway, rpc_id: int) -> socket.socket:
    # 400 progress notifications of 32 KB: ~13 MB, far more than loopback socket buffers hold. Paced 2 ms apart,
    # so that the gateway's writer keeps up until the socket blocks: any overflow is the stalled client's doing,
    # not a burst's (see test_burst_larger_than_session_queue_does_not_cost_an_attentive_client_its_result).
    return _post_unread(
        gw,
        session_id,
        tool_call(rpc_id, "crashy__flood", {"count": 400, "size": 32_000, "pause_s": 0.002}, token="flood"),
    )


def _dropped_total(gw: RunningGateway) -> float:
    text = httpx.get(f"{gw.url}/metrics", timeout=5).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("switchboard_slow_clients_dropped_total{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _logged_drop(gw: RunningGateway, marker: str) -> bool:
    return any(marker in line and "behind" in line for line in gw.log().splitlines())


def test_slow_client_stream_is_closed_with_a_logged_reason(flood_gw: RunningGateway) -> None:
    """A client that stalls, then reads again, finds its stream cut short and the reason in the log."""
    before = _dropped_total(flood_gw)
    with httpx.Client(timeout=10) as client:
        session_id = open_session(client, flood_gw.mcp)
        sock = _flood(session_id, flood_gw, 2)
        try:
            time.sleep(1.0)  # the backend floods while the client does not read
            _others_still_served(flood_gw)
            data = _drain(sock, 20)
        finally:
            sock.close()
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
    assert b"text/event-stream" in data[:500]
    # The stream ended (or was cut) before the 400 notifications and the result came through.
    assert data.count(b'"notifications/progress"') < 400
    assert b"flooded 400" not in data
    marker = f"stream {session_id[:8]}-"
    assert wait_until(lambda: _logged_drop(flood_gw, marker), 5), flood_gw.log()[-3000:]
    assert _dropped_total(flood_gw) >= before + 1
    _others_still_served(flood_gw)


def test_client_that_stops_reading_is_dropped_without_reading_again(flood_gw: RunningGateway) -> None:
    """The gateway must detect the overflow and drop the stream while the client is still stalled."""
    with httpx.Client(timeout=10) as client:
        session_id = open_session(client, flood_gw.mcp)
        marker = f"stream {session_id[:8]}-"
        sock = _flood(session_id, flood_gw, 2)
        try:
            dropped = wait_until(lambda: _logged_drop(flood_gw, marker), 2)
            _others_still_served(flood_gw)
        finally:
            sock.close()
    assert dropped, "no 'behind' drop was logged while the client was stalled"


def test_burst_larger_than_session_queue_does_not_cost_an_attentive_client_its_result(
    flood_gw: RunningGateway,
) -> None:
    """40 small notifications written at once (session_queue 16): progress may be shed, the result may not."""
    with httpx.Client(timeout=10) as client:
        session_id = open_session(client, flood_gw.mcp)
        request = tool_call(5, "crashy__flood", {"count": 40, "size": 10, "burst": True}, token="burst")
        with client.stream("POST", flood_gw.mcp, headers=session_headers(session_id), json=request) as response:
            assert response.status_code == 200
            reader = SseReader()
            messages = [json.loads(d) for chunk in response.iter_raw() for _i, d in reader.feed(chunk) if d]
    final = [m for m in messages if m.get("id") == 5 and "method" not in m]
    assert final, f"the call's stream ended without its response ({len(messages)} messages received)"
