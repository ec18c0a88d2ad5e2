"""The answers of the Streamable HTTP door (streamable_http.py) that are SSE streams: a POST whose
call switched to SSE, and the GET stream (fresh or resumed with ``Last-Event-ID``).

Invariants:
- Every event carries ``<stream>-<seq>`` as its id, so any stream can be resumed; a fresh stream of a
  client new enough is primed with an empty event (``PRIMES_SSE_FROM``).
- Nothing is buffered: each batch the channel hands over is written at once; an idle stream gets a
  keep-alive every ``limits.sse_keepalive_s``.
- A client that stops reading with more than ``limits.session_queue`` messages behind is dropped (and
  counted); a client that leaves ends the stream; either way the channel is released
  (``writing``/``on_overflow`` reset, and ``attached`` cleared by ``respond`` or the GET handler).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from adapters.mcp import PRIMES_SSE_FROM
from gateway import jsonrpc, sse
from gateway.channels import Channel, ChannelOverflow, absorb_overflow, guarded_write
from gateway.transports.http_common import Receive, Scope, Send, drop_hook, watch_disconnect

if TYPE_CHECKING:
    from gateway.config import Limits
    from gateway.metrics import Metrics
    from gateway.sessions import ClientSession

log = logging.getLogger("gateway.transports.streamable_http")  # the door's log, as before the split

TRANSPORT = "streamable_http"  # the door's sessions and metrics label (re-exported by streamable_http.py)
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
]


@dataclass(slots=True)
class EventStreamWriter:
    """Writes a door's SSE answers; one per door."""

    limits: Limits
    metrics: Metrics

    async def respond(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        session: ClientSession,
        channel: Channel,
        extra: list[tuple[str, str]],
        gone: asyncio.Future[None] | None = None,
    ) -> None:
        own_watch = gone is None
        watch = gone if gone is not None else watch_disconnect(scope, receive)
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _sse_headers(extra)})
            if session.codec.resumable_streams and (session.protocol_version or "") >= PRIMES_SSE_FROM:
                prime = sse.encode(b"", id=f"{channel.id}-0")
                await send({"type": "http.response.body", "body": prime, "more_body": True})
            await self.stream(scope, send, session, channel, 0, None, watch)
        except OSError:
            pass
        finally:
            channel.attached = False
            if own_watch:
                watch.cancel()

    async def stream(
        self,
        scope: Scope,
        send: Send,
        session: ClientSession,
        channel: Channel,
        after: int,
        batch: list[tuple[int, dict[str, Any]]] | None,
        gone: asyncio.Future[None],
    ) -> None:
        """Write events after ``after`` until the channel ends, the client leaves or stops reading."""
        channel.on_overflow = drop_hook(scope)
        render = session.render
        try:
            while True:
                if batch is None:
                    batch = await _next_batch(channel, after, gone, keepalive=self.limits.sse_keepalive_s)
                    if batch is None:
                        return
                if not batch:
                    if channel.closed:
                        break
                    body = sse.KEEPALIVE
                else:
                    body = b"".join(
                        sse.encode(jsonrpc.dumps(rendered), id=f"{channel.id}-{seq}")
                        for seq, m in batch
                        if (rendered := render(m)) is not None
                    )
                    after = batch[-1][0]
                await guarded_write(channel, send({"type": "http.response.body", "body": body, "more_body": True}))
                batch = None
        except (ChannelOverflow, asyncio.CancelledError) as exc:
            if not absorb_overflow(channel, exc):
                raise
            self.metrics.dropped_clients.labels(TRANSPORT).inc()
            log.warning(
                "stream %s dropped: the client stopped reading with more than %d messages behind",
                channel.id,
                self.limits.session_queue,
            )
            return
        except OSError:
            return
        finally:
            channel.writing = False
            channel.on_overflow = None
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def start_get(self, send: Send, session: ClientSession, channel: Channel, after: int, resumed: bool) -> None:
        """The GET stream's head and its first event (a priming id, or a keep-alive)."""
        await send({"type": "http.response.start", "status": 200, "headers": _sse_headers([])})
        if not resumed and (session.protocol_version or "") >= PRIMES_SSE_FROM:
            prime = sse.encode(b"", id=f"{channel.id}-{after}")
            await send({"type": "http.response.body", "body": prime, "more_body": True})
        else:
            await send({"type": "http.response.body", "body": sse.KEEPALIVE, "more_body": True})


def _sse_headers(extra: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return _SSE_HEADERS + [(k.encode(), v.encode()) for k, v in extra]


async def _next_batch(
    channel: Channel, after: int, gone: asyncio.Future[None], keepalive: float | None = None
) -> list[tuple[int, dict[str, Any]]] | None:
    """The next messages, [] on keep-alive timeout or channel end, None if the client left.

    No task or ``asyncio.wait`` per call: the stream waits on one future (gateway/channels.py)."""
    return await channel.next_batch(after, keepalive, gone)
