"""A legacy-era Streamable HTTP MCP backend that reports the credential it received (issue 17 tests).

Raw ASGI on uvicorn in a background thread (like tests/support_oauth.py), one app for many paths: every POST is
recorded as (path, method, headers); the tool ``whoami`` answers with the Authorization header (and
``x-api-key``) of its own request, so a test sees exactly what the gateway sent for that call.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

import jwt
import uvicorn

from tests.raw_asgi import read_body, respond

WHOAMI = {"name": "whoami", "description": "The credential this request carried.", "inputSchema": {"type": "object"}}


@dataclass(slots=True)
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    tool: str | None = None  # the name of a tools/call


class AuthBackend:
    """``with AuthBackend() as backend:`` — ``backend.url(path)``, ``backend.seen``, ``backend.calls(path)``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: list[Seen] = []
        # Sessions of paths under /bound: bound to who opened them (MCP 2025-11-25 Security Best Practices; the
        # official SDK does the same): another caller's request, or an unknown session, is answered 404.
        self.sessions: dict[str, str] = {}
        self._next = 0
        self.port = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def seen(self) -> list[Seen]:
        with self._lock:
            return list(self._seen)

    def calls(self, path: str) -> list[Seen]:
        """The whoami calls that reached ``path`` (not the gateway's own probes, such as MCPC's)."""
        return [s for s in self.seen if s.path == path and s.tool == "whoami"]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if scope["method"] == "GET":
            await respond(send, 405, b"")
            return
        bound = scope["path"].startswith("/bound")
        sid = headers.get("mcp-session-id")
        if scope["method"] == "DELETE":
            with self._lock:
                self.sessions.pop(sid or "", None)
            await respond(send, 200, b"")
            return
        message = json.loads(await read_body(receive))
        method = message.get("method", "<response>")
        with self._lock:
            params = message.get("params")
            tool = params.get("name") if method == "tools/call" and isinstance(params, dict) else None
            self._seen.append(Seen(scope["path"], method, headers, tool))
            refused = bound and method != "initialize" and (sid is None or self.sessions.get(sid) != who(headers))
        if refused:
            await respond(
                send, 404, b'{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Session not found"}}'
            )
            return
        if "id" not in message or "method" not in message:
            await respond(send, 202, b"")
            return
        rpc_id, extra = message["id"], None
        if method == "initialize":
            result: Any = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "auth-backend", "version": "1"},
            }
            with self._lock:
                self._next += 1
                session = f"s-{self._next}"
                self.sessions[session] = who(headers)
            extra = [(b"mcp-session-id", session.encode())]
        elif method == "tools/list":
            result = {"tools": [WHOAMI]}
        elif method == "tools/call" and message["params"].get("name") == "whoami":
            seen = {
                "authorization": headers.get("authorization"),
                "x-api-key": headers.get("x-api-key"),
                "session": sid,
            }
            result = {"content": [{"type": "text", "text": json.dumps(seen)}]}
        elif method == "ping":
            result = {}
        else:
            error = {"code": -32601, "message": f"Method not found: {method}"}
            await respond(send, 200, json.dumps({"jsonrpc": "2.0", "id": rpc_id, "error": error}).encode())
            return
        await respond(send, 200, json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}).encode(), extra)

    def end_sessions_of(self, owner: str) -> None:
        """Forget every session of ``owner`` (as a backend that restarted or expired them)."""
        with self._lock:
            self.sessions = {sid: who for sid, who in self.sessions.items() if who != owner}

    def __enter__(self) -> AuthBackend:
        sock = socket.create_server(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(uvicorn.Config(self, log_level="warning", lifespan="off", timeout_graceful_shutdown=1))
        self._server = server
        self._thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])), daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("auth backend did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(10)


def who(headers: dict[str, str]) -> str:
    """Whom a request's credential names: a bearer JWT's ``sub`` (read, not verified: the AS did that), else
    the X-Api-Key, else the raw Authorization."""
    authorization = headers.get("authorization", "")
    if authorization.startswith("Bearer ") and authorization.count(".") == 2:
        return str(jwt.decode(authorization[7:], options={"verify_signature": False}).get("sub"))
    return headers.get("x-api-key") or authorization
