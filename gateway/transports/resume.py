"""Where a GET on ``/mcp`` resumes a session's SSE stream (Streamable HTTP, "Resumability and
Redelivery"): the client names the last event it saw in ``Last-Event-ID``.

The gateway's event ids are ``<stream id>-<sequence>`` (gateway/channels.py). A stream resumes after
that sequence if it still holds what came after it (``Channel.can_resume``); with many replicas the
session's own stream resumes from the shared history, whoever held it (gateway/replicas/history.py).
Anything else, an id the gateway never minted included, cannot be resumed (the door answers 404).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.channels import Channel
    from gateway.replicas import SessionSharing
    from gateway.sessions import ClientSession


async def resume_point(
    session: ClientSession, last_event_id: str | None, shared: SessionSharing
) -> tuple[Channel, int, list[dict[str, Any]]] | None:
    """The stream a GET reads, the last sequence its client has seen, and what it missed that only
    the shared history holds; None when ``last_event_id`` cannot be resumed."""
    if not last_event_id:
        return session.standalone, session.standalone.last_seq, []
    stream_id, _, seq_text = last_event_id.rpartition("-")
    channel = session.find_stream(stream_id)
    # isascii(): "²".isdigit() is true, but int() refuses it.
    if channel is None or not (seq_text.isascii() and seq_text.isdigit()):
        return None
    seen = int(seq_text)
    if channel is session.standalone and shared.keeps_history and not channel.attached:
        # Many replicas: the history of the session's stream, whoever held it.
        missed = await shared.missed(session, seen)
        return None if missed is None else (channel, channel.last_seq, missed)
    if not channel.can_resume(seen):
        return None
    return channel, seen, []
