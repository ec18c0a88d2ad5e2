"""Line framing of the stdio front door: exact splitting, over-long lines discarded, never stuck."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings, strategies as st

from gateway.transports.stdio import TOO_LONG, lines


async def _collect(data: bytes, max_bytes: int, chunk: int) -> list[bytes]:
    reader = asyncio.StreamReader()
    for start in range(0, len(data), chunk):
        reader.feed_data(data[start : start + chunk])
    reader.feed_eof()
    return [line async for line in lines(reader, max_bytes)]


def _reference(data: bytes, max_bytes: int) -> list[bytes]:
    out = []
    parts = data.split(b"\n")
    for n, part in enumerate(parts):
        last = n == len(parts) - 1
        if len(part) > max_bytes:
            out.append(TOO_LONG)
        elif part.strip() and (not last or part):
            out.append(part)
    return out


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"x")), max_size=12),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=64),
)
def test_lines_match_a_reference_split(parts: list[bytes], max_bytes: int, chunk: int) -> None:
    data = b"\n".join(parts)
    assert asyncio.run(_collect(data, max_bytes, chunk)) == _reference(data, max_bytes)


def test_an_over_long_line_is_reported_once_and_the_next_line_survives() -> None:
    data = b'{"a":1}\n' + b"x" * 1000 + b'\n{"b":2}\n'
    assert asyncio.run(_collect(data, 100, 7)) == [b'{"a":1}', TOO_LONG, b'{"b":2}']


def test_blank_lines_are_skipped_and_a_last_line_without_newline_counts() -> None:
    assert asyncio.run(_collect(b'\n  \n{"a":1}\r\n{"b":2}', 100, 3)) == [b'{"a":1}\r', b'{"b":2}']
