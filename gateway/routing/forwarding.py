"""Forwarding a routed call to its backend, and its answer back under the client's id and names.

Invariants: a call is forwarded only to a backend that is ready (one still making its first
connection is waited for briefly); a session has at most ``limits.max_inflight_per_session`` calls
in flight (the decision is ``policies/load.py``'s); every call is recorded in
``session.inflight`` while it runs, so that a cancellation or the session's end reaches the
backend; the answer carries the client's id, the client's view of names and URIs, and only the
fields of the client's era. A legacy client's call to a dual-era backend goes to the backend's
legacy-era connection (gateway/upstreams/affinity.py); requests for input that still cross eras
are the era bridge's (gateway/eras.py). A plain client's ``_mgp`` never reaches a backend (it did not
negotiate MGP, §2.4); an MGP client's call is prepared, and served as a stream when it asks, by
gateway/mgp/streaming.py (MGP §12) — the only extra step of a plain client's call is one check.
A ``tools/call`` that involves MCPC (a backend that speaks it, or an MCPC client's call) is planned
and settled by gateway/mcpc/calls.py: held until its task ends, answered with ``created`` and
callbacks, or run by the gateway as a task. Every call is timed (``mcp.client.operation.duration``);
with tracing on it is a CLIENT span whose W3C context goes to the backend in ``params._meta`` (and
in the HTTP headers of an HTTP backend's request), gateway/telemetry/. A call to a backend whose credential
is dynamic (``backends.NAME.auth``, issue 17) first gets its credential (gateway/upstreams/credentials.py: the
caller's exchanged token, the gateway's own, or the caller's configured headers), bound to that call's
requests only; when it cannot be had the call fails with -32096, never with a shared credential.
A call to a ``sharing: per-principal`` backend goes to the caller's own child
(gateway/upstreams/principal_pool.py), spawned only now that the chain admitted the call, and only if
the pool's policy admits the caller.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Literal, overload

from adapters.mgp import strip as mgp_strip
from gateway import jsonrpc
from gateway.channels import Channel
from gateway.federation import rewrite_result
from gateway.routing.call import Call, CallSink, PolicyDenied, Routed
from gateway.routing.catalog import STARTUP_GRACE_S
from gateway.sessions import ASKABLE, CancelOnAsk
from gateway.telemetry.conventions import error_type_of, error_type_of_exception
from gateway.upstreams.principal_pool import PoolRefused

if TYPE_CHECKING:
    from gateway.eras import EraBridge
    from gateway.mcpc.calls import McpcCalls, Plan
    from gateway.metrics import Metrics
    from gateway.mgp.streaming import StreamedCall, Streams
    from gateway.sessions import ClientSession
    from gateway.telemetry.observe import ClientSpan, Tracing
    from gateway.upstreams.affinity import EraAffinity
    from gateway.upstreams.connection import BackendConnection
    from gateway.upstreams.credentials import UpstreamCredentials
    from gateway.upstreams.pending import Pending
    from gateway.upstreams.principal_pool import PrincipalPool
    from policies.load import LoadPolicy


def begin_call(
    session: ClientSession,
    client_id: Any,
    conn: BackendConnection,
    method: str,
    params: dict[str, Any] | None,
    channel: Channel,
    sink: CallSink | None = None,
) -> Pending:
    """Send the request and record it in ``session.inflight`` (so that a cancellation or the session's
    end reaches the backend); the caller awaits ``conn.call`` and takes the entry out."""
    if sink is None:
        pending = conn.begin(method, params, CallSink(session, channel))
    else:
        pending = conn.begin(method, params, sink)
        sink.began(conn, pending)
    session.inflight[client_id] = (conn, pending)
    return pending


def never_asks(session: ClientSession, conn: BackendConnection, params: dict[str, Any] | None) -> bool:
    """Whether a modern client's call is one its client can never be asked for (it declared no sampling,
    elicitation or roots) toward a legacy backend, and not the retry of a call that needed input: such
    a call is awaited in the exchange's own task (``Forwarder._awaited``), never parked (gateway/eras.py)."""
    return (
        conn.era != "modern"
        and ASKABLE.isdisjoint(session.client_capabilities)
        and (params is None or ("requestState" not in params and "inputResponses" not in params))
    )


async def call_backend(
    session: ClientSession,
    client_id: Any,
    conn: BackendConnection,
    method: str,
    params: dict[str, Any] | None,
    channel: Channel,
    sink: CallSink | None = None,
) -> dict[str, Any]:
    """One request to the backend on behalf of ``session``; related messages go to ``channel``
    (or to ``sink``, which then hears of the upstream id: an MGP stream's, gateway/mgp/streaming.py)."""
    pending = begin_call(session, client_id, conn, method, params, channel, sink)
    try:
        return await conn.call(pending)
    finally:
        if session.inflight.get(client_id, (None, None))[1] is pending:
            del session.inflight[client_id]


def finish(
    session: ClientSession, client_id: Any, backend: str, method: str, response: dict[str, Any]
) -> dict[str, Any]:
    """The backend's answer under the client's id, with names rewritten for the client's view.
    A legacy client does not see the modern era's result fields."""
    if "result" in response:
        result = response["result"]
        if session.mgp is None:  # a plain MCP client never sees a backend's MGP fields (issue 12)
            result = mgp_strip.strip_result(result)
        codec = session.codec
        if not codec.modern:  # a modern client keeps every field: no call to ask the codec
            result = codec.result(result)
        namer = session.view.namer
        if namer.prefixed:  # only a prefixing view renames what a result names
            result = rewrite_result(namer, backend, method, result)
        return {"jsonrpc": "2.0", "id": client_id, "result": result}
    error = response.get("error")
    return {"jsonrpc": "2.0", "id": client_id, "error": error if isinstance(error, dict) else {}}


# Methods forwarded by name (router.py); anything else reached a backend untouched and is "other"
# in the duration metric, whose label values stay few whatever clients send.
_METRIC_METHODS = frozenset(
    {"tools/call", "prompts/get", "resources/read", "resources/subscribe", "resources/unsubscribe"}
    | {"completion/complete"}
)


class Forwarder:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        load: LoadPolicy,
        eras: EraBridge,
        affinity: EraAffinity,
        streams: Streams | None = None,
        mcpc: McpcCalls | None = None,
        metrics: Metrics | None = None,
        tracing: Tracing | None = None,
        upstream: UpstreamCredentials | None = None,
        pools: Mapping[str, PrincipalPool] | None = None,
    ) -> None:
        self._connections = connections
        # Per-call credentials toward backends whose auth is dynamic (gateway/upstreams/credentials.py).
        self._upstream = upstream
        # per-principal stdio backends (issue 17): a call goes to its caller's child
        self._pools = pools if pools is not None else {}
        self._load = load
        self._eras = eras
        self._affinity = affinity
        self._streams = streams  # MGP §12 (gateway/mgp/streaming.py): an MGP client's calls only
        self._mcpc = mcpc  # MCPC tasks (gateway/mcpc/calls.py): calls that involve MCPC only
        self._metrics = metrics  # mcp.client.operation.duration
        self._tracing = tracing  # a CLIENT span per call, its context in _meta and HTTP headers (or None)

    def forward(
        self, call: Call, backend: str, params: dict[str, Any] | None, bound: bool = False
    ) -> Awaitable[Routed]:
        """The call's exchange with ``backend``: an awaitable of its :class:`Routed` answer.

        Not a coroutine of its own: what needs no await is done here, and a plain legacy call's
        exchange is one coroutine (:meth:`_awaited`, which times it too), one await layer less per call."""
        upstream = self._upstream
        if not bound and upstream is not None and backend in upstream.providers:
            return self._forward_bound(call, backend, params, upstream)
        if backend in self._pools:
            return self._forward_child(call, backend, params)
        conn = self._connections[backend]
        if conn.state != "ready":
            return self._forward_when_ready(call, backend, params, conn)
        return self._forward_to(call, backend, params, conn)

    async def _forward_bound(
        self, call: Call, backend: str, params: dict[str, Any] | None, upstream: UpstreamCredentials
    ) -> Routed:
        # The call's credential toward this backend (may exchange the caller's token; a failure is the
        # caller's clear error, never a shared credential), bound to this call's requests only.
        token = await upstream.bind(backend, call.principal.name)
        try:
            return await self.forward(call, backend, params, True)
        finally:
            upstream.unbind(token)

    async def _forward_child(self, call: Call, backend: str, params: dict[str, Any] | None) -> Routed:
        conn = await self._child(call, backend)
        if conn.state != "ready":
            return await self._forward_when_ready(call, backend, params, conn)
        return await self._forward_to(call, backend, params, conn)

    async def _forward_when_ready(
        self, call: Call, backend: str, params: dict[str, Any] | None, conn: BackendConnection
    ) -> Routed:
        """A backend not ready: one still making its first connection is waited for briefly."""
        if not (
            conn.first_attempt_pending and await conn.wait_ready(min(STARTUP_GRACE_S, conn.config.connect_timeout_s))
        ):
            raise jsonrpc.RpcError(
                jsonrpc.BACKEND_UNAVAILABLE,
                f"backend {backend} is unavailable: {conn.last_error or conn.state}",
            )
        return await self._forward_to(call, backend, params, conn)

    def _forward_to(
        self, call: Call, backend: str, params: dict[str, Any] | None, conn: BackendConnection
    ) -> Awaitable[Routed]:
        """The call to a ready connection (its load checked here, before anything is sent)."""
        session, event = call.session, call.event
        load = self._load.forward_call(len(session.inflight))
        if not load.allowed:
            raise PolicyDenied(load, backend)
        method = event.method or ""
        if params is not None and "_meta" in params:
            params = mgp_strip.without_client_grants(params)  # MGP §3.8: only the kernel grants
        stream: StreamedCall | None = None
        if session.mgp is not None:
            if self._streams is not None:
                params, stream = self._streams.prepare(call, backend, method, params)
        elif params is not None and "_mgp" in params:
            params = mgp_strip.strip({"params": params})["params"]  # a plain client did not negotiate MGP
        mcpc = self._mcpc
        if mcpc is not None and method == "tools/call" and params is not None and mcpc.involved(call, backend):
            return self._forward_mcpc(call, backend, params, conn, method, stream, mcpc)
        if stream is None and self._tracing is None:
            # (not codec.modern: codec.asks_mid_request, read without its property)
            if not session.codec.modern or never_asks(session, conn, params):
                return self._awaited(call, conn, backend, method, params, None, True)  # timed there: no wrapper
        return self._exchange(call, conn, backend, method, params, stream, None)

    async def _forward_mcpc(
        self,
        call: Call,
        backend: str,
        params: dict[str, Any],
        conn: BackendConnection,
        method: str,
        stream: StreamedCall | None,
        mcpc: McpcCalls,
    ) -> Routed:
        """MCPC (gateway/mcpc/calls.py): a task of an MCPC backend, or an MCPC client's call."""
        sink = stream.sink if stream is not None else None
        params, plan = await mcpc.plan(call, backend, conn, params, sink or CallSink(call.session, call.channel))
        if plan is not None and plan.task.gateway_run:
            if stream is None:

                def send(inner: Call, run_params: dict[str, Any], run_sink: CallSink) -> Awaitable[dict[str, Any]]:
                    return self._send(inner, conn, backend, method, run_params, run_sink)

                return mcpc.run(call, plan, params, send)
            mcpc.forget(plan)  # an MGP stream is its own way of reporting progress
            plan = None
        return await self._exchange(call, conn, backend, method, params, stream, plan)

    async def _exchange(
        self,
        call: Call,
        conn: BackendConnection,
        backend: str,
        method: str,
        params: dict[str, Any] | None,
        stream: StreamedCall | None,
        plan: Plan | None,
    ) -> Routed:
        """The exchange, timed (``mcp.client.operation.duration``), in a span when tracing."""
        span: ClientSpan | None = None
        if self._tracing is not None:
            span, params = self._tracing.client(backend, conn, method, params)
        sink = stream.sink if stream is not None else None
        answer = self._send(call, conn, backend, method, params, sink)
        if stream is not None or plan is not None:
            answer = self._settle(call, answer, stream, plan)
        started = time.perf_counter()
        try:
            response = await answer
        except BaseException as exc:
            error_type = error_type_of_exception(exc)
            raise
        else:
            error_type = error_type_of(response)
        finally:
            self._observe(method, backend, error_type, started)
            if span is not None:
                span.end(error_type)
        return Routed(response, backend, error_type)

    def _observe(self, method: str, backend: str, error_type: str, started: float) -> None:
        if self._metrics is not None:
            label = method if method in _METRIC_METHODS else "other"
            self._metrics.observe_client(label, backend, error_type, time.perf_counter() - started)

    async def _child(self, call: Call, backend: str) -> BackendConnection:
        """The caller's own child of a per-principal backend (spawned now if needed: the chain has
        admitted this call; the pool's policy still refuses anonymous callers and principals without
        an environment, and a full pool of busy children)."""
        load = self._load.forward_call(len(call.session.inflight))
        if not load.allowed:
            raise PolicyDenied(load, backend)  # decided before a child is spawned for a call refused anyway
        method = call.event.method
        if method in ("resources/subscribe", "resources/unsubscribe"):
            raise jsonrpc.RpcError(
                jsonrpc.METHOD_NOT_FOUND, f"{method} is not offered by per-principal backend {backend}"
            )
        try:
            return (await self._pools[backend].child(call.principal)).conn
        except PoolRefused as refused:
            raise PolicyDenied(refused.decision, backend) from None

    async def _settle(
        self, call: Call, answer: Awaitable[dict[str, Any]], stream: StreamedCall | None, plan: Plan | None
    ) -> dict[str, Any]:
        """The answer of a call that an MGP stream (§12) or an MCPC task follows to its end."""
        mcpc = self._mcpc
        try:
            response = await answer
            if plan is not None:
                assert mcpc is not None
                response = await mcpc.settle(call, plan, response)  # a held call waits for its task here
        except BaseException:
            if plan is not None:
                assert mcpc is not None
                mcpc.forget(plan)  # the call failed (or was cancelled): its task has nobody to tell
            raise
        finally:
            if stream is not None:
                assert self._streams is not None  # only it makes streams
                self._streams.end(stream)
        if stream is None:
            return response
        assert self._streams is not None
        return self._streams.complete(stream, response)

    def _send(
        self,
        call: Call,
        conn: BackendConnection,
        backend: str,
        method: str,
        params: dict[str, Any] | None,
        sink: CallSink | None,
    ) -> Awaitable[dict[str, Any]]:
        """The call's exchange with its backend, in the client's era (not a coroutine of its own: one
        await layer less on every call)."""
        session = call.session
        if not session.codec.modern or never_asks(session, conn, params):
            return self._awaited(call, conn, backend, method, params, sink)
        # A modern client that may be asked, or a modern backend: the era bridge's MRTR (its exchange
        # answers on an SSE stream as soon as something, such as an MGP chunk, precedes the result).
        return self._eras.through_mrtr(call, backend, conn, params, sink)

    @overload
    async def _awaited(
        self,
        call: Call,
        conn: BackendConnection,
        backend: str,
        method: str,
        params: dict[str, Any] | None,
        sink: CallSink | None = None,
        timed: Literal[False] = False,
    ) -> dict[str, Any]: ...

    @overload
    async def _awaited(
        self,
        call: Call,
        conn: BackendConnection,
        backend: str,
        method: str,
        params: dict[str, Any] | None,
        sink: CallSink | None,
        timed: Literal[True],
    ) -> Routed: ...

    async def _awaited(
        self,
        call: Call,
        conn: BackendConnection,
        backend: str,
        method: str,
        params: dict[str, Any] | None,
        sink: CallSink | None = None,
        timed: bool = False,
    ) -> dict[str, Any] | Routed:
        """The exchange of a call awaited in its request's own task: a legacy client's, or a new call
        of a modern client that can never be asked to a legacy backend (:func:`never_asks`). Its
        response (``timed``: its :class:`Routed`, the exchange timed here as :meth:`_exchange` does,
        for a call with no stream, task or span: two await layers less).

        A legacy client toward a modern backend is served in the backend's legacy twin, or through the
        era bridge's input rounds. A modern client's call gets a :class:`CancelOnAsk` signal: a
        backend's request that needs a capability the client lacks ends the call at once (the backend
        is told it is cancelled) with -32021, as the era bridge's parking path does."""
        started = time.perf_counter()
        error_type = "cancelled"
        try:
            session, rpc_id = call.session, call.event.rpc_id  # Call.rpc_id's property, inline
            modern_client = session.codec.modern
            if modern_client:
                params = params or None  # (an envelope-only _meta was detached: no params at all)
            elif conn.era == "modern":
                # A dual-era backend serves a legacy client in its own era (gateway/upstreams/affinity.py;
                # only a modern connection has a legacy twin, so the others skip the await).
                conn = await self._affinity.for_legacy_client(conn)
            # begin_call, inline (one Python call less on every call).
            if sink is None:
                pending = conn.begin(method, params, CallSink(session, call.channel))
            else:
                pending = conn.begin(method, params, sink)
                sink.began(conn, pending)
            inflight = session.inflight
            inflight[rpc_id] = (conn, pending)
            signal = session.input_ready = CancelOnAsk(conn, pending) if modern_client else None
            try:
                response = await conn.call(pending)
            finally:
                if signal is not None:
                    session.input_ready = None
                if inflight.get(rpc_id, (None, None))[1] is pending:
                    del inflight[rpc_id]
            if signal is not None:
                if signal.interrupted:
                    raise self._eras.missing_capabilities(session)
            elif conn.era == "modern":
                response = await self._eras.fulfil_input_requests(call, conn, params, response)
            answer = finish(session, rpc_id, backend, method, response)
            if not timed:
                return answer
            error_type = error_type_of(answer)
        except BaseException as exc:
            if timed:
                error_type = error_type_of_exception(exc)
            raise
        finally:
            if timed:
                self._observe(method, backend, error_type, started)
        return Routed(answer, backend, error_type)
