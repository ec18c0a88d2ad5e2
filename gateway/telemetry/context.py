"""The per-request facts that logs and backend calls need, carried in context variables.

Invariants: these are plain ``contextvars`` (no OpenTelemetry import), so the JSON log formatter and
the HTTP backend carrier can read them whether or not tracing is on. Each is set by the one piece of
the request pipeline that knows its value and reset by that same piece when the work ends; asyncio
tasks created meanwhile (a backend call's own task) inherit the value, and nothing leaks into the
next request served by the same task (a stdio door handles its requests one after the other).
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import NamedTuple


class LogIds(NamedTuple):
    """What a log line says about the request it was written for (None: not known)."""

    trace_id: str | None
    span_id: str | None
    session_id: str | None


# Set by the router's observer around one client request (gateway/telemetry/observe.py, otel.py).
LOG_IDS: ContextVar[LogIds | None] = ContextVar("switchboard_log_ids", default=None)

# The W3C trace context of the HTTP request being served (``traceparent``/``tracestate`` headers),
# noted by ``Gateway.authenticate`` while tracing is on; a request's ``params._meta`` wins over it.
INCOMING_HTTP: ContextVar[dict[str, str] | None] = ContextVar("switchboard_incoming_trace", default=None)

# The headers a backend request sent over HTTP carries for the CLIENT span around it (set by the
# forwarder while tracing is on; gateway/upstreams/http.py adds them to the POST).
OUTGOING_HTTP: ContextVar[dict[str, str] | None] = ContextVar("switchboard_outgoing_trace", default=None)


def trace_id_of_traceparent(value: object) -> str | None:
    """The trace id of a W3C ``traceparent`` (``00-<32 hex>-<16 hex>-<2 hex>``), or None."""
    if isinstance(value, str) and len(value) >= 55 and value[2] == "-" and value[35] == "-":
        trace_id = value[3:35]
        if trace_id != "0" * 32:
            return trace_id
    return None
