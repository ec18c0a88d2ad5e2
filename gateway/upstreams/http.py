"""A backend spoken to over Streamable HTTP (legacy era: sessions, POST + optional GET stream).

Liberal in what it accepts, strict in what it sends. A POST carries exactly one request, so:

- a JSON error answered to it is its answer, whatever id the backend put in (null, or the
  ``"server-error"`` of SDK 1.x and FastMCP 2.x when they refuse a request with HTTP 400);
- an ``application/json`` body may hold one message, a batch (array), or several messages on
  separate lines (the official conformance fixture does this): each is relayed in order, the
  notifications and server requests as related to the call, and the response as its answer;
- a body that holds no response at all fails the call (-32603, or -32090 for an HTTP 5xx).

The hot path (:meth:`HttpCarrier.start_request`, gateway/upstreams/quick.py's
:class:`QuickExchange`): a request that finds a kept-alive connection idle is written at once and
its answer handled in the HTTP parser's callbacks, by the same rules (:meth:`HttpCarrier._answer`
for a JSON answer; an SSE answer's events relayed as they arrive, the response its answer, the rest
of the stream drained before the connection goes back to the pool, a stream that ends unanswered
resumed as gateway/upstreams/post_stream.py's ``resume`` does), with no task, coroutine or ``Response`` per call; a
kept-alive connection found closed before any byte of the answer is retried once, afresh, as
:meth:`ConnectionPool.request` retries. Otherwise (``initialize``, no idle connection) the request
goes the awaited way, :meth:`HttpCarrier.send`.

Credentials (issue 17): a request's own headers carry its credential; the gateway's identity toward the backend
(``identity``) goes on the requests that belong to no call (GET stream, notifications, DELETE). A caller's call
to a backend that keeps legacy sessions goes in a session of that caller's (gateway/upstreams/user_sessions.py),
the awaited way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from gateway import jsonrpc
from gateway.telemetry.context import OUTGOING_HTTP
from gateway.upstreams import get_stream, post_stream
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.upstreams.deadlines import Deadlines
from gateway.upstreams.egress import BackendEgress
from gateway.upstreams.flag import Flag
from gateway.upstreams.httpclient import (
    MAX_HEAD_BYTES,
    BodyTooLarge,
    ConnectError,
    ConnectionPool,
    HeadTooLarge,
    HttpError,
    encode_headers,
    target_of,
)
from gateway.upstreams.quick import QuickExchange
from gateway.upstreams.user_sessions import UserSessions, session_key

__all__ = ["HttpCarrier", "QuickExchange"]

log = logging.getLogger(__name__)

_HEADS = 256  # distinct header sets whose POST start is kept (HttpCarrier._heads)


class HttpCarrier(Carrier):
    def __init__(
        self,
        name: str,
        url: str,
        headers: dict[str, str],
        max_message_bytes: int,
        egress: BackendEgress | None = None,
        identity: Callable[[], Mapping[str, str] | None] | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        self._name = name
        self._source = f"backend {name}"  # who sent an event, for sse.message_of's warning
        # The gateway's own credential toward the backend, renewed meanwhile (gateway/upstreams/credentials.py):
        # on the requests that name no call (GET stream, notifications, DELETE); a request's comes with it.
        self._identity = identity
        self._url = url
        self._egress = egress  # proxy and TLS (issue 17); None: directly, the system's CAs
        self._base_headers = {
            **headers,
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        self._max = max_message_bytes
        self._max_head = max_head_bytes  # of a response's head (ADR 0023)
        self._pool: ConnectionPool | None = None
        self._drains: Deadlines  # made by open(), on the loop (before any quick exchange)
        self._target = target_of(url)
        self._block = b""
        self._head = b""  # the start of every POST without headers of its own (b"": to be made again)
        # The start of a POST per distinct set of a request's own headers (a modern request's routing
        # headers, a credential): encoded once, not per call. Emptied with _head; bounded.
        self._heads: dict[tuple[tuple[str, str], ...], bytes] = {}
        self.last_status: int | None = None  # of the latest exchange (era detection reads it)
        self._block_key: tuple[str | None, str | None] | None = None
        self._inbound: Inbound | None = None
        self._session_id: str | None = None
        self._protocol_version: str | None = None
        self._closed = Flag()  # ._closed.on: is_set() without a call, read by every call
        self._reason = "closed"
        self._get_task: asyncio.Task[None] | None = None
        self._background: set[asyncio.Task[None]] = set()
        # A caller's own session for calls made with the caller's credential (issue 17), when the backend
        # keeps legacy sessions: gateway/upstreams/user_sessions.py.
        self._users = UserSessions(name, lambda: self._pool, self._target, self._spawn, max_bytes=max_message_bytes)
        self._init_params: dict[str, Any] = {}  # of the shared initialize, replayed for a caller's session

    def describe(self) -> str:
        return f"http:{self._url}"

    async def open(self, inbound: Inbound) -> None:
        self._inbound = inbound
        route = self._egress.route(self._url) if self._egress else None
        self._pool = ConnectionPool(self._url, route=route, max_head_bytes=self._max_head)
        self._drains = Deadlines(asyncio.get_running_loop())  # answered SSE streams still being read

    def _headers(self, identity: bool = True) -> dict[str, str]:
        """The headers of every request; ``identity``: with the gateway's own credential (not on a request's
        POST, whose credential comes with the request)."""
        headers: dict[str, str] = dict(self._base_headers)
        if self._session_id:
            headers["mcp-session-id"] = self._session_id
        if self._protocol_version:
            headers["mcp-protocol-version"] = self._protocol_version
        if identity and self._identity is not None:
            headers.update(self._identity() or {})
        return headers

    def _header_block(self) -> bytes:
        """The encoded headers of every POST, rebuilt only when the session or version changes (and
        with them the start of every POST, ``_head``)."""
        key = (self._session_id, self._protocol_version)
        if self._block_key != key:
            self._block = encode_headers(self._headers(identity=False))
            self._block_key = key
            assert self._pool is not None
            self._head = self._pool.head("POST", self._target, self._block)
        return self._block

    def _plain_head(self) -> bytes:
        """``_head``, made again first when the session or the version changed since."""
        self._header_block()
        return self._head

    def _forget_head(self) -> None:
        """The session or the version changed: every POST's start is made again on its next use."""
        self._head = b""
        self._block_key = None
        self._heads.clear()

    def _die(self, reason: str) -> None:
        if not self._closed.is_set():
            self._reason = reason
            self._closed.set()

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self._pool is None or self._closed.on:
            raise CarrierClosed(self._reason)
        is_request = "method" in message and "id" in message
        body = jsonrpc.dumps(message)
        try:
            if is_request:
                await self._exchange(message, body, headers)
            else:
                response = await self._pool.request("POST", self._target, {**self._headers(), **(headers or {})}, body)
                await response.read()
                if response.status == 404 and self._session_id:
                    self._die("backend ended the session (404)")
                elif response.status >= 400:
                    log.warning("backend %s answered %s to a %s", self._name, response.status, message.get("method"))
        except ConnectError as exc:
            self._die(f"cannot connect: {exc}")
            if is_request:
                self._fail(message["id"], jsonrpc.BACKEND_UNAVAILABLE, f"backend {self._name} unreachable: {exc}")
            else:
                raise CarrierClosed(str(exc)) from None
        except HttpError as exc:
            if is_request:
                self._transport_failed(message["id"], exc)
            else:
                log.warning("backend %s: sending %s failed: %s", self._name, message.get("method"), exc)

    def _fail(self, rpc_id: Any, code: int, text: str) -> None:
        assert self._inbound
        self._inbound(jsonrpc.error(rpc_id, code, text), rpc_id)

    def _transport_failed(self, rpc_id: Any, exc: HttpError) -> None:
        """A request's exchange failed with no usable answer: a head over the limit is an answer too large
        (-32095, as a body over ``max_message_bytes`` is); anything else the backend's failure."""
        if isinstance(exc, HeadTooLarge):
            self._fail(rpc_id, jsonrpc.PAYLOAD_TOO_LARGE, f"backend {self._name} sent {exc}")
        else:
            self._fail(rpc_id, jsonrpc.BACKEND_UNAVAILABLE, f"backend {self._name} transport error: {exc}")

    def start_request(self, message: dict[str, Any], headers: Mapping[str, str] | None) -> QuickExchange | None:
        """Send a request now on an idle kept-alive connection, its answer handled in the HTTP
        parser's callbacks (no task and no :class:`Response`, for a JSON answer or an SSE one).
        None: no connection is idle (or this is the handshake's
        ``initialize``, whose answer carries the session): :meth:`send` it instead."""
        pool = self._pool
        if pool is None or self._closed.on:
            raise CarrierClosed(self._reason)
        if message.get("method") == "initialize" or (
            headers is not None and self._session_id and session_key(headers) is not None
        ):
            return None  # a caller's call on a legacy session backend goes in the caller's session: send()
        trace = OUTGOING_HTTP.get()  # the CLIENT span's traceparent while tracing is on (gateway/telemetry/)
        if trace is not None:
            headers = {**headers, **trace} if headers else trace
            head = pool.head("POST", self._target, self._header_block() + encode_headers(headers))  # one per call
        elif headers:
            key = tuple(headers.items())
            found = self._heads.get(key) if self._head else None  # none while the session or version changed
            if found is None:
                found = pool.head("POST", self._target, self._header_block() + encode_headers(headers))
                if len(self._heads) >= _HEADS:
                    self._heads.clear()
                self._heads[key] = found
            head = found
        else:
            head = self._head or self._plain_head()  # b"" once the session or the version changed
        exchange = QuickExchange(self, pool, message, headers)
        try:
            body = orjson.dumps(message)
        except orjson.JSONEncodeError:
            body = jsonrpc.dumps(message)  # what orjson refuses (integers beyond 64 bits), written exactly
        try:
            conn = pool.try_start(head, body, exchange)
        except HttpError:
            return None  # closed meanwhile: send() says so as usual
        if conn is None:
            return None
        exchange.conn = conn
        return exchange

    def _quick_resume(self, exchange: QuickExchange, last_id: str | None, retry_ms: int | None) -> None:
        """A quick exchange's stream ended before the response: a task resumes it, as :meth:`send` would."""
        exchange.task = self._spawn(post_stream.resume(self, exchange.message["id"], last_id, retry_ms))

    def _quick_failed(self, exchange: QuickExchange, exc: HttpError, nothing_received: bool) -> None:
        """A quick exchange's connection failed. Nothing received on a kept-alive connection (the
        backend had closed it meanwhile): nothing was processed, so it is sent once more, afresh."""
        if nothing_received and not self._closed.is_set() and self._pool is not None and not self._pool.closed:
            exchange.task = self._spawn(self._resend(exchange.message, exchange.headers))
            return
        self._transport_failed(exchange.message["id"], exc)

    async def _resend(self, message: dict[str, Any], headers: Mapping[str, str] | None) -> None:
        try:
            await self.send(message, headers)
        except CarrierClosed as exc:
            self._fail(message["id"], jsonrpc.BACKEND_UNAVAILABLE, f"backend {self._name} is unavailable: {exc}")

    async def _exchange(
        self, message: dict[str, Any], body: bytes, headers: Mapping[str, str] | None, again: bool = False
    ) -> None:
        assert self._pool and self._inbound
        rpc_id = message["id"]
        given = headers
        key = session_key(headers) if self._session_id and message.get("method") != "initialize" else None
        trace = OUTGOING_HTTP.get()  # the CLIENT span's traceparent while tracing is on (gateway/telemetry/)
        if trace is not None:
            headers = {**headers, **trace} if headers else trace
        if key is not None:
            block = await self._caller_block(key, headers or {})
        else:
            block = self._header_block() + encode_headers(headers) if headers else self._header_block()
            if message.get("method") == "initialize" and isinstance(message.get("params"), dict):
                self._init_params = message["params"]
        response = await self._pool.request("POST", self._target, block, body)
        if key is not None and response.status == 404:
            # The backend ended (or never knew) the caller's session and did not process the request: it is
            # sent once more, in a new session of the caller's.
            response.release()
            self._users.forget(key)
            if not again:
                await self._exchange(message, body, given, again=True)
                return
            self._fail(rpc_id, jsonrpc.BACKEND_UNAVAILABLE, f"backend {self._name} ended the caller's session")
            return
        if message.get("method") == "initialize":
            sid = response.headers.get("mcp-session-id")
            if sid:
                self._session_id = sid
                self._forget_head()
        status = response.status
        self.last_status = status
        if status < 400 and response.headers.get("content-type", "").startswith("text/event-stream"):
            await post_stream.relay(self, message, rpc_id, response)
            return
        try:
            data = await response.read(self._max)
        except BodyTooLarge as exc:
            self._fail(rpc_id, jsonrpc.PAYLOAD_TOO_LARGE, f"backend {self._name} sent {exc}")
            return
        finally:
            response.release()
        self._answer(message, status, data)

    async def _caller_block(self, key: str, headers: Mapping[str, str]) -> bytes:
        """The headers of a caller's request in the caller's own session (opened on first need)."""
        base = self._headers(identity=False)
        del base["mcp-session-id"]
        sid = await self._users.session(key, base, headers, self._init_params)
        if sid:
            base["mcp-session-id"] = sid
        return encode_headers({**base, **headers})

    def _answer(self, message: dict[str, Any], status: int, data: bytes) -> None:
        """A POST's answer that is no stream: its messages relayed, the response as the call's answer."""
        assert self._inbound
        rpc_id = message["id"]
        if status == 404 and self._session_id and message.get("method") != "initialize":
            self._die("backend ended the session (404)")
            self._fail(rpc_id, jsonrpc.BACKEND_UNAVAILABLE, f"backend {self._name} ended its session")
            return
        if len(data) > self._max:
            self._fail(rpc_id, jsonrpc.PAYLOAD_TOO_LARGE, f"backend {self._name} sent {len(data)} bytes")
            return
        try:
            only: Any = orjson.loads(data)
        except orjson.JSONDecodeError:
            only = None
        if (
            isinstance(only, dict)
            and "method" not in only
            and ("result" in only or isinstance(only.get("error"), dict))
        ):
            # The common case: one response (_is_response) and nothing else.
            if only.get("id") is None or ("error" in only and only.get("id") != rpc_id):
                only["id"] = rpc_id  # the one request of this POST is what it answers
            if message["method"] == "initialize":
                self._note_init(message, only)
            self._inbound(only, rpc_id)
            return
        messages = _json_messages(data)
        if any(_is_response(item) for item in messages):
            for item in messages:
                if _is_response(item):
                    if item.get("id") is None or ("error" in item and item.get("id") != rpc_id):
                        item["id"] = rpc_id  # the one request of this POST is what it answers
                    self._note_init(message, item)
                    self._inbound(item, rpc_id)
                elif isinstance(item.get("method"), str):
                    self._inbound(item, rpc_id)
        else:
            for item in messages:
                if isinstance(item.get("method"), str):
                    self._inbound(item, rpc_id)  # notifications before the failure, not lost
            text = f"backend {self._name} answered HTTP {status}: {data[:200].decode('utf-8', 'replace')}"
            if 300 <= status < 400:  # never followed: a redirect could move a call and its credentials elsewhere
                text = f"backend {self._name} answered a redirect (HTTP {status}); MCP calls do not follow redirects: "
                text += "configure the URL it points to"
            elif status == 407:  # plain http through a proxy (absolute form): the proxy itself answered
                text = f"the proxy in front of backend {self._name} wants credentials (HTTP 407): put user:password "
                text += "in its proxy URL, or check them"
            self._fail(rpc_id, jsonrpc.BACKEND_UNAVAILABLE if status >= 500 else jsonrpc.INTERNAL_ERROR, text)

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _note_init(self, message: dict[str, Any], response: dict[str, Any]) -> None:
        if message.get("method") == "initialize" and isinstance(response.get("result"), dict):
            version = response["result"].get("protocolVersion")
            if isinstance(version, str):
                self._protocol_version = version
                self._forget_head()

    async def ready(self) -> None:
        assert self._pool and self._inbound
        pool = self._pool

        def session_ended() -> bool:
            if self._session_id:
                self._die("backend ended the session (404)")
                return True
            return False

        stream = get_stream.listen(
            self._name,
            lambda headers: pool.request("GET", self._target, headers),
            self._headers,
            self._inbound,
            self._max,
            self._closed,
            session_ended,
        )
        self._get_task = asyncio.create_task(stream, name=f"http-get-{self._name}")

    async def wait_closed(self) -> str:
        await self._closed.wait()
        return self._reason

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._get_task is not None:
            self._get_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._get_task
        if self._pool is not None:
            await self._users.close()
            if self._session_id and not self._closed.is_set():
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(2.0):
                        response = await self._pool.request("DELETE", self._target, self._headers())
                    response.release()
            await self._pool.aclose()
        self._die("closed")


def _is_response(message: dict[str, Any]) -> bool:
    """A JSON-RPC response; ``{"error": "Unauthorized"}`` from a web framework is none."""
    return "method" not in message and ("result" in message or isinstance(message.get("error"), dict))


def _json_messages(data: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an ``application/json`` body: one object, an array of them, or
    several on separate lines. What does not parse as JSON objects is skipped."""
    if not data.strip():
        return []
    try:
        values: list[Any] = [orjson.loads(data)]
    except orjson.JSONDecodeError:
        values = []
        for line in data.splitlines():
            if line.strip():
                with contextlib.suppress(orjson.JSONDecodeError):
                    values.append(orjson.loads(line))
    messages: list[dict[str, Any]] = []
    for value in values:
        items = value if isinstance(value, list) else [value]
        messages.extend(item for item in items if isinstance(item, dict))
    return messages
