"""The MCPL test server's transports: newline-delimited JSON-RPC on stdio, and legacy Streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tests.e2e.backends.mcpl_server.catalog import JsonObj
from tests.e2e.backends.mcpl_server.server import AfterResponse, McplServer, Options, classify

log = logging.getLogger("mcpl_server")


# ---------------------------------------------------------------------------------------------- stdio


async def run_stdio(options: Options) -> None:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never corrupt the JSON-RPC stream

    async def send(message: JsonObj) -> None:
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=64 * 1024 * 1024)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    server = McplServer(options, send)

    async def answer(message: JsonObj) -> None:
        reply = await server.handle_request(message)
        await send(reply.message)
        for step in reply.after:
            await step()

    while line := await reader.readline():
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            await send({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}})
            continue
        kind = classify(message)
        if kind == "request":
            server.spawn(answer(message))
        elif kind == "notification":
            await server.handle_notification(message)  # in order: chunks land before their final answer
        elif kind == "response":
            server.handle_response(message)
        else:
            await send({"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Invalid Request"}})
    log.info("stdin closed; exiting")
    server.close()


# ---------------------------------------------------------------------------------------------- HTTP


class Outbox:
    """Server-initiated messages waiting for a GET stream; a message taken but not delivered goes back."""

    def __init__(self) -> None:
        self.items: deque[JsonObj] = deque()
        self.changed = asyncio.Event()
        self.closed = False

    def put(self, message: JsonObj, *, front: bool = False) -> None:
        (self.items.appendleft if front else self.items.append)(message)
        self.changed.set()

    def close(self) -> None:
        self.closed = True
        self.changed.set()

    async def get(self, timeout: float) -> JsonObj | None:
        """The next message, or None after `timeout` seconds (or when closed)."""
        if not self.items and not self.closed:
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout)
        return self.items.popleft() if self.items and not self.closed else None


@dataclass
class HttpSession:
    server: McplServer
    outbox: Outbox


def build_app(options: Options) -> Any:
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    sessions: dict[str, HttpSession] = {}

    def rpc_error(status: int, code: int, message: str) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}, status)

    def lookup(request: Request) -> HttpSession | JSONResponse:
        session_id = request.headers.get("mcp-session-id")
        if not session_id:
            return rpc_error(400, -32600, "Missing Mcp-Session-Id header")
        session = sessions.get(session_id)
        if session is None:
            return rpc_error(404, -32600, "Unknown or ended session")
        return session

    async def post(request: Request) -> Response:
        try:
            message = json.loads(await request.body())
        except ValueError:
            return rpc_error(400, -32700, "Parse error")
        kind = classify(message)
        if kind == "invalid":
            return rpc_error(400, -32600, "Invalid Request (batches are not supported)")
        if kind == "request" and message["method"] == "initialize":
            session_id = uuid.uuid4().hex
            outbox = Outbox()

            async def send(outgoing: JsonObj, outbox: Outbox = outbox) -> None:
                outbox.put(outgoing)

            session = HttpSession(McplServer(options, send), outbox)
            sessions[session_id] = session
            reply = await session.server.handle_request(message)
            log.info("new session %s", session_id)
            return JSONResponse(reply.message, headers={"Mcp-Session-Id": session_id})
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        server = found.server
        if kind == "request":
            reply = await server.handle_request(message)

            async def after(steps: list[AfterResponse] = reply.after) -> None:
                for step in steps:
                    await step()

            return JSONResponse(reply.message, background=BackgroundTask(after) if reply.after else None)
        if kind == "notification":
            await server.handle_notification(message)
        else:
            server.handle_response(message)
        return Response(status_code=202)

    async def get(request: Request) -> Response:
        if "text/event-stream" not in request.headers.get("accept", ""):
            return rpc_error(406, -32600, "GET needs Accept: text/event-stream")
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        outbox = found.outbox

        async def events() -> AsyncIterator[str]:
            yield ": keepalive\n\n"  # flushes the stream open at once
            pending: JsonObj | None = None
            try:
                while not outbox.closed:
                    pending = await outbox.get(5.0)
                    if pending is None:
                        yield ": keepalive\n\n"
                        continue
                    yield f"data: {json.dumps(pending)}\n\n"
                    pending = None
            finally:
                if pending is not None and not outbox.closed:
                    outbox.put(pending, front=True)

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def delete(request: Request) -> Response:
        found = lookup(request)
        if isinstance(found, JSONResponse):
            return found
        sessions.pop(request.headers["mcp-session-id"], None)
        found.outbox.close()
        found.server.close()
        return Response(status_code=200)

    async def mcp(request: Request) -> Response:
        handler = {"POST": post, "GET": get, "DELETE": delete}[request.method]
        return await handler(request)

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST", "GET", "DELETE"])])


async def run_http(options: Options, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(build_app(options), host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    await uvicorn.Server(config).serve()
