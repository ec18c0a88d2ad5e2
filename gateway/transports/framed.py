"""What message-framed doors share (WebSocket, stdio): one frame in, one session stream out.

A frame holds one JSON-RPC message or a batch; each is handled as its own task, so a request that
waits (a tool call, an answer from the client) never holds up the frames behind it, including the
client's answer to a request the gateway sent it. Everything for the client, answers included,
goes through the session's own stream, which one writer pumps out in order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from gateway import jsonrpc
from gateway.channels import guarded_write
from gateway.sessions import ClientSession

if TYPE_CHECKING:
    from gateway.routing import Router

log = logging.getLogger(__name__)


async def handle_frame(router: Router, session: ClientSession, data: str | bytes) -> None:
    """Decode one frame and handle every message in it; errors are answered, never raised."""
    try:
        message = jsonrpc.loads(data)
    except jsonrpc.RpcError as exc:
        session.standalone.push(jsonrpc.error_from(None, exc))
        return
    messages = message if isinstance(message, list) else [message]
    if not messages:
        session.standalone.push(jsonrpc.error(None, jsonrpc.INVALID_REQUEST, "Invalid Request: empty batch"))
        return
    for item in messages:
        try:
            shape = jsonrpc.classify(item)
        except jsonrpc.RpcError as exc:
            rpc_id = item.get("id") if isinstance(item, dict) else None
            session.standalone.push(jsonrpc.error_from(rpc_id if jsonrpc.valid_id(rpc_id) else None, exc))
            continue
        try:
            response = await router.handle(session, item, shape, session.standalone)
        except Exception:
            log.exception("request %s failed inside the gateway", item.get("method"))
            response = jsonrpc.error(item.get("id"), jsonrpc.INTERNAL_ERROR, "Internal error in the gateway")
        if response is not None:
            session.standalone.push(response)


async def pump_out(session: ClientSession, send: Callable[[str], Awaitable[None]]) -> None:
    """Write the session's stream out, in order, until it closes (returns) or overflows (raises
    ChannelOverflow, or CancelledError from the interrupted send: see ``absorb_overflow``)."""
    channel = session.standalone
    channel.bind_writer()  # an overflow cancels the send that is stuck on a full socket or pipe
    after = 0
    try:
        while True:
            batch = await channel.read(after)
            if not batch:
                return  # the session ended on the gateway's side (e.g. the draft's exit)
            for seq, message in batch:
                after = seq
                rendered = session.render(message)
                if rendered is not None:
                    await guarded_write(channel, send(jsonrpc.dumps(rendered).decode()))
    finally:
        channel.writing = False
        channel.on_overflow = None
