"""A POST's answer that is an SSE stream, on the awaited path of :class:`HttpCarrier
<gateway.upstreams.http.HttpCarrier>` (``initialize``, a pool with no idle connection, a caller's own
session); the hot path does the same in the HTTP parser's callbacks (gateway/upstreams/quick.py).

Invariants: the stream's events are relayed as they arrive (progress, logs and server requests
related to the call reach the client while it runs); the response to the POST's request is the
call's answer, after which the rest of the stream is still read and relayed in the background for at
most ``DRAIN_S`` so the connection can go back to the pool. A stream that ends before the response
is resumed with ``Last-Event-ID`` (SSE polling, MCP 2025-11-25 §Resumability), at most
``RESUME_ATTEMPTS`` times, waiting the server's ``retry`` (at most 5 s) between; then the call fails
(-32090). These functions use the carrier's own parts, as :class:`QuickExchange
<gateway.upstreams.quick.QuickExchange>` does.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from gateway import jsonrpc, sse
from gateway.sse import SSEParser
from gateway.upstreams.httpclient import HttpError, Response
from gateway.upstreams.quick import DRAIN_S

if TYPE_CHECKING:
    from gateway.upstreams.http import HttpCarrier

RESUME_ATTEMPTS = 5


async def relay(carrier: HttpCarrier, message: dict[str, Any], rpc_id: Any, response: Response) -> None:
    """Relay a POST's SSE answer until its response (the rest is drained in the background), or
    resume the stream when it ends before."""
    chunks = response.iter_raw()
    parser = SSEParser(carrier._max)
    draining = False
    try:
        try:
            answered, last_id, retry_ms = await read(carrier, chunks, parser, rpc_id, True, request=message)
        except ValueError as exc:  # the parser's refusal: an event or line over the limit (as quick.py says it)
            carrier._fail(rpc_id, jsonrpc.INTERNAL_ERROR, f"backend {carrier._name} sent a malformed stream: {exc}")
            return  # released unfinished below: the connection is closed
        if answered:
            # The caller has its answer; the end of the stream is read in the background so
            # that the connection goes back to the pool (iter_raw releases it).
            draining = True
            carrier._spawn(_drain(carrier, chunks, parser, rpc_id))
            return
    finally:
        if not draining:
            response.release()
    await resume(carrier, rpc_id, last_id, retry_ms)


async def _drain(carrier: HttpCarrier, chunks: Any, parser: SSEParser, rpc_id: Any) -> None:
    try:
        async with asyncio.timeout(DRAIN_S):
            await read(carrier, chunks, parser, rpc_id, until_answered=False)
    except (TimeoutError, HttpError, ValueError):
        pass
    finally:
        await chunks.aclose()


async def read(
    carrier: HttpCarrier,
    chunks: Any,
    parser: SSEParser,
    rpc_id: Any,
    until_answered: bool,
    request: dict[str, Any] | None = None,
) -> tuple[bool, str | None, int | None]:
    """Relay the events of one response stream; say whether the response itself came. The answer
    to an ``initialize`` (``request``) sets the version later requests declare, as a JSON one does."""
    inbound = carrier._inbound
    assert inbound
    last_id: str | None = None
    retry_ms: int | None = None
    answered = False
    async for chunk in chunks:
        for event in parser.feed(chunk):
            if event.id is not None:
                last_id = event.id
            if event.retry_ms is not None:
                retry_ms = event.retry_ms
            msg = sse.message_of(event, f"backend {carrier._name}")
            if msg is None:
                continue
            if jsonrpc.is_response(msg) and msg.get("id") == rpc_id:
                answered = True
                if request is not None:
                    carrier._note_init(request, msg)
            inbound(msg, rpc_id)
        if answered and until_answered:
            break
    return answered, last_id, retry_ms


async def resume(carrier: HttpCarrier, rpc_id: Any, last_id: str | None, retry_ms: int | None) -> None:
    """The stream ended before the response: resume it with Last-Event-ID (SSE polling, 2025-11-25)."""
    pool = carrier._pool
    assert pool
    for _ in range(RESUME_ATTEMPTS):
        if last_id is None:
            break
        await asyncio.sleep(min((retry_ms or 0) / 1000.0, 5.0))
        headers = {**carrier._headers(), "last-event-id": last_id, "accept": "text/event-stream"}
        try:
            response = await pool.request("GET", carrier._target, headers)
        except HttpError:
            break
        chunks = response.iter_raw()
        try:
            if response.status != 200:
                break
            # Until the answer, not the stream's end: a server may keep a resumed stream open
            # after it (the official SDK's does). Released unfinished, the connection is closed.
            answered, new_last, new_retry = await read(carrier, chunks, SSEParser(carrier._max), rpc_id, True)
        except ValueError:  # an event or line over the limit: as a stream that ended (the call fails below)
            break
        finally:
            await chunks.aclose()
            response.release()
        if answered:
            return
        last_id = new_last or last_id
        retry_ms = new_retry if new_retry is not None else retry_ms
    carrier._fail(rpc_id, jsonrpc.BACKEND_UNAVAILABLE, f"backend {carrier._name} closed the stream without answering")
