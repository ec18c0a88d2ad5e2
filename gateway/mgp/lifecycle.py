"""MGP lifecycle (§11): the state machine of every backend and of the gateway, and its notifications.

States (§11.2): ``registered`` (configured, not started), ``connecting`` (first handshake),
``connected``, ``draining`` (finishing calls in flight, refusing new ones), ``disconnected``
(stopped), ``error`` (gave up: the §11.6 restart limit was exceeded) and ``restarting`` (lost,
being reconnected or respawned). A backend's state is *derived* from its connection
(:meth:`Lifecycle.observe`: on every connect and loss through ``MgpNews.on_state``, and on each
tick of the health watcher for what has no event, such as a connect that failed) with two
overlays: an operator's drain (``mgp/lifecycle/shutdown``, ``gateway/mgp/drain.py``) and what the
backend itself last said in its own ``notifications/mgp.lifecycle`` (kept until its connection
changes state). The gateway's own state is kept under :data:`GATEWAY_ID`.

Every transition reaches the listeners (:meth:`Lifecycle.on_transition`), among them
:class:`LifecycleNotifier`, which pushes ``notifications/mgp.lifecycle`` with the §11.5 params
(``server_id, previous_state, new_state, reason, timestamp``) to every initialized session whose
MGP facet has ``lifecycle`` active and whose view includes that backend (the gateway's own
transitions go to all of them). Plain MCP clients never get one; modern-era sessions neither (the
draft's era note: no unsolicited channel there; they poll ``mgp.health.status``). Another,
:class:`LifecycleAudit`, writes each transition to the gateway's one audit stream (§6.4
``SERVER_CONNECTED`` / ``SERVER_DISCONNECTED``, §11.6 ``restart_limit_exceeded``).

Invariants: a transition happens only when the state changes (no duplicate notifications); a
backend drained by an operator stays ``disconnected`` whatever its connection does afterwards;
:meth:`Lifecycle.draining` is what ``policies/mgp_lifecycle.py`` refuses new calls by.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from adapters.mgp import names
from gateway import jsonrpc
from gateway.clock import rfc3339_ms

if TYPE_CHECKING:
    from gateway.mgp.news import MgpNews
    from gateway.sessions import ClientSession

log = logging.getLogger(__name__)

GATEWAY_ID = "switchboard"  # the gateway's own server_id (as in its MGP declaration)
STATES = frozenset({"registered", "connecting", "connected", "draining", "disconnected", "error", "restarting"})
RESTART_LIMIT_EXCEEDED = "restart_limit_exceeded"  # §11.6 detail


class ConnectionFacts(Protocol):
    """What the lifecycle reads of a backend connection (``gateway.upstreams.connection``)."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def gave_up(self) -> bool: ...
    @property
    def connected_at(self) -> float | None: ...
    @property
    def last_error(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Transition:
    server_id: str
    previous_state: str
    new_state: str
    reason: str
    timestamp: float  # epoch seconds

    def params(self) -> dict[str, Any]:
        """The §11.5 ``notifications/mgp.lifecycle`` params."""
        return {
            "server_id": self.server_id,
            "previous_state": self.previous_state,
            "new_state": self.new_state,
            "reason": self.reason,
            "timestamp": rfc3339_ms(self.timestamp),
        }


@dataclass(slots=True)
class _Life:
    state: str = "registered"
    since: float = 0.0
    reason: str = ""
    drained_by_operator: bool = False  # draining, then disconnected for good
    stopped: bool = False
    said: str | None = None  # the backend's own latest word (§11.5), until its connection changes


def derived_state(conn: ConnectionFacts) -> str:
    """The §11.2 state a connection is in, before any overlay."""
    if conn.state == "ready":
        return "connected"
    if conn.state == "closed":
        return "disconnected"
    if conn.state == "down":
        return "error" if conn.gave_up else "restarting"
    return "connecting" if conn.connected_at is None and conn.last_error is None else "restarting"


_UNSEEN = _Life()


class Lifecycle:
    """The state machine of every backend (by name) and of the gateway (:data:`GATEWAY_ID`)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lives: dict[str, _Life] = {}
        self._draining: set[str] = set()  # kept with every move: the chain asks on every call
        self._listeners: list[Callable[[Transition], None]] = []
        self.started_at = clock()

    def on_transition(self, listener: Callable[[Transition], None]) -> None:
        self._listeners.append(listener)

    def listen(self, news: MgpNews) -> None:
        """Be fed by what backends do: connects and losses, and their own lifecycle notifications."""
        news.on_state(self.on_state)
        news.on_notification(names.LIFECYCLE, self.on_notification)

    # ---- reading ---------------------------------------------------------------------------------

    def state(self, server_id: str) -> str:
        return self._peek(server_id).state

    def since(self, server_id: str) -> float:
        """When ``server_id`` entered its state (epoch seconds)."""
        return self._peek(server_id).since

    def reason(self, server_id: str) -> str:
        return self._peek(server_id).reason

    def _peek(self, server_id: str) -> _Life:
        """A backend's life for reading: one never seen reads as ``registered`` and is not created
        (a read must not make a name that never was, e.g. after deregistration)."""
        return self._lives.get(server_id) or _UNSEEN

    def draining(self, backend: str) -> bool:
        """Whether new calls to ``backend`` are refused (``policies.mgp_lifecycle.DrainingBackends``)."""
        life = self._lives.get(backend)
        return life is not None and life.state == "draining"

    def any_draining(self) -> bool:
        return bool(self._draining)

    def stopped(self, backend: str) -> bool:
        """Whether an operator drained ``backend`` (it is or will be ``disconnected`` for good)."""
        life = self._lives.get(backend)
        return life is not None and life.drained_by_operator

    # ---- feeds -----------------------------------------------------------------------------------

    def observe(self, conn: ConnectionFacts, reason: str = "") -> None:
        """The connection's state, with the overlays, as the backend's state now."""
        life = self._life(conn.name)
        if life.stopped:
            return
        new = derived_state(conn)
        if life.drained_by_operator:
            new = "draining"  # until the drain ends, whatever the connection does meanwhile
        elif life.said is not None and new == "connected":
            new = life.said
        if new == "error" and not reason:
            reason = RESTART_LIMIT_EXCEEDED
        self._move(conn.name, new, reason or (conn.last_error if new != "connected" else "") or new)

    def on_state(self, conn: ConnectionFacts, state: str, reason: str) -> None:
        """``MgpNews.on_state``: a connect (``ready``) or a loss (``disconnected``)."""
        life = self._life(conn.name)
        life.said = None  # what the backend said held for the connection that ended
        if state == "ready" and life.stopped:
            # Only a new connection under the name (a backend registered again) connects after a
            # shutdown: it starts a life of its own.
            life.stopped = life.drained_by_operator = False
        if conn.gave_up:
            reason = f"{RESTART_LIMIT_EXCEEDED}: {reason}" if reason else RESTART_LIMIT_EXCEEDED
        if state == "disconnected" and conn.state == "ready" and not life.drained_by_operator:
            # Told before the connection closes (a backend being deregistered): gone all the same,
            # and for good (the connection may stay open a while for the calls in flight).
            self._move(conn.name, "disconnected", reason or state)
            life.stopped = True
            return
        self.observe(conn, reason or ("connected" if state == "ready" else state))

    def on_notification(self, conn: ConnectionFacts, message: dict[str, Any]) -> None:
        """A backend's own ``notifications/mgp.lifecycle`` (§11.5): its word on its state. Only a
        connected backend's word counts (``draining`` makes the gateway refuse new calls to it)."""
        params = message.get("params")
        new = params.get("new_state") if isinstance(params, dict) else None
        if new not in STATES:
            log.info("backend %s sent %s without a known new_state: %.200r", conn.name, names.LIFECYCLE, params)
            return
        assert isinstance(params, dict) and isinstance(new, str)
        said_reason = params.get("reason")
        life = self._life(conn.name)
        life.said = None if new == "connected" else new
        self.observe(conn, said_reason if isinstance(said_reason, str) and said_reason else f"server said {new}")

    # ---- an operator's drain (gateway/mgp/drain.py) ----------------------------------------------

    def begin_drain(self, backend: str, reason: str) -> None:
        life = self._life(backend)
        life.drained_by_operator = True
        self._move(backend, "draining", reason)

    def end_drain(self, backend: str, reason: str) -> None:
        """The drain is over and the connection closed: ``disconnected`` for good."""
        life = self._life(backend)
        life.drained_by_operator = True
        self._move(backend, "disconnected", reason)
        life.stopped = True

    # ---- a backend that leaves (MGP §15 deregistration) -----------------------------------------

    def forget(self, backend: str, reason: str) -> None:
        """``backend`` left the gateway: it ends ``disconnected`` (listeners are told when it was not
        already), then its state is dropped, so a backend registered later under the name starts a
        life of its own at ``registered``."""
        if backend not in self._lives or backend == GATEWAY_ID:
            return
        self._move(backend, "disconnected", reason)
        del self._lives[backend]
        self._draining.discard(backend)

    # ---- the gateway itself ----------------------------------------------------------------------

    def gateway(self, state: str, reason: str) -> None:
        self._move(GATEWAY_ID, state, reason)

    # ---- the machine -----------------------------------------------------------------------------

    def _life(self, server_id: str) -> _Life:
        life = self._lives.get(server_id)
        if life is None:
            life = self._lives[server_id] = _Life(since=self._clock())
        return life

    def _move(self, server_id: str, new: str, reason: str) -> None:
        if new not in STATES:
            raise ValueError(f"not a lifecycle state: {new!r}")
        life = self._life(server_id)
        if life.state == new:
            return
        now = self._clock()
        transition = Transition(server_id, life.state, new, reason, now)
        life.state, life.since, life.reason = new, now, reason
        if new == "draining":
            self._draining.add(server_id)
        else:
            self._draining.discard(server_id)
        log.info("MGP lifecycle: %s %s -> %s (%s)", server_id, transition.previous_state, new, reason)
        for listener in self._listeners:
            try:
                listener(transition)
            except Exception:
                log.exception("MGP lifecycle listener failed")


class LifecycleNotifier:
    """Pushes every transition as ``notifications/mgp.lifecycle`` to the MGP clients that want it."""

    def __init__(self, sessions: Iterable[ClientSession]) -> None:
        self._sessions = sessions

    def __call__(self, transition: Transition) -> None:
        message = jsonrpc.notification(names.LIFECYCLE, transition.params())
        for session in list(self._sessions):
            if self._wants(session, transition.server_id):
                session.standalone.push(message)

    @staticmethod
    def _wants(session: ClientSession, server_id: str) -> bool:
        facet = session.mgp
        if facet is None or facet.modern or not facet.wants("lifecycle"):
            return False
        if not session.initialized or session.closed:
            return False
        return server_id == GATEWAY_ID or server_id in session.view.backends


class AuditSink(Protocol):
    """The gateway's one audit stream (``gateway.audit.AuditLog``)."""

    def record(self, outcome: str, /, **fields: Any) -> None: ...


class LifecycleAudit:
    """Every transition into the gateway's audit stream (MGP clients that negotiated ``audit`` get it
    as ``notifications/mgp.audit`` through ``gateway/mgp/audit_stream.py``): §6.4 ``SERVER_CONNECTED``
    on a connect, ``SERVER_DISCONNECTED`` when a connected server goes and when the gateway gives up
    (§11.6: with the ``restart_limit_exceeded`` detail), a custom ``dev.switchboard.lifecycle`` else."""

    def __init__(self, audit: AuditSink) -> None:
        self._audit = audit

    def __call__(self, transition: Transition) -> None:
        new, previous = transition.new_state, transition.previous_state
        if new == "connected":
            event_type = "SERVER_CONNECTED"
        elif new == "error" or (previous in ("connected", "draining") and new in ("disconnected", "restarting")):
            event_type = "SERVER_DISCONNECTED"
        else:
            event_type = "dev.switchboard.lifecycle"
        self._audit.record(
            "lifecycle",
            event_type=event_type,
            backend=transition.server_id,
            previous_state=previous,
            new_state=new,
            reason=transition.reason,
            result=RESTART_LIMIT_EXCEEDED if new == "error" else None,
        )
