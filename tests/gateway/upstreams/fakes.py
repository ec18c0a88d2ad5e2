"""A scripted in-memory backend for ``BackendConnection`` tests.

The fake :class:`FakeCarrier` speaks the Carrier contract (gateway/upstreams/base.py) and records
every message the connection sends; :class:`FakeBackend` decides what a backend of a given era
answers. :func:`rig` builds a started connection on one (closed after each test by the autouse
fixture in conftest.py). Only the connection's public surface is used (constructor,
start/close/wait_ready, begin/call/request/cancel/notify, state/era/init_result/capabilities, the
handler's callbacks and what the carrier receives), so the tests hold across refactors of its insides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, Literal

from adapters import mcp_modern
from gateway import errors, jsonrpc
from gateway.config import Backend
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.upstreams.connection import BackendConnection

WAIT_S = 5.0
LEGACY_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": {"tools": {}, "logging": {}},
    "serverInfo": {"name": "fake-legacy", "version": "1"},
}
MODERN_DISCOVER = {
    "supportedVersions": [mcp_modern.LATEST_MODERN],
    "capabilities": {"tools": {}},
    "resultType": "complete",
    "_meta": {mcp_modern.SERVER_INFO_KEY: {"name": "fake-modern", "version": "2"}},
    "instructions": "be nice",
}
ProbeAnswer = Literal["method-not-found", "server-error-id", "null-id", "silent", "modern-error", "die"]


# ---- the fake backend ---------------------------------------------------------------------------


class FakeCarrier(Carrier):
    """One connection attempt's carrier. ``blocking`` makes ``send`` of a request return only once
    it is answered, like a request/response carrier (Streamable HTTP)."""

    def __init__(self, backend: FakeBackend, blocking: bool) -> None:
        self.backend = backend
        self.blocking = blocking
        self.inbound: Inbound | None = None
        self.sent: list[tuple[dict[str, Any], Mapping[str, str] | None]] = []
        self.ready_calls = 0
        self.closed = asyncio.Event()
        self.reason = "closed"
        self._answered: dict[Any, asyncio.Event] = {}

    async def open(self, inbound: Inbound) -> None:
        self.inbound = inbound

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self.closed.is_set():
            raise CarrierClosed(self.reason)
        self.sent.append((message, headers))
        self.backend.wake()
        answered = None
        if self.blocking and "method" in message and "id" in message:
            answered = self._answered.setdefault(message["id"], asyncio.Event())
        self.backend.handle(self, message)
        if answered is not None:
            closed = asyncio.ensure_future(self.closed.wait())
            done = asyncio.ensure_future(answered.wait())
            try:
                await asyncio.wait({closed, done}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
                done.cancel()
            if not answered.is_set():
                raise CarrierClosed(self.reason)

    async def ready(self) -> None:
        self.ready_calls += 1

    async def wait_closed(self) -> str:
        await self.closed.wait()
        return self.reason

    async def close(self) -> None:
        self.closed.set()

    def describe(self) -> str:
        return "fake"

    # What the backend does to this carrier:

    def deliver(self, message: dict[str, Any], related: Any = None) -> None:
        assert self.inbound is not None
        self.inbound(message, related)
        rpc_id = message.get("id")
        if "method" not in message and isinstance(rpc_id, (str, int)) and rpc_id in self._answered:
            self._answered[rpc_id].set()

    def answer(self, rpc_id: Any, result: Any, related: Any = None) -> None:
        self.deliver(jsonrpc.result(rpc_id, result), related)

    def die(self, reason: str) -> None:
        self.reason = reason
        self.closed.set()

    def methods(self) -> list[str]:
        return [str(m.get("method")) for m, _ in self.sent if "method" in m]

    def find(self, method: str) -> list[dict[str, Any]]:
        return [m for m, _ in self.sent if m.get("method") == method]


class FakeBackend:
    """What a backend of one era answers to the handshake; other requests wait in ``held`` for the
    test to answer (in any order)."""

    def __init__(
        self,
        era: Literal["legacy", "modern"] = "legacy",
        probe_answer: ProbeAnswer = "method-not-found",
        blocking: bool = False,
        modern_caps: dict[str, Any] | None = None,
    ) -> None:
        self.era = era
        self.probe_answer = probe_answer
        self.blocking = blocking
        self.modern_caps = modern_caps
        self.init_result: Any = LEGACY_RESULT
        self.die_on_initialize = False
        self.hang_on_initialize = False
        self.carriers: list[FakeCarrier] = []
        self.held: list[tuple[FakeCarrier, dict[str, Any]]] = []
        self._changed = asyncio.Event()

    def factory(self) -> Carrier:
        carrier = FakeCarrier(self, self.blocking)
        self.carriers.append(carrier)
        self.wake()
        return carrier

    @property
    def carrier(self) -> FakeCarrier:
        return self.carriers[-1]

    def wake(self) -> None:
        self._changed.set()

    async def until(self, condition: Callable[[], bool]) -> None:
        """Wait (bounded) until ``condition`` holds; re-checked whenever the backend sees something."""
        async with asyncio.timeout(WAIT_S):
            while not condition():
                self._changed.clear()
                waiter = asyncio.ensure_future(self._changed.wait())
                try:
                    await asyncio.wait({waiter}, timeout=0.01)
                finally:
                    waiter.cancel()

    async def held_request(self, method: str, count: int = 1) -> list[tuple[FakeCarrier, dict[str, Any]]]:
        await self.until(lambda: len([h for h in self.held if h[1]["method"] == method]) >= count)
        return [h for h in self.held if h[1]["method"] == method]

    def handle(self, carrier: FakeCarrier, message: dict[str, Any]) -> None:
        method = message.get("method")
        rpc_id = message.get("id")
        if method is None or rpc_id is None:
            return  # notifications and our answers to server requests are only recorded
        if method == "initialize":
            if self.die_on_initialize:
                carrier.die("exited with code 1 during initialize")
            elif self.hang_on_initialize:
                pass
            elif self.era == "legacy":
                carrier.answer(rpc_id, self.init_result)
            else:
                carrier.deliver(jsonrpc.error(rpc_id, errors.INVALID_REQUEST, "initialize is not served here"))
            return
        if method == "server/discover":
            if self.era == "modern":
                result = dict(MODERN_DISCOVER)
                if self.modern_caps is not None:
                    result["capabilities"] = self.modern_caps
                carrier.answer(rpc_id, result)
            elif self.probe_answer == "method-not-found":
                carrier.deliver(jsonrpc.error(rpc_id, errors.METHOD_NOT_FOUND, "Method not found"))
            elif self.probe_answer == "server-error-id":
                # Python SDK 1.x before a session exists: an error under an id of its own.
                carrier.deliver(jsonrpc.error("server-error", errors.INVALID_REQUEST, "Bad Request: No session"))
            elif self.probe_answer == "null-id":
                carrier.deliver(jsonrpc.error(None, errors.INVALID_REQUEST, "Bad Request"))
            elif self.probe_answer == "modern-error":
                carrier.deliver(jsonrpc.error(rpc_id, errors.UNSUPPORTED_PROTOCOL_VERSION, "no such version"))
            elif self.probe_answer == "die":
                carrier.die("the server choked on an unknown method")  # a strict legacy server
            return  # "silent": a legacy server that ignores requests before initialize
        if method == "ping":
            carrier.answer(rpc_id, {})
            return
        self.held.append((carrier, message))
        self.wake()


class Recorder:
    """A ConnectionHandler that writes down what the connection tells it."""

    def __init__(self) -> None:
        self.connected: list[BackendConnection] = []
        self.disconnected: list[str] = []
        self.server_requests: list[tuple[dict[str, Any], Any]] = []
        self.notifications: list[dict[str, Any]] = []
        self.callbacks: list[dict[str, Any]] = []

    def on_connected(self, conn: BackendConnection) -> None:
        self.connected.append(conn)

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self.disconnected.append(reason)

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: Any) -> None:
        self.server_requests.append((message, owner))

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self.notifications.append(message)

    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self.callbacks.append(message)


class Owner:
    """A calling client's stream, as the connection sees it."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.log_level = None
        self.delivered: list[dict[str, Any]] = []

    def deliver(self, message: dict[str, Any]) -> None:
        self.delivered.append(message)


def config(transport: str = "http", **extra: Any) -> Backend:
    where = {"command": "fake-server"} if transport == "stdio" else {"url": "http://backend.test/mcp"}
    return Backend.model_validate(
        {
            "transport": transport,
            **where,
            "connect_timeout_s": 10,
            "timeout_s": 10,
            "restart": {"initial_backoff_s": 0.01, "max_backoff_s": 0.05},
            **extra,
        }
    )


class Rig:
    def __init__(self, backend: FakeBackend, conn: BackendConnection, handler: Recorder) -> None:
        self.backend = backend
        self.conn = conn
        self.handler = handler


RIGS: list[BackendConnection] = []


async def rig(backend: FakeBackend, cfg: Backend, *, ready: bool = True, **kw: Any) -> Rig:
    handler = Recorder()
    conn = BackendConnection("fake", cfg, backend.factory, handler, {"name": "switchboard-test", "version": "0"}, **kw)
    RIGS.append(conn)
    await conn.start()
    if ready:
        assert await conn.wait_ready(WAIT_S), conn.last_error
    return Rig(backend, conn, handler)


async def finished(task: asyncio.Task[Any]) -> Any:
    async with asyncio.timeout(WAIT_S):
        return await task
