"""Timestamps as the gateway writes them: RFC 3339, UTC, milliseconds (audit records, log lines,
MGP notifications, the dashboard's events).

One strftime per second, not per call: the second's text is cached and replaced whole, so a reader
in another thread (the log writer) always sees a matching pair.
"""

from __future__ import annotations

import time

# The last second formatted and its text (one strftime per second); replaced whole, so a reader in
# another thread sees a matching pair.
_second: tuple[int, str] = (-1, "")


def rfc3339_ms(ts: float) -> str:
    """``2026-11-22T10:04:05.123Z``: RFC 3339, UTC, milliseconds."""
    global _second
    secs, ms = divmod(int(ts * 1000), 1000)
    cached = _second
    if cached[0] != secs:
        cached = _second = (secs, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)))
    return f"{cached[1]}.{ms:03d}Z"
