"""JSON-RPC batches on the Streamable HTTP door (allowed by protocol 2025-03-26 only; later versions
dropped them, and the door accepts them from any legacy session as the SDKs of that version send them).

Invariants: a batch is answered as one JSON array of its requests' answers (202 with no body when it
held only notifications and responses); its members run concurrently, so a batch is never longer than
a session may have calls in flight; ``initialize`` is never batched (it opens the session the other
members would need), and a member that is no JSON-RPC message is answered alone with its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gateway import jsonrpc
from gateway.transports.http_common import Send, send_bytes, send_rpc_error

if TYPE_CHECKING:
    from gateway.routing.router import Router
    from gateway.sessions import ClientSession
    from policies.principal import Principal


async def serve_batch(
    send: Send,
    batch: list[Any],
    max_items: int,
    find_session: Callable[[], Awaitable[tuple[ClientSession, Principal] | None]],
    router: Router,
) -> None:
    """Answer a batch POSTed on a session (``find_session`` answers the client itself when there is none)."""
    if not batch:
        await send_rpc_error(send, 400, jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch")
        return
    if len(batch) > max_items:
        # Its items run concurrently: a batch may not be more than a session may have in flight.
        await send_rpc_error(send, 400, jsonrpc.INVALID_REQUEST, f"Invalid Request: batch over {max_items} items")
        return
    found = await find_session()
    if found is None:
        return
    session, principal = found
    answers = await answer_batch(router, session, principal, batch)
    if session.closed:
        # An exit in the batch: its answer goes in this body, not on the session stream that owes it.
        session.standalone.close()
    if answers:
        await send_bytes(send, 200, jsonrpc.dumps(answers))
    else:
        await send_bytes(send, 202, b"")


async def answer_batch(
    router: Router, session: ClientSession, principal: Principal, batch: list[Any]
) -> list[dict[str, Any]]:
    """A batch's members handled concurrently; the answers of its requests (a broken member is
    answered alone, ``initialize`` is never batched)."""

    async def one(item: Any) -> dict[str, Any] | None:
        try:
            shape = jsonrpc.classify(item)
        except jsonrpc.RpcError as exc:
            return jsonrpc.error_from(None, exc)
        if shape is jsonrpc.Shape.REQUEST and item["method"] == "initialize":
            return jsonrpc.error(item["id"], jsonrpc.INVALID_REQUEST, "initialize cannot be batched")
        return await router.handle(session, item, shape, session.standalone, principal)

    return [a for a in await asyncio.gather(*(one(i) for i in batch)) if a is not None]
