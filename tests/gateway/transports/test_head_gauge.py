"""The head gauge (gateway/transports/head_gauge.py) against heads whose bounds are known by construction:
pipelined requests with every framing (none, Content-Length, chunked with trailers, a refused h2c upgrade),
bodies full of blank lines, empty lines between requests, cut into segments anywhere. The first head over
the limit is reported in the segment where it comes to hold the limit's bytes, at its offset there (0
when it began earlier), and no head within the limit ever is."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import given, settings, strategies as st

from gateway.transports.head_gauge import HeadGauge

LIMIT = 200


@dataclass
class Stream:
    data: bytes
    heads: list[tuple[int, int]]  # (first byte, end) of each head, in order


def _head(method: str, path: str, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


_BODY_BYTES = st.binary(max_size=40) | st.sampled_from([b"\r\n\r\n", b"x\r\n\r\ny", b"\r\n\r\n\r\n", b"0\r\n\r\n"])


@st.composite
def _message(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    """(empty lines before it, its head, what follows its head): heads around the limit, every framing."""
    before = draw(st.sampled_from([b"", b"", b"\r\n", b"\n", b"\r\n\r\n"]))
    framing = draw(st.sampled_from(["none", "length", "chunked", "upgrade"]))
    headers = [("Host", "127.0.0.1")]
    body = b""
    if framing == "length":
        body = draw(_BODY_BYTES)
        headers.append(("Content-Length", str(len(body))))
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        for chunk in draw(st.lists(_BODY_BYTES.filter(bool), max_size=3)):
            body += b"%x\r\n" % len(chunk) + chunk + b"\r\n"
        body += b"0\r\n" + draw(st.sampled_from([b"", b"X-Trailer: t\r\n"])) + b"\r\n"
    elif framing == "upgrade":  # h2c, not taken: its body is read as HTTP/1.1 (refused_upgrade.py)
        body = draw(_BODY_BYTES)
        headers += [("Connection", "Upgrade, HTTP2-Settings"), ("Upgrade", "h2c"), ("HTTP2-Settings", "AAMAAABk")]
        headers.append(("Content-Length", str(len(body))))
    method = "POST" if framing != "none" else draw(st.sampled_from(["GET", "POST"]))
    bare = len(_head(method, "/mcp", [*headers, ("X-Pad", "")]))
    size = draw(st.integers(LIMIT - 3, LIMIT + 2) | st.integers(bare, LIMIT * 3 // 2))
    headers.append(("X-Pad", "p" * max(size - bare, 0)))
    return before, _head(method, "/mcp", headers), body


@st.composite
def _streams(draw: st.DrawFn) -> Stream:
    data = b""
    heads = []
    for before, head, body in draw(st.lists(_message(), min_size=1, max_size=4)):
        data += before
        heads.append((len(data), len(data) + len(head)))
        data += head + body
    return Stream(data, heads)


@st.composite
def _cuts(draw: st.DrawFn, size: int) -> list[int]:
    """Segment boundaries: anywhere, and often around the heads' bytes that matter."""
    return sorted(set(draw(st.lists(st.integers(1, max(size - 1, 1)), max_size=12))))


def _expected(stream: Stream, bounds: list[tuple[int, int]]) -> list[int | None]:
    """What measure() says of each segment (``bounds``: its first byte and end in the stream)."""
    answers: list[int | None] = [None] * len(bounds)
    for start, end in stream.heads:
        if end - start > LIMIT:
            full = start + LIMIT  # where the head has come to hold the limit's bytes, unended
            for index, (first, last) in enumerate(bounds):
                if first < full <= last:
                    answers[index] = max(start - first, 0)
                    return answers
    return answers


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_the_first_head_over_the_limit_is_found_wherever_the_segments_end(data: st.DataObject) -> None:
    stream = data.draw(_streams())
    cuts = data.draw(_cuts(len(stream.data)))
    points = [0, *cuts, len(stream.data)]
    bounds = [(a, b) for a, b in itertools.pairwise(points) if b > a]
    gauge = HeadGauge(LIMIT)
    got = []
    for first, last in bounds:
        got.append(gauge.measure(stream.data[first:last]))
        if got[-1] is not None:
            break
    expected = _expected(stream, bounds)[: len(got)]
    assert got == expected, (stream.heads, bounds)


def test_a_head_of_the_limit_is_within_it_one_byte_more_is_not() -> None:
    bare = len(_head("GET", "/", [("X-Pad", "")]))
    at_limit = _head("GET", "/", [("X-Pad", "p" * (LIMIT - bare))])
    assert len(at_limit) == LIMIT
    over = _head("GET", "/", [("X-Pad", "p" * (LIMIT - bare + 1))])
    for cut in range(1, LIMIT):
        gauge = HeadGauge(LIMIT)
        assert gauge.measure(at_limit[:cut]) is None and gauge.measure(at_limit[cut:]) is None and gauge.idle
        gauge = HeadGauge(LIMIT)
        assert gauge.measure(over[:cut]) is None
        assert gauge.measure(over[cut:]) == 0
    gauge = HeadGauge(LIMIT)
    assert gauge.measure(at_limit + over) == LIMIT, "pipelined: the second head, at its offset"


def test_empty_lines_before_a_request_line_are_no_head() -> None:
    bare = len(_head("GET", "/", [("X-Pad", "")]))
    at_limit = _head("GET", "/", [("X-Pad", "p" * (LIMIT - bare))])
    assert HeadGauge(LIMIT).measure(b"\r\n" * LIMIT + at_limit) is None


def test_nothing_is_measured_after_a_request_that_closes_the_connection() -> None:
    closing = b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"
    gauge = HeadGauge(LIMIT)
    assert gauge.measure(closing + b"GET /" + b"x" * LIMIT * 2) is None  # llhttp reads nothing after it
    assert not gauge.idle


def test_an_unparsable_head_is_left_to_the_parser() -> None:
    gauge = HeadGauge(LIMIT)
    assert gauge.measure(b"G@T / HTTP/1.1\r\nX: " + b"x" * LIMIT * 2) is None  # the protocol's parser says 400
    assert gauge.measure(b"GET / HTTP/1.1\r\nX: " + b"x" * LIMIT * 2) is None
