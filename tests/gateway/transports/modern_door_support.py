"""Helpers of the modern door tests: the client envelope, routing headers, tokens, an in-process gateway.

A real Gateway with the builtin demo backend behind httpx's ASGI transport (no sockets, no
subprocess); the fixtures built on it live in conftest.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from base64 import urlsafe_b64encode
from collections.abc import AsyncIterator
from typing import Any

import httpx

from adapters import mcp_modern
from gateway import errors
from gateway.app import build_app
from gateway.config import Config
from gateway.core import Gateway

BASE = "http://127.0.0.1:8787"
VERSION = "2026-07-28"
SECRET = "modern-door-secret"
META = {
    mcp_modern.PROTOCOL_VERSION_KEY: VERSION,
    mcp_modern.CLIENT_CAPABILITIES_KEY: {},
    mcp_modern.CLIENT_INFO_KEY: {"name": "t", "version": "1"},
}
BODY_LIMIT = 4096
WAIT_S = 5.0


def rpc(method: str, params: dict[str, Any] | None = None, rpc_id: Any = 1, meta: Any = META) -> dict[str, Any]:
    body = dict(params or {})
    if meta is not None:
        body["_meta"] = meta
    return {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": body}


def headers_for(method: str, name: str | None = None, **extra: str) -> dict[str, str]:
    headers = {
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
    }
    if name is not None:
        headers["mcp-name"] = name
    headers.update(extra)
    return headers


def b64(data: bytes) -> str:
    return urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: dict[str, Any]) -> str:
    head, body = b64(b'{"alg":"HS256"}'), b64(json.dumps({"exp": time.time() + 60, **claims}).encode())
    return f"{head}.{body}.{b64(hmac.new(SECRET.encode(), f'{head}.{body}'.encode(), hashlib.sha256).digest())}"


async def client_for(config: dict[str, Any]) -> AsyncIterator[tuple[httpx.AsyncClient, Gateway]]:
    cfg = Config.model_validate({"backends": {"demo": {"transport": "builtin"}}, **config})
    gateway = Gateway(cfg)
    app = build_app(cfg, gateway)
    await gateway.start()
    try:
        assert await gateway.connections["demo"].wait_ready(10)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE) as client:
            yield client, gateway
    finally:
        await gateway.stop()


def assert_error(answer: httpx.Response, status: int, code: int, rpc_id: Any = 1) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert body["jsonrpc"] == "2.0" and body["id"] == rpc_id, body
    assert body["error"]["code"] == code, body
    if status not in (401, 413, 415):  # failures of the HTTP exchange itself keep their door's status
        assert errors.http_status(code, modern=True) == status, "statuses come from the one table"
    error: dict[str, Any] = body["error"]
    return error
