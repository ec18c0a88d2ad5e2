"""Minimal, fast echo MCP server used as the benchmark backend.

Two ways to run it:

* HTTP (default): a raw ASGI app (no framework) served by uvicorn with
  httptools + uvloop, single worker, Streamable HTTP endpoint at ``/mcp``.
  Every answer is ``application/json`` (never SSE), so the backend costs as
  little as possible and the benchmark measures the proxy in front of it.
* ``--stdio``: line-delimited JSON-RPC on stdin/stdout, for peers that can only
  front a stdio server (supergateway, mcp-proxy).

Methods: ``initialize`` (mints an ``Mcp-Session-Id`` over HTTP),
``notifications/*`` (202, no body), ``ping``, ``tools/list`` (one tool,
``echo``) and ``tools/call`` of ``echo`` (returns the ``text`` argument, or the
JSON of all arguments when there is no string ``text``, as text content).

Session handling over HTTP is deliberately lenient: a request carrying an
unknown ``Mcp-Session-Id`` gets 404 (as the spec requires, so a proxy that
mangles sessions is caught), a request without one is served anyway.
"""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

LATEST_PROTOCOL_VERSION = "2025-11-25"
SUPPORTED_PROTOCOL_VERSIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})

SERVER_INFO = {"name": "bench-echo", "version": "1.0.0"}

ECHO_TOOL: dict[str, Any] = {
    "name": "echo",
    "description": "Echo the `text` argument back as text content.",
    "inputSchema": {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "Text to echo back."}},
        "required": ["text"],
    },
}

# JSON-RPC error codes.
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

Message = dict[str, Any]


def _error(msg_id: Any, code: int, message: str) -> Message:
    return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}


def _result(msg_id: Any, result: Any) -> Message:
    return {"jsonrpc": "2.0", "id": msg_id, "result": result}


def _initialize_result(params: Any) -> dict[str, Any]:
    requested = params.get("protocolVersion") if isinstance(params, dict) else None
    version = requested if requested in SUPPORTED_PROTOCOL_VERSIONS else LATEST_PROTOCOL_VERSION
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": SERVER_INFO,
    }


def _call_tool(msg_id: Any, params: Any) -> Message:
    if not isinstance(params, dict) or params.get("name") != "echo":
        name = params.get("name") if isinstance(params, dict) else None
        return _error(msg_id, INVALID_PARAMS, f"Unknown tool: {name!r}")
    arguments = params.get("arguments") or {}
    text = arguments.get("text") if isinstance(arguments, dict) else None
    if not isinstance(text, str):
        text = orjson.dumps(arguments).decode()
    return _result(msg_id, {"content": [{"type": "text", "text": text}], "isError": False})


def handle_message(msg: Any) -> Message | None:
    """Answer one JSON-RPC message; ``None`` for notifications and responses."""
    if not isinstance(msg, dict):
        return _error(None, INVALID_REQUEST, "Invalid request")
    method = msg.get("method")
    if "id" not in msg or msg["id"] is None:
        return None  # notification, or a response from the client: nothing to answer
    msg_id = msg["id"]
    if method is None:
        return None  # a response to a server request (we never send any)
    params = msg.get("params")
    if method == "tools/call":
        return _call_tool(msg_id, params)
    if method == "tools/list":
        return _result(msg_id, {"tools": [ECHO_TOOL]})
    if method == "initialize":
        return _result(msg_id, _initialize_result(params))
    if method == "ping":
        return _result(msg_id, {})
    return _error(msg_id, METHOD_NOT_FOUND, f"Method not found: {method}")


# --------------------------------------------------------------------------- HTTP

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_JSON_HEADERS = [(b"content-type", b"application/json")]


async def read_body(receive: Receive) -> bytes:
    """The whole request body, however many ASGI messages it came in."""
    body: bytes = b""
    while True:
        event = await receive()
        body += event.get("body", b"")
        if not event.get("more_body", False):
            return body


class EchoApp:
    """Raw ASGI application serving the Streamable HTTP endpoint at ``path``."""

    def __init__(self, path: str = "/mcp") -> None:
        self.path = path
        self.sessions: set[bytes] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if scope["path"].rstrip("/") != self.path:
            await self._respond(send, 404, b'{"error":"not found"}')
            return
        method = scope["method"]
        session_id: bytes | None = None
        for key, value in scope["headers"]:
            if key == b"mcp-session-id":
                session_id = value
                break
        if method == "POST":
            await self._post(scope, receive, send, session_id)
        elif method == "DELETE":
            if session_id is not None and session_id in self.sessions:
                self.sessions.discard(session_id)
                await self._respond(send, 200, b"")
            else:
                await self._respond(send, 404, b"")
        else:
            # No standalone SSE stream: a GET is answered 405, as the spec allows.
            await self._respond(send, 405, b"", extra=[(b"allow", b"POST, DELETE")])

    async def _post(self, scope: Scope, receive: Receive, send: Send, session_id: bytes | None) -> None:
        body = await read_body(receive)
        try:
            msg = orjson.loads(body)
        except orjson.JSONDecodeError:
            await self._respond(send, 400, orjson.dumps(_error(None, PARSE_ERROR, "Parse error")))
            return
        if isinstance(msg, dict) and msg.get("method") == "initialize":
            reply = handle_message(msg)
            new_session = uuid.uuid4().hex.encode()
            self.sessions.add(new_session)
            await self._respond(send, 200, orjson.dumps(reply), extra=[(b"mcp-session-id", new_session)])
            return
        if session_id is not None and session_id not in self.sessions:
            await self._respond(send, 404, orjson.dumps(_error(None, -32001, "Session not found")))
            return
        if isinstance(msg, list):  # JSON-RPC batch (pre-2025-06-18 clients)
            replies = [r for r in (handle_message(m) for m in msg) if r is not None]
            if replies:
                await self._respond(send, 200, orjson.dumps(replies))
            else:
                await self._respond(send, 202, b"")
            return
        reply = handle_message(msg)
        if reply is None:
            await self._respond(send, 202, b"")
        else:
            await self._respond(send, 200, orjson.dumps(reply))

    @staticmethod
    async def _respond(send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None) -> None:
        headers = [(b"content-length", str(len(body)).encode())]
        if body:
            headers += _JSON_HEADERS
        if extra:
            headers += extra
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def serve_http(host: str, port: int, path: str) -> None:
    import uvicorn

    uvicorn.run(
        EchoApp(path),
        host=host,
        port=port,
        loop="uvloop",
        http="httptools",
        workers=1,
        access_log=False,
        log_level="warning",
        lifespan="off",
        server_header=False,
        date_header=False,
    )


# -------------------------------------------------------------------------- stdio


def serve_stdio() -> None:
    """Line-delimited JSON-RPC over stdin/stdout, answered synchronously in order."""
    stdin = sys.stdin.buffer
    stdout = sys.stdout.buffer
    for line in stdin:
        if not line.strip():
            continue
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            reply: Any = _error(None, PARSE_ERROR, "Parse error")
        else:
            if isinstance(msg, list):
                reply = [r for r in (handle_message(m) for m in msg) if r is not None] or None
            else:
                reply = handle_message(msg)
        if reply is not None:
            stdout.write(orjson.dumps(reply) + b"\n")
            stdout.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stdio", action="store_true", help="serve line-delimited JSON-RPC on stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--path", default="/mcp")
    args = parser.parse_args(argv)
    if args.stdio:
        try:
            serve_stdio()
        except (KeyboardInterrupt, BrokenPipeError):
            pass
    else:
        serve_http(args.host, args.port, args.path)


if __name__ == "__main__":
    main()
