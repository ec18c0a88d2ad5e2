"""Small pieces every HTTP front door shares: raw ASGI responses, body limits, Host/Origin checks."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from gateway import errors, jsonrpc
from gateway.protected_resource import metadata_url, server_of
from gateway.transports.coalesce import LOST_KEY
from gateway.transports.lean import BODY_KEY, HEADERS_KEY, LeanCycle

# What an ASGI server passes (a dict from uvicorn; starlette types it as this mapping).
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class BodyTooLarge(Exception):
    pass


class ClientGone(Exception):
    pass


def headers_of(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lowercase name (the last of a repeated one), made once per request;
    the gateway's protocol makes it while it decides on the lean cycle (transports/lean.py)."""
    table: dict[bytes, bytes] | None = scope.get(HEADERS_KEY)
    if table is None:
        table = dict(scope["headers"])
        scope[HEADERS_KEY] = table
    return table


def text(raw: bytes | None) -> str | None:
    """A raw header value as text (latin-1, as HTTP/1.1 carries it)."""
    return raw.decode("latin-1") if raw is not None else None


def header(scope: Scope, name: bytes) -> str | None:
    """A request header by its lowercase name; the lookup table is built once per request."""
    table = scope.get(HEADERS_KEY)
    if table is None:
        table = dict(scope["headers"])
        scope[HEADERS_KEY] = table
    value = table.get(name)
    return value.decode("latin-1") if value is not None else None


def query_token(scope: Scope) -> str | None:
    """The ``token`` query parameter (MCPx agents authenticate their WebSocket with ``?token=``)."""
    raw: bytes = scope.get("query_string", b"")
    if b"token=" not in raw:
        return None
    from urllib.parse import parse_qs

    values = parse_qs(raw.decode("latin-1")).get("token")
    return values[-1] if values else None  # the last, as Starlette's query_params (the door) reads it


def body_at_hand(scope: Scope) -> bytes | None:
    """The whole request body if the server read it before the app started (transports/lean.py:
    within the body limit by then), else None: read it with :func:`read_body`."""
    body: bytes | None = scope.pop(BODY_KEY, None)
    return body


async def read_body(receive: Receive, limit: int, declared: str | None) -> bytes:
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
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
    if type(send) is LeanCycle:  # the gateway's own cycle: the same response, in one write, without messages
        await send.respond(status, content_type.encode(), body, extra)
        return
    headers = [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
    headers.extend((k.encode(), v.encode()) for k, v in extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def answered_now(send: Send, status: int, body: bytes, extra: Iterable[tuple[str, str]] = ()) -> bool:
    """``send_bytes`` of a JSON answer without a coroutine, if the server's cycle can take it now
    (the gateway's lean cycle, socket writable); False: nothing done, await ``send_bytes``."""
    return type(send) is LeanCycle and send.respond_now(status, b"application/json", body, extra)


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


def accepts(scope: Scope, *types: str) -> bool:
    value = (header(scope, b"accept") or "").lower()
    if not value or "*/*" in value:
        return True
    for media_type in types:
        if media_type not in value:
            return False
    return True


def drop_hook(scope: Scope) -> Callable[[], object]:
    """How to cut this client off when it stops reading: abort its connection if the server lets
    us (see transports/http_protocol.py), else cancel the writing task."""
    abort: Callable[[], None] | None = scope.get("switchboard.abort")
    if abort is not None:
        return abort
    task = asyncio.current_task()
    return task.cancel if task is not None else (lambda: None)


_HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


def base_url(scope: Scope) -> str:
    """This gateway's base URL as the client addressed it (for metadata and WWW-Authenticate).

    The Host is reflected, so it must look like one: behind a public listener no allow-list has
    vetted it, and a quote in it would break the challenge header it lands in."""
    host = header(scope, b"host") or ""
    if not _HOST.fullmatch(host):
        host = "localhost"
    return f"{scope.get('scheme', 'http')}://{host}{scope.get('root_path', '')}"


def bearer_challenge(scope: Scope, reason: str, error: str | None) -> str:
    """The RFC 6750 challenge of a 401 and, per RFC 9728 §5.1, where the metadata of the resource this
    path belongs to is: a backend's own for /servers/NAME/..., else the gateway's
    (gateway/protected_resource.py)."""
    server = server_of(scope.get("path", ""), scope.get("root_path", ""))
    challenge = f'Bearer realm="switchboard", resource_metadata="{metadata_url(base_url(scope), server)}"'
    if error:
        # The reason never echoes the token, but may quote a claim: keep the quoted-string well formed
        # (RFC 7230 qdtext), or the server would fail to send the header at all.
        description = "".join(c for c in reason if " " <= c <= "~" and c not in '"\\')
        challenge += f', error="{error}", error_description="{description}"'
    return challenge


async def send_unauthorized(send: Send, scope: Scope, reason: str, error: str | None, rpc_id: Any = None) -> None:
    """401 with the RFC 6750 challenge (:func:`bearer_challenge`)."""
    challenge = bearer_challenge(scope, reason, error)
    await send_rpc_error(
        send, 401, jsonrpc.INVALID_REQUEST, f"Unauthorized: {reason}", rpc_id, extra=[("www-authenticate", challenge)]
    )


def watch_disconnect(scope: Scope, receive: Receive) -> asyncio.Future[None]:
    """A future done when the client has gone. Cancel it when the request is over.

    Under the gateway's own protocol (transports/http_protocol.py) it is a plain future the connection
    resolves when lost; elsewhere (other ASGI servers, in-process tests) a task reading ``receive``.
    """
    watch = scope.get(LOST_KEY)
    if watch is not None:
        future: asyncio.Future[None] = watch()
        return future
    return asyncio.ensure_future(wait_disconnect(receive))


async def wait_disconnect(receive: Receive) -> None:
    """Return when the client has gone (the ASGI ``http.disconnect`` message)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def http_status_of(response: dict[str, Any], *, modern: bool = False) -> int:
    """The HTTP status of an answer, by the one error table (gateway/errors.py)."""
    error = response.get("error")
    return errors.http_status(error.get("code"), modern=modern) if isinstance(error, dict) else 200


def retry_after(response: dict[str, Any] | None) -> str | None:
    error = (response or {}).get("error")
    data = error.get("data") if isinstance(error, dict) else None
    ms = data.get("retryAfterMs") if isinstance(data, dict) else None
    return str(max(1, -(-int(ms) // 1000))) if isinstance(ms, (int, float)) else None
