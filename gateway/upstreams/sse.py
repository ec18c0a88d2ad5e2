"""A backend spoken to over the legacy HTTP+SSE transport (2024-11-05): GET /sse, POST to its endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urljoin

from gateway import jsonrpc, sse
from gateway.sse import SSEParser
from gateway.upstreams.base import Carrier, CarrierClosed, Inbound
from gateway.upstreams.egress import BackendEgress
from gateway.upstreams.httpclient import MAX_HEAD_BYTES, ConnectionPool, HttpError, target_of

log = logging.getLogger(__name__)


class SseCarrier(Carrier):
    def __init__(
        self,
        name: str,
        url: str,
        headers: dict[str, str],
        max_message_bytes: int,
        connect_timeout_s: float,
        egress: BackendEgress | None = None,
        max_head_bytes: int = MAX_HEAD_BYTES,
    ) -> None:
        self._name = name
        self._url = url
        self._egress = egress  # proxy and TLS (issue 17); None: directly, the system's CAs
        self._headers = headers
        self._max = max_message_bytes
        self._max_head = max_head_bytes
        self._connect_timeout = connect_timeout_s
        self._pool: ConnectionPool | None = None
        self._endpoint: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = asyncio.Event()
        self._reason = "closed"

    def describe(self) -> str:
        return f"sse:{self._url}"

    async def open(self, inbound: Inbound) -> None:
        route = self._egress.route(self._url) if self._egress else None
        self._pool = ConnectionPool(self._url, route=route, max_head_bytes=self._max_head)
        endpoint_ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._read(inbound, endpoint_ready), name=f"sse-{self._name}")
        try:
            async with asyncio.timeout(self._connect_timeout):
                self._endpoint = await asyncio.shield(endpoint_ready)
        except BaseException:
            await self.close()
            raise

    async def _read(self, inbound: Inbound, endpoint_ready: asyncio.Future[str]) -> None:
        assert self._pool
        try:
            response = await self._pool.request(
                "GET", target_of(self._url), {**self._headers, "accept": "text/event-stream"}
            )
            try:
                if response.status != 200:
                    raise ConnectionError(f"GET {self._url} answered {response.status}")
                parser = SSEParser(self._max)
                async for chunk in response.iter_raw():
                    for event in parser.feed(chunk):
                        if event.event == "endpoint":
                            endpoint = event.data.strip()
                            if not endpoint:
                                raise ConnectionError("the endpoint event names no URL")
                            if not endpoint_ready.done():
                                endpoint_ready.set_result(urljoin(self._url, endpoint))
                            continue
                        msg = sse.message_of(event, f"backend {self._name}")
                        if msg is not None:
                            inbound(msg, None)
            finally:
                response.release()
            self._reason = "SSE stream ended"
        except (HttpError, ConnectionError, ValueError) as exc:
            self._reason = f"SSE stream failed: {exc}"
            if not endpoint_ready.done():
                endpoint_ready.set_exception(ConnectionError(self._reason))
        finally:
            if not endpoint_ready.done():
                endpoint_ready.set_exception(ConnectionError(self._reason))
            self._closed.set()

    async def send(self, message: dict[str, Any], headers: Mapping[str, str] | None = None) -> None:
        if self._pool is None or self._endpoint is None or self._closed.is_set():
            raise CarrierClosed(self._reason)
        try:
            response = await self._pool.request(
                "POST",
                target_of(self._endpoint),
                {**self._headers, "content-type": "application/json"},
                jsonrpc.dumps(message),
            )
            await response.read()
        except HttpError as exc:
            raise CarrierClosed(f"POST failed: {exc}") from None
        if response.status >= 400:
            raise CarrierClosed(f"POST {self._endpoint} answered {response.status}")

    async def wait_closed(self) -> str:
        await self._closed.wait()
        return self._reason

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        if self._pool is not None:
            await self._pool.aclose()
        self._closed.set()
