"""MGP streaming on the wire (MGP_COMMUNICATION.md §12; seed 0.3 §12): the request flag, the chunk
and progress notifications, the completion marker and the cancel answer.

- §12.3: a ``tools/call`` asks for a stream with ``params._mgp.stream == true`` (nothing else counts).
- §12.4: ``notifications/mgp.stream.chunk`` ``{request_id, index, content, done}``.
- §12.5: the final result carries ``_mgp: {streamed, chunks_sent, duration_ms}``.
- §12.6: ``notifications/mgp.stream.progress`` ``{request_id, progress, message?,
  estimated_remaining_ms?}``; ``progress`` is a fraction when the total is known. An MCP
  ``notifications/progress`` (``progress``, ``total?``, ``message?``) maps onto it.
- §12.7: ``mgp/stream/cancel`` ``{request_id, reason?}`` -> ``{cancelled, partial_result}``, the
  partial result a ``CallToolResult``-like ``{content: [...]}`` with consecutive text joined.
- §12.9: a chunk for indices no longer held says ``gap_unrecoverable: true``.

Pure functions of their input; nothing here holds state.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from adapters.mgp import names

MGP_KEY = "_mgp"
CHUNK = names.STREAM_CHUNK
PROGRESS = names.STREAM_PROGRESS
PACE = names.STREAM_PACE
GAP = names.STREAM_GAP
CANCEL = names.STREAM_CANCEL
NOTIFICATIONS = frozenset({CHUNK, PROGRESS})  # server -> client, tied to one call
CLIENT_NOTIFICATIONS = frozenset({PACE, GAP})  # client -> server, tied to one call (§12.8, §12.9)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def wants_stream(params: Mapping[str, Any] | None) -> bool:
    """§12.3: the call asks for streaming."""
    if params is None:
        return False
    mgp = params.get(MGP_KEY)
    return isinstance(mgp, dict) and mgp.get("stream") is True


def without_stream_flag(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without ``_mgp.stream`` (the other ``_mgp`` fields kept; ``_mgp`` gone if empty)."""
    mgp = params.get(MGP_KEY)
    if not isinstance(mgp, dict) or "stream" not in mgp:
        return params
    rest = {key: value for key, value in mgp.items() if key != "stream"}
    out = {key: value for key, value in params.items() if key != MGP_KEY}
    if rest:
        out[MGP_KEY] = rest
    return out


def without_mgp(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` without ``_mgp`` nor flat ``_mgp.*`` keys (toward a server that speaks no MGP)."""
    return {key: value for key, value in params.items() if key != MGP_KEY and not key.startswith(MGP_KEY + ".")}


def index_of(params: Mapping[str, Any]) -> int | None:
    index = params.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else None


def chunk(request_id: Any, index: int, content: Any, *, done: bool = False) -> dict[str, Any]:
    return {"request_id": request_id, "index": index, "content": content, "done": done}


def text_content(data: Any) -> dict[str, Any]:
    """A log line's ``data`` as one text content item (a chunk's ``content``)."""
    if isinstance(data, str):
        return {"type": "text", "text": data}
    return {"type": "text", "text": json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)}


def progress_from_mcp(request_id: Any, params: Mapping[str, Any], elapsed_ms: float) -> dict[str, Any]:
    """An MCP ``notifications/progress``'s params as §12.6 ``mgp.stream.progress`` params.

    With a positive total the progress is the fraction done, and the remaining time is estimated
    from the time taken so far (linear, as a hint)."""
    out: dict[str, Any] = {"request_id": request_id}
    progress, total = params.get("progress"), params.get("total")
    if _number(progress) and _number(total) and total > 0:
        fraction = max(0.0, min(1.0, float(progress) / float(total)))
        out["progress"] = round(fraction, 6)
        if 0 < fraction < 1:
            out["estimated_remaining_ms"] = round(elapsed_ms * (1 - fraction) / fraction)
    elif _number(progress):
        out["progress"] = progress
    message = params.get("message")
    if isinstance(message, str):
        out["message"] = message
    return out


def completion(chunks_sent: int, duration_ms: float, theirs: object = None) -> dict[str, Any]:
    """§12.5 ``_mgp`` of a streamed call's result; the server's own fields win over the gateway's."""
    ours: dict[str, Any] = {"streamed": chunks_sent > 0, "chunks_sent": chunks_sent, "duration_ms": round(duration_ms)}
    return {**ours, **theirs} if isinstance(theirs, dict) else ours


def partial_result(contents: Iterable[Any]) -> dict[str, Any]:
    """§12.7 ``partial_result``: the chunks' contents in order, consecutive text joined into one item."""
    out: list[Any] = []
    for content in contents:
        if isinstance(content, dict) and content.get("type") == "text" and isinstance(content.get("text"), str):
            last = out[-1] if out else None
            if isinstance(last, dict) and last.get("type") == "text" and set(last) == {"type", "text"}:
                out[-1] = {"type": "text", "text": last["text"] + content["text"]}
                continue
            out.append({"type": "text", "text": content["text"]})
        elif content is not None:
            out.append(content)
    return {"content": out}


def cancel_result(partial: Mapping[str, Any]) -> dict[str, Any]:
    return {"cancelled": True, "partial_result": dict(partial)}


def unrecoverable(request_id: Any, missing: list[int]) -> dict[str, Any]:
    """§12.9: the chunks at ``missing`` are no longer held; the stream goes on from where it is."""
    return {"request_id": request_id, "index": missing[0], "gap_unrecoverable": True, "missing_indices": missing}
