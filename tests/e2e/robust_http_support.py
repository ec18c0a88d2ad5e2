"""Helpers shared by the Streamable HTTP robustness tests (test_robust_http*.py): sessions, raw SSE
parsing, tool calls, raw sockets and bounded waits, all with raw httpx and sockets rather than an SDK."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpx

from tests.support import (
    JSON_HEADERS as BASE_HEADERS,
    LEGACY_VERSION as VERSION,
    RunningGateway,
    initialize_request,
)


def initialize_body(rpc_id: Any = 1) -> dict[str, Any]:
    return initialize_request(rpc_id, client="robust")


def open_session(client: httpx.Client, url: str) -> str:
    """initialize + notifications/initialized; returns the Mcp-Session-Id."""
    response = client.post(url, headers=BASE_HEADERS, json=initialize_body())
    assert response.status_code == 200, response.text
    session_id = response.headers["mcp-session-id"]
    assert response.json()["result"]["protocolVersion"] == VERSION
    note = client.post(
        url,
        headers=session_headers(session_id),
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
    )
    assert note.status_code == 202, note.text
    return session_id


def session_headers(session_id: str) -> dict[str, str]:
    return {**BASE_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": VERSION}


class SseReader:
    """Incremental SSE parser: feed bytes, get (id, data) pairs of complete events."""

    def __init__(self) -> None:
        self._buffer = b""
        self._id: str | None = None
        self._data: list[str] = []
        self._has_fields = False

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        self._buffer += chunk.replace(b"\r\n", b"\n")
        events: list[tuple[str | None, str]] = []
        while b"\n" in self._buffer:
            raw, self._buffer = self._buffer.split(b"\n", 1)
            line = raw.decode()
            if line == "":
                if self._has_fields:
                    events.append((self._id, "\n".join(self._data)))
                self._id, self._data, self._has_fields = None, [], False
            elif line.startswith(":"):
                continue
            else:
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                self._has_fields = True
                if field == "id":
                    self._id = value
                elif field == "data":
                    self._data.append(value)
        return events


def read_response(response: httpx.Response, rpc_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The JSON-RPC response to ``rpc_id`` from a POST answer (JSON or SSE), plus what came before it."""
    ctype = response.headers.get("content-type", "")
    if ctype.startswith("application/json"):
        return json.loads(response.read()), []
    assert ctype.startswith("text/event-stream"), ctype
    reader = SseReader()
    before: list[dict[str, Any]] = []
    for chunk in response.iter_raw():
        for _id, data in reader.feed(chunk):
            if not data:
                continue
            message = json.loads(data)
            if message.get("id") == rpc_id and "method" not in message:
                return message, before
            before.append(message)
    raise AssertionError(f"the stream ended without a response to {rpc_id!r}; got {before}")


def call(client: httpx.Client, url: str, session_id: str, message: dict[str, Any]) -> dict[str, Any]:
    with client.stream("POST", url, headers=session_headers(session_id), json=message) as response:
        assert response.status_code == 200, response.read()
        return read_response(response, message["id"])[0]


def tool_call(rpc_id: Any, name: str, arguments: dict[str, Any], token: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if token is not None:
        params["_meta"] = {"progressToken": token}
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": params}


def port_of(gw: RunningGateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def raw_post(port: int, path: str, headers: dict[str, str], body: bytes, rcvbuf: int = 4096) -> socket.socket:
    """Sends an HTTP/1.1 POST on a fresh socket and returns the socket, response unread."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A tiny receive window, so that an unread response backs up into the gateway quickly.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(5)
    sock.connect(("127.0.0.1", port))
    lines = [f"POST {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def wait_until(predicate: Any, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return bool(predicate())
