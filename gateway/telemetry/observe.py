"""What the request pipeline calls when someone watches (OpenTelemetry, JSON logs, the access log).

Each hook is optional: the router, the forwarder, MCPL's peers, the MCPx hub and its backend
participants hold ``None`` when nothing watches, and then pay one attribute check per call (no
allocation, no task). The interfaces here name what each place hands over;
``gateway/telemetry/otel.py`` implements them with OpenTelemetry, ``LogIdsOnly`` with nothing but
the log context; ``access_line`` writes the access log, called after each audit record
(``audit_tap``).

Invariants: an observer never changes an answer (it adds trace context to what goes to backends),
and ends every span it starts (a cancelled or failed request included); a request whose span could
not be made is served without one.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

import gateway.logs as logs  # at call time only: gateway.logs imports this package (its context)
from gateway.telemetry.context import LOG_IDS, LogIds, trace_id_of_traceparent

if TYPE_CHECKING:
    from gateway.events import Event
    from gateway.sessions import ClientSession
    from gateway.upstreams.connection import BackendConnection

Message = dict[str, Any]


class ServerObserver(Protocol):
    """Around one client message the router handles (a request or a notification)."""

    async def serve(
        self, session: ClientSession, message: Message, handled: Awaitable[Message | None]
    ) -> Message | None: ...


class ClientSpan(Protocol):
    """One request to a backend while it runs: its trace context is in ``params._meta`` and, until
    ``end``, in ``OUTGOING_HTTP`` for an HTTP backend's request headers."""

    def end(self, error_type: str) -> None: ...


class EnvelopeSpan(Protocol):
    def end(self, delivered: int) -> None: ...


class Tracing(ServerObserver, Protocol):
    """Everything OpenTelemetry traces: client requests, backend calls, MCPx envelopes."""

    def note_http(self, traceparent: str | None, tracestate: str | None) -> None:
        """The HTTP request being served carries these W3C trace context headers (or none)."""
        ...

    def client(
        self, backend: str, conn: BackendConnection, method: str, params: dict[str, Any] | None
    ) -> tuple[ClientSpan, dict[str, Any]]:
        """A CLIENT span for a backend request, and the params with its trace context in ``_meta``."""
        ...

    def envelope(self, topic: str, sender: str, envelope: dict[str, Any]) -> EnvelopeSpan:
        """A span for one MCPx envelope routed to a topic's participants."""
        ...

    def audited(self, backend: str, outcome: str) -> None:
        """The request being served was decided (annotates its span)."""
        ...

    async def shutdown(self) -> None:
        """Export what is buffered and stop (off the event loop)."""
        ...


class LogIdsOnly:
    """JSON logs without tracing: each client request's log lines carry its session id, and the trace id
    its client sent in ``params._meta.traceparent``."""

    async def serve(
        self, session: ClientSession, message: Message, handled: Awaitable[Message | None]
    ) -> Message | None:
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        trace_id = trace_id_of_traceparent(meta.get("traceparent")) if isinstance(meta, dict) else None
        token = LOG_IDS.set(LogIds(trace_id, None, session.id))
        try:
            return await handled
        finally:
            LOG_IDS.reset(token)


# (session, event, decision outcome, backend, latency ms, reason, result): Router.audit's facts.
AuditTap = Callable[["ClientSession", "Event", str, str, float, "str | None", "str | None"], None]

ACCESS_LOG = logging.getLogger("switchboard.access")  # logs.ACCESS_LOGGER


def access_line(
    session: ClientSession,
    event: Event,
    outcome: str,
    backend: str,
    latency_ms: float,
    reason: str | None,
    result: str | None,
) -> None:
    """One access log line per client request (logger ``switchboard.access``, level info).

    The text line is made here once; the JSON fields only when a JSON line or a logging record
    needs them (the default text format writes the message alone)."""
    method = event.method or "unknown"
    principal = session.principal.name
    shown_result = f" result={result}" if result is not None and result != "ok" else ""
    message = (
        f"{method} backend={backend} outcome={outcome}{shown_result} {latency_ms:.3f}ms "
        f"principal={principal} session={session.id[:8]}"
    )
    fast = logs.access_lines()
    if fast is not None and not fast.json:
        fast.write_text(message)
        return
    fields: dict[str, Any] = {
        "method": method,
        "backend": backend,
        "outcome": outcome,
        "duration_ms": latency_ms,
        "principal": principal,
        "session": session.id,
    }
    if result is not None:
        fields["result"] = result
    if reason:
        fields["reason"] = reason
    if event.rpc_id is not None:
        fields["rpc_id"] = event.rpc_id
    if fast is not None:
        fast.write(message, fields)
    else:
        ACCESS_LOG.info("%s", message, extra={"access": fields})


def audit_tap(tracing: Tracing | None) -> AuditTap | None:
    """What ``Router.audit`` calls after each record: the access log line (when its logger writes
    info) and the span's decision attributes (when tracing); None when neither is wanted."""
    access = ACCESS_LOG.isEnabledFor(logging.INFO)
    if tracing is None:
        return access_line if access else None

    def tap(
        session: ClientSession,
        event: Event,
        outcome: str,
        backend: str,
        latency_ms: float,
        reason: str | None,
        result: str | None,
    ) -> None:
        tracing.audited(backend, outcome)
        if access:
            access_line(session, event, outcome, backend, latency_ms, reason, result)

    return tap
