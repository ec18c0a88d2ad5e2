"""The modern door's test for ``Mcp-Param-*`` headers: the set of plain header names it remembers."""

from __future__ import annotations

from gateway.transports import streamable_http_modern as door


def test_an_mcp_param_header_is_found_among_names_seen_before() -> None:
    plain = {b"host": b"h", b"content-type": b"application/json", b"x-seen-before": b"1"}
    assert not door._sends_param_headers(plain)
    assert plain.keys() <= door._PLAIN_NAMES  # remembered: the next such request passes with one test
    assert door._sends_param_headers({**plain, b"mcp-param-region": b"eu"})
    assert b"mcp-param-region" not in door._PLAIN_NAMES  # a param name is never remembered as plain


def test_names_past_the_bound_are_still_checked_one_by_one() -> None:
    invented = {f"x-invented-{n}".encode(): b"1" for n in range(door._PLAIN_NAMES_MAX + 10)}
    assert not door._sends_param_headers(invented)
    assert len(door._PLAIN_NAMES) <= door._PLAIN_NAMES_MAX
    assert door._sends_param_headers({**invented, b"mcp-param-x": b"1"})
