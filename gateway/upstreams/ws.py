"""A backend spoken to over WebSocket (subprotocol ``mcp``, one JSON-RPC message per text frame).

Proxy and TLS (issue 17) are decided by gateway/upstreams/egress.py as for HTTP backends and handed
to the websockets library: ``proxy`` is the chosen proxy's URL or None (never the library's own
reading of the environment, whose NO_PROXY rules differ), ``ssl`` the backend's context for wss.
The library tunnels both ws and wss through an HTTP proxy with CONNECT.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidProxyStatus
from websockets.typing import Subprotocol

from gateway import jsonrpc
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.upstreams.egress import DIRECT_EGRESS, BackendEgress
from gateway.upstreams.tunnel import tls_failure

log = logging.getLogger(__name__)


class WsCarrier(Carrier):
    def __init__(
        self,
        name: str,
        url: str,
        headers: dict[str, str],
        max_message_bytes: int,
        egress: BackendEgress | None = None,
    ) -> None:
        self._name = name
        self._url = url
        self._egress = egress or DIRECT_EGRESS
        self._headers = headers
        self._max = max_message_bytes
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._reason = "closed"

    def describe(self) -> str:
        return f"ws:{self._url}"

    async def open(self, inbound: Inbound) -> None:
        route = self._egress.route(self._url)
        tls: dict[str, Any] = {}
        if route.ssl is not None:
            tls["ssl"] = route.ssl
            if route.server_hostname:
                tls["server_hostname"] = route.server_hostname
        try:
            self._ws = await connect(
                self._url,
                subprotocols=[Subprotocol("mcp")],
                additional_headers=self._headers,
                max_size=self._max,
                open_timeout=15,
                proxy=route.proxy.url if route.proxy else None,
                **tls,
            )
        except ssl.SSLError as exc:
            raise ConnectionError(tls_failure(exc, self._url)) from None
        except InvalidProxyStatus as exc:
            assert route.proxy is not None
            status = exc.response.status_code
            raise ConnectionError(
                f"proxy {route.proxy.display} refused CONNECT to {self._url}: {status} {exc.response.reason_phrase}"
            ) from None
        except Exception as exc:
            # The library's own messages may quote the proxy URL it was given, credentials included.
            if route.proxy is not None and route.proxy.url in str(exc):
                raise ConnectionError(str(exc).replace(route.proxy.url, route.proxy.display)) from None
            raise
        self._task = asyncio.create_task(self._read(inbound), name=f"ws-{self._name}")

    async def _read(self, inbound: Inbound) -> None:
        assert self._ws
        try:
            async for frame in self._ws:
                try:
                    msg = orjson.loads(frame)
                except orjson.JSONDecodeError:
                    log.warning("backend %s sent a non-JSON frame", self._name)
                    continue
                if isinstance(msg, dict):
                    inbound(msg, None)
                elif isinstance(msg, list):
                    for item in msg:
                        if isinstance(item, dict):
                            inbound(item, None)
            self._reason = "WebSocket closed by the backend"
        except ConnectionClosed as exc:
            self._reason = f"WebSocket closed: {exc}"
        finally:
            self._closed.set()

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self._ws is None or self._closed.is_set():
            raise CarrierClosed(self._reason)
        try:
            await self._ws.send(jsonrpc.dumps(message).decode())
        except ConnectionClosed as exc:
            raise CarrierClosed(str(exc)) from None

    async def wait_closed(self) -> str:
        await self._closed.wait()
        return self._reason

    async def close(self) -> None:
        if self._ws is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(2.0):
                    await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._closed.set()
