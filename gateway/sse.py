"""Server-Sent Events: an incremental parser (for backends) and an encoder (for front doors).

Written here rather than borrowed because both directions sit on hot paths and need exact control
over event ids (resumption) and over flushing each event at once (no buffering of progress).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass


@dataclass(slots=True)
class SSEEvent:
    event: str = "message"
    data: str = ""
    id: str | None = None
    retry_ms: int | None = None


class SSEParser:
    """Feed bytes, get complete events. Handles CRLF, CR and LF line endings and split chunks."""

    def __init__(self, max_event_bytes: int = 16 * 1024 * 1024) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._retry: int | None = None
        self._size = 0
        self._max = max_event_bytes

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer += chunk
        events: list[SSEEvent] = []
        while True:
            idx = -1
            for sep in (b"\n", b"\r"):
                pos = self._buffer.find(sep)
                if pos != -1 and (idx == -1 or pos < idx):
                    idx = pos
            if idx == -1:
                if len(self._buffer) > self._max:
                    raise ValueError("SSE line exceeds the size limit")
                return events
            line = self._buffer[:idx]
            skip = 2 if self._buffer[idx : idx + 2] == b"\r\n" else 1
            self._buffer = self._buffer[idx + skip :]
            event = self._line(line.decode("utf-8", errors="replace"))
            if event is not None:
                events.append(event)

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
        elif field == "retry" and value.isdigit():
            self._retry = int(value)
        return None


async def iter_sse(chunks: AsyncIterator[bytes], max_event_bytes: int = 16 * 1024 * 1024) -> AsyncIterator[SSEEvent]:
    parser = SSEParser(max_event_bytes)
    async for chunk in chunks:
        for event in parser.feed(chunk):
            yield event


def encode(data: bytes | str, *, event: str | None = None, id: str | None = None, retry_ms: int | None = None) -> bytes:
    """One SSE event. ``data`` must not contain raw newlines when it is JSON from orjson (it never does)."""
    parts: list[bytes] = []
    if id is not None:
        parts.append(b"id: " + id.encode())
    if event is not None:
        parts.append(b"event: " + event.encode())
    if retry_ms is not None:
        parts.append(b"retry: " + str(retry_ms).encode())
    payload = data.encode() if isinstance(data, str) else data
    if payload:
        for line in payload.split(b"\n"):
            parts.append(b"data: " + line)
    else:
        parts.append(b"data: ")
    return b"\n".join(parts) + b"\n\n"


KEEPALIVE = b": keep-alive\n\n"
