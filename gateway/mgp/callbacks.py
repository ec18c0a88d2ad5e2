"""A backend's callback requests relayed to the MGP client that can answer them, and the answers back
(MGP_COMMUNICATION.md §13.4; the seed's §13.4 is the same wire).

A backend sends ``notifications/mgp.callback.request`` ``{callback_id, request_id?, type, message,
options?, timeout_ms?}`` during a tool call. The gateway:

- **routes** it to the client whose call it belongs to (``request_id`` is the backend's id of that
  call, i.e. the gateway's upstream id; with no ``request_id`` and one call in flight, that call),
  when that client negotiated MGP with ``callbacks``; failing that, to the most recently active MGP
  session with ``callbacks`` whose view holds the backend (of the call's principal, if the call is
  known). The client sees ``callback_id`` as ``BACKEND/ID`` (two backends may both say ``cb-001``)
  and ``request_id`` as its own id of the call (dropped when the call is unknown).
- **de-duplicates** by ``callback_id`` (servers retry, reusing it): a retry of a waiting callback is
  ignored, a retry of an answered one gets the recorded answer again (§13.4 "Kernel-side
  deduplication").
- sends the client's ``mgp/callback/respond`` ``{callback_id, response}`` (kernel tool
  ``mgp.callback.respond``) to the backend as the ``mgp/callback/respond`` request, with the
  backend's own ``callback_id``. A backend that sent the callback as a JSON-RPC *request* (same
  method, with an id) gets the answer as that request's result ``{callback_id, response}`` instead.
- **expires** what nobody answers within ``timeout_ms`` (default 60 s, at most 10 min): the backend
  gets ``mgp/callback/respond`` with ``response: null`` and an ``error`` ``{code: 3003 TIMEOUT}``
  (the request form: a 3003 error answer), and the audit stream gets ``CALLBACK_TIMEOUT`` (§6.4).
  The spec leaves the kernel's side of an unanswered callback open; this is the gateway's choice,
  so the server can fail the call with 3003 or fall back, as §13.4 asks of it.

``mgp/events/pending_callbacks`` (kernel tool ``mgp.events.pending_callbacks``) lists what waits
for the caller's principal. ``type: notification`` callbacks need no answer and are not kept.

Invariants: at most ``MAX_WAITING`` callbacks wait (the oldest expires early when full) and at most
``MAX_ANSWERED`` answers are remembered for retries; every wait ends by answer or timer; only the
principal the callback was delivered to may answer it (1000 otherwise); every request to a backend
has a timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from adapters.mgp import names
from gateway import jsonrpc
from gateway.errors import MgpCode, mgp_error_data
from gateway.routing.call import Call, CallSink, Routed

if TYPE_CHECKING:
    from gateway.audit import AuditLog
    from gateway.mgp.news import MgpNews
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection, CallOwner

log = logging.getLogger(__name__)

RESPOND = names.CALLBACK_RESPOND
PENDING = "mgp/events/pending_callbacks"
DEFAULT_TIMEOUT_MS = 60_000
MAX_TIMEOUT_MS = 600_000
MAX_WAITING = 1024
MAX_ANSWERED = 1024
UPSTREAM_TIMEOUT_S = 10.0
_MAX_ID = 200
_NOTIFICATION_FORM: Final = object()  # Waiting.rpc_id of a callback that came as a notification
_TIMED_OUT: Final = object()  # remembered instead of an answer for a callback that expired


@dataclass(slots=True, eq=False)
class Waiting:
    conn: BackendConnection
    original_id: str
    client_id: str
    principal: str
    params: dict[str, Any]  # as the client was shown them
    expires: float  # time.monotonic()
    rpc_id: Any = _NOTIFICATION_FORM
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class _Target:
    session: ClientSession
    deliver: Callable[[dict[str, Any]], object]
    request_id: Any  # the client's id of the call, or None


class Callbacks:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        sessions: Iterable[ClientSession],
        news: MgpNews,
        audit: AuditLog,
        *,
        default_timeout_ms: int = DEFAULT_TIMEOUT_MS,
        upstream_timeout_s: float = UPSTREAM_TIMEOUT_S,
    ) -> None:
        self._connections = connections
        self._sessions = sessions
        self._audit = audit
        self._default_timeout_ms = default_timeout_ms
        self._timeout = upstream_timeout_s
        self._waiting: OrderedDict[str, Waiting] = OrderedDict()  # client id -> callback, oldest first
        self._answered: OrderedDict[str, Any] = OrderedDict()  # client id -> response (or _TIMED_OUT)
        news.on_notification(names.CALLBACK_REQUEST, self._on_notification)
        news.on_request(names.CALLBACK_REQUEST, self._on_request)

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {RESPOND: self.respond, PENDING: self.pending}

    def session_ended(self, session: ClientSession) -> None:
        """Nothing to drop: what waits for this session's principal can be answered from another
        session of it (``pending_callbacks``) until it expires."""

    # ---- from backends ---------------------------------------------------------------------------

    def _on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self._received(conn, message.get("params"), _NOTIFICATION_FORM)

    def _on_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None:
        self._received(conn, message.get("params"), message.get("id"), owner)

    def _received(self, conn: BackendConnection, params: Any, rpc_id: Any, owner: CallOwner | None = None) -> None:
        callback_id = params.get("callback_id") if isinstance(params, dict) else None
        if not isinstance(params, dict) or not isinstance(callback_id, str) or not 0 < len(callback_id) <= _MAX_ID:
            log.info("backend %s sent a callback request without a usable callback_id; refused", conn.name)
            if rpc_id is not _NOTIFICATION_FORM:
                conn.spawn(conn.send(jsonrpc.error(rpc_id, jsonrpc.INVALID_PARAMS, "callback_id is required")))
            return
        client_id = f"{conn.name}/{callback_id}"
        if client_id in self._answered:
            self._send_answer(conn, callback_id, rpc_id, self._answered[client_id])  # a retry (§13.4)
            return
        if client_id in self._waiting:
            return  # a retry of one still waiting: the client is not asked twice
        target = self._target(conn, params.get("request_id"), owner)
        if target is None:
            log.info("backend %s: no MGP client with callbacks can answer %r", conn.name, callback_id)
            self._send_answer(conn, callback_id, rpc_id, _TIMED_OUT, "no MGP client with callbacks can answer it")
            return
        shown = {key: value for key, value in params.items() if key != "_mgp.attempt" and key != "request_id"}
        shown.update(callback_id=client_id, server_id=conn.name)
        if target.request_id is not None:
            shown["request_id"] = target.request_id
        target.deliver(jsonrpc.notification(names.CALLBACK_REQUEST, shown))
        if params.get("type") == "notification" and rpc_id is _NOTIFICATION_FORM:
            return  # informational: no response required (§13.4 callback types)
        self._wait(conn, callback_id, client_id, target.session.principal.name, shown, rpc_id, params)

    def _wait(
        self,
        conn: BackendConnection,
        callback_id: str,
        client_id: str,
        principal: str,
        shown: dict[str, Any],
        rpc_id: Any,
        params: dict[str, Any],
    ) -> None:
        if len(self._waiting) >= MAX_WAITING:
            self._expire(next(iter(self._waiting)))  # the oldest gives way
        timeout_ms = params.get("timeout_ms")
        if not isinstance(timeout_ms, int | float) or isinstance(timeout_ms, bool) or timeout_ms <= 0:
            timeout_ms = self._default_timeout_ms
        timeout_s = min(float(timeout_ms), MAX_TIMEOUT_MS) / 1000
        waiting = Waiting(conn, callback_id, client_id, principal, shown, time.monotonic() + timeout_s, rpc_id)
        waiting.timer = asyncio.get_running_loop().call_later(timeout_s, self._expire, client_id)
        self._waiting[client_id] = waiting

    def _target(self, conn: BackendConnection, request_id: Any, owner: CallOwner | None) -> _Target | None:
        """Who answers: the owner of the call (if it speaks MGP with callbacks), else a session that can."""
        call = self._call_of(conn, request_id, owner)
        if call is not None and _answers_callbacks(call.session):
            return call
        candidates = [
            s
            for s in self._sessions
            if not s.closed and _answers_callbacks(s) and conn.name in s.view.backends
            if call is None or s.principal.name == call.session.principal.name
        ]
        if not candidates:
            return None
        chosen = max(candidates, key=lambda s: s.last_seen)
        return _Target(chosen, chosen.standalone.push, None)

    @staticmethod
    def _call_of(conn: BackendConnection, request_id: Any, owner: CallOwner | None) -> _Target | None:
        """The client call ``request_id`` (the gateway's upstream id on ``conn``) belongs to."""
        owners = [owner] if owner is not None else conn.owners_inflight()
        sinks = [o for o in owners if isinstance(o, CallSink) and not o.session.closed]
        for sink in sinks:
            for client_rpc_id, (used, pending) in list(sink.session.inflight.items()):
                if used is conn and (request_id is None or pending.upstream_id == request_id):
                    if request_id is None and len(sinks) > 1:
                        return None  # several calls in flight: whose it is cannot be told
                    return _Target(sink.session, sink.deliver, client_rpc_id)
        return None

    # ---- mgp/callback/respond (§13.4) ------------------------------------------------------------

    async def respond(self, call: Call) -> Routed:
        params = call.params
        client_id = params.get("callback_id")
        if not isinstance(client_id, str):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "callback_id must be a string")
        if "response" not in params or params["response"] is None:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "response is required (a string or an object)")
        waiting = self._waiting.get(client_id)
        if waiting is None:
            what = "was already answered or expired" if client_id in self._answered else "is not waiting"
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"callback {client_id!r} {what}")
        if waiting.principal != call.principal.name:
            raise jsonrpc.RpcError(
                MgpCode.PERMISSION_DENIED,
                f"callback {client_id!r} was asked of another principal",
                mgp_error_data(MgpCode.PERMISSION_DENIED),
            )
        self._settle(waiting, params["response"])
        if waiting.rpc_id is not _NOTIFICATION_FORM:
            await waiting.conn.send(_request_form_answer(waiting.rpc_id, waiting.original_id, params["response"]))
            return Routed(jsonrpc.result(call.rpc_id, {"callback_id": client_id, "delivered": True}))
        answer = await waiting.conn.request(
            RESPOND, {"callback_id": waiting.original_id, "response": params["response"]}, timeout=self._timeout
        )
        if "error" in answer:
            error = answer["error"]
            raise jsonrpc.RpcError.from_error(error if isinstance(error, dict) else {})  # the backend's, unchanged
        result = answer.get("result")
        out: dict[str, Any] = {"callback_id": client_id, "delivered": True}
        if isinstance(result, dict) and result:
            out["server_result"] = result
        return Routed(jsonrpc.result(call.rpc_id, out), waiting.conn.name)

    async def pending(self, call: Call) -> Routed:
        now = time.monotonic()
        listed = [
            {**w.params, "remaining_ms": max(0, int((w.expires - now) * 1000))}
            for w in self._waiting.values()
            if w.principal == call.principal.name
        ]
        return Routed(jsonrpc.result(call.rpc_id, {"callbacks": listed}))

    # ---- endings ---------------------------------------------------------------------------------

    def _settle(self, waiting: Waiting, answer: Any) -> None:
        self._waiting.pop(waiting.client_id, None)
        if waiting.timer is not None:
            waiting.timer.cancel()
        self._answered[waiting.client_id] = answer
        while len(self._answered) > MAX_ANSWERED:
            self._answered.popitem(last=False)

    def _expire(self, client_id: str) -> None:
        waiting = self._waiting.get(client_id)
        if waiting is None:
            return
        self._settle(waiting, _TIMED_OUT)
        self._audit.record(
            "callback_timeout",
            event_type="CALLBACK_TIMEOUT",
            principal=waiting.principal,
            backend=waiting.conn.name,
            callback_id=waiting.original_id,
            callback_type=waiting.params.get("type"),
        )
        self._send_answer(waiting.conn, waiting.original_id, waiting.rpc_id, _TIMED_OUT)

    def _send_answer(
        self, conn: BackendConnection, callback_id: str, rpc_id: Any, answer: Any, reason: str | None = None
    ) -> None:
        """Tell the backend ``answer`` (a recorded response, or that none will come) without waiting."""
        if answer is _TIMED_OUT:
            message = reason or "no answer within the callback's timeout"
            data = mgp_error_data(MgpCode.TIMEOUT)
            if rpc_id is not _NOTIFICATION_FORM:
                conn.spawn(conn.send(jsonrpc.error(rpc_id, MgpCode.TIMEOUT, message, data)))
                return
            params = {
                "callback_id": callback_id,
                "response": None,
                "error": {"code": int(MgpCode.TIMEOUT), "message": message, "data": data},
            }
        elif rpc_id is not _NOTIFICATION_FORM:
            conn.spawn(conn.send(_request_form_answer(rpc_id, callback_id, answer)))
            return
        else:
            params = {"callback_id": callback_id, "response": answer}
        conn.spawn(self._tell(conn, params))

    async def _tell(self, conn: BackendConnection, params: dict[str, Any]) -> None:
        try:
            answer = await conn.request(RESPOND, params, timeout=self._timeout)
        except jsonrpc.RpcError as exc:
            log.info("backend %s: mgp/callback/respond not delivered: %s", conn.name, exc)
            return
        if "error" in answer:
            log.info("backend %s refused mgp/callback/respond: %.200r", conn.name, answer["error"])


def _answers_callbacks(session: ClientSession) -> bool:
    return session.mgp is not None and session.mgp.wants("callbacks") and not session.closed


def _request_form_answer(rpc_id: Any, callback_id: str, response: Any) -> dict[str, Any]:
    return jsonrpc.result(rpc_id, {"callback_id": callback_id, "response": response})
