"""MGP streaming through the gateway (MGP_COMMUNICATION.md §12; seed 0.3 §12; WIRE.md "Streaming").

An MGP client whose facet has ``streaming`` active asks for a stream with ``tools/call`` and
``_mgp.stream: true`` (§12.3). The gateway then serves the call as a stream whatever its backend:

- a backend that negotiated ``streaming`` with the gateway as its kernel gets ``_mgp.stream`` and
  its ``notifications/mgp.stream.chunk|progress`` are relayed with ``request_id`` mapped from the
  gateway's upstream id back to the client's id (§12.4, §12.6). They arrive either on the call's
  own stream (HTTP: :class:`StreamSink`) or unrelated (stdio: ``MgpNews`` -> :meth:`Streams.on_news`);
- any other backend is asked for MCP progress with a token of the gateway's (even when the client
  sent none); its ``notifications/progress`` become ``mgp.stream.progress`` and its log lines for
  the call become text chunks. A progress token the client sent itself still gets MCP progress;
- the final result carries ``_mgp: {streamed, chunks_sent, duration_ms}`` (§12.5; a backend's own
  ``_mgp`` fields win);
- a 2026-07-28 ("modern") client's call is streamed the same way: its exchange answers on an SSE
  stream as soon as the first chunk or progress precedes the result
  (gateway/transports/streamable_http_modern.py). Its session lives for that exchange only, so a
  ``mgp.stream.cancel`` from a later exchange finds the call among the modern streamed calls *of
  the same principal* (ambiguous ids are refused); the retry of an ``input_required`` answer is not
  a new stream (the parked call keeps relaying through the sink it was parked with, unmarked);
- ``mgp/stream/cancel`` (kernel tool ``mgp.stream.cancel``) cancels a call of the *caller's own
  session* upstream (``mgp/stream/cancel`` toward a streaming backend, then
  ``notifications/cancelled``), answers the original call with -32800, and returns what arrived as
  ``partial_result`` (§12.7; the backend's own partial result when it sends one);
- §12.9 gap: the gateway keeps each streamed call's chunks (bounded) and re-delivers missing
  indices itself, or says ``gap_unrecoverable``; §12.8 pace is passed to a streaming backend under
  its upstream id; for a synthesized stream it is accepted and not acted on (the spec's "MAY").

A plain client's ``_mgp`` is removed before forwarding (it did not negotiate MGP, §2.4); an MGP
client's ``_mgp`` goes only to MGP backends, its ``stream`` flag only to those that stream.

Invariants: a streamed call is filed under (connection, upstream id) and (session id, client id)
from ``began`` until its forward ends (``end``, in a ``finally``), so the tables hold only calls in
flight and at most ``MAX_STREAMS`` of them (beyond that a call is served unstreamed); a session can
reach only its own calls (a modern exchange: its principal's modern calls); nothing is relayed for
a call after it was cancelled; each call keeps at most ``MAX_KEPT_CHUNKS`` chunks /
``MAX_KEPT_BYTES`` of content; the upstream cancel waits at most ``UPSTREAM_CANCEL_TIMEOUT_S``.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adapters.mgp import streaming as wire
from gateway import jsonrpc
from gateway.routing.call import Call, CallSink, Routed

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from gateway.channels import Channel
    from gateway.mgp.kernel import BackendMgp
    from gateway.mgp.news import MgpNews
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection, Pending

log = logging.getLogger(__name__)

MAX_STREAMS = 1024
MAX_KEPT_CHUNKS = 1024
MAX_KEPT_BYTES = 1 << 20
UPSTREAM_CANCEL_TIMEOUT_S = 2.0
# Progress tokens the gateway makes up for a client that sent none (unique per gateway process).
_TOKEN_PREFIX = "sb-stream-"


@dataclass(slots=True, eq=False)
class StreamedCall:
    """One ``tools/call`` served as a stream to one client."""

    session: ClientSession
    client_id: Any
    native: bool  # the backend streams itself (negotiated ``streaming``)
    synthetic_token: bool  # the progress token is the gateway's: MCP progress is not the client's
    started: float = field(default_factory=time.monotonic)
    conn: BackendConnection | None = None
    pending: Pending | None = None
    chunks_sent: int = 0
    next_index: int = 0
    kept: dict[int, dict[str, Any]] = field(default_factory=dict)  # index -> chunk params as sent
    kept_bytes: int = 0
    dropped: bool = False  # some chunks were not kept (bounds): a partial result is incomplete
    cancelled: bool = False
    sink: StreamSink | None = None  # None: over MAX_STREAMS, served unstreamed

    @property
    def elapsed_ms(self) -> float:
        return (time.monotonic() - self.started) * 1000

    def keep(self, index: int, params: dict[str, Any]) -> None:
        content = params.get("content")
        size = len(content["text"]) if isinstance(content, dict) and isinstance(content.get("text"), str) else 0
        if not size and content is not None:
            size = len(json.dumps(content, default=str))
        if len(self.kept) >= MAX_KEPT_CHUNKS or self.kept_bytes + size > MAX_KEPT_BYTES:
            self.dropped = True
            return
        if index not in self.kept:
            self.kept_bytes += size
        self.kept[index] = params

    def partial(self) -> dict[str, Any]:
        result = wire.partial_result(self.kept[i].get("content") for i in sorted(self.kept))
        if self.dropped:
            result["_mgp"] = {"truncated": True}
        return result


class StreamSink(CallSink):
    """The owner of a streamed call upstream: turns what the backend sends for it into §12 messages."""

    __slots__ = ("_streams", "stream")

    def __init__(self, session: ClientSession, channel: Channel, stream: StreamedCall, streams: Streams) -> None:
        super().__init__(session, channel)
        self.stream = stream
        self._streams = streams

    def began(self, conn: BackendConnection, pending: Pending) -> None:
        self._streams.file(self.stream, conn, pending)

    def deliver(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params")
        if method in wire.NOTIFICATIONS:
            if isinstance(params, dict):
                self.relay(method, params)
            return
        stream = self.stream
        if method == "notifications/progress" and isinstance(params, dict):
            if not stream.cancelled:
                self.push(
                    jsonrpc.notification(
                        wire.PROGRESS, wire.progress_from_mcp(stream.client_id, params, stream.elapsed_ms)
                    )
                )
            if stream.synthetic_token:
                return  # the gateway asked for it; the client did not
        elif method == "notifications/message" and not stream.native and isinstance(params, dict):
            if not stream.cancelled and self.session.wants_log(params.get("level")):
                self._chunk(stream.next_index, wire.text_content(params.get("data")))
        super().deliver(message)

    def relay(self, method: str, params: dict[str, Any]) -> None:
        """A backend's own ``mgp.stream.chunk|progress`` for this call, under the client's id."""
        stream = self.stream
        if stream.cancelled:
            return
        if method == wire.PROGRESS:
            self.push(jsonrpc.notification(method, {**params, "request_id": stream.client_id}))
            return
        index = wire.index_of(params)
        self._chunk(stream.next_index if index is None else index, params.get("content"), params)

    def _chunk(self, index: int, content: Any, original: dict[str, Any] | None = None) -> None:
        stream = self.stream
        params = {**(original or wire.chunk(None, index, content)), "request_id": stream.client_id, "index": index}
        stream.next_index = max(stream.next_index, index + 1)
        stream.chunks_sent += 1
        stream.keep(index, params)
        self.push(jsonrpc.notification(wire.CHUNK, params))

    def resend(self, missing: list[int]) -> None:
        """§12.9: chunks the client missed, from what the gateway kept."""
        lost = []
        for index in missing:
            kept = self.stream.kept.get(index)
            if kept is None:
                lost.append(index)
            else:
                self.push(jsonrpc.notification(wire.CHUNK, kept))
        if lost:
            self.push(jsonrpc.notification(wire.CHUNK, wire.unrecoverable(self.stream.client_id, lost)))


class Streams:
    def __init__(self, backend_mgp: Callable[[str], BackendMgp | None], news: MgpNews) -> None:
        self._backend_mgp = backend_mgp
        self._by_upstream: dict[tuple[BackendConnection, Any], StreamedCall] = {}
        self._by_client: dict[tuple[str, Any], StreamedCall] = {}
        self._tokens = itertools.count(1)
        # A call held open for an MCPC task (gateway/mcpc/calls.py) has no backend request left to cut.
        self._held: Callable[[ClientSession, Any], bool] = lambda session, request_id: False
        for method in sorted(wire.NOTIFICATIONS):
            news.on_notification(method, self.on_news)

    def cancels_held(self, held: Callable[[ClientSession, Any], bool]) -> None:
        """How a held call is cancelled: ``held(session, client id)``, True when there was one."""
        self._held = held

    def _cancel_held(self, session: ClientSession, request_id: Any) -> bool:
        return any(self._held(session, form) for form in _id_forms(request_id))

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {wire.CANCEL: self.cancel}

    @property
    def in_flight(self) -> int:
        return len(self._by_client)

    # ---- a call on its way (gateway/routing/forwarding.py) ---------------------------------------

    def prepare(
        self, call: Call, backend: str, method: str, params: dict[str, Any] | None
    ) -> tuple[dict[str, Any] | None, StreamedCall | None]:
        """An MGP client's call: its params as ``backend`` gets them, and the stream when it is one."""
        facet = call.session.mgp
        if params is None or facet is None:
            return params, None
        backend_mgp = self._backend_mgp(backend)
        native = backend_mgp is not None and "streaming" in backend_mgp.active
        streamed = (
            method == "tools/call"
            and wire.wants_stream(params)
            and facet.wants("streaming")
            # A modern client's retry with answers resumes a parked call, which keeps its own sink.
            and (call.session.codec.asks_mid_request or "requestState" not in params)
        )
        if backend_mgp is None:
            params = wire.without_mgp(params)
        elif not (streamed and native):
            params = wire.without_stream_flag(params)
        if not streamed:
            return params, None
        synthetic = False
        if not native:
            meta = params.get("_meta")
            meta = meta if isinstance(meta, dict) else {}
            if "progressToken" not in meta:
                params = {**params, "_meta": {**meta, "progressToken": f"{_TOKEN_PREFIX}{next(self._tokens)}"}}
                synthetic = True
        stream = StreamedCall(call.session, call.rpc_id, native, synthetic)
        if len(self._by_client) < MAX_STREAMS and (call.session.id, call.rpc_id) not in self._by_client:
            stream.sink = StreamSink(call.session, call.channel, stream, self)
        else:
            log.warning(
                "session %s: call %r served unstreamed (%d streams in flight)",
                call.session.id[:8],
                call.rpc_id,
                self.in_flight,
            )
        return params, stream

    def file(self, stream: StreamedCall, conn: BackendConnection, pending: Pending) -> None:
        stream.conn, stream.pending = conn, pending
        self._by_upstream[(conn, pending.upstream_id)] = stream
        self._by_client[(stream.session.id, stream.client_id)] = stream

    def end(self, stream: StreamedCall) -> None:
        if stream.conn is not None and stream.pending is not None:
            key = (stream.conn, stream.pending.upstream_id)
            if self._by_upstream.get(key) is stream:
                del self._by_upstream[key]
        client_key = (stream.session.id, stream.client_id)
        if self._by_client.get(client_key) is stream:
            del self._by_client[client_key]

    @staticmethod
    def complete(stream: StreamedCall, answer: dict[str, Any]) -> dict[str, Any]:
        """The client's answer: -32800 after a cancel, else the result with §12.5 ``_mgp``."""
        if stream.cancelled:
            return jsonrpc.error(stream.client_id, jsonrpc.REQUEST_CANCELLED, "Request cancelled (mgp/stream/cancel)")
        result = answer.get("result")
        if not isinstance(result, dict) or result.get("resultType") == "input_required":
            return answer  # not the call's final result (a modern client is asked for input first)
        marker = wire.completion(stream.chunks_sent, stream.elapsed_ms, result.get(wire.MGP_KEY))
        return {**answer, "result": {**result, wire.MGP_KEY: marker}}

    # ---- what backends send unrelated to a call (stdio): MgpNews --------------------------------

    def on_news(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        params = message.get("params")
        if not isinstance(params, dict) or not jsonrpc.names_a_request(request_id := params.get("request_id")):
            return  # no call can be named by it (and a list would not even be a key)
        stream = self._by_upstream.get((conn, _upstream_id(request_id)))
        if stream is None or stream.sink is None:
            log.debug(
                "backend %s: %s for no streamed call (%r)", conn.name, message.get("method"), params.get("request_id")
            )
            return
        stream.sink.relay(str(message.get("method")), params)

    # ---- what clients send about a stream (§12.7-§12.9) ------------------------------------------

    def _own(self, session: ClientSession, request_id: object) -> StreamedCall | None:
        if not jsonrpc.names_a_request(request_id):
            return None
        for key in _id_forms(request_id):
            found = self._by_client.get((session.id, key))
            if found is not None:
                return found
        if not session.codec.asks_mid_request:
            return self._principals_own(session, request_id)
        return None

    def _principals_own(self, session: ClientSession, request_id: object) -> StreamedCall | None:
        """A modern client's session lives for one exchange (MCP 2026-07-28), so its cancel arrives
        on another one: it may name a streamed call of another modern exchange *of the same
        principal* (the binding the era bridge gives parked calls, gateway/eras.py). Two such calls
        under the same id are ambiguous and neither is chosen."""
        forms = _id_forms(request_id)
        principal = session.principal.name
        found = [
            stream
            for stream in self._by_client.values()
            if not stream.session.codec.asks_mid_request
            and stream.session.principal.name == principal
            and stream.client_id in forms
        ]
        if len(found) > 1:
            raise jsonrpc.RpcError(
                jsonrpc.INVALID_PARAMS,
                f"request_id {request_id!r} names {len(found)} streamed calls of this principal; cancel is ambiguous",
            )
        return found[0] if found else None

    async def cancel(self, call: Call) -> Routed:
        """§12.7 ``mgp/stream/cancel``: a streamed (or any long-running) call of the caller's session."""
        session, params = call.session, call.params
        request_id = params.get("request_id")
        if not jsonrpc.names_a_request(request_id) or isinstance(request_id, bool):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "params.request_id must be the id of a call in flight")
        reason = params.get("reason")
        reason = reason if isinstance(reason, str) and reason else "user_cancelled"
        stream = self._own(session, request_id)
        if stream is not None and stream.conn is not None and stream.pending is not None:
            conn, pending = stream.conn, stream.pending
        else:
            entry = next((session.inflight[k] for k in _id_forms(request_id) if k in session.inflight), None)
            if entry is None:
                if self._cancel_held(session, request_id):
                    return Routed(jsonrpc.result(call.rpc_id, wire.cancel_result({"content": []})))
                raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"no call {request_id!r} in flight on this session")
            conn, pending = entry
        partial: dict[str, Any] = {"content": []}
        if stream is not None:
            partial = stream.partial()
            stream.cancelled = True
            if stream.native:
                partial = await self._cancel_stream(conn, pending.upstream_id, reason) or partial
        conn.cancel(pending, reason)
        self._cancel_held(stream.session if stream is not None else session, request_id)
        return Routed(jsonrpc.result(call.rpc_id, wire.cancel_result(partial)), conn.name)

    @staticmethod
    async def _cancel_stream(conn: BackendConnection, upstream_id: int, reason: str) -> dict[str, Any] | None:
        """``mgp/stream/cancel`` to a streaming backend; its partial result when it sends one."""
        try:
            answer = await conn.request(
                wire.CANCEL, {"request_id": upstream_id, "reason": reason}, timeout=UPSTREAM_CANCEL_TIMEOUT_S
            )
        except jsonrpc.RpcError as exc:
            log.info("backend %s: mgp/stream/cancel: %s", conn.name, exc.message)
            return None
        result = answer.get("result")
        partial = result.get("partial_result") if isinstance(result, dict) else None
        if isinstance(partial, dict) and isinstance(partial.get("content"), list) and partial["content"]:
            return partial
        return None

    def on_client_notification(self, session: ClientSession, method: str | None, params: dict[str, Any]) -> bool:
        """§12.8 pace, §12.9 gap from a client; True when it was one (handled here, never broadcast)."""
        if method not in wire.CLIENT_NOTIFICATIONS:
            return False
        stream = self._own(session, params.get("request_id"))
        if stream is None or stream.sink is None or stream.cancelled:
            return True
        if method == wire.GAP:
            missing = params.get("missing_indices")
            indices = (
                [i for i in missing if isinstance(i, int) and not isinstance(i, bool) and i >= 0]
                if isinstance(missing, list)
                else []
            )
            stream.sink.resend(sorted(set(indices))[:MAX_KEPT_CHUNKS])
            return True
        conn, pending = stream.conn, stream.pending
        if stream.native and conn is not None and pending is not None:
            conn.spawn(conn.notify(wire.PACE, {**params, "request_id": pending.upstream_id}))
        return True


def _upstream_id(value: object) -> object:
    """A backend that stringified the gateway's id still names the call."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value


def _id_forms(request_id: Any) -> tuple[Any, ...]:
    """A client's id as it sent it, then its other JSON form (``7`` / ``"7"``): a kernel tool's
    argument schema allows either."""
    if isinstance(request_id, str) and request_id.isascii() and request_id.isdigit():
        return (request_id, int(request_id))
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        return (request_id, str(request_id))
    return (request_id,)
