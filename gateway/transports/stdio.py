"""The stdio front door: a host spawns ``switchboard stdio`` and speaks newline-delimited JSON-RPC.

This is how desktop hosts (and MCPL hosts) run a local server: one process, one client, one session
on stdin/stdout, while the gateway behind it federates its backends as usual. stdout carries only
JSON-RPC (logs go to stderr). A line longer than ``limits.max_message_bytes`` is discarded up to its
newline and answered with an error; nothing else is lost. EOF on stdin ends the session; a session
that ends on the gateway's side (the draft's ``exit``) ends serving at once, its last answers written.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING

from gateway import jsonrpc
from gateway.channels import ChannelOverflow, absorb_overflow
from gateway.transports.framed import handle_frame, pump_out

if TYPE_CHECKING:
    from gateway.config import Limits
    from gateway.federation import View
    from gateway.metrics import Metrics
    from gateway.routing import Router
    from gateway.sessions import ClientSession, SessionStore
    from gateway.transports.front_desk import OpenSession
    from policies.auth import Credentials

log = logging.getLogger(__name__)

TRANSPORT = "stdio"
Send = Callable[[str], Awaitable[None]]
_CHUNK = 64 * 1024
TOO_LONG = b""  # the marker of a discarded over-long line (a real line is never empty here)


def _watchable(fd: int) -> bool:
    """Pipes and sockets can be watched by the event loop; files and terminals cannot (uvloop aborts)."""
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


async def open_std_streams() -> tuple[asyncio.StreamReader, Send, asyncio.Task[None] | None]:
    """This process's stdin as a StreamReader and a ``send`` that writes one line to stdout.

    Pipes (how hosts spawn servers) go through the event loop; a file or a terminal is read and
    written in a worker thread, so ``switchboard stdio < requests.jsonl > out.jsonl`` works too.
    Returns the feeding task, if any, for the caller to cancel.
    """
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    feeder: asyncio.Task[None] | None = None
    if _watchable(sys.stdin.fileno()):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    else:

        async def feed() -> None:
            read1 = sys.stdin.buffer.read1  # type: ignore[union-attr]  # a BufferedReader; typeshed says BinaryIO
            while chunk := await asyncio.to_thread(read1, _CHUNK):
                reader.feed_data(chunk)
            reader.feed_eof()

        feeder = asyncio.create_task(feed())
    if _watchable(sys.stdout.fileno()):
        out, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, sys.stdout)
        writer = asyncio.StreamWriter(out, protocol, None, loop)

        async def send(text: str) -> None:
            writer.write(text.encode() + b"\n")
            await writer.drain()

        return reader, send, feeder

    def write_line(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    async def send_blocking(text: str) -> None:
        await asyncio.to_thread(write_line, text.encode() + b"\n")

    return reader, send_blocking, feeder


async def lines(reader: asyncio.StreamReader, max_bytes: int) -> AsyncGenerator[bytes, None]:
    """Non-empty lines of ``reader``; an over-long line is discarded through its newline and
    yields ``TOO_LONG`` once. The last line may lack its newline."""
    buffer = bytearray()
    discarding = False
    while True:
        chunk = await reader.read(_CHUNK)
        if not chunk:
            if buffer.strip() and not discarding:
                yield bytes(buffer)
            return
        buffer += chunk
        while True:
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > max_bytes and not discarding:
                    discarding = True
                    yield TOO_LONG
                if discarding:
                    buffer.clear()
                break
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            if discarding:
                discarding = False  # the rest of the over-long line ends here
                continue
            if len(line) > max_bytes:
                yield TOO_LONG
            elif line.strip():
                yield line


class StdioDoor:
    """Serves one session per pair of pipes (``switchboard stdio`` has one: its own stdin and stdout)."""

    def __init__(
        self, *, open_session: OpenSession, router: Router, sessions: SessionStore, limits: Limits, metrics: Metrics
    ) -> None:
        self._open_session = open_session
        self._router = router
        self._sessions = sessions
        self._limits = limits
        self._metrics = metrics

    async def serve(
        self,
        view: View,
        credentials: Credentials,
        reader: asyncio.StreamReader,
        send: Callable[[str], Awaitable[None]],
    ) -> None:
        """One session on one pair of pipes, until EOF or the session ends."""
        limits = self._limits
        session = self._open_session(TRANSPORT, view, credentials)
        session.standalone.attached = True
        writer = asyncio.create_task(self._write(session, send))
        tasks: set[asyncio.Task[None]] = set()
        incoming = lines(reader, limits.max_message_bytes)
        reading: asyncio.Future[bytes] | None = None
        try:
            while True:
                # The next line races the session's end: the writer returns once the session's stream
                # closed and was written out (the draft's exit), and a host may keep stdin open after it.
                reading = asyncio.ensure_future(anext(incoming))
                await asyncio.wait((reading, writer), return_when=asyncio.FIRST_COMPLETED)
                if writer.done():
                    return
                try:
                    line = reading.result()
                except StopAsyncIteration:
                    break
                if line is TOO_LONG:
                    session.standalone.push(
                        jsonrpc.error(
                            None, jsonrpc.INVALID_REQUEST, f"message exceeds {limits.max_message_bytes} bytes"
                        )
                    )
                    continue
                task = asyncio.create_task(handle_frame(self._router, session, line))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            # EOF: answer what is still being handled before the session goes (a host may close its
            # end of stdin right after its last request).
            if tasks:
                await asyncio.wait(tasks, timeout=limits.client_request_timeout_s)
            session.standalone.close()  # the writer flushes what is queued, then returns
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await asyncio.shield(writer)
        finally:
            for task in tasks:
                task.cancel()
            if reading is not None and not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
            elif reading is not None and not reading.cancelled():
                reading.exception()  # read (an end of input that raced the session's end), never left unretrieved
            await incoming.aclose()
            self._sessions.end(session)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await writer

    async def _write(self, session: ClientSession, send: Callable[[str], Awaitable[None]]) -> None:
        channel = session.standalone
        try:
            await pump_out(session, send)
        except (ChannelOverflow, asyncio.CancelledError) as exc:
            if not absorb_overflow(channel, exc):
                raise
            self._metrics.dropped_clients.labels(TRANSPORT).inc()
            log.warning("stdio client stopped reading with more than %d messages behind", self._limits.session_queue)
        except OSError as exc:  # a closed pipe: the host went away
            log.info("stdio client went away: %s", exc)
