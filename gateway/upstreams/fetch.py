"""One bounded HTTP exchange with a service the gateway itself talks to (JWKS, OAuth endpoints).

Not for MCP calls (those go through :class:`gateway.upstreams.http.HttpCarrier`'s kept-alive pool):
this is for the few control-plane requests the gateway makes on its own behalf — fetching a JWKS,
introspecting a token (RFC 7662), exchanging one (RFC 8693) or getting its own (client credentials).

Invariants:

- Every exchange is bounded in time (``timeout_s`` covers connect, headers and body) and in size
  (``max_bytes``); a larger body is an :class:`~gateway.upstreams.httpclient.HttpError`, never a
  partial document.
- The connection is closed when the exchange ends, whatever happened.
- Failures are :class:`~gateway.upstreams.httpclient.HttpError` (``ConnectError`` when nothing was
  reached); a caller turns them into its own clear error.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import aclosing
from dataclasses import dataclass

from gateway.upstreams.httpclient import ConnectionPool, HttpError, target_of

DEFAULT_MAX_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Fetched:
    status: int
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: bytes


async def fetch(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    body: bytes = b"",
    timeout_s: float = 10.0,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Fetched:
    """One request to ``url`` and its whole answer. Redirects are not followed."""
    import asyncio

    pool = ConnectionPool(url, max_connections=1, connect_timeout_s=timeout_s)
    try:
        async with asyncio.timeout(timeout_s):
            response = await pool.request(method, target_of(url), dict(headers or {}), body)
            chunks: list[bytes] = []
            size = 0
            async with aclosing(response.iter_raw()) as stream:
                async for chunk in stream:
                    size += len(chunk)
                    if size > max_bytes:
                        raise HttpError(f"answer from {pool.authority} larger than {max_bytes} bytes")
                    chunks.append(chunk)
            return Fetched(response.status, dict(response.headers), b"".join(chunks))
    except TimeoutError:
        raise HttpError(f"no answer from {pool.authority} within {timeout_s:g} s") from None
    finally:
        await pool.aclose()
