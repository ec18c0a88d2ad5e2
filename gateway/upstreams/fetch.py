"""One bounded HTTP exchange with a service the gateway itself talks to (JWKS, OAuth endpoints).

Not for MCP calls (those go through :class:`gateway.upstreams.http.HttpCarrier`'s kept-alive pool,
which never follows a redirect): this is for the few control-plane requests the gateway makes on its
own behalf — fetching a JWKS, introspecting a token (RFC 7662), exchanging one (RFC 8693) or getting
its own (client credentials).

Invariants:

- Every exchange is bounded in time (``timeout_s`` covers every hop's connect, headers and body) and
  in size (``max_bytes``); a larger body is an :class:`~gateway.upstreams.httpclient.HttpError`,
  never a partial document. So is its response head (``max_head_bytes``: the gateway gives its
  callers this function with ``limits.max_response_head_bytes`` bound, gateway/core.py).
- Redirects (RFC 9110 §15.4: 301, 302, 303, 307, 308) are followed only within the origin of the
  first URL (same scheme, host and port, RFC 6454 §4), at most ``max_redirects`` times and never to
  a URL already visited; anything else is an HttpError naming both origins. Same origin is what keeps
  a client secret or a bearer token in the request where it was meant to go (RFC 6749 §10.6 is about
  the same risk the other way round); it also rules out https → http. 303 turns the request into a
  GET without a body; the others repeat method, headers and body (for POST that is RFC 9110's
  choice for 307/308, and the safe one for 301/302 too: an OAuth endpoint's form is not dropped).
- Proxy and TLS come from the control-plane egress (``egress:`` in the config and the environment,
  gateway/upstreams/egress.py), decided at start.
- The connection is closed when each exchange ends, whatever happened.
- Failures are :class:`~gateway.upstreams.httpclient.HttpError` (``ConnectError`` when nothing was
  reached); a caller turns them into its own clear error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from gateway.upstreams.egress import BackendEgress, Route, control_plane
from gateway.upstreams.httpclient import MAX_HEAD_BYTES, ConnectionPool, HttpError, target_of

DEFAULT_MAX_BYTES = 1024 * 1024
DEFAULT_MAX_REDIRECTS = 5
REDIRECTS = frozenset((301, 302, 303, 307, 308))


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
    max_redirects: int = DEFAULT_MAX_REDIRECTS,
    egress: BackendEgress | None = None,
    max_head_bytes: int = MAX_HEAD_BYTES,
) -> Fetched:
    """One request to ``url`` and its whole answer, after same-origin redirects (module docstring).
    ``egress``: the proxy and TLS settings; None: the control plane's (set at start). ``max_head_bytes``:
    a response head still unfinished past that fails the exchange (ADR 0023)."""
    route_of = (egress or control_plane()).route
    origin = _origin(url)
    first = url
    seen = {url}
    header_map = dict(headers or {})
    try:
        async with asyncio.timeout(timeout_s):
            for _hop in range(max_redirects + 1):
                answer = await _exchange(method, url, header_map, body, timeout_s, max_bytes, max_head_bytes, route_of)
                location = answer.headers.get("location")
                if answer.status not in REDIRECTS or not location:
                    return answer
                target = urljoin(url, location.strip()).partition("#")[0]
                _check_redirect(origin, url, target)
                if target in seen:
                    raise HttpError(f"redirect loop at {_shown(target)}")
                seen.add(target)
                if answer.status == 303 and method != "HEAD":
                    method, body = "GET", b""
                    header_map = {k: v for k, v in header_map.items() if k.lower() != "content-type"}
                url = target
            raise HttpError(f"more than {max_redirects} redirects from {_shown(first)}")
    except TimeoutError:
        raise HttpError(f"no answer from {origin_text(origin)} within {timeout_s:g} s") from None


async def _exchange(
    method: str,
    url: str,
    headers: dict[str, str],
    body: bytes,
    timeout_s: float,
    max_bytes: int,
    max_head_bytes: int,
    route_of: Callable[[str], Route],
) -> Fetched:
    pool = ConnectionPool(
        url, max_connections=1, connect_timeout_s=timeout_s, route=route_of(url), max_head_bytes=max_head_bytes
    )
    try:
        response = await pool.request(method, target_of(url), headers, body)
        chunks: list[bytes] = []
        size = 0
        async with aclosing(response.iter_raw()) as stream:
            async for chunk in stream:
                size += len(chunk)
                if size > max_bytes:
                    raise HttpError(f"answer from {pool.authority} larger than {max_bytes} bytes")
                chunks.append(chunk)
        return Fetched(response.status, dict(response.headers), b"".join(chunks))
    finally:
        await pool.aclose()


_Origin = tuple[str, str, int]


def _origin(url: str) -> _Origin:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        raise HttpError(f"invalid port in {_shown(url)}") from None
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def origin_text(origin: _Origin) -> str:
    scheme, host, port = origin
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"


def _shown(url: str) -> str:
    """A URL for an error message: without userinfo or query (either may carry a secret)."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


def _check_redirect(origin: _Origin, url: str, target: str) -> None:
    parts = urlsplit(target)
    if parts.scheme.lower() not in ("http", "https"):
        raise HttpError(f"{_shown(url)} redirected to a non-HTTP URL ({parts.scheme}:); not followed")
    if parts.username is not None or parts.password is not None:
        raise HttpError(f"{_shown(url)} redirected to a URL with credentials in it; not followed")
    new = _origin(target)
    if new == origin:
        return
    if origin[0] == "https" and new[0] == "http":
        raise HttpError(f"{_shown(url)} redirected from https to http ({_shown(target)}); not followed")
    raise HttpError(
        f"{_shown(url)} redirected to another origin ({origin_text(new)}, not {origin_text(origin)}); control-plane "
        "requests follow same-origin redirects only: configure the final URL"
    )
