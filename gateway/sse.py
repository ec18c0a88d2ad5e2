"""Server-Sent Events: an incremental parser (for backends) and an encoder (for front doors).

Written here rather than borrowed because both directions sit on hot paths and need exact control
over event ids (resumption) and over flushing each event at once (no buffering of progress).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import orjson

log = logging.getLogger(__name__)


@dataclass(slots=True)
class SSEEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry_ms: int | None = None


class SSEParser:
    """Feed bytes, get complete events. Handles CRLF, CR and LF line endings and split chunks."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        # The last chunk ended in CR: a LF at the start of the next one completes that CRLF.
        self._after_cr = False
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if chunk[-1:] == b"\n" and not self._buffer and not self._after_cr:
            # The common chunk (what a backend writes per event): whole lines, nothing held. With
            # LF or CRLF line ends (the Python SDK's sse_starlette writes CRLF) and no lone CR, one
            # decode and one split find the lines the general way below finds one by one (an LF
            # never sits inside a UTF-8 sequence, so decoding lines together changes nothing).
            whole = chunk.replace(b"\r\n", b"\n") if b"\r" in chunk else chunk
            if b"\r" not in whole:
                return self._whole(whole.decode("utf-8", errors="replace"))
        return self._general(chunk)

    def _whole(self, text: str) -> list[SSEEvent]:
        """The lines of ``text`` (ending in LF, no CR), by :meth:`_line`'s rules inlined: one Python call
        per chunk instead of one per line (the fields live in locals until the end)."""
        lines = text.split("\n")
        lines.pop()  # the empty remainder after the last LF
        events: list[SSEEvent] = []
        data, kind, event_id, retry, size = self._data, self._event, self._id, self._retry, self._size
        for line in lines:
            if not line:
                if data or event_id is not None or kind or retry is not None:
                    events.append(SSEEvent(kind or "message", "\n".join(data), event_id, retry))
                    data, kind, event_id, retry, size = [], "", None, None, 0
                continue
            if line[0] == ":":
                continue
            field, _, value = line.partition(":")
            if value[:1] == " ":
                value = value[1:]
            if field == "data":
                size += len(value)
                if size > self._max:
                    raise ValueError("SSE event exceeds the size limit")
                data.append(value)
            elif field == "event":
                kind = value
            elif field == "id":
                if "\x00" not in value:
                    event_id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                retry = int(value)
        self._data, self._event, self._id, self._retry, self._size = data, kind, event_id, retry, size
        return events

    def _general(self, chunk: bytes) -> list[SSEEvent]:
        """Any chunk: split lines (LF, CRLF, CR, a CRLF split between chunks), the unfinished one held."""
        if self._after_cr and chunk:
            # Without this, a CRLF split between two chunks would count as two line ends, and the
            # empty "line" between them would dispatch a half-received event.
            self._after_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buffer = self._buffer
        scan = len(buffer)  # what is held holds no line end (it would have been consumed)
        buffer += chunk
        events: list[SSEEvent] = []
        start = 0
        while True:
            lf = buffer.find(b"\n", scan)
            cr = buffer.find(b"\r", scan, len(buffer) if lf == -1 else lf)
            idx = lf if cr == -1 else cr
            if idx == -1:
                break
            line = buffer[start:idx].decode("utf-8", errors="replace")
            if idx == cr:
                if idx + 1 == len(buffer):
                    self._after_cr = True
                    start = idx + 1
                else:
                    start = idx + 2 if buffer[idx + 1] == 0x0A else idx + 1
            else:
                start = idx + 1
            scan = start
            event = self._line(line)
            if event is not None:
                events.append(event)
        # One deletion per chunk (not one copy per line) keeps big chunks with many lines linear.
        del buffer[:start]
        if len(buffer) > self._max:
            raise ValueError("SSE line exceeds the size limit")
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if line == "":
            if not self._data and self._id is None and not self._event and self._retry is None:
                return None
            event = SSEEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
            self._data, self._event, self._retry, self._size = [], "", None, 0
            # The id persists per the SSE spec, but each event reports the one it carried.
            self._id = None
            return event
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            self._size += len(value)
            if self._size > self._max:
                raise ValueError("SSE event exceeds the size limit")
            self._data.append(value)
        elif field == "event":
            self._event = value
        elif field == "id":
            if "\x00" not in value:
                self._id = value
        elif field == "retry" and value.isascii() and value.isdigit():  # "²".isdigit(), but int() refuses it
            self._retry = int(value)
        return None


async def iter_sse(chunks: AsyncIterator[bytes], max_event_bytes: int = 16 * 1024 * 1024) -> AsyncIterator[SSEEvent]:
    parser = SSEParser(max_event_bytes)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event


def encode(data: bytes | str, *, event: str | None = None, id: str | None = None, retry_ms: int | None = None) -> bytes:
    """One SSE event. Line breaks in ``data`` (LF, CRLF or CR) become one ``data:`` line each.

    JSON from orjson never holds a raw line break, so the hot path is one ``data:`` line; splitting
    on CR too matters because a parser ends a line at a lone CR, and a CR left inside a data line
    would end the line early and let the rest be read as a field of its own (or end the event).
    """
    parts: list[bytes] = []
    for name, value in (("id", id), ("event", event)):
        if value is not None and ("\n" in value or "\r" in value):
            raise ValueError(f"SSE {name} must not contain a line break")
    if id is not None:
        parts.append(b"id: " + id.encode())
    if event is not None:
        parts.append(b"event: " + event.encode())
    if retry_ms is not None:
        parts.append(b"retry: " + str(retry_ms).encode())
    payload = data.encode() if isinstance(data, str) else data
    if b"\r" in payload:
        payload = payload.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if payload:
        for line in payload.split(b"\n"):
            parts.append(b"data: " + line)
    else:
        parts.append(b"data: ")
    return b"\n".join(parts) + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"


def message_of(event: SSEEvent, source: str) -> dict[str, Any] | None:
    """The JSON-RPC message a ``message`` event carries, or None: another kind of event, no data, or
    data that is not a JSON object (logged, naming ``source``: a peer that sends it is broken)."""
    if event.event != "message" or not event.data:
        return None
    try:
        message = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        log.warning("%s sent a non-JSON SSE event", source)
        return None
    return message if isinstance(message, dict) else None
