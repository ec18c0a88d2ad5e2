"""What backends send that concerns MGP, handed to the feature that handles it.

Backends send MGP-only messages on their own (``notifications/mgp.*``: stream chunks, lifecycle,
events, callbacks; MGP_SPEC.md §1.6 layer 2) and change state (connected, gone). Each MGP feature
of the gateway (streaming, lifecycle, events, ...) registers here for what it handles;
``gateway/routing/backend_events.py`` asks here first, so a message no feature takes never reaches
a client that did not ask for it (plain clients never see MGP).

Invariants: at most one handler per method (a second registration is a programming error); a
handler that raises is logged and the message counts as handled (never re-delivered raw); state
changes reach every registered listener in registration order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection, CallOwner

log = logging.getLogger(__name__)

NotificationHandler = Callable[["BackendConnection", dict[str, Any]], None]
RequestHandler = Callable[["BackendConnection", dict[str, Any], "CallOwner | None"], None]
StateListener = Callable[["BackendConnection", str, str], None]  # (conn, state, reason)


class MgpNews:
    __slots__ = ("_notifications", "_requests", "_states")

    def __init__(self) -> None:
        self._notifications: dict[str, NotificationHandler] = {}
        self._requests: dict[str, RequestHandler] = {}
        self._states: list[StateListener] = []

    # ---- features register --------------------------------------------------------------------

    def on_notification(self, method: str, handler: NotificationHandler) -> None:
        if method in self._notifications:
            raise ValueError(f"{method} already has a handler")
        self._notifications[method] = handler

    def on_request(self, method: str, handler: RequestHandler) -> None:
        """``handler`` must answer the backend's request (``conn.send``), whatever happens."""
        if method in self._requests:
            raise ValueError(f"{method} already has a handler")
        self._requests[method] = handler

    def on_state(self, listener: StateListener) -> None:
        """``listener(conn, state, reason)`` on every connect (``"ready"``) and loss (``"disconnected"``)."""
        self._states.append(listener)

    # ---- backend events ask -------------------------------------------------------------------

    def notification(self, conn: BackendConnection, message: dict[str, Any]) -> bool:
        handler = self._notifications.get(message.get("method", ""))
        if handler is None:
            return False
        try:
            handler(conn, message)
        except Exception:
            log.exception("backend %s: MGP handler of %s failed", conn.name, message.get("method"))
        return True

    def request(self, conn: BackendConnection, message: dict[str, Any], owner: CallOwner | None) -> bool:
        handler = self._requests.get(message.get("method", ""))
        if handler is None:
            return False
        try:
            handler(conn, message, owner)
        except Exception:
            log.exception("backend %s: MGP handler of %s failed", conn.name, message.get("method"))
            return False  # the caller answers it with an error
        return True

    def state(self, conn: BackendConnection, state: str, reason: str = "") -> None:
        for listener in self._states:
            try:
                listener(conn, state, reason)
            except Exception:
                log.exception("backend %s: MGP state listener failed", conn.name)
