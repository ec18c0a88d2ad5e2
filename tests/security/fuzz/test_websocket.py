"""WebSocket ``/mcp/ws``: frames, framing violations, oversize messages, handshakes."""

from __future__ import annotations

import base64
import json
import socket
import struct
import time
import uuid

import pytest
from hypothesis import given, strategies as st

from tests.security.fuzz.clients import _statuses, assert_raw_fine, open_ws, ws_initialize, ws_probe
from tests.security.fuzz.support import (
    ABSENT,
    ALICE,
    NASTY_BODIES,
    PROPER_CLOSE_CODES,
    SMALL_LIMIT,
    STEP_S,
    assert_rpc_error,
    fuzz,
    parse_like_the_gateway,
    port_of,
    rpc_messages,
)
from tests.support import RunningGateway

pytestmark = pytest.mark.timeout(120)


def assert_ws_survived_frame(gw: RunningGateway, frame: str | bytes) -> None:
    """After one bad frame: JSON-RPC errors (and the ping answered), or a proper close; never a hang."""
    with open_ws(gw) as ws:
        ws_initialize(ws)
        ws.send(frame)
        result = ws_probe(ws, "probe")
        if isinstance(result, int):
            assert result in PROPER_CLOSE_CODES, (frame[:200], result)
            return
        for message in result:
            items = message if isinstance(message, list) else [message]
            for item in items:
                assert isinstance(item, dict) and item.get("jsonrpc") == "2.0", (frame[:200], message)
        raw = frame.encode() if isinstance(frame, str) else frame
        parsed = parse_like_the_gateway(raw)
        if parsed is ABSENT or not isinstance(parsed, (dict, list)):
            errors = [m for m in result if isinstance(m, dict) and "error" in m]
            assert errors, (frame[:200], result)
            assert_rpc_error(errors[0])
            assert errors[0]["id"] is None


WS_FRAMES: dict[str, str | bytes] = {
    **{name: body for name, body in NASTY_BODIES.items() if len(body) < 200_000 and name != "batch-huge"},
    "binary-garbage": b"\x00\xff\x80\x81",
    "binary-json": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode(),
    "text-with-nul": "\x00\x00",
    "text-unicode": "\u2028\u2029\ufeff\U0010ffff",
    "batch-moderate": json.dumps([{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(300)]),
}


@pytest.mark.parametrize("name", list(WS_FRAMES))
def test_ws_nasty_frames(plain: RunningGateway, name: str) -> None:
    frame = WS_FRAMES[name]
    if isinstance(frame, bytes) and name in NASTY_BODIES:
        try:
            frame = frame.decode()  # as text when it can be; invalid UTF-8 goes as a binary frame
        except UnicodeDecodeError:
            pass
    assert_ws_survived_frame(plain, frame)


@fuzz(60)
@given(
    frame=st.text(max_size=300)
    | st.binary(max_size=300)
    | rpc_messages().map(json.dumps)
    | st.lists(rpc_messages(), max_size=3).map(json.dumps)
)
def test_ws_fuzzed_frames(plain: RunningGateway, frame: str | bytes) -> None:
    assert_ws_survived_frame(plain, frame)


OVERSIZE_FRAMES: dict[str, tuple[str, list[tuple[int, bool, int, int]]]] = {
    # name: (gateway, [(opcode, fin, declared payload length, bytes of payload actually sent)])
    "text-over-4mib-default": ("plain", [(0x1, True, 4 * 1024 * 1024 + 10, 1000)]),
    "text-over-small-limit": ("authed", [(0x1, True, SMALL_LIMIT + 1, 1000)]),
    "binary-over-small-limit": ("authed", [(0x2, True, SMALL_LIMIT + 1, 1000)]),
    "text-declaring-1-tib": ("authed", [(0x1, True, 2**40, 1000)]),
    "fragments-adding-up": ("authed", [(0x1, False, 40_000, 40_000), (0x0, True, 40_000, 100)]),
}


@pytest.mark.parametrize("name", list(OVERSIZE_FRAMES))
def test_ws_oversize_frames_close_with_1009(plain: RunningGateway, authed: RunningGateway, name: str) -> None:
    """A message over ``limits.max_message_bytes`` closes the socket with 1009.

    Only a frame's header and the first slice of its payload are sent: the declared length is what is judged, and
    payload the gateway never reads would turn its close into a TCP reset that can overtake the close frame.
    """
    which, frames = OVERSIZE_FRAMES[name]
    gw = plain if which == "plain" else authed
    raw = RawSocket(gw)
    try:
        rest = raw.upgrade("/mcp/ws", f"Authorization: Bearer {ALICE}\r\n" if gw is authed else "")
        for opcode, fin, declared, sent in frames:
            raw.sock.sendall(_ws_frame(opcode, b"[" * sent, fin=fin, length=declared))
        data = raw.read_to_close(rest)
    finally:
        raw.close()
    assert _close_code(data) == 1009, (name, data[:200])


class RawSocket:
    """A bare TCP connection for bytes no well-behaved client library would send."""

    def __init__(self, gw: RunningGateway) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port_of(gw)), timeout=STEP_S)
        self.port = port_of(gw)

    def upgrade(self, path: str, extra: str = "") -> bytes:
        key = base64.b64encode(uuid.uuid4().bytes).decode()
        self.sock.sendall(
            (
                f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n{extra}\r\n"
            ).encode()
        )
        buffer = b""
        while b"\r\n\r\n" not in buffer:
            chunk = self.sock.recv(4096)
            assert chunk, buffer
            buffer += chunk
        head, rest = buffer.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head
        return rest

    def read_to_close(self, initial: bytes = b"") -> bytes:
        """Everything until the peer closes; a peer that neither answers nor closes within STEP_S is a hang."""
        data = bytearray(initial)
        deadline = time.monotonic() + STEP_S
        while True:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except (ConnectionResetError, BrokenPipeError):
                return bytes(data)
            except TimeoutError:
                raise AssertionError(
                    f"the gateway neither answered nor closed within {STEP_S}s: {bytes(data)[:300]!r}"
                ) from None
            if not chunk:
                return bytes(data)
            data += chunk
            if _has_ws_close(bytes(data)):
                return bytes(data)

    def close(self) -> None:
        self.sock.close()


def _ws_frame(
    opcode: int, payload: bytes, *, fin: bool = True, mask: bool = True, rsv: int = 0, length: int | None = None
) -> bytes:
    n = len(payload) if length is None else length
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    if n < 126:
        header = struct.pack("!BB", first, (0x80 if mask else 0) | n)
    elif n < 65536:
        header = struct.pack("!BBH", first, (0x80 if mask else 0) | 126, n)
    else:
        header = struct.pack("!BBQ", first, (0x80 if mask else 0) | 127, n)
    if not mask:
        return header + payload
    key = b"\x01\x02\x03\x04"
    return header + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def _has_ws_close(data: bytes) -> bool:
    """Whether the server's (unmasked) frames in ``data`` include a close frame."""
    offset = 0
    while offset + 2 <= len(data):
        opcode, length = data[offset] & 0x0F, data[offset + 1] & 0x7F
        start = offset + 2
        if length == 126:
            if start + 2 > len(data):
                return False
            (length,) = struct.unpack("!H", data[start : start + 2])
            start += 2
        elif length == 127:
            if start + 8 > len(data):
                return False
            (length,) = struct.unpack("!Q", data[start : start + 8])
            start += 8
        if opcode == 0x8:
            return True
        offset = start + length
    return False


def _close_code(data: bytes) -> int | None:
    offset = 0
    while offset + 2 <= len(data):
        opcode, length = data[offset] & 0x0F, data[offset + 1] & 0x7F
        start = offset + 2
        if length == 126:
            (length,) = struct.unpack("!H", data[start : start + 2])
            start += 2
        elif length == 127:
            (length,) = struct.unpack("!Q", data[start : start + 8])
            start += 8
        if opcode == 0x8:
            return struct.unpack("!H", data[start : start + 2])[0] if length >= 2 else 1005
        offset = start + length
    return None


RAW_WS_FRAMES: dict[str, bytes] = {
    "invalid-utf8-text": _ws_frame(0x1, b"\xff\xfe"),
    "unmasked": _ws_frame(0x1, b'{"jsonrpc": "2.0"}', mask=False),
    "reserved-opcode": _ws_frame(0x3, b"x"),
    "reserved-control-opcode": _ws_frame(0xB, b"x"),
    "rsv-bits": _ws_frame(0x1, b"{}", rsv=0b111),
    "continuation-first": _ws_frame(0x0, b"{}"),
    "fragmented-ping": _ws_frame(0x9, b"x", fin=False),
    "oversize-ping": _ws_frame(0x9, b"p" * 200),
    "close-with-bad-code": _ws_frame(0x8, struct.pack("!H", 999)),
    "close-with-invalid-reason": _ws_frame(0x8, struct.pack("!H", 1000) + b"\xff"),
    "close-one-byte": _ws_frame(0x8, b"\x03"),
    "length-2-to-the-63": _ws_frame(0x1, b"", length=2**63 - 1),
    "two-starts": _ws_frame(0x1, b"[", fin=False) + _ws_frame(0x1, b"]"),
    "text-split-inside-a-character": _ws_frame(0x1, "é".encode()[:1], fin=False) + _ws_frame(0x0, "é".encode()[1:]),
}


@pytest.mark.parametrize("name", list(RAW_WS_FRAMES))
def test_ws_protocol_violations_close_the_socket(plain: RunningGateway, name: str) -> None:
    raw = RawSocket(plain)
    try:
        rest = raw.upgrade("/mcp/ws")
        raw.sock.sendall(RAW_WS_FRAMES[name])
        if name == "text-split-inside-a-character":
            # A character split across fragments is legitimate: the message is "é", not JSON; -32700 comes back.
            raw.sock.sendall(_ws_frame(0x8, struct.pack("!H", 1000)))
        data = raw.read_to_close(rest)
    finally:
        raw.close()
    code = _close_code(data)
    assert code is None or code in PROPER_CLOSE_CODES, (name, code, data[:200])


WS_HANDSHAKES: dict[str, tuple[str, str]] = {
    # name: (request target, extra header lines)
    "version-99": ("/mcp/ws", "Sec-WebSocket-Version: 99\r\n"),
    "bad-key": ("/mcp/ws", "Sec-WebSocket-Key: not base64 at all\r\n"),
    "deflate-garbage": ("/mcp/ws", "Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=99\r\n"),
    "extension-bytes": ("/mcp/ws", "Sec-WebSocket-Extensions: \xff\xfe\r\n"),
    "many-subprotocols": ("/mcp/ws", "Sec-WebSocket-Protocol: " + "x," * 2000 + "\r\n"),
    "foreign-origin": ("/mcp/ws", "Origin: http://evil.example\r\n"),
    # Over websockets' own handshake limits (8 KiB lines, 128 headers): refused with 431/414, which must
    # reach the client rather than wait in a buffer while the client hangs.
    "header-line-9k": ("/mcp/ws", "X-Big: " + "b" * 9000 + "\r\n"),
    "authorization-100k": ("/mcp/ws", "Authorization: Bearer " + "a" * 100_000 + "\r\n"),
    "200-headers": ("/mcp/ws", "".join(f"X-H{i}: v\r\n" for i in range(200))),
    "target-9k": ("/mcp/ws?x=" + "q" * 9000, ""),
    "mcpx-target-9k": ("/ws?topic=t&token=" + "q" * 9000, ""),
}


@pytest.mark.parametrize("name", list(WS_HANDSHAKES))
def test_ws_handshake_garbage(plain: RunningGateway, name: str) -> None:
    """Every malformed or oversized upgrade request is answered (101 or a 4xx) at once, never left hanging."""
    target, extra = WS_HANDSHAKES[name]
    lines = [f"GET {target} HTTP/1.1", f"Host: 127.0.0.1:{port_of(plain)}", "Upgrade: websocket", "Connection: Upgrade"]
    if "Sec-WebSocket-Key:" not in extra:
        lines.append(f"Sec-WebSocket-Key: {base64.b64encode(b'k' * 16).decode()}")
    if "Sec-WebSocket-Version:" not in extra:
        lines.append("Sec-WebSocket-Version: 13")
    request = "\r\n".join(lines) + "\r\n" + extra + "\r\n"
    answer = assert_raw_fine(plain, request.encode("latin-1"), strict=True)
    assert _statuses(answer), (name, answer[:300])
