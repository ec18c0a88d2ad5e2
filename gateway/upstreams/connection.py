"""One supervised MCP connection to one backend, shared by every client session that uses it.

Many clients share a connection, so everything that names a request is remapped here: the gateway
allocates its own request ids and progress tokens upstream and keeps, per pending call, who asked
(:class:`CallOwner`) and what they called it. A backend that dies fails its in-flight calls at once
and is reconnected (or respawned) with exponential backoff by its supervisor
(gateway/upstreams/supervisor.py). Which era to speak, and the handshake,
are decided per attempt by gateway/upstreams/handshake.py; a modern backend's news arrive on the
listen stream of gateway/upstreams/listen.py.

A call waits on its ``Pending`` future. Over Streamable HTTP the request leaves at once on an idle
kept-alive connection and the carrier's parser callbacks resolve the future (``start_request``,
gateway/upstreams/http.py); its deadline is one entry in a shared time slice
(gateway/upstreams/deadlines.py), and a cancellation or timeout aborts the exchange, which closes
its HTTP stream, exactly as cancelling a task blocked in ``send`` does on the other carriers (and
on HTTP when no connection is idle), which wait under an ``asyncio.timeout``. Either way the
caller sees the same answers and errors.

Credentials (issue 17): for a backend whose ``auth`` is dynamic, each request carries its own credential
headers (``Pending.headers``): a caller's request the credential bound for its call
(gateway/upstreams/credentials.py), the gateway's own requests (no owner: handshake, lists) the gateway's
identity toward the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol

from adapters import mcp_modern, mcpl
from adapters.mcpc.callback import MCPC_CALLBACK
from adapters.mgp import names as mgp_names
from gateway import jsonrpc
from gateway.config import Backend as BackendConfig
from gateway.upstreams.base import Carrier, CarrierClosed
from gateway.upstreams.credentials import call_headers
from gateway.upstreams.deadlines import Deadlines
from gateway.upstreams.flag import Flag
from gateway.upstreams.handshake import GATEWAY_CLIENT_CAPABILITIES, BackendKernel, Era, Handshake
from gateway.upstreams.listen import ListenOwner, ListenStream
from gateway.upstreams.pending import EXPIRED, MISSING, Abortable, Pending as Pending, PendingTable
from gateway.upstreams.restarts import RestartBudget
from gateway.upstreams.supervisor import supervise
from gateway.upstreams.user_sessions import CallHeaders

log = logging.getLogger(__name__)

# Notifications that concern every session of the backend even when they arrive on a call's stream.
_GLOBAL_NOTIFICATIONS = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
        "notifications/cancelled",
        *mcpl.SERVER_NOTIFICATIONS,
        # MGP news that is not a stream's (§6, §11, §13): the gateway's MGP features take it
        # wherever it arrives, a call's own response stream included (gateway/mgp/news.py).
        mgp_names.AUDIT,
        mgp_names.LIFECYCLE,
        mgp_names.EVENT,
        mgp_names.CALLBACK_REQUEST,
    }
)

State = Literal["connecting", "ready", "down", "closed"]


class CallOwner(Protocol):
    """Where the messages related to one forwarded call go (the calling client's stream)."""

    session_id: str

    def deliver(self, message: dict[str, Any]) -> None: ...


class StartRequest(Protocol):
    """A carrier's way to send a request without a task waiting in it (gateway/upstreams/http.py):
    the exchange in progress, or None when the carrier's ``send`` must be awaited instead."""

    def __call__(self, message: dict[str, Any], headers: dict[str, str] | None) -> Abortable | None: ...


class ConnectionHandler(Protocol):
    def on_connected(self, conn: BackendConnection) -> None: ...
    def on_disconnected(self, conn: BackendConnection, reason: str) -> None: ...
    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None: ...
    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...
    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None: ...


class BackendConnection:
    def __init__(
        self,
        name: str,
        config: BackendConfig,
        carrier_factory: Callable[[], Carrier],
        handler: ConnectionHandler,
        client_info: dict[str, Any],
        sse_fallback: Callable[[], Carrier] | None = None,
        offer_mcpl: bool = True,
        kernel: BackendKernel | None = None,
        identity: Callable[[], Mapping[str, str] | None] | None = None,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        # Upstream credentials (gateway/upstreams/credentials.py), for a backend whose auth is not static:
        # ``identity`` gives the headers of the gateway's own requests, ``prepare`` runs before each connect.
        self._identity = identity
        self._prepare = prepare
        self.config = config
        self._factory = carrier_factory
        self._sse_fallback = sse_fallback
        self._handshake_step: str | None = None  # the handshake request in flight (for errors)
        self._handshake = Handshake(
            name, config, client_info, offer_mcpl, sse_possible=sse_fallback is not None, kernel=kernel
        )
        self._handler = handler
        self._client_info = client_info
        self._carrier: Carrier | None = None
        self._start_request: StartRequest | None = None  # the carrier's, if it has one
        self._deadlines: Deadlines | None = None  # made by start(), on the running loop
        # The running loop, kept by start(): asyncio.get_running_loop() costs a getpid() syscall in 3.11.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = PendingTable(name)
        self._ids = itertools.count(1)
        self._ready = Flag()  # ._ready.on: is_set() without a call, read by every call
        self._settled = asyncio.Event()  # the first connect attempt ended, either way
        self._supervisor: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._closing = False
        self.state: State = "connecting"
        self.last_error: str | None = None
        self.init_result: dict[str, Any] = {}
        self.restarts = 0
        # MGP §11.6: restarts within restart.window_s are limited to restart.max_restarts.
        self._restarts = RestartBudget(config.restart)
        self.connected_at: float | None = None
        self.era: Era = "legacy"
        # Tool input schemas by name, for the modern era's Mcp-Param-* headers (kept by the router).
        self.tool_schemas: dict[str, Any] = {}
        self._listen = ListenStream(self, lambda message: self._handler.on_notification(self, message))
        self.listen_resources = self._listen.resources  # watched for every session (gateway/routing/subscriptions.py)
        # The era probe in flight: an error answer that names no request of ours ends it at once.
        self._probe: Pending | None = None

    # ---- facts about the backend -------------------------------------------------------------

    @property
    def capabilities(self) -> dict[str, Any]:
        caps = self.init_result.get("capabilities")
        return caps if isinstance(caps, dict) else {}

    @property
    def server_info(self) -> dict[str, Any]:
        info = self.init_result.get("serverInfo")
        return info if isinstance(info, dict) else {}

    @property
    def protocol_version(self) -> str | None:
        return self.init_result.get("protocolVersion")

    @property
    def _http(self) -> bool:
        return self.config.transport == "http"

    @property
    def _modern_http(self) -> bool:
        return self.era == "modern" and self.config.transport == "http"

    @property
    def gave_up(self) -> bool:
        """The restart budget is spent: the supervisor stopped for good (lifecycle state "error")."""
        return self._restarts.gave_up

    @property
    def first_attempt_pending(self) -> bool:
        """Still on its very first connect attempt: worth a short wait right after start, unlike a
        backend that already failed (which must fail fast)."""
        return self.state == "connecting" and self.connected_at is None and self.last_error is None

    @property
    def inflight(self) -> int:
        return len(self._pending)

    def owners_inflight(self) -> list[CallOwner]:
        """Owners of calls in flight, oldest first (used to attribute unrelated server requests)."""
        return self._pending.owners()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._deadlines = Deadlines(self._loop)
        self._supervisor = asyncio.create_task(supervise(self), name=f"backend-{self.name}")

    async def wait_ready(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._ready.wait()
        return self._ready.is_set()

    async def wait_settled(self, timeout: float) -> bool:
        """Wait until the first connect attempt has ended (ready or failed); False on timeout."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        return self._settled.is_set()

    async def close(self) -> None:
        self._closing = True
        self.state = "closed"
        self._ready.clear()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._supervisor
        for task in list(self._background):
            task.cancel()
        self._listen.stop()
        if self._carrier is not None:
            await self._carrier.close()
        self._fail_all("gateway is shutting down")

    async def handshake_request(
        self, method: str, params: dict[str, Any], era: Era, timeout: float, probe: bool = False
    ) -> dict[str, Any]:
        """A request of the handshake (gateway/upstreams/handshake.py), sent in ``era``. A probe's
        error answer that names no request of ours (``"server-error"``, null) still answers it."""
        self.era = era  # begin() and the routing headers follow the era being tried
        self._handshake_step = method
        pending = self.begin(method, params, None)
        if probe:
            self._probe = pending
        try:
            return await self._roundtrip(pending, timeout)
        finally:
            if probe:
                self._probe = None

    def relisten(self) -> None:
        """The set of watched resources changed: reopen the listen stream with the new filter."""
        if self.era == "modern":
            self._listen.refilter()

    def _fail_all(self, reason: str) -> None:
        self._pending.fail_all(reason)

    # ---- outbound ----------------------------------------------------------------------------

    def begin(self, method: str, params: dict[str, Any] | None, owner: CallOwner | None) -> Pending:
        """Allocate an upstream id (and progress token) for a request; it is sent by :meth:`call`."""
        upstream_id = next(self._ids)
        client_token = MISSING
        if params is not None:
            meta = params.get("_meta")
            if isinstance(meta, dict) and self.era != "modern" and not mcp_modern.ENVELOPE_KEYS.isdisjoint(meta):
                # A modern client's envelope is for the gateway: a handshake-era server refuses it.
                meta = mcp_modern.without_envelope(meta)
                params = {**params, "_meta": meta}
            if isinstance(meta, dict) and "progressToken" in meta:
                client_token = meta["progressToken"]
                # Clients choose tokens independently; the upstream id is unique on this connection.
                params = {**params, "_meta": {**meta, "progressToken": upstream_id}}
        if self.era == "modern":
            # Per request, the envelope declares what the *calling client* can do: the gateway can
            # only relay sampling/elicitation/roots to a client that supports them.
            level = getattr(owner, "log_level", None)
            caps = getattr(owner, "client_capabilities", None)
            if not isinstance(caps, dict):
                caps = GATEWAY_CLIENT_CAPABILITIES
            params = mcp_modern.stamp_request(params, caps, self._client_info, level)
            params = self._handshake.stamp_modern(method, params)  # MGP §2.6, §3.8: the kernel's object, grants
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": upstream_id, "method": method}
        if params is not None:
            message["params"] = params
        loop = self._loop or asyncio.get_running_loop()
        pending = Pending(upstream_id, message, loop.create_future(), owner, client_token)
        if self._identity is not None:
            # A caller's request carries the credential bound for its call (the forwarder's); the gateway's own
            # requests (no owner: handshake, lists) carry the gateway's identity toward this backend.
            bound = call_headers(self.name) if owner is not None else None
            pending.headers = bound if bound is not None else self._identity()
        self._pending.by_id[upstream_id] = pending  # PendingTable.add, inline
        return pending

    async def call(self, pending: Pending, timeout: float | None = None) -> dict[str, Any]:
        """Send a begun request and wait for its response message (result or error, never raises for those)."""
        if not self._ready.on:
            self._pending.drop(pending)
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_UNAVAILABLE,
                f"backend {self.name} is unavailable: {self.last_error or self.state}",
            )
        timeout = timeout or self.config.timeout_s
        start = self._start_request
        if start is None or self._carrier is None:
            return await self._roundtrip(pending, timeout)
        # The quick way (an HTTP backend): the request leaves now, its answer resolves the future in
        # the carrier's callbacks, and one timer per time slice stands for this call's deadline.
        try:
            modern_http = self.era == "modern" and self.config.transport == "http"  # _modern_http, inline
            headers = routing_headers(pending.message, self.tool_schemas) if modern_http else None
            if pending.headers:
                headers = _with_credential(headers, pending.headers)
            exchange = start(pending.message, headers)
        except CarrierClosed as exc:
            self._pending.drop(pending)
            raise jsonrpc.RpcError(jsonrpc.BACKEND_UNAVAILABLE, f"backend {self.name} is unavailable: {exc}") from None
        if exchange is None:
            return await self._roundtrip(pending, timeout)
        pending.exchange = exchange
        deadlines = self._deadlines
        assert deadlines is not None  # made by start(), which made the carrier too
        slot = deadlines.add(timeout, pending)
        try:
            answer = await pending.future
        except asyncio.CancelledError:
            self._abandon(pending, "cancelled by the client")
            exchange.abort()
            raise
        finally:
            slot.pop(pending, None)  # Deadlines.remove, inline
        if answer is EXPIRED:
            self._abandon(pending, "timed out in the gateway")
            exchange.abort()
            raise jsonrpc.RpcError(jsonrpc.BACKEND_TIMEOUT, f"backend {self.name} did not answer within {timeout:g}s")
        if pending.lost is not None:
            # The gateway's own failure, raised like every other (not the backend's answer).
            raise jsonrpc.RpcError(jsonrpc.BACKEND_UNAVAILABLE, pending.lost)
        return answer

    async def _roundtrip(self, pending: Pending, timeout: float) -> dict[str, Any]:
        carrier = self._carrier
        try:
            async with asyncio.timeout(timeout):
                if carrier is None:
                    raise CarrierClosed("not connected")
                pending.task = asyncio.current_task()
                try:
                    headers = routing_headers(pending.message, self.tool_schemas) if self._modern_http else None
                    if pending.headers:
                        headers = _with_credential(headers, pending.headers)
                    await carrier.send(pending.message, headers)
                except asyncio.CancelledError:
                    if not pending.interrupted:
                        raise
                    # cancel() cut the exchange short (for HTTP that closes the stream, which is
                    # how the modern era cancels); the caller still gets its -32800 answer.
                    task = asyncio.current_task()
                    assert task is not None  # this coroutine runs in a task
                    task.uncancel()
                pending.task = None
                answer = await pending.future
                if pending.lost is not None:
                    # The gateway's own failure, raised like every other (not the backend's answer).
                    raise jsonrpc.RpcError(jsonrpc.BACKEND_UNAVAILABLE, pending.lost)
                return answer
        except TimeoutError:
            self._abandon(pending, "timed out in the gateway")
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_TIMEOUT, f"backend {self.name} did not answer within {timeout:g}s"
            ) from None
        except CarrierClosed as exc:
            self._pending.drop(pending)
            raise jsonrpc.RpcError(jsonrpc.BACKEND_UNAVAILABLE, f"backend {self.name} is unavailable: {exc}") from None
        except asyncio.CancelledError:
            self._abandon(pending, "cancelled by the client")
            raise

    def _abandon(self, pending: Pending, reason: str) -> None:
        if self.era == "modern" and self._http:
            self._pending.drop(pending)  # the stream closing is the cancellation
            return
        if self._pending.drop(pending) and self._ready.is_set():
            self.spawn(self.notify("notifications/cancelled", {"requestId": pending.upstream_id, "reason": reason}))

    def cancel(self, pending: Pending, reason: str | None) -> None:
        """A client cancelled: tell the backend and end the wait with -32800.

        Legacy backends get ``notifications/cancelled``; over HTTP the exchange in progress is also
        cut, which closes its stream (the only cancellation the modern era has).
        """
        params: dict[str, Any] = {"requestId": pending.upstream_id}
        if reason:
            params["reason"] = reason
        if self._pending.drop(pending) and not (self.era == "modern" and self._http):
            self.spawn(self.notify("notifications/cancelled", params))
        if not pending.future.done():
            pending.future.set_result(
                jsonrpc.error(pending.upstream_id, jsonrpc.REQUEST_CANCELLED, "Request cancelled")
            )
        if pending.task is not None and not pending.task.done():
            pending.interrupted = True
            pending.task.cancel()
        if pending.exchange is not None:
            pending.exchange.abort()

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        owner: CallOwner | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        return await self.call(self.begin(method, params, owner), timeout)

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self.send(jsonrpc.notification(method, params))

    async def send(self, message: dict[str, Any]) -> None:
        """Send a notification or a response to a server request; losing it to a dead backend is logged."""
        carrier = self._carrier
        if carrier is None or not self._ready.is_set():
            log.info("backend %s unavailable; dropped %s", self.name, message.get("method", "a response"))
            return
        try:
            await carrier.send(message)
        except CarrierClosed as exc:
            log.info("backend %s: could not send %s: %s", self.name, message.get("method", "a response"), exc)

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ---- inbound -----------------------------------------------------------------------------

    def _inbound(self, message: dict[str, Any], related: Any) -> None:
        method = message.get("method")
        if method is None:
            rpc_id = message.get("id")
            if type(rpc_id) is int:
                # An answer to one of ours (our ids are ints), still awaited: PendingTable.answered's
                # common case, inline; anything else goes the whole way below.
                pending = self._pending.by_id.pop(rpc_id, None)
                if pending is not None:
                    if not pending.future.done():
                        pending.future.set_result(message)
                    return
            elif rpc_id == MCPC_CALLBACK:
                # MCPC: an unsolicited response with one fixed id, never an answer to a request of ours
                # (gateway/mcpc/intake.py), so it is taken out before the id matching.
                self._handler.on_mcpc_callback(self, message)
                return
            self._pending.answered(message, self._probe)
            return
        if not isinstance(method, str):
            log.warning("backend %s sent a message whose method is no string: %.200r", self.name, method)
            return
        owner = self._pending.owner_of(related)
        if "id" in message:
            self._handler.on_server_request(self, message, owner)
            return
        if method == "notifications/progress":
            self._pending.progress(message)
            return
        if owner is None and method == "notifications/message":
            owner = self._log_owner()
        if owner is not None and (method not in _GLOBAL_NOTIFICATIONS or isinstance(owner, ListenOwner)):
            owner.deliver(message)
            return
        self._handler.on_notification(self, message)

    def _log_owner(self) -> CallOwner | None:
        """Carriers without relation (stdio, WebSocket) cannot say which call a log line is about.
        With one call in flight it is that call's (and then it stays ordered before its result); a
        modern backend only logs for a request, so the newest call gets it. Otherwise it is news for
        every session."""
        owners = self.owners_inflight()
        if len(owners) == 1 or (owners and self.era == "modern"):
            return owners[-1]
        return None


def routing_headers(message: dict[str, Any], tool_schemas: dict[str, Any]) -> dict[str, str]:
    """The headers a modern request over HTTP carries: method, name, parameters, protocol version."""
    method = message["method"]
    params = message.get("params")
    schema = tool_schemas.get(params.get("name")) if method == "tools/call" and params else None
    headers = mcp_modern.request_headers(method, params, schema)
    headers["MCP-Protocol-Version"] = mcp_modern.LATEST_MODERN
    return headers


def _with_credential(headers: dict[str, str] | None, credential: Mapping[str, str]) -> dict[str, str]:
    """A request's headers with its credential; a caller's credential keeps its ``session_key`` (the
    carrier keeps a legacy session per caller, gateway/upstreams/user_sessions.py)."""
    key = getattr(credential, "session_key", None)
    merged = {**headers, **credential} if headers else credential
    return CallHeaders(merged, key) if key is not None else dict(merged)
