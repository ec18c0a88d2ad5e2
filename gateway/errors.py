"""The one error table: every JSON-RPC error code the gateway emits, and the HTTP status it answers with.

Every module that emits an error takes its code from here (adapters re-export their dialect's
codes under their own names; the numbers exist once). Where a transport can say more than the
JSON-RPC error does, a door asks :func:`http_status`:

- the legacy era (Streamable HTTP 2025-xx, legacy SSE) answers a JSON-RPC error with HTTP 200,
  except a rate limit, which is 429 with ``Retry-After`` so that proxies and clients back off;
- the 2026-07-28 era maps malformed requests to 400, an unknown method to 404, and a rate limit
  to 429 (MCP 2026-07-28, Streamable HTTP, "Errors").

Failures of the HTTP exchange itself (bad Host, body too large, wrong Content-Type, unknown
session...) keep the statuses their doors give them; those carry ``INVALID_REQUEST``.

MCPx answers on its topic socket with a ``system/error`` whose code is a string (``MCPX_*`` below);
a policy's denial of an envelope gets its code from :func:`mcpx_denial_code`, by the decision's
outcome (``policies.chain.Outcome``, whose members are these label strings).

MGP (§14 of the draft, ``docs/MGP_COMMUNICATION.md``) puts its application-level codes outside the
JSON-RPC range, in ranges by category (1000-1099 security, 2000-2099 lifecycle, 3000-3099 resource,
4000-4099 validation, 4100-4199 discovery, 5000-5099 external). They are the members of
:class:`MgpCode` (a namespace of their own: ``MgpCode.RATE_LIMITED`` is 3000, not the gateway's
-32029), and :func:`mgp_error_data` builds the ``error.data`` every one of them carries
(``{"_mgp": {category, retryable, retry_after_ms?}}``, §14.4/§14.5). Only the gateway's *own* MGP
errors use them; a backend's errors pass through unchanged. A refusal on policy grounds of a
delivered ``tools/call`` is a Tool Rejection (§14.7), not an error: see ``adapters.mgp.rejection``.

This module imports nothing of ours: every room may use it.
"""

from __future__ import annotations

from enum import IntEnum, unique
from typing import Any

# ---- JSON-RPC 2.0 ----------------------------------------------------------------------------
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# ---- MCP -------------------------------------------------------------------------------------
REQUEST_CANCELLED = -32800
RESOURCE_NOT_FOUND = -32002
# 2026-07-28 (modern era)
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022

# ---- MCPL 0.4 (Appendix A and §14.6) --------------------------------------------------------
FEATURE_SET_NOT_ENABLED = -32001
UNKNOWN_FEATURE_SET = -32003
CHECKPOINT_NOT_FOUND = -32005
CHANNEL_NOT_PERMITTED = -32017
UNKNOWN_CHANNEL = -32023
CHANNEL_OPEN_FAILED = -32024

# ---- Switchboard's own, in the implementation-defined server-error range (-32000..-32099) -----
RATE_LIMITED = -32029  # also an MCPx envelope over its rate
BACKEND_UNAVAILABLE = -32090
BACKEND_TIMEOUT = -32091
NAME_NOT_ROUTABLE = -32092
CAPABILITY_DENIED = -32093  # any policy's "no" that has no code of its own (capabilities, scopes)
SESSION_OVERLOADED = -32094
PAYLOAD_TOO_LARGE = -32095
# No credential for a call to a backend (token exchange refused, authorization server down, no entry for the
# principal): gateway/upstreams/credentials.py; never replaced by a shared credential (issue 17).
UPSTREAM_CREDENTIAL = -32096
TOOL_PINNED = -32097
AUTH_UNAVAILABLE = -32099  # the authorization server cannot say whether a token is active (HTTP 503)

# ---- MCPx v0.1 system/error codes (strings; the reference gateway's names) --------------------
MCPX_INVALID_MESSAGE = "invalid_message"  # a frame that is not JSON
MCPX_INVALID_ENVELOPE = "invalid_envelope"  # a malformed envelope, or a spoofed ``from``
MCPX_ENVELOPE_TOO_LARGE = "envelope_too_large"
MCPX_RESERVED_KIND = "reserved_kind"  # a participant sent a ``system/*`` kind
MCPX_CAPABILITY_VIOLATION = "capability_violation"
MCPX_RATE_LIMITED = "rate_limited"
MCPX_KIND_MISMATCH = "kind_mismatch"
MCPX_UNKNOWN_RECIPIENT = "unknown_recipient"

# A policy denial of an envelope, by outcome label -> the system/error code it is answered with.
_MCPX_DENIAL = {
    "denied": MCPX_CAPABILITY_VIOLATION,
    "rate_limited": MCPX_RATE_LIMITED,
    "spoofed": MCPX_INVALID_ENVELOPE,
    "reserved": MCPX_RESERVED_KIND,
}


# ---- MGP §14.2/§14.3 (0.3 seed and the 0.8 draft; application codes, outside JSON-RPC's range) ---
@unique
class MgpCode(IntEnum):
    """Every §14.3 code the gateway may emit as an MGP peer (the seed's table, plus 4003 (0.5),
    4004 and 4101 (0.8 additive)). A tool refused because its required permissions were not granted
    is ``PERMISSION_DENIED`` (audited as ``TOOL_BLOCKED``, §6.4); one refused by access control is
    ``ACCESS_DENIED``; by a validator ``VALIDATION_BLOCKED``; by code safety ``CODE_SAFETY_VIOLATION``."""

    PERMISSION_DENIED = 1000
    ACCESS_DENIED = 1001
    AUTH_REQUIRED = 1002
    AUTH_EXPIRED = 1003
    VALIDATION_BLOCKED = 1010
    CODE_SAFETY_VIOLATION = 1011
    SERVER_NOT_READY = 2000
    SERVER_DRAINING = 2001
    SERVER_RESTARTING = 2002
    RATE_LIMITED = 3000
    RESOURCE_EXHAUSTED = 3001
    QUOTA_EXCEEDED = 3002
    TIMEOUT = 3003
    INVALID_TOOL_ARGS = 4000
    TOOL_NOT_FOUND = 4001
    TOOL_DISABLED = 4002
    TOOL_NAME_CONFLICT = 4003
    RESOURCE_NOT_FOUND = 4004
    SERVER_ALREADY_REGISTERED = 4101
    UPSTREAM_ERROR = 5000
    UPSTREAM_TIMEOUT = 5001
    UPSTREAM_UNAVAILABLE = 5002


# A tool call refused because a permission the tool needs was not granted: the §6.4 audit event type,
# also the §14.7.2 rejection ``code`` (the §14.7.3 registry has none for this case); as a JSON-RPC
# error (the seed's wire) it is ``MgpCode.PERMISSION_DENIED``.
MGP_TOOL_BLOCKED = "TOOL_BLOCKED"

# §14.2 ranges -> §14.5 category (the 4100 range is named "Discovery errors" in 0.8's §14.2).
_MGP_CATEGORIES = (
    (1000, 1099, "security"),
    (2000, 2099, "lifecycle"),
    (3000, 3099, "resource"),
    (4000, 4099, "validation"),
    (4100, 4199, "discovery"),
    (5000, 5099, "external"),
)
# Whether retrying the same request can succeed (§14.5 ``retryable``; §14.3.1 for 4004).
_MGP_RETRYABLE = frozenset(
    {
        MgpCode.SERVER_NOT_READY,
        MgpCode.SERVER_DRAINING,
        MgpCode.SERVER_RESTARTING,
        MgpCode.RATE_LIMITED,
        MgpCode.RESOURCE_EXHAUSTED,
        MgpCode.TIMEOUT,
        MgpCode.UPSTREAM_TIMEOUT,
        MgpCode.UPSTREAM_UNAVAILABLE,
    }
)


def mgp_category(code: int) -> str | None:
    """The §14.5 category of an MGP code by its §14.2 range, or None outside every range."""
    for low, high, category in _MGP_CATEGORIES:
        if low <= code <= high:
            return category
    return None


def mgp_error_data(code: int, *, retry_after_ms: int | None = None, **extra: Any) -> dict[str, Any]:
    """``error.data`` of one of the gateway's MGP errors: ``{"_mgp": {category, retryable,
    retry_after_ms?, ...extra}}`` (§14.4). ``extra`` carries the optional §14.5 fields
    (``retry_strategy``, ``max_retries``, ``fallback_tool``, ``details``); a ``retry_after_ms`` is
    only given for a retryable code."""
    member = MgpCode(code)  # ValueError for a code that is not one of ours
    retryable = member in _MGP_RETRYABLE
    recovery: dict[str, Any] = {"category": mgp_category(member), "retryable": retryable}
    if retry_after_ms is not None and retryable:
        recovery["retry_after_ms"] = max(0, int(retry_after_ms))
    recovery.update({key: value for key, value in extra.items() if value is not None})
    return {"_mgp": recovery}


# The gateway's own errors as an MGP client reads them (§14.3): same meaning, MGP's number.
_MGP_EQUIVALENT: dict[int, MgpCode] = {
    RATE_LIMITED: MgpCode.RATE_LIMITED,
    SESSION_OVERLOADED: MgpCode.RESOURCE_EXHAUSTED,
    BACKEND_UNAVAILABLE: MgpCode.UPSTREAM_UNAVAILABLE,
    BACKEND_TIMEOUT: MgpCode.UPSTREAM_TIMEOUT,
    CAPABILITY_DENIED: MgpCode.PERMISSION_DENIED,
    TOOL_PINNED: MgpCode.TOOL_DISABLED,
    UPSTREAM_CREDENTIAL: MgpCode.UPSTREAM_ERROR,
}


_MGP_CODES = frozenset(int(member) for member in MgpCode)


def as_mgp_error(error: dict[str, Any]) -> dict[str, Any]:
    """One of the gateway's own JSON-RPC errors as an MGP client gets it (§14.3-§14.5): an MGP
    code where one means the same, and ``data._mgp`` (category, retryable, ``retry_after_ms`` from
    a rate limit's ``retryAfterMs``) on every MGP code. Other errors are returned as they are."""
    code = error.get("code")
    if not isinstance(code, int) or isinstance(code, bool):
        return error
    member = _MGP_EQUIVALENT.get(code) or (MgpCode(code) if code in _MGP_CODES else None)
    if member is None:
        return error
    found = error.get("data")
    data: dict[str, Any] = found if isinstance(found, dict) else {}
    if isinstance(data.get("_mgp"), dict):
        return {**error, "code": int(member)}
    retry = data.get("retryAfterMs")
    retry_ms = retry if isinstance(retry, int) and not isinstance(retry, bool) else None
    return {**error, "code": int(member), "data": {**data, **mgp_error_data(member, retry_after_ms=retry_ms)}}


_LEGACY_STATUS = {RATE_LIMITED: 429}
_MODERN_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
    RATE_LIMITED: 429,
}


def http_status(code: object, *, modern: bool) -> int:
    """The HTTP status of a JSON-RPC error with ``code`` (any JSON value: a backend chose it)."""
    if not isinstance(code, int) or isinstance(code, bool):
        return 200
    return (_MODERN_STATUS if modern else _LEGACY_STATUS).get(code, 200)


def mcpx_denial_code(outcome: str) -> str | None:
    """The MCPx ``system/error`` code of a policy denial with this outcome, or None when the table
    has none (the door then falls back to the denying policy's name)."""
    return _MCPX_DENIAL.get(outcome)
