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

This module imports nothing of ours: every room may use it.
"""

from __future__ import annotations

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
TOOL_PINNED = -32097

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
