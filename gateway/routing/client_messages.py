"""What a client sends that is not a request (notifications, answers to relayed requests), and its end.

Invariants: a client's answer reaches the backend request it answers, under the backend's own id,
or the gateway's own waiter; an answer to an unknown id is dropped, never misrouted; a cancellation
reaches the backend call it names; when a session ends, its calls are cancelled upstream, every
backend request still waiting on it is answered with an error, and its subscriptions are released.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from adapters.mgp import names as mgp_names
from gateway import jsonrpc
from gateway.upstreams.principal_pool import PoolHead

if TYPE_CHECKING:
    from gateway.events import Event
    from gateway.mcpc.calls import McpcCalls
    from gateway.mcpl import McplRelay
    from gateway.routing.subscriptions import Subscriptions
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)


class MgpClientNews(Protocol):
    """The MGP notifications a client may send the gateway as its MGP server (§12.8 pace, §12.9 gap:
    gateway/mgp/streaming.py); True when ``method`` was one of them and was handled."""

    def on_client_notification(self, session: ClientSession, method: str | None, params: dict[str, Any]) -> bool: ...


class ClientMessages:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        subscriptions: Subscriptions,
        mcpl: McplRelay,
        mgp: MgpClientNews,
        mcpc: McpcCalls | None = None,
        elsewhere: Callable[[ClientSession, dict[str, Any]], None] | None = None,
    ) -> None:
        self._connections = connections
        self._subscriptions = subscriptions
        self._mcpl = mcpl
        self._mgp = mgp
        self._mcpc = mcpc
        # Many replicas: an answer to a request another replica's copy of the session sent is handed
        # to it (gateway/replicas/shared_sessions.py).
        self._elsewhere = elsewhere

    async def notification(self, session: ClientSession, event: Event) -> None:
        method = event.method
        params = event.params
        if method == "notifications/initialized":
            session.initialized = True
            return
        if method == "notifications/cancelled":
            request_id = params.get("requestId")
            entry = session.inflight.get(request_id) if jsonrpc.names_a_request(request_id) else None
            if entry is not None:
                conn, pending = entry
                reason = params.get("reason")
                conn.cancel(pending, reason if isinstance(reason, str) else None)
            elif self._mcpc is not None and jsonrpc.names_a_request(request_id):
                self._mcpc.cancel(session, request_id)  # a call held open for its MCPC task
            return
        if method == "notifications/progress":
            return  # progress on a client's own work for a backend request: no backend tracks it
        if await self._mcpl.on_host_notification(session, event):
            return
        if mgp_names.is_mgp_notification(method):
            # The gateway is the client's MGP server (pace, gap of its own streams); kernel-to-server
            # MGP news toward backends is the gateway's to send: a client's would be forged (§1.6.2).
            if session.mgp is not None and self._mgp.on_client_notification(session, method, params):
                return
            log.info("session %s: dropped client notification %s", session.id[:8], method)
            return
        # Everything else (roots/list_changed, extension notifications) goes to every backend it may concern.
        for name in session.view.backends:
            head = self._connections[name]
            # per-principal: the sender's own child, if it runs (issue 17)
            target = head.child_of(session.principal) if isinstance(head, PoolHead) else head
            if target is not None and target.state == "ready":
                target.spawn(target.send(event.payload))

    def response(self, session: ClientSession, message: dict[str, Any], forwarded: bool = False) -> None:
        """The client's answer to a request the gateway sent it (forwarded: by another replica)."""
        if self.answer(session, message):
            return
        if self._elsewhere is not None and not forwarded:
            self._elsewhere(session, message)  # another replica's copy of the session asked it
            return
        log.debug("session %s answered unknown request id %r", session.id[:8], message.get("id"))

    @staticmethod
    def answer(session: ClientSession, message: dict[str, Any]) -> bool:
        """Hand an answer to the request of this session's copy that it answers; False: none here."""
        out = session.outgoing.pop(str(message.get("id")), None)
        if out is None:
            return False
        if out.timer is not None:
            out.timer.cancel()
        if out.future is not None:
            if not out.future.done():
                out.future.set_result(message)
            return True
        assert out.conn is not None
        reply = {k: v for k, v in message.items() if k != "id"}
        reply["id"] = out.upstream_id
        out.conn.spawn(out.conn.send(reply))
        return True

    def session_ended(self, session: ClientSession) -> None:
        for conn, pending in list(session.inflight.values()):
            conn.cancel(pending, "client session ended")
        session.inflight.clear()
        for out in session.outgoing.values():
            if out.timer is not None:
                out.timer.cancel()
            if out.future is not None:
                if not out.future.done():
                    out.future.set_result(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, "client session ended"))
            elif out.conn is not None:
                out.conn.spawn(
                    out.conn.send(jsonrpc.error(out.upstream_id, jsonrpc.INTERNAL_ERROR, "client session ended"))
                )
        session.outgoing.clear()
        self._subscriptions.session_ended(session)
