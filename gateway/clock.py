"""Timestamps as the gateway writes them: RFC 3339, UTC, milliseconds (audit records, log lines,
MGP notifications, the dashboard's events).

One strftime per second, not per call: the second's text is cached and replaced whole, so a reader
in another thread (the log writer) always sees a matching pair. ``rfc3339_ms`` also keeps its last
millisecond's text (a busy gateway stamps several records per millisecond), replaced whole likewise.
"""

from __future__ import annotations

import time


class PerSecond:
    """``strftime`` of a timestamp's whole second, computed once per second and cached; the cache is
    replaced whole, so a reader in another thread always sees a matching (second, text) pair."""

    __slots__ = ("_convert", "_format", "_second")

    def __init__(self, pattern: str, local: bool = False) -> None:
        self._format = pattern
        self._convert = time.localtime if local else time.gmtime
        self._second: tuple[int, str] = (-1, "")

    def split(self, ts: float) -> tuple[str, int]:
        """(the second's text, the milliseconds)."""
        secs, ms = divmod(int(ts * 1000), 1000)
        cached = self._second
        if cached[0] != secs:
            cached = self._second = (secs, time.strftime(self._format, self._convert(secs)))
        return cached[1], ms


class PerMillisecond:
    """A timestamp's text with milliseconds (``template`` formats the second's text and the
    milliseconds), kept for its last millisecond: a busy gateway stamps several records or lines
    per millisecond. The cache is one pair, replaced whole (safe for a reader in another thread)."""

    __slots__ = ("_last", "_second", "_template")

    def __init__(self, second: PerSecond, template: str) -> None:
        self._second = second
        self._template = template
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, ts: float) -> str:
        whole_ms = int(ts * 1000)
        last = self._last
        if last[0] == whole_ms:
            return last[1]
        text, ms = self._second.split(ts)
        stamp = self._template % (text, ms)
        self._last = (whole_ms, stamp)
        return stamp


# ``rfc3339_ms(ts)`` -> ``2026-11-22T10:04:05.123Z``: RFC 3339, UTC, milliseconds (the instance itself,
# no wrapper function: it stamps every audit record).
rfc3339_ms = PerMillisecond(PerSecond("%Y-%m-%dT%H:%M:%S"), "%s.%03dZ")
