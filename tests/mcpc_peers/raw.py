"""A raw JSON-lines stdio peer for tests: sends requests, keeps every other line the server writes.

MCPC callbacks are unsolicited responses, so a test that wants to see them byte for byte must read
the server's stdout itself; SDK clients hide it. Lines are read by a thread into a queue; nothing
here blocks for longer than the timeout it is given.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any


class RawPeer:
    def __init__(self, command: list[str], timeout_s: float = 5.0) -> None:
        env = {**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
            encoding="utf-8",
        )
        self.timeout_s = timeout_s
        self.lines: queue.Queue[str] = queue.Queue()
        self.unsolicited: list[str] = []
        """Raw lines (newline stripped) that answered no request of ours, in arrival order."""
        self._ids = itertools.count(1)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def _next_line(self, deadline: float) -> str:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the server wrote nothing in time")
        try:
            return self.lines.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError("the server wrote nothing in time") from None

    def send(self, obj: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response (whole JSON-RPC object) to a new request."""
        request_id = next(self._ids)
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        deadline = time.monotonic() + self.timeout_s
        while True:
            line = self._next_line(deadline)
            decoded = json.loads(line)
            if decoded.get("id") == request_id and "method" not in decoded:
                return dict(decoded)
            self.unsolicited.append(line)

    def initialize(self) -> dict[str, Any]:
        response = self.request(
            "initialize",
            {"protocolVersion": "2024-11-05", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return response

    def wait_unsolicited(self, done: Callable[[list[str]], bool]) -> list[str]:
        """Unsolicited lines, once ``done`` holds for them (TimeoutError otherwise)."""
        deadline = time.monotonic() + self.timeout_s
        while not done(self.unsolicited):
            self.unsolicited.append(self._next_line(deadline))
        return self.unsolicited

    def close(self) -> None:
        """Closes stdin, then terminates: an SDK 1.6 stdio server does not exit at end of input."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        for stop in (None, self.proc.terminate, self.proc.kill):
            if stop is not None:
                stop()
            try:
                self.proc.wait(timeout=0.5 if stop is None else 3)
                return
            except subprocess.TimeoutExpired:
                continue
