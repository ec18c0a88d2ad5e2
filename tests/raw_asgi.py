"""Two pieces every raw-ASGI test server needs: the whole request body, and a complete response."""

from __future__ import annotations

from typing import Any


async def read_body(receive: Any) -> bytes:
    """The request's body, every chunk of it."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def respond(
    send: Any, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None, ctype: bytes | None = None
) -> None:
    """One response with its length (``ctype``: the content type, default JSON; ``extra``: more headers)."""
    headers = [(b"content-type", ctype or b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *(extra or [])]})
    await send({"type": "http.response.body", "body": body})
