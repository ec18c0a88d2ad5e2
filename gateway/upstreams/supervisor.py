"""The supervisor of one :class:`~gateway.upstreams.connection.BackendConnection`: connect, handshake,
wait for the loss, reconnect (or respawn) with exponential backoff.

Invariants:
- One supervisor task per connection (``BackendConnection.start``), cancelled by ``close``; a carrier
  it made is closed on every way out (failed attempt, loss, cancellation).
- The backoff doubles up to ``restart.max_backoff_s`` and starts over after a connection that stayed
  up ``_STABLE_AFTER_S``; switching from Streamable HTTP to HTTP+SSE retries at once, without waiting.
- Restarts are counted against the connection's ``RestartBudget`` (MGP §11.6); a spent budget ends
  the loop for good (``gave_up``).
- ``_settled`` is set once the first attempt ended either way; ready is set in the same step as the
  handshake's end (``_up``), and a loss fails every call in flight before the handler hears of it.

Cold code: it runs once per connect attempt, never per call. It reads and writes the connection's
state directly, as a part of it kept in its own module.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from gateway.upstreams.base import Carrier

if TYPE_CHECKING:
    from gateway.upstreams.connection import BackendConnection

log = logging.getLogger("gateway.upstreams.connection")  # the connection's log, as before the split

_STABLE_AFTER_S = 10.0


async def supervise(conn: BackendConnection) -> None:
    """Connect, wait for the loss, reconnect with backoff, until closed or the restart budget is spent."""
    backoff = conn.config.restart.initial_backoff_s
    while not conn._closing:
        use_sse = conn._handshake.use_sse and conn._sse_fallback is not None
        carrier = conn._sse_fallback() if use_sse and conn._sse_fallback else conn._factory()
        conn._carrier = carrier
        conn._start_request = getattr(carrier, "start_request", None)
        conn.state = "connecting"
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for loses a cancellation that lands just
            # as the handshake completes, and close() would then wait forever.
            async with asyncio.timeout(conn.config.connect_timeout_s):
                await _connect_watched(conn, carrier)
        except asyncio.CancelledError:
            await carrier.close()
            raise
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            switching = conn._handshake.use_sse and isinstance(exc, ConnectionError) and "HTTP+SSE" in str(exc)
            retry = switching or conn._restarts.allow()
            await _went_down(conn, carrier, f"connect failed: {reason}{conn._restarts.note()}")
            if not switching:
                conn._settled.set()
            if switching:
                continue  # the next attempt uses the other transport; no reason to wait
            if not retry:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, conn.config.restart.max_backoff_s)
            continue
        reason = await carrier.wait_closed()
        if conn._closing:
            return
        stayed = time.monotonic() - (conn.connected_at or 0)
        retry = conn._restarts.allow()  # decided first, so that listeners of the loss know
        await _went_down(conn, carrier, reason + conn._restarts.note())
        if not retry:
            return
        conn.restarts += 1
        if stayed >= _STABLE_AFTER_S:
            backoff = conn.config.restart.initial_backoff_s
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, conn.config.restart.max_backoff_s)


async def _went_down(conn: BackendConnection, carrier: Carrier, reason: str) -> None:
    conn._listen.stop()
    was_ready = conn._ready.is_set()
    conn._ready.clear()
    conn.state = "down"
    conn.last_error = reason
    conn._fail_all(f"backend {conn.name} is unavailable: {reason}")
    await carrier.close()
    log.warning("backend %s down: %s", conn.name, reason)
    if was_ready:
        conn._handler.on_disconnected(conn, reason)


async def _connect_watched(conn: BackendConnection, carrier: Carrier) -> None:
    """The handshake, cut short when the carrier dies meanwhile (a stdio server that exits during
    ``initialize``): the attempt fails at once, not when ``connect_timeout_s`` runs out."""
    handshake = asyncio.create_task(_connect(conn, carrier), name=f"handshake-{conn.name}")
    closed = asyncio.create_task(carrier.wait_closed(), name=f"handshake-watch-{conn.name}")
    try:
        await asyncio.wait((handshake, closed), return_when=asyncio.FIRST_COMPLETED)
        if handshake.done():
            handshake.result()  # raises what the handshake raised
            return
        step = conn._handshake_step or "the connect"
        conn._handshake.went_away(step)
        raise ConnectionError(f"the backend went away during {step}: {closed.result()}")
    finally:
        for task in (handshake, closed):
            task.cancel()
        await asyncio.gather(handshake, closed, return_exceptions=True)


async def _connect(conn: BackendConnection, carrier: Carrier) -> None:
    if conn._prepare is not None:  # the gateway's own credential first (gateway/upstreams/credentials.py)
        await conn._prepare()
    await carrier.open(conn._inbound)
    agreed = await conn._handshake.run(conn, carrier)
    conn.era, conn.init_result = agreed.era, agreed.init_result
    if agreed.era == "modern":
        conn._listen.start()
    _up(conn, carrier)


def _up(conn: BackendConnection, carrier: Carrier) -> None:
    """Ready, in the same step as the handshake's end: a request the backend sends right after
    ``notifications/initialized`` must find the connection ready, or its answer is dropped."""
    conn.state = "ready"
    conn.last_error = None
    conn.connected_at = time.monotonic()
    conn._ready.set()
    conn._settled.set()
    log.info("backend %s ready (%s, protocol %s)", conn.name, carrier.describe(), conn.protocol_version)
    conn._handler.on_connected(conn)
