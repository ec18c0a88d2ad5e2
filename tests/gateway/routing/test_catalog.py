"""Cursors and list-item actions of the catalog (gateway/routing/catalog.py)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

from gateway import jsonrpc
from gateway.routing.catalog import decode_cursor, encode_cursor, item_action
from policies.patterns import CapabilitySet


@given(st.integers(min_value=0, max_value=10**9))
def test_cursors_round_trip(offset: int) -> None:
    assert decode_cursor(encode_cursor(offset)) == offset


@given(st.one_of(st.text(max_size=40), st.integers(), st.lists(st.integers(), max_size=3), st.booleans()))
def test_any_other_cursor_is_invalid_params_never_a_crash(cursor: Any) -> None:
    try:
        decode_cursor(cursor)
    except jsonrpc.RpcError as exc:
        assert exc.code == jsonrpc.INVALID_PARAMS


def test_a_cursor_with_a_non_ascii_digit_is_refused() -> None:
    import base64

    with pytest.raises(jsonrpc.RpcError):
        decode_cursor(base64.urlsafe_b64encode("sb1:²".encode()).decode())


@pytest.mark.parametrize(
    ("kind", "item", "action"),
    [
        ("tools", {"name": "a:b"}, "mcp/request:tools/call:a:b"),
        ("prompts", {"name": "greet"}, "mcp/request:prompts/get:greet"),
        ("resources", {"uri": "demo://readme"}, "mcp/request:resources/read:demo://readme"),
        ("resourceTemplates", {"uriTemplate": "file:///{path}"}, "mcp/request:resources/read:file:///{path}"),
    ],
)
def test_an_item_is_shown_as_the_call_it_stands_for(kind: Any, item: dict[str, Any], action: str) -> None:
    assert item_action(kind, item) == action
    # A tool whose name holds ":" is shown only to a pattern naming it whole (or a trailing "*").
    if kind == "tools":
        assert not CapabilitySet(["mcp/request:tools/call:a"]).allows(action)
        assert CapabilitySet(["mcp/request:tools/call:a:b"]).allows(action)
