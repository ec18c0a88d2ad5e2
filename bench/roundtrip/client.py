"""The MCP client side of the driver: a target's session and a checked tools/call, in either era.

Legacy (2025-11-25): `initialize`, `notifications/initialized`, then `tools/list` on the session the
server returned (its `Mcp-Session-Id` goes on every later request). Modern (2026-07-28): no initialize
and no session; every request carries the client envelope in `params._meta` and the routing headers
(`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`); `server/discover` stands in for initialize.
An `McpSession` of either era builds its own headers and params, so the same code validates both.
The session also carries its target's `EchoTool` (the argument name and the answer's form), which the
validating call and wrk's script both follow.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from bench.roundtrip.common import (
    CLIENT_INFO,
    MODERN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    SERVER_INFO_META_KEY,
    TEXT_ECHO,
    BenchError,
    EchoTool,
    log,
    modern_meta,
)

Era = Literal["legacy", "modern"]


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
    session_id: str | None  # always None in the modern era
    protocol_version: str
    tool: str
    server_info: dict[str, Any]
    era: Era = "legacy"
    client_info: dict[str, str] = field(default_factory=lambda: dict(CLIENT_INFO))
    echo: EchoTool = TEXT_ECHO  # the target's echo tool: its argument name and the form of its answer

    def headers(self, method: str | None = None, name: str | None = None) -> dict[str, str]:
        """The request headers; in the modern era also the routing headers for `method` (and its target)."""
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": self.protocol_version,
        }
        if self.session_id:
            h["Mcp-Session-Id"] = self.session_id
        if self.era == "modern" and method is not None:
            h["Mcp-Method"] = method
            if name is not None:
                h["Mcp-Name"] = name
        return h

    def meta(self) -> dict[str, Any]:
        """The modern client envelope (what wrk's modern script puts in every request, too)."""
        return modern_meta(self.client_info, self.protocol_version)

    def params(self, params: dict[str, Any]) -> dict[str, Any]:
        """`params` as this era sends them: with the client envelope in `_meta` in the modern era."""
        if self.era != "modern":
            return params
        return {**params, "_meta": {**params.get("_meta", {}), **self.meta()}}

    def request(
        self, client: httpx.Client, method: str, params: dict[str, Any], req_id: Any, name: str | None = None
    ) -> tuple[Any, httpx.Response]:
        """One request of this session's era (`name`: the target mirrored in Mcp-Name, e.g. the tool)."""
        return rpc(client, self.url, self.headers(method, name), method, self.params(params), req_id)


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


def open_session(url: str, timeout: float, era: Era = "legacy", echo: EchoTool = TEXT_ECHO) -> McpSession:
    """Open a session of `era` (legacy: initialize + initialized + tools/list; modern: server/discover +
    tools/list), retried until `timeout`, whose calls of the echo tool follow `echo`."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    once = _open_modern_once if era == "modern" else _open_session_once
    with httpx.Client(timeout=10.0, trust_env=False) as client:  # 127.0.0.1 only: never through a proxy
        while time.monotonic() < deadline:
            try:
                session = once(client, url)
                session.echo = echo
                return session
            except (httpx.HTTPError, BenchError) as exc:
                last = exc
                time.sleep(0.3)
    raise BenchError(f"could not open an MCP {era} session at {url}: {last}")


def _open_session_once(client: httpx.Client, url: str) -> McpSession:
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": dict(CLIENT_INFO)}
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
    session.tool = _echo_tool(tools)
    return session


def _open_modern_once(client: httpx.Client, url: str) -> McpSession:
    """No initialize and no session: each request brings its envelope; the server must not hand out a session."""
    session = McpSession(url, None, MODERN_PROTOCOL_VERSION, "echo", {}, era="modern")
    discovered, resp = session.request(client, "server/discover", {}, 0)
    _check_modern(session, "server/discover", discovered, resp)
    if MODERN_PROTOCOL_VERSION not in discovered.get("supportedVersions", []):
        raise BenchError(f"server/discover does not list {MODERN_PROTOCOL_VERSION}: {discovered}")
    session.server_info = (discovered.get("_meta") or {}).get(SERVER_INFO_META_KEY, {})
    tools, resp = session.request(client, "tools/list", {}, 1)
    _check_modern(session, "tools/list", tools, resp)
    session.tool = _echo_tool(tools)
    return session


def _check_modern(session: McpSession, method: str, result: Any, resp: httpx.Response) -> None:
    """A modern answer names its result type and opens no session (else the server took it for legacy)."""
    if resp.headers.get("mcp-session-id"):
        raise BenchError(f"{method}: a stateless {session.protocol_version} request got a session id")
    if not isinstance(result, dict) or result.get("resultType") != "complete":
        raise BenchError(f"{method}: not a {session.protocol_version} result (no resultType complete): {result}")


def _echo_tool(tools: Any) -> str:
    names = [t.get("name") for t in tools.get("tools", [])]
    if "echo" in names:
        return "echo"
    candidates = [n for n in names if isinstance(n, str) and n.endswith("echo")]
    if len(candidates) != 1:
        raise BenchError(f"tools/list has no `echo` tool: {names}")
    log(f"tool `echo` is exposed as `{candidates[0]}`")
    return candidates[0]


def validate_call(session: McpSession, text: str) -> None:
    """One tools/call through the target, in the session's era, must come back with exactly the echoed text
    (in the form of the session's echo tool)."""
    with httpx.Client(timeout=10.0, trust_env=False) as client:  # 127.0.0.1 only: never through a proxy
        req_id = f"validate-{secrets.token_hex(4)}"
        params = {"name": session.tool, "arguments": {session.echo.arg: text}}
        result, resp = session.request(client, "tools/call", params, req_id, name=session.tool)
    if session.era == "modern":
        _check_modern(session, "tools/call", result, resp)
    if result.get("isError"):
        raise BenchError(f"tools/call returned isError: {result}")
    texts = [c.get("text") for c in result.get("content", []) if c.get("type") == "text"]
    if texts != [session.echo.answer(text)]:
        raise BenchError(f"tools/call did not echo {session.echo.answer(text)!r}: {result}")
