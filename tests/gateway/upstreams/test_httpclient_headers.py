"""gateway/upstreams/httpclient.py's encode_headers: header lines as sent, and no line break smuggled in."""

from __future__ import annotations

import pytest

from gateway.upstreams.httpclient import encode_headers


def test_headers_are_lines_in_order() -> None:
    assert encode_headers({"Mcp-Method": "tools/call", "x": ""}) == b"Mcp-Method: tools/call\r\nx: \r\n"
    assert encode_headers({}) == b""


@pytest.mark.parametrize("bad", ["a\rb", "a\nb", "\r\n", "a\r\nx-injected: 1"])
def test_a_line_break_in_a_name_or_value_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="line break"):
        encode_headers({"x": bad})
    with pytest.raises(ValueError, match="line break"):
        encode_headers({bad: "v"})
