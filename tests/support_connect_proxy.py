"""A real HTTP proxy for tests, on 127.0.0.1: CONNECT tunnels (RFC 9110 §9.3.6) and absolute-form
requests (RFC 9112 §3.2.2), optional Basic authentication, a switch to refuse, and a record of what it did.

It runs on the test's event loop (``async with ConnectProxy() as proxy``), so a gateway built in the same
test reaches it, and so does a gateway process (it listens on a real port). Every wait is bounded;
every connection it opened is closed when it stops.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

_HEAD_LIMIT = 64 * 1024
_IDLE_S = 30.0


@dataclass
class ConnectProxy:
    user: str | None = None  # with password: Proxy-Authorization: Basic is required (else 407)
    password: str | None = None
    refuse: int | None = None  # answer every request with this status (403, 502, ...) instead
    tunnels: list[str] = field(default_factory=list)  # CONNECT authorities, in order
    forwarded: list[str] = field(default_factory=list)  # absolute-form request targets, in order
    credentials: list[str | None] = field(default_factory=list)  # each request's Proxy-Authorization
    port: int = 0
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        userinfo = f"{self.user}:{self.password}@" if self.user is not None else ""
        return f"http://{userinfo}127.0.0.1:{self.port}"

    async def __aenter__(self) -> ConnectProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5):
                await self._server.wait_closed()

    def _track(self, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)

    def _spawn(self, coro: object) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._track(writer)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)  # type: ignore[arg-type]
            task.add_done_callback(self._tasks.discard)  # type: ignore[arg-type]
        try:
            head = await _read_head(reader)
            if head is None:
                return
            method, target, headers = head
            self.credentials.append(headers.get("proxy-authorization"))
            if not self._authorised(headers):
                await _answer(writer, 407, b'proxy-authenticate: Basic realm="test"\r\n')
                return
            if self.refuse is not None:
                await _answer(writer, self.refuse)
                return
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
            else:
                await self._forward(method, target, headers, reader, writer)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        except asyncio.CancelledError:
            pass  # the proxy stops (__aexit__): this handler ends here, quietly, as asyncio's server expects
        finally:
            writer.close()

    def _authorised(self, headers: dict[str, str]) -> bool:
        if self.user is None:
            return True
        expected = base64.b64encode(f"{self.user}:{self.password or ''}".encode()).decode()
        return headers.get("proxy-authorization") == f"Basic {expected}"

    async def _tunnel(self, authority: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tunnels.append(authority)
        host, _, port = authority.rpartition(":")
        try:
            async with asyncio.timeout(5):
                up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
        except (OSError, TimeoutError):
            await _answer(writer, 502)
            return
        self._track(up_writer)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        await _pipe_both(reader, writer, up_reader, up_writer)

    async def _forward(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        """Absolute-form requests on one client connection, each rewritten to origin form; the origin's
        answers are piped back as they come."""
        parts = urlsplit(target)
        if parts.scheme != "http" or not parts.hostname:
            await _answer(writer, 400)
            return
        up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        self._track(up_writer)
        back = self._spawn(_pipe(up_reader, writer))
        try:
            while True:
                self.forwarded.append(target)
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                asked = urlsplit(target)
                path = (asked.path or "/") + (f"?{asked.query}" if asked.query else "")
                lines = "".join(f"{k}: {v}\r\n" for k, v in headers.items() if k != "proxy-authorization")
                up_writer.write(f"{method} {path} HTTP/1.1\r\n{lines}\r\n".encode("latin-1") + body)
                await up_writer.drain()
                head = await _read_head(reader)
                if head is None:
                    return
                method, target, headers = head
                self.credentials.append(headers.get("proxy-authorization"))
        finally:
            back.cancel()
            up_writer.close()


async def _read_head(reader: asyncio.StreamReader) -> tuple[str, str, dict[str, str]] | None:
    try:
        async with asyncio.timeout(_IDLE_S):
            raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
        return None
    if len(raw) > _HEAD_LIMIT:
        return None
    lines = raw.decode("latin-1").split("\r\n")
    method, target, _version = lines[0].split(" ", 2)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    return method, target, headers


async def _answer(writer: asyncio.StreamWriter, status: int, extra: bytes = b"") -> None:
    reasons = {400: "Bad Request", 403: "Forbidden", 407: "Proxy Authentication Required", 502: "Bad Gateway"}
    writer.write(
        f"HTTP/1.1 {status} {reasons.get(status, 'Refused')}\r\n".encode()
        + extra
        + b"content-length: 0\r\nconnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    there = asyncio.ensure_future(_pipe(reader, up_writer))
    back = asyncio.ensure_future(_pipe(up_reader, writer))
    try:
        await asyncio.wait((there, back), return_when=asyncio.FIRST_COMPLETED)
    finally:
        there.cancel()
        back.cancel()
        await asyncio.gather(there, back, return_exceptions=True)
