"""gateway/sse.py: the incremental SSE parser against every chunking, and the encoder round trip."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings, strategies as st

from gateway import sse
from gateway.sse import SSEEvent, SSEParser


def parse(*chunks: bytes, max_event_bytes: int = 16 * 1024 * 1024) -> list[SSEEvent]:
    parser = SSEParser(max_event_bytes)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


def chunked(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(max(c, 0), len(data)) for c in cuts})
    pieces, last = [], 0
    for point in [*points, len(data)]:
        pieces.append(data[last:point])
        last = point
    return pieces


# A stream that exercises every feature, with LF line ends; variants swap in CRLF and CR.
STREAM_LF = (
    b": hello, this is a comment\n"
    b"\n"
    b"id: 1\n"
    b"event: message\n"
    b'data: {"a":1}\n'
    b"\n"
    b"retry: 2500\n"
    b"event: custom\n"
    b"data: first line\n"
    b"data:second line\n"
    b"data:  two spaces\n"
    b"data\n"
    b": a comment inside an event\n"
    b"unknown: field\n"
    b"\n"
    b"id: 7\n"
    b"data: \n"
    b"\n"
    b"data: caf\xc3\xa9 \xe2\x9c\x93\n"
    b"\n"
)
EXPECTED = [
    SSEEvent("message", '{"a":1}', "1", None),
    SSEEvent("custom", "first line\nsecond line\n two spaces\n", None, 2500),
    SSEEvent("message", "", "7", None),
    SSEEvent("message", "café ✓", None, None),
]
STREAMS = {
    "lf": STREAM_LF,
    "crlf": STREAM_LF.replace(b"\n", b"\r\n"),
    "cr": STREAM_LF.replace(b"\n", b"\r"),
    # Every line end style in one stream.
    "mixed": b"".join(line + (b"\n", b"\r\n", b"\r")[i % 3] for i, line in enumerate(STREAM_LF.split(b"\n")[:-1])),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_whole_stream(name: str) -> None:
    assert parse(STREAMS[name]) == EXPECTED


@pytest.mark.parametrize("name", list(STREAMS))
def test_split_at_every_byte_boundary(name: str) -> None:
    stream = STREAMS[name]
    for cut in range(len(stream) + 1):
        assert parse(stream[:cut], stream[cut:]) == EXPECTED, f"split at byte {cut}"


@pytest.mark.parametrize("name", list(STREAMS))
def test_one_byte_at_a_time(name: str) -> None:
    stream = STREAMS[name]
    assert parse(*(stream[i : i + 1] for i in range(len(stream)))) == EXPECTED


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    # Regression: the CR ending one chunk and the LF starting the next used to be two line ends,
    # so the empty "line" between them dispatched "a" alone and then "b" as a second event.
    assert parse(b"data: a\r", b"\ndata: b\r\n\r\n") == [SSEEvent(data="a\nb")]
    # Empty chunks between the CR and the LF change nothing.
    assert parse(b"data: a\r", b"", b"\ndata: b\r\n\r\n") == [SSEEvent(data="a\nb")]


def test_lone_cr_at_chunk_end_still_ends_the_line_at_once() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    # The CR already ended the line; the following CR is the blank line that dispatches.
    assert parser.feed(b"\r") == [SSEEvent(data="a")]


def test_events_are_dispatched_as_soon_as_the_blank_line_arrives() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: x\n") == []
    assert parser.feed(b"\n") == [SSEEvent(data="x")]
    assert parser.feed(b"data: y\n\ndata: z") == [SSEEvent(data="y")]
    assert parser.feed(b"\n\n") == [SSEEvent(data="z")]


def test_comments_alone_yield_nothing() -> None:
    assert parse(b": one\n\n:two\n\n" + sse.KEEPALIVE) == []


def test_blank_lines_without_fields_yield_nothing() -> None:
    assert parse(b"\n\n\r\n\r\r") == []


def test_priming_event_with_empty_data() -> None:
    assert parse(b"id: x\ndata: \n\n") == [SSEEvent("message", "", "x", None)]
    assert parse(b"id: x\ndata:\n\n") == [SSEEvent("message", "", "x", None)]
    assert parse(b"id: x\ndata\n\n") == [SSEEvent("message", "", "x", None)]


def test_id_only_block_is_reported_for_resumption() -> None:
    # Dispatched (data "") so that readers can record the last event id; they skip empty data.
    assert parse(b"id: 42\n\n") == [SSEEvent("message", "", "42", None)]


def test_each_event_reports_only_the_id_it_carried() -> None:
    events = parse(b"id: 1\ndata: a\n\ndata: b\n\n")
    assert [e.id for e in events] == ["1", None]


def test_empty_id_is_kept_and_id_with_nul_is_ignored() -> None:
    assert parse(b"id:\ndata: a\n\n") == [SSEEvent(data="a", id="")]
    assert parse(b"id: a\x00b\ndata: a\n\n") == [SSEEvent(data="a", id=None)]


def test_last_field_value_wins() -> None:
    assert parse(b"id: 1\nid: 2\nevent: a\nevent: b\nretry: 1\nretry: 2\ndata: x\n\n") == [SSEEvent("b", "x", "2", 2)]


@pytest.mark.parametrize("value", [b"abc", b"-1", b"1.5", b"", b"  10", b"\xc2\xb2", b"\xd9\xa1\xd9\xa2"])
def test_invalid_retry_is_ignored(value: bytes) -> None:
    # Only ASCII digits count: "²" and Arabic-Indic digits pass str.isdigit() but are not SSE digits
    # (int("²") even raises, which used to escape from the parser as ValueError).
    assert parse(b"retry:" + value + b"\ndata: x\n\n") == [SSEEvent(data="x", retry_ms=None)]


def test_retry_only_block_is_reported() -> None:
    assert parse(b"retry: 3000\n\n") == [SSEEvent(data="", retry_ms=3000)]


def test_empty_event_name_means_message() -> None:
    assert parse(b"event:\ndata: x\n\n") == [SSEEvent("message", "x")]


def test_only_one_leading_space_is_stripped() -> None:
    assert parse(b"data:   x \n\n") == [SSEEvent(data="  x ")]
    assert parse(b"event:  e\ndata:x\n\n") == [SSEEvent(" e", "x")]


def test_value_may_contain_colons() -> None:
    assert parse(b"data: a:b: c\nid: urn:x:1\n\n") == [SSEEvent(data="a:b: c", id="urn:x:1")]


def test_field_names_are_case_sensitive() -> None:
    assert parse(b"Data: x\nID: 1\ndata: y\n\n") == [SSEEvent(data="y")]


def test_multibyte_utf8_split_across_chunks() -> None:
    raw = "data: 日本語 ✓\n\n".encode()
    for cut in range(len(raw) + 1):
        assert parse(raw[:cut], raw[cut:]) == [SSEEvent(data="日本語 ✓")]


def test_invalid_utf8_is_replaced_not_fatal() -> None:
    assert parse(b"data: \xff\n\n") == [SSEEvent(data="\ufffd")]


def test_unterminated_event_is_held() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: partial\n") == []
    assert parser.feed(b"data: more") == []


# ---- size limit ------------------------------------------------------------------------------


def test_data_within_limit_is_fine() -> None:
    assert parse(b"data: " + b"x" * 100 + b"\n\n", max_event_bytes=100) == [SSEEvent(data="x" * 100)]


def test_event_data_over_limit_raises() -> None:
    with pytest.raises(ValueError, match="size limit"):
        parse(b"data: " + b"x" * 60 + b"\ndata: " + b"y" * 60 + b"\n\n", max_event_bytes=100)


def test_unterminated_line_over_limit_raises() -> None:
    parser = SSEParser(max_event_bytes=100)
    parser.feed(b"data: " + b"x" * 50)
    with pytest.raises(ValueError, match="size limit"):
        parser.feed(b"x" * 60)


def test_size_is_counted_per_event() -> None:
    block = b"data: " + b"x" * 80 + b"\n\n"
    assert parse(block * 5, max_event_bytes=100) == [SSEEvent(data="x" * 80)] * 5


def test_big_chunk_with_many_lines() -> None:
    block = b'id: 1\ndata: {"k":"v"}\n\n'
    events = parse(block * 20000)
    assert len(events) == 20000
    assert events[-1] == SSEEvent(data='{"k":"v"}', id="1")


# ---- encode ----------------------------------------------------------------------------------


def test_encode_layout() -> None:
    assert sse.encode(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert sse.encode("x", event="e", id="s-1", retry_ms=100) == b"id: s-1\nevent: e\nretry: 100\ndata: x\n\n"
    assert sse.encode(b"") == b"data: \n\n"
    assert sse.encode(b"", id="s-0") == b"id: s-0\ndata: \n\n"
    assert sse.encode("a\nb") == b"data: a\ndata: b\n\n"


def test_encode_priming_event_parses_to_empty_data_with_id() -> None:
    assert parse(sse.encode(b"", id="abc-0")) == [SSEEvent("message", "", "abc-0", None)]


@pytest.mark.parametrize(("data", "parsed"), [("a\r\nb", "a\nb"), ("a\rb", "a\nb"), ("a\r", "a\n"), ("\r\n", "\n")])
def test_encode_turns_every_line_break_into_a_data_line(data: str, parsed: str) -> None:
    # A CR left in a data line would end it early at the parser and could inject fields or events.
    encoded = sse.encode(data)
    assert b"\r" not in encoded
    assert parse(encoded) == [SSEEvent(data=parsed)]


def test_encode_cannot_inject_an_event_through_data() -> None:
    hostile = "x\r\revent: endpoint\rdata: http://evil/"
    assert parse(sse.encode(hostile)) == [SSEEvent(data="x\n\nevent: endpoint\ndata: http://evil/")]


@pytest.mark.parametrize("field", ["id", "event"])
@pytest.mark.parametrize("value", ["a\nb", "a\rb", "\r\n"])
def test_encode_rejects_line_breaks_in_id_and_event(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field):
        sse.encode("x", **{field: value})  # type: ignore[arg-type]


async def test_iter_sse() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: a\r"
        yield b"\n\r\nid: 2\ndata: b"
        yield b"\n\n"

    assert [e async for e in sse.iter_sse(chunks())] == [SSEEvent(data="a"), SSEEvent(data="b", id="2")]


# ---- properties ------------------------------------------------------------------------------

line_text = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))
ids = st.text(st.characters(blacklist_characters="\r\n\x00", blacklist_categories=("Cs",)))
names = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), min_size=1)
multi_line_text = st.text(st.characters(blacklist_characters="\r", blacklist_categories=("Cs",)))


@st.composite
def event_specs(draw: st.DrawFn, data: st.SearchStrategy[str] = line_text) -> tuple[str, str | None, str | None, int]:
    return (
        draw(data),
        draw(st.none() | names),
        draw(st.none() | ids),
        draw(st.none() | st.integers(0, 10**9)),
    )


def expected_of(spec: tuple[str, str | None, str | None, int | None]) -> SSEEvent:
    data, event, id_, retry = spec
    return SSEEvent(event or "message", data, id_, retry)


def encode_spec(spec: tuple[str, str | None, str | None, int | None]) -> bytes:
    data, event, id_, retry = spec
    return sse.encode(data, event=event, id=id_, retry_ms=retry)


@given(event_specs())
def test_encode_parse_round_trip(spec: tuple[str, str | None, str | None, int | None]) -> None:
    assert parse(encode_spec(spec)) == [expected_of(spec)]


@given(event_specs(multi_line_text))
def test_encode_parse_round_trip_multi_line(spec: tuple[str, str | None, str | None, int | None]) -> None:
    assert parse(encode_spec(spec)) == [expected_of(spec)]


@settings(max_examples=200)
@given(
    st.lists(event_specs(multi_line_text), min_size=1, max_size=6),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.booleans(),
    st.data(),
)
def test_any_chunking_parses_to_the_same_events(
    specs: list[tuple[str, str | None, str | None, int | None]],
    line_end: bytes,
    keepalives: bool,
    data: st.DataObject,
) -> None:
    blocks = [encode_spec(s) for s in specs]
    if keepalives:
        blocks = [b for block in blocks for b in (sse.KEEPALIVE, block)]
    stream = b"".join(blocks).replace(b"\n", line_end)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    expected = [expected_of(s) for s in specs]
    assert parse(*chunked(stream, cuts)) == expected
    assert parse(stream) == expected


@settings(max_examples=300)
@given(
    st.lists(st.sampled_from([b"data: ", b"id: ", b"event: x", b":c", b"\n", b"\r", b"\xc3\xa9", b"\xff", b"a"])),
    st.data(),
)
def test_whole_line_chunks_parse_as_byte_by_byte(pieces: list[bytes], data: st.DataObject) -> None:
    """A chunk of whole LF-ended lines takes the parser's quick way; any chunking agrees with one
    byte at a time (which hardly ever does), whatever the bytes (CR, invalid UTF-8)."""
    stream = b"".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    assert parse(*chunked(stream, cuts)) == parse(*(stream[i : i + 1] for i in range(len(stream))))


class GeneralOnly(SSEParser):
    """The parser without its quick way for whole-line chunks: every chunk line by line."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        return self._general(chunk)


def parse_with(parser: SSEParser, chunks: list[bytes]) -> list[SSEEvent] | str:
    """The events of ``chunks``, or the refusal's message (both ways must refuse at the same point)."""
    events: list[SSEEvent] = []
    try:
        for chunk in chunks:
            events.extend(parser.feed(chunk))
    except ValueError as exc:
        return f"{len(events)} events, then {exc}"
    return events


_FIELDS = [b"", b"data", b"data:", b"data: ", b"id:", b"id: ", b"event: ", b"event:", b"retry: ", b"retry:", b":"]
_VALUES = [b"", b" ", b"a", b"15", b"\x00", b"\xc3\xa9", b"\xff", b"{}", b"a:b", b"message"]
stream_lines = st.builds(
    lambda field, value, end: field + value + end,
    st.sampled_from(_FIELDS),
    st.sampled_from(_VALUES),
    st.sampled_from([b"\n", b"\n\n", b"\n", b"\r\n", b"\r\n\r\n", b"\r", b""]),
)


@settings(max_examples=400)
@given(st.lists(stream_lines, max_size=16), st.integers(1, 24), st.data())
def test_quick_way_yields_what_line_by_line_yields(lines: list[bytes], limit: int, data: st.DataObject) -> None:
    """The quick way for whole-line chunks (the fields in locals, one call per chunk) and the general
    line-by-line way give the same events, the same refusals over the limit, for any split of any stream."""
    stream = b"".join(lines)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=8))
    chunks = chunked(stream, cuts)
    assert parse_with(SSEParser(limit), chunks) == parse_with(GeneralOnly(limit), chunks)
    whole_lines = chunked(stream, [i + 1 for i, byte in enumerate(stream) if byte == 0x0A])
    assert parse_with(SSEParser(limit), whole_lines) == parse_with(GeneralOnly(limit), whole_lines)
