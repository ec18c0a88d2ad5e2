"""Unguessable ids without a system call each (issue 15).

``secrets.token_urlsafe`` reads ``os.urandom`` on every call: a system call that cost about 4 % of a
modern ``tools/call`` (each stateless request gets a session id of its own). The bytes here come
from the same source, read 4 KiB at a time and handed out once each. A process started with
``fork`` would share the buffer, so the process id is checked and the buffer refilled after one.
"""

from __future__ import annotations

import base64
import os

_CHUNK = 4096


class _RandomPool:
    __slots__ = ("_buffer", "_offset", "_pid")

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0
        self._pid = -1

    def take(self, count: int) -> bytes:
        if self._offset + count > len(self._buffer) or self._pid != os.getpid():
            self._buffer = os.urandom(max(_CHUNK, count))
            self._offset = 0
            self._pid = os.getpid()
        start = self._offset
        self._offset = start + count
        return self._buffer[start : self._offset]


_POOL = _RandomPool()


def token_urlsafe(nbytes: int) -> str:
    """As ``secrets.token_urlsafe(nbytes)``: ``nbytes`` random bytes, base64url without padding."""
    return base64.urlsafe_b64encode(_POOL.take(nbytes)).rstrip(b"=").decode("ascii")
