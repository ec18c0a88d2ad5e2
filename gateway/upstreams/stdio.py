"""A backend spawned as a child process speaking newline-delimited JSON-RPC on stdin/stdout.

Writing: every message sent in one event-loop iteration is gathered and written to the pipe in one
write on the next (a pipe write wakes the child and was the largest cost of a stdio call). Order is
the order of ``send``; a sender waits (drain) only while the pipe is full, i.e. while the child is
not reading. A write failure is remembered and every later ``send`` raises CarrierClosed.
Reading: one line per message, parsed as is (orjson skips the surrounding whitespace), never longer
than ``max_message_bytes`` (beyond it the child is killed: the stream position is lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from typing import Any

import orjson

from gateway import jsonrpc
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.write_batch import write_batch

log = logging.getLogger(__name__)

# Gathered messages are written at once beyond this size (the stream's default high-water mark), so
# that a sender that never yields still meets the pipe's backpressure.
FLUSH_AT_BYTES = 64 * 1024


class StdioCarrier(Carrier):
    def __init__(
        self,
        name: str,
        command: str,
        args: list[str],
        env: dict[str, str],
        cwd: str | None,
        max_message_bytes: int,
    ) -> None:
        self._name = name
        self._command = command
        self._args = args
        self._env = env
        self._cwd = cwd
        self._max = max_message_bytes
        self._proc: asyncio.subprocess.Process | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = asyncio.Event()
        self._reason = "closed"
        self._pending: list[bytes] = []  # messages sent in this loop iteration, not yet written
        self._pending_bytes = 0
        self._write_error: str | None = None

    def describe(self) -> str:
        return f"stdio:{self._command}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    async def open(self, inbound: Inbound) -> None:
        env = {**os.environ, **self._env}
        self._proc = await asyncio.create_subprocess_exec(
            self._command,
            *self._args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=self._cwd,
            limit=self._max,
            # Its own process group, so that shutdown also reaches grandchildren (npx, uvx, shells).
            start_new_session=True,
        )
        self._tasks = [
            asyncio.create_task(self._read_stdout(inbound), name=f"stdio-out-{self._name}"),
            asyncio.create_task(self._read_stderr(), name=f"stdio-err-{self._name}"),
        ]

    async def _read_stdout(self, inbound: Inbound) -> None:
        assert self._proc and self._proc.stdout
        stdout = self._proc.stdout
        try:
            while True:
                try:
                    line = await stdout.readline()
                except ValueError:
                    # A line over the limit: the stream position is lost, so the child must go now
                    # (waiting for it to exit would hold its callers for nothing).
                    self._reason = f"a message over {self._max} bytes"
                    self._signal(signal.SIGKILL)
                    break
                if not line:
                    break
                if line.isspace():
                    continue
                try:
                    message = orjson.loads(line)
                except orjson.JSONDecodeError:
                    log.warning("backend %s wrote a non-JSON line on stdout: %.200r", self._name, line)
                    continue
                if isinstance(message, list):  # a batch from an old server
                    for item in message:
                        if isinstance(item, dict):
                            inbound(item, None)
                elif isinstance(message, dict):
                    inbound(message, None)
        finally:
            # stdout closed: the child is normally exiting; its callers are failed without waiting
            # long for the exit code.
            code = await self._wait_exit(1.0)
            if self._reason == "closed":
                self._reason = f"process exited with code {code}"
            self._closed.set()

    async def _wait_exit(self, timeout: float) -> int | None:
        assert self._proc
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                return await self._proc.wait()
        return None

    async def _read_stderr(self) -> None:
        assert self._proc and self._proc.stderr
        blog = logging.getLogger(f"switchboard.backend.{self._name}")
        while True:
            try:
                line = await self._proc.stderr.readline()
            except ValueError:
                continue
            if not line:
                return
            blog.info("%s", line.decode("utf-8", errors="replace").rstrip())

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or self._closed.is_set():
            raise CarrierClosed(self._reason)
        stdin = proc.stdin
        if self._write_error is not None or stdin.is_closing():
            raise CarrierClosed(f"stdin closed: {self._write_error or 'closing'}")
        data = jsonrpc.dumps(message)
        if not self._pending:
            write_batch().flush_later(self)  # at the end of this iteration, with its other writes
        self._pending.append(data)
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_AT_BYTES:
            self.flush()  # a sender sending a lot without yielding: write now, then the pipe's limit holds it
        if stdin.transport.get_write_buffer_size():
            # The pipe did not take everything so far: drain waits only while the buffer is over the
            # high-water mark (the child is not reading), else it returns at once.
            try:
                await stdin.drain()
            except (ConnectionError, BrokenPipeError) as exc:
                raise CarrierClosed(f"stdin closed: {exc}") from None

    def flush(self) -> None:
        """Write the messages gathered in this iteration, one line each, in one write."""
        pending = self._pending
        if not pending:
            return
        data = b"\n".join(pending) + b"\n"
        pending.clear()
        self._pending_bytes = 0
        proc = self._proc
        if proc is None or proc.stdin is None or self._write_error is not None:
            return
        try:
            proc.stdin.write(data)
        except (ConnectionError, RuntimeError) as exc:
            # A pipe whose process just exited (uvloop: "the handler is closed"), before the exit is
            # noticed: the same outage as a closed stdin. The callers of these messages are failed
            # when stdout closes; later sends fail at once.
            self._write_error = str(exc) or type(exc).__name__
            log.debug("backend %s: write to stdin failed: %s", self._name, exc)

    async def wait_closed(self) -> str:
        await self._closed.wait()
        return self._reason

    async def close(self) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            # Polite first (close stdin, as MCP's stdio shutdown says), then SIGTERM, then SIGKILL.
            if proc.stdin is not None:
                self.flush()  # what was sent just before (a cancellation, say) still reaches it
                with contextlib.suppress(Exception):
                    proc.stdin.close()
            if await self._wait_exit(2.0) is None:
                self._signal(signal.SIGTERM)
                if await self._wait_exit(3.0) is None:
                    self._signal(signal.SIGKILL)
                    await self._wait_exit(5.0)
        # Reap any grandchildren left in the group.
        self._signal(signal.SIGKILL)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._closed.set()

    def _signal(self, sig: int) -> None:
        assert self._proc
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)
