"""Raw HTTP on a plain socket: malformed and fuzzed requests, bytes no HTTP client library would send."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, strategies as st

from tests.security.fuzz.clients import assert_raw_fine
from tests.security.fuzz.support import fuzz, port_of
from tests.support import RunningGateway

pytestmark = pytest.mark.timeout(120)


def _host(gw: RunningGateway) -> bytes:
    return f"127.0.0.1:{port_of(gw)}".encode()


RAW_REQUESTS: dict[str, Callable[[bytes], bytes]] = {
    "garbage": lambda h: b"\x00\x01\x02garbage\xff\r\n\r\n",
    "tls-client-hello": lambda h: bytes.fromhex("16030100a5010000a10303") + b"\x00" * 64,
    "http2-preface": lambda h: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
    "http-0.9": lambda h: b"GET /mcp\r\n",
    "lowercase-method": lambda h: b"get /mcp HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "unknown-method": lambda h: b"BREW /mcp HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "version-9.9": lambda h: b"GET /healthz HTTP/9.9\r\nHost: " + h + b"\r\n\r\n",
    "no-version": lambda h: b"GET /healthz\r\nHost: " + h + b"\r\n\r\n",
    "absolute-uri": lambda h: b"GET http://evil.example/mcp HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "asterisk": lambda h: b"OPTIONS * HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "connect": lambda h: b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "nul-in-target": lambda h: b"GET /mc\x00p HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "space-in-target": lambda h: b"GET /m c p HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "crlf-in-target": lambda h: b"GET /mcp\r\nX-Injected: 1 HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "percent-garbage": lambda h: b"GET /%zz%ff%00?%%%=%% HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "unicode-target": lambda h: "GET /mcp/\u00e9\u2028 HTTP/1.1\r\nHost: ".encode() + h + b"\r\n\r\n",
    "long-target": lambda h: b"GET /" + b"a" * 1_000_000 + b" HTTP/1.1\r\nHost: " + h + b"\r\n\r\n",
    "long-header": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\nX-Big: " + b"b" * 1_000_000 + b"\r\n\r\n",
    "many-headers": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\n" + b"X: y\r\n" * 20_000 + b"\r\n",
    "header-without-colon": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\nNoColonHere\r\n\r\n",
    "space-before-colon": lambda h: b"GET /healthz HTTP/1.1\r\nHost : " + h + b"\r\n\r\n",
    "obs-fold": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\nX: a\r\n  folded\r\n\r\n",
    "nul-in-header": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\nX-\x00: \x00\r\n\r\n",
    "bare-lf": lambda h: b"GET /healthz HTTP/1.1\nHost: " + h + b"\n\n",
    "bare-cr": lambda h: b"GET /healthz HTTP/1.1\rHost: " + h + b"\r\r",
    "no-host": lambda h: b"POST /mcp HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
    "two-hosts": lambda h: b"GET /mcp HTTP/1.1\r\nHost: " + h + b"\r\nHost: evil.example\r\n\r\n",
    "host-garbage": lambda h: b"GET /mcp HTTP/1.1\r\nHost: \xff\xfe\x80\r\n\r\n",
    "content-length-letters": lambda h: b"POST /mcp HTTP/1.1\r\nHost: " + h + b"\r\nContent-Length: abc\r\n\r\n{}",
    "content-length-negative": lambda h: b"POST /mcp HTTP/1.1\r\nHost: " + h + b"\r\nContent-Length: -1\r\n\r\n{}",
    "content-length-superscript": lambda h: b"POST /mcp HTTP/1.1\r\nHost: " + h + b"\r\nContent-Length: \xb2\r\n\r\n{}",
    "content-length-huge": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nContent-Length: 99999999999999999999999\r\n\r\n{}"
    ),
    "content-length-twice": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: " + h + b"\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}"
    ),
    "content-length-too-short": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + b'Content-Length: 5\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    ),
    "content-length-too-long": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        + b'Content-Length: 500\r\n\r\n{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
    ),
    "content-length-and-chunked": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n"
        + b"\r\n2\r\n{}\r\n0\r\n\r\n"
    ),
    "chunked-bad-size": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
    ),
    "chunked-huge-size": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{}\r\n"
    ),
    "chunked-over-limit": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"".join(b"10000\r\n" + b" " * 0x10000 + b"\r\n" for _ in range(70))
        + b"0\r\n\r\n"
    ),
    "transfer-encoding-garbage": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: " + h + b"\r\nTransfer-Encoding: gzip, \xff\r\n\r\n{}"
    ),
    "pipelined-garbage": lambda h: b"GET /healthz HTTP/1.1\r\nHost: " + h + b"\r\n\r\n\xff\xfe garbage\r\n\r\n",
    "upgrade-h2c": lambda h: (
        b"GET /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n"
    ),
    "expect-100": lambda h: (
        b"POST /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}"
    ),
    "ws-upgrade-on-post": lambda h: (
        b"POST /mcp/ws HTTP/1.1\r\nHost: "
        + h
        + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 0\r\n\r\n"
    ),
    "ws-upgrade-on-mcp": lambda h: (
        b"GET /mcp HTTP/1.1\r\nHost: "
        + h
        + b"\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: x\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ),
}


@pytest.mark.parametrize("name", list(RAW_REQUESTS))
def test_raw_http_malformed_requests(plain: RunningGateway, authed: RunningGateway, name: str) -> None:
    """A complete request is answered (or the connection closed) at once; one that announces more bytes than it
    sends may be waited for, until the client says it is done."""
    for gw in (plain, authed):
        assert_raw_fine(gw, RAW_REQUESTS[name](_host(gw)), strict=name not in RAW_INCOMPLETE)


RAW_INCOMPLETE = {"http-0.9", "content-length-too-long"}  # the server rightly waits for the rest
RAW_TARGETS = [
    b"/mcp",
    b"/sse",
    b"/messages?session_id=x",
    b"/mcp/ws",
    b"/ws?topic=a",
    b"/healthz",
    b"/servers/demo/mcp",
]


@fuzz(80)
@given(
    method=st.sampled_from([b"GET", b"POST", b"DELETE", b"PUT", b"HEAD", b"OPTIONS"]) | st.binary(max_size=8),
    target=st.sampled_from(RAW_TARGETS) | st.binary(max_size=40),
    version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2", b""]) | st.binary(max_size=10),
    headers=st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=60)), max_size=5),
    body=st.binary(max_size=200),
    raw=st.binary(max_size=300),
    shape=st.sampled_from(["request", "request", "bytes"]),
)
def test_raw_http_fuzzed(
    plain: RunningGateway,
    method: bytes,
    target: bytes,
    version: bytes,
    headers: list[tuple[bytes, bytes]],
    body: bytes,
    raw: bytes,
    shape: str,
) -> None:
    if shape == "bytes":
        data = raw
    else:
        lines = [method + b" " + target + b" " + version, b"Host: " + _host(plain)]
        lines += [name + b": " + value for name, value in headers]
        lines.append(b"Content-Length: %d" % len(body))
        data = b"\r\n".join(lines) + b"\r\n\r\n" + body
    assert_raw_fine(plain, data, strict=False)
