"""``switchboard stdio``: nasty, fuzzed, partial and bursty lines on stdin."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, strategies as st

from tests.security.fuzz.clients import StdioGateway
from tests.security.fuzz.support import (
    ABSENT,
    INVALID_REQUEST,
    NASTY_BODIES,
    PARSE_ERROR,
    STDIO_LIMIT,
    TRACEBACK,
    assert_rpc_error,
    deep,
    fuzz,
    parse_like_the_gateway,
    rpc_messages,
)

pytestmark = pytest.mark.timeout(120)


def expected_stdio_error(line: bytes) -> int | None:
    """The error code a line must be answered with (id null), or None when the line may be answered otherwise."""
    if not line.strip():
        return None  # blank lines are skipped
    if len(line) > STDIO_LIMIT:
        return INVALID_REQUEST
    parsed = parse_like_the_gateway(line)
    if parsed is ABSENT:
        return PARSE_ERROR
    if isinstance(parsed, (dict, list)):
        return None if parsed else INVALID_REQUEST  # objects are judged field by field; [] is an empty batch
    return INVALID_REQUEST


def assert_stdio_line(gw: StdioGateway, line: bytes) -> None:
    gw.write(line + b"\n")
    before = gw.probe()
    assert gw.proc.poll() is None, gw.stderr()[-3000:]
    assert TRACEBACK not in gw.stderr(), gw.stderr()[-3000:]
    code = expected_stdio_error(line)
    if line.strip() and code is None:
        return
    errors = [m for m in before if "error" in m and m.get("id") is None]
    if code is None:
        assert not errors, (line[:200], before)
        return
    assert errors, (line[:200], before)
    assert errors[0]["error"]["code"] in (code, PARSE_ERROR, INVALID_REQUEST), (line[:200], errors)
    assert_rpc_error(errors[0])


STDIO_LINES: dict[str, bytes] = {
    **{name: body for name, body in NASTY_BODIES.items() if b"\n" not in body},
    "cr-only": b"\r",
    "crlf-json": b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}\r',
    "over-long": b'{"jsonrpc": "2.0", "id": 5, "method": "' + b"y" * (STDIO_LIMIT * 3) + b'"}',
    "over-long-garbage": b"\xff" * (STDIO_LIMIT * 40),
    "deep-within-limit": deep(STDIO_LIMIT // 2 - 1),
    "nul-bytes": b"\x00" * 100,
    "escape-sequences": b"\x1b[2J\x1b]0;title\x07",
}


@pytest.mark.parametrize("name", list(STDIO_LINES))
def test_stdio_nasty_lines(stdio_gw: StdioGateway, name: str) -> None:
    assert_stdio_line(stdio_gw, STDIO_LINES[name])


@fuzz(80)
@given(
    line=st.binary(max_size=300).map(lambda b: b.replace(b"\n", b""))
    | rpc_messages().map(lambda m: json.dumps(m).encode())
)
def test_stdio_fuzzed_lines(stdio_gw: StdioGateway, line: bytes) -> None:
    assert_stdio_line(stdio_gw, line)


def test_stdio_partial_lines_and_bursts(stdio_gw: StdioGateway) -> None:
    """A line written in pieces is one line; many lines in one write are many; an over-long line split across
    writes is discarded once, up to its newline."""
    for piece in (b'{"jsonrpc": "2.0", ', b'"id": "split", ', b'"method": "ping"}\n'):
        stdio_gw.write(piece)
        time.sleep(0.01)
    assert stdio_gw.until_id("split")[0]["result"] == {}
    stdio_gw.write(
        b"".join(json.dumps({"jsonrpc": "2.0", "id": f"b{i}", "method": "ping"}).encode() + b"\n" for i in range(200))
    )
    for i in range(200):
        stdio_gw.until_id(f"b{i}")
    for _ in range(3):
        stdio_gw.write(b"z" * STDIO_LIMIT)
    stdio_gw.write(b"\n")
    errors = [m for m in stdio_gw.probe() if "error" in m]
    assert len(errors) == 1 and errors[0]["error"]["code"] == INVALID_REQUEST, errors
