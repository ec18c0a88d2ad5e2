"""The standalone GET stream of a Streamable HTTP backend (MCP 2025-06-18 §Transports, "Listening for
Messages from the Server"): server messages unrelated to any request (list_changed, logs, requests).

Invariants: one loop per carrier, ended by the carrier's close (its task is cancelled) or for good when
the backend answers 405 (it offers no such stream, which is allowed) or 404 on a session (the session
ended: the carrier dies). Otherwise it reconnects with an exponential backoff (0.5 s to 30 s), resuming
with ``Last-Event-ID``; an event that is not a JSON object is dropped, never relayed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.sse import SSEParser
from gateway.upstreams.httpclient import HttpError, Response

log = logging.getLogger(__name__)

_BACKOFF_MAX_S = 30.0


async def listen(
    name: str,
    request: Callable[[dict[str, str]], Awaitable[Response]],
    headers: Callable[[], dict[str, str]],
    inbound: Callable[[dict[str, Any], Any], None],
    max_bytes: int,
    closed: asyncio.Event,
    session_ended: Callable[[], bool],
) -> None:
    """``request`` sends one GET with the given headers; ``session_ended`` is told of a 404 and says
    whether it ended the carrier (a backend with a session) or was nothing."""
    backoff = 0.5
    last_id: str | None = None
    while not closed.is_set():
        sent = {**headers(), "accept": "text/event-stream"}
        if last_id:
            sent["last-event-id"] = last_id
        try:
            response = await request(sent)
            try:
                if response.status == 405:
                    return  # the backend offers no standalone stream; that is allowed
                if response.status == 404 and session_ended():
                    return
                if response.status != 200:
                    log.info("backend %s: GET stream answered %s", name, response.status)
                else:
                    backoff = 0.5
                    parser = SSEParser(max_bytes)
                    async for chunk in response.iter_raw():
                        for event in parser.feed(chunk):
                            if event.id is not None:
                                last_id = event.id
                            if event.data and event.event == "message":
                                _relay(event.data, inbound)
            finally:
                response.release()
        except HttpError as exc:
            log.debug("backend %s: GET stream dropped: %s", name, exc)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, _BACKOFF_MAX_S)


def _relay(data: str, inbound: Callable[[dict[str, Any], Any], None]) -> None:
    try:
        msg = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if isinstance(msg, dict):
        inbound(msg, None)
