"""Clients for the doors that need more than one HTTP exchange: a live legacy SSE stream, the WebSocket door, a
raw TCP socket speaking HTTP, and a ``switchboard stdio`` process."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from tests.security.fuzz.support import STEP_S, VERSION, initialize, port_of, sse_events
from tests.support import PROJECT_ROOT, RunningGateway

# ---------------------------------------------------------------------------------------------- legacy SSE


class SseSession:
    """A live GET /sse stream read by a background thread; events land in a queue."""

    def __init__(self, gw: RunningGateway, headers: dict[str, str] | None = None) -> None:
        self.events: queue.Queue[dict[str, str] | BaseException | None] = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(STEP_S, read=30.0), trust_env=False)
        self._response = self._client.send(
            self._client.build_request(
                "GET", f"{gw.url}/sse", headers={"accept": "text/event-stream", **(headers or {})}
            ),
            stream=True,
        )
        assert self._response.status_code == 200, self._response.read()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        endpoint = self.next_event()
        assert endpoint.get("event") == "endpoint", endpoint
        self.endpoint = gw.url + endpoint["data"]
        self.session_id = endpoint["data"].split("session_id=", 1)[1]

    def _pump(self) -> None:
        try:
            for event in sse_events(self._response.iter_raw()):
                self.events.put(event)
        except BaseException as exc:  # the stream was closed under us: hand it over, the main thread decides
            self.events.put(exc)
        self.events.put(None)

    def next_event(self, timeout: float = STEP_S) -> dict[str, str]:
        item = self.events.get(timeout=timeout)
        assert isinstance(item, dict), f"the SSE stream ended: {item!r}"
        return item

    def until(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + STEP_S
        while True:
            event = self.next_event(max(0.01, deadline - time.monotonic()))
            if event.get("event", "message") == "message" and event.get("data"):
                message = json.loads(event["data"])
                if predicate(message):
                    return message

    def close(self) -> None:
        # Shutting the socket down wakes the reader thread at once (closing it from here would not).
        sock = self._response.extensions["network_stream"].get_extra_info("socket")
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(STEP_S)
        assert not self._thread.is_alive(), "the SSE reader did not stop"
        self._response.close()
        self._client.close()


# ---------------------------------------------------------------------------------------------- WebSocket /mcp/ws


def open_ws(
    gw: RunningGateway, path: str = "/mcp/ws", headers: dict[str, str] | None = None, subprotocol: str | None = "mcp"
) -> ClientConnection:
    """A WebSocket to `path` with the fuzz suite's settings (bounded waits, no size limit, no proxy)."""
    return connect(
        gw.ws(path),
        subprotocols=[subprotocol] if subprotocol else None,  # type: ignore[list-item]
        additional_headers=headers,
        open_timeout=STEP_S,
        close_timeout=2,
        max_size=None,
        proxy=None,
        compression=None,
    )


def ws_recv(ws: ClientConnection) -> Any:
    return json.loads(ws.recv(timeout=STEP_S))


def ws_initialize(ws: ClientConnection) -> None:
    ws.send(json.dumps(initialize("init")))
    while True:
        message = ws_recv(ws)
        if message.get("id") == "init":
            assert message["result"]["protocolVersion"] == VERSION, message
            break
    ws.send(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}))


def ws_probe(ws: ClientConnection, probe_id: str) -> list[Any] | int:
    """Sends a ping and collects every frame until its answer: the frames before it, or the close code."""
    try:
        ws.send(json.dumps({"jsonrpc": "2.0", "id": probe_id, "method": "ping"}))
        frames: list[Any] = []
        while True:
            message = ws_recv(ws)
            if isinstance(message, dict) and message.get("id") == probe_id and "method" not in message:
                assert message == {"jsonrpc": "2.0", "id": probe_id, "result": {}}, message
                return frames
            frames.append(message)
    except ConnectionClosed as closed:
        assert closed.rcvd is not None, "the gateway dropped the socket without a close frame"
        return closed.rcvd.code


# ---------------------------------------------------------------------------------------------- raw HTTP


def _read_http(sock: socket.socket, *, strict: bool, idle_s: float = 0.15) -> bytes:
    """What the server says, until it closes or goes quiet after a complete response head (keep-alive).

    ``strict``: the request was complete, so the server must answer or close on its own within STEP_S. Otherwise
    (bytes that may be the start of something longer) a quiet server is told we are done (half-close), and must
    then close. Either way, a server that does neither within STEP_S is hanging.
    """
    data = bytearray()
    deadline = time.monotonic() + STEP_S
    half_closed = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"the gateway neither answered nor closed within {STEP_S}s: {bytes(data)[:300]!r}")
        sock.settimeout(min(idle_s, remaining))
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return bytes(data)
        except TimeoutError:
            if re.match(rb"HTTP/1\.[01] \d{3} ", data) and b"\r\n\r\n" in data:
                return bytes(data)  # a complete answer on a connection kept alive
            if not strict and not half_closed:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_WR)
                half_closed = True
            continue
        if not chunk:
            return bytes(data)
        data += chunk


def _statuses(data: bytes) -> list[int]:
    return [int(m) for m in re.findall(rb"(?:^|\r\n)HTTP/1\.[01] (\d{3})", data)]


def raw_http(gw: RunningGateway, data: bytes, *, strict: bool) -> bytes:
    sock = socket.create_connection(("127.0.0.1", port_of(gw)), timeout=STEP_S)
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        return _read_http(sock, strict=strict)
    finally:
        sock.close()


def assert_raw_fine(gw: RunningGateway, data: bytes, *, strict: bool) -> bytes:
    answer = raw_http(gw, data, strict=strict)
    statuses = _statuses(answer)
    if strict:
        assert answer == b"" or statuses, (data[:200], answer[:400])
    for status in statuses:
        assert status < 500, (data[:200], answer[:400])
    return answer


# ---------------------------------------------------------------------------------------------- stdio


class StdioGateway:
    """``python -m gateway stdio`` with a reader thread on stdout; stderr goes to a file (checked for tracebacks)."""

    def __init__(self, config_path: Path, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self._stderr = stderr_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "stdio", "-c", str(config_path)],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        self.counter = 0

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def recv(self, timeout: float = STEP_S) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line is not None, f"stdout closed\n{self.stderr()[-3000:]}"
        message = json.loads(line)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", message
        return message

    def until_id(self, rpc_id: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        before: list[dict[str, Any]] = []
        deadline = time.monotonic() + STEP_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no answer to {rpc_id!r} within {STEP_S}s; got {before}")
            try:
                message = self.recv(remaining)
            except queue.Empty:
                raise AssertionError(f"no answer to {rpc_id!r} within {STEP_S}s; got {before}") from None
            if message.get("id") == rpc_id and "method" not in message:
                return message, before
            before.append(message)

    def probe(self) -> list[dict[str, Any]]:
        """A ping; what came before its answer."""
        self.counter += 1
        rpc_id = f"probe-{self.counter}"
        self.write(json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "ping"}).encode() + b"\n")
        answer, before = self.until_id(rpc_id)
        assert answer["result"] == {}, answer
        return before

    def stderr(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=STEP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._stderr.close()
