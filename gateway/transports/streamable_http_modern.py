"""The 2026-07-28 ("modern") side of the ``/mcp`` endpoint: stateless, one request per exchange.

Entered from :class:`~gateway.transports.streamable_http.StreamableHttpDoor` for a POST without a
session whose version or ``_meta`` says modern. Each request brings its own client envelope in
``params._meta``; the gateway checks it and the routing headers, runs the request through the same
router as every other client (on a session that lives for this exchange only), and stamps the
result. ``server/discover`` and ``subscriptions/listen`` are answered here.
"""

from __future__ import annotations

import functools
import logging
import operator
from typing import TYPE_CHECKING, Any, Protocol

from adapters import codecs, mcp_modern
from gateway import errors, jsonrpc, sse
from gateway.channels import ChannelOverflow, guarded_write
from gateway.routing.listen import REFUSED_META_KEY, ListenAdmission
from gateway.sessions import ClientSession
from gateway.transports.http_common import (
    Receive,
    Scope,
    Send,
    drop_hook,
    headers_of,
    http_status_of,
    send_bytes,
    send_rpc_error,
    send_unauthorized,
    text,
    watch_disconnect,
)
from policies.auth import AuthError, Credentials

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gateway.config import Limits
    from gateway.federation import Merged, View
    from gateway.mgp.server import MgpServer
    from gateway.replicas.owner_relay import ParkedRouting
    from gateway.routing.catalog import Catalog
    from gateway.routing.router import Identity
    from gateway.sessions import SessionStore
    from gateway.transports.front_desk import FrontDesk

log = logging.getLogger(__name__)

TRANSPORT = "modern"
LISTEN_TRANSPORT = "modern-listen"


_IS_PARAM_HEADER = operator.methodcaller("startswith", mcp_modern.PARAM_HEADER_PREFIX.encode())
# Header names seen on modern requests that are not ``Mcp-Param-*`` ones: a request whose names are
# all known passes with one subset test in C, where ``bytes.startswith`` per name cost ~1.6k
# instructions each (its arguments are parsed the old way). Bounded: names a client invents stop
# being remembered once it is full, and are then checked one by one.
_PLAIN_NAMES: set[bytes] = set()
_PLAIN_NAMES_MAX = 256
_all_plain = _PLAIN_NAMES.issuperset  # (the set's own test: cheaper than ``headers.keys() <= _PLAIN_NAMES``)
# A tool's declared Mcp-Param-* headers (mcp_modern.param_header_paths and its cache, read inline by handle).
_PATHS_CACHE = mcp_modern.PATHS_CACHE
_paths = mcp_modern.param_header_paths


def _sends_param_headers(headers: dict[bytes, bytes]) -> bool:
    """Whether any of the request's headers is an ``Mcp-Param-*`` one."""
    if _all_plain(headers):
        return False
    found = False
    for name in headers:
        if _IS_PARAM_HEADER(name):
            found = True
        elif len(_PLAIN_NAMES) < _PLAIN_NAMES_MAX:
            _PLAIN_NAMES.add(name)
    return found


def _finish(method: str, response: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A modern answer's HTTP status, and its result stamped (``resultType``, caching hints)."""
    if "result" in response:
        return 200, {**response, "result": mcp_modern.stamp_result(method, response["result"])}
    return http_status_of(response, modern=True), response


def _finish_call(response: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``_finish`` of a ``tools/call`` (never cacheable): a complete result gets ``resultType`` alone."""
    result = response.get("result")
    if type(result) is dict and "resultType" not in result:
        # The response is the router's own (forwarding.finish builds it per call): its result is replaced
        # in place, one dict copy less. The result itself may be a backend's shared object: copied.
        response["result"] = {**result, "resultType": "complete"}
        return 200, response
    return _finish("tools/call", response)


_FINISH_CALL = _finish_call
# What handle reads per request, as module globals (one lookup each; ``Shape.REQUEST`` also skips the
# enum metaclass's ``__getattr__`` hook).
_REQUEST = jsonrpc.Shape.REQUEST
_read_common = mcp_modern.read_common
_new_exchange = ClientSession.exchange
_MODERN = codecs.MODERN
_only_envelope = mcp_modern.ENVELOPE_KEYS.issuperset


def _reject(send: Send, exc: mcp_modern.ModernRejection, rpc_id: Any) -> Awaitable[None]:
    return send_rpc_error(send, exc.status, exc.code, exc.message, rpc_id, data=exc.data)


def _check_param_headers(merged: Merged, headers: dict[bytes, bytes], message: dict[str, Any]) -> None:
    """A ``tools/call``'s ``Mcp-Param-*`` headers against its tool's ``x-mcp-header`` arguments."""
    params = message["params"]  # read_envelope: an object; check_routing: its name a string equal to Mcp-Name
    tool = merged.by_key.get(params["name"])
    schema = tool.get("inputSchema") if tool is not None else None
    if not _sends_param_headers(headers) and not mcp_modern.param_header_paths(schema):
        return  # the common case: nothing declared, nothing sent
    sent = {k.decode("latin-1"): headers[k].decode("latin-1") for k in filter(_IS_PARAM_HEADER, headers)}
    mcp_modern.check_param_headers(sent, schema, params.get("arguments"))


class RunRequest(Protocol):
    """How the Streamable HTTP door runs one request on a session and answers it (JSON, or SSE as
    soon as something precedes the result): ``RequestRunner.run`` (request_runner.py)."""

    async def __call__(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: ClientSession,
        message: dict[str, Any],
        extra: list[tuple[str, str]],
        finish: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]] | None = None,
        cancel_on_disconnect: bool = False,
    ) -> None: ...


class ModernExchange:
    def __init__(
        self,
        *,
        desk: FrontDesk,
        sessions: SessionStore,
        catalog: Catalog,
        identity: Identity,
        mgp: MgpServer,
        listen_admission: ListenAdmission,
        limits: Limits,
        parked: ParkedRouting | None = None,
    ) -> None:
        self._desk = desk
        self._sessions = sessions
        self._catalog = catalog
        self._identity = identity
        self._mgp = mgp
        self._listen_admission = listen_admission
        self._limits = limits
        self._parked = parked  # many replicas: a retry of a call parked on another replica runs there

    def handle(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        view: View,
        message: dict[str, Any],
        shape: jsonrpc.Shape,
        run: RunRequest,
        headers: dict[bytes, bytes] | None = None,
        version: str | None = None,
    ) -> Awaitable[None]:
        """Answer one modern request; ``run`` runs the ones that go through the router.

        ``headers``: the request's header table (``http_common.headers_of``) and ``version`` its
        MCP-Protocol-Version, if the door read them already (else read here).

        Returns what answers it, to be awaited: the checks are synchronous, and a request that
        passes them is ``run``'s coroutine itself, so the exchange holds no frame of this method
        while it runs (every wake-up of the call would pass through it)."""
        if shape is not _REQUEST:
            # The modern era defines no client-to-server notifications or responses on this wire.
            return send_bytes(send, 202, b"")
        rpc_id = message["id"]
        if headers is None:
            # Names are lowercase in ASGI; a repeated header keeps its last value.
            headers = headers_of(scope)
            version = text(headers.get(b"mcp-protocol-version"))
        try:
            credentials = self._desk.authenticate(scope)
        except AuthError as exc:
            return send_unauthorized(send, scope, exc.reason, exc.error, rpc_id)
        # Only the few headers this era reads are decoded.
        mcp_method, mcp_name = headers.get(b"mcp-method"), headers.get(b"mcp-name")
        envelope = _read_common(message, version, mcp_method, mcp_name)
        method = message["method"]
        if envelope is None:  # not the common shape (a named tools/call, prompts/get or resources/read)
            try:
                envelope = mcp_modern.read_envelope(message, version)
                if version is None:
                    # Required on every POST (transports/streamable-http, "Protocol Version Header"); the
                    # body said modern, so the request is not a pre-2025-06-18 one that may omit it. The
                    # official SDK servers refuse it the same way (a missing header is a mismatch).
                    raise mcp_modern.ModernRejection(
                        400, errors.HEADER_MISMATCH, "MCP-Protocol-Version header is required"
                    )
                mcp_modern.check_routing(
                    message,
                    mcp_method.decode("latin-1") if mcp_method is not None else None,
                    mcp_name.decode("latin-1") if mcp_name is not None else None,
                )
            except mcp_modern.ModernRejection as exc:
                return _reject(send, exc, rpc_id)
            if method in mcp_modern.REMOVED_METHODS:
                return send_rpc_error(send, 404, jsonrpc.METHOD_NOT_FOUND, f"Method not found: {method}", rpc_id)
        # A session for this one exchange: the client's envelope stands in for initialize.
        version, capabilities, client_info, log_level = envelope  # (a call with *envelope is not specialized)
        session = _new_exchange(
            TRANSPORT,
            view,
            self._desk.principal_of(credentials),
            self._limits,
            credentials,
            version,
            capabilities,
            client_info,
            log_level,
            _MODERN,
        )
        if capabilities.get("extensions"):
            self._mgp.adopt(session)  # MGP §2.6: this request's client capabilities may declare it
        if method == "server/discover":
            return self._discover(send, view, session, mcp_modern.Envelope(*envelope), rpc_id)
        if method == "subscriptions/listen":
            return self._listen(scope, receive, send, view, message, mcp_modern.Envelope(*envelope), credentials)
        if self._parked is not None and (owner := self._parked.owner(scope, message)) is not None:
            return self._parked.forward(owner, scope, message, send)
        if method == "tools/call":
            merged = view.merged.get("tools")
            if not merged:
                return self._call_after_catalog(scope, receive, send, view, session, message, headers, run)
            tool = merged.by_key.get(message["params"]["name"])
            declared = None
            if tool is not None:
                # param_header_paths's cache hit, inline (one Python call less per tools/call).
                schema = tool.get("inputSchema")
                cached = _PATHS_CACHE.get(id(schema))
                declared = cached[1] if cached is not None and cached[0] is schema else _paths(schema)
            # The common case, without a call: no Mcp-Param-* header sent, none declared by the tool.
            if (not _all_plain(headers) and _sends_param_headers(headers)) or declared:
                try:
                    _check_param_headers(merged, headers, message)
                except mcp_modern.ModernRejection as exc:
                    return _reject(send, exc, rpc_id)
            finish = _FINISH_CALL
        else:
            finish = functools.partial(_finish, method)
        # The envelope was read into the session; routing and backends go without it (detach_envelope,
        # inline for the common case: nothing in _meta but the envelope).
        params = message["params"]
        if _only_envelope(params["_meta"]):
            del params["_meta"]
        else:
            mcp_modern.detach_envelope(message)
        return run(scope, receive, send, session, message, [], finish, True)  # (positional: a specialized call)

    async def _call_after_catalog(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        view: View,
        session: ClientSession,
        message: dict[str, Any],
        headers: dict[bytes, bytes],
        run: RunRequest,
    ) -> None:
        """A ``tools/call`` before the view's tool list is merged: merge it, then check and run."""
        merged = await self._catalog.merged(view, "tools", session.principal)  # per-principal lists: the caller's
        try:
            _check_param_headers(merged, headers, message)
        except mcp_modern.ModernRejection as exc:
            await _reject(send, exc, message["id"])
            return
        mcp_modern.detach_envelope(message)
        await run(scope, receive, send, session, message, [], finish=_FINISH_CALL, cancel_on_disconnect=True)

    async def _discover(
        self, send: Send, view: View, session: ClientSession, envelope: mcp_modern.Envelope, rpc_id: Any
    ) -> None:
        """``server/discover``, the modern era's initialize: held to the same capability
        (mcp/request:initialize)."""
        denied = await self._listen_admission.decide(session, session.principal, "initialize", {})
        if denied is not None:
            status = http_status_of(jsonrpc.error(rpc_id, denied.code, denied.reason), modern=True)
            await send_rpc_error(send, status, denied.code, denied.reason, rpc_id, data=denied.data)
            return
        result = self.discover(view, envelope.capabilities)
        await send_bytes(send, 200, jsonrpc.dumps(jsonrpc.result(rpc_id, result)))

    def discover(self, view: View, client_capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
        identity = self._identity(view)
        result: dict[str, Any] = {
            "supportedVersions": list(mcp_modern.MODERN_VERSIONS),
            "capabilities": identity["capabilities"],
            "resultType": "complete",
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {mcp_modern.SERVER_INFO_KEY: identity["serverInfo"]},
        }
        if identity.get("instructions"):
            result["instructions"] = identity["instructions"]
        if client_capabilities:
            self._mgp.on_discover(client_capabilities, result)
        return result

    # ---- subscriptions/listen ------------------------------------------------------------------

    async def _listen(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        view: View,
        message: dict[str, Any],
        envelope: mcp_modern.Envelope,
        credentials: Credentials,
    ) -> None:
        """A long-lived stream of the notifications the client opted in to, each tagged with the
        subscription id (the listen request's id). It replaces the legacy GET stream and
        resources/subscribe."""
        rpc_id = message["id"]
        listener = self._desk.open_session(LISTEN_TRANSPORT, view, credentials)
        listener.protocol_version = envelope.version
        listener.client_capabilities = envelope.capabilities
        listener.initialized = True
        listener.codec = codecs.MODERN
        try:
            grant = await self._listen_admission.admit(listener, listener.principal, message)
        except jsonrpc.RpcError as exc:
            self._sessions.end(listener)
            await send_rpc_error(
                send, errors.http_status(exc.code, modern=True), exc.code, exc.message, rpc_id, data=exc.data
            )
            return
        methods = grant.methods
        channel = listener.standalone
        channel.attached = True
        channel.on_overflow = drop_hook(scope)
        gone = watch_disconnect(scope, receive)
        meta = {mcp_modern.SUBSCRIPTION_ID_KEY: rpc_id}
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache, no-transform")],
                }
            )
            ack_meta: dict[str, Any] = {**meta, REFUSED_META_KEY: grant.refused} if grant.refused else meta
            ack = jsonrpc.notification(
                "notifications/subscriptions/acknowledged", {"notifications": grant.honored, "_meta": ack_meta}
            )
            await send({"type": "http.response.body", "body": sse.encode(jsonrpc.dumps(ack)), "more_body": True})
            after = channel.last_seq
            keepalive = self._limits.sse_keepalive_s
            while True:
                # One future while idle (gateway/channels.py): no task, no asyncio.wait per keep-alive.
                batch = await channel.next_batch(after, keepalive, gone)
                if batch is None:
                    return
                if not batch and not channel.closed:
                    await send({"type": "http.response.body", "body": sse.KEEPALIVE, "more_body": True})
                    continue
                if not batch:
                    # The listener ended on the gateway's side (shutdown ends every session): end the response.
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                    return
                after = batch[-1][0]
                events = []
                for _, note in batch:
                    if note.get("method") not in methods:
                        continue
                    note_params = p if isinstance(p := note.get("params"), dict) else {}
                    tagged = {**note, "params": {**note_params, "_meta": {**(note_params.get("_meta") or {}), **meta}}}
                    events.append(sse.encode(jsonrpc.dumps(tagged)))
                if events:
                    await guarded_write(
                        channel, send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
                    )
        except (ChannelOverflow, OSError):
            log.info("subscriptions/listen stream %r ended: the client stopped reading", rpc_id)
        finally:
            gone.cancel()
            channel.attached = False
            self._sessions.end(listener)
