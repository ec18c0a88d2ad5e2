"""What backends send on their own: connection changes, requests to the client, notifications.

This is the :class:`~gateway.upstreams.connection.ConnectionHandler` of every backend connection.
Invariants: every request a backend sends is answered (by the client it reaches, or here with an
error when no client can answer, when the client lacks the capability, or when it does not answer
in time); a request that belongs to a call travels on that call's stream; a notification reaches
only the sessions whose view includes the backend (log lines only those whose level admits them;
resource updates only their holders); list changes refresh the catalog before clients hear of them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from adapters.mcp import CLIENT_CAPABILITY_OF
from adapters.mgp import strip as mgp_strip
from gateway import jsonrpc
from gateway.federation import CAPABILITY_OF, BackendCatalog, ListKind
from gateway.routing.call import CallSink
from gateway.sessions import ClientSession, Outgoing

if TYPE_CHECKING:
    from gateway.channels import Channel
    from gateway.config import Limits
    from gateway.mcpc import Mcpc
    from gateway.mcpl import McplRelay
    from gateway.metrics import Metrics
    from gateway.mgp.news import MgpNews
    from gateway.routing.levels import BackendLevels
    from gateway.routing.subscriptions import Subscriptions
    from gateway.sessions import SessionStore
    from gateway.upstreams.connection import BackendConnection, CallOwner

log = logging.getLogger(__name__)

_LIST_CHANGED: dict[ListKind, str] = {
    "tools": "notifications/tools/list_changed",
    "prompts": "notifications/prompts/list_changed",
    "resources": "notifications/resources/list_changed",
}
_KINDS_OF_CHANGE: dict[str, tuple[ListKind, ...]] = {
    "notifications/tools/list_changed": ("tools",),
    "notifications/prompts/list_changed": ("prompts",),
    "notifications/resources/list_changed": ("resources", "resourceTemplates"),
}


class BackendEvents:
    def __init__(
        self,
        catalogs: Mapping[str, BackendCatalog],
        sessions: SessionStore,
        subscriptions: Subscriptions,
        levels: BackendLevels,
        mcpl: McplRelay,
        metrics: Metrics,
        limits: Limits,
        mgp: MgpNews,
        mcpc: Mcpc,
    ) -> None:
        self._catalogs = catalogs
        self._sessions = sessions
        self._subscriptions = subscriptions
        self._levels = levels
        self._mcpl = mcpl
        self._metrics = metrics
        self._limits = limits
        self._mgp = mgp
        self._mcpc = mcpc

    def _sessions_of(self, backend: str) -> list[ClientSession]:
        return [s for s in self._sessions if not s.closed and backend in s.view.backends]

    # ---- connection changes ------------------------------------------------------------------

    def on_connected(self, conn: BackendConnection) -> None:
        self._catalogs[conn.name].invalidate()
        self._metrics.backend_up.labels(conn.name).set(1)
        if conn.restarts:
            self._metrics.backend_restarts.labels(conn.name).inc()
        self._levels.forget(conn.name)
        self._mcpl.backend_connected(conn)
        conn.spawn(self._levels.sync((conn.name,)))
        self._subscriptions.backend_connected(conn)
        self._announce_list_changes(conn, initial=True)
        self._mgp.state(conn, "ready")
        self._mcpc.on_connected(conn)  # the MCPC handshake, asked again on every connect

    def on_disconnected(self, conn: BackendConnection, reason: str) -> None:
        self._catalogs[conn.name].invalidate()
        self._metrics.backend_up.labels(conn.name).set(0)
        self._mcpl.backend_disconnected(conn)
        self.requests_lost(conn, reason)
        self._announce_list_changes(conn, initial=False)
        self._mgp.state(conn, "disconnected", reason)
        self._mcpc.on_disconnected(conn, reason)  # its running tasks fail

    def on_mcpc_callback(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        self._mcpc.on_callback(conn, message)

    def requests_lost(self, conn: BackendConnection, reason: str) -> None:
        """``conn`` went away: its requests still waiting for a client's answer are dropped, and
        the clients told (also used for a backend's legacy-era twin, gateway/upstreams/affinity.py)."""
        for session in self._sessions_of(conn.name):
            for gid, out in list(session.outgoing.items()):
                if out.conn is conn:
                    self._drop_outgoing(session, gid, notify_client=True, reason=f"backend went away: {reason}")

    def _announce_list_changes(self, conn: BackendConnection, initial: bool) -> None:
        caps = conn.capabilities
        methods = {
            _LIST_CHANGED[k] for k in ("tools", "prompts", "resources") if CAPABILITY_OF[k] in caps or not initial
        }
        for session in self._sessions_of(conn.name):
            if session.initialized:
                for method in sorted(methods):
                    session.standalone.push(jsonrpc.notification(method))

    # ---- requests to the client --------------------------------------------------------------

    def on_server_request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> None:
        method = message.get("method", "")
        upstream_id = message.get("id")
        if method == "ping":
            conn.spawn(conn.send(jsonrpc.result(upstream_id, {})))
            return
        if self._mcpl.on_server_request(conn, message, owner):
            return
        if mgp_strip.is_mgp_only(message):
            # An MGP request (gateway/mgp/news.py): a feature of the gateway's MGP server answers it.
            if not self._mgp.request(conn, message, owner):
                self._refuse(conn, upstream_id, f"no client session can answer {method}")
            return
        session: ClientSession | None = None
        channel: Channel | None = None
        if isinstance(owner, CallSink) and not owner.session.closed:
            session, channel = owner.session, owner.channel
        else:
            session, channel = self._attribute(conn, method)
        needed = CLIENT_CAPABILITY_OF.get(method)
        if session is None or channel is None:
            self._refuse(conn, upstream_id, f"no client session is available to answer {method}")
            return
        if needed is not None and needed not in session.client_capabilities:
            self._refuse(conn, upstream_id, f"the client did not declare the {needed!r} capability")
            if not session.codec.asks_mid_request:
                # A modern client is told which capability its request needs (-32021).
                session.missing_capabilities.append(needed)
                if session.input_ready is not None:
                    session.input_ready.set()
            return
        if needed is None and not session.codec.asks_mid_request:
            # A modern client is asked only through input requests, and an input request is sampling,
            # elicitation or roots (2026-07-28 InputRequest): anything else has no way to it.
            self._refuse(conn, upstream_id, f"{method} cannot be asked of a 2026-07-28 client")
            return
        gid = session.next_outgoing_id()
        out = Outgoing(conn, upstream_id, method)
        if not session.codec.asks_mid_request:
            # Collected, not sent: the modern client gets them as an input_required result (gateway/eras.py).
            session.outgoing[gid] = out
            session.input_requests.append((gid, method, message.get("params")))
            if session.input_ready is not None:
                session.input_ready.set()
            return
        out.timer = asyncio.get_running_loop().call_later(
            self._limits.client_request_timeout_s,
            self._drop_outgoing,
            session,
            gid,
            True,
            f"the client did not answer {method} within {self._limits.client_request_timeout_s:g}s",
            True,
        )
        session.outgoing[gid] = out
        forwarded = {**message, "id": gid}
        if not (channel.push(forwarded) or session.standalone.push(forwarded)):
            self._drop_outgoing(session, gid, False, "the client's stream is gone", True)

    def _attribute(self, conn: BackendConnection, method: str) -> tuple[ClientSession | None, Channel | None]:
        """A server request that arrived without relation to a call (stdio, WebSocket, legacy SSE):
        the session with the newest call in flight on that backend gets it, else the most recently
        active session that can answer it."""
        owners = [o for o in conn.owners_inflight() if isinstance(o, CallSink) and not o.session.closed]
        if owners:
            newest = owners[-1]
            return newest.session, newest.channel
        needed = CLIENT_CAPABILITY_OF.get(method)
        candidates = [s for s in self._sessions_of(conn.name) if needed is None or needed in s.client_capabilities]
        if not candidates:
            return None, None
        best = max(candidates, key=lambda s: s.last_seen)
        return best, best.standalone

    @staticmethod
    def _refuse(conn: BackendConnection, upstream_id: Any, reason: str) -> None:
        log.info("backend %s: refused a request to the client: %s", conn.name, reason)
        conn.spawn(conn.send(jsonrpc.error(upstream_id, jsonrpc.METHOD_NOT_FOUND, reason)))

    @staticmethod
    def _drop_outgoing(
        session: ClientSession, gid: str, notify_client: bool, reason: str, answer_backend: bool = False
    ) -> None:
        out = session.outgoing.pop(gid, None)
        if out is None:
            return
        if out.timer is not None:
            out.timer.cancel()
        if out.future is not None:
            if not out.future.done():
                out.future.set_result(jsonrpc.error(None, jsonrpc.INTERNAL_ERROR, reason))
        elif answer_backend and out.conn is not None:
            out.conn.spawn(out.conn.send(jsonrpc.error(out.upstream_id, jsonrpc.INTERNAL_ERROR, reason)))
        if notify_client:
            session.standalone.push(
                jsonrpc.notification("notifications/cancelled", {"requestId": gid, "reason": reason})
            )

    # ---- notifications -----------------------------------------------------------------------

    def on_notification(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        method = message.get("method", "")
        if self._mcpl.on_server_notification(conn, message):
            return
        if self._mgp.notification(conn, message):
            return  # MGP news (stream chunks, lifecycle, events, callbacks): gateway/mgp/news.py
        message = mgp_strip.for_plain_client(message)
        if message is None:
            return  # MGP-only news (audit, lifecycle, events, stream chunks) has no client that asked for it
        params = p if isinstance(p := message.get("params"), dict) else {}
        kinds = _KINDS_OF_CHANGE.get(method)
        if kinds is not None:
            for kind in kinds:
                self._catalogs[conn.name].invalidate(kind)
            for session in self._sessions_of(conn.name):
                session.standalone.push(message)
            return
        if method == "notifications/resources/updated":
            self._subscriptions.deliver_update(conn, message, params)
            return
        if method == "notifications/cancelled":
            upstream_id = params.get("requestId")
            for session in self._sessions_of(conn.name):
                for gid, out in list(session.outgoing.items()):
                    if out.conn is conn and out.upstream_id == upstream_id:
                        self._drop_outgoing(session, gid, True, str(params.get("reason") or "cancelled by the server"))
            return
        for session in self._sessions_of(conn.name):
            if method == "notifications/message" and not session.wants_log(params.get("level")):
                continue
            session.standalone.push(message)
