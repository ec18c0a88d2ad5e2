"""One Host/Origin rule for every door (DNS rebinding and cross-site requests), applied at the entrance.

Browsers let any web page send requests to a gateway on the user's loopback: a WebSocket has no
CORS preflight, a ``text/plain``-free POST has none either, and a page can make its own origin
``null`` (sandboxed iframes, ``data:`` URLs). So the rule runs once, in front of the router, for
every HTTP request and WebSocket handshake, whatever the path (security review, issue 10, hole 1):

- ``Host`` must be one we serve: by default the loopback names when bound to loopback (any port);
  anything when bound elsewhere (a proxy in front decides), unless ``security.allowed_hosts`` says.
- ``Origin``, when sent, must be allowed: by default ``http(s)://`` + a loopback name, any port.
  ``null`` (an opaque origin) is refused unless an operator lists the literal ``null``; ``*`` allows
  every real origin but never ``null``. An Origin naming the request's own Host (``http(s)://`` +
  the Host header) is same-origin and allowed too: the dashboard served at that address (gateway/ui/)
  posts to it. This opens nothing: the Host itself passed the rule above, and a page whose name
  was rebound to the gateway holds none of its credentials (bearer headers, never cookies).
- A request with two ``Host`` or two ``Origin`` headers is refused: front proxies disagree on which
  one counts, and the disagreement is the attack.

Clients that are not browsers send no Origin and are unaffected.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from gateway import jsonrpc
from gateway.config import Config, is_loopback
from gateway.transports.lean import UNIQUE_HEADERS_KEY

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
NULL_ORIGIN = "null"


_UNKNOWN: tuple[int, str] = (-1, "not decided yet")  # a sentinel, compared by identity
_MAX_VERDICTS = 1024


def _remember(
    verdicts: dict[bytes, tuple[int, str] | None], raw: bytes, verdict: tuple[int, str] | None
) -> tuple[int, str] | None:
    if len(verdicts) >= _MAX_VERDICTS:
        verdicts.clear()
    verdicts[raw] = verdict
    return verdict


class OriginGuard:
    """The rule, as a pure check of a scope's headers."""

    def __init__(self, config: Config) -> None:
        sec = config.security
        if sec.allowed_hosts is not None:
            self._hosts: tuple[str, ...] | None = tuple(h.lower() for h in sec.allowed_hosts)
        elif is_loopback(config.listen.host):
            self._hosts = tuple(f"{name}:*" for name in _LOOPBACK_NAMES) + _LOOPBACK_NAMES
        else:
            self._hosts = None  # bound to a public address: the Host is whatever the proxy in front says
        if sec.allowed_origins is not None:
            self._origins: tuple[str, ...] = tuple(o.lower().rstrip("/") for o in sec.allowed_origins)
        else:
            self._origins = tuple(f"{s}://{n}:*" for s in ("http", "https") for n in _LOOPBACK_NAMES) + tuple(
                f"{s}://{n}" for s in ("http", "https") for n in _LOOPBACK_NAMES
            )
        self._null_allowed = NULL_ORIGIN in self._origins
        self._real_origins = tuple(o for o in self._origins if o != NULL_ORIGIN)
        # Verdicts by raw header value: a client sends the same Host (and Origin) on every request,
        # and matching costs more than a lookup on the hot path. Bounded: cleared when full.
        self._host_verdicts: dict[bytes, tuple[int, str] | None] = {}
        self._origin_verdicts: dict[bytes, tuple[int, str] | None] = {}

    @staticmethod
    def _match(value: str, allowed: tuple[str, ...]) -> bool:
        for entry in allowed:
            if entry == "*" or entry == value:
                return True
            if entry.endswith(":*"):
                base = entry[:-2]
                port = value[len(base) + 1 :]
                if value.startswith(base + ":") and port.isascii() and port.isdigit():
                    return True
        return False

    def check(self, scope: Scope) -> tuple[int, str] | None:
        """None if fine, else (HTTP status, reason)."""
        unique: dict[bytes, bytes] | None = scope.get(UNIQUE_HEADERS_KEY)
        if unique is not None:  # no header repeats (transports/lean.py): two lookups, not a scan
            return self._verdict(unique.get(b"host"), unique.get(b"origin"))
        hosts: list[bytes] = []
        origins: list[bytes] = []
        for name, value in scope["headers"]:
            if name == b"host":
                hosts.append(value)
            elif name == b"origin":
                origins.append(value)
        if len(hosts) > 1 or len(origins) > 1:
            return 400, "More than one Host or Origin header"
        return self._verdict(hosts[0] if hosts else None, origins[0] if origins else None)

    def _verdict(self, host: bytes | None, origin: bytes | None) -> tuple[int, str] | None:
        """The rule for the request's one Host and one Origin (None: not sent)."""
        if self._hosts is not None:
            raw = host if host is not None else b""
            verdict = self._host_verdicts.get(raw, _UNKNOWN)
            if verdict is _UNKNOWN:
                verdict = _remember(self._host_verdicts, raw, self._check_host(raw.decode("latin-1").lower()))
            if verdict is not None:
                return verdict
        if origin is not None:
            verdict = self._origin_verdicts.get(origin, _UNKNOWN)
            if verdict is _UNKNOWN:
                verdict = _remember(
                    self._origin_verdicts, origin, self._check_origin(origin.decode("latin-1").strip().lower())
                )
            if verdict is not None and host is not None and _same_origin(origin, host):
                return None
            return verdict
        return None

    def _check_host(self, host: str) -> tuple[int, str] | None:
        assert self._hosts is not None
        return None if self._match(host, self._hosts) else (421, f"Invalid Host header: {host!r}")

    def _check_origin(self, origin: str) -> tuple[int, str] | None:
        if origin == NULL_ORIGIN:
            return None if self._null_allowed else (403, "Origin 'null' is not allowed")
        try:
            parts = urlsplit(origin)
        except ValueError:
            return 403, f"Invalid Origin header: {origin!r}"
        # An Origin is scheme://host[:port]; userinfo never appears in one, so "@" is a trick.
        if not parts.scheme or not parts.netloc or "@" in parts.netloc:
            return 403, f"Invalid Origin header: {origin!r}"
        if not self._match(f"{parts.scheme}://{parts.netloc}", self._real_origins):
            return 403, f"Invalid Origin header: {origin!r}"
        return None


def _same_origin(origin: bytes, host: bytes) -> bool:
    """Whether ``origin`` is ``http(s)://`` + the request's own ``host`` (compared case-insensitively)."""
    value, host = origin.strip().lower(), host.strip().lower()
    return bool(host) and value in (b"http://" + host, b"https://" + host)


async def refuse(scope: Scope, send: Send, status: int, reason: str) -> None:
    """Answer a refused HTTP request or WebSocket handshake with ``status`` and a JSON-RPC error."""
    body = jsonrpc.dumps(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, reason))
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in scope.get("extensions", {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
