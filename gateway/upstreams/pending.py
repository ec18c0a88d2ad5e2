"""The requests a backend connection sent and still awaits answers to, and how answers find them.

Invariants: a request is in the table from ``begin`` until its answer, its abandonment or the
connection's loss; an answer is matched by our id (also when a backend stringified it); an error
answer with an id of the server's own, while the era probe waits, is the probe's; anything else
unknown is dropped (never raises: an id that is an array or object would otherwise end the reader);
on loss every request still waiting is answered -32090 and marked ``lost``, so the caller can tell
the gateway's own failure from a backend's answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from gateway import jsonrpc

if TYPE_CHECKING:
    from gateway.upstreams.connection import CallOwner

log = logging.getLogger(__name__)

MISSING: Any = object()  # a call whose client sent no progress token
EXPIRED: dict[str, Any] = {}  # the "answer" of a call whose deadline passed (never a backend's)


class Abortable(Protocol):
    """A request's exchange in progress on a carrier (gateway/upstreams/quick.py's QuickExchange)."""

    def abort(self) -> None: ...


@dataclass(slots=True, eq=False)
class Pending:
    upstream_id: int
    message: dict[str, Any]
    future: asyncio.Future[dict[str, Any]]
    owner: CallOwner | None
    client_token: Any = MISSING
    # The task blocked in the carrier's send (request/response carriers): interrupted on cancel.
    task: asyncio.Task[Any] | None = None
    interrupted: bool = False
    lost: str | None = None  # the connection went away before the answer: why
    # The exchange a carrier runs for it without a task of the caller's (cut short on cancel).
    exchange: Abortable | None = None
    # Credential headers of this request only (gateway/upstreams/credentials.py): the caller's, or the
    # gateway's own identity toward the backend; None for a backend whose credential is static.
    headers: Mapping[str, str] | None = None

    def expire(self) -> None:
        """Its deadline passed (gateway/upstreams/deadlines.py): the wait ends with :data:`EXPIRED`."""
        if not self.future.done():
            self.future.set_result(EXPIRED)


class PendingTable:
    __slots__ = ("_backend", "by_id")

    def __init__(self, backend: str) -> None:
        self._backend = backend
        # Upstream id -> request; the backend connection's hot path reads and writes it directly.
        self.by_id: dict[Any, Pending] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def owners(self) -> list[CallOwner]:
        return [p.owner for p in self.by_id.values() if p.owner is not None]

    def add(self, pending: Pending) -> None:
        self.by_id[pending.upstream_id] = pending

    def drop(self, pending: Pending) -> bool:
        """Forget ``pending`` (abandoned, cancelled, never sent); whether it was still waiting."""
        return self.by_id.pop(pending.upstream_id, None) is not None

    def owner_of(self, related: Any) -> CallOwner | None:
        """The owner of the request a carrier says a message relates to (None: unrelated)."""
        if related is None:
            return None
        pending = self.by_id.get(related)
        return pending.owner if pending is not None else None

    def answered(self, message: dict[str, Any], probe: Pending | None) -> None:
        """Hand an answer (a message without method) to the request it answers."""
        rpc_id = message.get("id")
        if type(rpc_id) is int:  # our own ids are ints: the common case, without the checks below
            pending = self.by_id.pop(rpc_id, None)
        elif rpc_id is not None and not jsonrpc.names_a_request(rpc_id):
            log.warning("backend %s answered with an id that is no string or number: %.200r", self._backend, rpc_id)
            return
        else:
            pending = self.by_id.pop(rpc_id, None)
            if pending is None and isinstance(rpc_id, str) and rpc_id.isascii() and rpc_id.isdigit():
                pending = self.by_id.pop(int(rpc_id), None)  # a backend that stringified our id
        if pending is None and isinstance(message.get("error"), dict) and probe is not None:
            # Servers that refuse the probe before any session exists answer with an id of
            # their own ("server-error") or null: that answer is to the probe all the same.
            pending = self.by_id.pop(probe.upstream_id, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result(message)
        elif pending is None:
            log.debug("backend %s answered unknown id %r", self._backend, rpc_id)

    def progress(self, message: dict[str, Any]) -> None:
        """A backend's progress on a call: to its owner, under the client's own token."""
        params = message.get("params")
        if not isinstance(params, dict):
            return
        token = params.get("progressToken")
        pending = self.by_id.get(token) if jsonrpc.names_a_request(token) else None
        if pending is None or pending.owner is None or pending.client_token is MISSING:
            return  # progress for a call that ended, or one the gateway made itself
        pending.owner.deliver({**message, "params": {**params, "progressToken": pending.client_token}})

    def fail_all(self, reason: str) -> None:
        waiting, self.by_id = self.by_id, {}
        for pending in waiting.values():
            if not pending.future.done():
                pending.lost = reason
                pending.future.set_result(jsonrpc.error(pending.upstream_id, jsonrpc.BACKEND_UNAVAILABLE, reason))
