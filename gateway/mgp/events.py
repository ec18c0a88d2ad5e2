"""MGP event subscriptions served by the gateway (MGP_COMMUNICATION.md §13.2-§13.3, §13.6):
``mgp/events/subscribe|unsubscribe|replay`` (kernel tools ``mgp.events.*``) and
``notifications/mgp.event`` toward MGP clients.

Channels a client may name:

- ``audit``: the gateway's audit stream (``gateway/mgp/audit_stream.py``), each record the client
  may see (its principal's, or all with ``mgp/request:mgp/audit/*``) as ``data`` in the §6.3 shape;
- ``lifecycle``: every transition of the gateway's lifecycle state machine (gateway/mgp/lifecycle.py,
  fed to :meth:`EventHub.on_transition`) for a backend in the client's view or the gateway itself
  (``{server_id, previous_state, new_state, reason, timestamp}``, every §11.2 state: ``connecting``,
  ``connected``, ``draining``, ``restarting``, ``disconnected``, ``error`` ...); severity ``info``
  for a server coming up, ``warning`` for one going away, ``error`` for ``error``;
- ``BACKEND/CHANNEL``: the channel ``CHANNEL`` of the MGP backend ``BACKEND`` (in the client's
  view, with ``events`` negotiated), e.g. ``weather/system.alerts``. The backend's name goes first
  because the gateway merges many servers and §13.5 leaves channel names to each server; the part
  after the first ``/`` is passed to the backend unchanged.

For a backend channel the gateway subscribes upstream itself (``mgp/events/subscribe``, the
seed's method, is the only kernel-to-server wire any version defines), once per channel however many
clients want it (reference counted), and unsubscribes when the last one goes; it subscribes again
when the backend reconnects. A channel the backend does not confirm is ``unsupported``.

Each delivery carries the flat key ``"_mgp.seq"`` (WIRE.md; §13.3): the client's own counter
(``session.mgp.event_seq``), so it is consecutive across everything this client receives and
strictly increasing within each of its subscriptions. Each subscription keeps its latest
``REPLAY_DEPTH`` deliveries (§13.6: at least 1000) for ``mgp/events/replay``; ``truncated`` says
older ones were dropped.

Invariants: only sessions that negotiated MGP may subscribe (a plain client never gets an MGP
notification); at most ``MAX_SUBSCRIPTIONS`` per session; every upstream request has a timeout; a
session's subscriptions (and its share of upstream ones) end with it; only the owner's principal
may replay or cancel a subscription (1000), an unknown one is 4001 (§13.6).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeGuard

from adapters.mgp import names
from gateway import jsonrpc
from gateway.clock import rfc3339_ms
from gateway.errors import MgpCode, mgp_error_data
from gateway.mgp.audit_stream import visible
from gateway.mgp.lifecycle import GATEWAY_ID
from gateway.routing.call import Call, Routed

if TYPE_CHECKING:
    from gateway.mgp.audit_stream import AuditStream, Entry  # visible() is the one rule of who sees a record
    from gateway.mgp.kernel import BackendMgp
    from gateway.mgp.lifecycle import Transition
    from gateway.mgp.news import MgpNews
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger(__name__)

SUBSCRIBE, UNSUBSCRIBE, REPLAY = "mgp/events/subscribe", "mgp/events/unsubscribe", "mgp/events/replay"
AUDIT_CHANNEL, LIFECYCLE_CHANNEL = "audit", "lifecycle"
SEQ_KEY = "_mgp.seq"  # flat, unlike the audit's nested _mgp.seq (WIRE.md)
MAX_SUBSCRIPTIONS = 16  # per session
MAX_CHANNELS = 64  # per subscribe
REPLAY_DEPTH = 1000  # per subscription (§13.6 minimum)
DEFAULT_LIMIT, MAX_LIMIT = 100, 1000
UPSTREAM_TIMEOUT_S = 10.0
_SEVERITY = {"info": 0, "warning": 1, "error": 2}
# §11.2 states -> event severity (§13.3 ``min_severity``): a server going away warns, giving up is an error.
_LIFECYCLE_SEVERITY = {
    "registered": "info",
    "connecting": "info",
    "connected": "info",
    "draining": "warning",
    "restarting": "warning",
    "disconnected": "warning",
    "error": "error",
}


@dataclass(slots=True, eq=False)
class Subscription:
    id: str
    session: ClientSession
    channels: frozenset[str]
    min_severity: int
    buffer: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=REPLAY_DEPTH))
    evicted_upto: int = 0  # the newest seq that fell out of ``buffer``


@dataclass(slots=True, eq=False)
class Upstream:
    """One backend channel the gateway subscribed to, for ``count`` client subscriptions."""

    count: int
    subscription_id: str | None  # the backend's id; None while the backend is away


class EventHub:
    def __init__(
        self,
        connections: Mapping[str, BackendConnection],
        negotiated: Callable[[str], BackendMgp | None],
        audit: AuditStream,
        news: MgpNews,
        *,
        upstream_timeout_s: float = UPSTREAM_TIMEOUT_S,
    ) -> None:
        self._connections = connections
        self._negotiated = negotiated
        self._timeout = upstream_timeout_s
        self._ids = itertools.count(1)
        self._subs: dict[str, Subscription] = {}
        self._by_channel: dict[str, dict[str, Subscription]] = {}
        self._upstream: dict[tuple[str, str], Upstream] = {}
        self._lock = asyncio.Lock()  # upstream subscribe/unsubscribe, one at a time (rare, bounded)
        self._audit = audit
        audit.tap(self._on_audit)
        news.on_notification(names.EVENT, self._on_backend_event)
        news.on_state(self._on_state)

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {SUBSCRIBE: self.subscribe, UNSUBSCRIBE: self.unsubscribe, REPLAY: self.replay}

    # ---- mgp/events/subscribe (§13.2) ------------------------------------------------------------

    async def subscribe(self, call: Call) -> Routed:
        session = call.session
        if session.mgp is None:
            raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "event subscriptions need a session that negotiated MGP")
        channels, min_severity = _subscribe_params(call.params)
        if sum(1 for sub in self._subs.values() if sub.session is session) >= MAX_SUBSCRIPTIONS:
            raise jsonrpc.RpcError(
                MgpCode.RESOURCE_EXHAUSTED,
                f"at most {MAX_SUBSCRIPTIONS} event subscriptions per session",
                mgp_error_data(MgpCode.RESOURCE_EXHAUSTED),
            )
        subscribed: list[str] = []
        unsupported: list[str] = []
        for channel in channels:
            ok = channel in (AUDIT_CHANNEL, LIFECYCLE_CHANNEL) or await self._acquire(session, channel)
            (subscribed if ok else unsupported).append(channel)
        result: dict[str, Any] = {"subscribed": subscribed, "unsupported": unsupported, "subscription_id": None}
        if subscribed:
            if session.closed:  # it ended while the backends answered: give back what it took
                self._release_all(subscribed)
                raise jsonrpc.RpcError(jsonrpc.INVALID_REQUEST, "the session ended")
            sub = Subscription(f"sub-{next(self._ids)}", session, frozenset(subscribed), min_severity)
            self._subs[sub.id] = sub
            for channel in sub.channels:
                self._by_channel.setdefault(channel, {})[sub.id] = sub
            self._audit.tap_active = AUDIT_CHANNEL in self._by_channel
            result["subscription_id"] = sub.id
        return Routed(jsonrpc.result(call.rpc_id, result))

    async def unsubscribe(self, call: Call) -> Routed:
        sub = self._owned(call, call.params.get("subscription_id"))
        self._drop(sub)
        return Routed(jsonrpc.result(call.rpc_id, {"subscription_id": sub.id, "unsubscribed": True}))

    def session_ended(self, session: ClientSession) -> None:
        for sub in [sub for sub in self._subs.values() if sub.session is session]:
            self._drop(sub)

    # ---- mgp/events/replay (§13.6) ---------------------------------------------------------------

    async def replay(self, call: Call) -> Routed:
        params = call.params
        sub = self._owned(call, params.get("subscription_id"))
        after = params.get("after_seq")
        limit = params.get("limit", DEFAULT_LIMIT)
        if not _is_int(after) or after < 0:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "after_seq must be a non-negative integer")
        if not _is_int(limit) or limit < 1:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "limit must be a positive integer")
        limit = min(limit, MAX_LIMIT)
        later = [event for event in sub.buffer if event[SEQ_KEY] > after]
        result = {
            "subscription_id": sub.id,
            "events": later[:limit],
            "has_more": len(later) > limit,
            "truncated": after < sub.evicted_upto,
        }
        return Routed(jsonrpc.result(call.rpc_id, result))

    def _owned(self, call: Call, subscription_id: Any) -> Subscription:
        if not isinstance(subscription_id, str):
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "subscription_id must be a string")
        sub = self._subs.get(subscription_id)
        if sub is None:
            raise jsonrpc.RpcError(
                MgpCode.TOOL_NOT_FOUND,
                f"no subscription {subscription_id!r}",
                mgp_error_data(MgpCode.TOOL_NOT_FOUND),
            )
        if sub.session is not call.session and sub.session.principal.name != call.principal.name:
            raise jsonrpc.RpcError(
                MgpCode.PERMISSION_DENIED,
                f"subscription {subscription_id!r} belongs to another principal",
                mgp_error_data(MgpCode.PERMISSION_DENIED),
            )
        return sub

    def _drop(self, sub: Subscription) -> None:
        if self._subs.pop(sub.id, None) is None:
            return
        for channel in sub.channels:
            members = self._by_channel.get(channel)
            if members is not None:
                members.pop(sub.id, None)
                if not members:
                    del self._by_channel[channel]
        self._audit.tap_active = AUDIT_CHANNEL in self._by_channel
        self._release_all(sub.channels)

    # ---- delivery --------------------------------------------------------------------------------

    def _publish(
        self,
        channel: str,
        data: Any,
        *,
        timestamp: str | None = None,
        severity: Any = None,
        admits: Callable[[ClientSession], bool] | None = None,
    ) -> None:
        members = self._by_channel.get(channel)
        if not members:
            return
        rank = _SEVERITY.get(severity, 0) if isinstance(severity, str) else 0
        stamp = timestamp if isinstance(timestamp, str) else rfc3339_ms(time.time())
        for sub in list(members.values()):
            session, facet = sub.session, sub.session.mgp
            if facet is None or session.closed or rank < sub.min_severity:
                continue
            if admits is not None and not admits(session):
                continue
            facet.event_seq += 1
            event = {"channel": channel, "timestamp": stamp, SEQ_KEY: facet.event_seq, "data": data}
            if len(sub.buffer) == REPLAY_DEPTH:
                sub.evicted_upto = sub.buffer[0][SEQ_KEY]
            sub.buffer.append(event)
            session.standalone.push(jsonrpc.notification(names.EVENT, {"subscription_id": sub.id, **event}))

    def _on_audit(self, entry: Entry) -> None:
        event = entry.event
        data = {"seq": entry.seq, **{key: value for key, value in event.items() if key != "_mgp"}}
        severity = "info" if event.get("result") == "SUCCESS" else "warning"
        self._publish(
            AUDIT_CHANNEL,
            data,
            timestamp=event.get("timestamp"),
            severity=severity,
            admits=lambda session: visible(session.principal, entry.record),
        )

    def on_transition(self, transition: Transition) -> None:
        """``Lifecycle.on_transition``: one §11.2 state change, to the ``lifecycle`` subscribers that
        see its server (the gateway's own changes reach all of them)."""
        data = transition.params()
        data["reason"] = transition.reason or None
        server_id = transition.server_id
        self._publish(
            LIFECYCLE_CHANNEL,
            data,
            timestamp=data["timestamp"],
            severity=_LIFECYCLE_SEVERITY.get(transition.new_state, "warning"),
            admits=lambda session: server_id == GATEWAY_ID or server_id in session.view.backends,
        )

    def _on_state(self, conn: BackendConnection, state: str, reason: str) -> None:
        """A connect or a loss: the backend channels clients subscribed to follow the connection."""
        if self._connections.get(conn.name) is not conn:
            return  # a legacy-era twin (gateway/upstreams/affinity.py): the primary speaks for the backend
        if state == "ready":
            wanted = [channel for (backend, channel), up in self._upstream.items() if backend == conn.name and up.count]
            if wanted:
                conn.spawn(self._resubscribe(conn, wanted))
        else:
            for (backend, _), up in self._upstream.items():
                if backend == conn.name:
                    up.subscription_id = None

    def _on_backend_event(self, conn: BackendConnection, message: dict[str, Any]) -> None:
        params = message.get("params")
        if not isinstance(params, dict) or not isinstance(params.get("channel"), str):
            log.info("backend %s sent an event without a channel; dropped", conn.name)
            return
        channel = params["channel"]
        if (conn.name, channel) not in self._upstream:
            log.debug("backend %s: event on %r, which no client subscribed to; dropped", conn.name, channel)
            return
        data = params.get("data")
        severity = params.get("severity")
        if severity is None and isinstance(data, dict):
            severity = data.get("severity")
        self._publish(f"{conn.name}/{channel}", data, timestamp=params.get("timestamp"), severity=severity)

    # ---- upstream subscriptions (reference counted) ---------------------------------------------

    async def _acquire(self, session: ClientSession, channel: str) -> bool:
        """Take a share of the backend channel ``channel`` names (subscribing upstream if first)."""
        found = self._backend_channel(session, channel)
        if found is None:
            return False
        backend, own = found
        async with self._lock:
            up = self._upstream.get((backend, own))
            if up is not None and up.subscription_id is not None:
                up.count += 1
                return True
            conn = self._connections.get(backend)
            negotiated = self._negotiated(backend)
            if conn is None or conn.state != "ready" or negotiated is None or "events" not in negotiated.active:
                return False
            subscription_id = await self._subscribe_upstream(conn, own)
            if subscription_id is None:
                return False
            if up is None:
                self._upstream[(backend, own)] = Upstream(1, subscription_id)
            else:
                up.count += 1
                up.subscription_id = subscription_id
            return True

    def _backend_channel(self, session: ClientSession, channel: str) -> tuple[str, str] | None:
        backend, sep, own = channel.partition("/")
        if not sep or not own or backend not in session.view.backends:
            return None
        return backend, own

    async def _subscribe_upstream(self, conn: BackendConnection, channel: str) -> str | None:
        """The backend's subscription id for ``channel``, or None if it did not confirm it."""
        try:
            answer = await conn.request(SUBSCRIBE, {"channels": [channel]}, timeout=self._timeout)
        except jsonrpc.RpcError as exc:
            log.info("backend %s: could not subscribe to %r: %s", conn.name, channel, exc)
            return None
        result = answer.get("result")
        if not isinstance(result, dict) or channel not in (result.get("subscribed") or []):
            log.info("backend %s did not subscribe to %r: %.200r", conn.name, channel, answer)
            return None
        subscription_id = result.get("subscription_id")
        return subscription_id if isinstance(subscription_id, str) else ""

    async def _resubscribe(self, conn: BackendConnection, channels: list[str]) -> None:
        """The backend came back: its old subscriptions are gone with its process or session."""
        async with self._lock:
            for channel in channels:
                up = self._upstream.get((conn.name, channel))
                if up is not None and up.count:
                    up.subscription_id = await self._subscribe_upstream(conn, channel)

    def _release_all(self, channels: frozenset[str] | list[str]) -> None:
        for channel in channels:
            backend, sep, own = channel.partition("/")
            if not sep:
                continue
            up = self._upstream.get((backend, own))
            if up is None:
                continue
            up.count -= 1
            if up.count > 0:
                continue
            del self._upstream[(backend, own)]
            conn = self._connections.get(backend)
            if conn is not None and conn.state == "ready" and up.subscription_id is not None:
                conn.spawn(self._unsubscribe_upstream(conn, own, up.subscription_id))

    async def _unsubscribe_upstream(self, conn: BackendConnection, channel: str, subscription_id: str) -> None:
        params = {"subscription_id": subscription_id} if subscription_id else {"channels": [channel]}
        try:
            answer = await conn.request(UNSUBSCRIBE, params, timeout=self._timeout)
        except jsonrpc.RpcError as exc:
            log.info("backend %s: could not unsubscribe from %r: %s", conn.name, channel, exc)
            return
        if "error" in answer:
            log.info("backend %s refused to unsubscribe from %r: %.200r", conn.name, channel, answer["error"])


def _subscribe_params(params: dict[str, Any]) -> tuple[list[str], int]:
    channels = params.get("channels")
    if not isinstance(channels, list) or not channels or not all(isinstance(c, str) and c for c in channels):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "channels must be a non-empty list of channel names")
    unique = list(dict.fromkeys(channels))
    if len(unique) > MAX_CHANNELS:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, f"at most {MAX_CHANNELS} channels per subscription")
    filter_ = params.get("filter", {})
    if not isinstance(filter_, dict):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "filter must be an object")
    severity = filter_.get("min_severity", "info")
    if severity not in _SEVERITY:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "filter.min_severity must be info, warning or error")
    return unique, _SEVERITY[severity]


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
