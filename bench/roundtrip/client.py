"""The MCP client side of the driver: one session per target (initialize, initialized, tools/list) and a
checked tools/call."""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench.roundtrip.common import PROTOCOL_VERSION, BenchError, log


def _parse_body(resp: httpx.Response) -> list[dict[str, Any]]:
    ctype = resp.headers.get("content-type", "")
    if "text/event-stream" in ctype:
        messages: list[dict[str, Any]] = []
        data: list[str] = []
        for line in [*resp.text.splitlines(), ""]:
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
            elif not line.strip() and data:
                with contextlib.suppress(json.JSONDecodeError):
                    messages.append(json.loads("\n".join(data)))
                data = []
        return messages
    if not resp.content:
        return []
    parsed = resp.json()
    return parsed if isinstance(parsed, list) else [parsed]


@dataclass
class McpSession:
    url: str
    session_id: str | None
    protocol_version: str
    tool: str
    server_info: dict[str, Any]

    def headers(self) -> dict[str, str]:
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self.protocol_version,
        }
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        return h


def rpc(
    client: httpx.Client, url: str, headers: dict[str, str], method: str, params: Any, req_id: Any
) -> tuple[Any, httpx.Response]:
    body = {"jsonrpc": "2.0", "id": req_id, "method": method, "params": params}
    resp = client.post(url, headers=headers, json=body)
    if resp.status_code != 200:
        raise BenchError(f"{method}: HTTP {resp.status_code}: {resp.text[:300]}")
    for msg in _parse_body(resp):
        if msg.get("id") == req_id:
            if "error" in msg:
                raise BenchError(f"{method}: JSON-RPC error {msg['error']}")
            return msg.get("result"), resp
    raise BenchError(f"{method}: no response with id {req_id!r} in: {resp.text[:300]}")


def open_session(url: str, timeout: float) -> McpSession:
    """initialize + notifications/initialized + tools/list, retried until `timeout`."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    with httpx.Client(timeout=10.0) as client:
        while time.monotonic() < deadline:
            try:
                return _open_session_once(client, url)
            except (httpx.HTTPError, BenchError) as exc:
                last = exc
                time.sleep(0.3)
    raise BenchError(f"could not open an MCP session at {url}: {last}")


def _open_session_once(client: httpx.Client, url: str) -> McpSession:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "switchboard-bench", "version": "1.0"},
    }
    result, resp = rpc(client, url, base, "initialize", params, 0)
    session = McpSession(
        url=url,
        session_id=resp.headers.get("mcp-session-id"),
        protocol_version=result.get("protocolVersion", PROTOCOL_VERSION),
        tool="echo",
        server_info=result.get("serverInfo", {}),
    )
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    note = client.post(url, headers=session.headers(), json=initialized)
    if note.status_code not in (200, 202, 204):
        raise BenchError(f"notifications/initialized: HTTP {note.status_code}: {note.text[:300]}")
    tools, _ = rpc(client, url, session.headers(), "tools/list", {}, 1)
    names = [t.get("name") for t in tools.get("tools", [])]
    if "echo" not in names:
        candidates = [n for n in names if isinstance(n, str) and n.endswith("echo")]
        if len(candidates) != 1:
            raise BenchError(f"tools/list has no `echo` tool: {names}")
        log(f"tool `echo` is exposed as `{candidates[0]}`")
        session.tool = candidates[0]
    return session


def validate_call(session: McpSession, text: str) -> None:
    """One tools/call through the target must come back with exactly the echoed text."""
    with httpx.Client(timeout=10.0) as client:
        req_id = f"validate-{secrets.token_hex(4)}"
        result, _ = rpc(
            client,
            session.url,
            session.headers(),
            "tools/call",
            {"name": session.tool, "arguments": {"text": text}},
            req_id,
        )
    if result.get("isError"):
        raise BenchError(f"tools/call returned isError: {result}")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    if texts != [text]:
        raise BenchError(f"tools/call did not echo {text!r}: {result}")
