"""The entrance's one await for identity: what a request's token needs from the network, before its door.

Doors ask who is calling synchronously (``FrontDesk.authenticate``), on every request, so that a
static token or a cached JWT costs no await. The few tokens that need the network first (an unknown
JWKS ``kid``: a rate-limited refresh; an opaque token: RFC 7662 introspection) are waited for here,
once, before the request reaches its door; the door then finds the answer in a cache. Invariants:

- The wait is bounded (:data:`WAIT_S`, above the exchanges' own time limits).
- An authorization server that cannot answer an introspection is a 503 with ``Retry-After`` on
  HTTP (a WebSocket handshake is closed with 1013, "try again later"), never a 401: the client's
  token may be fine, and a 401 sends it to re-authenticate in a loop. It carries no token text.
- Anything else that goes wrong while waiting (a JWKS that cannot be fetched) lets the request go on
  to its door, which decides with the keys in hand (and answers 401 if none fits).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway import errors
from gateway.transports.http_common import send_rpc_error
from policies.introspection import IntrospectionUnavailable

log = logging.getLogger(__name__)

WAIT_S = 65.0
RETRY_AFTER_S = 5

Handler = Callable[[Any, Any, Any], Awaitable[None]]


async def after_auth_wait(waiting: Awaitable[object], handler: Handler, scope: Any, receive: Any, send: Any) -> None:
    """Await ``waiting``, then serve the request with ``handler``; 503 when the server cannot say."""
    try:
        async with asyncio.timeout(WAIT_S):
            await waiting
    except (IntrospectionUnavailable, TimeoutError) as exc:
        reason = exc.reason if isinstance(exc, IntrospectionUnavailable) else "the authorization server did not answer"
        await unavailable(scope, send, reason)
        return
    except Exception as exc:  # a JWKS refresh that failed: the door decides with the keys in hand
        log.warning("waiting for the token's keys failed: %s", type(exc).__name__)
    await handler(scope, receive, send)


async def unavailable(scope: Any, send: Any, reason: str) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1013, "reason": reason[:120]})
        return
    await send_rpc_error(
        send,
        503,
        errors.AUTH_UNAVAILABLE,
        f"Service Unavailable: {reason}",
        extra=[("retry-after", str(RETRY_AFTER_S))],
    )
