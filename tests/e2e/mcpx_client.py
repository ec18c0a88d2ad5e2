"""A small MCPx participant over a real WebSocket (the ``websockets`` library), for the e2e tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.support import hs256_jwt

PROTOCOL = "mcpx/v0.1"
SECRET = "mcpx-test-secret"
ADMIN = "mcpx-admin-token"


def mint(participant: str, topic: str, capabilities: list[str] | None = None, secret: str = SECRET) -> str:
    claims: dict[str, Any] = {"participantId": participant, "topic": topic, "exp": time.time() + 600}
    if capabilities is not None:
        claims["capabilities"] = capabilities
    return hs256_jwt({"alg": "HS256", "typ": "JWT"}, claims, secret)


def ws_url(base: str, topic: str, **query: str) -> str:
    params = "&".join(f"{k}={v}" for k, v in {"topic": topic, **query}.items())
    return f"{base.replace('http', 'ws', 1)}/ws?{params}"


class Peer:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.id = ""
        self.welcome: dict[str, Any] = {}

    @classmethod
    async def join(cls, base: str, topic: str, token: str, *, mode: str | None = None, via_query: bool = False) -> Peer:
        query = {"mode": mode} if mode else {}
        headers = {}
        if via_query:
            query["token"] = token
        else:
            headers["Authorization"] = f"Bearer {token}"
        ws = await asyncio.wait_for(connect(ws_url(base, topic, **query), additional_headers=headers), 10)
        peer = cls(ws)
        peer.welcome = await peer.recv()
        assert peer.welcome["kind"] == "system/welcome", peer.welcome
        peer.id = peer.welcome["payload"]["you"]["id"]
        return peer

    async def recv(self, timeout: float = 5.0) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(await asyncio.wait_for(self.ws.recv(), timeout))
        return message

    async def recv_kind(self, kind: str, timeout: float = 5.0) -> dict[str, Any]:
        """The next message of this kind, skipping others (presence of unrelated joins, etc.)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            message = await self.recv(max(0.01, deadline - asyncio.get_running_loop().time()))
            if message["kind"] == kind:
                return message

    async def quiet(self, seconds: float = 0.3, ignore: tuple[str, ...] = ("system/presence",)) -> None:
        """Asserts nothing but ``ignore`` kinds arrives for a while."""
        deadline = asyncio.get_running_loop().time() + seconds
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                message = await self.recv(left)
            except TimeoutError:
                return
            assert message["kind"] in ignore, f"{self.id} unexpectedly got {message}"

    def envelope(self, kind: str, payload: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        env = {
            "protocol": PROTOCOL,
            "id": str(uuid.uuid4()),
            "ts": "2025-08-26T14:00:00Z",
            "from": self.id,
            "kind": kind,
            "payload": payload if payload is not None else {},
        }
        env.update(fields)
        return env

    async def send(self, kind: str, payload: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
        env = self.envelope(kind, payload, **fields)
        await self.ws.send(json.dumps(env))
        return env

    async def send_raw(self, data: str | dict[str, Any]) -> None:
        await self.ws.send(data if isinstance(data, str) else json.dumps(data))

    async def close(self) -> None:
        """Close, reading what still arrives meanwhile. A closing peer still receives what its topic sent before
        the gateway read its close frame (the presence leaves of peers closing at the same moment); websockets
        stops reading the socket once ``max_queue`` (16) messages wait unread, and would then never read the
        gateway's answering close frame: close() hung until its timeout (seen with 50 peers closing at once on
        a loaded machine)."""
        closing = asyncio.ensure_future(self.ws.close())
        async with asyncio.timeout(5):
            with contextlib.suppress(ConnectionClosed):
                while not closing.done():
                    await self.ws.recv()
            await closing


async def refused(base: str, topic: str, token: str | None, **query: str) -> tuple[int, str]:
    """(close code, reason) of a connection the gateway refuses after the upgrade."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with connect(ws_url(base, topic, **query), additional_headers=headers, open_timeout=10) as ws:
        try:
            message = await asyncio.wait_for(ws.recv(), 5)
        except ConnectionClosed as exc:
            assert exc.rcvd is not None
            return exc.rcvd.code, exc.rcvd.reason
        raise AssertionError(f"expected a refusal, got {message!r}")


def tool_call(name: str, arguments: dict[str, Any], rpc_id: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
