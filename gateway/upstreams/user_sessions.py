"""A legacy-era session per caller on one Streamable HTTP backend, for calls made with the caller's credential.

Why: the gateway's shared connection to a backend holds one ``Mcp-Session-Id``, opened with the gateway's own
identity. A legacy-era server that follows the MCP security guidance binds a session to the credential that
created it (MCP 2025-11-25, Security Best Practices, "Session Hijacking"; the official Python SDK answers 404 to
any other) — so a call made with a caller's own credential (issue 17: token_exchange, principal_headers) needs a
session of that caller. This module opens one on the caller's first call (``initialize`` and
``notifications/initialized`` with the caller's headers and the parameters of the shared connection's own
``initialize``) and uses it for that caller's later calls. A stateless backend (no session id in its answer)
needs none: the caller's requests then go without one. The modern era has no sessions and never comes here.

Invariants: keyed by the call's ``session_key`` (the principal); at most ``limit`` sessions per backend (the
least recently used is ended with DELETE, in the background); concurrent first calls of one caller open one
session (single flight); a session the backend ended (404) is forgotten, and the next call opens a new one;
every exchange is bounded by ``timeout_s``; ``close`` ends every session (best effort, bounded).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson

from gateway import jsonrpc
from gateway.sse import SSEParser
from gateway.upstreams.httpclient import ConnectionPool, HttpError

NO_SESSION = ""  # the backend gave no session id: the caller's requests go without one


class CallHeaders(dict[str, str]):
    """The headers of one request, and whose call it is (``session_key``: the principal, or None)."""

    __slots__ = ("session_key",)

    def __init__(self, headers: Mapping[str, str], session_key: str | None) -> None:
        super().__init__(headers)
        self.session_key = session_key


def session_key(headers: Mapping[str, str] | None) -> str | None:
    return getattr(headers, "session_key", None)


class UserSessions:
    """The per-caller sessions of one backend (see the module docstring)."""

    def __init__(
        self,
        name: str,
        pool: Callable[[], ConnectionPool | None],
        target: str,
        spawn: Callable[[Awaitable[None]], Any],
        limit: int = 256,
        timeout_s: float = 15.0,
        max_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self._name = name
        self._pool = pool
        self._target = target
        self._spawn = spawn
        self._limit = limit
        self._timeout_s = timeout_s
        self._max = max_bytes
        self._sessions: OrderedDict[str, tuple[str, dict[str, str]]] = OrderedDict()  # key -> (sid, headers)
        self._opening: dict[str, asyncio.Task[str]] = {}
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._sessions)

    async def session(self, key: str, base: dict[str, str], headers: Mapping[str, str], init: dict[str, Any]) -> str:
        """The caller's session id (``NO_SESSION`` for a stateless backend), opened on first need.

        ``base``: the carrier's own headers without the shared session; ``headers``: the call's; ``init``: the
        params of the shared connection's initialize. Raises HttpError when it cannot be opened."""
        known = self._sessions.get(key)
        if known is not None:
            self._sessions.move_to_end(key)
            return known[0]
        task = self._opening.get(key)
        if task is None:
            task = asyncio.ensure_future(self._open({**base, **headers}, init))
            self._opening[key] = task
            task.add_done_callback(lambda done, key=key: self._opened(key, done, {**base, **headers}))  # type: ignore[misc]
        return await asyncio.shield(task)

    def _opened(self, key: str, task: asyncio.Task[str], headers: dict[str, str]) -> None:
        if self._opening.get(key) is task:
            del self._opening[key]
        if task.cancelled() or task.exception() is not None:
            return
        self._sessions[key] = (task.result(), headers)
        while len(self._sessions) > self._limit:
            _, (sid, old) = self._sessions.popitem(last=False)
            if sid:
                self._spawn(self._end(sid, old))

    def forget(self, key: str) -> None:
        """The backend ended this caller's session (404): the next call opens a new one."""
        self._sessions.pop(key, None)

    async def _open(self, headers: dict[str, str], init: dict[str, Any]) -> str:
        pool = self._pool()
        if pool is None:
            raise HttpError("not connected")
        rpc_id = f"switchboard-user-init-{next(self._ids)}"
        request = {"jsonrpc": "2.0", "id": rpc_id, "method": "initialize", "params": init}
        try:
            return await self._handshake(pool, headers, request)
        except TimeoutError:
            raise HttpError(f"backend {self._name}: the caller's initialize took over {self._timeout_s:g} s") from None

    async def _handshake(self, pool: ConnectionPool, headers: dict[str, str], request: dict[str, Any]) -> str:
        rpc_id = request["id"]
        async with asyncio.timeout(self._timeout_s):
            response = await pool.request("POST", self._target, headers, jsonrpc.dumps(request))
            try:
                sid = response.headers.get("mcp-session-id") or NO_SESSION
                answer = await self._answer_of(response, rpc_id)
            finally:
                response.release()
            if response.status != 200 or "result" not in answer:
                raise HttpError(f"backend {self._name} refused the caller's initialize (HTTP {response.status})")
            follow = {**headers, "mcp-session-id": sid} if sid else headers
            note = jsonrpc.dumps(jsonrpc.notification("notifications/initialized", None))
            done = await pool.request("POST", self._target, follow, note)
            await done.read()
            done.release()
        return sid

    async def _answer_of(self, response: Any, rpc_id: str) -> dict[str, Any]:
        """The initialize answer in a JSON body or an SSE stream ({} when there is none)."""
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            data = await response.read()
            with contextlib.suppress(orjson.JSONDecodeError):
                found = orjson.loads(data) if len(data) <= self._max else None
                if isinstance(found, dict):
                    return found
            return {}
        parser = SSEParser(self._max)
        async for chunk in response.iter_raw():
            for event in parser.feed(chunk):
                with contextlib.suppress(orjson.JSONDecodeError):
                    message = orjson.loads(event.data) if event.data else None
                    if isinstance(message, dict) and message.get("id") == rpc_id:
                        return message
        return {}

    async def _end(self, sid: str, headers: dict[str, str]) -> None:
        pool = self._pool()
        if pool is None:
            return
        with contextlib.suppress(Exception):
            async with asyncio.timeout(2.0):
                response = await pool.request("DELETE", self._target, {**headers, "mcp-session-id": sid})
                response.release()

    async def close(self) -> None:
        for task in list(self._opening.values()):
            task.cancel()
        sessions, self._sessions = list(self._sessions.values()), OrderedDict()
        await asyncio.gather(*(self._end(sid, headers) for sid, headers in sessions if sid), return_exceptions=True)
