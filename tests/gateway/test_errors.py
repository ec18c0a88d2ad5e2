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
