"""A request only another replica can serve, run there through the bus (issue 14, ADR 0016).

A 2026-07-28 client's retry of a parked call (``requestState`` naming a backend request that waits,
live, in one replica's memory: gateway/mrtr.py) may land on any replica. The replica it lands on
sends the whole HTTP request to the owner named in the state, over the bus (``replica:<id>``); the
owner runs it through its own ASGI app, exactly as if it had arrived there, and streams the
response back (``reply:<id>``), which the first replica writes out as it comes (SSE unbuffered).
No replica needs another's address, so this works between pods and between worker processes on
one port alike.

Invariants: a relayed request is never relayed again (``RELAYED_HEADER``); every wait is bounded
(the owner's first answer within ``START_TIMEOUT_S``, each later chunk within ``CHUNK_TIMEOUT_S``),
and an owner that is gone is a clear error (HTTP 502 with a JSON-RPC error), never a hang; the
requests waiting for answers are bounded (``MAX_WAITING``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway import jsonrpc
from gateway.bus import Bus
from gateway.bus.base import json_object
from gateway.transports.http_common import send_rpc_error

log = logging.getLogger(__name__)

RELAYED_HEADER = b"x-switchboard-relayed"
START_TIMEOUT_S = 10.0
CHUNK_TIMEOUT_S = 300.0
MAX_WAITING = 1024

Scope = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]], Awaitable[None]
]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class OwnerRelay:
    def __init__(self, bus: Bus, replica: str) -> None:
        self._bus = bus
        self.replica = replica
        self.app: App | None = None  # this replica's ASGI app (set once it is built: gateway/app.py)
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._serve(), name="relay-serve"),
            asyncio.create_task(self._replies(), name="relay-replies"),
        ]

    async def stop(self) -> None:
        for task in [*self._tasks, *self._running]:
            task.cancel()
        await asyncio.gather(*self._tasks, *self._running, return_exceptions=True)

    @staticmethod
    def relayed(scope: Scope) -> bool:
        return any(key == RELAYED_HEADER for key, _ in scope.get("headers", ()))

    # ---- the replica a request landed on ---------------------------------------------------------

    async def forward(
        self, owner: str, scope: Scope, body: bytes, send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        """Run the request on ``owner`` and write its response here."""
        if len(self._waiting) >= MAX_WAITING:
            await send_rpc_error(send, 503, jsonrpc.SESSION_OVERLOADED, "too many requests relayed to other replicas")
            return
        rid = f"{self.replica}:{next(self._ids)}"
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(256)
        self._waiting[rid] = queue
        request = {
            "rid": rid,
            "reply": self.replica,
            "method": scope.get("method", "POST"),
            "path": scope.get("path", "/"),
            "root_path": scope.get("root_path", ""),
            "query": _b64(scope.get("query_string", b"")),
            "headers": [[_b64(k), _b64(v)] for k, v in scope.get("headers", ())],
            "body": _b64(body),
        }
        started = False
        try:
            if not await self._bus.publish(f"replica:{owner}", orjson.dumps(request)):
                # Nobody listens there (the replica is gone, or the bus is): say so at once.
                reason = f"the replica holding this ({owner}) is not reachable"
                await send_rpc_error(send, 502, jsonrpc.BACKEND_UNAVAILABLE, reason)
                return
            timeout = START_TIMEOUT_S
            while True:
                try:
                    async with asyncio.timeout(timeout):
                        event = await queue.get()
                except TimeoutError:
                    if not started:
                        await send_rpc_error(
                            send,
                            502,
                            jsonrpc.BACKEND_UNAVAILABLE,
                            f"the replica holding this call ({owner}) did not answer",
                        )
                    return
                if "start" in event:
                    started = True
                    timeout = CHUNK_TIMEOUT_S
                    headers = [(base64.b64decode(k), base64.b64decode(v)) for k, v in event["headers"]]
                    await send({"type": "http.response.start", "status": int(event["start"]), "headers": headers})
                    continue
                more = bool(event.get("more"))
                await send(
                    {"type": "http.response.body", "body": base64.b64decode(event.get("body", "")), "more_body": more}
                )
                if not more:
                    return
        except Exception as exc:
            log.warning("relay to replica %s failed: %s", owner, exc)
            if not started:
                await send_rpc_error(
                    send, 502, jsonrpc.BACKEND_UNAVAILABLE, f"the replica holding this call is unavailable: {exc}"
                )
        finally:
            self._waiting.pop(rid, None)

    async def collect(self, owner: str, scope: Scope, body: bytes) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """:meth:`forward`, the whole response collected: (status, headers, body); 502 when the owner is gone."""
        status, headers, chunks = 502, [], []

        async def keep(event: dict[str, Any]) -> None:
            nonlocal status, headers
            if event["type"] == "http.response.start":
                status, headers = int(event["status"]), list(event.get("headers", []))
            else:
                chunks.append(event.get("body", b""))

        await self.forward(owner, scope, body, keep)
        return status, headers, b"".join(chunks)

    async def _replies(self) -> None:
        async for data in self._bus.subscribe(f"reply:{self.replica}"):
            with contextlib.suppress(orjson.JSONDecodeError, TypeError, AttributeError):
                event = orjson.loads(data)
                queue = self._waiting.get(event.get("rid"))
                if queue is not None:
                    with contextlib.suppress(asyncio.QueueFull):
                        queue.put_nowait(event)

    # ---- the owner --------------------------------------------------------------------------------

    async def _serve(self) -> None:
        async for data in self._bus.subscribe(f"replica:{self.replica}"):
            request = json_object(data)
            if request is None or self.app is None:
                continue
            task = asyncio.create_task(self._run(request), name="relay-run")
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _run(self, request: dict[str, Any]) -> None:
        assert self.app is not None
        rid, reply = request.get("rid"), f"reply:{request.get('reply')}"
        try:
            headers = [(base64.b64decode(k), base64.b64decode(v)) for k, v in request["headers"]]
            scope: Scope = {
                "type": "http",
                "asgi": {"version": "3.0"},
                "http_version": "1.1",
                "method": str(request["method"]),
                "scheme": "http",
                "path": str(request["path"]),
                "raw_path": str(request["path"]).encode(),
                "root_path": str(request.get("root_path", "")),
                "query_string": base64.b64decode(request["query"]),
                "headers": [*headers, (RELAYED_HEADER, b"1")],
                "client": ("127.0.0.1", 0),
                "server": ("127.0.0.1", 0),
            }
            body = base64.b64decode(request["body"])
        except (KeyError, TypeError, ValueError):
            return
        log.info("running a %s %s relayed by replica %s", scope["method"], scope["path"], request.get("reply"))
        delivered = asyncio.Event()

        async def receive() -> dict[str, Any]:
            if not delivered.is_set():
                delivered.set()
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()  # the relaying replica never disconnects on its own
            return {"type": "http.disconnect"}

        async def send(event: dict[str, Any]) -> None:
            if event["type"] == "http.response.start":
                out = {
                    "rid": rid,
                    "start": event["status"],
                    "headers": [[_b64(k), _b64(v)] for k, v in event.get("headers", [])],
                }
            else:
                out = {"rid": rid, "body": _b64(event.get("body", b"")), "more": bool(event.get("more_body"))}
            await self._bus.publish(reply, orjson.dumps(out))

        await self.app(scope, receive, send)


class ParkedRouting:
    """Where a modern request goes when its ``requestState`` names a call parked on another replica."""

    def __init__(self, owner_of: Callable[[Any], str | None], relay: OwnerRelay) -> None:
        self._owner_of = owner_of
        self._relay = relay

    def owner(self, scope: Scope, message: dict[str, Any]) -> str | None:
        params = message.get("params")
        state = params.get("requestState") if isinstance(params, dict) else None
        owner = self._owner_of(state) if isinstance(state, str) else None
        if owner is None or owner == self._relay.replica or self._relay.relayed(scope):
            return None
        return owner

    async def forward(
        self, owner: str, scope: Scope, message: dict[str, Any], send: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> None:
        await self._relay.forward(owner, scope, jsonrpc.dumps(message), send)
