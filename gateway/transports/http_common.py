"""Small pieces every HTTP front door shares: raw ASGI responses, body limits, Host/Origin checks."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from gateway import jsonrpc
from gateway.config import Config, is_loopback

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


def header(scope: Scope, name: bytes) -> str | None:
    """A request header by its lowercase name; the lookup table is built once per request."""
    table = scope.get("switchboard.headers")
    if table is None:
        table = dict(scope["headers"])
        scope["switchboard.headers"] = table
    value = table.get(name)
    return value.decode("latin-1") if value is not None else None


async def read_body(receive: Receive, limit: int, declared: str | None) -> bytes:
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


async def send_bytes(
    send: Send,
    status: int,
    body: bytes,
    content_type: str = "application/json",
    extra: Iterable[tuple[str, str]] = (),
) -> None:
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    headers.extend((k.encode(), v.encode()) for k, v in extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_rpc_error(
    send: Send,
    status: int,
    code: int,
    message: str,
    rpc_id: Any = None,
    extra: Iterable[tuple[str, str]] = (),
    data: Any = None,
) -> None:
    await send_bytes(send, status, jsonrpc.dumps(jsonrpc.error(rpc_id, code, message, data)), extra=extra)


class OriginGuard:
    """DNS-rebinding protection: the Host must be one we serve, an Origin (if sent) one we trust."""

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

    @staticmethod
    def _match(value: str, allowed: tuple[str, ...]) -> bool:
        for entry in allowed:
            if entry == "*" or entry == value:
                return True
            if entry.endswith(":*"):
                base = entry[:-2]
                if value.startswith(base + ":") and value[len(base) + 1 :].isdigit():
                    return True
        return False

    def check(self, scope: Scope) -> tuple[int, str] | None:
        """None if fine, else (HTTP status, reason)."""
        if self._hosts is not None:
            host = (header(scope, b"host") or "").lower()
            if not self._match(host, self._hosts):
                return 421, f"Invalid Host header: {host!r}"
        origin = header(scope, b"origin")
        if origin is not None and origin != "null":
            parts = urlsplit(origin.lower())
            normalized = f"{parts.scheme}://{parts.netloc}"
            if not self._match(normalized, self._origins):
                return 403, f"Invalid Origin header: {origin!r}"
        return None


def accepts(scope: Scope, *types: str) -> bool:
    value = (header(scope, b"accept") or "").lower()
    if not value or "*/*" in value:
        return True
    for media_type in types:
        if media_type not in value:
            return False
    return True


def drop_hook(scope: Scope) -> Callable[[], None]:
    """How to cut this client off when it stops reading: abort its connection if the server lets
    us (see transports/coalesce.py), else cancel the writing task."""
    abort = scope.get("switchboard.abort")
    if abort is not None:
        return abort  # type: ignore[no-any-return]
    task = asyncio.current_task()
    return task.cancel if task is not None else (lambda: None)


def base_url(scope: Scope) -> str:
    """This gateway's base URL as the client addressed it (for metadata and WWW-Authenticate)."""
    host = header(scope, b"host") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}{scope.get('root_path', '')}"


async def send_unauthorized(send: Send, scope: Scope, reason: str, error: str | None, rpc_id: Any = None) -> None:
    """401 with the RFC 6750 challenge and, per RFC 9728, where the resource metadata is."""
    challenge = (
        f'Bearer realm="switchboard", resource_metadata="{base_url(scope)}/.well-known/oauth-protected-resource"'
    )
    if error:
        challenge += f', error="{error}", error_description="{reason}"'
    await send_rpc_error(
        send, 401, jsonrpc.INVALID_REQUEST, f"Unauthorized: {reason}", rpc_id, extra=[("www-authenticate", challenge)]
    )


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client has gone (the ASGI ``http.disconnect`` message)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
