"""Helpers every test package shares: free ports, real processes, a gateway started from a config.

Ports and processes come from tools/procs.py (the benchmarks use them too) and are re-exported here.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from tools.procs import (
    ProcessExited as ProcessExited,
    alive as alive,
    free_port as free_port,
    stop_process as stop_process,
    wait_for_http as wait_for_http,
    wait_for_port as wait_for_port,
)

if TYPE_CHECKING:
    from gateway.config import Backend, Limits
    from gateway.upstreams.connection import BackendConnection, CallOwner

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CRASHY = PROJECT_ROOT / "tests" / "e2e" / "backends" / "crashy.py"

LEGACY_VERSION = "2025-11-25"  # the initialize-handshake era's newest protocol version
MODERN_VERSION = "2026-07-28"  # the stateless era: no initialize, the client speaks in each request's _meta
# What a Streamable HTTP client sends with every POST.
JSON_HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}


def initialize_params(
    version: str = LEGACY_VERSION, capabilities: dict[str, Any] | None = None, client: str = "t"
) -> dict[str, Any]:
    """The params of a legacy-era `initialize` from a client named `client`."""
    return {
        "protocolVersion": version,
        "capabilities": capabilities or {},
        "clientInfo": {"name": client, "version": "1"},
    }


def modern_meta(client: str = "t") -> dict[str, Any]:
    """The `_meta` of a modern-era request from a client named `client` (no capabilities)."""
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": client, "version": "1"},
    }


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    """The headers of a modern-era POST of `method` (and `name`, the tool, prompt or resource it is about)."""
    headers = {**JSON_HEADERS, "mcp-protocol-version": MODERN_VERSION, "mcp-method": method}
    if name:
        headers["mcp-name"] = name
    return headers


def initialize_request(rpc_id: Any = 0, **params: Any) -> dict[str, Any]:
    """A whole `initialize` request; `params` go to initialize_params."""
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "initialize", "params": initialize_params(**params)}


def b64url(data: bytes) -> str:
    """base64url without padding, as in JWTs."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hs256_jwt(header: Any, claims: Any, secret: str) -> str:
    """A JWT signed with HMAC-SHA256 under `secret`; `header` and `claims` are JSON-encoded unless bytes."""
    head = b64url(header if isinstance(header, bytes) else json.dumps(header).encode())
    body = b64url(claims if isinstance(claims, bytes) else json.dumps(claims).encode())
    signature = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(signature)}"


class PeerError(Exception):
    """Raised by a test peer's handler (a backend or a host) to answer the request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@contextlib.contextmanager
def redis_server(binary: str = "redis-server") -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """(URL, process) of a throwaway redis-server on a free port, without persistence; stopped on exit."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="switchboard-redis-") as workdir:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port("127.0.0.1", port, 10, proc)
            yield f"redis://127.0.0.1:{port}/0", proc
        finally:
            stop_process(proc)


@contextlib.contextmanager
def http_server(argv: Callable[[int], list[str]], timeout_s: float = 20.0, path: str = "/mcp") -> Iterator[str]:
    """Runs ``argv(port)``, a server that listens on 127.0.0.1:port, quietly from the project root on a free
    port; yields its URL (``path`` appended) once the port accepts connections, and always stops it."""
    port = free_port()
    proc = subprocess.Popen(
        argv(port), cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port("127.0.0.1", port, timeout_s, proc)
        yield f"http://127.0.0.1:{port}{path}"
    finally:
        stop_process(proc)


@dataclass
class RunningGateway:
    url: str  # base URL, e.g. http://127.0.0.1:PORT
    proc: subprocess.Popen[bytes]
    log_path: Path
    config_path: Path
    final_log: str | None = None  # the log as it was when the gateway stopped (its directory is gone then)

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"

    def server(self, name: str) -> str:
        return f"{self.url}/servers/{name}/mcp"

    def ws(self, path: str = "/mcp/ws") -> str:
        """The ws:// URL of `path` on this gateway."""
        return self.url.replace("http://", "ws://", 1) + path

    def log(self) -> str:
        if self.final_log is not None:
            return self.final_log
        return self.log_path.read_text(errors="replace")

    def log_with(self, text: str, timeout_s: float = 5.0) -> str:
        """The log once it holds ``text`` (the gateway writes its lines from a thread, a moment after
        the event), or as it is after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while text not in (log := self.log()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return log


@contextlib.contextmanager
def run_gateway(
    config: dict[str, Any] | None, *, wait_ready: bool = True, timeout_s: float = 30.0
) -> Iterator[RunningGateway]:
    """Start ``python -m gateway run`` as a real process on a free port; always stop it afterwards.

    ``config`` None runs the embedded default. With ``wait_ready`` it waits for /readyz to say 200.
    """
    workdir = Path(tempfile.mkdtemp(prefix="switchboard-test-"))
    log_path = workdir / "gateway.log"
    config_path = workdir / "config.yaml"
    port = free_port()
    args = [sys.executable, "-m", "gateway", "run", "--port", str(port)]
    if config is not None:
        config_path.write_text(yaml.safe_dump({"listen": {"host": "127.0.0.1", "port": port}, **config}))
        args += ["-c", str(config_path)]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            args, cwd=PROJECT_ROOT, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    running = RunningGateway(f"http://127.0.0.1:{port}", proc, log_path, config_path)
    try:
        try:
            wait_for_port("127.0.0.1", port, timeout_s, proc)
            if wait_ready:
                wait_for_http(f"{running.url}/readyz", timeout_s, proc)
        except ProcessExited as exc:
            raise ProcessExited(exc.returncode, f"the gateway was ready\n{running.log()}") from None
        except TimeoutError as exc:
            raise TimeoutError(f"gateway: {exc}\n{running.log()}") from None
        yield running
    finally:
        stop_process(proc)
        # A test may still read the log after the gateway stopped; the directory itself is not left behind.
        with contextlib.suppress(OSError):
            running.final_log = log_path.read_text(errors="replace")
        shutil.rmtree(workdir, ignore_errors=True)


def stdio_backend(module: str, *args: str, **extra: Any) -> dict[str, Any]:
    """Config of a backend spawned over stdio as ``python -m module args`` from the project root."""
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", module, *args],
        "cwd": str(PROJECT_ROOT),
        **extra,
    }


def fixture_stdio_backend(*args: str, **extra: Any) -> dict[str, Any]:
    """Config of the conformance fixture server spawned over stdio (`args` after ``--stdio``, e.g. ``--era``)."""
    return stdio_backend("tests.conformance.fixture_server", "--stdio", *args, **extra)


def crashy_backend(**extra: Any) -> dict[str, Any]:
    """Config of tests/e2e/backends/crashy.py over stdio: a backend that crashes, hangs or lags on request."""
    return {"transport": "stdio", "command": sys.executable, "args": [str(CRASHY)], **extra}


def dynamic_backend(**extra: Any) -> dict[str, Any]:
    """Config of tests/e2e/backends/dynamic.py (tools that appear, change and go) over stdio, required."""
    return stdio_backend("tests.e2e.backends.dynamic", required=True, **extra)


class QuietHandler:
    """A BackendConnection handler that ignores what the backend says (for tests that watch the connection)."""

    def on_connected(self, conn: BackendConnection) -> None: ...
    def on_disconnected(self, conn: BackendConnection, reason: str) -> None: ...
    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None: ...
    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...
    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...


async def read_http_request(reader: asyncio.StreamReader) -> tuple[list[str], dict[str, str], bytes]:
    """One HTTP/1.1 request off a raw server's stream (tests' hand-written backends): its head's lines
    (the request line first), its headers (names lowercased) and its Content-Length body."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
    return lines, headers, body


@contextlib.asynccontextmanager
async def http_backend(
    url: str,
    *,
    max_bytes: int = 1 << 20,
    timeout_s: float = 30.0,
    handler: Any = None,
    name: str = "raw",
    wait_s: float = 5.0,
    limits: Limits | None = None,
) -> AsyncIterator[BackendConnection]:
    """A started legacy-era connection to the HTTP backend at ``url`` (MCPC off), ready within ``wait_s``;
    closed on the way out. ``handler``: who hears the backend (default a :class:`QuietHandler`).
    ``limits``: its carrier made as the gateway makes it, under these (``max_bytes`` is then unused)."""
    from gateway.config import Backend
    from gateway.upstreams import make_carrier
    from gateway.upstreams.base import Carrier
    from gateway.upstreams.connection import BackendConnection
    from gateway.upstreams.http import HttpCarrier

    config = Backend(transport="http", url=url, era="legacy", timeout_s=timeout_s, mcpc="off")

    def carrier() -> Carrier:
        if limits is not None:
            return make_carrier(name, config, limits)
        return HttpCarrier(name, url, {}, max_bytes)

    conn = BackendConnection(name, config, carrier, handler or QuietHandler(), {"name": "sb"})
    await conn.start()
    try:
        assert await conn.wait_ready(wait_s)
        yield conn
    finally:
        async with asyncio.timeout(wait_s):
            await conn.close()


async def call_tool(conn: BackendConnection, name: str, wait_s: float = 10.0) -> dict[str, Any]:
    """The answer to a ``tools/call`` of ``name`` (no arguments) over ``conn``, or its error as the
    JSON-RPC answer a client gets."""
    from gateway import jsonrpc

    async with asyncio.timeout(wait_s):
        try:
            return await conn.request("tools/call", {"name": name, "arguments": {}})
        except jsonrpc.RpcError as exc:
            return {"jsonrpc": "2.0", "error": exc.to_error()}


def text_of(answer: dict[str, Any]) -> str:
    """The text of a tool result's first content item."""
    return str(answer["result"]["content"][0]["text"])


async def until_in(names: set[str], name: str, wait_s: float = 10.0) -> None:
    """Until ``name`` is in ``names`` (a hand-written server's record, e.g. of the calls whose connection
    has ended)."""
    async with asyncio.timeout(wait_s):
        while name not in names:  # noqa: ASYNC110 (such a server offers a set, not events)
            await asyncio.sleep(0.005)


async def ready_then_call(
    name: str, config: Backend, method: str, params: dict[str, Any], ready_within_s: float = 20
) -> tuple[BackendConnection, float, dict[str, Any]]:
    """One backend spoken to directly, without a gateway process: waits until it is ready, makes one request,
    closes. Returns (the connection, seconds until ready, the answer)."""
    from gateway.config import Limits
    from gateway.upstreams import make_carrier
    from gateway.upstreams.connection import BackendConnection

    client_info = {"name": "switchboard", "version": "0"}
    conn = BackendConnection(name, config, lambda: make_carrier(name, config, Limits()), QuietHandler(), client_info)
    started = time.monotonic()
    await conn.start()
    try:
        assert await conn.wait_ready(ready_within_s), conn.last_error
        elapsed = time.monotonic() - started
        answer = await conn.request(method, params, timeout=10)
    finally:
        await conn.close()
    return conn, elapsed, answer


class LinePeer:
    """The other end of a child process that speaks JSON lines on its stdin and stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def send(self, message: dict[str, Any] | bytes) -> None:
        assert self.proc.stdin is not None
        data = message if isinstance(message, bytes) else json.dumps(message).encode()
        self.proc.stdin.write(data + b"\n")
        await self.proc.stdin.drain()

    async def recv(self, timeout: float = 15) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        assert line, "the child closed stdout"
        message: dict[str, Any] = json.loads(line)
        return message

    async def until(self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 15) -> dict[str, Any]:
        """The first message `predicate` accepts (the ones before it are dropped)."""
        while True:
            message = await self.recv(timeout)
            if predicate(message):
                return message


@contextlib.asynccontextmanager
async def spawn_module(
    module: str, *args: str, stderr: int | None = None, grace_s: float = 5.0
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m module args`` from the project root with pipes on stdin and stdout (lines up to 16 MiB);
    stopped afterwards: SIGTERM, then SIGKILL after `grace_s` (0: at once)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        cwd=PROJECT_ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        limit=16 * 1024 * 1024,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            if grace_s > 0:
                proc.terminate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(proc.wait(), grace_s)
            if proc.returncode is None:
                proc.kill()
        await proc.wait()


async def gone(pid: int, timeout_s: float = 10.0) -> bool:
    """Whether process ``pid`` ends (or is a zombie) within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def answer_lifespan(receive: Any, send: Any) -> None:
    """A test ASGI app's lifespan: started at once, stopped when told (uvicorn's lifespan="on")."""
    while (message := await receive())["type"] != "lifespan.shutdown":
        await send({"type": message["type"] + ".complete"})
    await send({"type": "lifespan.shutdown.complete"})


@contextlib.asynccontextmanager
async def served_by_protocol(app: Any, **options: Any) -> AsyncIterator[tuple[Any, int]]:
    """``app`` under a real uvicorn server with the gateway's own HTTP protocol (lean cycle, write
    batch, client limits: gateway/transports/http_protocol.py) on a free loopback port, configured as
    gateway/cli.py does (``options``: more uvicorn settings); yields the server and its port, and stops
    the server on the way out."""
    import socket

    import uvicorn

    from gateway.transports.http_protocol import CoalescingHttpToolsProtocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        app,
        http=CoalescingHttpToolsProtocol,
        lifespan="on",
        log_config=None,
        access_log=False,
        proxy_headers=False,  # as gateway/cli.py: uvicorn's middleware would hide the app's lean paths
        **options,
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    async with asyncio.timeout(10):
        while not server.started and not task.done():  # noqa: ASYNC110 (uvicorn offers only the flag)
            await asyncio.sleep(0.01)
    try:
        yield server, sock.getsockname()[1]
    finally:
        server.should_exit = True
        async with asyncio.timeout(10):
            await task


@contextlib.asynccontextmanager
async def served_by_gateway_protocol(
    app: Any, gateway: Any, backend: str, **options: Any
) -> AsyncIterator[tuple[Any, int]]:
    """:func:`served_by_protocol` (``options``: more uvicorn settings), once ``backend`` is ready."""
    async with served_by_protocol(app, **options) as (server, port):
        assert await gateway.connections[backend].wait_ready(10)
        yield server, port


@dataclass
class RawBackend:
    """What :func:`raw_mcp_backend` saw: its URL, the tool calls of each connection, and the calls whose
    connection has ended (either side closed)."""

    url: str = ""
    connections: list[list[str]] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)


# (a tool call's name, its JSON-RPC id, the connection's reader and writer) -> whether the connection
# goes on (False: it is closed).
OnToolCall = Callable[[str, Any, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[bool]]


@contextlib.asynccontextmanager
async def raw_mcp_backend(on_call: OnToolCall, init: dict[str, Any], seen: RawBackend) -> AsyncIterator[RawBackend]:
    """A hand-written legacy MCP backend over HTTP/1.1 (:func:`raw_http_server`), for answers no real
    server gives: a GET gets 405 (no stream), a notification 202, ``initialize`` the result ``init``;
    each other request is a tool call whose answer (or misbehaviour) is ``on_call``'s. Records in
    ``seen`` (which may be a subclass with a test's own fields), and yields it with its URL set."""
    import orjson

    from gateway import jsonrpc

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        names: list[str] = []  # the calls this connection carried
        seen.connections.append(names)
        try:
            while True:
                lines, _headers, body = await read_http_request(reader)
                message = orjson.loads(body) if lines[0].startswith("POST") else {}
                if not message:
                    writer.write(b"HTTP/1.1 405 X\r\ncontent-length: 0\r\n\r\n")
                elif "id" not in message:
                    writer.write(b"HTTP/1.1 202 X\r\ncontent-length: 0\r\n\r\n")
                elif message["method"] == "initialize":
                    answer = orjson.dumps(jsonrpc.result(message["id"], init))
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n")
                    writer.write(b"content-length: %d\r\n\r\n%s" % (len(answer), answer))
                else:
                    names.append(message["params"]["name"])
                    if not await on_call(names[-1], message["id"], reader, writer):
                        return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            seen.closed.update(names)
            writer.close()

    async with raw_http_server(handle) as seen.url:
        yield seen


@contextlib.asynccontextmanager
async def raw_http_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A hand-written backend on a free loopback port (``handle`` serves each connection, e.g. with
    :func:`read_http_request`): yields its ``/mcp`` URL, and closes it on the way out."""
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    finally:
        server.close()
