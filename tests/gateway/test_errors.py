"""The one error table (gateway/errors.py): one number per meaning, and the statuses doors answer with."""

from __future__ import annotations

import pytest

from adapters import mcp_modern, mcpl
from gateway import errors, jsonrpc
from policies import arguments, capabilities, envelope_rate, feature_sets, pinning, ratelimit, scopes
from policies.chain import Outcome


def codes() -> dict[str, int]:
    return {name: value for name, value in vars(errors).items() if name.isupper() and isinstance(value, int)}


def test_every_code_is_in_range_and_means_one_thing() -> None:
    table = codes()
    # JSON-RPC reserves -32768..-32000; MCP puts its "request cancelled" at -32800, just below.
    assert all(-32800 <= code <= -32000 for code in table.values()), table
    by_number: dict[int, list[str]] = {}
    for name, code in table.items():
        by_number.setdefault(code, []).append(name)
    assert {code: names for code, names in by_number.items() if len(names) > 1} == {}


def test_every_room_takes_its_codes_from_the_table() -> None:
    assert jsonrpc.INVALID_PARAMS is errors.INVALID_PARAMS and jsonrpc.CAPABILITY_DENIED is errors.CAPABILITY_DENIED
    assert mcpl.FEATURE_SET_NOT_ENABLED is errors.FEATURE_SET_NOT_ENABLED
    assert mcp_modern.HEADER_MISMATCH is errors.HEADER_MISMATCH
    assert ratelimit.RATE_LIMITED is envelope_rate.ENVELOPE_RATE_LIMITED is errors.RATE_LIMITED
    assert scopes.SCOPE_DENIED is capabilities.CAPABILITY_DENIED is errors.CAPABILITY_DENIED
    assert pinning.TOOL_PINNED is errors.TOOL_PINNED and arguments.INVALID_ARGUMENTS is errors.INVALID_PARAMS
    assert feature_sets.UNKNOWN_FEATURE_SET is errors.UNKNOWN_FEATURE_SET


@pytest.mark.parametrize(
    ("code", "legacy", "modern"),
    [
        (errors.RATE_LIMITED, 429, 429),
        (errors.PARSE_ERROR, 200, 400),
        (errors.INVALID_PARAMS, 200, 400),
        (errors.UNSUPPORTED_PROTOCOL_VERSION, 200, 400),
        (errors.METHOD_NOT_FOUND, 200, 404),
        (errors.CAPABILITY_DENIED, 200, 200),
        (errors.BACKEND_UNAVAILABLE, 200, 200),
        (-32602.0, 200, 200),  # a backend's float code is not ours to map
        ("-32602", 200, 200),
        (True, 200, 200),
        (None, 200, 200),
        ([1], 200, 200),
    ],
)
def test_http_status_by_era(code: object, legacy: int, modern: int) -> None:
    assert errors.http_status(code, modern=False) == legacy
    assert errors.http_status(code, modern=True) == modern


def test_mcpx_denials_have_their_system_error_codes() -> None:
    assert errors.mcpx_denial_code(Outcome.DENIED) == errors.MCPX_CAPABILITY_VIOLATION == "capability_violation"
    assert errors.mcpx_denial_code(Outcome.RATE_LIMITED) == errors.MCPX_RATE_LIMITED == "rate_limited"
    assert errors.mcpx_denial_code(Outcome.SPOOFED) == errors.MCPX_INVALID_ENVELOPE == "invalid_envelope"
    assert errors.mcpx_denial_code(Outcome.RESERVED) == errors.MCPX_RESERVED_KIND == "reserved_kind"
    # No code of their own: the door answers with the denying policy's name, as it always did.
    assert errors.mcpx_denial_code(Outcome.PINNED) is None and errors.mcpx_denial_code(Outcome.INVALID) is None
    # errors.py imports nothing of ours, so its table is keyed by label: every key must be one.
    assert all(Outcome(label) for label in errors._MCPX_DENIAL)


# ---- MGP §14 ---------------------------------------------------------------------------------------------


def test_mgp_codes_are_the_section_14_table() -> None:
    table = {member.name: int(member) for member in errors.MgpCode}
    assert table == {
        "PERMISSION_DENIED": 1000,
        "ACCESS_DENIED": 1001,
        "AUTH_REQUIRED": 1002,
        "AUTH_EXPIRED": 1003,
        "VALIDATION_BLOCKED": 1010,
        "CODE_SAFETY_VIOLATION": 1011,
        "SERVER_NOT_READY": 2000,
        "SERVER_DRAINING": 2001,
        "SERVER_RESTARTING": 2002,
        "RATE_LIMITED": 3000,
        "RESOURCE_EXHAUSTED": 3001,
        "QUOTA_EXCEEDED": 3002,
        "TIMEOUT": 3003,
        "INVALID_TOOL_ARGS": 4000,
        "TOOL_NOT_FOUND": 4001,
        "TOOL_DISABLED": 4002,
        "TOOL_NAME_CONFLICT": 4003,
        "RESOURCE_NOT_FOUND": 4004,
        "SERVER_ALREADY_REGISTERED": 4101,
        "UPSTREAM_ERROR": 5000,
        "UPSTREAM_TIMEOUT": 5001,
        "UPSTREAM_UNAVAILABLE": 5002,
    }
    # Outside JSON-RPC's range, and no clash with the gateway's own numbers (MGP's RATE_LIMITED is not ours).
    assert all(1000 <= code <= 5099 for code in table.values())
    assert errors.MgpCode.RATE_LIMITED != errors.RATE_LIMITED
    assert not set(table.values()) & set(codes().values())
    # Every MGP code answers with HTTP 200 in both eras: it is an application error, not a transport one.
    assert {errors.http_status(code, modern=m) for code in errors.MgpCode for m in (False, True)} == {200}


@pytest.mark.parametrize(
    ("code", "category", "retryable"),
    [
        (errors.MgpCode.PERMISSION_DENIED, "security", False),
        (errors.MgpCode.CODE_SAFETY_VIOLATION, "security", False),
        (errors.MgpCode.SERVER_NOT_READY, "lifecycle", True),
        (errors.MgpCode.SERVER_DRAINING, "lifecycle", True),
        (errors.MgpCode.RATE_LIMITED, "resource", True),
        (errors.MgpCode.QUOTA_EXCEEDED, "resource", False),
        (errors.MgpCode.TIMEOUT, "resource", True),
        (errors.MgpCode.INVALID_TOOL_ARGS, "validation", False),
        (errors.MgpCode.TOOL_NAME_CONFLICT, "validation", False),
        (errors.MgpCode.RESOURCE_NOT_FOUND, "validation", False),  # §14.3.1
        (errors.MgpCode.SERVER_ALREADY_REGISTERED, "discovery", False),
        (errors.MgpCode.UPSTREAM_ERROR, "external", False),
        (errors.MgpCode.UPSTREAM_UNAVAILABLE, "external", True),
    ],
)
def test_mgp_error_data(code: errors.MgpCode, category: str, retryable: bool) -> None:
    assert errors.mgp_error_data(code) == {"_mgp": {"category": category, "retryable": retryable}}
    with_delay = errors.mgp_error_data(code, retry_after_ms=5000)["_mgp"]
    assert ("retry_after_ms" in with_delay) is retryable  # a delay only where a retry can succeed
    assert errors.mgp_error_data(int(code)) == errors.mgp_error_data(code)


def test_mgp_error_data_extras_and_bad_codes() -> None:
    data = errors.mgp_error_data(
        3000, retry_after_ms=-5, retry_strategy="exponential_backoff", max_retries=3, fallback_tool=None
    )
    assert data == {
        "_mgp": {
            "category": "resource",
            "retryable": True,
            "retry_after_ms": 0,
            "retry_strategy": "exponential_backoff",
            "max_retries": 3,
        }
    }
    assert errors.MGP_TOOL_BLOCKED == "TOOL_BLOCKED"  # audit event type and rejection code, not a number
    assert errors.mgp_category(4150) == "discovery" and errors.mgp_category(999) is None
    with pytest.raises(ValueError):
        errors.mgp_error_data(1234)
    with pytest.raises(ValueError):
        errors.mgp_error_data(errors.RATE_LIMITED)
