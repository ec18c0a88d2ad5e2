"""MGP's audit event on the wire (MGP_SECURITY.md §6.3-§6.5) and where a request carries its trace id.

The gateway has one audit stream (``gateway/audit.py``): flat records such as ``{ts, outcome,
principal, action, method, backend, trace_id, reason, result, latency_ms}``. This module writes one
of them as the §6.3 ``notifications/mgp.audit`` params::

    {timestamp, trace_id, event_type, actor: {type, id}, target: {server_id, tool_name?},
     result, details, _mgp: {seq}}

- ``event_type`` is a §6.4 type where one fits (``TOOL_EXECUTED``, ``TOOL_BLOCKED``,
  ``VALIDATION_FAILED``, ``ACCESS_GRANTED``/``ACCESS_REVOKED``, ``PERMISSION_GRANTED``), a record's
  own ``event_type`` when it names one (a feature that audits ``CALLBACK_TIMEOUT`` says so), else a
  custom reverse-domain type ``dev.switchboard.<what>`` (§6.4 allows them) so that every record,
  not only tool calls, reaches the stream.
- ``result`` is ``SUCCESS`` (§6.3's example), ``FAILURE`` (the call ran and failed) or ``BLOCKED``
  (the gateway refused it; the spec names no other values).
- ``target.server_id`` is the backend's name, ``switchboard`` for what the gateway answered itself
  (its own ``server_id`` toward clients).

Trace ids (§6.5): a request's ``params.trace_id`` (or a top-level ``trace_id`` of an MGP-extended
request), else ``params._mgp.trace_id``, else the trace id of an OpenTelemetry ``traceparent`` in
``params._meta`` (0.8 maps MGP's observability fields onto the OTel ``_meta`` keys). Only short
printable strings are taken: a trace id ends up in logs and in every client's notification.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from adapters.mgp import names

AUDIT_SEQ_KEY: Final = "seq"  # params._mgp.seq (§6.3, nested, unlike the events' flat "_mgp.seq")
GATEWAY_SERVER_ID: Final = "switchboard"
CUSTOM_PREFIX: Final = "dev.switchboard."

SUCCESS, FAILURE, BLOCKED = "SUCCESS", "FAILURE", "BLOCKED"

_MAX_TRACE = 128
_TRACE = re.compile(r"[\x21-\x7e]{1,128}")  # printable ASCII, no spaces
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")

# Fields of a record that are the event's frame, not its details.
_FRAME = frozenset({"ts", "outcome", "principal", "backend", "trace_id", "result", "event_type", "action"})
_REVERSE_DOMAIN = re.compile(r"[a-z][a-z0-9-]*(\.[a-z0-9_-]+){2,}")


def trace_id_of(message: Mapping[str, Any]) -> str | None:
    """The trace id a client put on its request (§6.5; OTel ``traceparent`` in ``_meta``), or None."""
    params = message.get("params")
    if not isinstance(params, dict) or not ("trace_id" in params or "_mgp" in params or "_meta" in params):
        return str(message["trace_id"]) if _valid(message.get("trace_id")) else None  # the common case
    for candidate in (params.get("trace_id"), message.get("trace_id")):
        if _valid(candidate):
            return str(candidate)
    mgp = params.get("_mgp")
    if isinstance(mgp, dict) and _valid(mgp.get("trace_id")):
        return str(mgp["trace_id"])
    meta = params.get("_meta")
    if isinstance(meta, dict):
        parent = meta.get("traceparent")
        if isinstance(parent, str) and (found := _TRACEPARENT.fullmatch(parent.strip())) is not None:
            return found.group(1)
    return None


def _valid(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= _MAX_TRACE and _TRACE.fullmatch(value) is not None


def event_type_of(record: Mapping[str, Any]) -> str:
    """The §6.4 event type of one audit record (a custom ``dev.switchboard.*`` type when none fits)."""
    declared = record.get("event_type")
    if isinstance(declared, str) and (declared in names.AUDIT_EVENT_TYPES or _REVERSE_DOMAIN.fullmatch(declared)):
        return declared
    outcome = record.get("outcome")
    method = record.get("method")
    refused = outcome != "allowed"
    if method == "tools/call":
        if outcome == "invalid":
            return "VALIDATION_FAILED"  # a kernel-side validator (or the arguments' schema) refused it
        return "TOOL_BLOCKED" if refused else "TOOL_EXECUTED"
    if method in ("mgp/access/grant", "mgp/access/revoke") and not refused and record.get("result") == "ok":
        return "ACCESS_GRANTED" if method.endswith("grant") else "ACCESS_REVOKED"
    if method == "mgp/permission/grant" or outcome == "mgp_permissions":
        return "PERMISSION_GRANTED"
    if isinstance(method, str) and method:
        return CUSTOM_PREFIX + ("request_blocked" if refused else "request")
    return CUSTOM_PREFIX + _slug(str(outcome or "event"))


def result_of(record: Mapping[str, Any]) -> str:
    outcome = record.get("outcome")
    if record.get("method") is not None and outcome != "allowed":
        return BLOCKED
    result = record.get("result")
    if result is None or result == "ok":
        return SUCCESS
    return FAILURE


def audit_event(record: Mapping[str, Any], seq: int) -> dict[str, Any]:
    """``notifications/mgp.audit`` params for one record, numbered ``seq`` (§6.3)."""
    backend = record.get("backend")
    target: dict[str, Any] = {"server_id": GATEWAY_SERVER_ID if backend in (None, "gateway") else backend}
    tool = _tool_of(record)
    if tool is not None:
        target["tool_name"] = tool
    details = {key: value for key, value in record.items() if key not in _FRAME}
    if "latency_ms" in details:
        details["duration_ms"] = details.pop("latency_ms")
    details["outcome"] = record.get("outcome")
    event: dict[str, Any] = {
        "_mgp": {AUDIT_SEQ_KEY: seq},
        "timestamp": record.get("ts"),
        "event_type": event_type_of(record),
        "actor": {"type": "agent", "id": record.get("principal") or "anonymous"},
        "target": target,
        "result": result_of(record),
        "details": details,
    }
    trace = record.get("trace_id")
    if trace is not None:
        event["trace_id"] = trace
    return event


def _tool_of(record: Mapping[str, Any]) -> str | None:
    """The tool a ``tools/call`` record is about: the context of its action (``mcp/request:tools/call:NAME``)."""
    tool = record.get("tool")
    if isinstance(tool, str):
        return tool
    action = record.get("action")
    if record.get("method") != "tools/call" or not isinstance(action, str):
        return None
    parts = action.split(":", 2)
    return parts[2] if len(parts) == 3 and parts[2] else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9_-]+", "_", text.lower()).strip("_") or "event"
