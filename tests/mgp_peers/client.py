"""An MGP client of a gateway's Streamable HTTP ``/mcp``, written from the spec, for end-to-end tests.

Two eras (MCP transports; MGP_SECURITY.md §2.2 and §2.6):

- **legacy** (``initialize`` handshake): the MGP object ``{version, extensions}`` goes in
  ``capabilities.mgp`` (or ``capabilities.experimental.mgp`` with ``experimental=True``, the SDK
  placement of §2.3); the session lives in ``Mcp-Session-Id``; server-initiated notifications
  arrive on the GET stream, read in the background into a bounded buffer;
- **modern** (MCP 2026-07-28, MGP 0.8 §2.6): no handshake; every request carries the object in
  ``_meta["io.modelcontextprotocol/clientCapabilities"].extensions["dev.cloto/mgp"]`` and the
  protocol headers; the server's object is read from ``server/discover``.

``version=None`` makes a plain MCP client (it sends no MGP object anywhere; §2.4 rule 3 says it
must get none back). Kernel operations are called the way the negotiated version spells them:
0.3 as ``mgp/...`` methods, 0.5+ as ``mgp.*`` kernel tools via ``tools/call`` (MGP_SPEC.md §1.6).

Helpers read what the spec defines for failures: the tool rejection envelope (§14.7.2: an
``isError`` result whose text is JSON with ``status`` "rejected"|"denied") and the JSON-RPC error's
``error.data._mgp`` recovery object (§14.4).

Invariants: every wait has a timeout; the notification buffer is bounded (oldest dropped); the
stream task is cancelled and the session deleted on exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

LEGACY_VERSION = "2025-11-25"
MODERN_VERSION = "2026-07-28"
EXTENSION_ID = "dev.cloto/mgp"
CLIENT_CAPS_META = "io.modelcontextprotocol/clientCapabilities"
# Every extension each line of the spec names (seed §2.2 table; draft §1.6.4 with the 0.6 split).
SEED_EXTENSIONS = (
    "security", "access_control", "audit", "code_safety", "lifecycle",
    "streaming", "bidirectional", "discovery", "tool_discovery",
)  # fmt: skip
DRAFT_EXTENSIONS = (
    "permissions", "tool_security", "access_control", "audit", "code_safety", "error_handling",
    "lifecycle", "streaming", "progress", "events", "callbacks", "discovery", "tool_discovery",
)  # fmt: skip
NOTIFICATION_BUFFER = 256


class RpcFailure(Exception):
    """A JSON-RPC error answer."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"{error.get('code')}: {error.get('message')}")
        self.code: Any = error.get("code")
        self.message: Any = error.get("message")
        self.data: Any = error.get("data")

    @property
    def mgp(self) -> dict[str, Any] | None:
        """§14.4: ``error.data._mgp``."""
        return mgp_error(self.data)


def mgp_error(data: Any) -> dict[str, Any] | None:
    found = data.get("_mgp") if isinstance(data, dict) else None
    return found if isinstance(found, dict) else None


def rejection(result: Any) -> dict[str, Any] | None:
    """§14.7.2: the rejection body a ``tools/call`` result carries, else None. ``isError`` is
    authoritative (§14.7.4); the ``status`` sentinel is case-sensitive (§14.7.3)."""
    if not isinstance(result, dict) or result.get("isError") is not True:
        return None
    for item in result.get("content") or []:
        if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
            try:
                body = json.loads(item["text"])
            except ValueError:
                continue
            if isinstance(body, dict) and body.get("status") in ("rejected", "denied") and "reason" in body:
                return body
    return None


def text_of(result: dict[str, Any]) -> str:
    return " ".join(c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict))


def has_mgp_field(value: Any) -> bool:
    """Whether ``mgp``/``_mgp``/``security`` (MGP's fields) or ``dev.cloto/mgp`` appear anywhere."""
    if isinstance(value, dict):
        if {"mgp", "_mgp", "security", EXTENSION_ID} & set(value):
            return True
        return any(has_mgp_field(v) for v in value.values())
    if isinstance(value, list):
        return any(has_mgp_field(v) for v in value)
    return False


@dataclass(slots=True)
class Negotiated:
    """What the server answered: its MGP object and where it put it (None when it sent none)."""

    capabilities: dict[str, Any]
    mgp: dict[str, Any] | None
    placement: str | None  # "mgp" | "experimental" | "discover" | None

    @property
    def version(self) -> str | None:
        return self.mgp.get("version") if self.mgp else None

    @property
    def extensions(self) -> list[str]:
        return list(self.mgp.get("extensions") or []) if self.mgp else []


@dataclass(slots=True)
class MgpTestClient:
    url: str
    version: str | None = "0.8"  # "0.3", "0.8", or None: a plain MCP client
    extensions: tuple[str, ...] | None = None  # None: every extension of the version
    era: str = "legacy"  # "legacy" | "modern"
    experimental: bool = False  # legacy: offer under capabilities.experimental.mgp
    token: str | None = None
    name: str = "mgp-test-client"
    timeout_s: float = 10.0
    negotiated: Negotiated = field(default_factory=lambda: Negotiated({}, None, None))
    _http: httpx.AsyncClient | None = None
    _session: str | None = None
    _stream: asyncio.Task[None] | None = None
    _notes: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=NOTIFICATION_BUFFER))
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _listening: asyncio.Event = field(default_factory=asyncio.Event)  # the GET stream is open (or refused)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # ---- the MGP object this client declares ---------------------------------------------------

    @property
    def offer(self) -> dict[str, Any] | None:
        if self.version is None:
            return None
        names = self.extensions
        if names is None:
            names = SEED_EXTENSIONS if self.version == "0.3" else DRAFT_EXTENSIONS
        return {"version": f"{self.version}.0", "extensions": list(names)}

    @property
    def draft(self) -> bool:
        return self.version is not None and self.version != "0.3"

    # ---- open and close ------------------------------------------------------------------------

    async def __aenter__(self) -> MgpTestClient:
        headers = {"authorization": f"Bearer {self.token}"} if self.token else {}
        self._http = httpx.AsyncClient(headers=headers, timeout=self.timeout_s)
        try:
            await (self._initialize() if self.era == "legacy" else self._discover())
        except BaseException:
            await self._http.aclose()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._stream is not None:
            self._stream.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await self._stream
        if self._http is not None:
            if self._session is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await self._http.delete(self.url, headers=self._headers("DELETE"))
            await self._http.aclose()

    async def _initialize(self) -> None:
        capabilities: dict[str, Any] = {}
        if self.offer is not None:
            if self.experimental:
                capabilities["experimental"] = {"mgp": self.offer}
            else:
                capabilities["mgp"] = self.offer
        params = {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": capabilities,
            "clientInfo": {"name": self.name, "version": "1"},
        }
        result = await self.request("initialize", params)
        caps = result.get("capabilities") or {}
        if isinstance(caps.get("mgp"), dict):
            self.negotiated = Negotiated(caps, caps["mgp"], "mgp")
        elif isinstance((caps.get("experimental") or {}).get("mgp"), dict):
            self.negotiated = Negotiated(caps, caps["experimental"]["mgp"], "experimental")
        else:
            self.negotiated = Negotiated(caps, None, None)
        await self.notify("notifications/initialized")
        self._stream = asyncio.create_task(self._listen())
        # A server sends what it has on the GET stream only once it is open (a fresh GET starts
        # from "now"): wait for it, so no server-initiated message of the session is missed.
        async with asyncio.timeout(self.timeout_s):
            await self._listening.wait()

    async def _discover(self) -> None:
        result = await self.request("server/discover", {})
        caps = result.get("capabilities") or {}
        found = (caps.get("extensions") or {}).get(EXTENSION_ID)
        self.negotiated = Negotiated(caps, found if isinstance(found, dict) else None, "discover" if found else None)

    # ---- requests ------------------------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request; the whole JSON-RPC answer (``result`` or ``error``)."""
        rpc_id = next(self._ids)
        body = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": self._params(params)}
        answer = await self._post(body, method, (params or {}).get("name"))
        if answer is None:
            raise AssertionError(f"no answer to {method}")
        return answer

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request's result; a JSON-RPC error raises :class:`RpcFailure`."""
        answer = await self.call(method, params)
        if "error" in answer:
            raise RpcFailure(answer["error"])
        result = answer.get("result")
        return result if isinstance(result, dict) else {"result": result}

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            body["params"] = params
        await self._post(body, method, None)

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A ``tools/call`` result (a rejection envelope included); JSON-RPC errors raise."""
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}})

    async def kernel_tool(self, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
        """A kernel operation, ``name`` in the draft's spelling (``mgp.access.query``): 0.5+ calls the
        kernel tool and returns its ``structuredContent`` (or the JSON text); 0.3 calls the seed
        method ``mgp/access/query``. JSON-RPC errors raise; a rejection is returned as the result."""
        if not self.draft:
            return await self.request("mgp/" + name.removeprefix("mgp.").replace(".", "/"), arguments or {})
        result = await self.call_tool(name, arguments)
        if result.get("isError"):
            return result
        structured = result.get("structuredContent")
        return structured if isinstance(structured, dict) else dict(json.loads(text_of(result)))

    async def tools(self) -> list[dict[str, Any]]:
        """Every tool of ``tools/list``, all pages."""
        tools: list[dict[str, Any]] = []
        cursor: Any = None
        for _ in range(100):
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            tools.extend(page.get("tools") or [])
            cursor = page.get("nextCursor")
            if not cursor:
                break
        return tools

    # ---- notifications -------------------------------------------------------------------------

    async def notifications(
        self, method: str | None = None, *, count: int = 1, within_s: float = 2.0
    ) -> list[dict[str, Any]]:
        """The notifications received so far (of ``method``), waiting up to ``within_s`` for ``count``."""

        def matching() -> list[dict[str, Any]]:
            return [n for n in self._notes if method is None or n.get("method") == method]

        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(within_s):
                while len(matching()) < count:
                    self._arrived.clear()
                    await self._arrived.wait()
        return matching()

    # ---- wire ----------------------------------------------------------------------------------

    def _params(self, params: dict[str, Any] | None) -> dict[str, Any]:
        params = dict(params or {})
        if self.era == "modern":
            client_caps: dict[str, Any] = {}
            if self.offer is not None:
                client_caps["extensions"] = {EXTENSION_ID: self.offer}
            meta = {
                "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
                CLIENT_CAPS_META: client_caps,
                "io.modelcontextprotocol/clientInfo": {"name": self.name, "version": "1"},
            }
            params["_meta"] = {**(params.get("_meta") or {}), **meta}
        return params

    def _headers(self, method: str, name: Any = None) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
        if self.era == "modern":
            headers |= {"mcp-protocol-version": MODERN_VERSION, "mcp-method": method}
            if isinstance(name, str):
                headers["mcp-name"] = name
        else:
            headers["mcp-protocol-version"] = LEGACY_VERSION
            if self._session is not None:
                headers["mcp-session-id"] = self._session
        return headers

    async def _post(self, body: dict[str, Any], method: str, name: Any) -> dict[str, Any] | None:
        assert self._http is not None, "use the client as an async context manager"
        async with self._http.stream("POST", self.url, json=body, headers=self._headers(method, name)) as response:
            if method == "initialize" and "mcp-session-id" in response.headers:
                self._session = response.headers["mcp-session-id"]
            if response.status_code == 202:
                return None
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                async for message in _sse_messages(response):
                    if message.get("id") == body.get("id") and ("result" in message or "error" in message):
                        return message
                    self._keep(message)
                raise AssertionError(f"the stream of {method} ended without its answer")
            await response.aread()
            if response.status_code >= 400 and not response.content:
                raise AssertionError(f"{method}: HTTP {response.status_code}")
            answer = json.loads(response.content)
            return answer if isinstance(answer, dict) else None

    async def _listen(self) -> None:
        """The GET stream of a legacy session (server-initiated notifications)."""
        assert self._http is not None
        headers = self._headers("GET") | {"accept": "text/event-stream"}
        try:
            async with self._http.stream("GET", self.url, headers=headers, timeout=None) as response:
                self._listening.set()
                if response.status_code != 200:
                    return
                async for message in _sse_messages(response):
                    self._keep(message)
        finally:
            self._listening.set()  # refused or failed: nobody waits for it

    def _keep(self, message: dict[str, Any]) -> None:
        self._notes.append(message)
        self._arrived.set()


async def _sse_messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON messages of an SSE body (``data:`` lines joined per event)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            with contextlib.suppress(ValueError):
                message = json.loads("\n".join(data))
                if isinstance(message, dict):
                    yield message
            data = []
