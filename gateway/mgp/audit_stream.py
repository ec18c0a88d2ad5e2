"""The gateway's one audit stream, toward MGP clients: ``notifications/mgp.audit`` and
``mgp/audit/replay`` (kernel tool ``mgp.audit.replay``), MGP_SECURITY.md §6.3-§6.5.

Every record of ``gateway/audit.py`` (every decision and call the router audits, and what other
parts of the gateway record) gets the next number of one global sequence and is kept in a bounded
ring. It is pushed, in the §6.3 shape (``adapters/mgp/audit_event.py``) with ``_mgp: {seq}``, to each
live MGP session that negotiated ``audit`` and may see it, and is offered to the ``audit`` event
channel (``gateway/mgp/events.py``).

Who sees what: a client sees the records of its own principal; a principal holding the capability
``mgp/request:mgp/audit/*`` sees all of them (operators, audit servers). The same rule filters
replay.

Sequence numbers are global, not per client as §6.3 has it for kernel-to-server forwarding: one
number names one record everywhere, so ``since_seq`` means the same to every caller. A client
therefore sees gaps where records of other principals were; replay over such a gap returns nothing
it may see, which is the answer it needs.

Pushes go to sessions that negotiated in ``initialize`` (stdio and legacy-era HTTP): the 0.8 draft
keeps MGP's unsolicited notifications off modern HTTP (MGP_MODERNIZATION_DESIGN.md §5.2), whose
clients poll ``mgp.audit.replay`` instead.

Invariants: the listener does O(1) work per record when no session watches (a counter, a tuple
appended to the ring, two checks); the §6.3 params are built at most once per record pushed, and
only when someone sees it; the ring holds at most ``capacity`` records; a session watches from the
moment its ``initialize`` negotiated ``audit`` (``watch``, called by the MGP server: the facet is
fixed then; no scan of the live sessions, which made opening many sessions quadratic) and is
forgotten when it ends.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeGuard

from adapters.mgp import audit_event, names
from gateway import jsonrpc
from gateway.clock import rfc3339_ms
from gateway.routing.call import Call, Routed

if TYPE_CHECKING:
    from gateway.audit import AuditLog, AuditRecord
    from gateway.sessions import ClientSession
    from policies.principal import Principal

REPLAY = "mgp/audit/replay"
SEE_ALL = "mgp/request:mgp/audit/all"  # matched by the operator's capability mgp/request:mgp/audit/*
DEFAULT_CAPACITY = 4096
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(slots=True, eq=False)
class Entry:
    """One audit record, numbered; its §6.3 params are made on first need."""

    seq: int
    record: AuditRecord
    _event: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def event(self) -> dict[str, Any]:
        if self._event is None:
            self._event = audit_event.audit_event(self.record, self.seq)
        return self._event


Tap = Callable[[Entry], None]


def visible(principal: Principal, record: AuditRecord) -> bool:
    """Whether ``principal`` may see ``record``: its own, or all with ``mgp/request:mgp/audit/*``."""
    return record.get("principal") == principal.name or principal.capabilities.allows(SEE_ALL)


class AuditStream:
    def __init__(self, audit: AuditLog, *, capacity: int = DEFAULT_CAPACITY) -> None:
        self._ring: deque[tuple[int, AuditRecord]] = deque(maxlen=capacity)
        self._seq = 0
        self._watchers: dict[str, ClientSession] = {}  # session id -> a live MGP session with audit
        self._tap: Tap | None = None
        # Set by the tap's owner while it wants records (someone subscribed to the audit channel).
        self.tap_active = False
        audit.add_listener(self._on_record)

    def handlers(self) -> dict[str, Callable[[Call], Awaitable[Routed]]]:
        return {REPLAY: self.replay}

    def tap(self, callback: Tap) -> None:
        """``callback(entry)`` for every record while ``tap_active`` (the ``audit`` event channel)."""
        self._tap = callback

    @property
    def last_seq(self) -> int:
        return self._seq

    # ---- the audit log's listener (the hot path) -------------------------------------------------

    def _on_record(self, record: AuditRecord) -> None:
        self._seq += 1
        self._ring.append((self._seq, record))
        if self._watchers or self.tap_active:
            self._fan_out(Entry(self._seq, record))

    def watch(self, session: ClientSession) -> None:
        """A session negotiated MGP in its ``initialize`` (MgpServer.on_negotiated): with ``audit``
        active it watches from now on, its own ``initialize`` record included."""
        if session.mgp is not None and session.mgp.wants("audit"):
            self._watchers[session.id] = session

    def _fan_out(self, entry: Entry) -> None:
        for session_id, session in list(self._watchers.items()):
            if session.closed:
                del self._watchers[session_id]
            elif visible(session.principal, entry.record):
                session.standalone.push(jsonrpc.notification(names.AUDIT, entry.event))
        if self.tap_active and self._tap is not None:
            self._tap(entry)

    def session_ended(self, session: ClientSession) -> None:
        self._watchers.pop(session.id, None)

    # ---- mgp/audit/replay (§6.3) -----------------------------------------------------------------

    async def replay(self, call: Call) -> Routed:
        since_seq, since_ts, limit = _replay_params(call.params)
        principal = call.principal
        events: list[dict[str, Any]] = []
        has_more = False
        last = 0
        for seq, record in self._ring:
            if since_seq is not None:
                if seq <= since_seq:
                    continue
            elif record.get("ts", "") < since_ts:  # RFC 3339 UTC with milliseconds: text order is time order
                continue
            if not visible(principal, record):
                continue
            if len(events) == limit:
                has_more = True
                break
            events.append(_replayed(Entry(seq, record)))
            last = seq
        next_seq = last + 1 if has_more else self._seq + 1
        return Routed(jsonrpc.result(call.rpc_id, {"events": events, "has_more": has_more, "next_seq": next_seq}))


def _replayed(entry: Entry) -> dict[str, Any]:
    """A replayed event: §6.3's output lists ``seq`` at the top of each event."""
    event = {key: value for key, value in entry.event.items() if key != "_mgp"}
    return {"seq": entry.seq, **event}


def _replay_params(params: dict[str, Any]) -> tuple[int | None, str, int]:
    """(since_seq, since_timestamp as the audit log writes times, limit); since_seq wins when both are given."""
    since_seq = params.get("since_seq")
    since_ts = params.get("since_timestamp")
    limit = params.get("limit", DEFAULT_LIMIT)
    if not _is_int(limit) or limit < 1:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "limit must be a positive integer")
    limit = min(limit, MAX_LIMIT)
    if since_seq is not None:
        if not _is_int(since_seq) or since_seq < 0:
            raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "since_seq must be a non-negative integer")
        return since_seq, "", limit
    if since_ts is None:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "one of since_seq or since_timestamp is required")
    if not isinstance(since_ts, str):
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "since_timestamp must be an RFC 3339 date-time")
    try:
        parsed = datetime.fromisoformat(since_ts.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "since_timestamp must be an RFC 3339 date-time") from None
    if parsed.tzinfo is None:
        raise jsonrpc.RpcError(jsonrpc.INVALID_PARAMS, "since_timestamp needs a time zone (e.g. Z)")
    return None, rfc3339_ms(parsed.timestamp()), limit


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
